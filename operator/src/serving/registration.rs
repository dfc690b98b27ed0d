//! The ValidatingWebhookConfiguration and MutatingWebhookConfiguration celgate owns: their rules
//! are the union of the bound compiled policies' match constraints (so only relevant traffic
//! reaches the webhook, and a policy nothing binds costs no request), or with
//! [`WebhookRules::All`] every resource (so a new policy changes no configuration), split into a
//! fail-closed and a fail-open webhook by failurePolicy. They send CONNECT only for policies
//! that name it (`*` is CREATE, UPDATE and DELETE unless `--wildcard-includes-connect`), never
//! the requests of [`NeverSent`], and they exclude celgate's own namespace and the
//! `--excluded-namespaces` (kube-system by default) so a broken webhook cannot lock celgate or
//! the control plane out. The mutating side is split further by reinvocationPolicy, since the
//! API server reinvokes a webhook as a whole: policies that must run once are never served by a
//! webhook it may call again.

use std::collections::BTreeSet;
use std::sync::Arc;

use celgate_engine::matching::resource_listed;
use celgate_engine::model::{
    FailurePolicy, MatchResources, ReinvocationPolicy, WildcardOperations,
};
use celgate_engine::{MutatingWebhookGroup, PolicySet};
use futures::{Stream, StreamExt, stream};
use k8s_openapi::ByteString;
use k8s_openapi::api::admissionregistration::v1::{
    MatchCondition, MutatingWebhook, MutatingWebhookConfiguration, RuleWithOperations,
    ServiceReference, ValidatingWebhook, ValidatingWebhookConfiguration, WebhookClientConfig,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, LabelSelectorRequirement};
use kube::api::{ObjectMeta, Patch, PatchParams};
use kube::runtime::watcher;
use kube::{Api, Client};
use thiserror::Error;
use tokio::sync::watch;
use tracing::{debug, info, warn};

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

/// The default of `--webhook-timeout-seconds`: how long kube-apiserver waits for a webhook's
/// answer (docs/limitations.md gives the measurement it is chosen by).
pub const DEFAULT_TIMEOUT_SECONDS: i32 = 5;

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

/// The operations `*` is registered as by default, and those of [`WebhookRules::All`]: never
/// CONNECT (`kubectl exec`, `attach`, `port-forward`), so a broken celgate cannot also take
/// away the way to debug the cluster; a policy that names CONNECT is registered for it (see
/// [`WildcardOperations`]).
const REGISTERED_OPERATIONS: [&str; 3] = ["CREATE", "UPDATE", "DELETE"];

/// Requests never sent to a policy webhook, whatever the rules (`--never-sent`), each excluded
/// by a matchCondition: the busiest writes of the control plane, whose failure (under a
/// fail-closed webhook while celgate is down) would take the cluster down with it, and the
/// review kinds no policy applies to anyway. In-tree policies see them all; `none` sends them.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum NeverSent {
    /// Events (core and events.k8s.io): written by every component all the time; losing them
    /// must not block anything.
    Events,
    /// Leases: node heartbeats and leader election (celgate's own included) renew every few
    /// seconds.
    Leases,
    /// TokenReviews and SelfSubjectReviews: authentication checks, never stored.
    AuthenticationReviews,
    /// SubjectAccessReviews and their kin: authorization checks (celgate's `authorizer` makes
    /// them), never stored.
    AuthorizationReviews,
    /// Nodes and their subresources: the kubelet reports its node's status through them; held
    /// up, nodes turn NotReady and their pods are evicted.
    Nodes,
    /// CertificateSigningRequests: kubelets get and rotate their client and serving
    /// certificates through them; held up, a new node cannot join and an old one's
    /// certificate expires.
    CertificateSigningRequests,
    /// The objects that hand out IP addresses: Service IPs (`networking.k8s.io` IPAddresses
    /// and ServiceCIDRs) and the network plugin's blocks and handles (Calico's IPAM objects,
    /// Cilium's nodes, endpoints and identities); held up, no new pod or Service gets an
    /// address.
    IpAllocations,
    /// APIServices: aggregated APIs (metrics-server among them) report their availability
    /// through them.
    ApiServices,
    /// Nothing: every request the rules match is sent, as in-tree.
    None,
}

impl NeverSent {
    /// The default of `--never-sent`: every kind above.
    pub const DEFAULT: [NeverSent; 8] = [
        NeverSent::Events,
        NeverSent::Leases,
        NeverSent::AuthenticationReviews,
        NeverSent::AuthorizationReviews,
        NeverSent::Nodes,
        NeverSent::CertificateSigningRequests,
        NeverSent::IpAllocations,
        NeverSent::ApiServices,
    ];

    /// The matchCondition that keeps these requests away; none for `None`.
    pub fn exclusion(self) -> Option<Exclusion> {
        let (name, kinds): (&'static str, Kinds) = match self {
            NeverSent::Events => (
                "celgate-never-events",
                &[("", &["events"]), ("events.k8s.io", &["events"])],
            ),
            NeverSent::Leases => (
                "celgate-never-leases",
                &[("coordination.k8s.io", &["leases"])],
            ),
            NeverSent::AuthenticationReviews => (
                "celgate-never-authentication-reviews",
                &[(
                    "authentication.k8s.io",
                    &["tokenreviews", "selfsubjectreviews"],
                )],
            ),
            NeverSent::AuthorizationReviews => (
                "celgate-never-authorization-reviews",
                &[(
                    "authorization.k8s.io",
                    &[
                        "subjectaccessreviews",
                        "selfsubjectaccessreviews",
                        "localsubjectaccessreviews",
                        "selfsubjectrulesreviews",
                    ],
                )],
            ),
            NeverSent::Nodes => ("celgate-never-nodes", &[("", &["nodes"])]),
            NeverSent::CertificateSigningRequests => (
                "celgate-never-certificate-signing-requests",
                &[("certificates.k8s.io", &["certificatesigningrequests"])],
            ),
            NeverSent::IpAllocations => (
                "celgate-never-ip-allocations",
                &[
                    ("networking.k8s.io", &["ipaddresses", "servicecidrs"]),
                    (
                        "crd.projectcalico.org",
                        &[
                            "ipamblocks",
                            "blockaffinities",
                            "ipamhandles",
                            "ipamconfigs",
                        ],
                    ),
                    (
                        "cilium.io",
                        &[
                            "ciliumnodes",
                            "ciliumendpoints",
                            "ciliumendpointslices",
                            "ciliumidentities",
                        ],
                    ),
                ],
            ),
            NeverSent::ApiServices => (
                "celgate-never-api-services",
                &[("apiregistration.k8s.io", &["apiservices"])],
            ),
            NeverSent::None => return None,
        };
        Some(Exclusion { name, kinds })
    }
}

/// Kinds of request, by group: each group's resources (none: every resource of the group).
type Kinds = &'static [(&'static str, &'static [&'static str])];

/// A matchCondition of the policy webhooks: requests for its kinds are not sent. A webhook
/// carries it only when its rules can match one of them, since kube-apiserver compiles each
/// condition when it writes or loads the configuration and evaluates it on every request the
/// rules send (with the default exclusions on every webhook, a configuration write took twice
/// as long and the first request after it compiled them all). The kinds that kube-apiserver
/// treats as equivalent across groups (core and `events.k8s.io` Events) sit in one condition,
/// so a rule that reaches one of them brings the condition that names both.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Exclusion {
    /// The condition's name.
    pub name: &'static str,
    /// What it keeps away.
    kinds: Kinds,
}

impl Exclusion {
    /// The condition's CEL: false for a request to one of its kinds.
    pub fn expression(&self) -> String {
        let quoted = |s: &str| format!("'{s}'");
        let terms: Vec<String> = self
            .kinds
            .iter()
            .map(|(group, resources)| {
                let group = format!("request.resource.group == {}", quoted(group));
                match resources {
                    [] => group,
                    [one] => format!("{group} && request.resource.resource == {}", quoted(one)),
                    many => {
                        let list: Vec<String> = many.iter().map(|r| quoted(r)).collect();
                        format!(
                            "{group} && request.resource.resource in [{}]",
                            list.join(", ")
                        )
                    }
                }
            })
            .collect();
        match terms.as_slice() {
            [one] => format!("!({one})"),
            many => {
                let parenthesised: Vec<String> = many.iter().map(|t| format!("({t})")).collect();
                format!("!({})", parenthesised.join(" || "))
            }
        }
    }

    /// Whether a request one of `rules` matches can be of its kinds: a rule's group is `*` or
    /// one of the kinds' groups, and one of its resources (`resource` or
    /// `resource/subresource`) is `*` or one of that group's resources.
    fn reached_by(&self, rules: &[RuleWithOperations]) -> bool {
        rules.iter().any(|rule| {
            let groups = rule.api_groups.as_deref().unwrap_or_default();
            let resources = rule.resources.as_deref().unwrap_or_default();
            self.kinds.iter().any(|(group, names)| {
                groups.iter().any(|g| g == "*" || g == group)
                    && resources.iter().any(|r| {
                        let resource = r.split_once('/').map_or(r.as_str(), |(res, _)| res);
                        names.is_empty() || resource == "*" || names.contains(&resource)
                    })
            })
        })
    }
}

/// The condition that keeps celgate's own kinds from the policy webhooks, always: no
/// policy applies to them (as in-tree policies skip the in-tree policy kinds), and while
/// celgate is down a fail-closed policy over `*` must not stop its policies being deleted.
const OWN_KINDS: Exclusion = Exclusion {
    name: "celgate-never-own-kinds",
    kinds: &[(celgate_engine::GROUP, &[])],
};

/// What the policy webhooks never see: namespaces and kinds of request.
#[derive(Clone, Debug)]
pub struct Exemptions {
    /// The namespaces skipped ([`excluded_namespaces`]: celgate's own first).
    pub namespaces: Vec<String>,
    /// The requests never sent.
    pub never_sent: Vec<NeverSent>,
}

impl Exemptions {
    /// The matchConditions of a policy webhook with these `rules`: celgate's own kinds, then
    /// one per kind never sent, once each, of those its rules can reach ([`Exclusion`]); none
    /// when they reach none.
    fn match_conditions(&self, rules: &[RuleWithOperations]) -> Option<Vec<MatchCondition>> {
        let mut out: Vec<MatchCondition> = Vec::new();
        let exclusions =
            std::iter::once(OWN_KINDS).chain(self.never_sent.iter().filter_map(|n| n.exclusion()));
        for exclusion in exclusions {
            if exclusion.reached_by(rules) && !out.iter().any(|c| c.name == exclusion.name) {
                out.push(MatchCondition {
                    name: exclusion.name.to_string(),
                    expression: exclusion.expression(),
                });
            }
        }
        (!out.is_empty()).then_some(out)
    }

    /// The namespaceSelector of a policy webhook: every namespace but the skipped ones, by the
    /// name label kube-apiserver sets on every namespace.
    fn namespace_selector(&self) -> LabelSelector {
        LabelSelector {
            match_expressions: Some(vec![LabelSelectorRequirement {
                key: "kubernetes.io/metadata.name".into(),
                operator: "NotIn".into(),
                values: Some(self.namespaces.clone()),
            }]),
            match_labels: None,
        }
    }
}

/// Which requests a webhook that serves policies is sent.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum WebhookRules {
    /// Those the rules of its compiled policies match: only relevant traffic reaches celgate,
    /// and a policy over a resource no other policy matches is enforced once kube-apiserver
    /// has loaded the changed configuration (a few milliseconds more).
    #[default]
    Policies,
    /// Every resource, subresource and operation but CONNECT and [`NeverSent`], once it serves
    /// any bound policy: a new policy is enforced as soon as celgate has compiled it and a
    /// binding names it; every write in the cluster (outside the excluded namespaces) then
    /// waits on celgate, and with failurePolicy Fail fails while celgate is unreachable.
    All,
}

/// The rule of [`WebhookRules::All`].
fn every_resource() -> RuleWithOperations {
    let any = || Some(vec!["*".to_string()]);
    RuleWithOperations {
        operations: Some(REGISTERED_OPERATIONS.map(String::from).to_vec()),
        api_groups: any(),
        api_versions: any(),
        resources: Some(vec!["*/*".to_string()]),
        scope: Some("*".to_string()),
    }
}

/// The rules a webhook registers for the `policies` it serves: none when they have no rule.
/// Covering every resource keeps the policies' rules for CONNECT (as CONNECT rules), since
/// [`every_resource`] has none.
fn covering(policies: Vec<RuleWithOperations>, coverage: WebhookRules) -> Vec<RuleWithOperations> {
    match coverage {
        WebhookRules::All if !policies.is_empty() => {
            let mut out = vec![every_resource()];
            for mut rule in policies {
                let connect = rule
                    .operations
                    .iter()
                    .flatten()
                    .any(|o| o == "CONNECT" || o == "*");
                rule.operations = Some(vec!["CONNECT".to_string()]);
                if connect && !out.contains(&rule) {
                    out.push(rule);
                }
            }
            out
        }
        _ => policies,
    }
}

/// Webhook rules for one failure policy: every well-formed resource rule of the bound compiled
/// validating policies. A policy nothing binds registers nothing, so it costs no request, and
/// under failurePolicy Fail cannot fail one while celgate is down; binding it then waits for
/// kube-apiserver to load the changed configuration (Ready says when).
fn rules(set: &PolicySet, failure: FailurePolicy) -> Vec<RuleWithOperations> {
    union_of_rules(
        set.wildcard_operations(),
        set.validating()
            .iter()
            .map(|b| &b.policy)
            .filter(|p| p.failure_policy() == failure)
            .map(|p| p.spec.match_constraints.as_ref()),
    )
}

/// Webhook rules for one mutating webhook group: every well-formed resource rule of the bound
/// compiled mutating policies of that group (as for [`rules`]).
fn mutating_rules(set: &PolicySet, group: MutatingWebhookGroup) -> Vec<RuleWithOperations> {
    union_of_rules(
        set.wildcard_operations(),
        set.mutating()
            .iter()
            .map(|b| &b.policy)
            .filter(|p| MutatingWebhookGroup::of(p) == group)
            .map(|p| p.spec.match_constraints.as_ref()),
    )
}

/// The operations of a rule as registered: those it names, CONNECT included, and `*` as
/// `wildcard` has it ([`WildcardOperations`]).
fn registered_operations(operations: &[String], wildcard: WildcardOperations) -> Vec<String> {
    if operations.iter().any(|o| o == "*") {
        return match wildcard {
            WildcardOperations::InTree => vec!["*".to_string()],
            WildcardOperations::WithoutConnect => REGISTERED_OPERATIONS.map(String::from).to_vec(),
        };
    }
    operations.to_vec()
}

/// Every well-formed resource rule of these match constraints, with its operations as
/// [`registered_operations`] registers them, in order, but none that another of them
/// [`covers`]: the webhook is sent the same requests, and a binding whose policy's rules are
/// already covered (by a wildcard rule, say) changes no configuration, so it is enforced as
/// soon as celgate publishes it, without kube-apiserver writing and loading the configuration
/// again. A malformed rule is left out (the engine still rejects what it cannot match), so one
/// bad policy cannot make the whole configuration invalid.
fn union_of_rules<'a>(
    wildcard: WildcardOperations,
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
            let operations = registered_operations(&r.operations, wildcard);
            let key = (
                operations.clone(),
                r.api_groups.clone(),
                r.api_versions.clone(),
                r.resources.clone(),
                r.scope.clone(),
            );
            if !well_formed || !seen.insert(key) {
                continue;
            }
            let rule = RuleWithOperations {
                operations: Some(operations),
                api_groups: Some(r.api_groups.clone()),
                api_versions: Some(r.api_versions.clone()),
                resources: Some(r.resources.clone()),
                scope: Some(r.scope.clone()),
            };
            if !out.iter().any(|kept| covers(kept, &rule)) {
                out.retain(|kept| !covers(&rule, kept));
                out.push(rule);
            }
        }
    }
    out
}

/// Whether kube-apiserver sends every request `narrow` matches to a webhook with rule `wide`:
/// each of the operations, groups and versions of `narrow` is `wide`'s or `wide` has `*`,
/// each of its resource entries, read as a request's resource and subresource, is one `wide`
/// lists as the engine matches requests ([`resource_listed`]: `*` and `*/*` in `narrow` only
/// by the same wildcard), and `wide`'s scope is `*` or the same.
fn covers(wide: &RuleWithOperations, narrow: &RuleWithOperations) -> bool {
    let all = |wide: &Option<Vec<String>>, narrow: &Option<Vec<String>>| {
        let wide = wide.as_deref().unwrap_or_default();
        wide.iter().any(|w| w == "*")
            || narrow
                .as_deref()
                .unwrap_or_default()
                .iter()
                .all(|n| wide.contains(n))
    };
    let resources = wide.resources.as_deref().unwrap_or_default();
    all(&wide.operations, &narrow.operations)
        && all(&wide.api_groups, &narrow.api_groups)
        && all(&wide.api_versions, &narrow.api_versions)
        && narrow
            .resources
            .as_deref()
            .unwrap_or_default()
            .iter()
            .all(|entry| {
                let (resource, sub) = entry.split_once('/').unwrap_or((entry, ""));
                resource_listed(resources, resource, sub)
            })
        && (wide.scope.as_deref() == Some("*") || wide.scope == narrow.scope)
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

/// The namespaces the policy webhooks skip: celgate's own, always, then `others` (the
/// `--excluded-namespaces`), each once; empty names are ignored.
pub fn excluded_namespaces(own: &str, others: &[String]) -> Vec<String> {
    let mut out = vec![own.to_string()];
    for namespace in others {
        let namespace = namespace.trim();
        if !namespace.is_empty() && !out.iter().any(|n| n == namespace) {
            out.push(namespace.to_string());
        }
    }
    out
}

/// What the webhook registration has achieved, for status: a policy generation is enforced
/// once a set holding it is covered by the configurations the API server holds.
#[derive(Clone, Debug, Default)]
pub struct Applied {
    /// The latest policy set whose webhook configurations are applied and, as far as the
    /// watch of them knows, still in place; `None` once they were changed or deleted and could
    /// not be applied again.
    pub set: Option<Arc<PolicySet>>,
    /// Why the configurations of a newer set could not be applied, until they are.
    pub error: Option<String>,
}

/// One configuration named celgate as the API server holds it, from a watch.
#[derive(Clone, Debug, Default, PartialEq)]
pub enum Observed {
    /// Not listed yet.
    #[default]
    Unknown,
    /// It does not exist.
    Absent,
    /// It exists, as this JSON (without managedFields).
    Present(serde_json::Value),
}

/// Both configurations named celgate as the API server holds them.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Live {
    /// The ValidatingWebhookConfiguration.
    pub validating: Observed,
    /// The MutatingWebhookConfiguration.
    pub mutating: Observed,
}

/// Follows both configurations named celgate into `live` (every replica; only the leader
/// acts on it), until the process stops.
pub async fn watch_live(client: Client, live: watch::Sender<Live>) {
    let validating = observe::<ValidatingWebhookConfiguration>(client.clone()).map(|o| (true, o));
    let mutating = observe::<MutatingWebhookConfiguration>(client).map(|o| (false, o));
    stream::select(validating, mutating)
        .for_each(|(is_validating, observed)| {
            live.send_if_modified(|live| {
                let side = if is_validating {
                    &mut live.validating
                } else {
                    &mut live.mutating
                };
                let changed = *side != observed;
                *side = observed;
                changed
            });
            std::future::ready(())
        })
        .await;
}

/// The configuration of kind `K` named celgate after each change, from a watch of that name.
fn observe<K>(client: Client) -> impl Stream<Item = Observed> + Send
where
    K: kube::Resource<DynamicType = ()>
        + Clone
        + serde::Serialize
        + serde::de::DeserializeOwned
        + std::fmt::Debug
        + Send
        + 'static,
{
    let config = watcher::Config::default().fields(&format!("metadata.name={CONFIGURATION_NAME}"));
    let mut listed = Observed::Absent;
    retry::watch(Api::<K>::all(client), config).filter_map(move |event| {
        let observed = match event {
            Ok(watcher::Event::Init) => {
                listed = Observed::Absent;
                None
            }
            Ok(watcher::Event::InitApply(object)) => {
                listed = present(object);
                None
            }
            Ok(watcher::Event::InitDone) => Some(listed.clone()),
            Ok(watcher::Event::Apply(object)) => Some(present(object)),
            Ok(watcher::Event::Delete(_)) => Some(Observed::Absent),
            Err(error) => {
                debug!(%error, "watch of the webhook configurations failed; retrying");
                None
            }
        };
        std::future::ready(observed)
    })
}

/// A watched configuration as JSON, without managedFields.
fn present<K: kube::Resource + serde::Serialize>(mut object: K) -> Observed {
    object.meta_mut().managed_fields = None;
    serde_json::to_value(object).map_or(Observed::Unknown, Observed::Present)
}

/// Whether the `live` configuration holds every field of `desired` celgate sets: each of
/// its webhooks, by name, with those fields' values (the API server's defaults and webhooks
/// another field manager added are not compared).
fn holds_configuration(live: &serde_json::Value, desired: &serde_json::Value) -> bool {
    let webhooks = |v: &serde_json::Value| v["webhooks"].as_array().cloned().unwrap_or_default();
    let live = webhooks(live);
    webhooks(desired)
        .iter()
        .all(|d| live.iter().any(|l| l["name"] == d["name"] && holds(l, d)))
}

/// Whether `live` holds `desired`: every member of a desired object (empty ones may be
/// absent), every item of a desired list in order, any other value equal.
fn holds(live: &serde_json::Value, desired: &serde_json::Value) -> bool {
    use serde_json::Value;
    match (live, desired) {
        (Value::Object(l), Value::Object(d)) => d.iter().all(|(key, d)| match l.get(key) {
            Some(l) => holds(l, d),
            None => match d {
                Value::Null => true,
                Value::Array(d) => d.is_empty(),
                Value::Object(d) => d.is_empty(),
                _ => false,
            },
        }),
        (Value::Array(l), Value::Array(d)) => {
            l.len() == d.len() && l.iter().zip(d).all(|(l, d)| holds(l, d))
        }
        _ => live == desired,
    }
}

/// Where and how the API server reaches celgate's webhooks.
#[derive(Clone, Debug)]
pub struct Registration {
    /// Where the API server reaches the webhook.
    pub endpoint: Endpoint,
    /// What the policy webhooks never see.
    pub exemptions: Exemptions,
    /// Whether celgate creates the configurations when they are missing (out of cluster), or
    /// only fills in the ones its manifests ship (in a cluster: `kubectl delete -k` then
    /// removes them, and a stopping replica can never bring them back).
    pub create_missing: bool,
    /// Which requests the policy webhooks are sent.
    pub rules: WebhookRules,
    /// Seconds kube-apiserver waits for each webhook's answer (`timeoutSeconds`, 1 to 30)
    /// before its failurePolicy decides.
    pub timeout_seconds: i32,
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
    /// The configurations as the API server holds them ([`watch_live`]): the leader applies
    /// them again when they no longer hold what it applied.
    pub live: watch::Receiver<Live>,
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
        // Whether a configuration was changed or deleted behind celgate's back since the last
        // successful apply: until it is applied again, no set is covered.
        let mut lost = false;
        loop {
            let set = inputs.sets.borrow_and_update().clone();
            let ca = inputs.ca.borrow_and_update().clone();
            let leading = *inputs.leadership.borrow_and_update();
            let live = inputs.live.borrow_and_update().clone();
            if !leading {
                // Another replica writes; what it wrote is unknown here, so apply again once
                // this one leads.
                applied = Written::default();
            } else if let Some(set) = set {
                if let Some(what) = applied.forget_changed(&live) {
                    warn!(
                        configuration = what,
                        "the webhook configuration was changed or deleted by someone else; applying it again"
                    );
                    lost = true;
                }
                let desired = (
                    validating_configuration(&set, &self, &ca),
                    mutating_configuration(&set, &self, &ca),
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
                            lost = false;
                        }
                        Err(error) => {
                            metrics::reconcile_failed(metrics::REGISTRATION);
                            let delay = retry.next_delay();
                            warn!(%error, retry_in_s = delay.as_secs_f64(), "cannot apply the webhook configurations");
                            applied_sets.send_modify(|a| {
                                if lost {
                                    a.set = None;
                                }
                                a.error = Some(format!(
                                    "cannot apply the webhook configurations: {error}"
                                ));
                            });
                            tokio::select! {
                                () = tokio::time::sleep(delay) => {}
                                Ok(()) = inputs.leadership.changed() => {}
                                Ok(()) = inputs.live.changed() => {}
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
                changed = inputs.live.changed() => if changed.is_err() { return },
            }
        }
    }
}

/// The desired ValidatingWebhookConfiguration for a policy set, its policy webhooks covering
/// what `registration.rules` says.
pub fn validating_configuration(
    set: &PolicySet,
    registration: &Registration,
    ca_pem: &str,
) -> ValidatingWebhookConfiguration {
    let Registration {
        endpoint,
        exemptions: exempt,
        rules: coverage,
        timeout_seconds,
        ..
    } = registration;
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
        let rules = covering(rules(set, failure), *coverage);
        (!rules.is_empty()).then(|| ValidatingWebhook {
            match_conditions: exempt.match_conditions(&rules),
            name: name.to_string(),
            admission_review_versions: vec!["v1".to_string()],
            client_config: endpoint.client_config(path, ca_pem),
            failure_policy: Some(failure_str.to_string()),
            match_policy: Some("Equivalent".to_string()),
            namespace_selector: Some(exempt.namespace_selector()),
            object_selector: Some(LabelSelector::default()),
            rules: Some(rules),
            side_effects: "None".to_string(),
            timeout_seconds: Some(*timeout_seconds),
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
        timeout_seconds: Some(*timeout_seconds),
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
/// what `registration.rules` says), in
/// [`MUTATING_WEBHOOKS`] order; with no mutating policy it has no webhooks, so no request
/// waits on celgate for a mutation.
pub fn mutating_configuration(
    set: &PolicySet,
    registration: &Registration,
    ca_pem: &str,
) -> MutatingWebhookConfiguration {
    let Registration {
        endpoint,
        exemptions: exempt,
        rules: coverage,
        timeout_seconds,
        ..
    } = registration;
    let webhooks = MUTATING_WEBHOOKS
        .iter()
        .filter_map(|(name, group, path)| {
            let rules = covering(mutating_rules(set, *group), *coverage);
            let failure = match group.failure {
                FailurePolicy::Fail => "Fail",
                FailurePolicy::Ignore => "Ignore",
            };
            let reinvocation = match group.reinvocation {
                ReinvocationPolicy::Never => "Never",
                ReinvocationPolicy::IfNeeded => "IfNeeded",
            };
            (!rules.is_empty()).then(|| MutatingWebhook {
                match_conditions: exempt.match_conditions(&rules),
                name: (*name).to_string(),
                admission_review_versions: vec!["v1".to_string()],
                client_config: endpoint.client_config(path, ca_pem),
                failure_policy: Some(failure.to_string()),
                match_policy: Some("Equivalent".to_string()),
                namespace_selector: Some(exempt.namespace_selector()),
                object_selector: Some(LabelSelector::default()),
                reinvocation_policy: Some(reinvocation.to_string()),
                rules: Some(rules),
                side_effects: "None".to_string(),
                timeout_seconds: Some(*timeout_seconds),
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

    /// Forgets each configuration `live` shows deleted, re-created (another uid) or no longer
    /// holding what was applied, so it is applied again; names the first one forgotten.
    fn forget_changed(&mut self, live: &Live) -> Option<&'static str> {
        let validating = forget_if_changed(&mut self.validating, &live.validating)
            .then_some("ValidatingWebhookConfiguration");
        let mutating = forget_if_changed(&mut self.mutating, &live.mutating)
            .then_some("MutatingWebhookConfiguration");
        validating.or(mutating)
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

/// Forgets `applied` when `live` no longer holds it; whether it did.
fn forget_if_changed<K: serde::Serialize>(
    applied: &mut Option<AppliedConfiguration<K>>,
    live: &Observed,
) -> bool {
    let Some(a) = applied else {
        return false;
    };
    let changed = match live {
        Observed::Unknown => false,
        Observed::Absent => true,
        Observed::Present(live) => {
            live["metadata"]["uid"].as_str() != a.uid.as_deref()
                || serde_json::to_value(&a.configuration)
                    .map_or(true, |desired| !holds_configuration(live, &desired))
        }
    };
    if changed {
        *applied = None;
    }
    changed
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

    /// The default exclusions: celgate's namespace and kube-system.
    fn excluded() -> Exemptions {
        Exemptions {
            namespaces: excluded_namespaces("celgate-system", &["kube-system".to_string()]),
            never_sent: NeverSent::DEFAULT.to_vec(),
        }
    }

    /// How the configurations are registered at `endpoint`, covering what `rules` says.
    fn registration(endpoint: &Endpoint, rules: WebhookRules) -> Registration {
        Registration {
            endpoint: endpoint.clone(),
            exemptions: excluded(),
            create_missing: true,
            rules,
            timeout_seconds: DEFAULT_TIMEOUT_SECONDS,
        }
    }

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
                )))]
                .into(),
            }],
            Vec::new(),
        )))
    }

    /// The resources of the fail-closed webhook's rules in an applied configuration.
    /// Answers the read of the configuration at `path` with one of `uid`, then expects its
    /// patch by that uid, echoes it and returns the applied body.
    async fn read_then_patch(api: &mut fixtures::ApiServer, path: &str, uid: &str) -> Value {
        let call = api.next().await;
        assert_eq!((&call.method, call.path.as_str()), (&Method::GET, path));
        call.reply(200, json!({"metadata": {"name": "celgate", "uid": uid}}));
        let call = api.next().await;
        assert_eq!((&call.method, call.path.as_str()), (&Method::PATCH, path));
        assert_eq!(call.body["metadata"]["uid"], uid);
        let body = call.body.clone();
        call.reply(200, body.clone());
        body
    }

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
                exemptions: excluded(),
                create_missing: true,
                rules: WebhookRules::Policies,
                timeout_seconds: DEFAULT_TIMEOUT_SECONDS,
            };
            let (_live, live) = watch::channel(Live::default());
            let inputs = Inputs {
                sets: receiver,
                ca,
                leadership,
                live,
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
            let body = read_then_patch(&mut api, VALIDATING, "v-uid").await;
            assert_eq!(resources(&body), ["secrets"]);
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
                exemptions: excluded(),
                create_missing: false,
                rules: WebhookRules::Policies,
                timeout_seconds: DEFAULT_TIMEOUT_SECONDS,
            };
            let (_live, live) = watch::channel(Live::default());
            let inputs = Inputs {
                sets: receiver,
                ca,
                leadership,
                live,
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

    #[tokio::test(start_paused = true)]
    async fn a_configuration_changed_deleted_or_re_created_by_hand_is_applied_again() {
        let scenario = async {
            let (client, mut api) = fixtures::pair();
            let (_sets, sets) = watch::channel(matching("configmaps"));
            let (_ca, ca) = watch::channel("ca".to_string());
            let (_leading, leadership) = watch::channel(true);
            let (live_sender, live) = watch::channel(Live::default());
            let registration = Registration {
                endpoint: Endpoint::Url("https://127.0.0.1:9443".into()),
                exemptions: excluded(),
                create_missing: false,
                rules: WebhookRules::Policies,
                timeout_seconds: DEFAULT_TIMEOUT_SECONDS,
            };
            let inputs = Inputs {
                sets,
                ca,
                leadership,
                live,
            };
            let (applied, mut covered) = watch::channel(Applied::default());
            let _task = tokio::spawn(registration.keep_applied(client, inputs, applied));

            // Applied once: each configuration read (its uid), then patched.
            let mut written = Vec::new();
            for (path, uid) in [(VALIDATING, "v-uid"), (MUTATING, "m-uid")] {
                let call = api.next().await;
                assert_eq!((&call.method, call.path.as_str()), (&Method::GET, path));
                call.reply(200, json!({"metadata": {"name": "celgate", "uid": uid}}));
                let call = api.next().await;
                assert_eq!((&call.method, call.path.as_str()), (&Method::PATCH, path));
                let body = call.body.clone();
                call.reply(200, body.clone());
                written.push(body);
            }
            covered.changed().await.unwrap();
            assert!(covered.borrow_and_update().set.is_some());
            let (validating, mutating) = (written[0].clone(), written[1].clone());

            // The watch shows them as applied, with the API server's defaults: nothing to do.
            let mut defaulted = validating.clone();
            defaulted["webhooks"][0]["reinvocationPolicy"] = json!("Never");
            defaulted["metadata"]["resourceVersion"] = json!("7");
            live_sender.send_replace(Live {
                validating: Observed::Present(defaulted.clone()),
                mutating: Observed::Present(mutating.clone()),
            });
            let idle = tokio::time::timeout(Duration::from_secs(3600), api.next()).await;
            assert!(idle.is_err(), "applied again what is in place");

            // failurePolicy edited by hand: applied again at once.
            let mut edited = defaulted.clone();
            edited["webhooks"][0]["failurePolicy"] = json!("Ignore");
            live_sender.send_modify(|l| l.validating = Observed::Present(edited));
            let body = read_then_patch(&mut api, VALIDATING, "v-uid").await;
            assert_eq!(body["webhooks"][0]["failurePolicy"], "Fail");
            covered.changed().await.unwrap();
            assert!(covered.borrow_and_update().set.is_some());
            live_sender.send_modify(|l| l.validating = Observed::Present(validating.clone()));

            // Deleted (in a cluster celgate does not create it): not covered, and status says why.
            live_sender.send_modify(|l| l.validating = Observed::Absent);
            let call = api.next().await;
            assert_eq!(
                (&call.method, call.path.as_str()),
                (&Method::GET, VALIDATING)
            );
            call.reply(404, status(404, "NotFound"));
            {
                let now = covered.wait_for(|a| a.error.is_some()).await.unwrap();
                assert!(
                    now.set.is_none(),
                    "a deleted configuration still covers the set"
                );
                assert!(now.error.as_deref().unwrap().contains("does not exist"));
            }

            // Re-created (another uid, empty): applied at once, by its new uid.
            live_sender.send_modify(|l| {
                l.validating =
                    Observed::Present(json!({"metadata": {"name": "celgate", "uid": "v-uid-2"}}));
            });
            let body = read_then_patch(&mut api, VALIDATING, "v-uid-2").await;
            assert_eq!(resources(&body), ["configmaps"]);
            let now = covered.wait_for(|a| a.error.is_none()).await.unwrap();
            assert!(now.set.is_some());
        };
        tokio::time::timeout(Duration::from_secs(7200), scenario)
            .await
            .expect("the scenario did not finish");
    }

    #[test]
    fn every_webhook_has_the_timeout_of_the_flag() {
        let endpoint = Endpoint::Url("https://127.0.0.1:9443".into());
        let set = matching("configmaps").unwrap();
        let with_mutating = PolicySet::new(
            set.validating().to_vec(),
            vec![celgate_engine::BoundMutatingPolicy {
                policy: policy_set::compile(&fixtures::mutating_policy(
                    "m", "Fail", "Never", "pods",
                )),
                bindings: vec![Arc::new(convert::mutating_binding(
                    &fixtures::mutating_binding("mb", "m"),
                ))]
                .into(),
            }],
        );
        let registration = Registration {
            timeout_seconds: 3,
            ..registration(&endpoint, WebhookRules::Policies)
        };
        let v = validating_configuration(&with_mutating, &registration, "ca");
        let m = mutating_configuration(&with_mutating, &registration, "ca");
        let timeouts: Vec<Option<i32>> = (v.webhooks.unwrap().iter().map(|w| w.timeout_seconds))
            .chain(m.webhooks.unwrap().iter().map(|w| w.timeout_seconds))
            .collect();
        // The fail-closed validating webhook, the policy webhook, the mutating one.
        assert_eq!(timeouts, [Some(3), Some(3), Some(3)]);
    }

    #[test]
    fn the_policy_webhook_covers_all_four_kinds() {
        let endpoint = Endpoint::Url("https://127.0.0.1:9443".into());
        let cfg = validating_configuration(
            &PolicySet::default(),
            &registration(&endpoint, WebhookRules::Policies),
            "ca",
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
            &registration(&endpoint, WebhookRules::Policies),
            "ca",
        );
        assert_eq!(empty.webhooks, Some(Vec::new()), "no policy, no webhook");

        let bound = |name: &str, failure: &str, reinvocation: &str, resource: &str| {
            let policy = fixtures::mutating_policy(name, failure, reinvocation, resource);
            celgate_engine::BoundMutatingPolicy {
                policy: policy_set::compile(&policy),
                bindings: vec![Arc::new(convert::mutating_binding(
                    &fixtures::mutating_binding(&format!("{name}-b"), name),
                ))]
                .into(),
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
        let cfg =
            mutating_configuration(&set, &registration(&endpoint, WebhookRules::Policies), "ca");
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
                Some(excluded().namespace_selector())
            );
        }
        // The validating configuration has no webhook for mutating policies.
        let validating =
            validating_configuration(&set, &registration(&endpoint, WebhookRules::Policies), "ca");
        let names: Vec<String> = validating
            .webhooks
            .unwrap_or_default()
            .into_iter()
            .map(|w| w.name)
            .collect();
        assert_eq!(names, [VALIDATE_POLICIES]);
    }

    #[test]
    fn a_policy_is_registered_once_bound_and_for_connect_only_where_it_names_it() {
        use crate::controllers::policy_set::{PolicyCache, Stored};
        let endpoint = Endpoint::Url("https://127.0.0.1:9443".into());
        let configurations = |set: &PolicySet| {
            (
                validating_configuration(
                    set,
                    &registration(&endpoint, WebhookRules::Policies),
                    "ca",
                ),
                mutating_configuration(set, &registration(&endpoint, WebhookRules::Policies), "ca"),
            )
        };
        let mut validating_json = fixtures::policy_json("p", 1, "true", None);
        // `*` is spelled out without CONNECT; a rule naming CONNECT is registered for it.
        validating_json["spec"]["matchConstraints"]["resourceRules"] = json!([
            {"apiGroups": [""], "apiVersions": ["v1"], "operations": ["*"],
             "resources": ["configmaps"], "scope": "*"},
            {"apiGroups": [""], "apiVersions": ["v1"], "operations": ["CONNECT"],
             "resources": ["pods/exec"], "scope": "*"},
            {"apiGroups": [""], "apiVersions": ["v1"], "operations": ["CONNECT", "CREATE"],
             "resources": ["pods/portforward"], "scope": "*"},
        ]);
        let validating: celgate_crds::ValidatingAdmissionPolicy =
            serde_json::from_value(validating_json).unwrap();
        // A mutating policy is registered for the CONNECT it names too.
        let mut mutating_json = serde_json::to_value(fixtures::mutating_policy(
            "m", "Ignore", "IfNeeded", "secrets",
        ))
        .unwrap();
        mutating_json["spec"]["matchConstraints"]["resourceRules"] = json!([
            {"apiGroups": [""], "apiVersions": ["v1"], "operations": ["CREATE"],
             "resources": ["secrets"], "scope": "*"},
            {"apiGroups": [""], "apiVersions": ["v1"], "operations": ["CONNECT"],
             "resources": ["pods/exec"], "scope": "*"},
            {"apiGroups": [""], "apiVersions": ["v1"], "operations": ["*"],
             "resources": ["pods/attach"], "scope": "*"},
        ]);
        let mutating: celgate_crds::MutatingAdmissionPolicy =
            serde_json::from_value(mutating_json).unwrap();
        let mut cache = PolicyCache::default();
        cache.insert(&validating, policy_set::compile(&validating));
        cache.insert(&mutating, policy_set::compile(&mutating));
        let mut validating = Stored {
            policies: vec![Arc::new(validating)],
            bindings: crate::controllers::stored_binding::BindingStore::default(),
        };
        let mut mutating = Stored {
            policies: vec![Arc::new(mutating)],
            bindings: crate::controllers::stored_binding::BindingStore::default(),
        };

        // Unbound: no policy webhook at all, so no request reaches celgate for them.
        let unbound = cache.build(validating.clone(), mutating.clone());
        let (v, m) = configurations(&unbound);
        let names: Vec<String> = v
            .webhooks
            .unwrap_or_default()
            .into_iter()
            .map(|w| w.name)
            .collect();
        assert_eq!(names, [VALIDATE_POLICIES]);
        assert_eq!(m.webhooks, Some(Vec::new()));

        validating.bindings = [fixtures::stored(&fixtures::binding("b", "p"))]
            .into_iter()
            .collect();
        mutating.bindings = [fixtures::stored(&fixtures::mutating_binding("mb", "m"))]
            .into_iter()
            .collect();
        let bound = cache.build(validating, mutating);
        let (v, m) = configurations(&bound);
        let v = serde_json::to_value(v).unwrap();
        let hook = &v["webhooks"][0];
        assert_eq!(hook["name"], VALIDATE_FAIL);
        assert_eq!(
            hook["rules"],
            json!([
                {"apiGroups": [""], "apiVersions": ["v1"], "operations": ["CREATE", "UPDATE", "DELETE"],
                 "resources": ["configmaps"], "scope": "*"},
                {"apiGroups": [""], "apiVersions": ["v1"], "operations": ["CONNECT"],
                 "resources": ["pods/exec"], "scope": "*"},
                {"apiGroups": [""], "apiVersions": ["v1"], "operations": ["CONNECT", "CREATE"],
                 "resources": ["pods/portforward"], "scope": "*"},
            ])
        );
        // The connection's break-glass: the excluded namespaces hold for CONNECT too.
        assert_eq!(
            hook["namespaceSelector"],
            serde_json::to_value(excluded().namespace_selector()).unwrap()
        );
        let hooks = m.webhooks.unwrap_or_default();
        let names: Vec<&str> = hooks.iter().map(|w| w.name.as_str()).collect();
        assert_eq!(names, ["mutate-ignore-reinvoke.celgate.io"]);
        let mutating_operations = |hooks: &[MutatingWebhook]| -> Vec<(Value, Value)> {
            let rules = serde_json::to_value(&hooks[0].rules).unwrap();
            let rules = rules.as_array().cloned().unwrap_or_default();
            rules
                .into_iter()
                .map(|r| (r["operations"].clone(), r["resources"].clone()))
                .collect()
        };
        assert_eq!(
            mutating_operations(&hooks),
            [
                (json!(["CREATE"]), json!(["secrets"])),
                (json!(["CONNECT"]), json!(["pods/exec"])),
                (
                    json!(["CREATE", "UPDATE", "DELETE"]),
                    json!(["pods/attach"])
                ),
            ]
        );

        // With `*` as in-tree, it is registered as `*`; covering every resource keeps the
        // policies' connections, as CONNECT rules.
        let in_tree = bound
            .clone()
            .with_wildcard_operations(WildcardOperations::InTree);
        let v = validating_configuration(
            &in_tree,
            &registration(&endpoint, WebhookRules::Policies),
            "ca",
        );
        let rules = serde_json::to_value(&v.webhooks.unwrap()[0].rules).unwrap();
        assert_eq!(rules[0]["operations"], json!(["*"]));
        let m = mutating_configuration(
            &in_tree,
            &registration(&endpoint, WebhookRules::Policies),
            "ca",
        );
        assert_eq!(
            mutating_operations(&m.webhooks.unwrap_or_default())[2],
            (json!(["*"]), json!(["pods/attach"]))
        );
        let all =
            validating_configuration(&bound, &registration(&endpoint, WebhookRules::All), "ca");
        let rules = serde_json::to_value(&all.webhooks.unwrap()[0].rules).unwrap();
        let operations: Vec<(&Value, &Value)> = rules
            .as_array()
            .unwrap()
            .iter()
            .map(|r| (&r["operations"], &r["resources"]))
            .collect();
        assert_eq!(
            operations,
            [
                (&json!(["CREATE", "UPDATE", "DELETE"]), &json!(["*/*"])),
                (&json!(["CONNECT"]), &json!(["pods/exec"])),
                (&json!(["CONNECT"]), &json!(["pods/portforward"])),
            ]
        );
        let all =
            validating_configuration(&in_tree, &registration(&endpoint, WebhookRules::All), "ca");
        assert_eq!(all.webhooks.unwrap()[0].rules.as_ref().unwrap().len(), 4);
    }

    #[test]
    fn policy_webhooks_skip_the_excluded_namespaces_and_the_requests_never_sent() {
        assert_eq!(
            excluded_namespaces(
                "celgate-system",
                &[
                    "kube-system".into(),
                    String::new(),
                    "celgate-system".into(),
                    " x ".into()
                ]
            ),
            ["celgate-system", "kube-system", "x"]
        );
        let endpoint = Endpoint::Url("https://127.0.0.1:9443".into());
        let set = matching("configmaps").unwrap();
        for coverage in [WebhookRules::Policies, WebhookRules::All] {
            let v = serde_json::to_value(validating_configuration(
                &set,
                &registration(&endpoint, coverage),
                "ca",
            ))
            .unwrap();
            let hook = &v["webhooks"][0];
            assert_eq!(hook["name"], VALIDATE_FAIL);
            assert_eq!(
                hook["namespaceSelector"],
                json!({"matchExpressions": [{"key": "kubernetes.io/metadata.name",
                    "operator": "NotIn", "values": ["celgate-system", "kube-system"]}]})
            );
            let conditions: Vec<&str> = hook["matchConditions"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(|c| c["name"].as_str())
                .collect();
            let every: Vec<&str> = std::iter::once(OWN_KINDS.name)
                .chain(
                    NeverSent::DEFAULT
                        .iter()
                        .filter_map(|n| n.exclusion())
                        .map(|e| e.name),
                )
                .collect();
            match coverage {
                // Rules over ConfigMaps reach no kind that is never sent.
                WebhookRules::Policies => assert!(conditions.is_empty(), "{conditions:?}"),
                WebhookRules::All => assert_eq!(conditions, every),
            }
            // celgate's own webhook is not filtered.
            assert!(v["webhooks"][1].get("matchConditions").is_none());
        }
    }

    #[test]
    fn a_rule_another_rule_covers_is_not_registered() {
        let rule = |operations: &[&str],
                    groups: &[&str],
                    versions: &[&str],
                    resources: &[&str],
                    scope: &str| {
            let strings = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
            celgate_engine::model::ResourceRule {
                operations: strings(operations),
                api_groups: strings(groups),
                api_versions: strings(versions),
                resources: strings(resources),
                scope: scope.to_string(),
                ..Default::default()
            }
        };
        let registered = |rules: Vec<celgate_engine::model::ResourceRule>| -> Vec<Vec<String>> {
            let constraints = MatchResources {
                resource_rules: rules,
                ..Default::default()
            };
            union_of_rules(
                WildcardOperations::WithoutConnect,
                std::iter::once(Some(&constraints)),
            )
            .into_iter()
            .map(|r| r.resources.unwrap_or_default())
            .collect()
        };
        let pods = rule(&["CREATE"], &[""], &["v1"], &["pods"], "*");
        // Covered: by `*` operations, groups, versions or scope, by a superset, by a resource
        // wildcard; whichever comes first.
        for wide in [
            rule(&["CREATE", "UPDATE"], &[""], &["*"], &["pods"], "*"),
            rule(&["*"], &["*"], &["v1"], &["*"], "*"),
            rule(
                &["CREATE"],
                &["", "apps"],
                &["v1", "v2"],
                &["configmaps", "pods"],
                "*",
            ),
            rule(&["CREATE"], &[""], &["v1"], &["*/*"], "*"),
            rule(&["CREATE"], &[""], &["v1"], &["pods/*"], "*"),
        ] {
            let only = wide.resources.clone();
            assert_eq!(
                registered(vec![pods.clone(), wide.clone()]),
                std::slice::from_ref(&only),
                "{wide:?}"
            );
            assert_eq!(
                registered(vec![wide.clone(), pods.clone()]),
                [only],
                "{wide:?}"
            );
        }
        // Not covered: another operation, group or version, a subresource only, a resource
        // `*` against a subresource; a narrower scope.
        for other in [
            rule(&["UPDATE"], &[""], &["v1"], &["pods"], "*"),
            rule(&["CREATE"], &["apps"], &["*"], &["*"], "*"),
            rule(&["CREATE"], &[""], &["v2"], &["pods"], "*"),
            rule(&["CREATE"], &[""], &["v1"], &["pods/status"], "*"),
            rule(&["CREATE"], &[""], &["v1"], &["*/status"], "*"),
        ] {
            assert_eq!(
                registered(vec![pods.clone(), other.clone()]).len(),
                2,
                "{other:?}"
            );
        }
        let scoped = |scope| rule(&["CREATE"], &[""], &["v1"], &["pods"], scope);
        assert_eq!(registered(vec![scoped("Namespaced"), scoped("*")]).len(), 1);
        assert_eq!(
            registered(vec![scoped("Namespaced"), scoped("Cluster")]).len(),
            2
        );
        let status = rule(&["CREATE"], &[""], &["v1"], &["pods/status"], "*");
        for wide in ["*", "pods"] {
            let wide = rule(&["CREATE"], &[""], &["v1"], &[wide], "*");
            assert_eq!(registered(vec![wide, status.clone()]).len(), 2);
        }
        for wide in ["*/status", "pods/*", "*/*"] {
            let wide = rule(&["CREATE"], &[""], &["v1"], &[wide], "*");
            assert_eq!(registered(vec![wide, status.clone()]).len(), 1);
        }
        // Two rules that cover each other (the same sets in another order): the first stays.
        let reordered = rule(&["CREATE"], &[""], &["v1"], &["secrets", "pods"], "*");
        let ordered = rule(&["CREATE"], &[""], &["v1"], &["pods", "secrets"], "*");
        assert_eq!(registered(vec![reordered, ordered]), [["secrets", "pods"]]);
    }

    #[test]
    fn a_webhook_carries_the_conditions_its_rules_can_reach() {
        let rule = |groups: &[&str], resources: &[&str]| RuleWithOperations {
            operations: Some(vec!["CREATE".into()]),
            api_groups: Some(groups.iter().map(|g| g.to_string()).collect()),
            api_versions: Some(vec!["*".into()]),
            resources: Some(resources.iter().map(|r| r.to_string()).collect()),
            scope: Some("*".into()),
        };
        let names = |rules: &[RuleWithOperations]| -> Vec<&'static str> {
            let conditions = excluded().match_conditions(rules).unwrap_or_default();
            let every = std::iter::once(OWN_KINDS)
                .chain(NeverSent::DEFAULT.iter().filter_map(|n| n.exclusion()));
            every
                .filter(|e| conditions.iter().any(|c| c.name == e.name))
                .map(|e| e.name)
                .collect()
        };
        let every: Vec<&str> = names(&[every_resource()]);
        assert_eq!(every.len(), 1 + NeverSent::DEFAULT.len());
        for (rules, expected) in [
            (vec![rule(&["apps"], &["deployments"])], vec![]),
            (vec![rule(&[""], &["pods", "configmaps"])], vec![]),
            (vec![rule(&["*"], &["*"])], every.clone()),
            (vec![rule(&["*"], &["*/status"])], every.clone()),
            (
                vec![rule(&[""], &["*"])],
                vec!["celgate-never-events", "celgate-never-nodes"],
            ),
            (
                vec![rule(&[""], &["nodes/status"])],
                vec!["celgate-never-nodes"],
            ),
            // Either group of Events brings the one condition naming both.
            (
                vec![rule(&["events.k8s.io"], &["events"])],
                vec!["celgate-never-events"],
            ),
            // celgate's group counts as every resource of it.
            (
                vec![rule(&["*"], &["events"])],
                vec![OWN_KINDS.name, "celgate-never-events"],
            ),
            (
                vec![rule(
                    &[celgate_engine::GROUP],
                    &["validatingadmissionpolicies"],
                )],
                vec![OWN_KINDS.name],
            ),
            (
                vec![
                    rule(&["apps"], &["deployments"]),
                    rule(
                        &["cilium.io", "coordination.k8s.io"],
                        &["ciliumnodes", "leases"],
                    ),
                ],
                vec!["celgate-never-leases", "celgate-never-ip-allocations"],
            ),
            (
                vec![rule(&["cilium.io"], &["ciliumnetworkpolicies"])],
                vec![],
            ),
        ] {
            assert_eq!(names(&rules), expected, "{rules:?}");
        }
        // A webhook whose rules reach none has no matchConditions field at all.
        assert_eq!(
            excluded().match_conditions(&[rule(&["apps"], &["deployments"])]),
            None
        );
    }

    /// Evaluates the [`NeverSent`] conditions for a request to `group`/`resource` with
    /// celgate's own CEL: whether the request would be sent.
    fn sent(group: &str, resource: &str) -> bool {
        use celgate_cel::{Activation, Budget, Env, Type, Value as CelValue};
        let env = Env::kubernetes().variable("request", Type::Dyn).build();
        let request = json!({"resource": {"group": group, "version": "v1", "resource": resource}});
        excluded()
            .match_conditions(&[every_resource()])
            .unwrap_or_default()
            .iter()
            .all(|MatchCondition { expression, .. }| {
                let program = env.compile(expression).unwrap();
                let mut activation = Activation::new();
                activation.bind_json("request", &request);
                let mut budget = Budget::new(1_000_000, 10_000_000);
                match program.eval(&activation, &mut budget).unwrap() {
                    CelValue::Bool(sent) => sent,
                    other => panic!("{expression} gave {other:?}"),
                }
            })
    }

    #[test]
    fn the_requests_never_sent_are_those_documented() {
        for (group, resource) in [
            ("", "events"),
            ("events.k8s.io", "events"),
            ("coordination.k8s.io", "leases"),
            ("authentication.k8s.io", "tokenreviews"),
            ("authentication.k8s.io", "selfsubjectreviews"),
            ("authorization.k8s.io", "subjectaccessreviews"),
            ("authorization.k8s.io", "selfsubjectaccessreviews"),
            ("authorization.k8s.io", "localsubjectaccessreviews"),
            ("authorization.k8s.io", "selfsubjectrulesreviews"),
            (celgate_engine::GROUP, "validatingadmissionpolicies"),
            (celgate_engine::GROUP, "mutatingadmissionpolicybindings"),
            // What the cluster needs to heal itself while celgate is down.
            ("", "nodes"),
            ("certificates.k8s.io", "certificatesigningrequests"),
            ("networking.k8s.io", "ipaddresses"),
            ("networking.k8s.io", "servicecidrs"),
            ("crd.projectcalico.org", "ipamblocks"),
            ("crd.projectcalico.org", "blockaffinities"),
            ("crd.projectcalico.org", "ipamhandles"),
            ("crd.projectcalico.org", "ipamconfigs"),
            ("cilium.io", "ciliumnodes"),
            ("cilium.io", "ciliumendpoints"),
            ("cilium.io", "ciliumendpointslices"),
            ("cilium.io", "ciliumidentities"),
            ("apiregistration.k8s.io", "apiservices"),
        ] {
            assert!(!sent(group, resource), "{group}/{resource} is sent");
        }
        for (group, resource) in [
            ("", "configmaps"),
            ("", "pods"),
            ("apps", "deployments"),
            ("example.com", "events"),
            ("coordination.k8s.io", "leasecandidates"),
            ("example.com", "nodes"),
            ("networking.k8s.io", "networkpolicies"),
            ("crd.projectcalico.org", "networkpolicies"),
            ("cilium.io", "ciliumnetworkpolicies"),
            ("certificates.k8s.io", "clustertrustbundles"),
        ] {
            assert!(sent(group, resource), "{group}/{resource} is not sent");
        }
    }

    #[test]
    fn never_sent_none_sends_every_request_and_kinds_are_listed_once() {
        let exempt = |never_sent: Vec<NeverSent>| Exemptions {
            namespaces: vec!["celgate-system".into()],
            never_sent,
        };
        let every = [every_resource()];
        let only_own = exempt(vec![NeverSent::None])
            .match_conditions(&every)
            .unwrap_or_default();
        assert_eq!(only_own.len(), 1);
        assert_eq!(only_own[0].name, OWN_KINDS.name);
        let names: Vec<String> =
            exempt(vec![NeverSent::Leases, NeverSent::None, NeverSent::Leases])
                .match_conditions(&every)
                .into_iter()
                .flatten()
                .map(|c| c.name)
                .collect();
        assert_eq!(names, [OWN_KINDS.name, "celgate-never-leases"]);
    }

    #[test]
    fn with_every_resource_covered_a_new_policy_over_another_resource_changes_no_configuration() {
        use crate::controllers::policy_set::{PolicyCache, Stored};
        let endpoint = Endpoint::Url("https://127.0.0.1:9443".into());
        let configurations = |set: &PolicySet, coverage| {
            (
                validating_configuration(set, &registration(&endpoint, coverage), "ca"),
                mutating_configuration(set, &registration(&endpoint, coverage), "ca"),
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
        // Every policy stored is bound.
        let stored = |validating: Vec<&celgate_crds::ValidatingAdmissionPolicy>| {
            let bindings = validating
                .iter()
                .filter_map(|p| p.metadata.name.as_deref())
                .map(|name| fixtures::stored(&fixtures::binding(&format!("{name}-b"), name)))
                .collect();
            (
                Stored {
                    policies: validating.into_iter().cloned().map(Arc::new).collect(),
                    bindings,
                },
                Stored {
                    policies: vec![Arc::new(mutating.clone())],
                    bindings: [fixtures::stored(&fixtures::mutating_binding("m-b", "m"))]
                        .into_iter()
                        .collect(),
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
            "operations": ["CREATE", "UPDATE", "DELETE"], "resources": ["*/*"], "scope": "*"}]);
        let hooks = v["webhooks"].as_array().unwrap();
        let names: Vec<&str> = hooks.iter().filter_map(|w| w["name"].as_str()).collect();
        // No policy fails open: no fail-open webhook, even covering everything.
        assert_eq!(names, [VALIDATE_FAIL, VALIDATE_POLICIES]);
        assert_eq!(hooks[0]["rules"], every);
        assert_eq!(
            hooks[0]["namespaceSelector"],
            serde_json::to_value(excluded().namespace_selector()).unwrap()
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
