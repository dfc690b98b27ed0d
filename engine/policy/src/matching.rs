//! Whether a request falls under a policy's match constraints or a binding's match resources:
//! resource rules and exclusions, scope, resource names, namespace and object selectors, with
//! selector errors deferred until the rules match, as kube-apiserver does.

use std::cell::OnceCell;

use serde_json::Value;
use thiserror::Error;

use crate::model::{LabelSelector, MatchPolicy, MatchResources, ResourceRule};
use crate::request::{GroupVersionName, Request};

/// Namespaces, as the operator's namespace cache knows them.
pub trait Namespaces {
    /// The named Namespace object as CEL sees it (`namespaceObject`), or `None` when unknown.
    fn get(&self, name: &str) -> Option<&Value>;

    /// The labels of the named namespace, or `None` when it is not known.
    fn labels(&self, name: &str) -> Option<Option<&serde_json::Map<String, Value>>> {
        self.get(name).map(labels_of)
    }
}

/// Namespaces that remember the labels of the first namespace asked for: the bindings of one
/// policy, matched against one request, each ask for the same namespace's labels. The name is
/// kept in place (a namespace's name is a DNS label, at most [`NAME_BYTES`] bytes; a longer
/// one is never remembered), so remembering copies no string to the heap.
pub(crate) struct RememberedLabels<'n> {
    namespaces: &'n dyn Namespaces,
    first: OnceCell<(usize, [u8; NAME_BYTES], NamespaceLabels<'n>)>,
}

/// The longest namespace name: a DNS label.
const NAME_BYTES: usize = 63;

/// A namespace's labels, `None` when it is not known.
type NamespaceLabels<'n> = Option<Option<&'n serde_json::Map<String, Value>>>;

impl<'n> RememberedLabels<'n> {
    pub(crate) fn new(namespaces: &'n dyn Namespaces) -> Self {
        RememberedLabels {
            namespaces,
            first: OnceCell::new(),
        }
    }
}

impl Namespaces for RememberedLabels<'_> {
    fn get(&self, name: &str) -> Option<&Value> {
        self.namespaces.get(name)
    }

    fn labels(&self, name: &str) -> NamespaceLabels<'_> {
        let bytes = name.as_bytes();
        match self.first.get() {
            Some((len, first, labels)) if first.get(..*len) == Some(bytes) => *labels,
            Some(_) => self.namespaces.labels(name),
            None => {
                let labels = self.namespaces.labels(name);
                let mut kept = [0; NAME_BYTES];
                if let Some(place) = kept.get_mut(..bytes.len()) {
                    place.copy_from_slice(bytes);
                    let _ = self.first.set((bytes.len(), kept, labels));
                }
                labels
            }
        }
    }
}

/// Why matching could not decide.
#[derive(Debug, Error, PartialEq, Eq)]
pub enum MatchError {
    /// The request's namespace is not in the cache.
    #[error("namespaces \"{0}\" not found")]
    NamespaceNotFound(String),
    /// A selector cannot be evaluated.
    #[error("{0}")]
    Selector(String),
}

/// Matches a request against match resources. `Ok(false)` is a clean miss; an error surfaces only
/// when the resource rules matched (upstream defers selector errors the same way).
pub fn matches(
    criteria: &MatchResources,
    req: &Request<'_>,
    namespaces: &dyn Namespaces,
) -> Result<bool, MatchError> {
    // The resource rules first: they are the cheapest test and the one most policies fail (a
    // request is for one resource; most policies are for others). Every other outcome of a
    // request they do not cover is a miss too, so the order changes no result.
    if !resource_rules_cover(criteria, req) {
        return Ok(false);
    }
    let ns = namespace_matches(&criteria.namespace_selector, req, namespaces);
    if let Ok(false) = ns {
        return Ok(false);
    }
    let obj = object_matches(&criteria.object_selector, req);
    if let Ok(false) = obj {
        return Ok(false);
    }
    if rules_match(&criteria.exclude_resource_rules, criteria.match_policy, req) {
        return Ok(false);
    }
    ns?;
    obj?;
    Ok(true)
}

/// Whether the resource rules cover the request (no rules cover everything): the first and
/// cheapest part of [`matches`], which callers scanning many policies may test on its own.
pub fn resource_rules_cover(criteria: &MatchResources, req: &Request<'_>) -> bool {
    criteria.resource_rules.is_empty()
        || rules_match(&criteria.resource_rules, criteria.match_policy, req)
}

/// Whether a resource rule that names the request's operation itself (not through `*`)
/// covers the request: under [`WildcardOperations::WithoutConnect`](crate::model::WildcardOperations),
/// what a policy's rules must do for a CONNECT to fall under it.
pub fn operation_named(criteria: &MatchResources, req: &Request<'_>) -> bool {
    let operation = req.operation.as_str();
    rules_match_where(&criteria.resource_rules, criteria.match_policy, req, |r| {
        r.operations.iter().any(|o| o == operation)
    })
}

fn rules_match(rules: &[ResourceRule], policy: MatchPolicy, req: &Request<'_>) -> bool {
    rules_match_where(rules, policy, req, |_| true)
}

/// Whether one of the `rules` that `keep` keeps matches the request.
fn rules_match_where(
    rules: &[ResourceRule],
    policy: MatchPolicy,
    req: &Request<'_>,
    keep: impl Fn(&ResourceRule) -> bool,
) -> bool {
    // What the client asked for: with Exact, only that matches. The API server may have sent
    // celgate an equivalent version (its webhooks match Equivalent); with Equivalent, the
    // received version matches too, and it is the object celgate evaluates.
    let asked = rules
        .iter()
        .filter(|r| keep(r))
        .any(|r| rule_matches(r, req, req.request_resource, req.request_sub_resource));
    if asked || policy == MatchPolicy::Exact || !req.converted() {
        return asked;
    }
    rules
        .iter()
        .filter(|r| keep(r))
        .any(|r| rule_matches(r, req, req.resource, req.sub_resource))
}

fn rule_matches(
    rule: &ResourceRule,
    req: &Request<'_>,
    resource: GroupVersionName<'_>,
    sub_resource: &str,
) -> bool {
    let listed = |list: &[String], value: &str| list.iter().any(|v| v == "*" || same(v, value));
    let is_namespace_object = resource.group.is_empty() && resource.name == "namespaces";
    let scope_ok = match rule.scope.as_str() {
        "" | "*" => true,
        "Namespaced" => !is_namespace_object && !req.namespace.is_empty(),
        "Cluster" => is_namespace_object || req.namespace.is_empty(),
        _ => false,
    };
    // The resource first: it is what sets most rules apart.
    resource_listed(&rule.resources, resource.name, sub_resource)
        && scope_ok
        && listed(&rule.operations, req.operation.as_str())
        && listed(&rule.api_groups, resource.group)
        && listed(&rule.api_versions, resource.version)
        && (rule.resource_names.is_empty() || rule.resource_names.iter().any(|n| same(n, req.name)))
}

/// String equality compared byte by byte in place: rule entries and request attributes are
/// short, and a call to `memcmp` for each (as `==` makes) costs more than the comparison.
#[inline]
fn same(a: &str, b: &str) -> bool {
    a.len() == b.len() && a.bytes().zip(b.bytes()).all(|(x, y)| x == y)
}

/// Whether a rule's `resources` list names `resource` with `sub_resource` (empty for none):
/// `*` is every resource without subresource, `res/*` `res` and every subresource of it, `*/sub`
/// subresource `sub` of every resource, `*/*` everything.
pub fn resource_listed(entries: &[String], resource: &str, sub_resource: &str) -> bool {
    entries.iter().any(|entry| {
        let (res, sub) = entry.split_once('/').unwrap_or((entry, ""));
        (res == "*" || same(res, resource)) && (sub == "*" || same(sub, sub_resource))
    })
}

fn namespace_matches(
    selector: &LabelSelector,
    req: &Request<'_>,
    namespaces: &dyn Namespaces,
) -> Result<bool, MatchError> {
    let is_namespace = req.resource.name == "namespaces";
    if req.namespace.is_empty() && !is_namespace {
        return Ok(true);
    }
    if selector.match_labels.is_empty() && selector.match_expressions.is_empty() {
        return Ok(true);
    }
    let own_labels = is_namespace
        && req.sub_resource.is_empty()
        && matches!(
            req.operation,
            crate::request::Operation::Create | crate::request::Operation::Update
        );
    let labels = if own_labels {
        labels_of(req.object())
    } else {
        let name = if req.namespace.is_empty() {
            req.name
        } else {
            req.namespace
        };
        match namespaces.labels(name) {
            Some(labels) => labels,
            None => return Err(MatchError::NamespaceNotFound(name.to_string())),
        }
    };
    selector_matches(selector, labels)
}

/// Whether matching `criteria` may read the request's object: an object selector, or a
/// namespace selector on a request for a namespace (whose own labels it reads).
pub(crate) fn may_read_object(criteria: &MatchResources, req: &Request<'_>) -> bool {
    let set = |s: &LabelSelector| !(s.match_labels.is_empty() && s.match_expressions.is_empty());
    set(&criteria.object_selector)
        || (req.resource.name == "namespaces" && set(&criteria.namespace_selector))
}

fn object_matches(selector: &LabelSelector, req: &Request<'_>) -> Result<bool, MatchError> {
    if selector.match_labels.is_empty() && selector.match_expressions.is_empty() {
        return Ok(true);
    }
    let new = req.object();
    if has_object_meta(new) && selector_matches(selector, labels_of(new))? {
        return Ok(true);
    }
    // The old object is read only when the new one does not match.
    let old = req.old_object();
    Ok(has_object_meta(old) && selector_matches(selector, labels_of(old))?)
}

/// Whether an object has metadata for an object selector to read: a kind without ObjectMeta
/// (the options kinds of CONNECT, such as `PodExecOptions`) matches no object selector, as
/// kube-apiserver's metadata accessor fails on it.
fn has_object_meta(obj: &Value) -> bool {
    obj.get("metadata").is_some_and(Value::is_object)
}

/// An object's `metadata.labels`, if it has them as a map.
pub(crate) fn labels_of(obj: &Value) -> Option<&serde_json::Map<String, Value>> {
    obj.get("metadata")?.get("labels")?.as_object()
}

/// Evaluates a label selector over a label map (absent labels are an empty map).
pub fn selector_matches(
    selector: &LabelSelector,
    labels: Option<&serde_json::Map<String, Value>>,
) -> Result<bool, MatchError> {
    let get = |k: &str| labels.and_then(|l| l.get(k)).and_then(Value::as_str);
    for (k, v) in &selector.match_labels {
        if get(k) != Some(v.as_str()) {
            return Ok(false);
        }
    }
    for req in &selector.match_expressions {
        let value = get(&req.key);
        let ok = match req.operator.as_str() {
            "In" => value.is_some_and(|v| req.values.iter().any(|x| x == v)),
            "NotIn" => !value.is_some_and(|v| req.values.iter().any(|x| x == v)),
            "Exists" => value.is_some(),
            "DoesNotExist" => value.is_none(),
            other => {
                return Err(MatchError::Selector(format!(
                    "{other:?} is not a valid label selector operator"
                )));
            }
        };
        if !ok {
            return Ok(false);
        }
    }
    Ok(true)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::LabelRequirement;
    use serde_json::json;

    struct NoNamespaces;
    impl Namespaces for NoNamespaces {
        fn get(&self, _: &str) -> Option<&Value> {
            None
        }
    }

    fn rule(ops: &[&str], groups: &[&str], resources: &[&str]) -> ResourceRule {
        let v = |s: &[&str]| s.iter().map(|x| x.to_string()).collect();
        ResourceRule {
            operations: v(ops),
            api_groups: v(groups),
            api_versions: vec!["*".into()],
            resources: v(resources),
            scope: "*".into(),
            ..Default::default()
        }
    }

    fn review(resource: &str, sub: &str, ns: &str) -> Value {
        json!({"uid": "u", "operation": "CREATE", "name": "n", "namespace": ns, "subResource": sub,
            "kind": {"group": "apps", "version": "v1", "kind": "Deployment"},
            "resource": {"group": "apps", "version": "v1", "resource": resource},
            "object": {"metadata": {"labels": {"app": "web"}}}})
    }

    fn check(criteria: &MatchResources, raw: &Value) -> Result<bool, MatchError> {
        matches(
            criteria,
            &Request::from_json(raw).expect("valid"),
            &NoNamespaces,
        )
    }

    #[test]
    fn resources_and_subresources() {
        let c = |res: &[&str]| MatchResources {
            resource_rules: vec![rule(&["CREATE"], &["apps"], res)],
            ..Default::default()
        };
        assert_eq!(
            check(&c(&["deployments"]), &review("deployments", "", "")),
            Ok(true)
        );
        assert_eq!(
            check(&c(&["deployments"]), &review("deployments", "scale", "")),
            Ok(false)
        );
        assert_eq!(
            check(&c(&["*"]), &review("deployments", "scale", "")),
            Ok(false)
        );
        assert_eq!(
            check(&c(&["*/scale"]), &review("deployments", "scale", "")),
            Ok(true)
        );
        assert_eq!(
            check(&c(&["*/*"]), &review("deployments", "status", "")),
            Ok(true)
        );
        assert_eq!(
            check(&c(&["pods"]), &review("deployments", "", "")),
            Ok(false)
        );
    }

    #[test]
    fn operations_scope_and_exclusions() {
        let mut c = MatchResources {
            resource_rules: vec![rule(&["UPDATE"], &["*"], &["*"])],
            ..Default::default()
        };
        assert_eq!(check(&c, &review("deployments", "", "")), Ok(false));
        c.resource_rules[0].operations = vec!["*".into()];
        c.resource_rules[0].scope = "Namespaced".into();
        assert_eq!(check(&c, &review("deployments", "", "")), Ok(false));
        assert_eq!(check(&c, &review("deployments", "", "ns")), Ok(true));
        c.exclude_resource_rules = vec![rule(&["*"], &["apps"], &["deployments"])];
        assert_eq!(check(&c, &review("deployments", "", "ns")), Ok(false));
    }

    #[test]
    fn matching_reads_the_object_only_where_may_read_object_says() {
        let selector = || LabelSelector {
            match_labels: vec![("app".into(), "web".into())],
            ..Default::default()
        };
        let all = MatchResources {
            resource_rules: vec![rule(&["*"], &["*"], &["*"])],
            ..Default::default()
        };
        let by_object = MatchResources {
            object_selector: selector(),
            ..all.clone()
        };
        let by_namespace = MatchResources {
            namespace_selector: selector(),
            ..all.clone()
        };
        let namespace = json!({"uid": "u", "operation": "CREATE", "name": "web",
            "kind": {"group": "", "version": "v1", "kind": "Namespace"},
            "resource": {"group": "", "version": "v1", "resource": "namespaces"},
            "object": {"metadata": {"name": "web", "labels": {"app": "web"}}}});
        let cases = [
            (&all, review("deployments", "", "ns"), false),
            (&by_object, review("deployments", "", "ns"), true),
            (&by_namespace, review("deployments", "", "ns"), false),
            (&by_namespace, namespace, true),
        ];
        for (criteria, raw, reads) in cases {
            let received: crate::received::ReceivedRequest =
                serde_json::from_str(&raw.to_string()).expect("a request");
            let req = received.request().expect("valid");
            assert_eq!(may_read_object(criteria, &req), reads, "{raw}");
            let _ = matches(criteria, &req, &NoNamespaces);
            assert_eq!(received.object_read_with_request(), reads, "{raw}");
        }
    }

    #[test]
    fn selectors() {
        let mut c = MatchResources {
            resource_rules: vec![rule(&["*"], &["*"], &["*"])],
            ..Default::default()
        };
        c.object_selector.match_labels = vec![("app".into(), "web".into())];
        assert_eq!(check(&c, &review("deployments", "", "")), Ok(true));
        c.object_selector.match_expressions = vec![LabelRequirement {
            key: "tier".into(),
            operator: "Exists".into(),
            values: vec![],
        }];
        assert_eq!(check(&c, &review("deployments", "", "")), Ok(false));
        // A namespaced request whose namespace is unknown: the error surfaces because rules match.
        let mut n = MatchResources {
            resource_rules: vec![rule(&["*"], &["*"], &["*"])],
            ..Default::default()
        };
        n.namespace_selector.match_labels = vec![("env".into(), "prod".into())];
        assert_eq!(
            check(&n, &review("deployments", "", "missing")),
            Err(MatchError::NamespaceNotFound("missing".into()))
        );
        // Cluster-scoped objects are never filtered by namespaceSelector.
        assert_eq!(check(&n, &review("deployments", "", "")), Ok(true));
        // Rules that do not cover the request: a clean miss, the unknown namespace unread.
        n.resource_rules = vec![rule(&["*"], &["*"], &["pods"])];
        assert_eq!(check(&n, &review("deployments", "", "missing")), Ok(false));
    }

    #[test]
    fn an_object_without_metadata_matches_no_object_selector_and_connect_is_named_or_not() {
        // `kubectl exec`: the object is a PodExecOptions, which has no ObjectMeta.
        let exec = json!({"uid": "u", "operation": "CONNECT", "name": "p", "namespace": "",
            "subResource": "exec",
            "kind": {"group": "", "version": "v1", "kind": "PodExecOptions"},
            "resource": {"group": "", "version": "v1", "resource": "pods"},
            "object": {"apiVersion": "v1", "kind": "PodExecOptions", "command": ["sh"]}});
        let mut c = MatchResources {
            resource_rules: vec![rule(&["*"], &["*"], &["*/*"])],
            ..Default::default()
        };
        c.object_selector.match_expressions = vec![LabelRequirement {
            key: "protected".into(),
            operator: "DoesNotExist".into(),
            values: vec![],
        }];
        assert_eq!(check(&c, &exec), Ok(false));
        // An object with metadata and no labels does match it.
        let mut labelless = review("deployments", "", "");
        labelless["object"] = json!({"metadata": {"name": "n"}});
        assert_eq!(check(&c, &labelless), Ok(true));

        let req = Request::from_json(&exec).expect("valid");
        assert!(!operation_named(&c, &req), "`*` does not name CONNECT");
        c.resource_rules
            .push(rule(&["CONNECT"], &[""], &["pods/attach"]));
        assert!(!operation_named(&c, &req), "a CONNECT rule for attach");
        c.resource_rules
            .push(rule(&["CREATE", "CONNECT"], &[""], &["pods/*"]));
        assert!(operation_named(&c, &req));
    }

    /// Two namespaces, counting how often each is looked up.
    struct Counted(Value, Value, std::cell::Cell<usize>);
    impl Namespaces for Counted {
        fn get(&self, name: &str) -> Option<&Value> {
            self.2.set(self.2.get() + 1);
            match name {
                "a" => Some(&self.0),
                "b" => Some(&self.1),
                _ => None,
            }
        }
    }

    #[test]
    fn remembered_labels_look_the_first_namespace_up_once_and_any_other_each_time() {
        let counted = Counted(
            json!({"metadata": {"name": "a", "labels": {"team": "a"}}}),
            json!({"metadata": {"name": "b", "labels": {"team": "b"}}}),
            std::cell::Cell::new(0),
        );
        let remembered = RememberedLabels::new(&counted);
        let team = |name: &str| {
            remembered
                .labels(name)
                .map(|labels| labels.and_then(|l| l.get("team")).cloned())
        };
        for _ in 0..3 {
            assert_eq!(team("a"), Some(Some(json!("a"))));
        }
        assert_eq!(counted.2.get(), 1);
        assert_eq!(team("b"), Some(Some(json!("b"))));
        assert_eq!(team("missing"), None);
        assert_eq!(team("a"), Some(Some(json!("a"))));
        assert_eq!(counted.2.get(), 3);
        // A name longer than any namespace's is looked up, never remembered.
        let long = "x".repeat(NAME_BYTES + 1);
        let fresh = RememberedLabels::new(&counted);
        assert_eq!(fresh.labels(&long), None);
        assert_eq!(fresh.labels(&long), None);
        assert_eq!(counted.2.get(), 5);
    }
}
