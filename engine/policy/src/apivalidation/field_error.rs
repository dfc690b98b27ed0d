//! The field error a rejected write reports, as `k8s.io/apimachinery/pkg/util/validation/field`
//! shapes it: its type, its text, the message of the whole rejection, and the collector the field
//! rules push errors into (with Go's renderings of a bad value).

use std::fmt;

/// The type of a field error, as `field.ErrorType` names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FieldErrorType {
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

impl FieldErrorType {
    /// The text kube-apiserver prints for the type.
    pub fn as_str(self) -> &'static str {
        match self {
            FieldErrorType::Required => "Required value",
            FieldErrorType::Invalid => "Invalid value",
            FieldErrorType::Forbidden => "Forbidden",
            FieldErrorType::NotSupported => "Unsupported value",
            FieldErrorType::Duplicate => "Duplicate value",
            FieldErrorType::TooMany => "Too many",
            FieldErrorType::Internal => "Internal error",
        }
    }

    /// The `reason` of a status cause for the type.
    pub fn cause_reason(self) -> &'static str {
        match self {
            FieldErrorType::Required => "FieldValueRequired",
            FieldErrorType::Invalid => "FieldValueInvalid",
            FieldErrorType::Forbidden => "FieldValueForbidden",
            FieldErrorType::NotSupported => "FieldValueNotSupported",
            FieldErrorType::Duplicate => "FieldValueDuplicate",
            FieldErrorType::TooMany => "FieldValueTooMany",
            FieldErrorType::Internal => "InternalError",
        }
    }
}

/// One field error.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FieldError {
    /// The field path, e.g. `spec.validations[0].expression`.
    pub field: String,
    /// The error type.
    pub kind: FieldErrorType,
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
pub(super) fn quote(s: &str) -> String {
    serde_json::Value::String(s.to_string()).to_string()
}

/// A string list as kube-apiserver renders a bad value: compact JSON.
pub(super) fn json_list(items: &[&str]) -> String {
    serde_json::to_string(items).unwrap_or_default()
}

/// The field errors of one object, in the order the rules find them.
pub(super) struct Errors(pub(super) Vec<FieldError>);

impl Errors {
    pub(super) fn push(
        &mut self,
        field: &str,
        kind: FieldErrorType,
        value: Option<String>,
        detail: &str,
    ) {
        self.0.push(FieldError {
            field: field.to_string(),
            kind,
            value,
            detail: detail.to_string(),
        });
    }
    pub(super) fn required(&mut self, field: &str, detail: &str) {
        self.push(field, FieldErrorType::Required, None, detail);
    }
    pub(super) fn invalid(&mut self, field: &str, value: String, detail: &str) {
        self.push(field, FieldErrorType::Invalid, Some(value), detail);
    }
    pub(super) fn not_supported(&mut self, field: &str, value: &str, supported: &[&str]) {
        let list = supported
            .iter()
            .map(|s| quote(s))
            .collect::<Vec<_>>()
            .join(", ");
        self.push(
            field,
            FieldErrorType::NotSupported,
            Some(quote(value)),
            &format!("supported values: {list}"),
        );
    }
    pub(super) fn duplicate(&mut self, field: &str, value: &str) {
        self.push(field, FieldErrorType::Duplicate, Some(quote(value)), "");
    }
    pub(super) fn forbidden(&mut self, field: &str, detail: &str) {
        self.push(field, FieldErrorType::Forbidden, None, detail);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn required(field: &str, detail: &str) -> FieldError {
        FieldError {
            field: field.into(),
            kind: FieldErrorType::Required,
            value: None,
            detail: detail.into(),
        }
    }

    #[test]
    fn one_error_is_the_message_and_several_are_a_list() {
        let actions = required(
            "spec.validationActions",
            "at least one validation action is required",
        );
        assert_eq!(
            invalid_message(
                "ValidatingAdmissionPolicyBinding",
                "admission.celgate.io",
                "b",
                std::slice::from_ref(&actions)
            ),
            "ValidatingAdmissionPolicyBinding.admission.celgate.io \"b\" is invalid: spec.validationActions: Required value: at least one validation action is required"
        );
        let name = required("spec.policyName", "");
        assert_eq!(
            invalid_message(
                "ValidatingAdmissionPolicyBinding",
                "admission.celgate.io",
                "b",
                &[name, actions]
            ),
            "ValidatingAdmissionPolicyBinding.admission.celgate.io \"b\" is invalid: [spec.policyName: Required value, spec.validationActions: Required value: at least one validation action is required]"
        );
    }
}
