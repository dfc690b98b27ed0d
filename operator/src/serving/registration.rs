//! The ValidatingWebhookConfiguration and MutatingWebhookConfiguration celgate owns: their rules
//! are the union of the compiled policies' match constraints, bound or not (so only relevant
//! traffic reaches the webhook, and binding a policy changes no configuration), or with
//! [`WebhookRules::All`] every resource (so a new policy changes no configuration), split into a
//! fail-closed and a fail-open webhook by failurePolicy, and they exclude celgate's own
//! namespace so a broken webhook cannot lock celgate out. The mutating side is split further
//! by reinvocationPolicy, since the API server reinvokes a webhook as a whole: policies that
//! must run once are never served by a webhook it may call again.

use std::collections::BTreeSet;
use std::sync::Arc;

use celgate_engine::model::{FailurePolicy, MatchResources, ReinvocationPolicy};
use celgate_engine::{MutatingWebhookGroup, PolicySet};
use k8s_openapi::ByteString;
use k8s_openapi::api::admissionregistration::v1::{
    MutatingWebhook, MutatingWebhookConfiguration, RuleWithOperations, ServiceReference,
    ValidatingWebhook, ValidatingWebhookConfiguration, WebhookClientConfig,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, LabelSelectorRequirement};
use kube::api::{ObjectMeta, Patch, PatchParams};
use kube::{Api, Client};
use thiserror::Error;
use tokio::sync::watch;
use tracing::{info, warn};

use crate::metrics;
use crate::retry::{self, Backoff};
use crate::serving::leader::Leadership;

/// Name of both webhook configurations and the field manager of their fields.
pub const CONFIGURATION_NAME: &str = "celgate";
/// The fail-closed validating webhook (policies with failurePolicy Fail).
pub const VALIDATE_FAIL: &str = "validate.celgate.io";
/// The fail-open validating webhook (policies with failurePolicy Ignore).
pub const VALIDATE_IGNORE: &str = "validate-ignore.celgate.io";
/// The webhook validating celgate's own policies and bindings. It fails open: when celgate is
/// down, its own objects can still be written (the CRD schema still holds what it can express).
pub const VALIDATE_POLICIES: &str = "validate-policies.celgate.io";

/// The mutating webhooks, in the order the API server calls them (list order), with the
/// group of policies each serves and its path.
pub const MUTATING_WEBHOOKS: [(&str, MutatingWebhookGroup, &str); 4] = [
    (
        "mutate.celgate.io",
        MutatingWebhookGroup::ALL[0],
        "/mutate/fail/never",
    ),
    (
        "mutate-reinvoke.celgate.io",
        MutatingWebhookGroup::ALL[1],
        "/mutate/fail/ifneeded",
    ),
    (
        "mutate-ignore.celgate.io",
        MutatingWebhookGroup::ALL[2],
        "/mutate/ignore/never",
    ),
    (
        "mutate-ignore-reinvoke.celgate.io",
        MutatingWebhookGroup::ALL[3],
        "/mutate/ignore/ifneeded",
    ),
];

/// Where the API server reaches the webhook.
#[derive(Clone, Debug)]
pub enum Endpoint {
    /// A base URL (out of cluster), e.g. `https://127.0.0.1:9443`.
    Url(String),
    /// A Service in celgate's namespace (in cluster).
    Service {
        /// Namespace of the Service.
        namespace: String,
        /// Name of the Service.
        name: String,
        /// Service port.
        port: i32,
    },
}

impl Endpoint {
    fn client_config(&self, path: &str, ca_pem: &str) -> WebhookClientConfig {
        let ca_bundle = Some(ByteString(ca_pem.as_bytes().to_vec()));
        match self {
            Endpoint::Url(base) => WebhookClientConfig {
                url: Some(format!("{}{path}", base.trim_end_matches('/'))),
                ca_bundle,
                service: None,
            },
            Endpoint::Service {
                namespace,
                name,
                port,
            } => WebhookClientConfig {
                service: Some(ServiceReference {
                    namespace: namespace.clone(),
                    name: name.clone(),
                    path: Some(path.to_string()),
                    port: Some(*port),
                }),
                ca_bundle,
                url: None,
            },
        }
    }
}

const OPERATIONS: [&str; 5] = ["CREATE", "UPDATE", "DELETE", "CONNECT", "*"];

/// Which requests a webhook that serves policies is sent.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum WebhookRules {
    /// Those the rules of its compiled policies match: only relevant traffic reaches celgate,
    /// and a policy over a resource no other policy matches is enforced once kube-apiserver
    /// has loaded the changed configuration (a few milliseconds more).
    #[default]
    Policies,
    /// Every resource, subresource and operation, once it serves any policy: a new policy is
    /// enforced as soon as celgate has compiled it, with no configuration change; every write
    /// in the cluster (outside celgate's namespace) then waits on celgate, and with
    /// failurePolicy Fail fails while celgate is unreachable.
    All,
}

/// The rule of [`WebhookRules::All`].
fn every_resource() -> RuleWithOperations {
    let any = || Some(vec!["*".to_string()]);
    RuleWithOperations {
        operations: any(),
        api_groups: any(),
        api_versions: any(),
        resources: Some(vec!["*/*".to_string()]),
        scope: Some("*".to_string()),
    }
}

/// The rules a webhook registers for the `policies` it serves: none when they have no rule.
fn covering(policies: Vec<RuleWithOperations>, coverage: WebhookRules) -> Vec<RuleWithOperations> {
    match coverage {
        WebhookRules::All if !policies.is_empty() => vec![every_resource()],
        _ => policies,
    }
}

/// Webhook rules for one failure policy: every well-formed resource rule of the compiled
/// validating policies, bound or not. An unbound policy's rules are registered too so that
/// binding it, the common change, needs no configuration update (kube-apiserver takes several
/// milliseconds to reload one); until then celgate admits what only it matches.
fn rules(set: &PolicySet, failure: FailurePolicy) -> Vec<RuleWithOperations> {
    let bound = set.validating().iter().map(|b| &b.policy);
    union_of_rules(
        bound
            .chain(&set.unbound().validating)
            .filter(|p| p.failure_policy() == failure)
            .map(|p| p.spec.match_constraints.as_ref()),
    )
}

/// Webhook rules for one mutating webhook group: every well-formed resource rule of the
/// compiled mutating policies of that group, bound or not (as for [`rules`]).
fn mutating_rules(set: &PolicySet, group: MutatingWebhookGroup) -> Vec<RuleWithOperations> {
    let bound = set.mutating().iter().map(|b| &b.policy);
    union_of_rules(
        bound
            .chain(&set.unbound().mutating)
            .filter(|p| MutatingWebhookGroup::of(p) == group)
            .map(|p| p.spec.match_constraints.as_ref()),
    )
}

/// Every well-formed resource rule of these match constraints, once each, in order. A
/// malformed rule is left out (the engine still rejects what it cannot match), so one bad
/// policy cannot make the whole configuration invalid.
fn union_of_rules<'a>(
    constraints: impl Iterator<Item = Option<&'a MatchResources>>,
) -> Vec<RuleWithOperations> {
    let mut seen = BTreeSet::new();
    let mut out = Vec::new();
    for constraints in constraints.flatten() {
        for r in &constraints.resource_rules {
            let well_formed = !r.operations.is_empty()
                && r.operations
                    .iter()
                    .all(|o| OPERATIONS.contains(&o.as_str()))
                && !r.api_groups.is_empty()
                && !r.api_versions.is_empty()
                && !r.resources.is_empty()
                && r.resources.iter().all(|x| !x.is_empty())
                && matches!(r.scope.as_str(), "*" | "Cluster" | "Namespaced");
            let key = (
                r.operations.clone(),
                r.api_groups.clone(),
                r.api_versions.clone(),
                r.resources.clone(),
                r.scope.clone(),
            );
            if well_formed && seen.insert(key) {
                out.push(RuleWithOperations {
                    operations: Some(r.operations.clone()),
                    api_groups: Some(r.api_groups.clone()),
                    api_versions: Some(r.api_versions.clone()),
                    resources: Some(r.resources.clone()),
                    scope: Some(r.scope.clone()),
                });
            }
        }
    }
    out
}

/// The name and label of both configurations.
fn configuration_metadata() -> ObjectMeta {
    ObjectMeta {
        name: Some(CONFIGURATION_NAME.to_string()),
        labels: Some(
            [(
                "app.kubernetes.io/managed-by".to_string(),
                "celgate".to_string(),
            )]
            .into(),
        ),
        ..Default::default()
    }
}

fn exclude_namespace(namespace: &str) -> LabelSelector {
    LabelSelector {
        match_expressions: Some(vec![LabelSelectorRequirement {
            key: "kubernetes.io/metadata.name".into(),
            operator: "NotIn".into(),
            values: Some(vec![namespace.to_string()]),
        }]),
        match_labels: None,
    }
}

/// What the webhook registration has achieved, for status: a policy generation is enforced
/// once a set holding it is covered by the applied configurations.
#[derive(Clone, Debug, Default)]
pub struct Applied {
    /// The latest policy set whose webhook configurations are applied.
    pub set: Option<Arc<PolicySet>>,
    /// Why the configurations of a newer set could not be applied, until they are.
    pub error: Option<String>,
}

/// Where and how the API server reaches celgate's webhooks.
#[derive(Clone, Debug)]
pub struct Registration {
    /// Where the API server reaches the webhook.
    pub endpoint: Endpoint,
    /// celgate's own namespace, excluded from the webhooks.
    pub namespace: String,
    /// Whether celgate creates the configurations when they are missing (out of cluster), or
    /// only fills in the ones its manifests ship (in a cluster: `kubectl delete -k` then
    /// removes them, and a stopping replica can never bring them back).
    pub create_missing: bool,
    /// Which requests the policy webhooks are sent.
    pub rules: WebhookRules,
}

/// What the registration follows: the published policy sets, the CA the API server must
/// trust (it changes when the certificate Secret does), and whether this replica leads.
pub struct Inputs {
    /// The latest published policy set.
    pub sets: watch::Receiver<Option<Arc<PolicySet>>>,
    /// The CA certificate (PEM) of the serving certificate.
    pub ca: watch::Receiver<String>,
    /// Whether this replica holds the Lease: only the leader writes the configurations.
    pub leadership: Leadership,
}

/// Why the webhook configurations could not be applied.
#[derive(Debug, Error)]
pub enum RegistrationError {
    /// The API server refused or could not be reached.
    #[error(transparent)]
    Api(#[from] kube::Error),
    /// A configuration celgate only patches does not exist.
    #[error(
        "{0} {CONFIGURATION_NAME:?} does not exist; celgate only fills in the configurations its manifests ship: apply config/webhook (part of `kubectl apply -k config/default`)"
    )]
    Missing(std::borrow::Cow<'static, str>),
}

impl Registration {
    /// Keeps both webhook configurations in step with the published policy sets and the CA
    /// while this replica leads: applies them whenever the desired configuration differs from
    /// the one last applied, and after a failure retries the latest set with growing delays.
    /// Each set the applied configurations cover, and each failure, is sent on `applied`.
    pub async fn keep_applied(
        self,
        client: Client,
        mut inputs: Inputs,
        applied_sets: watch::Sender<Applied>,
    ) {
        let mut applied = Written::default();
        let mut retry = Backoff::new(retry::WRITE);
        loop {
            let set = inputs.sets.borrow_and_update().clone();
            let ca = inputs.ca.borrow_and_update().clone();
            let leading = *inputs.leadership.borrow_and_update();
            if !leading {
                // Another replica writes; what it wrote is unknown here, so apply again once
                // this one leads.
                applied = Written::default();
            } else if let Some(set) = set {
                let desired = (
                    validating_configuration(
                        &set,
                        self.rules,
                        &self.endpoint,
                        &ca,
                        &self.namespace,
                    ),
                    mutating_configuration(&set, self.rules, &self.endpoint, &ca, &self.namespace),
                );
                if !applied.is(&desired) {
                    metrics::reconciled(metrics::REGISTRATION);
                    match applied.apply(&client, desired, self.create_missing).await {
                        Ok(()) => {
                            info!(
                                bound_policies = set.validating().len(),
                                bound_mutating_policies = set.mutating().len(),
                                "webhook configurations applied"
                            );
                            retry.reset();
                        }
                        Err(error) => {
                            metrics::reconcile_failed(metrics::REGISTRATION);
                            let delay = retry.next_delay();
                            warn!(%error, retry_in_s = delay.as_secs_f64(), "cannot apply the webhook configurations");
                            applied_sets.send_modify(|a| {
                                a.error = Some(format!(
                                    "cannot apply the webhook configurations: {error}"
                                ));
                            });
                            tokio::select! {
                                () = tokio::time::sleep(delay) => {}
                                Ok(()) = inputs.leadership.changed() => {}
                            }
                            continue;
                        }
                    }
                }
                applied_sets.send_replace(Applied {
                    set: Some(set),
                    error: None,
                });
            }
            tokio::select! {
                changed = inputs.sets.changed() => if changed.is_err() { return },
                changed = inputs.ca.changed() => if changed.is_err() { return },
                changed = inputs.leadership.changed() => if changed.is_err() { return },
            }
        }
    }
}

/// The desired ValidatingWebhookConfiguration for a policy set, its policy webhooks covering
/// what `coverage` says.
pub fn validating_configuration(
    set: &PolicySet,
    coverage: WebhookRules,
    endpoint: &Endpoint,
    ca_pem: &str,
    own_namespace: &str,
) -> ValidatingWebhookConfiguration {
    let webhooks = [
        (VALIDATE_FAIL, FailurePolicy::Fail, "Fail", "/validate/fail"),
        (
            VALIDATE_IGNORE,
            FailurePolicy::Ignore,
            "Ignore",
            "/validate/ignore",
        ),
    ]
    .into_iter()
    .filter_map(|(name, failure, failure_str, path)| {
        let rules = covering(rules(set, failure), coverage);
        (!rules.is_empty()).then(|| ValidatingWebhook {
            name: name.to_string(),
            admission_review_versions: vec!["v1".to_string()],
            client_config: endpoint.client_config(path, ca_pem),
            failure_policy: Some(failure_str.to_string()),
            match_policy: Some("Equivalent".to_string()),
            namespace_selector: Some(exclude_namespace(own_namespace)),
            object_selector: Some(LabelSelector::default()),
            rules: Some(rules),
            side_effects: "None".to_string(),
            timeout_seconds: Some(10),
            match_conditions: None,
        })
    })
    .chain(std::iter::once(ValidatingWebhook {
        name: VALIDATE_POLICIES.to_string(),
        admission_review_versions: vec!["v1".to_string()],
        client_config: endpoint.client_config("/validate-policies", ca_pem),
        failure_policy: Some("Ignore".to_string()),
        match_policy: Some("Equivalent".to_string()),
        rules: Some(vec![RuleWithOperations {
            operations: Some(vec!["CREATE".into(), "UPDATE".into()]),
            api_groups: Some(vec![celgate_engine::GROUP.to_string()]),
            api_versions: Some(vec!["v1".into()]),
            resources: Some(vec![
                "validatingadmissionpolicies".into(),
                "validatingadmissionpolicybindings".into(),
                "mutatingadmissionpolicies".into(),
                "mutatingadmissionpolicybindings".into(),
            ]),
            scope: Some("Cluster".into()),
        }]),
        side_effects: "None".to_string(),
        timeout_seconds: Some(10),
        ..Default::default()
    }))
    .collect();
    ValidatingWebhookConfiguration {
        metadata: configuration_metadata(),
        webhooks: Some(webhooks),
    }
}

/// The desired MutatingWebhookConfiguration for a policy set: one webhook per group of
/// compiled mutating policies (failure policy × reinvocation policy) that has rules (covering
/// what `coverage` says), in
/// [`MUTATING_WEBHOOKS`] order; with no mutating policy it has no webhooks, so no request
/// waits on celgate for a mutation.
pub fn mutating_configuration(
    set: &PolicySet,
    coverage: WebhookRules,
    endpoint: &Endpoint,
    ca_pem: &str,
    own_namespace: &str,
) -> MutatingWebhookConfiguration {
    let webhooks = MUTATING_WEBHOOKS
        .iter()
        .filter_map(|(name, group, path)| {
            let rules = covering(mutating_rules(set, *group), coverage);
            let failure = match group.failure {
                FailurePolicy::Fail => "Fail",
                FailurePolicy::Ignore => "Ignore",
            };
            let reinvocation = match group.reinvocation {
                ReinvocationPolicy::Never => "Never",
                ReinvocationPolicy::IfNeeded => "IfNeeded",
            };
            (!rules.is_empty()).then(|| MutatingWebhook {
                name: (*name).to_string(),
                admission_review_versions: vec!["v1".to_string()],
                client_config: endpoint.client_config(path, ca_pem),
                failure_policy: Some(failure.to_string()),
                match_policy: Some("Equivalent".to_string()),
                namespace_selector: Some(exclude_namespace(own_namespace)),
                object_selector: Some(LabelSelector::default()),
                reinvocation_policy: Some(reinvocation.to_string()),
                rules: Some(rules),
                side_effects: "None".to_string(),
                timeout_seconds: Some(10),
                match_conditions: None,
            })
        })
        .collect();
    MutatingWebhookConfiguration {
        metadata: configuration_metadata(),
        webhooks: Some(webhooks),
    }
}

/// Applies both configurations with server-side apply (celgate owns every field it sets). An
/// existing configuration is named by the uid just read, so one deleted in between is not
/// created again; a missing one is created only with `create_missing`, else it is an error.
/// A configuration as celgate last applied it, with the uid the API server gave it.
struct AppliedConfiguration<K> {
    configuration: K,
    uid: Option<String>,
}

/// The configurations as this replica last applied them (none known yet, or after it stopped
/// leading). A change is applied only to the configuration it changes, by the uid the last
/// apply returned: creating a binding costs one request to the API server, not four.
#[derive(Default)]
struct Written {
    validating: Option<AppliedConfiguration<ValidatingWebhookConfiguration>>,
    mutating: Option<AppliedConfiguration<MutatingWebhookConfiguration>>,
}

impl Written {
    /// Whether both configurations are applied as `desired`.
    fn is(&self, desired: &(ValidatingWebhookConfiguration, MutatingWebhookConfiguration)) -> bool {
        self.validating
            .as_ref()
            .is_some_and(|v| v.configuration == desired.0)
            && self
                .mutating
                .as_ref()
                .is_some_and(|m| m.configuration == desired.1)
    }

    /// Applies the configurations of `desired` that differ from the ones applied, validating
    /// first. A configuration that fails to apply is forgotten, so its uid is read again.
    async fn apply(
        &mut self,
        client: &Client,
        desired: (ValidatingWebhookConfiguration, MutatingWebhookConfiguration),
        create_missing: bool,
    ) -> Result<(), RegistrationError> {
        let (validating, mutating) = desired;
        apply_changed(client, &mut self.validating, validating, create_missing).await?;
        apply_changed(client, &mut self.mutating, mutating, create_missing).await
    }
}

/// Server-side applies `desired` unless `applied` holds it already, by the uid `applied` knows
/// (else read; none: it is created when `create_missing`), and records it with the uid the
/// API server answered. A failed apply leaves `applied` empty.
async fn apply_changed<K>(
    client: &Client,
    applied: &mut Option<AppliedConfiguration<K>>,
    desired: K,
    create_missing: bool,
) -> Result<(), RegistrationError>
where
    K: kube::Resource<DynamicType = ()>
        + Clone
        + PartialEq
        + serde::Serialize
        + serde::de::DeserializeOwned
        + std::fmt::Debug,
{
    if applied.as_ref().is_some_and(|a| a.configuration == desired) {
        return Ok(());
    }
    let api = Api::<K>::all(client.clone());
    let kind = K::kind(&());
    let uid = match applied.take().and_then(|a| a.uid) {
        Some(uid) => Some(uid),
        None => existing_uid(&api).await?,
    };
    if uid.is_none() && !create_missing {
        return Err(RegistrationError::Missing(kind));
    }
    let mut body = desired.clone();
    body.meta_mut().managed_fields = None;
    body.meta_mut().uid = uid;
    let params = PatchParams::apply(CONFIGURATION_NAME).force();
    let written = api
        .patch(
            CONFIGURATION_NAME,
            &params,
            &Patch::Apply(&with_type(body, &kind)?),
        )
        .await?;
    *applied = Some(AppliedConfiguration {
        configuration: desired,
        uid: written.meta().uid.clone(),
    });
    Ok(())
}

/// The uid of the configuration named celgate, if it exists.
async fn existing_uid<K>(api: &Api<K>) -> Result<Option<String>, kube::Error>
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    Ok(api
        .get_metadata_opt(CONFIGURATION_NAME)
        .await?
        .and_then(|m| m.metadata.uid))
}

/// Server-side apply needs apiVersion and kind in the body.
fn with_type<T: serde::Serialize>(obj: T, kind: &str) -> Result<serde_json::Value, kube::Error> {
    let mut v = serde_json::to_value(obj).map_err(kube::Error::SerdeError)?;
    v["apiVersion"] = "admissionregistration.k8s.io/v1".into();
    v["kind"] = kind.into();
    Ok(v)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::expect_used, clippy::unwrap_used)]

    use super::*;
    use crate::controllers::policy_set;
    use crate::fixtures::{self, status};
    use celgate_engine::BoundPolicy;
    use celgate_kinds::convert;
    use http::Method;
    use serde_json::{Value, json};
    use std::time::Duration;
    use tokio::time::Instant;

    const VALIDATING: &str =
        "/apis/admissionregistration.k8s.io/v1/validatingwebhookconfigurations/celgate";
    const MUTATING: &str =
        "/apis/admissionregistration.k8s.io/v1/mutatingwebhookconfigurations/celgate";

    /// A set of one bound policy matching creates of `resource`.
    fn matching(resource: &str) -> Option<Arc<PolicySet>> {
        let mut policy = fixtures::policy_json("p", 1, "true", None);
        policy["spec"]["matchConstraints"]["resourceRules"][0]["resources"] = json!([resource]);
        let policy: celgate_crds::ValidatingAdmissionPolicy =
            serde_json::from_value(policy).unwrap();
        Some(Arc::new(PolicySet::new(
            vec![BoundPolicy {
                policy: policy_set::compile(&policy),
                bindings: vec![Arc::new(convert::validating_binding(&fixtures::binding(
                    "b", "p",
                )))],
            }],
            Vec::new(),
        )))
    }

    /// The resources of the fail-closed webhook's rules in an applied configuration.
    fn resources(body: &Value) -> Vec<String> {
        body["webhooks"]
            .as_array()
            .into_iter()
            .flatten()
            .filter(|w| w["name"] == VALIDATE_FAIL)
            .flat_map(|w| w["rules"].as_array().cloned().unwrap_or_default())
            .flat_map(|r| r["resources"].as_array().cloned().unwrap_or_default())
            .filter_map(|r| r.as_str().map(str::to_string))
            .collect()
    }

    #[tokio::test(start_paused = true)]
    async fn configurations_are_applied_when_rules_change_and_retried_with_backoff() {
        let scenario = async {
            let (client, mut api) = fixtures::pair();
            let (sets, receiver) = watch::channel(None);
            let (_ca, ca) = watch::channel("ca".to_string());
            let (_leading, leadership) = watch::channel(true);
            let registration = Registration {
                endpoint: Endpoint::Url("https://127.0.0.1:9443".into()),
                namespace: "celgate-system".into(),
                create_missing: true,
                rules: WebhookRules::Policies,
            };
            let inputs = Inputs {
                sets: receiver,
                ca,
                leadership,
            };
            let (applied, mut covered) = watch::channel(Applied::default());
            let _task = tokio::spawn(registration.keep_applied(client, inputs, applied));

            sets.send_replace(matching("configmaps"));
            // Out of cluster: missing configurations are created (applied without a uid).
            let call = api.next().await;
            assert_eq!(
                (&call.method, call.path.as_str()),
                (&Method::GET, VALIDATING)
            );
            call.reply(404, status(404, "NotFound"));
            let call = api.next().await;
            assert_eq!(
                (&call.method, call.path.as_str()),
                (&Method::PATCH, VALIDATING)
            );
            assert!(call.body["metadata"].get("uid").is_none());
            call.reply(500, status(500, "InternalError"));
            let failed = Instant::now();
            covered.changed().await.unwrap();
            {
                let after_failure = covered.borrow_and_update();
                assert!(after_failure.set.is_none());
                assert!(
                    after_failure
                        .error
                        .as_deref()
                        .unwrap()
                        .contains("InternalError")
                );
            }

            // Retried after the first delay, with the same configuration; then the mutating one.
            let call = api.next().await;
            assert_eq!(Instant::now() - failed, retry::WRITE.first);
            assert_eq!(
                (&call.method, call.path.as_str()),
                (&Method::GET, VALIDATING)
            );
            call.reply(404, status(404, "NotFound"));
            let call = api.next().await;
            assert_eq!(call.path, VALIDATING);
            assert_eq!(resources(&call.body), ["configmaps"]);
            let body = call.body.clone();
            call.reply(200, body);
            let call = api.next().await;
            assert_eq!((&call.method, call.path.as_str()), (&Method::GET, MUTATING));
            call.reply(404, status(404, "NotFound"));
            let call = api.next().await;
            assert_eq!(
                (&call.method, call.path.as_str()),
                (&Method::PATCH, MUTATING)
            );
            let body = call.body.clone();
            call.reply(200, body);
            covered.changed().await.unwrap();
            let first = sets.borrow().clone().unwrap();
            {
                let after_success = covered.borrow_and_update();
                assert!(Arc::ptr_eq(after_success.set.as_ref().unwrap(), &first));
                assert!(after_success.error.is_none());
            }

            // Another set with the same rules: nothing to apply, and the set is covered.
            sets.send_replace(matching("configmaps"));
            let idle = tokio::time::timeout(Duration::from_secs(3600), api.next()).await;
            assert!(idle.is_err(), "applied again with unchanged rules");
            let second = sets.borrow().clone().unwrap();
            assert!(Arc::ptr_eq(covered.borrow().set.as_ref().unwrap(), &second));

            // New rules are applied to the configuration they change (the validating one),
            // now existing: its uid is read (the create answered none), then kept from the
            // answer, so the next change is one request.
            sets.send_replace(matching("secrets"));
            let call = api.next().await;
            assert_eq!(
                (&call.method, call.path.as_str()),
                (&Method::GET, VALIDATING)
            );
            call.reply(
                200,
                json!({"metadata": {"name": "celgate", "uid": "v-uid"}}),
            );
            let call = api.next().await;
            assert_eq!(
                (&call.method, call.path.as_str()),
                (&Method::PATCH, VALIDATING)
            );
            assert_eq!(call.body["metadata"]["uid"], "v-uid");
            assert_eq!(resources(&call.body), ["secrets"]);
            let body = call.body.clone();
            call.reply(200, body);
            sets.send_replace(matching("pods"));
            let call = api.next().await;
            assert_eq!(
                (&call.method, call.path.as_str()),
                (&Method::PATCH, VALIDATING)
            );
            assert_eq!(call.body["metadata"]["uid"], "v-uid");
            assert_eq!(resources(&call.body), ["pods"]);
            // A failed apply forgets the uid: the retry reads it again.
            call.reply(409, status(409, "Conflict"));
            let call = api.next().await;
            assert_eq!(
                (&call.method, call.path.as_str()),
                (&Method::GET, VALIDATING)
            );
        };
        tokio::time::timeout(Duration::from_secs(7200), scenario)
            .await
            .expect("the scenario did not finish");
    }

    /// The caBundle of the fail-closed validating webhook in an applied configuration.
    fn ca_bundle(body: &Value) -> String {
        let cfg: ValidatingWebhookConfiguration = serde_json::from_value(body.clone()).unwrap();
        cfg.webhooks
            .unwrap_or_default()
            .into_iter()
            .find(|w| w.name == VALIDATE_FAIL)
            .and_then(|w| w.client_config.ca_bundle)
            .map(|b| String::from_utf8(b.0).unwrap())
            .unwrap_or_default()
    }

    #[tokio::test(start_paused = true)]
    async fn only_the_leader_writes_and_a_new_ca_is_applied_to_the_shipped_configurations() {
        let scenario = async {
            let (client, mut api) = fixtures::pair();
            let (sets, receiver) = watch::channel(matching("configmaps"));
            let (ca_sender, ca) = watch::channel("ca-1".to_string());
            let (leading, leadership) = watch::channel(false);
            let registration = Registration {
                endpoint: Endpoint::Service {
                    namespace: "celgate-system".into(),
                    name: "celgate-webhook".into(),
                    port: 443,
                },
                namespace: "celgate-system".into(),
                create_missing: false,
                rules: WebhookRules::Policies,
            };
            let inputs = Inputs {
                sets: receiver,
                ca,
                leadership,
            };
            let (applied, mut covered) = watch::channel(Applied::default());
            let _task = tokio::spawn(registration.keep_applied(client, inputs, applied));

            // Not leading: nothing is read or written, whatever changes.
            sets.send_replace(matching("secrets"));
            ca_sender.send_replace("ca-2".into());
            let idle = tokio::time::timeout(Duration::from_secs(3600), api.next()).await;
            assert!(idle.is_err(), "a replica that does not lead wrote");

            // Leading, and the shipped configuration is missing: an error that says what to
            // apply, and nothing is created.
            leading.send_replace(true);
            let call = api.next().await;
            assert_eq!(
                (&call.method, call.path.as_str()),
                (&Method::GET, VALIDATING)
            );
            call.reply(404, status(404, "NotFound"));
            covered.changed().await.unwrap();
            let error = covered.borrow_and_update().error.clone().unwrap();
            assert!(
                error.contains("ValidatingWebhookConfiguration \"celgate\" does not exist")
                    && error.contains("config/webhook"),
                "{error}"
            );

            // Shipped: each is read, then patched by uid with the current CA and rules.
            let call = api.next().await;
            assert_eq!(
                (&call.method, call.path.as_str()),
                (&Method::GET, VALIDATING)
            );
            call.reply(200, json!({"apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingWebhookConfiguration", "metadata": {"name": "celgate", "uid": "v-uid"}}));
            let call = api.next().await;
            assert_eq!(
                (&call.method, call.path.as_str()),
                (&Method::PATCH, VALIDATING)
            );
            assert_eq!(call.body["metadata"]["uid"], "v-uid");
            assert_eq!(ca_bundle(&call.body), "ca-2");
            assert_eq!(resources(&call.body), ["secrets"]);
            let body = call.body.clone();
            call.reply(200, body);
            let call = api.next().await;
            assert_eq!((&call.method, call.path.as_str()), (&Method::GET, MUTATING));
            call.reply(200, json!({"apiVersion": "admissionregistration.k8s.io/v1", "kind": "MutatingWebhookConfiguration", "metadata": {"name": "celgate", "uid": "m-uid"}}));
            let call = api.next().await;
            assert_eq!(
                (&call.method, call.path.as_str()),
                (&Method::PATCH, MUTATING)
            );
            assert_eq!(call.body["metadata"]["uid"], "m-uid");
            let body = call.body.clone();
            call.reply(200, body);
            covered.changed().await.unwrap();
            assert!(covered.borrow_and_update().error.is_none());

            // A new CA (the Secret was replaced): applied at once, by the uids last answered.
            ca_sender.send_replace("ca-3".into());
            let call = api.next().await;
            assert_eq!(
                (&call.method, call.path.as_str()),
                (&Method::PATCH, VALIDATING)
            );
            assert_eq!(call.body["metadata"]["uid"], "v-uid");
            assert_eq!(ca_bundle(&call.body), "ca-3");
        };
        tokio::time::timeout(Duration::from_secs(7200), scenario)
            .await
            .expect("the scenario did not finish");
    }

    #[test]
    fn the_policy_webhook_covers_all_four_kinds() {
        let endpoint = Endpoint::Url("https://127.0.0.1:9443".into());
        let cfg = validating_configuration(
            &PolicySet::default(),
            WebhookRules::Policies,
            &endpoint,
            "ca",
            "celgate",
        );
        let hook = cfg
            .webhooks
            .unwrap_or_default()
            .into_iter()
            .find(|w| w.name == VALIDATE_POLICIES)
            .expect("the policy webhook is registered");
        let resources: Vec<String> = hook
            .rules
            .unwrap_or_default()
            .into_iter()
            .flat_map(|r| r.resources.unwrap_or_default())
            .collect();
        assert_eq!(
            resources,
            [
                "validatingadmissionpolicies",
                "validatingadmissionpolicybindings",
                "mutatingadmissionpolicies",
                "mutatingadmissionpolicybindings"
            ]
        );
    }

    #[test]
    fn mutating_webhooks_split_by_failure_and_reinvocation_policy() {
        let endpoint = Endpoint::Url("https://127.0.0.1:9443".into());
        let empty = mutating_configuration(
            &PolicySet::default(),
            WebhookRules::Policies,
            &endpoint,
            "ca",
            "celgate",
        );
        assert_eq!(empty.webhooks, Some(Vec::new()), "no policy, no webhook");

        let bound = |name: &str, failure: &str, reinvocation: &str, resource: &str| {
            let policy = fixtures::mutating_policy(name, failure, reinvocation, resource);
            celgate_engine::BoundMutatingPolicy {
                policy: policy_set::compile(&policy),
                bindings: vec![Arc::new(convert::mutating_binding(
                    &fixtures::mutating_binding(&format!("{name}-b"), name),
                ))],
            }
        };
        let set = PolicySet::new(
            Vec::new(),
            vec![
                bound("a", "Fail", "Never", "configmaps"),
                bound("b", "Fail", "Never", "secrets"),
                bound("c", "Fail", "Never", "configmaps"),
                bound("d", "Ignore", "IfNeeded", "pods"),
            ],
        );
        let cfg = mutating_configuration(
            &set,
            WebhookRules::Policies,
            &endpoint,
            "ca",
            "celgate-system",
        );
        let hooks = cfg.webhooks.unwrap();
        let names: Vec<&str> = hooks.iter().map(|w| w.name.as_str()).collect();
        assert_eq!(
            names,
            ["mutate.celgate.io", "mutate-ignore-reinvoke.celgate.io"]
        );
        let (closed, open) = (&hooks[0], &hooks[1]);
        // The union of the group's rules, each once.
        let resources = |w: &MutatingWebhook| -> Vec<String> {
            w.rules
                .iter()
                .flatten()
                .flat_map(|r| r.resources.clone().unwrap_or_default())
                .collect()
        };
        assert_eq!(resources(closed), ["configmaps", "secrets"]);
        assert_eq!(resources(open), ["pods"]);
        assert_eq!(closed.failure_policy.as_deref(), Some("Fail"));
        assert_eq!(closed.reinvocation_policy.as_deref(), Some("Never"));
        assert_eq!(open.failure_policy.as_deref(), Some("Ignore"));
        assert_eq!(open.reinvocation_policy.as_deref(), Some("IfNeeded"));
        assert_eq!(
            open.client_config.url.as_deref(),
            Some("https://127.0.0.1:9443/mutate/ignore/ifneeded")
        );
        for hook in &hooks {
            assert_eq!(hook.side_effects, "None");
            assert_eq!(
                hook.namespace_selector,
                Some(exclude_namespace("celgate-system"))
            );
        }
        // The validating configuration has no webhook for mutating policies.
        let validating = validating_configuration(
            &set,
            WebhookRules::Policies,
            &endpoint,
            "ca",
            "celgate-system",
        );
        let names: Vec<String> = validating
            .webhooks
            .unwrap_or_default()
            .into_iter()
            .map(|w| w.name)
            .collect();
        assert_eq!(names, [VALIDATE_POLICIES]);
    }

    #[test]
    fn a_policy_is_registered_before_it_is_bound_so_binding_it_changes_no_configuration() {
        use crate::controllers::policy_set::{PolicyCache, Stored};
        let endpoint = Endpoint::Url("https://127.0.0.1:9443".into());
        let configurations = |set: &PolicySet| {
            (
                validating_configuration(
                    set,
                    WebhookRules::Policies,
                    &endpoint,
                    "ca",
                    "celgate-system",
                ),
                mutating_configuration(
                    set,
                    WebhookRules::Policies,
                    &endpoint,
                    "ca",
                    "celgate-system",
                ),
            )
        };
        let validating = fixtures::policy("p", 1, "true", None);
        let mutating = fixtures::mutating_policy("m", "Ignore", "IfNeeded", "secrets");
        let not_compiled = fixtures::mutating_policy("n", "Fail", "Never", "pods");
        let mut cache = PolicyCache::default();
        cache.insert(&validating, policy_set::compile(&validating));
        cache.insert(&mutating, policy_set::compile(&mutating));
        let mut validating = Stored {
            policies: vec![Arc::new(validating)],
            bindings: Vec::new(),
        };
        let mut mutating = Stored {
            policies: vec![Arc::new(mutating), Arc::new(not_compiled)],
            bindings: Vec::new(),
        };

        let unbound = cache.build(validating.clone(), mutating.clone());
        assert!(unbound.is_empty(), "no policy is bound yet");
        let before = configurations(&unbound);
        let (v, m) = &before;
        let v_json = serde_json::to_value(v).unwrap();
        assert_eq!(resources(&v_json), ["configmaps"]);
        let hooks = m.webhooks.clone().unwrap_or_default();
        let names: Vec<&str> = hooks.iter().map(|w| w.name.as_str()).collect();
        // The uncompiled policy `n` (Fail, Never) has no webhook.
        assert_eq!(names, ["mutate-ignore-reinvoke.celgate.io"]);
        let rules = hooks[0].rules.clone().unwrap_or_default();
        assert_eq!(
            rules[0].resources.as_deref(),
            Some(&["secrets".to_string()][..])
        );

        validating.bindings = vec![Arc::new(fixtures::binding("b", "p"))];
        mutating.bindings = vec![Arc::new(fixtures::mutating_binding("mb", "m"))];
        let bound = cache.build(validating, mutating);
        assert_eq!(
            (bound.validating().len(), bound.mutating().len()),
            (1, 1),
            "both policies are bound"
        );
        assert!(bound.unbound().validating.is_empty() && bound.unbound().mutating.is_empty());
        assert_eq!(
            configurations(&bound),
            before,
            "binding changed the configurations"
        );
    }

    #[test]
    fn with_every_resource_covered_a_new_policy_over_another_resource_changes_no_configuration() {
        use crate::controllers::policy_set::{PolicyCache, Stored};
        let endpoint = Endpoint::Url("https://127.0.0.1:9443".into());
        let configurations = |set: &PolicySet, coverage| {
            (
                validating_configuration(set, coverage, &endpoint, "ca", "celgate-system"),
                mutating_configuration(set, coverage, &endpoint, "ca", "celgate-system"),
            )
        };
        let configmaps = fixtures::policy("p", 1, "true", None);
        let mut secrets_json = fixtures::policy_json("q", 1, "true", None);
        secrets_json["spec"]["matchConstraints"]["resourceRules"][0]["resources"] =
            serde_json::json!(["secrets"]);
        let secrets: celgate_crds::ValidatingAdmissionPolicy =
            serde_json::from_value(secrets_json).unwrap();
        let mutating = fixtures::mutating_policy("m", "Ignore", "IfNeeded", "pods");
        let mut cache = PolicyCache::default();
        for p in [&configmaps, &secrets] {
            cache.insert(p, policy_set::compile(p));
        }
        cache.insert(&mutating, policy_set::compile(&mutating));
        let stored = |validating: Vec<&celgate_crds::ValidatingAdmissionPolicy>| {
            (
                Stored {
                    policies: validating.into_iter().cloned().map(Arc::new).collect(),
                    bindings: Vec::new(),
                },
                Stored {
                    policies: vec![Arc::new(mutating.clone())],
                    bindings: Vec::new(),
                },
            )
        };
        // Building forgets the policies not stored: the set with both first.
        let (v, m) = stored(vec![&configmaps, &secrets]);
        let two = cache.build(v, m);
        let (v, m) = stored(vec![&configmaps]);
        let one = cache.build(v, m);

        let (v, m) = configurations(&one, WebhookRules::All);
        let v = serde_json::to_value(v).unwrap();
        let every = serde_json::json!([{"apiGroups": ["*"], "apiVersions": ["*"],
            "operations": ["*"], "resources": ["*/*"], "scope": "*"}]);
        let hooks = v["webhooks"].as_array().unwrap();
        let names: Vec<&str> = hooks.iter().filter_map(|w| w["name"].as_str()).collect();
        // No policy fails open: no fail-open webhook, even covering everything.
        assert_eq!(names, [VALIDATE_FAIL, VALIDATE_POLICIES]);
        assert_eq!(hooks[0]["rules"], every);
        assert_eq!(
            hooks[0]["namespaceSelector"],
            serde_json::to_value(exclude_namespace("celgate-system")).unwrap()
        );
        // celgate's own webhook keeps its rules.
        assert_eq!(
            hooks[1]["rules"][0]["resources"][0],
            "validatingadmissionpolicies"
        );
        let m = serde_json::to_value(m).unwrap();
        let hooks = m["webhooks"].as_array().unwrap();
        assert_eq!(hooks.len(), 1);
        assert_eq!(hooks[0]["name"], "mutate-ignore-reinvoke.celgate.io");
        assert_eq!(hooks[0]["rules"], every);

        assert_eq!(
            configurations(&two, WebhookRules::All),
            configurations(&one, WebhookRules::All),
            "a policy over secrets changed the configurations"
        );
        // With the policies' own rules, the same policy needs a rule for secrets.
        let (v, _) = configurations(&two, WebhookRules::Policies);
        assert_eq!(
            resources(&serde_json::to_value(v).unwrap()),
            ["configmaps", "secrets"]
        );
    }
}
