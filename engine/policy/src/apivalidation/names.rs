//! The name formats kube-apiserver checks, with its messages: DNS-1123 subdomains and labels,
//! DNS-1035 labels, qualified names (label keys), path segments and CEL identifiers.

const DNS1123_SUBDOMAIN_FMT: &str =
    "[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*";
const DNS1035_LABEL_FMT: &str = "[a-z]([-a-z0-9]*[a-z0-9])?";
const QUALIFIED_NAME_FMT: &str = "([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]";

fn is_dns1123_label(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 63
        && s.bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        && s.as_bytes()[0] != b'-'
        && !s.ends_with('-')
}

/// `IsDNS1123Subdomain` messages.
pub fn dns1123_subdomain_errors(s: &str) -> Vec<String> {
    subdomain_errors(s, "characters")
}

/// `IsDNS1123Subdomain` with lengths in `unit`: `util/validation` counts characters, the
/// `content` package (label keys) bytes.
fn subdomain_errors(s: &str, unit: &str) -> Vec<String> {
    let mut out = Vec::new();
    if s.len() > 253 {
        out.push(format!("must be no more than 253 {unit}"));
    }
    if !s.split('.').all(is_dns1123_label) {
        out.push(format!("a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character (e.g. 'example.com', regex used for validation is '{DNS1123_SUBDOMAIN_FMT}')"));
    }
    out
}

/// `IsDNS1035Label` messages.
pub(super) fn dns1035_label_errors(s: &str) -> Vec<String> {
    let mut out = Vec::new();
    if s.len() > 63 {
        out.push("must be no more than 63 characters".to_string());
    }
    let ok = s.as_bytes().first().is_some_and(u8::is_ascii_lowercase)
        && s.bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        && !s.ends_with('-');
    if !ok {
        out.push(format!("a DNS-1035 label must consist of lower case alphanumeric characters or '-', start with an alphabetic character, and end with an alphanumeric character (e.g. 'my-name',  or 'abc-123', regex used for validation is '{DNS1035_LABEL_FMT}')"));
    }
    out
}

fn is_qualified_name_part(s: &str) -> bool {
    let b = s.as_bytes();
    !b.is_empty()
        && b[0].is_ascii_alphanumeric()
        && b[b.len() - 1].is_ascii_alphanumeric()
        && b.iter()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, b'-' | b'_' | b'.'))
}

/// `IsQualifiedName` messages: apimachinery's `content.IsLabelKey`, whose lengths are in bytes.
pub fn qualified_name_errors(value: &str) -> Vec<String> {
    let mut out = Vec::new();
    let parts: Vec<&str> = value.split('/').collect();
    let name = match parts.as_slice() {
        [name] => *name,
        [prefix, name] => {
            if prefix.is_empty() {
                out.push("prefix part must be non-empty".to_string());
            } else {
                out.extend(
                    subdomain_errors(prefix, "bytes")
                        .into_iter()
                        .map(|m| format!("prefix part {m}")),
                );
            }
            name
        }
        _ => {
            out.push(format!("a valid label key must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyName',  or 'my.name',  or '123-abc', regex used for validation is '{QUALIFIED_NAME_FMT}') with an optional DNS subdomain prefix and '/' (e.g. 'example.com/MyName')"));
            return out;
        }
    };
    if name.is_empty() {
        out.push("name part must be non-empty".to_string());
    } else if name.len() > 63 {
        out.push("name part must be no more than 63 bytes".to_string());
    }
    if !is_qualified_name_part(name) {
        out.push(format!("name part must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyName',  or 'my.name',  or '123-abc', regex used for validation is '{QUALIFIED_NAME_FMT}')"));
    }
    out
}

/// `IsValidPathSegmentName` messages: a name that can stand as one segment of a URL path.
pub(super) fn path_segment_errors(name: &str) -> Vec<String> {
    let mut out = Vec::new();
    if name == "." || name == ".." {
        out.push(format!("may not be '{name}'"));
        return out;
    }
    for illegal in ["/", "%"] {
        if name.contains(illegal) {
            out.push(format!("may not contain '{illegal}'"));
        }
    }
    out
}

/// Whether `name` can name a CEL variable: an identifier that is not a reserved word.
pub(super) fn is_cel_identifier(name: &str) -> bool {
    let b = name.as_bytes();
    !b.is_empty()
        && (b[0].is_ascii_alphabetic() || b[0] == b'_')
        && b.iter().all(|c| c.is_ascii_alphanumeric() || *c == b'_')
        && !crate::schema::escape::RESERVED.contains(&name)
}
