//! What the type checker knows of the cluster for one policy: the served resources of one
//! discovery and the prefetched schemas of the kinds the policy needs. The checker is
//! synchronous (it runs on a blocking thread), so everything it may ask is fetched before.

use std::collections::HashMap;
use std::sync::Arc;

use celgate_engine::model::{MatchResources, ParamKind};
use celgate_engine::schema::{Gvk, Schema};
use celgate_engine::typecheck::{ApiResource, TypeSource, kinds_to_check};
use thiserror::Error;
use tracing::warn;

use crate::cluster::discovery::{Discovery, DiscoveryError};
use crate::cluster::schemas::{SchemaCache, SchemaFetchError};
use celgate_kinds::served::ServedResources;

/// Why the types of a policy could not be gathered.
#[derive(Debug, Error)]
pub enum TypesError {
    /// The served resources are not known.
    #[error(transparent)]
    Discovery(#[from] DiscoveryError),
    /// The OpenAPI index could not be read.
    #[error(transparent)]
    Schemas(#[from] SchemaFetchError),
}

/// Served resources and prefetched schemas; answers the type checker without IO.
#[derive(Debug, Default)]
pub struct ClusterTypes {
    served: Arc<ServedResources>,
    schemas: HashMap<Gvk, Arc<Schema>>,
    failures: Vec<SchemaFetchError>,
}

impl ClusterTypes {
    /// The served resources alone, with no schemas: enough to select the kinds to check.
    pub fn served(served: Arc<ServedResources>) -> Self {
        Self {
            served,
            ..Self::default()
        }
    }

    /// The served resources and the schemas of `kinds` (the kinds a policy's type check
    /// selected, and its paramKind's kind). A kind without a schema (not in the cluster's
    /// OpenAPI) is absent, as upstream skips it; a group version whose document could not be
    /// fetched is listed in [`ClusterTypes::failures`]; only an unreadable OpenAPI index
    /// fails the whole prefetch.
    pub async fn prefetch<'a>(
        served: Arc<ServedResources>,
        cache: &SchemaCache,
        kinds: impl IntoIterator<Item = &'a Gvk>,
    ) -> Result<Self, SchemaFetchError> {
        let fetched = cache.fetch(kinds, &served).await?;
        Ok(Self {
            served,
            schemas: fetched.schemas,
            failures: fetched.failures,
        })
    }

    /// Everything type checking a policy with `match_constraints` and `param_kind` needs:
    /// the served resources (discovered again first, once, when a resource its rules name
    /// exactly is not served, as upstream resets its RESTMapper once per policy), and the
    /// schemas of the kinds [`kinds_to_check`] selects and of the paramKind's kind.
    pub async fn for_policy(
        discovery: &Discovery,
        cache: &SchemaCache,
        match_constraints: Option<&MatchResources>,
        param_kind: Option<&ParamKind>,
    ) -> Result<Self, TypesError> {
        let mut served = discovery.ready().await?;
        if names_unserved(match_constraints, &served) {
            match discovery.refresh().await {
                Ok(fresh) => served = fresh,
                Err(e) => {
                    warn!(error = %e, "cannot discover again for a resource not served; checking with the last known resources");
                }
            }
        }
        let selection = kinds_to_check(match_constraints, &Self::served(served.clone()));
        let param = param_kind.map(|p| Gvk::from_api_version(&p.api_version, &p.kind));
        Ok(Self::prefetch(served, cache, selection.all().chain(param.as_ref())).await?)
    }

    /// Group versions whose schemas could not be fetched (their kinds have none here).
    pub fn failures(&self) -> &[SchemaFetchError] {
        &self.failures
    }
}

/// Whether a rule names a group, version and resource exactly (no wildcard, no subresource)
/// that `served` has no kind for: where upstream's RESTMapper lookup fails.
fn names_unserved(match_constraints: Option<&MatchResources>, served: &ServedResources) -> bool {
    let rules = match_constraints.map_or(&[][..], |m| &m.resource_rules[..]);
    let exact = |v: &String| !v.contains(['*', '/']);
    rules.iter().any(|rule| {
        rule.api_groups.iter().all(exact)
            && rule.api_versions.iter().all(exact)
            && rule.api_groups.iter().any(|group| {
                rule.api_versions.iter().any(|version| {
                    rule.resources
                        .iter()
                        .filter(|r| exact(r))
                        .any(|resource| served.kinds_for(group, version, resource).is_empty())
                })
            })
    })
}

impl TypeSource for ClusterTypes {
    fn kinds_for(&self, group: &str, version: &str, resource: &str) -> Vec<Gvk> {
        self.served.checker_kinds_for(group, version, resource)
    }

    fn resources(&self) -> Vec<ApiResource> {
        self.served.checker_resources()
    }

    fn schema(&self, gvk: &Gvk) -> Option<Arc<Schema>> {
        self.schemas.get(gvk).cloned()
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::expect_used, clippy::unwrap_used)]

    use std::time::Duration;

    use super::*;
    use crate::fixtures::{self, Call, Reply};
    use celgate_engine::model::{ResourceRule, ValidatingPolicySpec, Validation};
    use celgate_engine::schema::schemas_from_openapi;
    use celgate_engine::typecheck::check_validating;
    use kube::core::discovery::v2::APIGroupDiscoveryList;
    use serde_json::{Value, json};

    /// The committed snapshot of Kubernetes 1.36's built-in kinds, as the offline checker
    /// reads it: its discovery answers and every group version's schemas.
    fn builtin() -> ClusterTypes {
        let path = concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../kinds/schemas/builtin-1.36.json"
        );
        let text = std::fs::read_to_string(path).unwrap();
        let snapshot: Value = serde_json::from_str(&text).unwrap();
        let lists: Vec<APIGroupDiscoveryList> =
            serde_json::from_value(snapshot["discovery"].clone()).unwrap();
        let mut schemas = HashMap::new();
        for document in snapshot["openapi"].as_object().unwrap().values() {
            schemas.extend(schemas_from_openapi(document).unwrap());
        }
        ClusterTypes {
            served: Arc::new(ServedResources::from_discovery(&lists)),
            schemas,
            failures: Vec::new(),
        }
    }

    fn rule(group: &str, version: &str, resource: &str) -> ResourceRule {
        ResourceRule {
            operations: vec!["CREATE".into()],
            api_groups: vec![group.into()],
            api_versions: vec![version.into()],
            resources: vec![resource.into()],
            scope: "*".into(),
            ..ResourceRule::default()
        }
    }

    fn matching(rules: Vec<ResourceRule>) -> MatchResources {
        MatchResources {
            resource_rules: rules,
            ..MatchResources::default()
        }
    }

    fn field(types: &ClusterTypes, gvk: &Gvk, path: &[&str]) -> bool {
        let mut schema = Some((*types.schema(gvk).unwrap()).clone());
        for name in path {
            schema = schema.and_then(|s| s.property(name));
        }
        schema.is_some()
    }

    #[test]
    fn the_builtin_snapshot_types_the_common_kinds() {
        let types = builtin();
        let deployment = Gvk::new("apps", "v1", "Deployment");
        assert_eq!(
            types.kinds_for("apps", "v1", "deployments"),
            std::slice::from_ref(&deployment)
        );
        assert_eq!(
            types.kinds_for("", "v1", "events"),
            [
                Gvk::new("", "v1", "Event"),
                Gvk::new("events.k8s.io", "v1", "Event")
            ]
        );
        assert!(types.resources().contains(&ApiResource {
            group: "apps".into(),
            version: "v1".into(),
            resource: "deployments/scale".into(),
            kind: Gvk::new("autoscaling", "v1", "Scale"),
        }));
        assert!(field(&types, &deployment, &["spec", "replicas"]));
        assert!(field(
            &types,
            &Gvk::new("", "v1", "Pod"),
            &["spec", "containers"]
        ));
        assert!(field(&types, &Gvk::new("", "v1", "ConfigMap"), &["data"]));

        // Upstream's example: a Deployment has no top-level `replicas`.
        let spec = ValidatingPolicySpec {
            match_constraints: Some(matching(vec![rule("apps", "v1", "deployments")])),
            validations: vec![Validation {
                expression: "object.replicas > 1".into(),
                ..Validation::default()
            }],
            ..ValidatingPolicySpec::default()
        };
        let report = check_validating(&spec, &types);
        assert_eq!(report.checked, [deployment]);
        assert_eq!(
            report.expression_warnings[0].warning,
            "apps/v1, Kind=Deployment: ERROR: <input>:1:7: undefined field 'replicas'\n | object.replicas > 1\n | ......^\n"
        );
    }

    const CRDS: &str = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions";

    /// A group version's document with one kind whose `spec` has an integer `size`.
    fn document(group: &str, version: &str, kind: &str) -> Value {
        json!({"openapi": "3.0.0", "components": {"schemas": {format!("{group}.{version}.{kind}"): {
            "type": "object",
            "properties": {"spec": {"type": "object", "properties": {"size": {"type": "integer"}}}},
            "x-kubernetes-group-version-kind": [{"group": group, "version": version, "kind": kind}],
        }}}})
    }

    /// A cluster serving configmaps and deployments, and widgets from the `widgets_from`-th
    /// discovery of `/apis` on (counting from 1). Records the discovery and document calls.
    struct Cluster {
        widgets_from: usize,
        apis_calls: usize,
        calls: Vec<String>,
    }

    impl Cluster {
        fn answer(&mut self, call: &Call) -> Reply {
            let at = match call.query.as_str() {
                "" => call.path.clone(),
                query => format!("{}?{query}", call.path),
            };
            match (call.path.as_str(), call.is_watch()) {
                (CRDS, _) => return Reply::Hold,
                ("/api", false) => {
                    return Reply::Json(
                        200,
                        fixtures::discovery(&[("", "v1", &[("configmaps", "ConfigMap")])]),
                    );
                }
                _ => {}
            }
            self.calls.push(at.clone());
            let body = match at.as_str() {
                "/apis" => {
                    self.apis_calls += 1;
                    let mut groups: Vec<fixtures::GroupVersion<'_>> =
                        vec![("apps", "v1", &[("deployments", "Deployment")])];
                    if self.apis_calls >= self.widgets_from {
                        groups.push(("example.com", "v1", &[("widgets", "Widget")]));
                    }
                    fixtures::discovery(&groups)
                }
                "/openapi/v3" => json!({"paths": {
                    "api/v1": {"serverRelativeURL": "/openapi/v3/api/v1?hash=c"},
                    "apis/apps/v1": {"serverRelativeURL": "/openapi/v3/apis/apps/v1?hash=a"},
                    "apis/example.com/v1": {"serverRelativeURL": "/openapi/v3/apis/example.com/v1?hash=w"},
                }}),
                "/openapi/v3/api/v1?hash=c" => document("", "v1", "ConfigMap"),
                "/openapi/v3/apis/apps/v1?hash=a" => document("apps", "v1", "Deployment"),
                "/openapi/v3/apis/example.com/v1?hash=w" => document("example.com", "v1", "Widget"),
                other => panic!("unexpected call to {other}"),
            };
            Reply::Json(200, body)
        }
    }

    async fn for_policy(
        cluster: &mut Cluster,
        rules: Vec<ResourceRule>,
        param_kind: Option<ParamKind>,
    ) -> ClusterTypes {
        let (client, mut api) = fixtures::pair();
        let discovery = Discovery::spawn(client.clone());
        let cache = SchemaCache::new(client);
        let constraints = matching(rules);
        let gathering = tokio::time::timeout(
            Duration::from_secs(60),
            ClusterTypes::for_policy(&discovery, &cache, Some(&constraints), param_kind.as_ref()),
        );
        api.serve_until(|c| cluster.answer(c), gathering)
            .await
            .expect("gathering did not finish")
            .unwrap()
    }

    #[tokio::test]
    async fn a_policy_gets_its_kinds_and_its_param_kind() {
        let mut cluster = Cluster {
            widgets_from: 1,
            apis_calls: 0,
            calls: Vec::new(),
        };
        let param = ParamKind {
            api_version: "v1".into(),
            kind: "ConfigMap".into(),
        };
        let types = for_policy(
            &mut cluster,
            vec![rule("apps", "v1", "deployments")],
            Some(param),
        )
        .await;
        cluster.calls.sort();
        assert_eq!(
            cluster.calls,
            [
                "/apis",
                "/openapi/v3",
                "/openapi/v3/api/v1?hash=c",
                "/openapi/v3/apis/apps/v1?hash=a"
            ],
            "one discovery, and only the documents of the policy's kinds"
        );
        assert!(field(
            &types,
            &Gvk::new("apps", "v1", "Deployment"),
            &["spec", "size"]
        ));
        assert!(types.schema(&Gvk::new("", "v1", "ConfigMap")).is_some());
        assert!(
            types
                .schema(&Gvk::new("example.com", "v1", "Widget"))
                .is_none()
        );
        assert!(types.failures().is_empty());
    }

    #[tokio::test]
    async fn a_resource_not_served_yet_is_looked_up_once_more() {
        // The CRD came after the last discovery: upstream resets its RESTMapper and finds it.
        let mut cluster = Cluster {
            widgets_from: 2,
            apis_calls: 0,
            calls: Vec::new(),
        };
        let types = for_policy(
            &mut cluster,
            vec![rule("example.com", "v1", "widgets")],
            None,
        )
        .await;
        assert_eq!(cluster.apis_calls, 2);
        assert!(field(
            &types,
            &Gvk::new("example.com", "v1", "Widget"),
            &["spec", "size"]
        ));

        // A resource that is served needs no second discovery.
        let mut cluster = Cluster {
            widgets_from: 1,
            apis_calls: 0,
            calls: Vec::new(),
        };
        for_policy(
            &mut cluster,
            vec![rule("example.com", "v1", "widgets")],
            None,
        )
        .await;
        assert_eq!(cluster.apis_calls, 1);
    }
}
