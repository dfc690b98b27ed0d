//! celgate's policy engine, with no IO: policies are compiled once ([`compile`]), requests are
//! matched against them ([`matching`]) and evaluated into one admission outcome
//! ([`mod@validate`]), or mutated by mutating policies ([`mod@mutate`]).
//! The operator feeds it plain data ([`model`]); the webhook feeds it decoded requests
//! ([`request`]) and a [`PolicySet`] snapshot.

pub mod apivalidation;
pub mod autogen;
mod check;
pub mod compile;
mod context;
pub mod declarations;
pub mod environment;
mod evaluation;
pub mod exception;
mod index;
pub mod json_text;
mod match_conditions;
pub mod matching;
pub mod model;
pub mod mutate;
pub mod paramaccess;
pub mod params;
pub mod pod_controller;
pub mod received;
pub mod request;
pub mod schema;
mod scope;
pub mod trace;
pub mod typecheck;
pub mod validate;

use std::sync::Arc;

pub use compile::{ValidatingPolicy, compile_validating};
pub use context::Context;
pub use exception::{Exception, ExceptionSet, ExceptionsAt};
pub use matching::Namespaces;
pub use mutate::{
    BoundMutatingPolicy, JsonPatchText, KindSchemas, MutatingPolicy, MutationOutcome,
};
pub use params::{ParamKindState, ParamObjects, Params};
pub use request::{Request, RequestError};
pub use validate::{BindingOutcome, BoundPolicy, Outcome, validate};

/// The API group of celgate's own kinds; policies never apply to them.
pub const GROUP: &str = "admission.celgate.io";

/// Everything the webhook needs to decide requests: the bound policies of one snapshot, filed
/// by the resources they can match so that a request meets only the policies for its resource.
#[derive(Debug, Default, Clone)]
pub struct PolicySet {
    validating: Vec<BoundPolicy>,
    mutating: Vec<BoundMutatingPolicy>,
    validating_index: index::ResourceIndex,
    mutating_index: index::ResourceIndex,
    param_kinds: Vec<model::ParamKind>,
    uses_authorizer: bool,
    unbound: Unbound,
    wildcard: model::WildcardOperations,
}

/// A bound policy of either kind, as [`with_autogen_variants`] reads it.
trait Bound {
    type Kind: compile::PolicyKind;
    type Binding: autogen::BindingMatch;
    fn policy(&self) -> &Arc<compile::CompiledPolicy<Self::Kind>>;
    fn bindings(&self) -> &[Arc<Self::Binding>];
}

impl Bound for BoundPolicy {
    type Kind = compile::Validating;
    type Binding = model::ValidatingBindingSpec;
    fn policy(&self) -> &Arc<ValidatingPolicy> {
        &self.policy
    }
    fn bindings(&self) -> &[Arc<Self::Binding>] {
        &self.bindings
    }
}

impl Bound for BoundMutatingPolicy {
    type Kind = mutate::Mutating;
    type Binding = model::MutatingBindingSpec;
    fn policy(&self) -> &Arc<MutatingPolicy> {
        &self.policy
    }
    fn bindings(&self) -> &[Arc<Self::Binding>] {
        &self.bindings
    }
}

/// `bound` with each policy's autogen variants bound right after it, under its bindings as the
/// variant matches them ([`autogen::binding_match`]).
fn with_autogen_variants<B: Bound>(
    bound: Vec<B>,
    make: impl Fn(Arc<compile::CompiledPolicy<B::Kind>>, Arc<[Arc<B::Binding>]>) -> B,
) -> Vec<B> {
    let mut out = Vec::with_capacity(bound.len());
    for b in bound {
        let bindings = b.bindings();
        let variants: Vec<B> = (b.policy().autogen.iter())
            .filter_map(|v| {
                let controller = compile::PolicySpec::pod_controller(&v.spec)?;
                let bindings = (bindings.iter())
                    .map(|binding| {
                        Arc::new(autogen::BindingMatch::for_controller(
                            &**binding, controller,
                        ))
                    })
                    .collect();
                Some(make(v.clone(), bindings))
            })
            .collect();
        out.push(b);
        out.extend(variants);
    }
    out
}

/// The compiled policies of a snapshot that no binding names: they decide nothing, but their
/// rules are registered with the API server all the same, so binding one takes effect without
/// a webhook configuration change.
#[derive(Debug, Default, Clone)]
pub struct Unbound {
    /// Validating policies without a binding, by name.
    pub validating: Vec<std::sync::Arc<ValidatingPolicy>>,
    /// Mutating policies without a binding, by name.
    pub mutating: Vec<std::sync::Arc<MutatingPolicy>>,
}

/// One of celgate's mutating webhooks: the mutating policies of one failure policy and one
/// reinvocation policy (the API server reinvokes a webhook as a whole, so policies that must
/// run once are served apart from those that may run again).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MutatingWebhookGroup {
    /// The policies' failurePolicy.
    pub failure: model::FailurePolicy,
    /// The policies' reinvocationPolicy.
    pub reinvocation: model::ReinvocationPolicy,
}

impl MutatingWebhookGroup {
    /// The four groups, in the order the API server calls celgate's mutating webhooks:
    /// fail-closed before fail-open, run-once before reinvocable.
    pub const ALL: [MutatingWebhookGroup; 4] = [
        Self::new(model::FailurePolicy::Fail, model::ReinvocationPolicy::Never),
        Self::new(
            model::FailurePolicy::Fail,
            model::ReinvocationPolicy::IfNeeded,
        ),
        Self::new(
            model::FailurePolicy::Ignore,
            model::ReinvocationPolicy::Never,
        ),
        Self::new(
            model::FailurePolicy::Ignore,
            model::ReinvocationPolicy::IfNeeded,
        ),
    ];

    /// The group of this failure and reinvocation policy.
    pub const fn new(
        failure: model::FailurePolicy,
        reinvocation: model::ReinvocationPolicy,
    ) -> Self {
        Self {
            failure,
            reinvocation,
        }
    }

    /// The group a mutating policy is served in.
    pub fn of(policy: &MutatingPolicy) -> Self {
        Self::new(policy.failure_policy(), policy.spec.reinvocation_policy)
    }
}

impl PolicySet {
    /// The set of these bound policies, each kind ordered by policy name (a stable sort, so
    /// policies of one name keep their order): the order mutating policies run in, and the
    /// order lookups by name rely on. Each policy's bindings are expected by binding name.
    pub fn new(validating: Vec<BoundPolicy>, mutating: Vec<BoundMutatingPolicy>) -> Self {
        let mut validating = with_autogen_variants(validating, |policy, bindings| BoundPolicy {
            policy,
            bindings,
        });
        let mut mutating = with_autogen_variants(mutating, |policy, bindings| {
            BoundMutatingPolicy { policy, bindings }
        });
        validating.sort_by(|a, b| a.policy.name.cmp(&b.policy.name));
        mutating.sort_by(|a, b| a.policy.name.cmp(&b.policy.name));
        let validating_index = index::ResourceIndex::new(
            validating
                .iter()
                .map(|b| b.policy.spec.match_constraints.as_ref()),
        );
        let mutating_index = index::ResourceIndex::new(
            mutating
                .iter()
                .map(|b| b.policy.spec.match_constraints.as_ref()),
        );
        let mut param_kinds: Vec<model::ParamKind> = Vec::new();
        let used = validating
            .iter()
            .filter_map(|b| b.policy.spec.param_kind.as_ref())
            .chain(
                mutating
                    .iter()
                    .filter_map(|b| b.policy.spec.param_kind.as_ref()),
            );
        for kind in used {
            if !param_kinds.contains(kind) {
                param_kinds.push(kind.clone());
            }
        }
        let uses_authorizer = validating.iter().any(|b| b.policy.uses_authorizer)
            || mutating.iter().any(|b| b.policy.uses_authorizer);
        Self {
            validating,
            mutating,
            validating_index,
            mutating_index,
            param_kinds,
            uses_authorizer,
            unbound: Unbound::default(),
            wildcard: model::WildcardOperations::default(),
        }
    }

    /// This set with `*` in its policies' operations standing for `wildcard`.
    #[must_use]
    pub fn with_wildcard_operations(mut self, wildcard: model::WildcardOperations) -> Self {
        self.wildcard = wildcard;
        self
    }

    /// What `*` in the policies' operations stands for: the webhook registration registers
    /// it, and [`PolicySet::validate`] and [`PolicySet::mutate`] decide by it.
    pub fn wildcard_operations(&self) -> model::WildcardOperations {
        self.wildcard
    }

    /// Whether a policy of these match constraints may decide `req` as far as `*` goes: a
    /// connection only falls under a policy whose rules name CONNECT, unless `*` includes it
    /// ([`model::WildcardOperations`]).
    fn connect_allowed(
        &self,
        constraints: Option<&model::MatchResources>,
        req: &Request<'_>,
    ) -> bool {
        req.operation != request::Operation::Connect
            || self.wildcard == model::WildcardOperations::InTree
            || constraints.is_none_or(|c| matching::operation_named(c, req))
    }

    /// This set with the compiled policies that no binding names (see [`Unbound`]).
    #[must_use]
    pub fn with_unbound(mut self, mut unbound: Unbound) -> Self {
        unbound.validating.sort_by(|a, b| a.name.cmp(&b.name));
        unbound.mutating.sort_by(|a, b| a.name.cmp(&b.name));
        self.unbound = unbound;
        self
    }

    /// The compiled policies that no binding names.
    pub fn unbound(&self) -> &Unbound {
        &self.unbound
    }

    /// The validating policies that have at least one binding, with their bindings, by name.
    pub fn validating(&self) -> &[BoundPolicy] {
        &self.validating
    }

    /// The mutating policies that have at least one binding, with their bindings, in the
    /// order they run (by name).
    pub fn mutating(&self) -> &[BoundMutatingPolicy] {
        &self.mutating
    }

    /// The bound validating policies named `name` (one, or none; more only in hand-built sets).
    pub fn validating_named(&self, name: &str) -> &[BoundPolicy] {
        named(&self.validating, name, |b| &b.policy.name)
    }

    /// The bound mutating policies named `name` (one, or none; more only in hand-built sets).
    pub fn mutating_named(&self, name: &str) -> &[BoundMutatingPolicy] {
        named(&self.mutating, name, |b| &b.policy.name)
    }

    /// Whether no policy is bound.
    pub fn is_empty(&self) -> bool {
        self.validating.is_empty() && self.mutating.is_empty()
    }

    /// The param kinds the bound policies use, each once.
    pub fn param_kinds(&self) -> &[model::ParamKind] {
        &self.param_kinds
    }

    /// Whether any bound policy may read `authorizer` in its expressions.
    pub fn uses_authorizer(&self) -> bool {
        self.uses_authorizer
    }

    /// Mutates a request with the bound mutating policies in their order; with `only`, those
    /// of one webhook group. A kind without a schema in `schemas` (nor a connection's options
    /// kind) gets upstream's 503. A connection falls under a policy only through a rule naming
    /// CONNECT, unless `*` includes it ([`PolicySet::wildcard_operations`]).
    pub fn mutate(
        &self,
        req: &Request<'_>,
        ctx: &Context<'_>,
        schemas: &dyn KindSchemas,
        only: Option<MutatingWebhookGroup>,
    ) -> MutationOutcome {
        let in_group = |b: &&BoundMutatingPolicy| {
            only.is_none_or(|g| MutatingWebhookGroup::of(&b.policy) == g)
                && self.connect_allowed(b.policy.spec.match_constraints.as_ref(), req)
        };
        if ctx.trace.is_some() {
            // A trace reports every policy, matched or not.
            return mutate::mutate(self.mutating.iter().filter(in_group), req, ctx, schemas);
        }
        let candidates = self
            .mutating_index
            .candidates(req)
            .filter_map(|i| self.mutating.get(i));
        mutate::mutate(candidates.filter(in_group), req, ctx, schemas)
    }

    /// Validates a request against the bound validating policies; with `only`, against those
    /// of that failure policy (each of celgate's two webhooks serves one, so a request both
    /// match is evaluated once per policy, not twice).
    ///
    /// kube-apiserver records one `validation_failure` audit annotation per request, the first
    /// policy's (a later one is refused as the key is already set); the two webhooks would
    /// each return one. So the Ignore webhook's gives way when a policy of failure policy Fail
    /// records one for the request: its policies are evaluated again only then.
    pub fn validate(
        &self,
        req: &Request<'_>,
        ctx: &Context<'_>,
        only: Option<model::FailurePolicy>,
    ) -> Outcome {
        let mut out = self.validate_group(req, ctx, only);
        if only == Some(model::FailurePolicy::Ignore) && out.records_validation_failure() {
            let fail = self.validate_group(req, ctx, Some(model::FailurePolicy::Fail));
            if fail.records_validation_failure() {
                out.audit_annotations
                    .retain(|(k, _)| k != validate::VALIDATION_FAILURE_KEY);
            }
        }
        out
    }

    /// The outcome of the validating policies of failure policy `only` (all when `None`).
    fn validate_group(
        &self,
        req: &Request<'_>,
        ctx: &Context<'_>,
        only: Option<model::FailurePolicy>,
    ) -> Outcome {
        let connect_allowed =
            |b: &&BoundPolicy| self.connect_allowed(b.policy.spec.match_constraints.as_ref(), req);
        if ctx.trace.is_some() {
            // A trace reports every policy, matched or not.
            let all = self.validating.iter().filter(connect_allowed);
            return validate::validate_only(all, req, ctx, only);
        }
        let candidates = self
            .validating_index
            .candidates(req)
            .filter_map(|i| self.validating.get(i))
            .filter(connect_allowed);
        validate::validate_only(candidates, req, ctx, only)
    }

    /// Decides a request against each validating binding alone that `wanted` picks (given
    /// its policy and the binding), among the policies the request's resource may meet, and
    /// gives `each` the policy and one outcome per binding: a policy's autogen variants answer
    /// for its bindings too, their outcomes merged into the binding's. Each policy's own match
    /// is worked out once.
    pub fn validate_each_binding(
        &self,
        req: &Request<'_>,
        ctx: &Context<'_>,
        wanted: impl Fn(&ValidatingPolicy, &model::ValidatingBindingSpec) -> bool,
        mut each: impl FnMut(&ValidatingPolicy, validate::BindingOutcome),
    ) {
        let candidates = (self.validating_index.candidates(req))
            .filter_map(|i| self.validating.get(i))
            .filter(|b| self.connect_allowed(b.policy.spec.match_constraints.as_ref(), req));
        // A policy's variants come right after it (candidates ascend): its outcomes wait for them.
        let mut pending: Option<(&BoundPolicy, Vec<validate::BindingOutcome>)> = None;
        for bound in candidates {
            let decided =
                validate::validate_each_binding(bound, req, ctx, |b| wanted(&bound.policy, b));
            match &mut pending {
                Some((first, outcomes)) if first.policy.name == bound.policy.name => {
                    for (i, one) in decided.into_iter().enumerate() {
                        // Variants keep the policy's bindings in order: the same position first.
                        let at = if outcomes.get(i).is_some_and(|o| o.binding == one.binding) {
                            Some(i)
                        } else {
                            outcomes.iter().position(|o| o.binding == one.binding)
                        };
                        match at.and_then(|at| outcomes.get_mut(at)) {
                            Some(o) => {
                                o.outcome.merge(one.outcome);
                                o.applied |= one.applied;
                            }
                            None => outcomes.push(one),
                        }
                    }
                }
                _ => {
                    if let Some((first, outcomes)) = pending.replace((bound, decided)) {
                        outcomes.into_iter().for_each(|o| each(&first.policy, o));
                    }
                }
            }
        }
        if let Some((first, outcomes)) = pending {
            outcomes.into_iter().for_each(|o| each(&first.policy, o));
        }
    }
}

/// The run of `sorted` (ordered by `name_of`) whose name is `name`.
fn named<'s, T>(sorted: &'s [T], name: &str, name_of: impl Fn(&T) -> &str) -> &'s [T] {
    let start = sorted.partition_point(|t| name_of(t) < name);
    let len = sorted
        .get(start..)
        .map_or(0, |rest| rest.partition_point(|t| name_of(t) == name));
    sorted.get(start..start + len).unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::model::{MatchPolicy, MatchResources, ResourceRule, ValidationAction};
    use crate::validate::test_policies::{bound, cache, context, spec};

    /// A policy warning on every request its rules cover: `resources` of any group and version,
    /// one policy per entry of `rules`.
    fn warning(name: &str, resources: &[&str], match_policy: MatchPolicy) -> BoundPolicy {
        let mut s = spec(vec![model::Validation {
            expression: "false".into(),
            ..Default::default()
        }]);
        s.name = name.into();
        s.match_constraints = Some(MatchResources {
            resource_rules: vec![ResourceRule {
                operations: vec!["*".into()],
                api_groups: vec!["*".into()],
                api_versions: vec!["*".into()],
                resources: resources.iter().map(|r| (*r).to_string()).collect(),
                scope: "*".into(),
                ..Default::default()
            }],
            match_policy,
            ..Default::default()
        });
        bound(s, vec![ValidationAction::Warn])
    }

    #[test]
    fn policies_are_kept_by_name_and_found_by_name() {
        let eq = MatchPolicy::Equivalent;
        let set = PolicySet::new(
            vec![
                warning("c", &["pods"], eq),
                warning("a", &["pods"], eq),
                warning("b", &["pods"], eq),
                warning("a", &["configmaps"], eq),
            ],
            Vec::new(),
        );
        let names: Vec<&str> = set.validating().iter().map(|b| &*b.policy.name).collect();
        assert_eq!(names, ["a", "a", "b", "c"]);
        // Policies of one name keep their order.
        let a = set.validating_named("a");
        assert_eq!(a.len(), 2);
        assert_eq!(
            a[1].policy
                .spec
                .match_constraints
                .as_ref()
                .unwrap()
                .resource_rules[0]
                .resources,
            ["configmaps"]
        );
        assert_eq!(&*set.validating_named("c")[0].policy.name, "c");
        assert!(set.validating_named("bb").is_empty());
        assert!(set.validating_named("z").is_empty());
        assert!(set.mutating_named("a").is_empty());
    }

    #[test]
    fn the_index_decides_as_a_scan_of_every_policy_does() {
        let exact = MatchPolicy::Exact;
        let equivalent = MatchPolicy::Equivalent;
        let set = PolicySet::new(
            vec![
                warning("deployments", &["deployments"], equivalent),
                warning("deployments-exact", &["deployments"], exact),
                warning("scale-of-all", &["*/scale"], equivalent),
                warning("everything", &["*"], equivalent),
                warning("pods-and-status", &["pods", "pods/status"], equivalent),
                warning("replicasets", &["replicasets"], equivalent),
                warning("replicasets-exact", &["replicasets"], exact),
                warning("deployment-subresources", &["deployments/*"], equivalent),
                warning("all-of-all", &["*/*"], equivalent),
                warning("configmaps", &["configmaps"], equivalent),
            ],
            Vec::new(),
        );
        let namespaces = cache();
        let ctx = context(&namespaces);
        // (resource, subresource, resource the client asked for, its subresource)
        let requests = [
            ("deployments", "", "deployments", ""),
            ("deployments", "scale", "deployments", "scale"),
            ("deployments", "", "replicasets", ""),
            ("deployments", "status", "replicasets", "status"),
            ("pods", "status", "pods", "status"),
            ("pods", "", "pods", ""),
            ("secrets", "", "secrets", ""),
        ];
        for (resource, sub, asked, asked_sub) in requests {
            let review = json!({"uid": "u", "operation": "UPDATE", "namespace": "staging-ns",
                "name": "x",
                "kind": {"group": "apps", "version": "v1", "kind": "K"},
                "resource": {"group": "apps", "version": "v1", "resource": resource},
                "subResource": sub,
                "requestResource": {"group": "apps", "version": "v1beta1", "resource": asked},
                "requestSubResource": asked_sub,
                "object": {}, "oldObject": {}});
            let req = Request::from_json(&review).unwrap();
            // The same outcome, but for the time each check took.
            let timeless = |mut outcome: Outcome| {
                for check in &mut outcome.checks {
                    check.elapsed = std::time::Duration::ZERO;
                }
                outcome
            };
            let indexed = timeless(set.validate(&req, &ctx, None));
            let scanned = timeless(validate::validate(set.validating(), &req, &ctx));
            assert!(
                !scanned.warnings.is_empty(),
                "{resource}/{sub}: some policy should match"
            );
            assert_eq!(
                indexed, scanned,
                "{resource}/{sub} asked as {asked}/{asked_sub}"
            );
        }
    }

    #[test]
    fn one_validation_failure_is_recorded_for_both_webhooks_the_fail_policy_s() {
        // Found by the generated differential (seed 12, cases 205 and 881): an audited failure
        // of a Fail policy and one of an Ignore policy made two annotations, in-tree one.
        let audited = |name: &str, failure_policy| {
            let mut s = spec(vec![model::Validation {
                expression: "false".into(),
                message: Some(format!("{name} failed")),
                ..Default::default()
            }]);
            s.name = name.into();
            s.failure_policy = failure_policy;
            bound(s, vec![ValidationAction::Warn, ValidationAction::Audit])
        };
        let failure = |outcome: &Outcome| -> Vec<String> {
            outcome
                .audit_annotations
                .iter()
                .filter(|(k, _)| k == validate::VALIDATION_FAILURE_KEY)
                .map(|(_, v)| v.clone())
                .collect()
        };
        let namespaces = cache();
        let ctx = context(&namespaces);
        let review = validate::test_policies::create_deployment(json!({"metadata": {"name": "d"}}));
        let req = Request::from_json(&review).unwrap();
        let (fail, ignore) = (model::FailurePolicy::Fail, model::FailurePolicy::Ignore);

        let both = PolicySet::new(vec![audited("a", ignore), audited("b", fail)], Vec::new());
        let by_fail = both.validate(&req, &ctx, Some(fail));
        let by_ignore = both.validate(&req, &ctx, Some(ignore));
        assert_eq!(failure(&by_fail).len(), 1);
        assert!(failure(&by_fail)[0].contains("b failed"));
        assert!(failure(&by_ignore).is_empty(), "{by_ignore:?}");
        // The Ignore webhook keeps its warning; only the annotation gives way.
        assert_eq!(by_ignore.warnings.len(), 1);

        // Alone, the Ignore policy's failure is recorded.
        let alone = PolicySet::new(vec![audited("a", ignore)], Vec::new());
        let by_ignore = alone.validate(&req, &ctx, Some(ignore));
        assert!(failure(&by_ignore)[0].contains("a failed"));
    }

    /// A policy `name` with one rule for `operations` on core v1 `resources`, denying with
    /// `expression` and a message naming what it saw.
    fn on_pods(
        name: &str,
        operations: &[&str],
        resources: &[&str],
        expression: &str,
    ) -> BoundPolicy {
        let mut s = spec(vec![model::Validation {
            expression: expression.into(),
            message_expression: Some(
                "request.operation + ' ' + request.resource.resource + '/' + request.subResource + ' of ' + request.name + ' as ' + object.kind + ', old is null: ' + string(oldObject == null)".into(),
            ),
            ..Default::default()
        }]);
        s.name = name.into();
        s.match_constraints = Some(MatchResources {
            resource_rules: vec![ResourceRule {
                operations: operations.iter().map(|o| (*o).to_string()).collect(),
                api_groups: vec![String::new()],
                api_versions: vec!["v1".into()],
                resources: resources.iter().map(|r| (*r).to_string()).collect(),
                scope: "*".into(),
                ..Default::default()
            }],
            ..Default::default()
        });
        bound(s, vec![ValidationAction::Deny])
    }

    /// kube-apiserver's CONNECT of `kubectl exec p -- <command>` in `staging-ns`.
    fn exec(command: &[&str]) -> serde_json::Value {
        json!({"uid": "u", "operation": "CONNECT", "namespace": "staging-ns", "name": "p",
            "kind": {"group": "", "version": "v1", "kind": "PodExecOptions"},
            "resource": {"group": "", "version": "v1", "resource": "pods"},
            "subResource": "exec",
            "requestKind": {"group": "", "version": "v1", "kind": "PodExecOptions"},
            "requestResource": {"group": "", "version": "v1", "resource": "pods"},
            "requestSubResource": "exec",
            "userInfo": {"username": "alice"}, "dryRun": false, "options": null,
            "object": {"apiVersion": "v1", "kind": "PodExecOptions", "stdout": true,
                "container": "c", "command": command},
            "oldObject": null})
    }

    /// The cluster publishes no schema here (connections' options kinds need none).
    struct NoSchemas;

    impl KindSchemas for NoSchemas {
        fn schema(&self, _: &schema::Gvk) -> Option<&mutate::KindSchema> {
            None
        }
    }

    /// A mutating policy `name` for `operations` on core v1 `resources`, setting the exec
    /// command to its own name.
    fn mutating_on_pods(
        name: &str,
        operations: &[&str],
        resources: &[&str],
    ) -> BoundMutatingPolicy {
        let constraints = on_pods(name, operations, resources, "true");
        let spec = model::MutatingPolicySpec {
            name: name.into(),
            match_constraints: constraints.policy.spec.match_constraints.clone(),
            mutations: vec![model::Mutation {
                patch_type: model::PatchType::JsonPatch,
                apply_configuration: None,
                json_patch: Some(format!(
                    "[JSONPatch{{op: 'replace', path: '/command', value: ['{name}']}}]"
                )),
            }],
            ..Default::default()
        };
        BoundMutatingPolicy {
            policy: Arc::new(mutate::compile_mutating(
                spec,
                mutate::ApplySemantics::Upstream,
            )),
            bindings: vec![Arc::new(model::MutatingBindingSpec {
                name: format!("{name}-b").into(),
                policy_name: name.into(),
                ..Default::default()
            })]
            .into(),
        }
    }

    #[test]
    fn a_connect_is_mutated_by_the_policies_naming_connect_and_by_star_only_in_tree() {
        let namespaces = cache();
        let ctx = context(&namespaces);
        let raw = exec(&["ls"]);
        let ls = Request::from_json(&raw).unwrap();
        let command = |set: &PolicySet| {
            let out = set.mutate(&ls, &ctx, &NoSchemas, None);
            assert_eq!(out.denial, None);
            out.object(&raw["object"]).map(|o| o["command"].clone())
        };
        let star = || mutating_on_pods("star", &["*"], &["pods/*"]);
        let safe = PolicySet::new(Vec::new(), vec![star()]);
        assert_eq!(command(&safe), None, "`*` does not take the connection");
        let named = PolicySet::new(
            Vec::new(),
            vec![mutating_on_pods("named", &["CONNECT"], &["pods/exec"])],
        );
        assert_eq!(command(&named), Some(json!(["named"])));
        let in_tree = PolicySet::new(Vec::new(), vec![star()])
            .with_wildcard_operations(model::WildcardOperations::InTree);
        assert_eq!(command(&in_tree), Some(json!(["star"])));
    }

    #[test]
    fn a_connect_is_decided_by_the_policies_naming_connect_and_by_star_only_in_tree() {
        let named = on_pods(
            "no-shells",
            &["CONNECT"],
            &["pods/exec", "pods/attach"],
            "!object.command.exists(c, c == 'sh')",
        );
        let star = on_pods("all-pod-subresources", &["*"], &["pods/*"], "false");
        let namespaces = cache();
        let ctx = context(&namespaces);
        let shell = exec(&["sh"]);
        let shell = Request::from_json(&shell).unwrap();
        let ls = exec(&["ls"]);
        let ls = Request::from_json(&ls).unwrap();

        let safe = PolicySet::new(vec![named.clone(), star.clone()], Vec::new());
        assert_eq!(
            safe.wildcard_operations(),
            model::WildcardOperations::WithoutConnect
        );
        let denied = safe.validate(&shell, &ctx, None);
        let denial = denied.denial.expect("the shell is denied");
        assert_eq!(
            denial.message,
            "ValidatingAdmissionPolicy 'no-shells' with binding 'b' denied request: CONNECT pods/exec of p as PodExecOptions, old is null: true"
        );
        assert_eq!((denial.code, denial.reason.as_str()), (422, "Invalid"));
        // `*` does not take the connection: only the policy naming CONNECT decided it.
        let decided: Vec<&str> = denied.checks.iter().map(|c| &*c.policy).collect();
        assert_eq!(decided, ["no-shells"]);
        assert!(safe.validate(&ls, &ctx, None).denial.is_none());

        // In-tree, `*` covers CONNECT too.
        let in_tree = PolicySet::new(vec![named, star], Vec::new())
            .with_wildcard_operations(model::WildcardOperations::InTree);
        let denial = in_tree
            .validate(&ls, &ctx, None)
            .denial
            .expect("`*` denies");
        assert!(
            denial
                .message
                .starts_with("ValidatingAdmissionPolicy 'all-pod-subresources'"),
            "{}",
            denial.message
        );
        // Writes are decided by `*` either way.
        let update = json!({"uid": "u", "operation": "UPDATE", "namespace": "staging-ns",
            "name": "p", "kind": {"group": "", "version": "v1", "kind": "Pod"},
            "resource": {"group": "", "version": "v1", "resource": "pods"},
            "subResource": "status", "object": {"metadata": {"name": "p"}},
            "oldObject": {"metadata": {"name": "p"}}});
        let update = Request::from_json(&update).unwrap();
        assert!(safe.validate(&update, &ctx, None).denial.is_some());
    }
}
