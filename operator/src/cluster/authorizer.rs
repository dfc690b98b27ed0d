//! The `authorizer` of policy expressions, answered with SubjectAccessReviews for the request's
//! user and cached for the request, as kube-apiserver's caching authorizer does.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use celgate_cel::authz::{AuthzTarget, Decision};
use celgate_cel::{Authorizer, AuthzDecision, AuthzRequest};
use celgate_engine::model::ParamKind;
use celgate_engine::paramaccess::Writer;
use celgate_snapshot::AuthorizerSource;
use k8s_openapi::api::authorization::v1::{
    FieldSelectorAttributes, LabelSelectorAttributes, NonResourceAttributes, ResourceAttributes,
    SubjectAccessReview, SubjectAccessReviewSpec,
};
use kube::api::{GroupVersionKind, PostParams};
use kube::{Api, Client, discovery};
use serde_json::Value;
use tokio::runtime::{Handle, RuntimeFlavor};

/// Longest a single SubjectAccessReview may take.
const REVIEW_TIMEOUT: Duration = Duration::from_secs(5);

/// Makes one [`SarAuthorizer`] per admission request.
#[derive(Clone)]
pub struct SarAuthorizers {
    client: Client,
}

impl std::fmt::Debug for SarAuthorizers {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("SarAuthorizers")
    }
}

impl SarAuthorizers {
    /// Authorizers that ask the API server behind `client`.
    pub fn new(client: Client) -> Self {
        Self { client }
    }
}

impl AuthorizerSource for SarAuthorizers {
    fn for_user(&self, user_info: &Value) -> Arc<dyn Authorizer> {
        Arc::new(SarAuthorizer {
            client: self.client.clone(),
            user: Writer::from_user_info(user_info),
            cache: Mutex::new(Vec::new()),
        })
    }

    fn resource_for(&self, kind: &ParamKind) -> Option<String> {
        let (group, version) = kind
            .api_version
            .split_once('/')
            .unwrap_or(("", kind.api_version.as_str()));
        let gvk = GroupVersionKind::gvk(group, version, &kind.kind);
        block_on(discovery::pinned_kind(&self.client, &gvk))
            .ok()?
            .ok()
            .map(|(resource, _)| resource.plural)
    }
}

/// Runs `fut` to completion from synchronous code on the webhook's multi-threaded runtime,
/// blocking this worker thread (not the runtime), bounded by [`REVIEW_TIMEOUT`].
fn block_on<F: std::future::Future>(fut: F) -> Result<F::Output, String> {
    let handle = match Handle::try_current() {
        Ok(h) if h.runtime_flavor() == RuntimeFlavor::MultiThread => h,
        _ => return Err("authorizer is unavailable outside celgate's webhook runtime".into()),
    };
    tokio::task::block_in_place(|| handle.block_on(tokio::time::timeout(REVIEW_TIMEOUT, fut)))
        .map_err(|_| "the API server did not answer in time".to_string())
}

/// Answers the checks of one request.
struct SarAuthorizer {
    client: Client,
    user: Writer,
    cache: Mutex<Vec<(AuthzRequest, AuthzDecision)>>,
}

fn error_decision(error: String) -> AuthzDecision {
    AuthzDecision {
        decision: Decision::NoOpinion,
        reason: String::new(),
        error: Some(error),
    }
}

impl SarAuthorizer {
    fn review(&self, req: &AuthzRequest) -> SubjectAccessReview {
        let (user, groups, uid, extra) = match req.subject.username() {
            Some(sa) => (sa, req.subject.groups(), None, None),
            None => (
                self.user.username.clone(),
                self.user.groups.clone(),
                Some(self.user.uid.clone()).filter(|u| !u.is_empty()),
                Some(self.user.extra.clone()).filter(|e| !e.is_empty()),
            ),
        };
        let (resource_attributes, non_resource_attributes) = match &req.target {
            AuthzTarget::Path(path) => (
                None,
                Some(NonResourceAttributes {
                    path: Some(path.clone()),
                    verb: Some(req.verb.clone()),
                }),
            ),
            AuthzTarget::Resource(r) => {
                let some = |s: &str| Some(s.to_string()).filter(|s| !s.is_empty());
                (
                    Some(ResourceAttributes {
                        group: Some(r.group.clone()),
                        version: Some("*".into()),
                        resource: some(&r.resource),
                        subresource: some(&r.subresource),
                        namespace: some(&r.namespace),
                        name: some(&r.name),
                        verb: Some(req.verb.clone()),
                        field_selector: some(&r.field_selector).map(|raw| {
                            FieldSelectorAttributes {
                                raw_selector: Some(raw),
                                requirements: None,
                            }
                        }),
                        label_selector: some(&r.label_selector).map(|raw| {
                            LabelSelectorAttributes {
                                raw_selector: Some(raw),
                                requirements: None,
                            }
                        }),
                    }),
                    None,
                )
            }
        };
        SubjectAccessReview {
            spec: SubjectAccessReviewSpec {
                user: Some(user),
                groups: Some(groups),
                uid,
                extra,
                resource_attributes,
                non_resource_attributes,
            },
            ..Default::default()
        }
    }

    fn ask(&self, req: &AuthzRequest) -> AuthzDecision {
        // Expressions are evaluated synchronously on the webhook's worker threads; a review
        // blocks its thread (not the runtime) until the API server answers.
        let handle = match Handle::try_current() {
            Ok(h) if h.runtime_flavor() == RuntimeFlavor::MultiThread => h,
            _ => {
                return error_decision(
                    "authorizer is unavailable outside celgate's webhook runtime".into(),
                );
            }
        };
        let api: Api<SubjectAccessReview> = Api::all(self.client.clone());
        let review = self.review(req);
        let result = tokio::task::block_in_place(|| {
            handle.block_on(tokio::time::timeout(
                REVIEW_TIMEOUT,
                api.create(&PostParams::default(), &review),
            ))
        });
        match result {
            Err(_) => error_decision("SubjectAccessReview timed out".into()),
            Ok(Err(e)) => error_decision(e.to_string()),
            Ok(Ok(done)) => {
                let status = done.status.unwrap_or_default();
                AuthzDecision {
                    decision: if status.allowed {
                        Decision::Allow
                    } else if status.denied == Some(true) {
                        Decision::Deny
                    } else {
                        Decision::NoOpinion
                    },
                    reason: status.reason.unwrap_or_default(),
                    error: status.evaluation_error.and_then(authorizer_error),
                }
            }
        }
    }
}

/// The notes the SubjectAccessReview endpoint adds when it cannot parse a selector it was given
/// (and so ignores it). In-tree, the authorizer library keeps such a parse error beside the
/// check and the authorizers decide without the selector, so the check does not error.
const SELECTOR_IGNORED: [&str; 2] = [
    "spec.resourceAttributes.fieldSelector ignored due to parse error",
    "spec.resourceAttributes.labelSelector ignored due to parse error",
];

/// A SubjectAccessReview's evaluationError as the check's error, as in-tree would have it: the
/// notes of [`SELECTOR_IGNORED`] dropped (the endpoint joins its notes with "; "); `None` when
/// nothing is left.
fn authorizer_error(evaluation_error: String) -> Option<String> {
    let kept: Vec<&str> = evaluation_error
        .split("; ")
        .filter(|note| !note.is_empty() && !SELECTOR_IGNORED.contains(note))
        .collect();
    (!kept.is_empty()).then(|| kept.join("; "))
}

impl Authorizer for SarAuthorizer {
    fn check(&self, req: &AuthzRequest) -> AuthzDecision {
        let cached = self
            .cache
            .lock()
            .ok()
            .and_then(|c| c.iter().find(|(r, _)| r == req).map(|(_, d)| d.clone()));
        if let Some(d) = cached {
            return d;
        }
        let decision = self.ask(req);
        if let Ok(mut cache) = self.cache.lock() {
            cache.push((req.clone(), decision.clone()));
        }
        decision
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_selector_the_api_server_could_not_parse_is_no_error_of_the_check() {
        let both = format!("{}; {}", SELECTOR_IGNORED[0], SELECTOR_IGNORED[1]);
        assert_eq!(authorizer_error(both), None);
        assert_eq!(authorizer_error(String::new()), None);
        assert_eq!(
            authorizer_error(format!(
                "webhook authorizer failed; {}",
                SELECTOR_IGNORED[1]
            )),
            Some("webhook authorizer failed".to_string())
        );
        assert_eq!(
            authorizer_error("webhook authorizer failed".into()),
            Some("webhook authorizer failed".to_string())
        );
    }
}
