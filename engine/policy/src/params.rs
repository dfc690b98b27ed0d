//! Collecting a binding's params (kube-apiserver's `CollectParams`): by name or selector, in the
//! paramRef's namespace or the request's, with parameterNotFoundAction and upstream's errors.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use serde_json::Value;
use smallvec::{SmallVec, smallvec};

use crate::matching::{MatchError, labels_of, selector_matches};
use crate::model::{LabelSelector, ParamKind, ParamRef, ParameterNotFoundAction};
use crate::request::Request;

/// The objects of one param kind, as the operator's watch of that kind knows them.
#[derive(Debug, Default, Clone)]
pub struct ParamObjects {
    /// True for namespaced kinds.
    pub namespaced: bool,
    /// Objects by namespace (empty for cluster-scoped kinds). A request looks one up by
    /// `&str`, with no key built, and a selector reads only its namespace's objects; a watch
    /// event copies only the namespace it changes, and every object is shared.
    /// A namespace left with no object is removed.
    by_namespace: BTreeMap<String, Arc<NamespaceObjects>>,
}

/// The objects of one namespace: by name, and by each label they carry.
#[derive(Debug, Default, Clone)]
struct NamespaceObjects {
    by_name: BTreeMap<String, Arc<Value>>,
    /// For each label key and value, the objects carrying it, in name order: a selector with
    /// `matchLabels` reads only the objects of one of its labels, and no object's labels
    /// (1,024 params of one label: 3.8 M -> 3.2 M instructions per review).
    /// A sorted list, not a map: a map's first node takes hundreds of bytes, and many labels
    /// (a name, a hash) are carried by one object each. Kept per object: 63 bytes for a label
    /// other objects carry too, about 130 for one of its own (a 2.8 KB ConfigMap with one
    /// shared and two own labels: 68 -> 393 bytes besides the object).
    by_label: HashMap<String, HashMap<String, Named>>,
}

/// Objects with their names, in name order.
type Named = Vec<(String, Arc<Value>)>;

/// The string-valued labels of an object (a selector sees no other).
fn string_labels(object: &Value) -> impl Iterator<Item = (&str, &str)> {
    labels_of(object)
        .into_iter()
        .flatten()
        .filter_map(|(k, v)| Some((k.as_str(), v.as_str()?)))
}

impl NamespaceObjects {
    fn insert(&mut self, name: &str, object: Arc<Value>) {
        self.remove(name);
        for (key, value) in string_labels(&object) {
            // Room for one: most labels with a value of their own (a name, a hash) are
            // carried by one object, and a list's first growth makes room for four.
            let carrying = (self.by_label.entry(key.to_string()).or_default())
                .entry(value.to_string())
                .or_insert_with(|| Vec::with_capacity(1));
            let at = carrying
                .binary_search_by(|(n, _)| n.as_str().cmp(name))
                .unwrap_or_else(|at| at);
            carrying.insert(at, (name.to_string(), object.clone()));
        }
        self.by_name.insert(name.to_string(), object);
    }

    fn remove(&mut self, name: &str) {
        let Some(old) = self.by_name.remove(name) else {
            return;
        };
        for (key, value) in string_labels(&old) {
            let Some(values) = self.by_label.get_mut(key) else {
                continue;
            };
            if let Some(carrying) = values.get_mut(value)
                && let Ok(at) = carrying.binary_search_by(|(n, _)| n.as_str().cmp(name))
            {
                carrying.remove(at);
                if carrying.is_empty() {
                    values.remove(value);
                }
            }
            if values.is_empty() {
                self.by_label.remove(key);
            }
        }
    }

    /// The objects `selector` selects, in name order, added to `out`.
    fn select<'s>(
        &'s self,
        selector: &LabelSelector,
        out: &mut ParamList<'s>,
    ) -> Result<(), MatchError> {
        let carrying = |(key, value): &(String, String)| {
            (self.by_label.get(key.as_str()))
                .and_then(|values| values.get(value.as_str()))
                .map_or(&[][..], Vec::as_slice)
        };
        // The fewest candidates: those of the rarest label the selector requires.
        let Some(rarest) = selector
            .match_labels
            .iter()
            .map(carrying)
            .min_by_key(|c| c.len())
        else {
            for obj in self.by_name.values() {
                if selector_matches(selector, labels_of(obj))? {
                    out.push(Some(&**obj));
                }
            }
            return Ok(());
        };
        out.reserve(rarest.len());
        if selector.match_labels.len() == 1 && selector.match_expressions.is_empty() {
            out.extend(rarest.iter().map(|(_, obj)| Some(&**obj)));
            return Ok(());
        }
        for (_, obj) in rarest {
            if selector_matches(selector, labels_of(obj))? {
                out.push(Some(&**obj));
            }
        }
        Ok(())
    }
}

impl ParamObjects {
    /// No objects yet, of a namespaced kind or not.
    pub fn new(namespaced: bool) -> Self {
        ParamObjects {
            namespaced,
            ..Self::default()
        }
    }

    /// Inserts or replaces the object `name` in `namespace` (empty for cluster-scoped kinds).
    pub fn insert(&mut self, namespace: &str, name: &str, object: Arc<Value>) {
        let objects = Arc::make_mut(self.by_namespace.entry(namespace.to_string()).or_default());
        objects.insert(name, object);
    }

    /// Removes the object `name` in `namespace`, if there is one.
    pub fn remove(&mut self, namespace: &str, name: &str) {
        let Some(objects) = self.by_namespace.get_mut(namespace) else {
            return;
        };
        if !objects.by_name.contains_key(name) {
            return;
        }
        let objects = Arc::make_mut(objects);
        objects.remove(name);
        if objects.by_name.is_empty() {
            self.by_namespace.remove(namespace);
        }
    }

    /// The object `name` in `namespace`.
    pub fn get(&self, namespace: &str, name: &str) -> Option<&Arc<Value>> {
        self.by_namespace.get(namespace)?.by_name.get(name)
    }

    /// The objects in `namespace`, by name.
    pub fn in_namespace(&self, namespace: &str) -> impl Iterator<Item = (&str, &Arc<Value>)> {
        (self.by_namespace.get(namespace).into_iter())
            .flat_map(|objects| objects.by_name.iter().map(|(name, o)| (name.as_str(), o)))
    }

    /// Every object with its namespace and name, by namespace, then name.
    pub fn iter(&self) -> impl Iterator<Item = (&str, &str, &Arc<Value>)> {
        self.by_namespace.iter().flat_map(|(ns, objects)| {
            (objects.by_name.iter()).map(move |(name, o)| (ns.as_str(), name.as_str(), o))
        })
    }

    /// How many objects there are.
    pub fn len(&self) -> usize {
        self.by_namespace.values().map(|o| o.by_name.len()).sum()
    }

    /// True when there is no object.
    pub fn is_empty(&self) -> bool {
        self.by_namespace.is_empty()
    }

    /// The objects in `namespace` that `selector` selects, in name order.
    fn select(
        &self,
        namespace: &str,
        selector: &LabelSelector,
    ) -> Result<ParamList<'_>, MatchError> {
        let mut out = ParamList::new();
        if let Some(objects) = self.by_namespace.get(namespace) {
            objects.select(selector, &mut out)?;
        }
        Ok(out)
    }
}

/// How a param kind stands in the cluster.
#[derive(Debug, Clone, Copy)]
pub enum ParamKindState<'a> {
    /// Served and watched, with its current objects.
    Ready(&'a ParamObjects),
    /// Served, but its watch has not listed everything yet.
    Syncing,
    /// The API server does not serve this kind.
    NotServed,
    /// Served, but celgate may not read it; the message says which permission is missing.
    /// Bindings with a paramRef fail at once with it under their failurePolicy.
    Forbidden(&'a str),
    /// Served, but its selected objects are more than celgate keeps; the message says how much.
    /// Bindings with a paramRef fail at once with it under their failurePolicy.
    TooLarge(&'a str),
}

/// The param kinds the engine can read, implemented by the operator's param cache.
pub trait Params {
    /// The state of a param kind.
    fn kind(&self, kind: &ParamKind) -> ParamKindState<'_>;
}

/// A param source with no kinds at all (for policies and tests without params).
pub struct NoParams;

impl Params for NoParams {
    fn kind(&self, _: &ParamKind) -> ParamKindState<'_> {
        ParamKindState::NotServed
    }
}

/// `group/version, Kind=Kind` as Go's GroupVersionKind prints it (core group: `/v1, Kind=…`).
pub fn gvk_string(kind: &ParamKind) -> String {
    let (group, version) = kind
        .api_version
        .split_once('/')
        .unwrap_or(("", kind.api_version.as_str()));
    format!("{group}/{version}, Kind={}", kind.kind)
}

/// The policy-level error for a param kind the API server does not serve.
pub fn not_served(kind: &ParamKind) -> String {
    format!(
        "failed to find resource referenced by paramKind: '{}'",
        gvk_string(kind)
    )
}

/// The params a binding evaluates, kept in place when there is one (or none).
pub type ParamList<'p> = SmallVec<[Option<&'p Value>; 1]>;

/// What collecting params gave.
#[derive(Debug)]
pub enum Collected<'p> {
    /// Evaluate once per entry; `None` binds `params` to null.
    Evaluate(ParamList<'p>),
    /// No params and the action is Allow: the binding is skipped.
    Skip,
}

/// Why a binding's params cannot be collected: a binding configuration error, worded as
/// upstream words it.
#[derive(Debug, PartialEq, Eq, thiserror::Error)]
pub enum ParamError {
    /// The param kind's watch has not listed everything yet (the kind as Go prints it).
    #[error("paramKind kind `{0}` not yet synced to use for admission")]
    NotSynced(String),
    /// The API server does not serve the param kind (the kind as Go prints it).
    #[error("paramKind kind `{0}` not known")]
    NotKnown(String),
    /// celgate may not read the param kind, or keeps none of it (too large); the message says
    /// which permission is missing or what to change.
    #[error("{0}")]
    Forbidden(String),
    /// A paramRef without a namespace, for a namespaced kind, on a cluster-scoped request.
    #[error(
        "cannot use namespaced paramRef in policy binding that matches cluster-scoped resources"
    )]
    NoNamespace,
    /// A paramRef with a namespace, for a cluster-scoped kind.
    #[error("paramRef.namespace must not be provided for a cluster-scoped `paramKind`")]
    ClusterScopedNamespace,
    /// A paramRef with both a name and a selector.
    #[error("paramRef.name and paramRef.selector are mutually exclusive")]
    NameAndSelector,
    /// A paramRef with neither a name nor a selector.
    #[error("one of name or selector must be provided")]
    NoNameNorSelector,
    /// The paramRef's selector cannot be evaluated.
    #[error(transparent)]
    Selector(#[from] MatchError),
    /// No param found, and the paramRef's parameterNotFoundAction is `Deny`.
    #[error("no params found for policy binding with `Deny` parameterNotFoundAction")]
    NotFound,
}

/// Collects the params of a binding for a request. `Err` is a binding configuration error
/// (`failed to configure binding: <err>` under the failurePolicy).
pub fn collect<'p>(
    kind: Option<&ParamKind>,
    param_ref: Option<&ParamRef>,
    req: &Request<'_>,
    params: &'p dyn Params,
) -> Result<Collected<'p>, ParamError> {
    let (Some(kind), Some(param_ref)) = (kind, param_ref) else {
        return Ok(Collected::Evaluate(smallvec![None]));
    };
    let store = match params.kind(kind) {
        ParamKindState::Ready(store) => store,
        ParamKindState::Syncing => return Err(ParamError::NotSynced(go_param_kind(kind))),
        ParamKindState::NotServed => return Err(ParamError::NotKnown(go_param_kind(kind))),
        ParamKindState::Forbidden(message) | ParamKindState::TooLarge(message) => {
            return Err(ParamError::Forbidden(message.to_string()));
        }
    };
    let namespace = if store.namespaced {
        match param_ref.namespace.as_deref().filter(|n| !n.is_empty()) {
            Some(ns) => ns,
            None if !req.namespace.is_empty() => req.namespace,
            None => return Err(ParamError::NoNamespace),
        }
    } else {
        if param_ref
            .namespace
            .as_deref()
            .is_some_and(|n| !n.is_empty())
        {
            return Err(ParamError::ClusterScopedNamespace);
        }
        ""
    };
    let found: ParamList<'p> = match (&param_ref.name, &param_ref.selector) {
        (Some(_), Some(_)) => return Err(ParamError::NameAndSelector),
        (Some(name), None) => store
            .get(namespace, name)
            .map(|o| Some(&**o))
            .into_iter()
            .collect(),
        (None, Some(selector)) => store.select(namespace, selector)?,
        (None, None) => return Err(ParamError::NoNameNorSelector),
    };
    if !found.is_empty() {
        return Ok(Collected::Evaluate(found));
    }
    match param_ref.parameter_not_found_action {
        ParameterNotFoundAction::Deny => Err(ParamError::NotFound),
        ParameterNotFoundAction::Allow => Ok(Collected::Skip),
    }
}

/// The protobuf text form Go prints for a ParamKind in errors.
fn go_param_kind(kind: &ParamKind) -> String {
    format!(
        "&ParamKind{{APIVersion:{},Kind:{},}}",
        kind.api_version, kind.kind
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::LabelRequirement;
    use serde_json::json;

    struct One(ParamObjects);
    impl Params for One {
        fn kind(&self, _: &ParamKind) -> ParamKindState<'_> {
            ParamKindState::Ready(&self.0)
        }
    }

    fn store(namespaced: bool) -> One {
        let ns = if namespaced { "team" } else { "" };
        let obj = |name: &str, env: &str| json!({"metadata": {"name": name, "labels": {"env": env}}, "max": 3});
        let mut objects = ParamObjects::new(namespaced);
        objects.insert(ns, "a", Arc::new(obj("a", "prod")));
        objects.insert(ns, "b", Arc::new(obj("b", "test")));
        objects.insert("other", "c", Arc::new(obj("c", "prod")));
        One(objects)
    }

    fn request(namespace: &str) -> Value {
        json!({"uid": "u", "operation": "CREATE", "namespace": namespace,
            "kind": {"group": "", "version": "v1", "kind": "Pod"},
            "resource": {"group": "", "version": "v1", "resource": "pods"}})
    }

    fn run(namespaced: bool, r: ParamRef, ns: &str) -> Result<usize, String> {
        let kind = ParamKind {
            api_version: "v1".into(),
            kind: "ConfigMap".into(),
        };
        let raw = request(ns);
        let req = Request::from_json(&raw).expect("valid");
        let params = store(namespaced);
        match collect(Some(&kind), Some(&r), &req, &params).map_err(|e| e.to_string())? {
            Collected::Evaluate(list) => Ok(list.len()),
            Collected::Skip => Ok(0),
        }
    }

    #[test]
    fn objects_are_kept_by_namespace_and_an_edit_copies_only_its_namespace() {
        let obj = |name: &str| Arc::new(json!({"metadata": {"name": name}}));
        let mut objects = ParamObjects::new(true);
        objects.insert("b", "y", obj("y"));
        objects.insert("a", "x", obj("x"));
        objects.insert("b", "w", obj("w"));
        objects.insert("b", "w", obj("w2"));
        assert_eq!(objects.len(), 3, "a replaced object counts once");
        let names = |o: &ParamObjects| -> Vec<(String, String)> {
            o.iter()
                .map(|(ns, name, _)| (ns.to_string(), name.to_string()))
                .collect()
        };
        let pair = |ns: &str, name: &str| (ns.to_string(), name.to_string());
        assert_eq!(
            names(&objects),
            [pair("a", "x"), pair("b", "w"), pair("b", "y")]
        );
        assert_eq!(
            objects.get("b", "w").map(|o| o["metadata"]["name"].clone()),
            Some(json!("w2"))
        );
        assert!(objects.get("a", "w").is_none(), "another namespace's name");
        let in_b: Vec<&str> = objects.in_namespace("b").map(|(name, _)| name).collect();
        assert_eq!(in_b, ["w", "y"]);
        assert_eq!(objects.in_namespace("c").count(), 0);

        // A copy shares every namespace; an edit of one leaves the other shared.
        let mut edited = objects.clone();
        edited.remove("b", "y");
        edited.remove("b", "absent");
        edited.remove("c", "absent");
        assert_eq!(edited.len(), 2);
        assert_eq!(objects.len(), 3, "the original is unchanged");
        assert!(Arc::ptr_eq(
            &objects.by_namespace["a"],
            &edited.by_namespace["a"]
        ));
        assert!(!Arc::ptr_eq(
            &objects.by_namespace["b"],
            &edited.by_namespace["b"]
        ));
        edited.remove("a", "x");
        assert!(
            !edited.by_namespace.contains_key("a"),
            "an emptied namespace goes"
        );
        assert_eq!(names(&edited), [pair("b", "w")]);
        assert!(!edited.is_empty());
    }

    #[test]
    fn a_selector_selects_by_label_what_reading_every_objects_labels_selects() {
        let obj = |name: &str, labels: Value| {
            Arc::new(json!({"metadata": {"name": name, "labels": labels}, "data": {}}))
        };
        let mut objects = ParamObjects::new(true);
        objects.insert("t", "a", obj("a", json!({"env": "prod", "tier": "web"})));
        objects.insert("t", "b", obj("b", json!({"env": "prod"})));
        objects.insert("t", "c", obj("c", json!({"env": "test", "tier": "web"})));
        objects.insert("t", "d", obj("d", json!({"env": 7, "tier": "db"})));
        objects.insert("t", "e", Arc::new(json!({"metadata": {"name": "e"}})));
        objects.insert("u", "f", obj("f", json!({"env": "prod"})));
        // Replaced with other labels, and removed: neither is found by its old labels.
        objects.insert("t", "c", obj("c", json!({"env": "prod", "tier": "db"})));
        objects.insert("t", "g", obj("g", json!({"env": "prod"})));
        objects.remove("t", "g");
        let labels = |pairs: &[(&str, &str)]| {
            pairs
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect()
        };
        let exists = |key: &str, operator: &str, values: &[&str]| LabelRequirement {
            key: key.into(),
            operator: operator.into(),
            values: values.iter().map(|v| v.to_string()).collect(),
        };
        let selectors = [
            (LabelSelector::default(), vec!["a", "b", "c", "d", "e"]),
            (
                selector(labels(&[("env", "prod")]), vec![]),
                vec!["a", "b", "c"],
            ),
            (selector(labels(&[("env", "test")]), vec![]), vec![]),
            (selector(labels(&[("env", "7")]), vec![]), vec![]),
            (selector(labels(&[("tier", "db")]), vec![]), vec!["c", "d"]),
            (
                selector(labels(&[("env", "prod"), ("tier", "web")]), vec![]),
                vec!["a"],
            ),
            (
                selector(
                    labels(&[("env", "prod")]),
                    vec![exists("tier", "Exists", &[])],
                ),
                vec!["a", "c"],
            ),
            (
                selector(vec![], vec![exists("tier", "In", &["db", "web"])]),
                vec!["a", "c", "d"],
            ),
            (selector(labels(&[("absent", "x")]), vec![]), vec![]),
        ];
        for (selector, want) in selectors {
            let got: Vec<&str> = (objects.select("t", &selector).expect("valid selector"))
                .into_iter()
                .map(|o| {
                    o.and_then(|o| o["metadata"]["name"].as_str())
                        .unwrap_or("?")
                })
                .collect();
            let every: Vec<&str> = (objects.in_namespace("t"))
                .filter(|(_, o)| selector_matches(&selector, labels_of(o)) == Ok(true))
                .map(|(name, _)| name)
                .collect();
            assert_eq!(got, want, "{selector:?}");
            assert_eq!(got, every, "{selector:?}");
        }
        assert!(
            objects
                .select("absent", &LabelSelector::default())
                .is_ok_and(|l| l.is_empty())
        );
        let bad = selector(
            labels(&[("env", "prod")]),
            vec![exists("tier", "Near", &[])],
        );
        assert!(
            objects.select("t", &bad).is_err(),
            "an invalid operator, where a candidate reaches it"
        );
        objects.remove("t", "c");
        objects.remove("t", "a");
        let web = selector(labels(&[("tier", "web")]), vec![]);
        assert!(objects.select("t", &web).is_ok_and(|l| l.is_empty()));
        let namespace = &objects.by_namespace["t"];
        assert!(
            !namespace.by_label.contains_key("tier")
                || !namespace.by_label["tier"].contains_key("web"),
            "an emptied label goes"
        );
    }

    fn selector(
        match_labels: Vec<(String, String)>,
        match_expressions: Vec<LabelRequirement>,
    ) -> LabelSelector {
        LabelSelector {
            match_labels,
            match_expressions,
        }
    }

    #[test]
    fn by_name_selector_and_namespace_defaulting() {
        let by_name = ParamRef {
            name: Some("a".into()),
            ..Default::default()
        };
        assert_eq!(run(true, by_name.clone(), "team"), Ok(1));
        assert_eq!(
            run(true, by_name.clone(), ""),
            Err("cannot use namespaced paramRef in policy binding that matches cluster-scoped resources".into())
        );
        assert_eq!(
            run(true, by_name.clone(), "elsewhere"),
            Err("no params found for policy binding with `Deny` parameterNotFoundAction".into())
        );
        let allow = ParamRef {
            parameter_not_found_action: ParameterNotFoundAction::Allow,
            ..by_name.clone()
        };
        assert_eq!(run(true, allow, "elsewhere"), Ok(0));
        let all = ParamRef {
            selector: Some(Default::default()),
            ..Default::default()
        };
        assert_eq!(run(true, all.clone(), "team"), Ok(2));
        let both = ParamRef {
            selector: Some(Default::default()),
            ..by_name
        };
        assert_eq!(
            run(true, both, "team"),
            Err("paramRef.name and paramRef.selector are mutually exclusive".into())
        );
        let cluster_ns = ParamRef {
            namespace: Some("team".into()),
            ..all
        };
        assert_eq!(
            run(false, cluster_ns, "team"),
            Err("paramRef.namespace must not be provided for a cluster-scoped `paramKind`".into())
        );
        assert_eq!(
            run(true, ParamRef::default(), "team"),
            Err("one of name or selector must be provided".into())
        );
    }

    #[test]
    fn a_forbidden_kind_fails_the_binding_with_its_message_and_a_binding_without_ref_evaluates() {
        struct Forbidden;
        impl Params for Forbidden {
            fn kind(&self, _: &ParamKind) -> ParamKindState<'_> {
                ParamKindState::Forbidden("celgate may not list configmaps (RBAC: …)")
            }
        }
        let kind = ParamKind {
            api_version: "v1".into(),
            kind: "ConfigMap".into(),
        };
        let by_name = ParamRef {
            name: Some("a".into()),
            ..Default::default()
        };
        let raw = request("team");
        let req = Request::from_json(&raw).expect("valid");
        let got = collect(Some(&kind), Some(&by_name), &req, &Forbidden).map_err(|e| e.to_string());
        assert_eq!(
            got.err().as_deref(),
            Some("celgate may not list configmaps (RBAC: …)")
        );
        // A binding without a paramRef reads no param, so the kind's access does not matter.
        let got = collect(Some(&kind), None, &req, &Forbidden).expect("no error");
        assert!(matches!(got, Collected::Evaluate(v) if v.as_slice() == [None]));
    }

    #[test]
    fn unset_param_kind_or_ref_evaluates_once_with_null() {
        let raw = request("team");
        let req = Request::from_json(&raw).expect("valid");
        let got = collect(None, None, &req, &NoParams).expect("no error");
        assert!(matches!(got, Collected::Evaluate(v) if v.as_slice() == [None]));
        assert_eq!(
            gvk_string(&ParamKind {
                api_version: "example.invalid/v1".into(),
                kind: "Nope".into()
            }),
            "example.invalid/v1, Kind=Nope"
        );
    }
}
