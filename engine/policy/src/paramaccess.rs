//! The authorization check kube-apiserver runs when a policy or binding is written: the writer
//! must be able to read the params the object refers to, or a policy could reveal params its
//! author may not read. Users in `system:masters` (allowed to escalate) are not checked.

use celgate_cel::authz::{AuthzTarget, Decision, ResourceAttributes, Subject};
use celgate_cel::{Authorizer, AuthzRequest};
use serde_json::Value;

use crate::apivalidation::{FieldError, FieldErrorType};
use crate::model::ParamKind;

/// Who writes the object, from the AdmissionRequest's `userInfo`.
#[derive(Debug, Clone, Default)]
pub struct Writer {
    /// The user name.
    pub username: String,
    /// The user's uid.
    pub uid: String,
    /// The user's groups.
    pub groups: Vec<String>,
    /// Extra attributes, sorted by key.
    pub extra: std::collections::BTreeMap<String, Vec<String>>,
}

impl Writer {
    /// Reads `userInfo`.
    pub fn from_user_info(v: &Value) -> Self {
        let strings = |v: Option<&Value>| -> Vec<String> {
            v.and_then(Value::as_array)
                .into_iter()
                .flatten()
                .filter_map(|g| g.as_str().map(str::to_string))
                .collect()
        };
        let text = |k: &str| {
            v.get(k)
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_string()
        };
        Writer {
            username: text("username"),
            uid: text("uid"),
            groups: strings(v.get("groups")),
            extra: v
                .get("extra")
                .and_then(Value::as_object)
                .into_iter()
                .flatten()
                .map(|(k, vals)| (k.clone(), strings(Some(vals))))
                .collect(),
        }
    }

    /// The user as kube-apiserver prints it in these messages (Go's `%v` of its user info:
    /// `&{<name> <uid> [<groups>] map[<key>:[<values>]]}`).
    pub fn go_display(&self) -> String {
        let extra: Vec<String> = self
            .extra
            .iter()
            .map(|(k, v)| format!("{k}:[{}]", v.join(" ")))
            .collect();
        format!(
            "&{{{} {} [{}] map[{}]}}",
            self.username,
            self.uid,
            self.groups.join(" "),
            extra.join(" ")
        )
    }

    fn may_escalate(&self) -> bool {
        self.groups.iter().any(|g| g == "system:masters")
    }
}

/// Resolves a param kind to its resource (plural); `None` when the API server does not know it.
pub type ResolveResource<'a> = &'a dyn Fn(&ParamKind) -> Option<String>;

fn param_kind_of(obj: &Value) -> Option<ParamKind> {
    let pk = obj.get("spec")?.get("paramKind")?;
    let s = |k: &str| {
        pk.get(k)
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_string()
    };
    Some(ParamKind {
        api_version: s("apiVersion"),
        kind: s("kind"),
    })
}

fn allowed(authz: &dyn Authorizer, verb: &str, attrs: ResourceAttributes) -> bool {
    let decision = authz.check(&AuthzRequest {
        subject: Subject::RequestUser,
        verb: verb.into(),
        target: AuthzTarget::Resource(attrs),
    });
    decision.decision == Decision::Allow
}

fn group_of(kind: &ParamKind) -> String {
    match kind.api_version.split_once('/') {
        Some((group, _)) => group.to_string(),
        None if kind.api_version.is_empty() => "*".into(),
        None => String::new(),
    }
}

fn forbidden(field: &str, detail: String) -> Vec<FieldError> {
    vec![FieldError {
        field: field.into(),
        kind: FieldErrorType::Forbidden,
        value: None,
        detail,
    }]
}

/// The check for a ValidatingAdmissionPolicy: on create with a paramKind, or when an update
/// changes it, the writer needs `get` on all objects of that kind.
pub fn check_policy(
    obj: &Value,
    old: Option<&Value>,
    writer: &Writer,
    resolve: ResolveResource<'_>,
    authz: &dyn Authorizer,
) -> Vec<FieldError> {
    let Some(kind) = param_kind_of(obj) else {
        return Vec::new();
    };
    if writer.may_escalate() || old.and_then(param_kind_of).as_ref() == Some(&kind) {
        return Vec::new();
    }
    let attrs = ResourceAttributes {
        group: group_of(&kind),
        resource: resolve(&kind).unwrap_or_else(|| "*".into()),
        namespace: "*".into(),
        name: "*".into(),
        ..Default::default()
    };
    if allowed(authz, "get", attrs) {
        return Vec::new();
    }
    forbidden(
        "spec.paramKind",
        format!(
            "user {} must have \"get\" permission on all objects of the referenced paramKind (kind={}, apiVersion={})",
            writer.go_display(),
            kind.kind,
            kind.api_version
        ),
    )
}

/// Which binding kind is written: kube-apiserver words their final denial differently (the
/// mutating one swaps the user and the verb).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BindingKind {
    /// A ValidatingAdmissionPolicyBinding.
    Validating,
    /// A MutatingAdmissionPolicyBinding.
    Mutating,
}

/// What the check knows of the policy a binding names.
#[derive(Clone, Copy, Debug)]
pub enum BoundPolicyParams<'a> {
    /// No such policy.
    Missing,
    /// The policy exists, with this paramKind (or none).
    Found(Option<&'a ParamKind>),
}

/// The check for a binding: on create with a paramRef, or when an update changes the paramRef
/// or the policy name, the writer needs `get` (`list` without a name) on what the paramRef
/// names: of the policy's paramKind, or of any resource when the policy is missing, has no
/// paramKind or its paramKind does not resolve.
pub fn check_binding(
    obj: &Value,
    old: Option<&Value>,
    writer: &Writer,
    kind: BindingKind,
    policy: BoundPolicyParams<'_>,
    resolve: ResolveResource<'_>,
    authz: &dyn Authorizer,
) -> Vec<FieldError> {
    let spec = |o: &Value| o.get("spec").cloned().unwrap_or(Value::Null);
    let new_spec = spec(obj);
    let Some(param_ref) = new_spec.get("paramRef").filter(|p| !p.is_null()) else {
        return Vec::new();
    };
    let unchanged = old.is_some_and(|o| {
        let o = spec(o);
        o.get("paramRef") == Some(param_ref) && o.get("policyName") == new_spec.get("policyName")
    });
    if writer.may_escalate() || unchanged {
        return Vec::new();
    }
    let s = |k: &str| {
        param_ref
            .get(k)
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_string()
    };
    let name = s("name");
    let verb = if name.is_empty() { "list" } else { "get" };
    let user = writer.go_display();
    // Why the check asks about all resources, if it does: the start of the denial.
    let (group, resource, unresolved) = match policy {
        BoundPolicyParams::Missing => {
            let policy_name = new_spec
                .get("policyName")
                .and_then(Value::as_str)
                .unwrap_or_default();
            let why = format!("unable to get policy {policy_name}");
            ("*".to_string(), "*".to_string(), Some(why))
        }
        BoundPolicyParams::Found(None) => ("*".into(), "*".into(), None),
        BoundPolicyParams::Found(Some(pk)) if pk.api_version.matches('/').count() > 1 => {
            let why = format!(
                "unable to parse paramKind &{{{} {}}}",
                pk.api_version, pk.kind
            );
            ("*".into(), "*".into(), Some(why))
        }
        BoundPolicyParams::Found(Some(pk)) => match resolve(pk) {
            Some(resource) => (group_of(pk), resource, None),
            None => {
                let why = format!(
                    "unable to resolve paramKind &{{{} {}}}",
                    pk.api_version, pk.kind
                );
                (group_of(pk), "*".into(), Some(why))
            }
        },
    };
    let attrs = ResourceAttributes {
        group,
        resource,
        namespace: s("namespace"),
        name,
        ..Default::default()
    };
    if allowed(authz, verb, attrs) {
        return Vec::new();
    }
    let detail = match (unresolved, kind) {
        (Some(why), _) => format!(
            "{why} to determine minimum required permissions and user {user} does not have \"{verb}\" permission for all groups, versions and resources"
        ),
        (None, BindingKind::Validating) => format!(
            "user {user} does not have \"{verb}\" permission on the object referenced by paramRef"
        ),
        (None, BindingKind::Mutating) => format!(
            "user {verb} does not have \"{user}\" permission on the object referenced by paramRef"
        ),
    };
    forbidden("spec.paramRef", detail)
}

#[cfg(test)]
mod tests {
    use super::*;
    use celgate_cel::AuthzDecision;
    use serde_json::json;
    use std::sync::Mutex;

    /// Allows what it is told to, and records every question.
    struct Fake {
        allow: bool,
        asked: Mutex<Vec<AuthzRequest>>,
    }

    impl Authorizer for Fake {
        fn check(&self, req: &AuthzRequest) -> AuthzDecision {
            if let Ok(mut a) = self.asked.lock() {
                a.push(req.clone());
            }
            AuthzDecision {
                decision: if self.allow {
                    Decision::Allow
                } else {
                    Decision::Deny
                },
                reason: String::new(),
                error: None,
            }
        }
    }

    fn fake(allow: bool) -> Fake {
        Fake {
            allow,
            asked: Mutex::new(Vec::new()),
        }
    }

    fn bob() -> Writer {
        Writer::from_user_info(&json!({"username": "bob", "groups": ["system:authenticated"]}))
    }

    fn configmaps(kind: &ParamKind) -> Option<String> {
        (kind.kind == "ConfigMap").then(|| "configmaps".to_string())
    }

    #[test]
    fn policy_writers_must_read_the_param_kind() {
        let policy = json!({"spec": {"paramKind": {"apiVersion": "v1", "kind": "ConfigMap"}}});
        let denied = check_policy(&policy, None, &bob(), &configmaps, &fake(false));
        assert_eq!(
            denied.iter().map(ToString::to_string).collect::<Vec<_>>(),
            vec![
                "spec.paramKind: Forbidden: user &{bob  [system:authenticated] map[]} must have \"get\" permission on all objects of the referenced paramKind (kind=ConfigMap, apiVersion=v1)"
            ]
        );
        let authz = fake(true);
        assert!(check_policy(&policy, None, &bob(), &configmaps, &authz).is_empty());
        let asked = authz.asked.lock().map(|a| a.clone()).unwrap_or_default();
        assert_eq!(asked.len(), 1);
        assert!(
            matches!(&asked[0].target, AuthzTarget::Resource(r) if r.resource == "configmaps" && r.group.is_empty() && r.name == "*")
        );
        // Unchanged on update, or a writer allowed to escalate: no check.
        assert!(check_policy(&policy, Some(&policy), &bob(), &configmaps, &fake(false)).is_empty());
        let admin = Writer::from_user_info(&json!({"username": "a", "groups": ["system:masters"]}));
        assert!(check_policy(&policy, None, &admin, &configmaps, &fake(false)).is_empty());
    }

    #[test]
    fn binding_writers_must_read_the_referenced_param() {
        let kind = ParamKind {
            api_version: "v1".into(),
            kind: "ConfigMap".into(),
        };
        let binding = json!({"spec": {"policyName": "p", "paramRef": {"name": "limits", "namespace": "team"}}});
        let denied = check_binding(
            &binding,
            None,
            &bob(),
            BindingKind::Validating,
            BoundPolicyParams::Found(Some(&kind)),
            &configmaps,
            &fake(false),
        );
        assert_eq!(
            denied.iter().map(ToString::to_string).collect::<Vec<_>>(),
            vec![
                "spec.paramRef: Forbidden: user &{bob  [system:authenticated] map[]} does not have \"get\" permission on the object referenced by paramRef"
            ]
        );
        let authz = fake(true);
        assert!(
            check_binding(
                &binding,
                None,
                &bob(),
                BindingKind::Validating,
                BoundPolicyParams::Found(Some(&kind)),
                &configmaps,
                &authz
            )
            .is_empty()
        );
        let asked = authz.asked.lock().map(|a| a.clone()).unwrap_or_default();
        assert!(
            matches!(&asked[0].target, AuthzTarget::Resource(r) if r.name == "limits" && r.namespace == "team")
        );
        let no_ref = json!({"spec": {"policyName": "p"}});
        assert!(
            check_binding(
                &no_ref,
                None,
                &bob(),
                BindingKind::Validating,
                BoundPolicyParams::Found(Some(&kind)),
                &configmaps,
                &fake(false)
            )
            .is_empty()
        );
    }

    #[test]
    fn binding_denials_follow_upstream_wording_per_kind_and_case() {
        let kind = ParamKind {
            api_version: "v1".into(),
            kind: "ConfigMap".into(),
        };
        let by_name = json!({"spec": {"policyName": "p", "paramRef": {"name": "limits"}}});
        let by_selector = json!({"spec": {"policyName": "p", "paramRef": {"selector": {}}}});
        let deny = |obj: &Value, kind_: BindingKind, policy: BoundPolicyParams<'_>| {
            let authz = fake(false);
            let out = check_binding(obj, None, &bob(), kind_, policy, &configmaps, &authz);
            let verb = authz
                .asked
                .lock()
                .map(|a| a[0].verb.clone())
                .unwrap_or_default();
            (
                out.first().map(|e| e.detail.clone()).unwrap_or_default(),
                verb,
            )
        };
        let user = "&{bob  [system:authenticated] map[]}";
        assert_eq!(
            deny(
                &by_name,
                BindingKind::Mutating,
                BoundPolicyParams::Found(Some(&kind))
            ),
            (
                format!(
                    "user get does not have \"{user}\" permission on the object referenced by paramRef"
                ),
                "get".to_string()
            )
        );
        assert_eq!(
            deny(
                &by_selector,
                BindingKind::Validating,
                BoundPolicyParams::Found(Some(&kind))
            ),
            (
                format!(
                    "user {user} does not have \"list\" permission on the object referenced by paramRef"
                ),
                "list".to_string()
            )
        );
        assert_eq!(
            deny(
                &by_name,
                BindingKind::Validating,
                BoundPolicyParams::Missing
            )
            .0,
            format!(
                "unable to get policy p to determine minimum required permissions and user {user} does not have \"get\" permission for all groups, versions and resources"
            )
        );
        let nope = ParamKind {
            api_version: "example.com/v1".into(),
            kind: "Nope".into(),
        };
        assert_eq!(
            deny(
                &by_name,
                BindingKind::Mutating,
                BoundPolicyParams::Found(Some(&nope))
            )
            .0,
            format!(
                "unable to resolve paramKind &{{example.com/v1 Nope}} to determine minimum required permissions and user {user} does not have \"get\" permission for all groups, versions and resources"
            )
        );
    }
}
