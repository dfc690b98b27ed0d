//! CEL expressions made at random, of a wanted type, from what a policy can read: object
//! fields, the request, params, variables, and literals chosen for their edges (the largest
//! ints, escapes, unicode, empty values). Most expressions type-check and evaluate; some fail
//! at run time on purpose (overflow, a missing key, a bad conversion), since errors and their
//! messages are where engines part.

use fastrand::Rng;

/// The CEL types the generator makes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Ty {
    /// `bool`.
    Bool,
    /// `int`.
    Int,
    /// `double`.
    Double,
    /// `string`.
    Str,
    /// `list(string)`.
    StrList,
    /// `map(string, string)`.
    StrMap,
}

/// What an expression may read: typed expressions (fields, variables, the request).
#[derive(Clone, Debug, Default)]
pub struct Scope {
    reads: Vec<(Ty, String)>,
}

impl Scope {
    /// Adds an expression of type `ty` the generator may use as a leaf.
    pub fn add(&mut self, ty: Ty, expression: impl Into<String>) {
        self.reads.push((ty, expression.into()));
    }

    fn of(&self, ty: Ty) -> Vec<&str> {
        self.reads
            .iter()
            .filter(|(t, _)| *t == ty)
            .map(|(_, e)| e.as_str())
            .collect()
    }
}

const INTS: &[&str] = &[
    "0",
    "1",
    "-1",
    "7",
    "2147483647",
    "9007199254740992",
    "9007199254740993",
    "9223372036854775807",
    "(-9223372036854775807 - 1)",
];

const DOUBLES: &[&str] = &["0.0", "-0.0", "1.5", "1e300", "2.5e-3", "-7.25", "1e16"];

const STRINGS: &[&str] = &[
    r#""""#,
    r#""a""#,
    r#""x y""#,
    r#""é""#,
    r#""line\nbreak""#,
    r#""quote\"inside""#,
    r#""tab\tand\\slash""#,
    r#""日本""#,
    r#""a,b,c""#,
    r#""ABC""#,
    r#""9""#,
    r#""-3""#,
    r#""1e3""#,
    r#""true""#,
    r#""\u00e9\U0001F600""#,
    r#"'single'"#,
    r#""  padded  ""#,
];

const REGEXES: &[&str] = &[
    r#""^a""#,
    r#""[0-9]+""#,
    r#""^$""#,
    r#""(?i)abc""#,
    r#""é|日""#,
    r#""\\s""#,
];

/// An expression of type `ty` at most `depth` operators deep.
pub fn expression(rng: &mut Rng, scope: &Scope, ty: Ty, depth: u32) -> String {
    if depth == 0 || rng.u8(..10) < 3 {
        return leaf(rng, scope, ty);
    }
    let d = depth - 1;
    macro_rules! e {
        ($ty:expr) => {
            expression(rng, scope, $ty, d)
        };
    }
    match ty {
        Ty::Bool => match rng.u8(..16) {
            0 => {
                let t = comparable(rng);
                format!(
                    "{} == {}",
                    expression(rng, scope, t, d),
                    expression(rng, scope, t, d)
                )
            }
            1 => {
                let t = comparable(rng);
                format!(
                    "{} != {}",
                    expression(rng, scope, t, d),
                    expression(rng, scope, t, d)
                )
            }
            2 => {
                let t = [Ty::Int, Ty::Double, Ty::Str][rng.usize(..3)];
                let op = ["<", "<=", ">", ">="][rng.usize(..4)];
                format!(
                    "{} {op} {}",
                    expression(rng, scope, t, d),
                    expression(rng, scope, t, d)
                )
            }
            3 => format!("!({})", e!(Ty::Bool)),
            4 => format!("({} && {})", e!(Ty::Bool), e!(Ty::Bool)),
            5 => format!("({} || {})", e!(Ty::Bool), e!(Ty::Bool)),
            6 => {
                let f = ["startsWith", "endsWith", "contains"][rng.usize(..3)];
                format!("{}.{f}({})", e!(Ty::Str), e!(Ty::Str))
            }
            7 => format!(
                "{}.matches({})",
                e!(Ty::Str),
                REGEXES[rng.usize(..REGEXES.len())]
            ),
            8 => format!("{} in {}", e!(Ty::Str), e!(Ty::StrList)),
            9 => format!("{} in {}", e!(Ty::Str), e!(Ty::StrMap)),
            10 => {
                let inner = with_item(scope);
                let m = ["exists", "all", "exists_one"][rng.usize(..3)];
                format!(
                    "{}.{m}(x, {})",
                    e!(Ty::StrList),
                    expression(rng, &inner, Ty::Bool, d)
                )
            }
            11 => {
                let inner = with_item(scope);
                format!(
                    "{}.exists(x, {})",
                    e!(Ty::StrMap),
                    expression(rng, &inner, Ty::Bool, d)
                )
            }
            12 => format!("({} ? {} : {})", e!(Ty::Bool), e!(Ty::Bool), e!(Ty::Bool)),
            13 => {
                let t = [
                    "int",
                    "string",
                    "double",
                    "bool",
                    "list",
                    "map",
                    "null_type",
                ][rng.usize(..7)];
                let of = [Ty::Int, Ty::Str, Ty::Double, Ty::StrList][rng.usize(..4)];
                format!("type({}) == {t}", e!(of))
            }
            14 => format!("size({}) > {}", e!(Ty::StrList), e!(Ty::Int)),
            _ => format!("{} == \"\"", e!(Ty::Str)),
        },
        Ty::Int => match rng.u8(..12) {
            0 => format!("({} + {})", e!(Ty::Int), e!(Ty::Int)),
            1 => format!("({} - {})", e!(Ty::Int), e!(Ty::Int)),
            2 => format!("({} * {})", e!(Ty::Int), e!(Ty::Int)),
            3 => format!("({} / {})", e!(Ty::Int), e!(Ty::Int)),
            4 => format!("({} % {})", e!(Ty::Int), e!(Ty::Int)),
            5 => format!("int({})", e!(Ty::Str)),
            6 => format!("int({})", e!(Ty::Double)),
            7 => format!("size({})", e!(Ty::Str)),
            8 => format!("size({})", e!(Ty::StrMap)),
            9 => format!("-({})", e!(Ty::Int)),
            10 => format!("{}.indexOf({})", e!(Ty::Str), e!(Ty::Str)),
            _ => format!("({} ? {} : {})", e!(Ty::Bool), e!(Ty::Int), e!(Ty::Int)),
        },
        Ty::Double => match rng.u8(..6) {
            0 => format!("({} + {})", e!(Ty::Double), e!(Ty::Double)),
            1 => format!("({} / {})", e!(Ty::Double), e!(Ty::Double)),
            2 => format!("({} * {})", e!(Ty::Double), e!(Ty::Double)),
            3 => format!("double({})", e!(Ty::Int)),
            4 => format!("double({})", e!(Ty::Str)),
            _ => format!("-({})", e!(Ty::Double)),
        },
        Ty::Str => match rng.u8(..16) {
            0 => format!("({} + {})", e!(Ty::Str), e!(Ty::Str)),
            1 => format!("{}.lowerAscii()", e!(Ty::Str)),
            2 => format!("{}.upperAscii()", e!(Ty::Str)),
            3 => format!("{}.trim()", e!(Ty::Str)),
            4 => format!("{}.replace({}, {})", e!(Ty::Str), e!(Ty::Str), e!(Ty::Str)),
            5 => format!("{}.substring({})", e!(Ty::Str), e!(Ty::Int)),
            6 => format!(
                "{}.substring({}, {})",
                e!(Ty::Str),
                e!(Ty::Int),
                e!(Ty::Int)
            ),
            7 => format!("string({})", e!(Ty::Int)),
            8 => format!("string({})", e!(Ty::Double)),
            9 => format!("string({})", e!(Ty::Bool)),
            10 => format!("{}.join({})", e!(Ty::StrList), e!(Ty::Str)),
            11 => format!("{}.charAt({})", e!(Ty::Str), e!(Ty::Int)),
            12 => format!("{}[{}]", e!(Ty::StrMap), e!(Ty::Str)),
            13 => format!(
                "{}[?{}].orValue({})",
                e!(Ty::StrMap),
                e!(Ty::Str),
                e!(Ty::Str)
            ),
            14 => format!("({} ? {} : {})", e!(Ty::Bool), e!(Ty::Str), e!(Ty::Str)),
            _ => format!("{}[{}]", e!(Ty::StrList), e!(Ty::Int)),
        },
        Ty::StrList => match rng.u8(..7) {
            0 => format!("({} + {})", e!(Ty::StrList), e!(Ty::StrList)),
            1 => {
                let inner = with_item(scope);
                format!(
                    "{}.filter(x, {})",
                    e!(Ty::StrList),
                    expression(rng, &inner, Ty::Bool, d)
                )
            }
            2 => {
                let inner = with_item(scope);
                format!(
                    "{}.map(x, {})",
                    e!(Ty::StrList),
                    expression(rng, &inner, Ty::Str, d)
                )
            }
            3 => format!("{}.map(k, k)", e!(Ty::StrMap)),
            4 => format!("{}.split({})", e!(Ty::Str), e!(Ty::Str)),
            5 => format!("[{}, {}]", e!(Ty::Str), e!(Ty::Str)),
            _ => format!("{}.split({}, {})", e!(Ty::Str), e!(Ty::Str), e!(Ty::Int)),
        },
        Ty::StrMap => match rng.u8(..3) {
            0 => format!("{{{}: {}}}", e!(Ty::Str), e!(Ty::Str)),
            1 => format!(
                "({} ? {} : {})",
                e!(Ty::Bool),
                e!(Ty::StrMap),
                e!(Ty::StrMap)
            ),
            _ => leaf(rng, scope, ty),
        },
    }
}

/// A type `==` compares.
fn comparable(rng: &mut Rng) -> Ty {
    [
        Ty::Int,
        Ty::Str,
        Ty::Double,
        Ty::Bool,
        Ty::StrList,
        Ty::StrMap,
    ][rng.usize(..6)]
}

/// `scope` with the macro variable `x` (a string).
fn with_item(scope: &Scope) -> Scope {
    let mut inner = scope.clone();
    inner.add(Ty::Str, "x");
    inner
}

fn pick<'a>(rng: &mut Rng, from: &[&'a str]) -> &'a str {
    from[rng.usize(..from.len())]
}

/// A read of the scope (two times in three when it has one) or a literal.
fn leaf(rng: &mut Rng, scope: &Scope, ty: Ty) -> String {
    let reads = scope.of(ty);
    if !reads.is_empty() && rng.u8(..3) < 2 {
        return pick(rng, &reads).to_string();
    }
    match ty {
        Ty::Bool => pick(rng, &["true", "false"]).to_string(),
        Ty::Int => pick(rng, INTS).to_string(),
        Ty::Double => pick(rng, DOUBLES).to_string(),
        Ty::Str => pick(rng, STRINGS).to_string(),
        Ty::StrList => match rng.u8(..3) {
            0 => "[]".to_string(),
            1 => format!("[{}]", pick(rng, STRINGS)),
            _ => format!("[{}, {}]", pick(rng, STRINGS), pick(rng, STRINGS)),
        },
        Ty::StrMap => match rng.u8(..3) {
            0 => "{}".to_string(),
            _ => format!("{{{}: {}}}", pick(rng, STRINGS), pick(rng, STRINGS)),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_same_seed_gives_the_same_expression_and_reads_come_from_the_scope() {
        let mut scope = Scope::default();
        scope.add(Ty::Str, "object.metadata.name");
        let make = |seed| {
            let mut rng = Rng::with_seed(seed);
            (0..50)
                .map(|_| expression(&mut rng, &scope, Ty::Bool, 3))
                .collect::<Vec<_>>()
        };
        assert_eq!(make(7), make(7));
        assert_ne!(make(7), make(8));
        assert!(make(7).iter().any(|e| e.contains("object.metadata.name")));
    }
}
