//! The cluster's OpenAPI v3 schemas, fetched only for the kinds type checking needs.
//!
//! `/openapi/v3` lists one document per group version (`api/v1`, `apis/<group>/<version>`), each
//! at a `serverRelativeURL` carrying `?hash=` of its content. A document is fetched when a kind
//! of its group version is first needed, parsed once, and kept under that URL: a CRD whose
//! schema changed is listed under a new hash and fetched again, an unchanged one never is. The
//! index itself is read on every fetch (one small request), as upstream's type checking reads
//! it, so a changed CRD is seen as soon as the API server serves its new schema.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::{Arc, Mutex, PoisonError};

use celgate_engine::schema::{Gvk, Schema, SchemaError, schemas_from_openapi};

use celgate_kinds::served::ServedResources;
use kube::Client;
use serde::Deserialize;
use thiserror::Error;
use tokio::sync::OnceCell;

/// The OpenAPI v3 index.
const INDEX: &str = "/openapi/v3";

/// Why schemas could not be fetched.
#[derive(Debug, Error)]
pub enum SchemaFetchError {
    /// The API server answered with an error status.
    #[error(
        "cannot fetch the OpenAPI v3 schemas of {what}: the API server answered HTTP {status}: {message}"
    )]
    Status {
        /// `the index /openapi/v3` or `group version <g>/<v>`.
        what: String,
        /// The HTTP status code.
        status: u16,
        /// The API server's message.
        message: String,
    },
    /// The API server could not be asked.
    #[error("cannot fetch the OpenAPI v3 schemas of {what}: {message}")]
    Request {
        /// `the index /openapi/v3` or `group version <g>/<v>`.
        what: String,
        /// What went wrong.
        message: String,
    },
    /// The answer is not the JSON document expected.
    #[error("the OpenAPI v3 document of {what} is not valid JSON: {message}")]
    Json {
        /// `the index /openapi/v3` or `group version <g>/<v>`.
        what: String,
        /// The parser's message.
        message: String,
    },
    /// The document's schemas cannot be read.
    #[error(
        "the OpenAPI v3 document of group version {group_version} has invalid schemas: {source}"
    )]
    Schema {
        /// `<group>/<version>` (`v1` for the core group).
        group_version: String,
        /// What is wrong with them.
        #[source]
        source: SchemaError,
    },
}

impl SchemaFetchError {
    fn from_kube(what: String, error: kube::Error) -> Self {
        match error {
            kube::Error::Api(status) => Self::Status {
                what,
                status: status.code,
                message: status.message,
            },
            other => Self::Request {
                what,
                message: other.to_string(),
            },
        }
    }

    /// Whether the API server said the document does not exist.
    fn is_not_found(&self) -> bool {
        matches!(self, Self::Status { status: 404, .. })
    }
}

/// `v1` for the core group, `<group>/<version>` otherwise.
fn group_version(group: &str, version: &str) -> String {
    if group.is_empty() {
        version.to_string()
    } else {
        format!("{group}/{version}")
    }
}

/// The index path of a group version's document.
fn index_path(group: &str, version: &str) -> String {
    if group.is_empty() {
        format!("api/{version}")
    } else {
        format!("apis/{group}/{version}")
    }
}

#[derive(Deserialize)]
struct Index {
    #[serde(default)]
    paths: HashMap<String, IndexEntry>,
}

#[derive(Deserialize)]
struct IndexEntry {
    #[serde(rename = "serverRelativeURL")]
    server_relative_url: String,
}

/// The schemas of one group version's document, by kind.
type Document = HashMap<Gvk, Arc<Schema>>;

/// What [`SchemaCache::fetch`] found.
#[derive(Debug, Default)]
pub struct Fetched {
    /// The schema of every asked kind the cluster has one for.
    pub schemas: HashMap<Gvk, Arc<Schema>>,
    /// Group versions whose document could not be fetched (other than "not found", which
    /// means the kinds have no schema), in group-version order.
    pub failures: Vec<SchemaFetchError>,
}

/// Parsed OpenAPI v3 documents by URL (with its hash), shared by every type check.
pub struct SchemaCache {
    client: Client,
    /// URL → the document, fetched at most once at a time.
    documents: Mutex<HashMap<String, Arc<OnceCell<Arc<Document>>>>>,
}

impl SchemaCache {
    /// An empty cache reading from the cluster `client` talks to.
    pub fn new(client: Client) -> Self {
        Self {
            client,
            documents: Mutex::new(HashMap::new()),
        }
    }

    /// The schemas of `kinds`: reads the index, then each needed group version's document
    /// unless it is cached under the same URL. A kind is looked up in its own group version's
    /// document and in those of the resources `served` reports it for (a subresource's kind,
    /// such as `autoscaling/v1` Scale, is published with the resource that serves it, e.g.
    /// in `apis/apps/v1`). A group version the index does not list, or whose document is not
    /// found, has no schemas (upstream skips such kinds silently). Only a failure to read the
    /// index is an error; other failures are listed in the result.
    pub async fn fetch<'a>(
        &self,
        kinds: impl IntoIterator<Item = &'a Gvk>,
        served: &ServedResources,
    ) -> Result<Fetched, SchemaFetchError> {
        let mut wanted: BTreeMap<(String, String), Vec<&Gvk>> = BTreeMap::new();
        for gvk in kinds {
            let serving = served.resources().iter().filter(|r| {
                r.kind.group == gvk.group
                    && r.kind.version == gvk.version
                    && r.kind.kind == gvk.kind
            });
            let mut at: Vec<(String, String)> = vec![(gvk.group.clone(), gvk.version.clone())];
            for r in serving {
                let gv = (r.group.clone(), r.version.clone());
                if !at.contains(&gv) {
                    at.push(gv);
                }
            }
            for gv in at {
                wanted.entry(gv).or_default().push(gvk);
            }
        }
        let mut fetched = Fetched::default();
        if wanted.is_empty() {
            return Ok(fetched);
        }
        let index = self.index().await?;
        let documents = futures::future::join_all(wanted.keys().map(|(group, version)| {
            let url = index.get(&index_path(group, version)).cloned();
            async move {
                match url {
                    Some(url) => self.document(&url, group, version).await,
                    None => Ok(None),
                }
            }
        }))
        .await;
        for (kinds, document) in wanted.values().zip(documents) {
            match document {
                Ok(Some(document)) => {
                    for gvk in kinds {
                        if let Some(schema) = document.get(*gvk) {
                            fetched
                                .schemas
                                .entry((*gvk).clone())
                                .or_insert_with(|| schema.clone());
                        }
                    }
                }
                Ok(None) => {}
                Err(e) => fetched.failures.push(e),
            }
        }
        Ok(fetched)
    }

    /// The index: document path → URL. Forgets cached documents it no longer lists.
    async fn index(&self) -> Result<HashMap<String, String>, SchemaFetchError> {
        let what = || format!("the index {INDEX}");
        let text = self
            .get(INDEX)
            .await
            .map_err(|e| SchemaFetchError::from_kube(what(), e))?;
        let index: Index = serde_json::from_str(&text).map_err(|e| SchemaFetchError::Json {
            what: what(),
            message: e.to_string(),
        })?;
        let urls: HashMap<String, String> = index
            .paths
            .into_iter()
            .map(|(path, entry)| (path, entry.server_relative_url))
            .collect();
        let listed: HashSet<&String> = urls.values().collect();
        self.documents
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .retain(|url, _| listed.contains(url));
        Ok(urls)
    }

    /// The schemas of the document at `url` (of `group`/`version`), from the cache or fetched;
    /// `None` if the API server has no such document.
    async fn document(
        &self,
        url: &str,
        group: &str,
        version: &str,
    ) -> Result<Option<Arc<Document>>, SchemaFetchError> {
        let cell = self
            .documents
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .entry(url.to_string())
            .or_default()
            .clone();
        let result = cell
            .get_or_try_init(|| async {
                let gv = group_version(group, version);
                let text = self
                    .get(url)
                    .await
                    .map_err(|e| SchemaFetchError::from_kube(format!("group version {gv}"), e))?;
                // A core or apps document is a megabyte or more: parse it off the runtime.
                tokio::task::spawn_blocking(move || parse_document(&text, gv))
                    .await
                    .unwrap_or_else(|e| {
                        Err(SchemaFetchError::Request {
                            what: format!("group version {}", group_version(group, version)),
                            message: format!("parsing its document stopped: {e}"),
                        })
                    })
            })
            .await;
        match result {
            Ok(document) => Ok(Some(document.clone())),
            Err(e) if e.is_not_found() => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// GET `path` as text.
    async fn get(&self, path: &str) -> Result<String, kube::Error> {
        let request = http::Request::get(path)
            .header(http::header::ACCEPT, "application/json")
            .body(Vec::new())
            .map_err(kube::Error::HttpError)?;
        self.client.request_text(request).await
    }
}

/// Parses one group version's document into its kinds' schemas.
fn parse_document(text: &str, group_version: String) -> Result<Arc<Document>, SchemaFetchError> {
    let value: serde_json::Value =
        serde_json::from_str(text).map_err(|e| SchemaFetchError::Json {
            what: format!("group version {group_version}"),
            message: e.to_string(),
        })?;
    let schemas = schemas_from_openapi(&value).map_err(|source| SchemaFetchError::Schema {
        group_version,
        source,
    })?;
    Ok(Arc::new(schemas.into_iter().collect()))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::expect_used, clippy::unwrap_used)]

    use std::time::Duration;

    use super::*;
    use crate::fixtures::{self, ApiServer, Call, Reply, status};
    use serde_json::{Value, json};

    /// An index listing `docs` as (path, hash), plus the paths that hold no group version.
    fn index(docs: &[(&str, &str)]) -> Value {
        let mut paths = serde_json::Map::new();
        for path in ["api", "apis", "apis/apps", "version"] {
            paths.insert(
                path.into(),
                json!({"serverRelativeURL": format!("/openapi/v3/{path}?hash=0")}),
            );
        }
        for (path, hash) in docs {
            paths.insert(
                (*path).into(),
                json!({"serverRelativeURL": format!("/openapi/v3/{path}?hash={hash}")}),
            );
        }
        json!({ "paths": paths })
    }

    /// A group version's document with one kind whose `spec` has `fields` (integers).
    fn document(group: &str, version: &str, kind: &str, fields: &[&str]) -> Value {
        let properties: serde_json::Map<String, Value> = fields
            .iter()
            .map(|f| {
                (
                    (*f).to_string(),
                    json!({"type": "integer", "format": "int32"}),
                )
            })
            .collect();
        let name = format!(
            "io.k8s.api.{}.{version}.{kind}",
            if group.is_empty() { "core" } else { group }
        );
        json!({"openapi": "3.0.0", "info": {"title": "Kubernetes", "version": "v1.36.3"}, "paths": {},
        "components": {"schemas": {name: {
            "type": "object",
            "properties": {"spec": {"type": "object", "properties": properties}},
            "x-kubernetes-group-version-kind": [{"group": group, "version": version, "kind": kind}],
        }}}})
    }

    /// Answers the index and the documents given by `path?query`, recording every call.
    struct Script {
        index: (u16, Value),
        documents: HashMap<String, (u16, Value)>,
        calls: Vec<String>,
    }

    impl Script {
        fn answer(&mut self, call: &Call) -> Reply {
            let at = if call.query.is_empty() {
                call.path.clone()
            } else {
                format!("{}?{}", call.path, call.query)
            };
            self.calls.push(at.clone());
            let (code, body) = if at == INDEX {
                self.index.clone()
            } else {
                self.documents
                    .get(&at)
                    .cloned()
                    .unwrap_or_else(|| panic!("unexpected call to {at}"))
            };
            Reply::Json(code, body)
        }

        /// The calls since the last look, sorted (documents are fetched concurrently).
        fn take_calls(&mut self) -> Vec<String> {
            let mut calls = std::mem::take(&mut self.calls);
            calls.sort();
            calls
        }
    }

    fn deployment() -> Gvk {
        Gvk::new("apps", "v1", "Deployment")
    }

    fn pod() -> Gvk {
        Gvk::new("", "v1", "Pod")
    }

    fn start() -> (SchemaCache, ApiServer) {
        let (client, api) = fixtures::pair();
        (SchemaCache::new(client), api)
    }

    async fn fetch(
        cache: &SchemaCache,
        api: &mut ApiServer,
        script: &mut Script,
        kinds: &[Gvk],
    ) -> Result<Fetched, SchemaFetchError> {
        let served = ServedResources::default();
        let fetching = tokio::time::timeout(Duration::from_secs(60), cache.fetch(kinds, &served));
        api.serve_until(|c| script.answer(c), fetching)
            .await
            .expect("the fetch did not finish")
    }

    fn has_spec_field(fetched: &Fetched, gvk: &Gvk, field: &str) -> bool {
        fetched.schemas[gvk]
            .property("spec")
            .and_then(|spec| spec.property(field))
            .is_some()
    }

    #[tokio::test]
    async fn a_subresource_kind_is_found_in_the_document_of_the_resource_serving_it() {
        // kube-apiserver publishes autoscaling/v1 Scale with the resources whose `scale`
        // subresource returns it (apps/v1 here), not in autoscaling/v1's document.
        let discovery: kube::core::discovery::v2::APIGroupDiscoveryList = serde_json::from_value(json!({
            "kind": "APIGroupDiscoveryList", "apiVersion": "apidiscovery.k8s.io/v2", "items": [
            {"metadata": {"name": "apps"}, "versions": [{"version": "v1", "freshness": "Current", "resources": [
                {"resource": "deployments", "responseKind": {"group": "", "version": "", "kind": "Deployment"},
                 "scope": "Namespaced", "verbs": ["get"], "subresources": [
                    {"subresource": "scale", "responseKind": {"group": "autoscaling", "version": "v1", "kind": "Scale"}, "verbs": ["get"]}]}]}]}]}))
        .unwrap();
        let served = ServedResources::from_discovery([&discovery]);
        let mut apps = document("apps", "v1", "Deployment", &["replicas"]);
        apps["components"]["schemas"]["io.k8s.api.autoscaling.v1.Scale"] = document(
            "autoscaling",
            "v1",
            "Scale",
            &["replicas"],
        )["components"]["schemas"]["io.k8s.api.autoscaling.v1.Scale"]
            .clone();
        let mut script = Script {
            index: (
                200,
                index(&[("apis/apps/v1", "a1"), ("apis/autoscaling/v1", "s1")]),
            ),
            documents: HashMap::from([
                ("/openapi/v3/apis/apps/v1?hash=a1".into(), (200, apps)),
                (
                    "/openapi/v3/apis/autoscaling/v1?hash=s1".into(),
                    (
                        200,
                        document("autoscaling", "v1", "HorizontalPodAutoscaler", &["x"]),
                    ),
                ),
            ]),
            calls: Vec::new(),
        };
        let scale = Gvk::new("autoscaling", "v1", "Scale");
        let (cache, mut api) = start();
        let fetching =
            tokio::time::timeout(Duration::from_secs(60), cache.fetch([&scale], &served));
        let fetched = api
            .serve_until(|c| script.answer(c), fetching)
            .await
            .expect("the fetch did not finish")
            .unwrap();
        assert!(has_spec_field(&fetched, &scale, "replicas"));

        // Without knowing what serves it, only its own group version is read: no schema.
        let (cache, mut api) = start();
        let fetched = fetch(&cache, &mut api, &mut script, std::slice::from_ref(&scale))
            .await
            .unwrap();
        assert!(fetched.schemas.is_empty());
    }

    #[tokio::test]
    async fn a_document_is_fetched_once_per_hash_and_only_when_needed() {
        let (cache, mut api) = start();
        let mut script = Script {
            index: (
                200,
                index(&[
                    ("api/v1", "c1"),
                    ("apis/apps/v1", "a1"),
                    ("apis/batch/v1", "b1"),
                ]),
            ),
            documents: HashMap::from([
                (
                    "/openapi/v3/api/v1?hash=c1".into(),
                    (200, document("", "v1", "Pod", &["x"])),
                ),
                (
                    "/openapi/v3/apis/apps/v1?hash=a1".into(),
                    (200, document("apps", "v1", "Deployment", &["replicas"])),
                ),
                (
                    "/openapi/v3/apis/apps/v1?hash=a2".into(),
                    (
                        200,
                        document("apps", "v1", "Deployment", &["replicas", "paused"]),
                    ),
                ),
            ]),
            calls: Vec::new(),
        };
        let fetched = fetch(&cache, &mut api, &mut script, &[deployment(), pod()])
            .await
            .unwrap();
        assert_eq!(
            script.take_calls(),
            [
                "/openapi/v3",
                "/openapi/v3/api/v1?hash=c1",
                "/openapi/v3/apis/apps/v1?hash=a1"
            ],
            "batch/v1 is not needed"
        );
        assert!(has_spec_field(&fetched, &deployment(), "replicas"));
        assert!(has_spec_field(&fetched, &pod(), "x"));
        assert!(fetched.failures.is_empty());

        // The same hash: only the index is read.
        let again = fetch(&cache, &mut api, &mut script, &[deployment()])
            .await
            .unwrap();
        assert_eq!(script.take_calls(), ["/openapi/v3"]);
        assert!(!has_spec_field(&again, &deployment(), "paused"));

        // A changed document (a CRD's new schema) comes under a new hash and is fetched.
        script.index = (200, index(&[("api/v1", "c1"), ("apis/apps/v1", "a2")]));
        let changed = fetch(&cache, &mut api, &mut script, &[deployment()])
            .await
            .unwrap();
        assert_eq!(
            script.take_calls(),
            ["/openapi/v3", "/openapi/v3/apis/apps/v1?hash=a2"]
        );
        assert!(has_spec_field(&changed, &deployment(), "paused"));

        // No kinds, no requests.
        let none = fetch(&cache, &mut api, &mut script, &[]).await.unwrap();
        assert!(script.take_calls().is_empty());
        assert!(none.schemas.is_empty());
    }

    #[tokio::test]
    async fn a_missing_document_means_no_schema_and_a_failing_one_is_reported() {
        let (cache, mut api) = start();
        let mut script = Script {
            index: (200, index(&[("api/v1", "c1"), ("apis/apps/v1", "a1")])),
            documents: HashMap::from([
                (
                    "/openapi/v3/api/v1?hash=c1".into(),
                    (404, status(404, "NotFound")),
                ),
                (
                    "/openapi/v3/apis/apps/v1?hash=a1".into(),
                    (500, status(500, "InternalError")),
                ),
            ]),
            calls: Vec::new(),
        };
        let job = Gvk::new("batch", "v1", "Job");
        let fetched = fetch(&cache, &mut api, &mut script, &[pod(), deployment(), job])
            .await
            .unwrap();
        assert!(fetched.schemas.is_empty());
        let [failure] = fetched.failures.as_slice() else {
            panic!("one failure expected: {:?}", fetched.failures);
        };
        assert!(
            matches!(failure, SchemaFetchError::Status { what, status: 500, .. } if what == "group version apps/v1"),
            "{failure:?}"
        );
        let message = failure.to_string();
        assert!(
            message.contains("apps/v1") && message.contains("HTTP 500"),
            "{message}"
        );
        assert_eq!(
            script.take_calls(),
            [
                "/openapi/v3",
                "/openapi/v3/api/v1?hash=c1",
                "/openapi/v3/apis/apps/v1?hash=a1"
            ],
            "batch/v1 is not in the index, so it has no schema and is not asked for"
        );

        // A failure is not cached: the next fetch asks again.
        script.documents.insert(
            "/openapi/v3/apis/apps/v1?hash=a1".into(),
            (200, document("apps", "v1", "Deployment", &["replicas"])),
        );
        let fetched = fetch(&cache, &mut api, &mut script, &[deployment()])
            .await
            .unwrap();
        assert!(has_spec_field(&fetched, &deployment(), "replicas"));
        assert_eq!(
            script.take_calls(),
            ["/openapi/v3", "/openapi/v3/apis/apps/v1?hash=a1"]
        );
    }

    #[tokio::test]
    async fn an_unreadable_index_fails_the_fetch() {
        let (cache, mut api) = start();
        let mut script = Script {
            index: (503, status(503, "ServiceUnavailable")),
            documents: HashMap::new(),
            calls: Vec::new(),
        };
        let error = fetch(&cache, &mut api, &mut script, &[pod()])
            .await
            .unwrap_err();
        assert!(
            matches!(&error, SchemaFetchError::Status { status: 503, .. }),
            "{error:?}"
        );
        assert_eq!(
            error.to_string(),
            "cannot fetch the OpenAPI v3 schemas of the index /openapi/v3: the API server answered HTTP 503: mocked ServiceUnavailable"
        );
    }
}
