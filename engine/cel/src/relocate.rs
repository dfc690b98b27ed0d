//! Relocation: an expression written for one object shape rewritten, on its checked tree, to
//! read (and, in mutations, write) the same fields where another shape holds them, e.g. a Pod
//! policy's `object.spec` read at a Deployment's `object.spec.template.spec`.
//!
//! Only selections rooted at the declared variables named in [`Relocation::roots`] move (a
//! comprehension variable of the same name is left alone, as the checker resolves it); in
//! mutations, the fields of the root message literal (`Object{spec: …}`), the message type
//! names under it (`Object.spec.containers`) and the string-literal `path` and `from` of
//! `JSONPatch{…}` move the same way.

use std::collections::HashMap;

use crate::ast::{Comprehension, Expr, ExprKind, Literal, MacroKind, StructField};
use crate::check::Ref;

/// Where fields move.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Relocation {
    /// The variables whose fields move (e.g. `object`, `oldObject`).
    pub roots: Vec<String>,
    /// Field paths and where they move to; the longest path that prefixes a selection wins, and
    /// a path moved to itself stays where it is.
    pub moves: Vec<(Vec<String>, Vec<String>)>,
    /// The root message type of mutation literals (`Object`), whose fields and type names move
    /// too; `None` outside mutations.
    pub message_root: Option<String>,
    /// The message type of JSON patch operations (`JSONPatch`), whose string-literal `path`
    /// and `from` move; `None` outside mutations.
    pub json_patch: Option<String>,
}

/// Why an expression cannot be relocated.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum RelocationError {
    /// The expression does not compile in the first place.
    #[error("{0}")]
    Compile(String),
    /// A JSON patch path the rewrite cannot read.
    #[error(
        "a JSONPatch {field} must start with a string literal naming a field that moves (such as \"/spec/…\"); found {found}"
    )]
    JsonPatchPath {
        /// `path` or `from`.
        field: String,
        /// What was written.
        found: String,
    },
    /// Fields of the root message literal that land on one field in incompatible ways.
    #[error("the fields of {0}{{…}} cannot be moved without merging a value into another")]
    Overlap(String),
}

impl Relocation {
    /// The longest move whose path prefixes `fields`.
    fn find(&self, fields: &[&str]) -> Option<&(Vec<String>, Vec<String>)> {
        self.moves
            .iter()
            .filter(|(from, _)| {
                from.len() <= fields.len() && from.iter().zip(fields).all(|(a, b)| a == b)
            })
            .max_by_key(|(from, _)| from.len())
    }

    /// The message type name `name` moved: `Object.spec.x` becomes `Object.<to>.x`.
    fn type_name(&self, name: &str) -> String {
        let Some(root) = &self.message_root else {
            return name.to_string();
        };
        let Some(rest) = name
            .strip_prefix(root.as_str())
            .and_then(|r| r.strip_prefix('.'))
        else {
            return name.to_string();
        };
        let fields: Vec<&str> = rest.split('.').collect();
        match self.find(&fields) {
            Some((from, to)) => {
                let moved = to
                    .iter()
                    .map(String::as_str)
                    .chain(fields[from.len()..].iter().copied());
                std::iter::once(root.as_str())
                    .chain(moved)
                    .collect::<Vec<_>>()
                    .join(".")
            }
            None => name.to_string(),
        }
    }
}

/// Rewrites `expr` in place; `refs` are the checker's resolutions of its identifiers.
pub(crate) fn relocate(
    expr: &mut Expr,
    refs: &HashMap<u64, Ref>,
    r: &Relocation,
) -> Result<(), RelocationError> {
    Rewriter { refs, r }.expr(expr)
}

struct Rewriter<'a> {
    refs: &'a HashMap<u64, Ref>,
    r: &'a Relocation,
}

/// One selection of a chain: field, `has()`, `.?`.
type Step = (String, bool, bool);

impl Rewriter<'_> {
    fn expr(&self, e: &mut Expr) -> Result<(), RelocationError> {
        if matches!(e.kind, ExprKind::Select { .. }) && self.chain(e) {
            return Ok(());
        }
        match &mut e.kind {
            ExprKind::Literal(_) | ExprKind::Ident(_) => Ok(()),
            ExprKind::Select { operand, .. } => self.expr(operand),
            ExprKind::Call { target, args, .. } => {
                if let Some(t) = target {
                    self.expr(t)?;
                }
                args.iter_mut().try_for_each(|a| self.expr(a))
            }
            ExprKind::List { elements, .. } => elements.iter_mut().try_for_each(|x| self.expr(x)),
            ExprKind::Map { entries } => entries.iter_mut().try_for_each(|m| {
                self.expr(&mut m.key)?;
                self.expr(&mut m.value)
            }),
            ExprKind::Struct { type_name, fields } => {
                for f in fields.iter_mut() {
                    self.expr(&mut f.value)?;
                }
                if self.r.json_patch.as_deref() == Some(type_name.as_str()) {
                    for f in fields
                        .iter_mut()
                        .filter(|f| f.name == "path" || f.name == "from")
                    {
                        self.json_patch_path(&f.name.clone(), &mut f.value)?;
                    }
                }
                if self.r.message_root.as_deref() == Some(type_name.as_str()) {
                    let taken = std::mem::take(fields);
                    *fields = self.root_fields(type_name, taken)?;
                } else {
                    *type_name = self.r.type_name(type_name);
                }
                Ok(())
            }
            ExprKind::Comprehension(c) => self.comprehension(c),
        }
    }

    fn comprehension(&self, c: &mut Comprehension) -> Result<(), RelocationError> {
        self.expr(&mut c.range)?;
        match &mut c.kind {
            MacroKind::All(b)
            | MacroKind::Exists(b)
            | MacroKind::ExistsOne(b)
            | MacroKind::Filter(b)
            | MacroKind::OptMap(b)
            | MacroKind::OptFlatMap(b)
            | MacroKind::SortBy(b) => self.expr(b),
            MacroKind::MapList { filter, transform }
            | MacroKind::TransformMap { filter, transform }
            | MacroKind::TransformMapEntry { filter, transform } => {
                if let Some(f) = filter {
                    self.expr(f)?;
                }
                self.expr(transform)
            }
        }
    }

    /// Moves the selection chain `e` if it is rooted at a moving variable; whether it was.
    fn chain(&self, e: &mut Expr) -> bool {
        let mut steps: Vec<Step> = Vec::new();
        let mut at = &*e;
        while let ExprKind::Select {
            operand,
            field,
            test,
            optional,
        } = &at.kind
        {
            steps.push((field.clone(), *test, *optional));
            at = operand;
        }
        let root_id = at.id;
        let root = match (&at.kind, self.refs.get(&at.id)) {
            (ExprKind::Ident(name), Some(Ref::Var(v))) if v == name => name.clone(),
            _ => return false,
        };
        if !self.r.roots.contains(&root) {
            return false;
        }
        steps.reverse();
        let fields: Vec<&str> = steps.iter().map(|(f, _, _)| f.as_str()).collect();
        let Some((from, to)) = self.r.find(&fields) else {
            return true;
        };
        if from == to {
            return true;
        }
        let moved = &steps[..from.len()];
        let optional = moved.first().is_some_and(|s| s.2);
        let test = moved.last().is_some_and(|s| s.1);
        let mut new_steps: Vec<Step> = to.iter().map(|f| (f.clone(), false, optional)).collect();
        if let Some(last) = new_steps.last_mut() {
            last.1 = test;
        }
        new_steps.extend(steps[from.len()..].iter().cloned());
        let mut out = Expr {
            id: root_id,
            kind: ExprKind::Ident(root),
        };
        for (field, test, optional) in new_steps {
            out = Expr {
                id: e.id,
                kind: ExprKind::Select {
                    operand: Box::new(out),
                    field,
                    test,
                    optional,
                },
            };
        }
        *e = out;
        true
    }

    /// The fields of a root message literal, each nested where it moves.
    fn root_fields(
        &self,
        root: &str,
        fields: Vec<StructField>,
    ) -> Result<Vec<StructField>, RelocationError> {
        let placed: Vec<Placed> = fields
            .into_iter()
            .map(|f| {
                let path = match self.r.find(&[f.name.as_str()]) {
                    Some((_, to)) => to.clone(),
                    None => vec![f.name.clone()],
                };
                (path, f)
            })
            .collect();
        nest(root, placed)
    }

    /// Moves a JSON patch `path` or `from`: its leading string literal (alone, or the left end
    /// of a `+` chain) is a JSON pointer whose leading fields move.
    fn json_patch_path(&self, field: &str, value: &mut Expr) -> Result<(), RelocationError> {
        let mut at = value;
        loop {
            match &mut at.kind {
                ExprKind::Call {
                    target: None,
                    function,
                    args,
                } if function == "_+_" && args.len() == 2 => {
                    at = &mut args[0];
                }
                ExprKind::Literal(Literal::String(s)) => {
                    let pointer: Vec<&str> = s.split('/').skip(1).collect();
                    let moved = s.starts_with('/').then(|| self.r.find(&pointer)).flatten();
                    let Some((from, to)) = moved else {
                        return Err(RelocationError::JsonPatchPath {
                            field: field.to_string(),
                            found: format!("{s:?}"),
                        });
                    };
                    let rest = pointer[from.len()..].iter().map(|p| p.to_string());
                    let joined: Vec<String> = to.iter().cloned().chain(rest).collect();
                    *s = format!("/{}", joined.join("/")).into();
                    return Ok(());
                }
                _ => {
                    return Err(RelocationError::JsonPatchPath {
                        field: field.to_string(),
                        found: "an expression".into(),
                    });
                }
            }
        }
    }
}

/// A field of a root message literal and the path it lands at.
type Placed = (Vec<String>, StructField);

/// Builds the fields of message `type_name` from fields placed at paths below it: one field
/// per first segment, nested literals (`<type_name>.<segment>{…}`) for deeper paths.
fn nest(type_name: &str, placed: Vec<Placed>) -> Result<Vec<StructField>, RelocationError> {
    let mut groups: Vec<(String, Vec<Placed>)> = Vec::new();
    for (mut path, f) in placed {
        if path.is_empty() {
            return Err(RelocationError::Overlap(type_name.to_string()));
        }
        let head = path.remove(0);
        match groups.iter_mut().find(|(h, _)| *h == head) {
            Some((_, g)) => g.push((path, f)),
            None => groups.push((head, vec![(path, f)])),
        }
    }
    groups
        .into_iter()
        .map(|(head, mut group)| {
            if let [(path, _)] = group.as_slice()
                && path.is_empty()
            {
                let (_, mut f) = group.remove(0);
                f.name = head;
                return Ok(f);
            }
            if group.iter().any(|(p, _)| p.is_empty()) {
                return Err(RelocationError::Overlap(type_name.to_string()));
            }
            let id = group.first().map_or(0, |(_, f)| f.id);
            let inner = format!("{type_name}.{head}");
            let fields = nest(&inner, group)?;
            Ok(StructField {
                id,
                name: head,
                value: Expr {
                    id,
                    kind: ExprKind::Struct {
                        type_name: inner,
                        fields,
                    },
                },
                optional: false,
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Env, Type};

    fn strings(path: &[&str]) -> Vec<String> {
        path.iter().map(|s| s.to_string()).collect()
    }

    /// A Pod's spec and metadata read at a Deployment's template, its namespace where it is.
    fn to_template() -> Relocation {
        Relocation {
            roots: strings(&["object", "oldObject"]),
            moves: vec![
                (strings(&["spec"]), strings(&["spec", "template", "spec"])),
                (
                    strings(&["metadata"]),
                    strings(&["spec", "template", "metadata"]),
                ),
                (
                    strings(&["metadata", "namespace"]),
                    strings(&["metadata", "namespace"]),
                ),
            ],
            message_root: Some("Object".into()),
            json_patch: Some("JSONPatch".into()),
        }
    }

    fn relocated(src: &str) -> Result<String, RelocationError> {
        let env = Env::kubernetes()
            .variable("object", Type::Dyn)
            .variable("oldObject", Type::Dyn)
            .variable("params", Type::Dyn)
            .mutation_library()
            .build();
        env.relocate(src, &to_template())
    }

    #[test]
    fn selections_under_the_roots_move() {
        let cases = [
            (
                "object.spec.containers.all(c, c.image != '')",
                "object.spec.template.spec.containers.all(c, (c.image != \"\"))",
            ),
            ("has(object.spec)", "has(object.spec.template.spec)"),
            (
                "object.?metadata.?labels.orValue({})",
                "object.?spec.?template.?metadata.?labels.orValue({})",
            ),
            (
                "oldObject.metadata.labels == object.metadata.labels",
                "(oldObject.spec.template.metadata.labels == object.spec.template.metadata.labels)",
            ),
            // The namespace is the controller's; what does not move stays.
            ("object.metadata.namespace", "object.metadata.namespace"),
            ("object.kind + params.spec", "(object.kind + params.spec)"),
            // A comprehension variable named `object` is not the root.
            (
                "[{'spec': 1}].all(object, object.spec == 1)",
                "[{\"spec\": 1}].all(object, (object.spec == 1))",
            ),
        ];
        for (src, want) in cases {
            assert_eq!(relocated(src).as_deref(), Ok(want), "{src}");
        }
    }

    #[test]
    fn mutation_literals_and_json_patch_paths_move() {
        assert_eq!(
            relocated("Object{spec: Object.spec{containers: [Object.spec.containers{name: 'c'}]}}")
                .as_deref(),
            Ok(
                "Object{spec: Object.spec{template: Object.spec.template{spec: Object.spec.template.spec{containers: [Object.spec.template.spec.containers{name: \"c\"}]}}}}"
            )
        );
        assert_eq!(
            relocated("Object{metadata: Object.metadata{labels: {'a': 'b'}}, spec: Object.spec{}}")
                .as_deref(),
            Ok(
                "Object{spec: Object.spec{template: Object.spec.template{metadata: Object.spec.template.metadata{labels: {\"a\": \"b\"}}, spec: Object.spec.template.spec{}}}}"
            )
        );
        assert_eq!(
            relocated(
                "[JSONPatch{op: 'add', path: '/spec/containers/' + string(size(object.spec.containers)), value: 1}]"
            )
            .as_deref(),
            Ok(
                "[JSONPatch{op: \"add\", path: (\"/spec/template/spec/containers/\" + string(size(object.spec.template.spec.containers))), value: 1}]"
            )
        );
        assert!(matches!(
            relocated("[JSONPatch{op: 'add', path: params.p, value: 1}]"),
            Err(RelocationError::JsonPatchPath { .. })
        ));
        assert!(matches!(
            relocated("[JSONPatch{op: 'replace', path: '/kind', value: 1}]"),
            Err(RelocationError::JsonPatchPath { .. })
        ));
        assert!(matches!(
            relocated("object.spec +"),
            Err(RelocationError::Compile(_))
        ));
    }
}
