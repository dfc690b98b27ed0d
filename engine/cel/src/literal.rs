//! The literals a program's result is built of, around the expressions inside them: message
//! literals, map literals with constant string keys, list literals. Apply configurations
//! (`Object{metadata: Object.metadata{labels: {'app': x}}}`) and JSON patches
//! (`[JSONPatch{op: 'add', path: '/a', value: x}]`) are written so. Read once from the planned
//! tree ([`Program::literal`](crate::Program::literal)), the shape lets an evaluation compute
//! only the expressions inside, the leaves
//! ([`Program::eval_leaves`](crate::Program::eval_leaves)), charged and failing as evaluating
//! the whole program, without building the literals as values.

use std::sync::Arc;

use crate::program::{Node, StructNode};
use crate::value::{Key, List, Map, OwnedMap, StructValue, Value};

/// The shape of a program's result (see the module documentation).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Literal {
    /// A message literal without optional fields or a field given twice: its type's name and
    /// its fields, in the order written. The fields of a type that checks them
    /// ([`StructType::checks_fields`](crate::StructType::checks_fields)) are leaves.
    Message(Arc<str>, Box<[(Arc<str>, Literal)]>),
    /// A map literal whose keys are constant strings, none given twice, without optional
    /// entries: its entries, in the order written.
    Map(Box<[(Arc<str>, Literal)]>),
    /// A list literal without optional items.
    List(Box<[Literal]>),
    /// Any other expression: its value is a leaf.
    Leaf,
}

impl Literal {
    /// The shape of the result of `node`.
    pub(crate) fn of(node: &Node) -> Literal {
        match node {
            Node::Struct(s)
                if s.fields.iter().all(|(_, _, optional)| !optional)
                    && distinct(s.fields.iter().map(|(name, _, _)| &**name)) =>
            {
                let nested = !s.ty.checks_fields();
                let fields = s.fields.iter().map(|(name, node, _)| {
                    let shape = if nested {
                        Literal::of(node)
                    } else {
                        Literal::Leaf
                    };
                    (name.clone(), shape)
                });
                Literal::Message(Arc::from(s.ty.name()), fields.collect())
            }
            Node::Map(entries) => {
                let keys: Option<Vec<Arc<str>>> = (entries.iter())
                    .map(|(key, _, optional)| match key {
                        Node::Const(Value::String(k)) if !optional => Some(Arc::from(&**k)),
                        _ => None,
                    })
                    .collect();
                match keys {
                    Some(keys) if distinct(keys.iter().map(|k| &**k)) => Literal::Map(
                        (keys.into_iter().zip(entries.iter()))
                            .map(|(key, (_, value, _))| (key, Literal::of(value)))
                            .collect(),
                    ),
                    _ => Literal::Leaf,
                }
            }
            Node::List(items, optional) if optional.iter().all(|o| !o) => {
                Literal::List(items.iter().map(Literal::of).collect())
            }
            _ => Literal::Leaf,
        }
    }

    /// The number of leaves.
    pub fn leaves(&self) -> usize {
        match self {
            Literal::Message(_, fields) | Literal::Map(fields) => {
                fields.iter().map(|(_, shape)| shape.leaves()).sum()
            }
            Literal::List(items) => items.iter().map(Literal::leaves).sum(),
            Literal::Leaf => 1,
        }
    }
}

/// How a shape fits a node: the literal's parts and their shapes, or a leaf (any other node,
/// or a shape not of this node).
pub(crate) enum Fit<'n, 's> {
    List(&'n [Node], &'s [Literal]),
    Map(&'n [(Node, Node, bool)], &'s [(Arc<str>, Literal)]),
    Message(&'n StructNode, &'s [(Arc<str>, Literal)]),
    Leaf,
}

/// How `shape` fits `node` (see [`Fit`]); a message of a type that checks its fields fits
/// only with leaves for fields.
pub(crate) fn fit<'n, 's>(node: &'n Node, shape: &'s Literal) -> Fit<'n, 's> {
    match (node, shape) {
        (Node::List(items, optional), Literal::List(shapes))
            if items.len() == shapes.len() && optional.iter().all(|o| !o) =>
        {
            Fit::List(items, shapes)
        }
        (Node::Map(entries), Literal::Map(shapes))
            if entries.len() == shapes.len()
                && (entries.iter().zip(shapes.iter())).all(|((key, _, optional), (k, _))| {
                    !optional && matches!(key, Node::Const(Value::String(s)) if **s == **k)
                }) =>
        {
            Fit::Map(entries, shapes)
        }
        (Node::Struct(s), Literal::Message(_, shapes))
            if s.fields.len() == shapes.len()
                && (s.fields.iter().zip(shapes.iter()))
                    .all(|((name, _, optional), (n, _))| !optional && name == n)
                && (!s.ty.checks_fields() || shapes.iter().all(|(_, s)| *s == Literal::Leaf)) =>
        {
            Fit::Message(s, shapes)
        }
        _ => Fit::Leaf,
    }
}

/// The value of `node` built around `leaves`, those `Evaluation::leaves` gave for `shape` in
/// order, as evaluating `node` whole builds it; `None` when they run out.
pub(crate) fn assemble<'a>(
    node: &'a Node,
    shape: &Literal,
    leaves: &mut impl Iterator<Item = Value<'a>>,
) -> Option<Value<'a>> {
    Some(match fit(node, shape) {
        Fit::List(items, shapes) => {
            let items = (items.iter().zip(shapes)).map(|(n, s)| assemble(n, s, leaves));
            Value::List(List::from_vec(items.collect::<Option<_>>()?))
        }
        Fit::Map(entries, shapes) => {
            let mut out = OwnedMap::with_capacity(entries.len());
            for ((key, value, _), (_, s)) in entries.iter().zip(shapes.iter()) {
                let Node::Const(key) = key else {
                    return None;
                };
                out.insert(
                    Key::from_value(&key.lend()).ok()?,
                    assemble(value, s, leaves)?,
                );
            }
            Value::Map(Map::Owned(Arc::new(out)))
        }
        Fit::Message(s, shapes) => {
            let fields = (s.fields.iter().zip(shapes.iter())).map(|((name, n, _), (_, shape))| {
                Some((name.clone(), assemble(n, shape, leaves)?))
            });
            let fields = fields.collect::<Option<Vec<_>>>()?;
            Value::Struct(Arc::new(StructValue::new(s.ty.clone(), fields)))
        }
        Fit::Leaf => leaves.next()?,
    })
}

/// Whether no name comes twice.
fn distinct<'n>(names: impl Iterator<Item = &'n str>) -> bool {
    let mut names: Vec<&str> = names.collect();
    names.sort_unstable();
    names.windows(2).all(|pair| pair[0] != pair[1])
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::{Activation, Budget, Env, Type};

    fn env() -> Env {
        Env::kubernetes()
            .mutation_library()
            .variable("object", Type::Dyn)
            .build()
    }

    /// The values at the leaves of `shape` in `value`, the whole program's result.
    fn leaves_of<'a>(shape: &Literal, value: &Value<'a>, out: &mut Vec<Value<'a>>) {
        match (shape, value) {
            (Literal::Message(_, fields), Value::Struct(s)) => {
                for (name, shape) in fields.iter() {
                    let field = s.field(name).cloned().unwrap_or(Value::Null);
                    leaves_of(shape, &field, out);
                }
            }
            (Literal::Map(entries), Value::Map(m)) => {
                for (key, shape) in entries.iter() {
                    leaves_of(shape, &m.get_str(key).unwrap_or(Value::Null), out);
                }
            }
            (Literal::List(items), Value::List(l)) => {
                for (i, shape) in items.iter().enumerate() {
                    leaves_of(shape, &l.get(i).unwrap_or(Value::Null), out);
                }
            }
            (Literal::Leaf, v) => out.push(v.clone()),
            (shape, v) => panic!("{shape:?} does not fit {v:?}"),
        }
    }

    #[test]
    fn the_leaves_are_charged_and_fail_as_the_whole_program_and_build_its_value() {
        let object = json!({"metadata": {"name": "a"}, "n": 3});
        let cases = [
            "Object{metadata: Object.metadata{labels: {'a': object.metadata.name, 'b': dyn('c')}}}",
            "[JSONPatch{op: 'add', path: '/a/' + jsonpatch.escapeKey('k/1'), value: object.n}]",
            "Object{spec: Object.spec{replicas: object.n * 2, selector: {'a': [object.n]}}}",
            // A failing leaf: a message stops at once, a map and a list are still charged.
            "Object{spec: Object.spec{replicas: object.n, paused: object.missing}}",
            "{'a': object.n, 'b': object.missing}",
            "[object.n, object.missing, dyn(1)]",
            // A field the type refuses, once every field is evaluated and charged.
            "[JSONPatch{op: object.n, path: '/a'}]",
            "Object{metadata: Object.metadata{labels: {'a': ['x', 'y'].map(s, s + object.metadata.name)[1]}}}",
        ];
        for src in cases {
            let program = env().compile(src).expect(src);
            let shape = program.literal();
            assert_ne!(shape, Literal::Leaf, "{src}");
            let mut act = Activation::new();
            act.bind_json("object", &object);
            // Per-call limits that stop the evaluation at each point, and none.
            for limit in (1..60).chain([1_000_000]) {
                let mut whole = Budget::new(limit, 10_000_000);
                let mut parts = Budget::new(limit, 10_000_000);
                let value = program.eval(&act, &mut whole);
                let leaves = program.eval_leaves(&shape, &act, &mut parts);
                assert_eq!(
                    whole.remaining(),
                    parts.remaining(),
                    "{src} (limit {limit})"
                );
                match (value, leaves) {
                    (Ok(value), Ok(leaves)) => {
                        let mut want = Vec::new();
                        leaves_of(&shape, &value, &mut want);
                        assert_eq!(leaves, want, "{src}");
                        assert_eq!(leaves.len(), shape.leaves(), "{src}");
                        // Built around its leaves, the whole value.
                        assert_eq!(program.assemble(&shape, leaves), Some(value), "{src}");
                    }
                    (Err(a), Err(b)) => assert_eq!(a.to_string(), b.to_string(), "{src}"),
                    (a, b) => panic!("{src} (limit {limit}): {a:?} against {b:?}"),
                }
            }
        }
    }

    #[test]
    fn only_literals_with_distinct_constant_names_are_shaped() {
        let shape = |src: &str| env().compile(src).expect(src).literal();
        assert_eq!(
            shape("Object{metadata: Object.metadata{labels: {'a': object.x}}}"),
            Literal::Message(
                "Object".into(),
                Box::from([(
                    "metadata".into(),
                    Literal::Message(
                        "Object.metadata".into(),
                        Box::from([(
                            "labels".into(),
                            Literal::Map(Box::from([("a".into(), Literal::Leaf)]))
                        )])
                    )
                )])
            )
        );
        // A type that checks its fields has leaves for fields.
        assert_eq!(
            shape("[JSONPatch{op: 'add', path: '/a', value: {'b': object.x}}]"),
            Literal::List(Box::from([Literal::Message(
                "JSONPatch".into(),
                Box::from([
                    ("op".into(), Literal::Leaf),
                    ("path".into(), Literal::Leaf),
                    ("value".into(), Literal::Leaf)
                ])
            )]))
        );
        // A literal with an optional field is a leaf of the one around it.
        assert_eq!(
            shape("Object{metadata: Object.metadata{?name: optional.of(object.x)}}"),
            Literal::Message(
                "Object".into(),
                Box::from([("metadata".into(), Literal::Leaf)])
            )
        );
        for src in [
            "{'a': dyn(1), 'a': object.x}",
            "{object.k: 1}",
            "{1: object.x}",
            "{?'a': optional.of(object.x)}",
            "[?optional.of(object.x)]",
            "object.x",
            // Constant literals are computed when planning.
            "{'a': 1}",
        ] {
            assert_eq!(shape(src), Literal::Leaf, "{src}");
        }
    }
}
