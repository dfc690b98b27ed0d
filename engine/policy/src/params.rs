//! Collecting a binding's params (kube-apiserver's `CollectParams`): by name or selector, in the
//! paramRef's namespace or the request's, with parameterNotFoundAction and upstream's errors.

use std::collections::BTreeMap;
use std::sync::Arc;

use serde_json::Value;
use smallvec::{SmallVec, smallvec};

use crate::matching::{MatchError, selector_matches};
use crate::model::{ParamKind, ParamRef, ParameterNotFoundAction};
use crate::request::Request;

/// The objects of one param kind, as the operator's watch of that kind knows them.
#[derive(Debug, Default, Clone)]
pub struct ParamObjects {
    /// True for namespaced kinds.
    pub namespaced: bool,
    /// Objects by namespace (empty for cluster-scoped kinds), then name. A request looks one
    /// up by `&str`, with no key built, and a selector reads only its namespace's objects; a
    /// watch event copies only the map of the namespace it changes, and every object is
    /// shared.
    /// A namespace left with no object is removed.
    by_namespace: BTreeMap<String, Arc<BTreeMap<String, Arc<Value>>>>,
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
        let names = Arc::make_mut(self.by_namespace.entry(namespace.to_string()).or_default());
        names.insert(name.to_string(), object);
    }

    /// Removes the object `name` in `namespace`, if there is one.
    pub fn remove(&mut self, namespace: &str, name: &str) {
        let Some(names) = self.by_namespace.get_mut(namespace) else {
            return;
        };
        if !names.contains_key(name) {
            return;
        }
        let names = Arc::make_mut(names);
        names.remove(name);
        if names.is_empty() {
            self.by_namespace.remove(namespace);
        }
    }

    /// The object `name` in `namespace`.
    pub fn get(&self, namespace: &str, name: &str) -> Option<&Arc<Value>> {
        self.by_namespace.get(namespace)?.get(name)
    }

    /// The objects in `namespace`, by name.
    pub fn in_namespace(&self, namespace: &str) -> impl Iterator<Item = (&str, &Arc<Value>)> {
        (self.by_namespace.get(namespace).into_iter())
            .flat_map(|names| names.iter().map(|(name, o)| (name.as_str(), o)))
    }

    /// Every object with its namespace and name, by namespace, then name.
    pub fn iter(&self) -> impl Iterator<Item = (&str, &str, &Arc<Value>)> {
        self.by_namespace.iter().flat_map(|(ns, names)| {
            (names.iter()).map(move |(name, o)| (ns.as_str(), name.as_str(), o))
        })
    }

    /// How many objects there are.
    pub fn len(&self) -> usize {
        self.by_namespace.values().map(|names| names.len()).sum()
    }

    /// True when there is no object.
    pub fn is_empty(&self) -> bool {
        self.by_namespace.is_empty()
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
        (None, Some(selector)) => {
            let mut out = ParamList::new();
            for (_, obj) in store.in_namespace(namespace) {
                let labels = obj
                    .get("metadata")
                    .and_then(|m| m.get("labels"))
                    .and_then(Value::as_object);
                if selector_matches(selector, labels)? {
                    out.push(Some(&**obj));
                }
            }
            out
        }
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
