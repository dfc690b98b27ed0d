//! What kube-apiserver rejects when a policy or binding is written: field rules, limits and the
//! compilation of every expression, with upstream's field paths and messages. It reads the
//! object as JSON (defaults already applied by the CRD schema), so paths are the JSON paths.

use std::collections::HashSet;
use std::fmt;

use serde_json::Value;

use celgate_cel::{Compatibility, Env, Expressions};

use crate::compile::{
    ExprError, base_environment, compile_checked, mutation_environment, result_types,
};

/// The kind of a field error, as `k8s.io/apimachinery/pkg/util/validation/field` names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorType {
    /// `Required value`
    Required,
    /// `Invalid value`
    Invalid,
    /// `Forbidden`
    Forbidden,
    /// `Unsupported value`
    NotSupported,
    /// `Duplicate value`
    Duplicate,
    /// `Too many`
    TooMany,
    /// `Internal error` (printed without the value)
    Internal,
}

impl ErrorType {
    /// The text kube-apiserver prints for the type.
    pub fn as_str(self) -> &'static str {
        match self {
            ErrorType::Required => "Required value",
            ErrorType::Invalid => "Invalid value",
            ErrorType::Forbidden => "Forbidden",
            ErrorType::NotSupported => "Unsupported value",
            ErrorType::Duplicate => "Duplicate value",
            ErrorType::TooMany => "Too many",
            ErrorType::Internal => "Internal error",
        }
    }

    /// The `reason` of a status cause for the type.
    pub fn cause_reason(self) -> &'static str {
        match self {
            ErrorType::Required => "FieldValueRequired",
            ErrorType::Invalid => "FieldValueInvalid",
            ErrorType::Forbidden => "FieldValueForbidden",
            ErrorType::NotSupported => "FieldValueNotSupported",
            ErrorType::Duplicate => "FieldValueDuplicate",
            ErrorType::TooMany => "FieldValueTooMany",
            ErrorType::Internal => "InternalError",
        }
    }
}

/// One field error.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FieldError {
    /// The field path, e.g. `spec.validations[0].expression`.
    pub field: String,
    /// The error type.
    pub kind: ErrorType,
    /// The offending value, rendered as Go renders it (`"text"`, `5`, `[]string{"a"}`).
    pub value: Option<String>,
    /// The detail.
    pub detail: String,
}

impl fmt::Display for FieldError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.field, self.kind.as_str())?;
        if let Some(v) = &self.value {
            write!(f, ": {v}")?;
        }
        if !self.detail.is_empty() {
            write!(f, ": {}", self.detail)?;
        }
        Ok(())
    }
}

/// The message of a rejected object: `<Kind>.<group> "<name>" is invalid: <errors>`.
pub fn invalid_message(kind: &str, group: &str, name: &str, errors: &[FieldError]) -> String {
    let list = match errors {
        [one] => one.to_string(),
        many => format!(
            "[{}]",
            many.iter()
                .map(ToString::to_string)
                .collect::<Vec<_>>()
                .join(", ")
        ),
    };
    format!("{kind}.{group} \"{name}\" is invalid: {list}")
}

/// Go's `%q` of a string.
fn quote(s: &str) -> String {
    serde_json::Value::String(s.to_string()).to_string()
}

/// A string list as kube-apiserver renders a bad value: compact JSON.
fn json_list(items: &[&str]) -> String {
    serde_json::to_string(items).unwrap_or_default()
}

struct Errors(Vec<FieldError>);

impl Errors {
    fn push(&mut self, field: &str, kind: ErrorType, value: Option<String>, detail: &str) {
        self.0.push(FieldError {
            field: field.to_string(),
            kind,
            value,
            detail: detail.to_string(),
        });
    }
    fn required(&mut self, field: &str, detail: &str) {
        self.push(field, ErrorType::Required, None, detail);
    }
    fn invalid(&mut self, field: &str, value: String, detail: &str) {
        self.push(field, ErrorType::Invalid, Some(value), detail);
    }
    fn not_supported(&mut self, field: &str, value: &str, supported: &[&str]) {
        let list = supported
            .iter()
            .map(|s| quote(s))
            .collect::<Vec<_>>()
            .join(", ");
        self.push(
            field,
            ErrorType::NotSupported,
            Some(quote(value)),
            &format!("supported values: {list}"),
        );
    }
    fn duplicate(&mut self, field: &str, value: &str) {
        self.push(field, ErrorType::Duplicate, Some(quote(value)), "");
    }
    fn forbidden(&mut self, field: &str, detail: &str) {
        self.push(field, ErrorType::Forbidden, None, detail);
    }
}

fn str_of<'a>(v: &'a Value, key: &str) -> Option<&'a str> {
    v.get(key).and_then(Value::as_str)
}

fn list_of<'a>(v: &'a Value, key: &str) -> &'a [Value] {
    v.get(key)
        .and_then(Value::as_array)
        .map_or(&[], Vec::as_slice)
}

fn strings_of<'a>(v: &'a Value, key: &str) -> Vec<&'a str> {
    list_of(v, key).iter().filter_map(Value::as_str).collect()
}

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

fn dns1035_label_errors(s: &str) -> Vec<String> {
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

fn path_segment_errors(name: &str) -> Vec<String> {
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

fn is_cel_identifier(name: &str) -> bool {
    const RESERVED: [&str; 21] = [
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
    let b = name.as_bytes();
    !b.is_empty()
        && (b[0].is_ascii_alphabetic() || b[0] == b'_')
        && b.iter().all(|c| c.is_ascii_alphanumeric() || *c == b'_')
        && !RESERVED.contains(&name)
}

fn validate_label_selector(sel: &Value, path: &str, errs: &mut Errors) {
    for (i, req) in list_of(sel, "matchExpressions").iter().enumerate() {
        let p = format!("{path}.matchExpressions[{i}]");
        let op = str_of(req, "operator").unwrap_or_default();
        let values = list_of(req, "values");
        match op {
            "In" | "NotIn" if values.is_empty() => errs.required(
                &format!("{p}.values"),
                "must be specified when `operator` is 'In' or 'NotIn'",
            ),
            "Exists" | "DoesNotExist" if !values.is_empty() => errs.forbidden(
                &format!("{p}.values"),
                "may not be specified when `operator` is 'Exists' or 'DoesNotExist'",
            ),
            "In" | "NotIn" | "Exists" | "DoesNotExist" => {}
            other => errs.invalid(
                &format!("{p}.operator"),
                quote(other),
                "not a valid selector operator",
            ),
        }
        let key = str_of(req, "key").unwrap_or_default();
        for m in qualified_name_errors(key) {
            errs.invalid(&format!("{p}.key"), quote(key), &m);
        }
    }
    if let Some(labels) = sel.get("matchLabels").and_then(Value::as_object) {
        for (k, _) in labels {
            for m in qualified_name_errors(k) {
                errs.invalid(&format!("{path}.matchLabels"), quote(k), &m);
            }
        }
    }
}

const OPERATIONS: [&str; 5] = ["*", "CONNECT", "CREATE", "DELETE", "UPDATE"];

fn validate_resources(resources: &[&str], path: &str, errs: &mut Errors) {
    if resources.is_empty() {
        errs.required(path, "");
    }
    let mut with_wildcard_sub: HashSet<&str> = HashSet::new();
    let mut sub_with_wildcard_res: HashSet<&str> = HashSet::new();
    let (mut double, mut single, mut plain) = (false, false, false);
    for (i, rs) in resources.iter().enumerate() {
        if rs.is_empty() {
            errs.required(&format!("{path}[{i}]"), "");
            continue;
        }
        double |= *rs == "*/*";
        single |= *rs == "*";
        let Some((res, sub)) = rs.split_once('/') else {
            plain = *rs != "*";
            continue;
        };
        if with_wildcard_sub.contains(res) {
            errs.invalid(
                &format!("{path}[{i}]"),
                quote(rs),
                &format!("if '{res}/*' is present, must not specify {rs}"),
            );
        }
        if sub_with_wildcard_res.contains(sub) {
            errs.invalid(
                &format!("{path}[{i}]"),
                quote(rs),
                &format!("if '*/{sub}' is present, must not specify {rs}"),
            );
        }
        if sub == "*" {
            with_wildcard_sub.insert(res);
        }
        if res == "*" {
            sub_with_wildcard_res.insert(sub);
        }
    }
    if resources.len() > 1 && double {
        errs.invalid(
            path,
            json_list(resources),
            "if '*/*' is present, must not specify other resources",
        );
    }
    if single && plain {
        errs.invalid(
            path,
            json_list(resources),
            "if '*' is present, must not specify other resources without subresources",
        );
    }
}

fn validate_rule(rule: &Value, path: &str, errs: &mut Errors) {
    let names = strings_of(rule, "resourceNames");
    let mut seen = HashSet::new();
    for (i, n) in names.iter().enumerate() {
        for m in path_segment_errors(n) {
            errs.invalid(&format!("{path}.resourceNames[{i}]"), quote(n), &m);
        }
        if !seen.insert(*n) {
            errs.duplicate(&format!("{path}.resourceNames[{i}]"), n);
        }
    }
    let ops = strings_of(rule, "operations");
    if ops.is_empty() {
        errs.required(&format!("{path}.operations"), "");
    }
    if ops.len() > 1 && ops.contains(&"*") {
        errs.invalid(
            &format!("{path}.operations"),
            json_list(&ops),
            "if '*' is present, must not specify other operations",
        );
    }
    for (i, op) in ops.iter().enumerate() {
        if !OPERATIONS.contains(op) {
            errs.not_supported(&format!("{path}.operations[{i}]"), op, &OPERATIONS);
        }
    }
    for (key, what) in [("apiGroups", "API groups"), ("apiVersions", "API versions")] {
        let list = strings_of(rule, key);
        if list.is_empty() {
            errs.required(&format!("{path}.{key}"), "");
        }
        if list.len() > 1 && list.contains(&"*") {
            errs.invalid(
                &format!("{path}.{key}"),
                json_list(&list),
                &format!("if '*' is present, must not specify other {what}"),
            );
        }
        if key == "apiVersions" {
            for (i, v) in list.iter().enumerate() {
                if v.is_empty() {
                    errs.required(&format!("{path}.{key}[{i}]"), "");
                }
            }
        }
    }
    validate_resources(
        &strings_of(rule, "resources"),
        &format!("{path}.resources"),
        errs,
    );
    const SCOPES: [&str; 3] = ["*", "Cluster", "Namespaced"];
    if let Some(scope) = str_of(rule, "scope").filter(|s| !SCOPES.contains(s)) {
        errs.not_supported(&format!("{path}.scope"), scope, &SCOPES);
    }
}

fn validate_match_resources(m: &Value, path: &str, errs: &mut Errors) {
    match str_of(m, "matchPolicy") {
        None => errs.required(&format!("{path}.matchPolicy"), ""),
        Some("Exact" | "Equivalent") => {}
        Some(other) => errs.not_supported(
            &format!("{path}.matchPolicy"),
            other,
            &["Equivalent", "Exact"],
        ),
    }
    for key in ["namespaceSelector", "objectSelector"] {
        match m.get(key) {
            None | Some(Value::Null) => errs.required(&format!("{path}.{key}"), ""),
            Some(sel) => validate_label_selector(sel, &format!("{path}.{key}"), errs),
        }
    }
    for key in ["resourceRules", "excludeResourceRules"] {
        for (i, rule) in list_of(m, key).iter().enumerate() {
            validate_rule(rule, &format!("{path}.{key}[{i}]"), errs);
        }
    }
}

fn validate_param_kind(pk: &Value, path: &str, errs: &mut Errors) {
    match str_of(pk, "apiVersion").filter(|s| !s.is_empty()) {
        None => errs.required(&format!("{path}.apiVersion"), ""),
        Some(av) => {
            let p = format!("{path}.apiVersion");
            let (group, version) = match av.matches('/').count() {
                0 => ("", av),
                1 => av.split_once('/').unwrap_or(("", av)),
                _ => {
                    errs.invalid(
                        &p,
                        quote(av),
                        &format!("unexpected GroupVersion string: {av}"),
                    );
                    ("", "")
                }
            };
            if av.matches('/').count() <= 1 {
                if !group.is_empty() {
                    let e = dns1123_subdomain_errors(group);
                    if !e.is_empty() {
                        errs.invalid(&p, quote(group), &e.join(","));
                    }
                }
                if version.is_empty() {
                    errs.invalid(&p, quote(av), "version must be specified");
                } else {
                    let e = dns1035_label_errors(version);
                    if !e.is_empty() {
                        errs.invalid(&p, quote(version), &e.join(","));
                    }
                }
            }
        }
    }
    match str_of(pk, "kind").filter(|s| !s.is_empty()) {
        None => errs.required(&format!("{path}.kind"), ""),
        Some(kind) => {
            let e = dns1035_label_errors(&kind.to_lowercase());
            if !e.is_empty() {
                errs.invalid(
                    &format!("{path}.kind"),
                    quote(kind),
                    &format!(
                        "may have mixed case, but should otherwise match: {}",
                        e.join(",")
                    ),
                );
            }
        }
    }
}

/// Which environment each expression of a write compiles in (kube-apiserver's
/// `preexistingExpressions`): an expression the old object already has compiles with the
/// StoredExpressions environment, a new or changed one with NewExpressions at the compatibility
/// version, so stored policies keep working across a rollback.
#[derive(Debug, Default)]
pub struct Environments<'a> {
    compatibility: Compatibility,
    match_conditions: HashSet<&'a str>,
    validations: HashSet<&'a str>,
    messages: HashSet<&'a str>,
    audit_values: HashSet<&'a str>,
    apply_configurations: HashSet<&'a str>,
}

impl<'a> Environments<'a> {
    /// For a write of `old` (`None` or JSON null on create) at `compatibility`.
    pub fn new(compatibility: Compatibility, old: Option<&'a Value>) -> Self {
        let mut envs = Environments {
            compatibility,
            ..Default::default()
        };
        let Some(spec) = old.and_then(|o| o.get("spec")) else {
            return envs;
        };
        let collect = |items: &'a [Value], field: &str, into: &mut HashSet<&'a str>| {
            into.extend(items.iter().filter_map(|i| str_of(i, field)));
        };
        collect(
            list_of(spec, "matchConditions"),
            "expression",
            &mut envs.match_conditions,
        );
        collect(
            list_of(spec, "validations"),
            "expression",
            &mut envs.validations,
        );
        collect(
            list_of(spec, "validations"),
            "messageExpression",
            &mut envs.messages,
        );
        collect(
            list_of(spec, "auditAnnotations"),
            "valueExpression",
            &mut envs.audit_values,
        );
        // Upstream also collects the old jsonPatch expressions, but never looks them up.
        let apply = list_of(spec, "mutations")
            .iter()
            .filter_map(|m| m.get("applyConfiguration"));
        envs.apply_configurations
            .extend(apply.filter_map(|a| str_of(a, "expression")));
        envs
    }

    fn pick(&self, preexisting: &HashSet<&str>, expression: &str) -> Expressions {
        if preexisting.contains(expression) {
            Expressions::Stored
        } else {
            Expressions::New(self.compatibility)
        }
    }
}

/// `env` (built on the StoredExpressions libraries) with the libraries of `expressions`.
fn with_libraries(env: &Env, expressions: Expressions) -> Env {
    match expressions {
        Expressions::Stored => env.clone(),
        Expressions::New(_) => env.extend().expressions(expressions).build(),
    }
}

fn expr_error(errs: &mut Errors, field: &str, expression: &str, e: ExprError) {
    match e {
        // kube-apiserver reports a program it cannot build as an internal error, without
        // the value.
        ExprError::Program(_) => errs.push(field, ErrorType::Internal, None, &e.to_string()),
        e => errs.invalid(field, quote(expression), &e.to_string()),
    }
}

fn validate_match_conditions(
    spec: &Value,
    has_params: bool,
    envs: &Environments<'_>,
    errs: &mut Errors,
) {
    let conditions = list_of(spec, "matchConditions");
    if conditions.len() > 64 {
        errs.push(
            "spec.matchConditions",
            ErrorType::TooMany,
            Some(conditions.len().to_string()),
            "must have at most 64 items",
        );
    }
    let env = base_environment(has_params, true);
    let mut names = HashSet::new();
    for (i, c) in conditions.iter().enumerate() {
        let p = format!("spec.matchConditions[{i}]");
        let expr = str_of(c, "expression").unwrap_or_default();
        if expr.trim().is_empty() {
            errs.required(&format!("{p}.expression"), "");
        } else if let Err(e) = compile_checked(
            &with_libraries(&env, envs.pick(&envs.match_conditions, expr)),
            expr.trim(),
            result_types::CONDITION,
        ) {
            expr_error(errs, &format!("{p}.expression"), expr.trim(), e);
        }
        let name = str_of(c, "name").unwrap_or_default();
        if name.is_empty() {
            errs.required(&format!("{p}.name"), "");
        } else {
            for m in qualified_name_errors(name) {
                errs.invalid(&format!("{p}.name"), quote(name), &m);
            }
            if !names.insert(name) {
                errs.duplicate(&format!("{p}.name"), name);
            }
        }
    }
}

/// failurePolicy, paramKind and matchConstraints, checked alike for both policy kinds.
/// Returns whether the policy has params.
fn validate_policy_head(spec: &Value, errs: &mut Errors) -> bool {
    match str_of(spec, "failurePolicy") {
        None => errs.required("spec.failurePolicy", ""),
        Some("Fail" | "Ignore") => {}
        Some(other) => errs.not_supported("spec.failurePolicy", other, &["Fail", "Ignore"]),
    }
    let param_kind = spec.get("paramKind").filter(|p| !p.is_null());
    if let Some(pk) = param_kind {
        validate_param_kind(pk, "spec.paramKind", errs);
    }
    match spec.get("matchConstraints").filter(|m| !m.is_null()) {
        None => errs.required("spec.matchConstraints", ""),
        Some(mc) => {
            validate_match_resources(mc, "spec.matchConstraints", errs);
            if list_of(mc, "resourceRules").is_empty() {
                errs.required("spec.matchConstraints.resourceRules", "");
            }
        }
    }
    param_kind.is_some()
}

/// A policy's variables as (name, expression), in order.
fn variables_of(spec: &Value) -> Vec<(&str, &str)> {
    list_of(spec, "variables")
        .iter()
        .map(|v| {
            (
                str_of(v, "name").unwrap_or_default(),
                str_of(v, "expression").unwrap_or_default(),
            )
        })
        .collect()
}

/// Checks the variables' names and compiles their expressions in order (later expressions see
/// the earlier ones). Returns the environment the policy's other expressions compile in.
fn validate_variables(
    variables: &[(&str, &str)],
    has_params: bool,
    envs: &Environments<'_>,
    errs: &mut Errors,
) -> Env {
    for (i, (vname, expr)) in variables.iter().enumerate() {
        let p = format!("spec.variables[{i}]");
        if vname.trim().is_empty() {
            errs.required(&format!("{p}.name"), "name is not specified");
        } else if !is_cel_identifier(vname) {
            errs.invalid(
                &format!("{p}.name"),
                quote(vname),
                "must be a valid CEL identifier",
            );
        }
        if expr.trim().is_empty() {
            errs.required(&format!("{p}.expression"), "expression is not specified");
        }
    }
    let declared = variables
        .iter()
        .enumerate()
        .filter(|(_, (_, e))| !e.trim().is_empty());
    // As upstream, a variable counts as preexisting when a validation of the old object has
    // the same expression.
    let compiled = base_environment(has_params, true)
        .compile_variables_in(declared.clone().map(|(_, v)| *v), |expr| {
            envs.pick(&envs.validations, expr)
        });
    for ((i, (_, expr)), (_, result)) in declared.zip(compiled.iter()) {
        if let Err(e) = result {
            let field = format!("spec.variables[{i}].expression");
            if e.is_program() {
                let detail = format!("program instantiation failed: {e}");
                errs.push(&field, ErrorType::Internal, None, &detail);
            } else {
                errs.invalid(&field, quote(expr), &format!("compilation failed: {e}"));
            }
        }
    }
    compiled.env().clone()
}

/// Validates a ValidatingAdmissionPolicy as kube-apiserver would on create or update.
pub fn validate_policy(obj: &Value, envs: &Environments<'_>) -> Vec<FieldError> {
    let mut errs = Errors(Vec::new());
    let spec = obj.get("spec").unwrap_or(&Value::Null);
    let name = obj
        .get("metadata")
        .and_then(|m| str_of(m, "name"))
        .unwrap_or_default();
    let has_params = validate_policy_head(spec, &mut errs);
    validate_match_conditions(spec, has_params, envs, &mut errs);
    let variables = variables_of(spec);
    let env = &validate_variables(&variables, has_params, envs, &mut errs);
    let message_env = base_environment(has_params, false)
        .compile_variables(
            variables
                .iter()
                .copied()
                .filter(|(_, e)| !e.trim().is_empty()),
        )
        .env()
        .clone();
    let validations = list_of(spec, "validations");
    let annotations = list_of(spec, "auditAnnotations");
    if validations.is_empty() && annotations.is_empty() {
        let d = "validations or auditAnnotations must contain at least one item";
        errs.required("spec.validations", d);
        errs.required("spec.auditAnnotations", d);
    }
    for (i, v) in validations.iter().enumerate() {
        let p = format!("spec.validations[{i}]");
        let expr = str_of(v, "expression").unwrap_or_default();
        if expr.trim().is_empty() {
            errs.required(&format!("{p}.expression"), "expression is not specified");
        } else if let Err(e) = compile_checked(
            &with_libraries(env, envs.pick(&envs.validations, expr)),
            expr,
            result_types::CONDITION,
        ) {
            expr_error(&mut errs, &format!("{p}.expression"), expr, e);
        }
        if let Some(me) = str_of(v, "messageExpression").filter(|m| !m.is_empty()) {
            if me.trim().is_empty() {
                errs.invalid(
                    &format!("{p}.messageExpression"),
                    quote(me),
                    "must be non-empty if specified",
                );
            } else if let Err(e) = compile_checked(
                &with_libraries(&message_env, envs.pick(&envs.messages, me)),
                me,
                result_types::MESSAGE,
            ) {
                expr_error(&mut errs, &format!("{p}.messageExpression"), me, e);
            }
        }
        if let Some(msg) = str_of(v, "message").filter(|m| !m.is_empty()) {
            if msg.trim().is_empty() {
                errs.invalid(
                    &format!("{p}.message"),
                    quote(msg),
                    "message must be non-empty if specified",
                );
            } else if msg.trim().contains(['\n', '\r']) {
                errs.invalid(
                    &format!("{p}.message"),
                    quote(msg),
                    "must not contain line breaks",
                );
            }
        }
        if let Some(reason) = str_of(v, "reason") {
            let supported = ["Forbidden", "Invalid", "RequestEntityTooLarge"];
            if !supported.contains(&reason) {
                errs.not_supported(&format!("{p}.reason"), reason, &supported);
            }
        }
    }
    if annotations.len() > 20 {
        errs.invalid(
            "spec.auditAnnotations",
            serde_json::to_string(annotations).unwrap_or_default(),
            "must not have more than 20 auditAnnotations",
        );
    }
    let mut keys = HashSet::new();
    for (i, a) in annotations.iter().enumerate() {
        let p = format!("spec.auditAnnotations[{i}]");
        let key = str_of(a, "key").unwrap_or_default();
        if name.is_empty() {
            errs.invalid(
                &format!("{p}.key"),
                quote(key),
                "requires metadata.name be non-empty",
            );
        } else {
            let full = format!("{name}/{key}");
            for m in qualified_name_errors(&full) {
                errs.invalid(&format!("{p}.key"), quote(&full), &m);
            }
        }
        let ve = str_of(a, "valueExpression").unwrap_or_default();
        if ve.trim().is_empty() {
            errs.required(
                &format!("{p}.valueExpression"),
                "valueExpression is not specified",
            );
        } else if ve.trim().len() > 5 * 1024 {
            errs.required(
                &format!("{p}.valueExpression"),
                "must not exceed 5120 bytes in length",
            );
        } else if let Err(e) = compile_checked(
            &with_libraries(env, envs.pick(&envs.audit_values, ve)),
            ve.trim(),
            result_types::AUDIT_VALUE,
        ) {
            expr_error(&mut errs, &format!("{p}.valueExpression"), ve, e);
        }
        if !keys.insert(key) {
            errs.duplicate(&format!("{p}.key"), key);
        }
    }
    errs.0
}

/// policyName, paramRef and matchResources, checked alike for both binding kinds.
fn validate_binding_head(spec: &Value, errs: &mut Errors) {
    match str_of(spec, "policyName").filter(|s| !s.is_empty()) {
        None => errs.required("spec.policyName", ""),
        Some(p) => {
            for m in dns1123_subdomain_errors(p) {
                errs.invalid("spec.policyName", quote(p), &m);
            }
        }
    }
    if let Some(pr) = spec.get("paramRef").filter(|p| !p.is_null()) {
        validate_param_ref(pr, errs);
    }
    if let Some(m) = spec.get("matchResources").filter(|m| !m.is_null()) {
        validate_match_resources(m, "spec.matchResources", errs);
    }
}

fn validate_param_ref(pr: &Value, errs: &mut Errors) {
    let name = str_of(pr, "name").unwrap_or_default();
    let selector = pr.get("selector").filter(|s| !s.is_null());
    if !name.is_empty() {
        for m in path_segment_errors(name) {
            errs.invalid("spec.paramRef.name", quote(name), &m);
        }
        if selector.is_some() {
            errs.forbidden(
                "spec.paramRef.name",
                "name and selector are mutually exclusive",
            );
        }
    }
    if let Some(sel) = selector {
        validate_label_selector(sel, "spec.paramRef.selector", errs);
        if !name.is_empty() {
            errs.forbidden(
                "spec.paramRef.selector",
                "name and selector are mutually exclusive",
            );
        }
    }
    if name.is_empty() && selector.is_none() {
        errs.required("spec.paramRef", "one of name or selector must be specified");
    }
    match str_of(pr, "parameterNotFoundAction").filter(|s| !s.is_empty()) {
        None => errs.required("spec.paramRef.parameterNotFoundAction", ""),
        Some("Deny" | "Allow") => {}
        Some(other) => errs.not_supported(
            "spec.paramRef.parameterNotFoundAction",
            other,
            &["Deny", "Allow"],
        ),
    }
}

/// Validates a ValidatingAdmissionPolicyBinding as kube-apiserver would on create or update.
pub fn validate_binding(obj: &Value) -> Vec<FieldError> {
    let mut errs = Errors(Vec::new());
    let spec = obj.get("spec").unwrap_or(&Value::Null);
    validate_binding_head(spec, &mut errs);
    let actions = strings_of(spec, "validationActions");
    let mut seen = HashSet::new();
    for (i, a) in actions.iter().enumerate() {
        if !["Audit", "Deny", "Warn"].contains(a) {
            errs.not_supported(
                &format!("spec.validationActions[{i}]"),
                a,
                &["Audit", "Deny", "Warn"],
            );
        }
        if !seen.insert(*a) {
            errs.duplicate(&format!("spec.validationActions[{i}]"), a);
        }
    }
    if seen.contains("Deny") && seen.contains("Warn") {
        errs.invalid(
            "spec.validationActions",
            json_list(&actions),
            "must not contain both Deny and Warn (repeating the same validation failure information in the API response and headers serves no purpose)",
        );
    }
    if seen.is_empty() {
        errs.required(
            "spec.validationActions",
            "at least one validation action is required",
        );
    }
    errs.0
}

/// The operations a mutating policy or binding may match: mutations apply to writes only.
const MUTATING_OPERATIONS: [&str; 4] = ["*", "CONNECT", "CREATE", "UPDATE"];

/// Each resource rule's operations must be ones a mutation can apply to; the error's path has
/// no rule index, as upstream reports it.
fn validate_mutating_operations(m: &Value, path: &str, errs: &mut Errors) {
    for rule in list_of(m, "resourceRules") {
        for op in strings_of(rule, "operations") {
            if !MUTATING_OPERATIONS.contains(&op) {
                errs.not_supported(
                    &format!("{path}.resourceRules.operations"),
                    op,
                    &MUTATING_OPERATIONS,
                );
            }
        }
    }
}

/// Validates a MutatingAdmissionPolicy as kube-apiserver would on create or update.
pub fn validate_mutating_policy(obj: &Value, envs: &Environments<'_>) -> Vec<FieldError> {
    let mut errs = Errors(Vec::new());
    let spec = obj.get("spec").unwrap_or(&Value::Null);
    let has_params = validate_policy_head(spec, &mut errs);
    if let Some(mc) = spec.get("matchConstraints").filter(|m| !m.is_null()) {
        validate_mutating_operations(mc, "spec.matchConstraints", &mut errs);
    }
    validate_match_conditions(spec, has_params, envs, &mut errs);
    let env = validate_variables(&variables_of(spec), has_params, envs, &mut errs);
    let mutations = list_of(spec, "mutations");
    if mutations.is_empty() {
        errs.required("spec.mutations", "mutations must contain at least one item");
    }
    for (i, m) in mutations.iter().enumerate() {
        validate_mutation(m, &format!("spec.mutations[{i}]"), &env, envs, &mut errs);
    }
    match str_of(spec, "reinvocationPolicy").filter(|s| !s.is_empty()) {
        None => errs.required("spec.reinvocationPolicy", ""),
        Some("Never" | "IfNeeded") => {}
        Some(other) => {
            errs.not_supported("spec.reinvocationPolicy", other, &["IfNeeded", "Never"]);
        }
    }
    errs.0
}

/// One mutation: its patch type decides which expression field must be set, and what the
/// expression must evaluate to.
fn validate_mutation(m: &Value, path: &str, env: &Env, envs: &Environments<'_>, errs: &mut Errors) {
    const APPLY: &str = "applyConfiguration";
    const PATCH: &str = "jsonPatch";
    let given = |key: &str| m.get(key).filter(|v| !v.is_null());
    let patch_type = str_of(m, "patchType").unwrap_or_default();
    let (field, other, want) = match patch_type {
        "" => return errs.required(&format!("{path}.patchType"), ""),
        "ApplyConfiguration" => (APPLY, PATCH, result_types::apply_configuration()),
        "JSONPatch" => (PATCH, APPLY, result_types::json_patch()),
        other => {
            return errs.not_supported(
                &format!("{path}.patchType"),
                other,
                &["ApplyConfiguration", "JSONPatch"],
            );
        }
    };
    match given(field) {
        None => errs.required(
            &format!("{path}.{field}"),
            &format!("must be specified when patchType is {patch_type}"),
        ),
        Some(expr) => {
            let p = format!("{path}.{field}.expression");
            let raw = str_of(expr, "expression").unwrap_or_default();
            let src = raw.trim();
            if src.is_empty() {
                errs.required(&p, "");
            } else if let Err(e) = {
                // Upstream looks both patch types up among the old applyConfiguration
                // expressions; so does celgate.
                let libraries = envs.pick(&envs.apply_configurations, raw);
                compile_checked(
                    &mutation_environment(&with_libraries(env, libraries)),
                    src,
                    &want,
                )
            } {
                expr_error(errs, &p, src, e);
            }
        }
    }
    if given(other).is_some() {
        errs.invalid(
            &format!("{path}.{other}"),
            quote(&format!("{{{other}}}")),
            &format!("must not be specified when patchType is {patch_type}"),
        );
    }
}

/// Validates a MutatingAdmissionPolicyBinding as kube-apiserver would on create or update.
pub fn validate_mutating_binding(obj: &Value) -> Vec<FieldError> {
    let mut errs = Errors(Vec::new());
    let spec = obj.get("spec").unwrap_or(&Value::Null);
    validate_binding_head(spec, &mut errs);
    if let Some(m) = spec.get("matchResources").filter(|m| !m.is_null()) {
        validate_mutating_operations(m, "spec.matchResources", &mut errs);
    }
    errs.0
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn policy(spec: Value) -> Value {
        json!({"metadata": {"name": "p.example.com"}, "spec": spec})
    }

    fn texts(errs: &[FieldError]) -> Vec<String> {
        errs.iter().map(ToString::to_string).collect()
    }

    fn base() -> Value {
        json!({"failurePolicy": "Fail", "matchConstraints": {"matchPolicy": "Equivalent",
            "namespaceSelector": {}, "objectSelector": {},
            "resourceRules": [{"operations": ["CREATE"], "apiGroups": ["apps"], "apiVersions": ["v1"],
                "resources": ["deployments"], "scope": "*"}]},
            "validations": [{"expression": "object.spec.replicas <= 5"}]})
    }

    #[test]
    fn new_expressions_get_the_libraries_of_the_compatibility_version_and_stored_ones_all() {
        // ext.Lists (`sort`) arrived in 1.34.
        let at_1_33 = Compatibility::new(33).expect("in range");
        let mut spec = base();
        spec["validations"] = json!([{"expression": "object.spec.template.spec.containers.map(c, c.name).sort().size() < 5",
            "messageExpression": "'names: ' + object.spec.template.spec.containers.map(c, c.name).sort().join(', ')"}]);
        spec["matchConditions"] = json!([{"name": "sorted",
            "expression": "[2, 1].sort() == [1, 2]"}]);
        let new = policy(spec);
        let created = texts(&validate_policy(&new, &Environments::new(at_1_33, None)));
        assert_eq!(created.len(), 3, "{created:#?}");
        for (err, field) in created.iter().zip([
            "spec.matchConditions[0].expression",
            "spec.validations[0].expression",
            "spec.validations[0].messageExpression",
        ]) {
            assert!(err.starts_with(field), "{err}");
            assert!(err.contains("undeclared reference to 'sort'"), "{err}");
        }
        // The same expressions already stored: an update that keeps them is valid.
        let updated = validate_policy(&new, &Environments::new(at_1_33, Some(&new)));
        assert!(updated.is_empty(), "{:?}", texts(&updated));
        // At the default compatibility version (1.35), new expressions may use the library.
        assert!(validate_policy(&new, &Environments::default()).is_empty());
        // A changed expression is new again.
        let mut changed = new.clone();
        changed["spec"]["validations"][0]["expression"] =
            json!("object.spec.template.spec.containers.map(c, c.name).sort().size() < 6");
        let errs = texts(&validate_policy(
            &changed,
            &Environments::new(at_1_33, Some(&new)),
        ));
        assert_eq!(errs.len(), 1, "{errs:#?}");
        assert!(
            errs[0].starts_with("spec.validations[0].expression"),
            "{errs:#?}"
        );
    }

    #[test]
    fn a_valid_policy_has_no_errors() {
        assert!(validate_policy(&policy(base()), &Environments::default()).is_empty());
    }

    #[test]
    fn expressions_must_compile_to_their_type() {
        let mut spec = base();
        spec["validations"] = json!([
            {"expression": "object.spec.replicas <"},
            {"expression": "1 + 1"},
            {"expression": "true", "messageExpression": "object.metadata.name"},
        ]);
        let errs = texts(&validate_policy(&policy(spec), &Environments::default()));
        assert!(errs[0].starts_with("spec.validations[0].expression: Invalid value: \"object.spec.replicas <\": compilation failed: ERROR: <input>:1:"), "{errs:?}");
        assert_eq!(
            errs[1],
            "spec.validations[1].expression: Invalid value: \"1 + 1\": must evaluate to bool but got int"
        );
        assert_eq!(
            errs[2],
            "spec.validations[2].messageExpression: Invalid value: \"object.metadata.name\": must evaluate to string but got dyn"
        );
    }

    #[test]
    fn a_program_that_cannot_be_built_is_an_internal_error() {
        let mut spec = base();
        spec["validations"] = json!([{"expression": "uint('1.5') > 0u"}]);
        let errs = texts(&validate_policy(&policy(spec), &Environments::default()));
        assert_eq!(
            errs,
            [
                "spec.validations[0].expression: Internal error: program instantiation failed: type conversion error from 'string' to 'uint'"
            ]
        );
    }

    #[test]
    fn program_instantiation_failures_are_internal_errors() {
        let mut spec = base();
        spec["variables"] = json!([{"name": "re", "expression": "'a'.find('(')"}]);
        spec["validations"] = json!([
            {"expression": "object.metadata.name.find('[') == ''"},
            {"expression": "object.metadata.name.find('[')"},
        ]);
        let errs = texts(&validate_policy(&policy(spec), &Environments::default()));
        assert_eq!(
            errs,
            vec![
                "spec.variables[0].expression: Internal error: program instantiation failed: error parsing regexp: missing closing ): `(`",
                "spec.validations[0].expression: Internal error: program instantiation failed: error parsing regexp: missing closing ]: `[`",
                // The result type is checked before the program is built.
                "spec.validations[1].expression: Invalid value: \"object.metadata.name.find('[')\": must evaluate to bool but got string",
            ]
        );
    }

    #[test]
    fn request_and_namespace_object_are_typed() {
        let mut spec = base();
        spec["validations"] = json!([
            {"expression": "request.operation == 'CREATE' && request.userInfo.groups.exists(g, g == 'x')"},
            {"expression": "request.uid == ''"},
            {"expression": "namespaceObject.metadata.labels['env'] == 'prod'"},
        ]);
        let errs = texts(&validate_policy(&policy(spec), &Environments::default()));
        assert_eq!(errs.len(), 1, "{errs:?}");
        assert!(errs[0].starts_with("spec.validations[1].expression: Invalid value: \"request.uid == ''\": compilation failed: ERROR: <input>:1:8: undefined field 'uid'"), "{errs:?}");
    }

    #[test]
    fn field_rules() {
        let mut spec = base();
        spec["validations"] =
            json!([{"expression": "true", "message": "a\nb", "reason": "Unauthorized"}]);
        spec["matchConstraints"]["resourceRules"][0]["operations"] = json!(["*", "CREATE"]);
        spec["variables"] = json!([{"name": "in", "expression": "1"}]);
        let errs = texts(&validate_policy(&policy(spec), &Environments::default()));
        assert_eq!(
            errs,
            vec![
                "spec.matchConstraints.resourceRules[0].operations: Invalid value: [\"*\",\"CREATE\"]: if '*' is present, must not specify other operations",
                "spec.variables[0].name: Invalid value: \"in\": must be a valid CEL identifier",
                "spec.validations[0].message: Invalid value: \"a\\nb\": must not contain line breaks",
                "spec.validations[0].reason: Unsupported value: \"Unauthorized\": supported values: \"Forbidden\", \"Invalid\", \"RequestEntityTooLarge\"",
            ]
        );
    }

    fn mutating(mutations: Value) -> Value {
        let mut spec = base();
        spec.as_object_mut().map(|o| o.remove("validations"));
        spec["reinvocationPolicy"] = json!("Never");
        spec["mutations"] = mutations;
        policy(spec)
    }

    #[test]
    fn mutations_compile_to_their_patch_type() {
        let valid = mutating(json!([
            {"patchType": "ApplyConfiguration", "applyConfiguration": {"expression":
                "Object{spec: Object.spec{replicas: object.spec.replicas + 1}}"}},
            {"patchType": "JSONPatch", "jsonPatch": {"expression":
                "[JSONPatch{op: 'add', path: '/metadata/labels/' + jsonpatch.escapeKey('a/b'), value: 'x'}]"}},
        ]));
        assert!(validate_mutating_policy(&valid, &Environments::default()).is_empty());
        let invalid = mutating(json!([
            {"patchType": "ApplyConfiguration", "applyConfiguration": {"expression": "Object.spec{}"}},
            {"patchType": "JSONPatch", "jsonPatch": {"expression": "JSONPatch{op: 'add'}"}},
            {"patchType": "JSONPatch", "jsonPatch": {"expression": " [JSONPatch{op: 1}] "}},
            {"patchType": "ApplyConfiguration", "applyConfiguration": {"expression": "object"}},
        ]));
        assert_eq!(
            texts(&validate_mutating_policy(
                &invalid,
                &Environments::default()
            )),
            vec![
                "spec.mutations[0].applyConfiguration.expression: Invalid value: \"Object.spec{}\": must evaluate to Object but got Object.spec",
                "spec.mutations[1].jsonPatch.expression: Invalid value: \"JSONPatch{op: 'add'}\": must evaluate to list(JSONPatch) but got JSONPatch",
                "spec.mutations[2].jsonPatch.expression: Invalid value: \"[JSONPatch{op: 1}]\": compilation failed: ERROR: <input>:1:14: expected type of field 'op' is 'string' but provided type is 'int'\n | [JSONPatch{op: 1}]\n | .............^",
                "spec.mutations[3].applyConfiguration.expression: Invalid value: \"object\": must evaluate to Object but got dyn",
            ]
        );
    }

    #[test]
    fn mutating_field_rules() {
        let mut p = mutating(json!([
            {"patchType": "JSONPatch", "applyConfiguration": {"expression": "Object{}"}},
            {"patchType": "ApplyConfiguration", "applyConfiguration": {"expression": " "}},
            {"patchType": "Merge"},
            {"patchType": ""},
        ]));
        p["spec"]["reinvocationPolicy"] = json!("Always");
        p["spec"]["matchConstraints"]["resourceRules"][0]["operations"] = json!(["DELETE"]);
        p["spec"]["variables"] = json!([{"name": "o", "expression": "Object{}"}]);
        assert_eq!(
            texts(&validate_mutating_policy(&p, &Environments::default())),
            vec![
                "spec.matchConstraints.resourceRules.operations: Unsupported value: \"DELETE\": supported values: \"*\", \"CONNECT\", \"CREATE\", \"UPDATE\"",
                "spec.variables[0].expression: Invalid value: \"Object{}\": compilation failed: ERROR: <input>:1:7: undeclared reference to 'Object' (in container '')\n | Object{}\n | ......^",
                "spec.mutations[0].jsonPatch: Required value: must be specified when patchType is JSONPatch",
                "spec.mutations[0].applyConfiguration: Invalid value: \"{applyConfiguration}\": must not be specified when patchType is JSONPatch",
                "spec.mutations[1].applyConfiguration.expression: Required value",
                "spec.mutations[2].patchType: Unsupported value: \"Merge\": supported values: \"ApplyConfiguration\", \"JSONPatch\"",
                "spec.mutations[3].patchType: Required value",
                "spec.reinvocationPolicy: Unsupported value: \"Always\": supported values: \"IfNeeded\", \"Never\"",
            ]
        );
        let mut none = mutating(json!([]));
        none["spec"]
            .as_object_mut()
            .map(|o| o.remove("reinvocationPolicy"));
        assert_eq!(
            texts(&validate_mutating_policy(&none, &Environments::default())),
            vec![
                "spec.mutations: Required value: mutations must contain at least one item",
                "spec.reinvocationPolicy: Required value",
            ]
        );
    }

    #[test]
    fn mutating_bindings() {
        let b = json!({"spec": {"paramRef": {"name": "x", "selector": {}, "parameterNotFoundAction": "Deny"},
            "matchResources": {"matchPolicy": "Exact", "namespaceSelector": {}, "objectSelector": {},
                "resourceRules": [{"operations": ["DELETE"], "apiGroups": [""], "apiVersions": ["v1"],
                    "resources": ["pods"]}]}}});
        assert_eq!(
            texts(&validate_mutating_binding(&b)),
            vec![
                "spec.policyName: Required value",
                "spec.paramRef.name: Forbidden: name and selector are mutually exclusive",
                "spec.paramRef.selector: Forbidden: name and selector are mutually exclusive",
                "spec.matchResources.resourceRules.operations: Unsupported value: \"DELETE\": supported values: \"*\", \"CONNECT\", \"CREATE\", \"UPDATE\"",
            ]
        );
        assert!(validate_mutating_binding(&json!({"spec": {"policyName": "p"}})).is_empty());
    }

    #[test]
    fn bindings() {
        let b = json!({"spec": {"policyName": "p", "validationActions": ["Deny", "Warn"],
            "paramRef": {"name": "x", "selector": {}, "parameterNotFoundAction": "Deny"}}});
        assert_eq!(
            texts(&validate_binding(&b)),
            vec![
                "spec.paramRef.name: Forbidden: name and selector are mutually exclusive",
                "spec.paramRef.selector: Forbidden: name and selector are mutually exclusive",
                "spec.validationActions: Invalid value: [\"Deny\",\"Warn\"]: must not contain both Deny and Warn (repeating the same validation failure information in the API response and headers serves no purpose)",
            ]
        );
        let empty = json!({"spec": {"policyName": "p"}});
        assert_eq!(
            texts(&validate_binding(&empty)),
            vec![
                "spec.validationActions: Required value: at least one validation action is required"
            ]
        );
        assert_eq!(
            invalid_message(
                "ValidatingAdmissionPolicyBinding",
                "admission.celgate.io",
                "b",
                &validate_binding(&empty)
            ),
            "ValidatingAdmissionPolicyBinding.admission.celgate.io \"b\" is invalid: spec.validationActions: Required value: at least one validation action is required"
        );
    }
}
