//! Property names as CEL field names, escaped as Kubernetes escapes them for schema-typed
//! environments (`__` → `__underscores__`, `.` → `__dot__`, `-` → `__dash__`, `/` →
//! `__slash__`, a reserved word `w` → `__w__`).

/// The words CEL reserves: a property with one of these names is escaped as `__<word>__`, and
/// no variable may be named after one.
pub(crate) const RESERVED: [&str; 21] = [
    "true",
    "false",
    "null",
    "in",
    "as",
    "break",
    "const",
    "continue",
    "else",
    "for",
    "function",
    "if",
    "import",
    "let",
    "loop",
    "package",
    "namespace",
    "return",
    "var",
    "void",
    "while",
];

/// The CEL field name of property `name`, or `None` when it has none (empty, starting with a
/// digit, or with a character outside `[a-zA-Z0-9_./-]`): such properties are not visible
/// to expressions.
pub fn escape_field_name(name: &str) -> Option<String> {
    if name.is_empty() || name.starts_with(|c: char| c.is_ascii_digit()) {
        return None;
    }
    if RESERVED.contains(&name) {
        return Some(format!("__{name}__"));
    }
    let mut out = String::with_capacity(name.len());
    let mut rest = name;
    while let Some(c) = rest.chars().next() {
        if let Some(after) = rest.strip_prefix("__") {
            out.push_str("__underscores__");
            rest = after;
            continue;
        }
        match c {
            '.' => out.push_str("__dot__"),
            '-' => out.push_str("__dash__"),
            '/' => out.push_str("__slash__"),
            c if c.is_ascii_alphanumeric() || c == '_' => out.push(c),
            _ => return None,
        }
        rest = &rest[c.len_utf8()..];
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_escape_as_kubernetes_escapes_them() {
        let cases = [
            ("replicas", Some("replicas")),
            ("a_b", Some("a_b")),
            ("namespace", Some("__namespace__")),
            ("if", Some("__if__")),
            ("x-kubernetes-foo", Some("x__dash__kubernetes__dash__foo")),
            ("a.b/c", Some("a__dot__b__slash__c")),
            ("a__b", Some("a__underscores__b")),
            ("a___b", Some("a__underscores___b")),
            ("_x", Some("_x")),
            ("1st", None),
            ("", None),
            ("a b", None),
            ("café", None),
            ("$ref", None),
        ];
        for (name, want) in cases {
            assert_eq!(escape_field_name(name).as_deref(), want, "{name}");
        }
    }
}
