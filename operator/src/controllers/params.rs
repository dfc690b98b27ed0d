//! Param kinds: the objects of each paramKind the bound policies use, watched from when it is
//! first used until no policy uses it (so a kind bound again later is watched afresh, never
//! frozen). Only what a binding's paramRef can select is watched and kept: a named param by its
//! name, a selector by its labels, in the paramRef's namespace (every namespace only when it
//! names none, as the request's namespace is then used); bindings selecting the same share one
//! watch. What is kept of every kind together is bounded in bytes (`--param-max-mib`): a kind
//! whose selection would pass the bound has its objects dropped and its bindings fail under
//! their failurePolicy, saying why, until it fits again (its selection shrinks, or another
//! kind's does). Each watch event updates only the object it names.
//!
//! Whether a kind is served is asked of discovery, and only a definite answer that it is not
//! (the API server's 404, or a group version without the kind) marks it NotServed, which fails
//! requests under failurePolicy Fail. Any other failure (a timeout, a server error) keeps the
//! kind's last known state and is retried with backoff. A kind never listed that the API server
//! forbids celgate to read is marked Forbidden with a message naming the permission to grant:
//! requests do not wait for it, a binding with a paramRef fails at once under its failurePolicy
//! (a kind already listed keeps its objects, as after any other failure).

use std::collections::{BTreeSet, HashMap};
use std::sync::{Arc, Mutex, PoisonError};

use celgate_engine::model::{LabelSelector, ParamKind, ParamRef};
use celgate_engine::{ParamObjects, PolicySet};
use celgate_snapshot::{ParamKey, ParamKindEntry, SnapshotStore};
use futures::{StreamExt, stream};
use kube::api::{ApiResource, DynamicObject, GroupVersionKind};
use kube::discovery::{self, Scope};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, Client, ResourceExt};
use serde_json::Value;
use tokio::sync::watch;
use tokio::task::JoinHandle;
use tracing::{debug, info, warn};

use crate::cluster::identity::Identity;
use crate::retry::{self, Backoff};

/// The label that aggregates a ClusterRole into `celgate-params`, the role bound to celgate's
/// ServiceAccount for reading param kinds (config/rbac).
pub const AGGREGATE_TO_PARAMS_LABEL: &str = "admission.celgate.io/aggregate-to-params";

/// Objects per list page of a param watch: a page is held whole while it is read, and a
/// ConfigMap can hold 1 MiB.
const PAGE_SIZE: u32 = 10;

/// What the paramRef of one binding can select of its kind.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Selects {
    /// The paramRef's namespace; `None`: every namespace (a namespaced kind's paramRef without
    /// one reads the request's namespace, which can be any; a cluster-scoped kind has none).
    namespace: Option<String>,
    /// How the objects are selected.
    selection: Selection,
}

/// How a paramRef selects objects, as a watch asks the API server for them.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
enum Selection {
    /// One object by name (`metadata.name=<name>`).
    Name(String),
    /// Objects by label selector, in the API server's syntax (empty: every object).
    Labels(String),
}

impl Selects {
    /// What `param_ref` can select; `None` when it selects nothing a request could use (no
    /// name nor selector, or a selector that does not parse: the binding then fails anyway).
    fn of(param_ref: &ParamRef) -> Option<Selects> {
        let selection = match (&param_ref.name, &param_ref.selector) {
            (Some(name), _) if !name.is_empty() => Selection::Name(name.clone()),
            (_, Some(selector)) => Selection::Labels(label_selector(selector)?),
            _ => return None,
        };
        Some(Selects {
            namespace: param_ref.namespace.clone().filter(|n| !n.is_empty()),
            selection,
        })
    }

    /// The watch of this scope's objects, listed in pages of [`PAGE_SIZE`].
    fn watch_config(&self) -> watcher::Config {
        let config = watcher::Config::default().page_size(PAGE_SIZE);
        match &self.selection {
            Selection::Name(name) => config.fields(&format!("metadata.name={name}")),
            Selection::Labels(labels) if labels.is_empty() => config,
            Selection::Labels(labels) => config.labels(labels),
        }
    }
}

/// A label selector in the API server's syntax (`k=v,k in (a,b),k notin (a),k,!k`); `None`
/// for an operator it does not know.
fn label_selector(selector: &LabelSelector) -> Option<String> {
    let mut parts: Vec<String> = selector
        .match_labels
        .iter()
        .map(|(k, v)| format!("{k}={v}"))
        .collect();
    for r in &selector.match_expressions {
        parts.push(match r.operator.as_str() {
            "In" => format!("{} in ({})", r.key, r.values.join(",")),
            "NotIn" => format!("{} notin ({})", r.key, r.values.join(",")),
            "Exists" => r.key.clone(),
            "DoesNotExist" => format!("!{}", r.key),
            _ => return None,
        });
    }
    Some(parts.join(","))
}

/// Every param kind the bound policies of `set` use, with what their bindings' paramRefs can
/// select of it, each scope once.
fn wanted(set: &PolicySet) -> HashMap<ParamKey, BTreeSet<Selects>> {
    let mut out: HashMap<ParamKey, BTreeSet<Selects>> = set
        .param_kinds()
        .iter()
        .map(|k| ((k.api_version.clone(), k.kind.clone()), BTreeSet::new()))
        .collect();
    let mut add = |kind: Option<&ParamKind>, param_ref: Option<&ParamRef>| {
        if let (Some(kind), Some(scope)) = (kind, param_ref.and_then(Selects::of)) {
            out.entry((kind.api_version.clone(), kind.kind.clone()))
                .or_default()
                .insert(scope);
        }
    };
    for b in set.validating() {
        for binding in b.bindings.iter() {
            add(
                b.policy.spec.param_kind.as_ref(),
                binding.param_ref.as_deref(),
            );
        }
    }
    for b in set.mutating() {
        for binding in b.bindings.iter() {
            add(
                b.policy.spec.param_kind.as_ref(),
                binding.param_ref.as_deref(),
            );
        }
    }
    out
}

/// One running param kind watch and the scopes it follows.
struct Running {
    scopes: BTreeSet<Selects>,
    task: JoinHandle<()>,
}

/// The bytes (as JSON) of param objects kept by every kind together, against one bound.
struct Budget {
    max: usize,
    kept: Mutex<HashMap<ParamKey, usize>>,
    /// Counts the times a kind kept less than before, so a kind over the bound checks again.
    freed: watch::Sender<u64>,
}

impl Budget {
    fn new(max: usize) -> Arc<Self> {
        Arc::new(Self {
            max,
            kept: Mutex::new(HashMap::new()),
            freed: watch::channel(0).0,
        })
    }

    /// What `key` may keep besides what the other kinds keep.
    fn room(&self, key: &ParamKey) -> usize {
        let kept = self.kept.lock().unwrap_or_else(PoisonError::into_inner);
        let others: usize = (kept.iter())
            .filter(|(k, _)| *k != key)
            .map(|(_, bytes)| *bytes)
            .sum();
        self.max.saturating_sub(others)
    }

    /// `key` keeps `bytes` now (`None`: it is no longer watched).
    fn keep(&self, key: &ParamKey, bytes: Option<usize>) {
        let mut kept = self.kept.lock().unwrap_or_else(PoisonError::into_inner);
        let before = match bytes {
            Some(bytes) => kept.insert(key.clone(), bytes),
            None => kept.remove(key),
        };
        if before.unwrap_or(0) > bytes.unwrap_or(0) {
            self.freed.send_modify(|n| *n = n.wrapping_add(1));
        }
    }
}

/// One kind's part of the [`Budget`], given back when its watch ends or is aborted.
struct Share {
    budget: Arc<Budget>,
    key: ParamKey,
}

impl Drop for Share {
    fn drop(&mut self) {
        self.budget.keep(&self.key, None);
    }
}

/// The running param watches.
pub struct ParamWatches {
    client: Client,
    identity: Identity,
    store: Arc<SnapshotStore>,
    budget: Arc<Budget>,
    running: HashMap<ParamKey, Running>,
}

impl ParamWatches {
    /// No watches yet; every kind together keeps at most `max_bytes` of objects (as JSON).
    pub fn new(client: Client, store: Arc<SnapshotStore>, max_bytes: usize) -> Self {
        Self {
            identity: Identity::new(client.clone()),
            client,
            store,
            budget: Budget::new(max_bytes),
            running: HashMap::new(),
        }
    }

    /// Starts watches for param kinds newly used by `set`, stops those no longer used, and
    /// starts a kind again when what its bindings select changed. A new (or restarted) kind is
    /// published as syncing before this returns, so a policy published after it finds its
    /// params syncing (requests wait for them) rather than unknown or incomplete.
    pub fn sync(&mut self, set: &PolicySet) {
        let mut wanted = wanted(set);
        self.running.retain(|key, running| {
            let keep = wanted.get(key) == Some(&running.scopes);
            if !keep {
                running.task.abort();
                if wanted.contains_key(key) {
                    info!(api_version = %key.0, kind = %key.1, "the params the bindings select changed; watching them afresh");
                } else {
                    info!(api_version = %key.0, kind = %key.1, "no policy uses this param kind any more; stopping its watch");
                    self.store.publish_param_kind(key, None);
                }
            }
            keep
        });
        for (key, scopes) in wanted.drain() {
            if self.running.contains_key(&key) {
                continue;
            }
            self.store
                .publish_param_kind(&key, Some(ParamKindEntry::Syncing));
            let kind = Kind {
                store: self.store.clone(),
                identity: self.identity.clone(),
                key: key.clone(),
                scopes: scopes.iter().cloned().collect(),
                share: Share {
                    budget: self.budget.clone(),
                    key: key.clone(),
                },
                shown: ParamKindEntry::Syncing,
                forbidden_logged: None,
            };
            let task = tokio::spawn(kind.run(self.client.clone()));
            self.running.insert(key, Running { scopes, task });
        }
    }
}

impl Drop for ParamWatches {
    fn drop(&mut self) {
        for running in self.running.values() {
            running.task.abort();
        }
    }
}

/// One watched param kind and what was last published for it.
struct Kind {
    store: Arc<SnapshotStore>,
    identity: Identity,
    key: ParamKey,
    /// What the bindings select, each followed by a watch of its own.
    scopes: Vec<Selects>,
    /// What it may keep of the bound all kinds share.
    share: Share,
    shown: ParamKindEntry,
    /// The last forbidden message logged, until the kind lists again (so a retry that is
    /// forbidden the same way is not logged again).
    forbidden_logged: Option<String>,
}

impl Kind {
    /// Looks the kind up and follows its objects, looking it up again whenever the API server
    /// says it is gone; runs until aborted.
    async fn run(mut self, client: Client) {
        let gvk = gvk(&self.key);
        let mut retry = Backoff::new(retry::LOOKUP);
        loop {
            match discovery::pinned_kind(&client, &gvk).await {
                Ok((resource, caps)) => {
                    if matches!(self.shown, ParamKindEntry::NotServed) {
                        info!(api_version = %self.key.0, kind = %self.key.1, "param kind is served now");
                        self.show(ParamKindEntry::Syncing);
                    }
                    self.follow(
                        &client,
                        &resource,
                        caps.scope == Scope::Namespaced,
                        &mut retry,
                    )
                    .await;
                }
                Err(e) if is_forbidden(&e) => {
                    let subject = self.identity.subject().await;
                    self.forbidden(discovery_forbidden(&self.key, &subject), &e);
                }
                Err(e) if is_not_found(&e) => {
                    if !matches!(self.shown, ParamKindEntry::NotServed) {
                        warn!(api_version = %self.key.0, kind = %self.key.1, error = %e, "param kind is not served; policies using it fail per their failurePolicy until it is");
                        self.show(ParamKindEntry::NotServed);
                    }
                }
                Err(e) => {
                    warn!(api_version = %self.key.0, kind = %self.key.1, error = %e, "cannot look up param kind; it keeps its last known state until a lookup succeeds");
                }
            }
            tokio::time::sleep(retry.next_delay()).await;
        }
    }

    /// Follows the selected objects of the kind until the API server says the kind is gone,
    /// or the kept objects shrink back under the bound after passing it (they are then listed
    /// afresh).
    async fn follow(
        &mut self,
        client: &Client,
        resource: &ApiResource,
        namespaced: bool,
        retry: &mut Backoff,
    ) {
        if self.scopes.is_empty() {
            // Bound, but no binding selects anything: nothing to watch.
            self.show(ParamKindEntry::Ready(Arc::new(ParamObjects::new(
                namespaced,
            ))));
            return std::future::pending().await;
        }
        let watches = self.scopes.iter().enumerate().map(|(i, scope)| {
            let api: Api<DynamicObject> = match (&scope.namespace, namespaced) {
                (Some(namespace), true) => {
                    Api::namespaced_with(client.clone(), namespace, resource)
                }
                _ => Api::all_with(client.clone(), resource),
            };
            crate::retry::watch(api, scope.watch_config())
                .modify(without_managed_fields)
                .map(move |event| (i, event))
                .boxed()
        });
        let mut events = stream::select_all(watches);
        let mut selected = Selected::new(self.scopes.len(), namespaced);
        let mut freed = self.share.budget.freed.subscribe();
        loop {
            let event = tokio::select! {
                event = events.next() => event,
                // Another kind keeps less: one over the bound checks whether it fits now.
                Ok(()) = freed.changed(), if selected.over.is_some() => {
                    selected.check(self.room());
                    if selected.over.is_none() {
                        info!(api_version = %self.key.0, kind = %self.key.1, "the selected params fit again; listing them afresh");
                        return;
                    }
                    continue;
                }
            };
            let Some((scope, event)) = event else {
                return;
            };
            match event {
                Ok(event) => {
                    if self.take(&mut selected, scope, event) {
                        retry.reset();
                    }
                    let kept = selected.over.map_or(selected.bytes, |_| 0);
                    self.share.budget.keep(&self.key, Some(kept));
                    if selected.over.is_none() && selected.dropped {
                        info!(api_version = %self.key.0, kind = %self.key.1, "the selected params fit again; listing them afresh");
                        return;
                    }
                }
                Err(e) if watch_not_found(&e) => {
                    info!(api_version = %self.key.0, kind = %self.key.1, error = %e, "param kind is gone; looking it up again");
                    return;
                }
                Err(watcher::Error::InitialListFailed(e)) if is_forbidden(&e) => {
                    let subject = self.identity.subject().await;
                    self.forbidden(forbidden(Verb::List, resource, &subject), &e);
                }
                Err(watcher::Error::WatchStartFailed(e) | watcher::Error::WatchFailed(e))
                    if is_forbidden(&e) =>
                {
                    let subject = self.identity.subject().await;
                    self.forbidden(forbidden(Verb::Watch, resource, &subject), &e);
                }
                Err(e) => {
                    warn!(api_version = %self.key.0, kind = %self.key.1, error = %e, "param watch failed; the kind keeps its last known objects until the watch recovers")
                }
            }
        }
    }

    /// Takes one watch event of `scope` into `selected`, and publishes the kind once every
    /// scope has listed; whether something was published.
    fn take(
        &mut self,
        selected: &mut Selected,
        scope: usize,
        event: watcher::Event<DynamicObject>,
    ) -> bool {
        match event {
            watcher::Event::Init => {
                selected.relisting[scope] = Some(BTreeSet::new());
                return false;
            }
            watcher::Event::InitApply(object) => {
                let key = selected.key_of(&object);
                if let Some(listed) = &mut selected.relisting[scope] {
                    listed.insert(key.clone());
                }
                self.apply(selected, scope, key, &object);
                return false;
            }
            watcher::Event::InitDone => {
                let listed = selected.relisting[scope].take().unwrap_or_default();
                selected.forget_unlisted(scope, &listed, self.room());
                selected.listed[scope] = true;
            }
            watcher::Event::Apply(object) => {
                let key = selected.key_of(&object);
                self.apply(selected, scope, key, &object);
            }
            watcher::Event::Delete(object) => {
                let key = selected.key_of(&object);
                selected.release(scope, &key, self.room());
            }
        }
        if !selected.listed.iter().all(|l| *l) {
            return false;
        }
        match &selected.over {
            Some(bytes) => {
                let message = too_large(&self.key, *bytes, self.room(), self.share.budget.max);
                if !matches!(&self.shown, ParamKindEntry::TooLarge(m) if **m == *message) {
                    warn!(api_version = %self.key.0, kind = %self.key.1, "{message}");
                    self.show(ParamKindEntry::TooLarge(message.into()));
                }
            }
            None => self.show(ParamKindEntry::Ready(selected.objects.clone())),
        }
        true
    }

    /// `scope` selects `object`: counted, and kept unless the kind is over its bound (then it
    /// is never converted).
    fn apply(
        &self,
        selected: &mut Selected,
        scope: usize,
        key: (String, String),
        object: &DynamicObject,
    ) {
        let size = encoded_len(object);
        let room = self.room();
        let value = if selected.fits(&key, size, room) {
            self.param_value(object)
        } else {
            None
        };
        selected.apply(scope, key, size, value, room);
    }

    /// The bytes this kind may keep: the bound less what the other kinds keep.
    fn room(&self) -> usize {
        self.share.budget.room(&self.key)
    }

    /// A param object as policies read it, with apiVersion and kind from the paramKind (as
    /// upstream wraps them).
    fn param_value(&self, object: &DynamicObject) -> Option<Arc<Value>> {
        match serde_json::to_value(object) {
            Ok(mut value) => {
                value["apiVersion"] = self.key.0.clone().into();
                value["kind"] = self.key.1.clone().into();
                Some(Arc::new(value))
            }
            Err(e) => {
                warn!(name = %object.name_any(), error = %e, "cannot convert a param object; it is left out");
                None
            }
        }
    }

    /// Marks a kind that was never listed as forbidden with `message` (logged when it is new);
    /// a kind with objects keeps them (its last known state), as after any other failure.
    fn forbidden(&mut self, message: String, error: &kube::Error) {
        if self.forbidden_logged.as_deref() == Some(message.as_str()) {
            debug!(api_version = %self.key.0, kind = %self.key.1, %error, "param kind still forbidden");
            return;
        }
        warn!(api_version = %self.key.0, kind = %self.key.1, %error, "{message}");
        if matches!(
            self.shown,
            ParamKindEntry::Syncing | ParamKindEntry::Forbidden(_)
        ) {
            self.show(ParamKindEntry::Forbidden(message.as_str().into()));
        }
        self.forbidden_logged = Some(message);
    }

    /// Publishes the kind's new state.
    fn show(&mut self, entry: ParamKindEntry) {
        let state = match &entry {
            ParamKindEntry::Ready(objects) => {
                self.forbidden_logged = None;
                format!("ready with {} objects", objects.len())
            }
            ParamKindEntry::Syncing => "syncing".into(),
            ParamKindEntry::NotServed => "not served".into(),
            ParamKindEntry::Forbidden(_) => "forbidden".into(),
            ParamKindEntry::TooLarge(_) => "too large".into(),
        };
        debug!(api_version = %self.key.0, kind = %self.key.1, %state, "publishing param kind");
        self.store
            .publish_param_kind(&self.key, Some(entry.clone()));
        self.shown = entry;
    }
}

/// The objects the scopes of one kind select, each kept once however many scopes select it,
/// with their size.
struct Selected {
    namespaced: bool,
    /// The kept objects (empty while over the bound).
    objects: Arc<ParamObjects>,
    /// Each selected object: the scopes selecting it and its size as JSON.
    held: HashMap<(String, String), (BTreeSet<usize>, usize)>,
    /// Bytes of every selected object.
    bytes: usize,
    /// Whether each scope has listed since the watch started.
    listed: Vec<bool>,
    /// The objects a scope's list in progress has returned.
    relisting: Vec<Option<BTreeSet<(String, String)>>>,
    /// The bytes selected while over the bound.
    over: Option<usize>,
    /// Whether objects were dropped for the bound (then they are listed afresh once under it).
    dropped: bool,
}

impl Selected {
    fn new(scopes: usize, namespaced: bool) -> Self {
        Self {
            namespaced,
            objects: Arc::new(ParamObjects::new(namespaced)),
            held: HashMap::new(),
            bytes: 0,
            listed: vec![false; scopes],
            relisting: vec![None; scopes],
            over: None,
            dropped: false,
        }
    }

    fn key_of(&self, object: &DynamicObject) -> (String, String) {
        let (namespace, name) = object_key(object, self.namespaced);
        (namespace.to_string(), name.to_string())
    }

    /// Whether the selection stays within `max` bytes with the object `key` at `size`.
    fn fits(&self, key: &(String, String), size: usize, max: usize) -> bool {
        let old = self.held.get(key).map_or(0, |(_, bytes)| *bytes);
        self.bytes - old + size <= max
    }

    /// `scope` selects the object `key` of `size` bytes (added or changed), kept as `value`
    /// (`None`: not converted, as it does not fit).
    fn apply(
        &mut self,
        scope: usize,
        key: (String, String),
        size: usize,
        value: Option<Arc<Value>>,
        max: usize,
    ) {
        let (scopes, bytes) = self.held.entry(key.clone()).or_default();
        scopes.insert(scope);
        self.bytes = self.bytes - *bytes + size;
        *bytes = size;
        match value {
            Some(value) if self.over.is_none() => {
                Arc::make_mut(&mut self.objects).insert(&key.0, &key.1, value);
            }
            _ => Arc::make_mut(&mut self.objects).remove(&key.0, &key.1),
        }
        self.check(max);
    }

    /// `scope` no longer selects `key` (deleted, or no longer matching its selector).
    fn release(&mut self, scope: usize, key: &(String, String), max: usize) {
        let Some((scopes, bytes)) = self.held.get_mut(key) else {
            return;
        };
        scopes.remove(&scope);
        if scopes.is_empty() {
            self.bytes -= *bytes;
            self.held.remove(key);
            Arc::make_mut(&mut self.objects).remove(&key.0, &key.1);
        }
        self.check(max);
    }

    /// `scope` listed afresh and returned only `listed`: it selects no other object.
    fn forget_unlisted(&mut self, scope: usize, listed: &BTreeSet<(String, String)>, max: usize) {
        let gone: Vec<(String, String)> = (self.held.iter())
            .filter(|(key, (scopes, _))| scopes.contains(&scope) && !listed.contains(*key))
            .map(|(key, _)| key.clone())
            .collect();
        for key in gone {
            self.release(scope, &key, max);
        }
    }

    /// Drops the kept objects once the selection passes `max` bytes; notes when it is back
    /// under it.
    fn check(&mut self, max: usize) {
        if self.bytes > max {
            if self.over.is_none() {
                self.objects = Arc::new(ParamObjects::new(self.namespaced));
                self.dropped = true;
            }
            self.over = Some(self.bytes);
        } else {
            self.over = None;
        }
    }
}

/// The size of an object as JSON text, counted without building it: what bounds the params
/// kept.
fn encoded_len(object: &DynamicObject) -> usize {
    struct Count(usize);
    impl std::io::Write for Count {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0 += buf.len();
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let mut count = Count(0);
    // Writing to a counter cannot fail; an object that cannot be encoded counts as empty.
    let _ = serde_json::to_writer(&mut count, object);
    count.0
}

/// The message of a kind whose selected objects are more than the `room` left of the `max`
/// celgate keeps of every param kind together.
fn too_large(key: &ParamKey, bytes: usize, room: usize, max: usize) -> String {
    const MIB: f64 = 1024.0 * 1024.0;
    let bound = if room < max {
        format!(
            "the {:.1} MiB left (other param kinds keep {:.1} MiB) of the {:.0} MiB",
            room as f64 / MIB,
            (max - room) as f64 / MIB,
            max as f64 / MIB
        )
    } else {
        format!("the {:.0} MiB", max as f64 / MIB)
    };
    format!(
        "the {} objects ({}) the bindings' paramRefs select take {:.1} MiB, more than {bound} \
         celgate keeps of params (--param-max-mib): select fewer (a paramRef namespace, name or \
         narrower selector) or raise the limit",
        key.1,
        key.0,
        bytes as f64 / MIB,
    )
}

/// What the API server forbade celgate to do with a param kind's objects.
#[derive(Clone, Copy, Debug)]
enum Verb {
    List,
    Watch,
}

/// The message of a param kind whose objects celgate may not `verb`: the permission to grant,
/// to whom, and how.
fn forbidden(verb: Verb, resource: &ApiResource, subject: &str) -> String {
    let verb = match verb {
        Verb::List => "list",
        Verb::Watch => "watch",
    };
    let (plural, group) = (&resource.plural, &resource.group);
    let qualified = if group.is_empty() {
        plural.clone()
    } else {
        format!("{plural}.{group}")
    };
    format!(
        "celgate may not {verb} {qualified} (RBAC: grant list, watch on {plural:?} in API \
         group {group:?} to {subject}, e.g. with a ClusterRole labelled \
         {AGGREGATE_TO_PARAMS_LABEL}=true)"
    )
}

/// The message of a param kind celgate may not look up in discovery (which the default
/// ClusterRole `system:discovery` allows every authenticated user).
fn discovery_forbidden(key: &ParamKey, subject: &str) -> String {
    let (api_version, kind) = key;
    let path = if api_version.contains('/') {
        format!("/apis/{api_version}")
    } else {
        format!("/api/{api_version}")
    };
    format!(
        "celgate may not look up param kind {kind} in discovery of {api_version} (RBAC: grant \
         get on the non-resource URL {path:?} to {subject}, as the default ClusterRole \
         system:discovery does for every authenticated user)"
    )
}

/// Drops a param object's `managedFields` before it is cached: often the larger part of a
/// small object, and no policy needs them (a documented difference: in-tree, CEL can read
/// `params.metadata.managedFields`).
fn without_managed_fields(object: &mut DynamicObject) {
    object.metadata.managed_fields = None;
}

/// `(namespace, name)` of a param object; the namespace is empty for cluster-scoped kinds.
fn object_key(object: &DynamicObject, namespaced: bool) -> (&str, &str) {
    let meta = &object.metadata;
    let namespace = meta.namespace.as_deref().filter(|_| namespaced);
    let name = meta.name.as_deref().or(meta.generate_name.as_deref());
    (namespace.unwrap_or_default(), name.unwrap_or_default())
}

fn gvk(key: &ParamKey) -> GroupVersionKind {
    let (group, version) = key.0.split_once('/').unwrap_or(("", key.0.as_str()));
    GroupVersionKind::gvk(group, version, &key.1)
}

/// Whether the API server forbade a lookup or list (celgate's RBAC does not allow it).
fn is_forbidden(error: &kube::Error) -> bool {
    matches!(error, kube::Error::Api(status) if status.code == 403)
}

/// Whether a lookup failed because the API server definitely does not serve the kind.
fn is_not_found(error: &kube::Error) -> bool {
    match error {
        kube::Error::Api(status) => status.code == 404,
        kube::Error::Discovery(_) => true,
        _ => false,
    }
}

/// Whether a watch failed because the API server no longer serves the kind.
fn watch_not_found(error: &watcher::Error) -> bool {
    match error {
        watcher::Error::InitialListFailed(e)
        | watcher::Error::WatchStartFailed(e)
        | watcher::Error::WatchFailed(e) => matches!(e, kube::Error::Api(s) if s.code == 404),
        watcher::Error::WatchError(status) => status.code == 404,
        watcher::Error::NoResourceVersion => false,
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::expect_used, clippy::unwrap_used)]

    use super::*;
    use crate::controllers::policy_set;
    use crate::fixtures::{self, ApiServer, Reply, status};
    use celgate_engine::BoundPolicy;
    use celgate_kinds::convert;
    use celgate_snapshot::Snapshot;
    use serde_json::json;
    use std::time::Duration;
    use tokio::time::Instant;

    const KIND: (&str, &str) = ("example.com/v1", "Widget");

    #[test]
    fn params_are_cached_without_managed_fields() {
        let mut object: DynamicObject = serde_json::from_value(json!({
            "apiVersion": "example.com/v1", "kind": "Widget",
            "metadata": {"name": "w", "managedFields": [{"manager": "kubectl", "operation": "Apply"}]},
            "spec": {"max": 1},
        }))
        .unwrap();
        without_managed_fields(&mut object);
        let cached = serde_json::to_value(&object).unwrap();
        assert!(cached["metadata"].get("managedFields").is_none());
        assert_eq!(cached["spec"]["max"], 1);
    }
    const LOOKUP: &str = "/apis/example.com/v1";
    const WIDGETS: &str = "/apis/example.com/v1/widgets";

    /// A policy set whose policies use these param kinds, each bound with a paramRef
    /// selecting every object in every namespace.
    fn using(kinds: &[(&str, &str)]) -> PolicySet {
        let everything = ParamRef {
            selector: Some(LabelSelector::default()),
            ..ParamRef::default()
        };
        selecting(kinds, &[everything])
    }

    /// A policy set whose policies use these param kinds, each bound once per paramRef.
    fn selecting(kinds: &[(&str, &str)], refs: &[ParamRef]) -> PolicySet {
        PolicySet::new(
            kinds
                .iter()
                .enumerate()
                .map(|(i, kind)| BoundPolicy {
                    policy: policy_set::compile(&fixtures::policy(
                        &format!("p{i}"),
                        1,
                        "true",
                        Some(*kind),
                    )),
                    bindings: refs
                        .iter()
                        .enumerate()
                        .map(|(j, param_ref)| {
                            let mut binding = convert::validating_binding(&fixtures::binding(
                                &format!("b{i}-{j}"),
                                &format!("p{i}"),
                            ));
                            binding.param_ref = Some(Box::new(param_ref.clone()));
                            Arc::new(binding)
                        })
                        .collect(),
                })
                .collect(),
            Vec::new(),
        )
    }

    fn served() -> Value {
        json!({"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": "example.com/v1",
               "resources": [{"name": "widgets", "singularName": "widget", "namespaced": true,
                              "kind": "Widget", "verbs": ["get", "list", "watch"]}]})
    }

    fn widget(name: &str, max: u32) -> Value {
        json!({"apiVersion": "example.com/v1", "kind": "Widget",
               "metadata": {"name": name, "namespace": "params", "resourceVersion": format!("{max}")},
               "data": {"max": max}})
    }

    /// Answers the list of widgets with `items` and holds watches.
    fn serve(items: Vec<Value>) -> impl FnMut(&fixtures::Call) -> Reply {
        move |call| match (call.path.as_str(), call.is_watch()) {
            (WIDGETS, true) => Reply::Hold,
            (WIDGETS, false) => Reply::Json(200, fixtures::list(items.clone())),
            (path, _) => panic!("unexpected call to {path}"),
        }
    }

    /// How the store shows the kind: `absent`, `syncing`, `not served`, `forbidden`, or `ready` with its
    /// objects' `data.max` by name.
    fn shown(snapshot: &Snapshot) -> String {
        shown_of(snapshot, KIND)
    }

    /// How the store shows the param kind `kind`, as [`shown`] says.
    fn shown_of(snapshot: &Snapshot, kind: (&str, &str)) -> String {
        match snapshot.params.entry(kind.0, kind.1) {
            None => "absent".into(),
            Some(ParamKindEntry::Syncing) => "syncing".into(),
            Some(ParamKindEntry::NotServed) => "not served".into(),
            Some(ParamKindEntry::Forbidden(_)) => "forbidden".into(),
            Some(ParamKindEntry::TooLarge(_)) => "too large".into(),
            Some(ParamKindEntry::Ready(objects)) => {
                let all: Vec<String> = objects
                    .iter()
                    .map(|(_, name, v)| format!("{name}={}", v["data"]["max"]))
                    .collect();
                format!("ready {}", all.join(","))
            }
        }
    }

    /// Waits (on the paused clock) until the store shows `expected`, and returns what it shows.
    async fn shows(store: &SnapshotStore, expected: &str) -> String {
        let deadline = Instant::now() + Duration::from_secs(600);
        shown(&*store.wait_until(deadline, |s| shown(s) == expected).await)
    }

    fn start() -> (Arc<SnapshotStore>, ParamWatches, ApiServer) {
        let (client, api) = fixtures::pair();
        let store = SnapshotStore::new();
        let mut watches = ParamWatches::new(client, store.clone(), usize::MAX);
        watches.sync(&using(&[KIND]));
        (store, watches, api)
    }

    /// Bounds a scenario on the paused clock.
    async fn bounded(scenario: impl std::future::Future<Output = ()>) {
        tokio::time::timeout(Duration::from_secs(3600), scenario)
            .await
            .expect("the scenario did not finish");
    }

    #[tokio::test(start_paused = true)]
    async fn a_param_kind_appearing_late_goes_from_not_served_to_ready() {
        bounded(async {
            let (store, mut watches, mut api) = start();
            assert_eq!(shown(&store.load()), "syncing");

            let lookup = api.next().await;
            assert_eq!(lookup.path, LOOKUP);
            lookup.reply(404, status(404, "NotFound"));
            assert_eq!(shows(&store, "not served").await, "not served");

            // Looked up again after the first retry delay: served now.
            let answered = Instant::now();
            let lookup = api.next().await;
            assert_eq!(lookup.path, LOOKUP);
            assert_eq!(Instant::now() - answered, retry::LOOKUP.first);
            lookup.reply(200, served());
            let seen = api
                .serve_until(serve(vec![widget("w1", 3)]), shows(&store, "ready w1=3"))
                .await;
            assert_eq!(seen, "ready w1=3");

            // No policy uses the kind any more: its watch stops and its entry goes.
            watches.sync(&PolicySet::default());
            assert_eq!(shown(&store.load()), "absent");
        })
        .await;
    }

    #[tokio::test(start_paused = true)]
    async fn a_transient_lookup_error_keeps_the_last_known_state() {
        bounded(async {
            let (store, _watches, mut api) = start();
            // A server error says nothing about the kind: it stays syncing.
            let lookup = api.next().await;
            assert_eq!(lookup.path, LOOKUP);
            lookup.reply(503, status(503, "ServiceUnavailable"));
            let lookup = api.next().await;
            assert_eq!(shown(&store.load()), "syncing", "after a failed lookup");
            lookup.reply(200, served());
            api.serve_until(serve(vec![widget("w1", 3)]), shows(&store, "ready w1=3"))
                .await;
            api.serve_until_watching(serve(vec![]), WIDGETS).await;

            // The API server stops serving the kind: the watch fails with 404, and the kind
            // is looked up again. A failed lookup keeps the objects; a definite "not found"
            // marks it not served.
            api.end_watches(
                WIDGETS,
                &[json!({"type": "ERROR", "object": status(404, "NotFound")})],
            );
            let lookup = api.next().await;
            assert_eq!(lookup.path, LOOKUP);
            lookup.reply(500, status(500, "InternalError"));
            let lookup = api.next().await;
            assert_eq!(shown(&store.load()), "ready w1=3", "after a failed lookup");
            lookup.reply(404, status(404, "NotFound"));
            assert_eq!(shows(&store, "not served").await, "not served");
        })
        .await;
    }

    const SELF_SUBJECT_REVIEWS: &str = "/apis/authentication.k8s.io/v1/selfsubjectreviews";

    /// The forbidden message the store shows for the kind.
    fn forbidden_message(store: &SnapshotStore) -> String {
        match store.load().params.entry(KIND.0, KIND.1) {
            Some(ParamKindEntry::Forbidden(message)) => message.to_string(),
            other => panic!("not forbidden: {other:?}"),
        }
    }

    #[tokio::test(start_paused = true)]
    async fn a_kind_celgate_may_not_read_is_forbidden_with_the_permission_to_grant_until_it_may() {
        bounded(async {
            let (store, _watches, mut api) = start();
            let lookup = api.next().await;
            lookup.reply(403, status(403, "Forbidden"));
            // celgate asks once who it is, to name the subject to grant to.
            let review = api.next().await;
            assert_eq!(
                (review.method.as_str(), review.path.as_str()),
                ("POST", SELF_SUBJECT_REVIEWS)
            );
            review.reply(
                201,
                json!({"apiVersion": "authentication.k8s.io/v1", "kind": "SelfSubjectReview",
                       "metadata": {}, "status": {"userInfo": {
                           "username": "system:serviceaccount:celgate-system:celgate"}}}),
            );
            assert_eq!(shows(&store, "forbidden").await, "forbidden");
            assert_eq!(
                forbidden_message(&store),
                "celgate may not look up param kind Widget in discovery of example.com/v1 \
                 (RBAC: grant get on the non-resource URL \"/apis/example.com/v1\" to \
                 ServiceAccount celgate-system/celgate, as the default ClusterRole \
                 system:discovery does for every authenticated user)"
            );

            // Discovery answers, the list is forbidden: forbidden with what to grant (the
            // identity is not asked again).
            let lookup = api.next().await;
            lookup.reply(200, served());
            let list = api.next().await;
            assert_eq!((list.path.as_str(), list.is_watch()), (WIDGETS, false));
            list.reply(403, status(403, "Forbidden"));
            let message = "celgate may not list widgets.example.com (RBAC: grant list, \
                           watch on \"widgets\" in API group \"example.com\" to ServiceAccount \
                           celgate-system/celgate, e.g. with a ClusterRole labelled \
                           admission.celgate.io/aggregate-to-params=true)";
            let deadline = Instant::now() + Duration::from_secs(600);
            store
                .wait_until(deadline, |s| {
                    matches!(s.params.entry(KIND.0, KIND.1),
                        Some(ParamKindEntry::Forbidden(m)) if &**m == message)
                })
                .await;
            assert_eq!(forbidden_message(&store), message);
            // Requests do not wait for it: they see it forbidden, with the message.
            let kind = celgate_engine::model::ParamKind {
                api_version: KIND.0.into(),
                kind: KIND.1.into(),
            };
            let snapshot = store.load();
            assert!(matches!(
                celgate_engine::Params::kind(&*snapshot.params, &kind),
                celgate_engine::ParamKindState::Forbidden(m) if m == message
            ));

            // RBAC allows it now: the list succeeds and the kind is ready.
            let seen = api
                .serve_until(
                    |call| {
                        assert_ne!(call.path, SELF_SUBJECT_REVIEWS, "identity asked twice");
                        serve(vec![widget("w1", 3)])(call)
                    },
                    shows(&store, "ready w1=3"),
                )
                .await;
            assert_eq!(seen, "ready w1=3");
        })
        .await;
    }

    #[tokio::test(start_paused = true)]
    async fn a_forbidden_core_kind_names_the_core_group_and_an_unknown_identity_says_so() {
        bounded(async {
            let (client, mut api) = fixtures::pair();
            let store = SnapshotStore::new();
            let mut watches = ParamWatches::new(client, store.clone(), usize::MAX);
            watches.sync(&using(&[("v1", "ConfigMap")]));
            let lookup = api.next().await;
            assert_eq!(lookup.path, "/api/v1");
            lookup.reply(
                200,
                json!({"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": "v1",
                       "resources": [{"name": "configmaps", "singularName": "configmap",
                                      "namespaced": true, "kind": "ConfigMap",
                                      "verbs": ["get", "list", "watch"]}]}),
            );
            let list = api.next().await;
            assert_eq!(list.path, "/api/v1/configmaps");
            list.reply(403, status(403, "Forbidden"));
            // The API server cannot say who celgate is: the message says so instead.
            let review = api.next().await;
            assert_eq!(review.path, SELF_SUBJECT_REVIEWS);
            review.reply(500, status(500, "InternalError"));
            let deadline = Instant::now() + Duration::from_secs(600);
            let snapshot = store
                .wait_until(deadline, |s| {
                    matches!(
                        s.params.entry("v1", "ConfigMap"),
                        Some(ParamKindEntry::Forbidden(_))
                    )
                })
                .await;
            let Some(ParamKindEntry::Forbidden(message)) = snapshot.params.entry("v1", "ConfigMap")
            else {
                panic!("not forbidden");
            };
            assert_eq!(
                &**message,
                "celgate may not list configmaps (RBAC: grant list, watch on \"configmaps\" \
                 in API group \"\" to the user celgate runs as, e.g. with a ClusterRole \
                 labelled admission.celgate.io/aggregate-to-params=true)"
            );
        })
        .await;
    }

    #[tokio::test(start_paused = true)]
    async fn a_param_event_replaces_only_its_object_and_a_watch_error_keeps_them() {
        bounded(async {
            let (store, _watches, mut api) = start();
            api.next().await.reply(200, served());
            api.serve_until(
                serve(vec![widget("w1", 3), widget("w2", 4)]),
                shows(&store, "ready w1=3,w2=4"),
            )
            .await;
            api.serve_until_watching(serve(vec![]), WIDGETS).await;
            let object = |s: &Snapshot, name: &str| match s.params.entry(KIND.0, KIND.1) {
                Some(ParamKindEntry::Ready(objects)) => objects.get("params", name).cloned(),
                _ => None,
            };
            let before = store.load();

            api.end_watches(
                WIDGETS,
                &[json!({"type": "MODIFIED", "object": widget("w1", 5)})],
            );
            let seen = api
                .serve_until(serve(vec![]), shows(&store, "ready w1=5,w2=4"))
                .await;
            assert_eq!(seen, "ready w1=5,w2=4");
            let after = store.load();
            // w2 was not converted again: the same allocation is shared.
            assert!(Arc::ptr_eq(
                &object(&before, "w2").unwrap(),
                &object(&after, "w2").unwrap()
            ));
            assert_eq!(object(&after, "w1").unwrap()["apiVersion"], KIND.0);

            // A watch error other than "not found" keeps the objects while the watch retries.
            api.serve_until_watching(serve(vec![]), WIDGETS).await;
            api.end_watches(
                WIDGETS,
                &[json!({"type": "ERROR", "object": status(500, "InternalError")})],
            );
            api.serve_until_watching(serve(vec![]), WIDGETS).await;
            assert_eq!(shown(&store.load()), "ready w1=5,w2=4");
        })
        .await;
    }

    fn widget_in(namespace: &str, name: &str, max: u32, labels: Value) -> Value {
        json!({"apiVersion": "example.com/v1", "kind": "Widget",
               "metadata": {"name": name, "namespace": namespace, "labels": labels,
                            "resourceVersion": format!("{max}")},
               "data": {"max": max}})
    }

    #[tokio::test(start_paused = true)]
    async fn only_what_the_bindings_select_is_watched_and_an_object_two_select_is_kept_once() {
        bounded(async {
            let (client, mut api) = fixtures::pair();
            let store = SnapshotStore::new();
            let mut watches = ParamWatches::new(client, store.clone(), usize::MAX);
            let by_name = ParamRef {
                name: Some("w1".into()),
                namespace: Some("params".into()),
                ..ParamRef::default()
            };
            let by_labels = ParamRef {
                selector: Some(LabelSelector {
                    match_labels: [("team".to_string(), "a".to_string())].into(),
                    ..LabelSelector::default()
                }),
                ..ParamRef::default()
            };
            // Two policies share the kind; both bindings of each select the same: one watch each.
            watches.sync(&selecting(&[KIND, KIND], &[by_name, by_labels]));
            api.next().await.reply(200, served());
            let w1 = widget_in("params", "w1", 3, json!({"team": "a"}));
            let w2 = widget_in("other", "w2", 4, json!({"team": "a"}));
            let mut asked = BTreeSet::new();
            let seen = api
                .serve_until(
                    |call| {
                        asked.insert((
                            call.path.clone(),
                            call.is_watch(),
                            call.query.contains("fieldSelector=metadata.name%3Dw1"),
                            call.query.contains("labelSelector=team%3Da"),
                        ));
                        match (call.path.as_str(), call.is_watch()) {
                            (_, true) => Reply::Hold,
                            ("/apis/example.com/v1/namespaces/params/widgets", false) => {
                                Reply::Json(200, fixtures::list(vec![w1.clone()]))
                            }
                            (WIDGETS, false) => {
                                Reply::Json(200, fixtures::list(vec![w1.clone(), w2.clone()]))
                            }
                            (path, _) => panic!("unexpected call to {path}"),
                        }
                    },
                    shows(&store, "ready w2=4,w1=3"),
                )
                .await;
            // Ordered by namespace: other/w2, then params/w1.
            assert_eq!(seen, "ready w2=4,w1=3");
            let lists: Vec<_> = asked
                .iter()
                .filter(|(_, watch, _, _)| !watch)
                .cloned()
                .collect();
            assert_eq!(
                lists,
                [
                    (
                        "/apis/example.com/v1/namespaces/params/widgets".to_string(),
                        false,
                        true,
                        false
                    ),
                    (WIDGETS.to_string(), false, false, true),
                ]
            );
            // w1 no longer has the label: the selector's watch drops it, the name's keeps it.
            api.serve_until_watching(|_| Reply::Hold, WIDGETS).await;
            api.end_watches(WIDGETS, &[json!({"type": "DELETED", "object": w1})]);
            let seen = api
                .serve_until(
                    |call| match call.is_watch() {
                        true => Reply::Hold,
                        false => Reply::Json(200, fixtures::list(vec![w2.clone()])),
                    },
                    async {
                        tokio::time::sleep(Duration::from_secs(5)).await;
                        shown(&store.load())
                    },
                )
                .await;
            assert_eq!(seen, "ready w2=4,w1=3");
        })
        .await;
    }

    #[tokio::test(start_paused = true)]
    async fn past_the_bound_a_kind_is_too_large_with_its_objects_dropped_until_it_fits_again() {
        bounded(async {
            let (client, mut api) = fixtures::pair();
            let store = SnapshotStore::new();
            let big = |name: &str| {
                let mut w = widget(name, 1);
                w["data"]["pad"] = "x".repeat(600 * 1024).into();
                w
            };
            // Room for one big widget, not two.
            let mut watches = ParamWatches::new(client, store.clone(), 1024 * 1024);
            watches.sync(&using(&[KIND]));
            api.next().await.reply(200, served());
            api.serve_until(
                serve(vec![big("w1"), big("w2")]),
                shows(&store, "too large"),
            )
            .await;
            let message = match store.load().params.entry(KIND.0, KIND.1) {
                Some(ParamKindEntry::TooLarge(m)) => m.to_string(),
                other => panic!("{other:?}"),
            };
            assert_eq!(
                message,
                "the Widget objects (example.com/v1) the bindings' paramRefs select take 1.2 MiB, \
                 more than the 1 MiB celgate keeps of params (--param-max-mib): select \
                 fewer (a paramRef namespace, name or narrower selector) or raise the limit"
            );
            let kind = celgate_engine::model::ParamKind {
                api_version: KIND.0.into(),
                kind: KIND.1.into(),
            };
            assert!(matches!(
                celgate_engine::Params::kind(&*store.load().params, &kind),
                celgate_engine::ParamKindState::TooLarge(m) if m == message
            ));
            // One is deleted: the rest fits, and is looked up and listed afresh.
            api.serve_until_watching(serve(vec![]), WIDGETS).await;
            api.end_watches(WIDGETS, &[json!({"type": "DELETED", "object": big("w2")})]);
            let mut relist = serve(vec![widget("w1", 1)]);
            let seen = api
                .serve_until(
                    |call| match call.path.as_str() {
                        LOOKUP => Reply::Json(200, served()),
                        _ => relist(call),
                    },
                    shows(&store, "ready w1=1"),
                )
                .await;
            assert_eq!(seen, "ready w1=1");
        })
        .await;
    }

    #[tokio::test(start_paused = true)]
    async fn the_bound_is_shared_by_every_kind_and_a_kind_past_it_fits_once_another_shrinks() {
        const GADGET: (&str, &str) = ("example.com/v1", "Gadget");
        const GADGETS: &str = "/apis/example.com/v1/gadgets";
        bounded(async {
            let (client, mut api) = fixtures::pair();
            let store = SnapshotStore::new();
            let big = |kind: &str, name: &str| {
                let mut object = widget(name, 1);
                object["kind"] = kind.into();
                object["data"]["pad"] = "x".repeat(600 * 1024).into();
                object
            };
            let answer = |widgets: Vec<Value>, gadgets: Vec<Value>| {
                move |call: &fixtures::Call| match (call.path.as_str(), call.is_watch()) {
                    (LOOKUP, _) => Reply::Json(
                        200,
                        json!({"kind": "APIResourceList", "apiVersion": "v1",
                               "groupVersion": "example.com/v1", "resources": [
                            {"name": "widgets", "singularName": "widget", "namespaced": true,
                             "kind": "Widget", "verbs": ["get", "list", "watch"]},
                            {"name": "gadgets", "singularName": "gadget", "namespaced": true,
                             "kind": "Gadget", "verbs": ["get", "list", "watch"]}]}),
                    ),
                    (WIDGETS | GADGETS, true) => Reply::Hold,
                    (WIDGETS, false) => Reply::Json(200, fixtures::list(widgets.clone())),
                    (GADGETS, false) => Reply::Json(200, fixtures::list(gadgets.clone())),
                    (path, _) => panic!("unexpected call to {path}"),
                }
            };
            let gadget = |expected: &'static str| {
                let store = store.clone();
                async move {
                    let deadline = Instant::now() + Duration::from_secs(600);
                    (store.wait_until(deadline, |s| shown_of(s, GADGET) == expected)).await;
                }
            };
            // Room for one big object, of whichever kind: each kind alone fits.
            let mut watches = ParamWatches::new(client, store.clone(), 1024 * 1024);
            watches.sync(&using(&[KIND]));
            api.serve_until(
                answer(vec![big("Widget", "w1")], vec![]),
                shows(&store, "ready w1=1"),
            )
            .await;

            // A second kind whose selection fits the bound alone, not beside the first's.
            watches.sync(&using(&[KIND, GADGET]));
            api.serve_until(
                answer(vec![big("Widget", "w1")], vec![big("Gadget", "g1")]),
                gadget("too large"),
            )
            .await;
            let message = match store.load().params.entry(GADGET.0, GADGET.1) {
                Some(ParamKindEntry::TooLarge(m)) => m.to_string(),
                other => panic!("{other:?}"),
            };
            assert_eq!(
                message,
                "the Gadget objects (example.com/v1) the bindings' paramRefs select take 0.6 MiB, \
                 more than the 0.4 MiB left (other param kinds keep 0.6 MiB) of the 1 MiB \
                 celgate keeps of params (--param-max-mib): select fewer (a paramRef namespace, \
                 name or narrower selector) or raise the limit"
            );
            assert_eq!(
                shown(&store.load()),
                "ready w1=1",
                "the first kind keeps its params"
            );

            // The Widget is deleted: the Gadget fits now, and is listed afresh at once (not
            // when its watch next restarts).
            let deleted = Instant::now();
            api.end_watches(
                WIDGETS,
                &[json!({"type": "DELETED", "object": big("Widget", "w1")})],
            );
            api.serve_until(
                answer(vec![], vec![big("Gadget", "g1")]),
                gadget("ready g1=1"),
            )
            .await;
            assert!(
                deleted.elapsed() < Duration::from_secs(5),
                "{:?}",
                deleted.elapsed()
            );
            assert_eq!(shown(&store.load()), "ready ");
        })
        .await;
    }

    #[test]
    fn a_selector_is_written_as_the_api_server_reads_it() {
        use celgate_engine::model::LabelRequirement;
        let requirement = |key: &str, operator: &str, values: &[&str]| LabelRequirement {
            key: key.into(),
            operator: operator.into(),
            values: values.iter().map(|v| v.to_string()).collect(),
        };
        let selector = LabelSelector {
            match_labels: [("app".to_string(), "web".to_string())].into(),
            match_expressions: vec![
                requirement("tier", "In", &["a", "b"]),
                requirement("env", "NotIn", &["dev"]),
                requirement("owned", "Exists", &[]),
                requirement("legacy", "DoesNotExist", &[]),
            ],
        };
        assert_eq!(
            label_selector(&selector).as_deref(),
            Some("app=web,tier in (a,b),env notin (dev),owned,!legacy")
        );
        let odd = LabelSelector {
            match_expressions: vec![requirement("x", "Near", &[])],
            ..LabelSelector::default()
        };
        assert_eq!(label_selector(&odd), None);
    }
}
