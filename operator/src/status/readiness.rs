//! Whether a policy or binding, at the generation it has now, is compiled and enforced by this
//! process: its compiled form is in the published snapshot and the webhook configurations
//! covering that snapshot are applied. Also how many params a binding resolves.

use std::sync::Arc;

use celgate_engine::PolicySet;
use celgate_engine::matching::selector_matches;
use celgate_engine::model::{ParamKind, ParamRef};
use celgate_snapshot::{ParamKindEntry, Snapshot};

use crate::policy_kind::PolicyKind;
use crate::serving::registration::Applied;

/// Ready reason: compiled and enforced.
pub const ENFORCED: &str = "Enforced";
/// NotReady reason: an expression does not compile.
pub const COMPILE_ERROR: &str = "CompileError";
/// NotReady reason: kube-apiserver refuses some of the policy's resource rules in a webhook
/// configuration, so the policy is left out of celgate's.
pub const INVALID_RULES: &str = "InvalidRules";
/// NotReady reason: no binding names the policy, so it applies to no request.
pub const NOT_BOUND: &str = "NotBound";
/// NotReady reason: the binding names a policy that does not exist.
pub const POLICY_NOT_FOUND: &str = "PolicyNotFound";
/// NotReady reason: the API server does not serve the paramKind.
pub const PARAM_KIND_NOT_SERVED: &str = "ParamKindNotServed";
/// NotReady reason: celgate may not read the paramKind; the message names the permission to
/// grant and to whom.
pub const PARAM_KIND_FORBIDDEN: &str = "ParamKindForbidden";
/// NotReady reason: the param objects the bindings of the paramKind select are more than
/// celgate keeps (`--param-max-mib`); the message says how much.
pub const PARAMS_TOO_LARGE: &str = "ParamsTooLarge";
/// NotReady reason: the webhook configurations covering this generation could not be applied.
pub const WEBHOOK_NOT_REGISTERED: &str = "WebhookNotRegistered";

/// How an object stands.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Readiness {
    /// This process has not caught up with the object's generation yet (not compiled, not
    /// published, or the webhook registration not applied yet): nothing is written until it
    /// has, so `Ready` is never True before enforcement nor False for a moment.
    Pending,
    /// Compiled and enforced.
    Ready(String),
    /// Not enforced, or enforced with errors, for this reason.
    NotReady {
        /// CamelCase reason.
        reason: &'static str,
        /// What a user reads.
        message: String,
    },
}

impl Readiness {
    fn not_ready(reason: &'static str, message: impl Into<String>) -> Self {
        Self::NotReady {
            reason,
            message: message.into(),
        }
    }
}

/// The message of a compile failure: each failing field with its error.
pub fn compile_message(errors: &[(String, String)]) -> String {
    errors
        .iter()
        .map(|(field, error)| format!("{field}: {error}"))
        .collect::<Vec<_>>()
        .join("\n")
}

/// Whether the paramKind's watch keeps the policy from being enforced, and why.
fn param_kind_problem(snapshot: &Snapshot, kind: &ParamKind) -> Option<Readiness> {
    match snapshot.params.entry(&kind.api_version, &kind.kind) {
        Some(ParamKindEntry::Ready(_)) => None,
        Some(ParamKindEntry::NotServed) => Some(Readiness::not_ready(
            PARAM_KIND_NOT_SERVED,
            celgate_engine::params::not_served(kind),
        )),
        Some(ParamKindEntry::Forbidden(message)) => {
            Some(Readiness::not_ready(PARAM_KIND_FORBIDDEN, &**message))
        }
        Some(ParamKindEntry::TooLarge(message)) => {
            Some(Readiness::not_ready(PARAMS_TOO_LARGE, &**message))
        }
        Some(ParamKindEntry::Syncing) | None => Some(Readiness::Pending),
    }
}

/// Whether the applied webhook configurations cover `compiled` (the same compiled policy is in
/// the set they were built from), else why not.
fn registered(
    applied: &Applied,
    covered: impl Fn(&celgate_engine::PolicySet) -> bool,
) -> Readiness {
    match (&applied.set, &applied.error) {
        (Some(set), _) if covered(set) => Readiness::Ready(String::new()),
        (_, Some(error)) => Readiness::not_ready(WEBHOOK_NOT_REGISTERED, error.clone()),
        _ => Readiness::Pending,
    }
}

/// The compiled policy bound in `set` under `name`, if it is that uid and generation.
fn bound<'a, P: PolicyKind>(
    set: &'a PolicySet,
    name: &str,
    uid: &str,
    generation: i64,
) -> Option<&'a P::Bound> {
    P::bound_named(set, name)
        .iter()
        .find(|b| P::compiled_identity(P::bound_policy(b)) == (name, uid, generation))
}

/// A policy of kind `P` at `uid` and `generation`: Ready when compiled, bound, in the snapshot
/// the webhook serves and covered by the applied webhook configuration. When the snapshot does
/// not hold it, `rule_errors` gives what kube-apiserver refuses in its rules (such a policy is
/// left out) and `unbound_errors` its compile errors (an unbound policy); `has_bindings` says
/// whether a stored binding names it (then the snapshot will hold it once published).
#[allow(clippy::too_many_arguments)]
pub fn policy<P: PolicyKind>(
    name: &str,
    uid: &str,
    generation: i64,
    snapshot: &Snapshot,
    applied: &Applied,
    rule_errors: impl FnOnce() -> Vec<String>,
    unbound_errors: impl FnOnce() -> Vec<(String, String)>,
    has_bindings: bool,
) -> Readiness {
    let Some(published) = bound::<P>(&snapshot.policies, name, uid, generation) else {
        let refused = rule_errors();
        if !refused.is_empty() {
            return Readiness::not_ready(
                INVALID_RULES,
                format!(
                    "kube-apiserver refuses these rules in a webhook configuration, so the policy is left out of celgate's and applies to no request until they are fixed:\n{}",
                    refused.join("\n")
                ),
            );
        }
        if has_bindings {
            return Readiness::Pending;
        }
        let errors = unbound_errors();
        if !errors.is_empty() {
            return Readiness::not_ready(COMPILE_ERROR, compile_message(&errors));
        }
        return Readiness::not_ready(
            NOT_BOUND,
            format!(
                "no {} names this policy, so it applies to no request",
                P::BINDING_KIND
            ),
        );
    };
    let compiled = P::bound_policy(published);
    let errors = P::compile_errors(compiled);
    if !errors.is_empty() {
        return Readiness::not_ready(COMPILE_ERROR, compile_message(&errors));
    }
    if let Some(kind) = P::compiled_param_kind(compiled)
        && let Some(problem) = param_kind_problem(snapshot, kind)
    {
        return problem;
    }
    match registered(applied, |set| {
        bound::<P>(set, name, uid, generation)
            .is_some_and(|b| Arc::ptr_eq(P::bound_policy(b), compiled))
    }) {
        Readiness::Ready(_) => Readiness::Ready(format!(
            "generation {generation} is compiled and enforced through {} binding(s)",
            P::bound_bindings(published).len()
        )),
        other => other,
    }
}

/// A binding of kind `P::Binding` whose converted spec is `binding`. `policy`
/// is the readiness of the policy it names at that policy's stored uid and generation, `None`
/// when no such policy is stored.
pub fn binding<P: PolicyKind>(
    binding: &P::BindingSpec,
    policy: Option<(&str, i64, Readiness)>,
    snapshot: &Snapshot,
    applied: &Applied,
) -> Readiness {
    let (_, policy_name) = P::binding_names(binding);
    let Some((uid, generation, policy_readiness)) = policy else {
        return Readiness::not_ready(
            POLICY_NOT_FOUND,
            format!(
                "{} '{policy_name}' does not exist; this binding applies to no request until it does",
                P::KIND
            ),
        );
    };
    match policy_readiness {
        Readiness::Pending => return Readiness::Pending,
        Readiness::NotReady { reason, message } if reason != NOT_BOUND => {
            return Readiness::not_ready(reason, format!("policy '{policy_name}': {message}"));
        }
        _ => {}
    }
    let in_set = |set: &PolicySet| {
        bound::<P>(set, policy_name, uid, generation).is_some_and(|b| holds::<P>(b, binding))
    };
    if !in_set(&snapshot.policies) {
        return Readiness::Pending;
    }
    match registered(applied, in_set) {
        Readiness::Ready(_) => Readiness::Ready(format!(
            "enforced with policy '{policy_name}' generation {generation}"
        )),
        other => other,
    }
}

/// Whether `bound` holds `binding` as it is. Looked up by name first, as the policy set keeps a
/// policy's bindings in name order and every binding of a status pass asks (comparing each
/// would take bindings² per policy: 100 bindings of a policy, 10,000 comparisons); a binding
/// not found by name is looked for among them all, so the answer holds in any order.
fn holds<P: PolicyKind>(bound: &P::Bound, binding: &P::BindingSpec) -> bool {
    let bindings = P::bound_bindings(bound);
    let (name, _) = P::binding_names(binding);
    match bindings.binary_search_by(|b| P::binding_names(b).0.cmp(name)) {
        // Names are unique within a kind: this one is it.
        Ok(i) => bindings.get(i).is_some_and(|b| **b == *binding),
        Err(_) => bindings.iter().any(|b| **b == *binding),
    }
}

/// How many objects of `kind` the `param_ref` selects now (all namespaces when a namespaced
/// kind's paramRef names none, as each request's namespace is then used); `None` without a
/// paramRef or while the kind's objects are not known.
pub fn resolved_params(
    snapshot: &Snapshot,
    kind: Option<&ParamKind>,
    param_ref: Option<&ParamRef>,
) -> Option<i32> {
    let (kind, param_ref) = (kind?, param_ref?);
    let Some(ParamKindEntry::Ready(store)) = snapshot.params.entry(&kind.api_version, &kind.kind)
    else {
        return None;
    };
    let namespace = param_ref.namespace.as_deref().filter(|n| !n.is_empty());
    let count = store
        .iter()
        .filter(|(ns, name, object)| {
            namespace.is_none_or(|want| !store.namespaced || *ns == want)
                && param_ref.name.as_ref().is_none_or(|n| n == name)
                && param_ref.selector.as_ref().is_none_or(|selector| {
                    let labels = object
                        .get("metadata")
                        .and_then(|m| m.get("labels"))
                        .and_then(serde_json::Value::as_object);
                    selector_matches(selector, labels).unwrap_or(false)
                })
        })
        .count();
    Some(i32::try_from(count).unwrap_or(i32::MAX))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::expect_used, clippy::unwrap_used)]

    use super::*;
    use celgate_crds::{MutatingAdmissionPolicy, ValidatingAdmissionPolicy};
    use celgate_engine::model::{MutatingBindingSpec, ValidatingBindingSpec};
    use celgate_engine::{MutatingPolicy, ValidatingPolicy};

    fn validating_policy(
        name: &str,
        uid: &str,
        generation: i64,
        snapshot: &Snapshot,
        applied: &Applied,
        unbound: impl FnOnce() -> Arc<ValidatingPolicy>,
        has_bindings: bool,
    ) -> Readiness {
        policy::<ValidatingAdmissionPolicy>(
            name,
            uid,
            generation,
            snapshot,
            applied,
            Vec::new,
            || unbound().compile_errors(),
            has_bindings,
        )
    }

    fn mutating_policy(
        name: &str,
        uid: &str,
        generation: i64,
        snapshot: &Snapshot,
        applied: &Applied,
        unbound: impl FnOnce() -> Arc<MutatingPolicy>,
        has_bindings: bool,
    ) -> Readiness {
        policy::<MutatingAdmissionPolicy>(
            name,
            uid,
            generation,
            snapshot,
            applied,
            Vec::new,
            || unbound().compile_errors(),
            has_bindings,
        )
    }

    fn validating_binding(
        spec: &ValidatingBindingSpec,
        policy: Option<(&str, i64, Readiness)>,
        snapshot: &Snapshot,
        applied: &Applied,
    ) -> Readiness {
        binding::<ValidatingAdmissionPolicy>(spec, policy, snapshot, applied)
    }

    fn mutating_binding(
        spec: &MutatingBindingSpec,
        policy: Option<(&str, i64, Readiness)>,
        snapshot: &Snapshot,
        applied: &Applied,
    ) -> Readiness {
        binding::<MutatingAdmissionPolicy>(spec, policy, snapshot, applied)
    }
    use crate::controllers::policy_set;
    use crate::fixtures;
    use celgate_engine::{BoundPolicy, ParamObjects, PolicySet};
    use celgate_kinds::convert;
    use celgate_snapshot::ParamViews;
    use serde_json::json;

    const WIDGET: (&str, &str) = ("example.com/v1", "Widget");

    /// A snapshot with policy `p` (generation 1, `expression`, paramKind if given) bound by `b`,
    /// and the registration that covers it (or not).
    fn published(expression: &str, param_kind: Option<(&str, &str)>) -> (Snapshot, Arc<PolicySet>) {
        let policy = policy_set::compile(&fixtures::policy("p", 1, expression, param_kind));
        let binding = Arc::new(convert::validating_binding(&fixtures::binding("b", "p")));
        let set = Arc::new(PolicySet::new(
            vec![BoundPolicy {
                policy,
                bindings: vec![binding].into(),
            }],
            Vec::new(),
        ));
        let snapshot = Snapshot {
            ready: true,
            policies: set.clone(),
            ..Snapshot::default()
        };
        (snapshot, set)
    }

    fn covering(set: &Arc<PolicySet>) -> Applied {
        Applied {
            set: Some(set.clone()),
            error: None,
        }
    }

    fn policy_readiness(snapshot: &Snapshot, applied: &Applied, generation: i64) -> Readiness {
        validating_policy(
            "p",
            "uid-p",
            generation,
            snapshot,
            applied,
            || unreachable!("p is bound"),
            true,
        )
    }

    fn reason(readiness: &Readiness) -> &'static str {
        match readiness {
            Readiness::NotReady { reason, .. } => reason,
            Readiness::Ready(_) => ENFORCED,
            Readiness::Pending => "Pending",
        }
    }

    #[test]
    fn a_bound_policy_whose_rules_kube_apiserver_refuses_is_not_ready_and_names_the_field() {
        let mut bad = fixtures::policy_json("bad", 1, "true", None);
        bad["spec"]["matchConstraints"]["resourceRules"][0]["apiGroups"] = json!(["*", "apps"]);
        let bad: ValidatingAdmissionPolicy = serde_json::from_value(bad).unwrap();
        // Left out of the set, so the published snapshot does not hold it, though bound.
        let readiness = policy::<ValidatingAdmissionPolicy>(
            "bad",
            "uid-bad",
            1,
            &Snapshot::default(),
            &Applied::default(),
            || bad.rule_errors(),
            || unreachable!("rule errors come first"),
            true,
        );
        let Readiness::NotReady { reason, message } = readiness else {
            panic!("{readiness:?}");
        };
        assert_eq!(reason, INVALID_RULES);
        assert!(
            message.ends_with(
                r#"spec.matchConstraints.resourceRules[0].apiGroups: Invalid value: ["*","apps"]: if '*' is present, must not specify other API groups"#
            ),
            "{message}"
        );
        // Its binding says why it is not enforced.
        let spec = convert::validating_binding(&fixtures::binding("b", "bad"));
        let binding = validating_binding(
            &spec,
            Some(("uid-bad", 1, Readiness::NotReady { reason, message })),
            &Snapshot::default(),
            &Applied::default(),
        );
        assert_eq!(self::reason(&binding), INVALID_RULES);
    }

    #[test]
    fn a_bound_policy_is_ready_only_once_the_registration_covers_its_generation() {
        let (snapshot, set) = published("true", None);
        assert_eq!(
            policy_readiness(&snapshot, &Applied::default(), 1),
            Readiness::Pending
        );
        let ready = policy_readiness(&snapshot, &covering(&set), 1);
        assert_eq!(
            ready,
            Readiness::Ready("generation 1 is compiled and enforced through 1 binding(s)".into())
        );
        // A newer generation than the one published is pending, whatever the registration.
        assert_eq!(
            policy_readiness(&snapshot, &covering(&set), 2),
            Readiness::Pending
        );
        // The registration failed for this set: not ready, with the error.
        let failed = Applied {
            set: None,
            error: Some("cannot apply the webhook configurations: boom".into()),
        };
        assert_eq!(
            policy_readiness(&snapshot, &failed, 1),
            Readiness::NotReady {
                reason: WEBHOOK_NOT_REGISTERED,
                message: "cannot apply the webhook configurations: boom".into()
            }
        );
    }

    #[test]
    fn a_compile_error_is_reported_with_its_text() {
        let (snapshot, set) = published("object.", None);
        let Readiness::NotReady { reason, message } =
            policy_readiness(&snapshot, &covering(&set), 1)
        else {
            panic!("a policy that does not compile is not ready");
        };
        assert_eq!(reason, COMPILE_ERROR);
        assert!(
            message.starts_with("spec.validations[0].expression: "),
            "{message}"
        );
        assert!(message.contains("Syntax error"), "{message}");
    }

    #[test]
    fn param_kinds_not_served_forbidden_or_syncing() {
        let (mut snapshot, set) = published("true", Some(WIDGET));
        let key = (WIDGET.0.to_string(), WIDGET.1.to_string());
        let with = |snapshot: &mut Snapshot, entry: Option<ParamKindEntry>| {
            let mut views = ParamViews::default();
            views.set(&key, entry);
            snapshot.params = Arc::new(views);
        };
        with(&mut snapshot, None);
        assert_eq!(
            policy_readiness(&snapshot, &covering(&set), 1),
            Readiness::Pending
        );
        with(&mut snapshot, Some(ParamKindEntry::NotServed));
        assert_eq!(
            policy_readiness(&snapshot, &covering(&set), 1),
            Readiness::NotReady {
                reason: PARAM_KIND_NOT_SERVED,
                message:
                    "failed to find resource referenced by paramKind: 'example.com/v1, Kind=Widget'"
                        .into()
            }
        );
        let denied = "celgate may not list widgets.example.com (RBAC: grant list, watch on \
                      \"widgets\" in API group \"example.com\" to ServiceAccount \
                      celgate-system/celgate, e.g. with a ClusterRole labelled \
                      admission.celgate.io/aggregate-to-params=true)";
        with(
            &mut snapshot,
            Some(ParamKindEntry::Forbidden(denied.into())),
        );
        assert_eq!(
            policy_readiness(&snapshot, &covering(&set), 1),
            Readiness::NotReady {
                reason: PARAM_KIND_FORBIDDEN,
                message: denied.into()
            }
        );
        let too_large =
            "the Widget objects (example.com/v1) the bindings' paramRefs select take 40.0 MiB, …";
        with(
            &mut snapshot,
            Some(ParamKindEntry::TooLarge(too_large.into())),
        );
        assert_eq!(
            policy_readiness(&snapshot, &covering(&set), 1),
            Readiness::NotReady {
                reason: PARAMS_TOO_LARGE,
                message: too_large.into()
            }
        );
        with(&mut snapshot, Some(ParamKindEntry::Ready(Arc::default())));
        assert_eq!(
            reason(&policy_readiness(&snapshot, &covering(&set), 1)),
            ENFORCED
        );
    }

    #[test]
    fn an_unbound_policy_reports_its_compile_error_or_that_it_is_not_bound() {
        let snapshot = Snapshot {
            ready: true,
            ..Snapshot::default()
        };
        let compile = |e: &str| policy_set::compile(&fixtures::policy("p", 1, e, None));
        let unbound = |e: &'static str| {
            validating_policy(
                "p",
                "uid-p",
                1,
                &snapshot,
                &Applied::default(),
                || compile(e),
                false,
            )
        };
        assert_eq!(reason(&unbound("true")), NOT_BOUND);
        assert_eq!(reason(&unbound("1 +")), COMPILE_ERROR);
        // Bound but not published yet: pending.
        assert_eq!(
            validating_policy(
                "p",
                "uid-p",
                1,
                &snapshot,
                &Applied::default(),
                || compile("true"),
                true
            ),
            Readiness::Pending
        );
    }

    #[test]
    fn a_binding_follows_its_policy_and_its_own_publication() {
        let (snapshot, set) = published("true", None);
        let applied = covering(&set);
        let spec = convert::validating_binding(&fixtures::binding("b", "p"));
        let policy = policy_readiness(&snapshot, &applied, 1);
        assert_eq!(
            validating_binding(
                &spec,
                Some(("uid-p", 1, policy.clone())),
                &snapshot,
                &applied
            ),
            Readiness::Ready("enforced with policy 'p' generation 1".into())
        );
        // The binding changed (another action) and the snapshot has not caught up: pending.
        let mut changed = spec.clone();
        changed.validation_actions = vec![celgate_engine::model::ValidationAction::Warn];
        assert_eq!(
            validating_binding(&changed, Some(("uid-p", 1, policy)), &snapshot, &applied),
            Readiness::Pending
        );
        // Its policy is missing.
        let missing = convert::validating_binding(&fixtures::binding("b", "absent"));
        let Readiness::NotReady { reason, message } =
            validating_binding(&missing, None, &snapshot, &applied)
        else {
            panic!("a binding of a missing policy is not ready");
        };
        assert_eq!(reason, POLICY_NOT_FOUND);
        assert!(message.starts_with("ValidatingAdmissionPolicy 'absent' does not exist"));
        // Its policy does not compile: the binding says so.
        let broken = Readiness::NotReady {
            reason: COMPILE_ERROR,
            message: "spec.validations[0].expression: bad".into(),
        };
        assert_eq!(
            validating_binding(&spec, Some(("uid-p", 1, broken)), &snapshot, &applied),
            Readiness::NotReady {
                reason: COMPILE_ERROR,
                message: "policy 'p': spec.validations[0].expression: bad".into()
            }
        );
    }

    #[test]
    fn a_binding_is_found_among_its_policys_bindings_in_any_order_and_only_as_it_is() {
        let policy = policy_set::compile(&fixtures::policy("p", 1, "true", None));
        let spec =
            |name: &str| Arc::new(convert::validating_binding(&fixtures::binding(name, "p")));
        let mut warn = (*spec("b")).clone();
        warn.validation_actions = vec![celgate_engine::model::ValidationAction::Warn];
        let ready = Readiness::Ready("enforced with policy 'p' generation 1".into());
        for names in [
            ["a", "b", "c", "d"],
            ["d", "c", "b", "a"],
            ["c", "a", "d", "b"],
        ] {
            let set = Arc::new(PolicySet::new(
                vec![BoundPolicy {
                    policy: policy.clone(),
                    bindings: names.iter().map(|n| spec(n)).collect(),
                }],
                Vec::new(),
            ));
            let snapshot = Snapshot {
                ready: true,
                policies: set.clone(),
                ..Snapshot::default()
            };
            let applied = covering(&set);
            let policy = policy_readiness(&snapshot, &applied, 1);
            for name in names {
                assert_eq!(
                    validating_binding(
                        &spec(name),
                        Some(("uid-p", 1, policy.clone())),
                        &snapshot,
                        &applied
                    ),
                    ready,
                    "{name} in {names:?}"
                );
            }
            for other in [warn.clone(), (*spec("e")).clone()] {
                assert_eq!(
                    validating_binding(
                        &other,
                        Some(("uid-p", 1, policy.clone())),
                        &snapshot,
                        &applied
                    ),
                    Readiness::Pending,
                    "{} in {names:?} as it is not published",
                    other.name
                );
            }
        }
    }

    #[test]
    fn a_mutating_policy_is_ready_by_the_validating_rule() {
        let map = fixtures::mutating_policy("m", "Fail", "Never", "configmaps");
        let compiled = policy_set::compile(&map);
        let binding = Arc::new(convert::mutating_binding(&fixtures::mutating_binding(
            "mb", "m",
        )));
        let set = Arc::new(PolicySet::new(
            Vec::new(),
            vec![celgate_engine::BoundMutatingPolicy {
                policy: compiled.clone(),
                bindings: vec![binding.clone()].into(),
            }],
        ));
        let snapshot = Snapshot {
            ready: true,
            policies: set.clone(),
            ..Snapshot::default()
        };
        let readiness = |applied: &Applied| {
            mutating_policy(
                "m",
                "uid-m",
                1,
                &snapshot,
                applied,
                || unreachable!("m is bound"),
                true,
            )
        };
        // Published but its webhook configuration not applied yet: nothing is reported.
        assert_eq!(readiness(&Applied::default()), Readiness::Pending);
        let ready = readiness(&covering(&set));
        assert_eq!(reason(&ready), ENFORCED, "{ready:?}");
        assert_ne!(reason(&ready), "MutationNotEnforced");
        let failed = Applied {
            set: None,
            error: Some("cannot apply".into()),
        };
        assert_eq!(reason(&readiness(&failed)), WEBHOOK_NOT_REGISTERED);

        // Its binding follows it.
        let bound = mutating_binding(
            &binding,
            Some(("uid-m", 1, ready)),
            &snapshot,
            &covering(&set),
        );
        assert_eq!(reason(&bound), ENFORCED);
        let orphan = convert::mutating_binding(&fixtures::mutating_binding("mb2", "absent"));
        let missing = mutating_binding(&orphan, None, &snapshot, &covering(&set));
        assert_eq!(reason(&missing), POLICY_NOT_FOUND);

        // Unbound: NotBound, or its compile error.
        let empty = Snapshot::default();
        let unbound = mutating_policy(
            "m",
            "uid-m",
            1,
            &empty,
            &Applied::default(),
            || compiled.clone(),
            false,
        );
        assert_eq!(reason(&unbound), NOT_BOUND);
        let mut broken = fixtures::mutating_policy("m", "Fail", "Never", "configmaps");
        broken.spec.mutations.as_mut().unwrap()[0]
            .apply_configuration
            .as_mut()
            .unwrap()
            .expression = Some("Object{".into());
        let broken = policy_set::compile(&broken);
        let unbound = mutating_policy(
            "m",
            "uid-m",
            1,
            &empty,
            &Applied::default(),
            || broken,
            false,
        );
        assert_eq!(reason(&unbound), COMPILE_ERROR);
    }

    #[test]
    fn resolved_params_count_what_the_param_ref_selects() {
        let mut objects = ParamObjects::new(true);
        for (ns, name, tier) in [
            ("a", "limits", "gold"),
            ("b", "limits", "silver"),
            ("b", "other", "gold"),
        ] {
            let object =
                json!({"metadata": {"name": name, "namespace": ns, "labels": {"tier": tier}}});
            objects.insert(ns, name, Arc::new(object));
        }
        let mut views = ParamViews::default();
        views.set(
            &(WIDGET.0.to_string(), WIDGET.1.to_string()),
            Some(ParamKindEntry::Ready(Arc::new(objects))),
        );
        let snapshot = Snapshot {
            params: Arc::new(views),
            ..Snapshot::default()
        };
        let kind = ParamKind {
            api_version: WIDGET.0.into(),
            kind: WIDGET.1.into(),
        };
        let by_name = |namespace: Option<&str>| ParamRef {
            name: Some("limits".into()),
            namespace: namespace.map(str::to_string),
            ..ParamRef::default()
        };
        let count = |r: &ParamRef| resolved_params(&snapshot, Some(&kind), Some(r));
        assert_eq!(count(&by_name(None)), Some(2));
        assert_eq!(count(&by_name(Some("a"))), Some(1));
        assert_eq!(count(&by_name(Some("c"))), Some(0));
        let gold = ParamRef {
            selector: Some(celgate_engine::model::LabelSelector {
                match_labels: [("tier".to_string(), "gold".to_string())].into(),
                ..Default::default()
            }),
            ..ParamRef::default()
        };
        assert_eq!(count(&gold), Some(2));
        assert_eq!(resolved_params(&snapshot, Some(&kind), None), None);
        let other = ParamKind {
            api_version: "v1".into(),
            kind: "ConfigMap".into(),
        };
        assert_eq!(resolved_params(&snapshot, Some(&other), Some(&gold)), None);
    }
}
