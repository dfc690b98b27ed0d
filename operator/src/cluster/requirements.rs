//! What celgate needs of its cluster, checked once at start: Kubernetes 1.30 or later (the
//! floor: aggregated discovery `apidiscovery.k8s.io/v2`, ValidatingAdmissionPolicy `v1` and
//! webhook `matchConditions` went GA there, so the exemptions celgate registers are never
//! dropped), and the APIs it calls served. Below the floor, or with one of those APIs switched
//! off, `celgate run` refuses to start and says which.

use celgate_kinds::served::ServedResources;
use k8s_openapi::apimachinery::pkg::version::Info;
use kube::Client;
use thiserror::Error;

use super::discovery::{self, DiscoveryError};

/// The oldest Kubernetes minor celgate runs on: `1.<FLOOR_MINOR>`.
pub const FLOOR_MINOR: u32 = 30;

/// The resources celgate calls (group, version, resource) and what for.
const NEEDED: [(&str, &str, &str, &str); 4] = [
    (
        "admissionregistration.k8s.io",
        "v1",
        "validatingwebhookconfigurations",
        "registering its validating webhook",
    ),
    (
        "admissionregistration.k8s.io",
        "v1",
        "mutatingwebhookconfigurations",
        "registering its mutating webhook",
    ),
    (
        "authorization.k8s.io",
        "v1",
        "subjectaccessreviews",
        "the authorizer of policy expressions",
    ),
    (
        "coordination.k8s.io",
        "v1",
        "leases",
        "electing the replica that writes status",
    ),
];

/// Why celgate will not run on this cluster.
#[derive(Debug, Error)]
pub enum RequirementError {
    /// `/version` could not be read.
    #[error("cannot read the cluster's version (/version): {0}")]
    Version(#[source] kube::Error),
    /// `/version` names no minor celgate can read.
    #[error("the cluster reports a version celgate cannot read (major {major:?}, minor {minor:?})")]
    UnreadableVersion {
        /// `major` of `/version`.
        major: String,
        /// `minor` of `/version`.
        minor: String,
    },
    /// The cluster is older than the floor.
    #[error(
        "the cluster runs Kubernetes {version}; celgate needs 1.{FLOOR_MINOR} or later (aggregated discovery, webhook matchConditions); upgrade the cluster or use kube-apiserver's own ValidatingAdmissionPolicy"
    )]
    TooOld {
        /// The cluster's `gitVersion` (or `major.minor`).
        version: String,
    },
    /// Discovery failed (aggregated discovery switched off among the causes).
    #[error(transparent)]
    Discovery(#[from] DiscoveryError),
    /// APIs celgate calls are not served.
    #[error("the cluster does not serve {}; enable them (kube-apiserver --runtime-config)", .0.join("; "))]
    MissingApis(Vec<String>),
}

/// Checks the cluster behind `client`; its minor when celgate can run there.
pub async fn check(client: &Client) -> Result<u32, RequirementError> {
    let info = client
        .apiserver_version()
        .await
        .map_err(RequirementError::Version)?;
    let minor = supported_minor(&info)?;
    let served = discovery::discover(client).await?;
    missing_apis(&served)?;
    Ok(minor)
}

/// The minor of `/version`'s answer if it is at least the floor. Managed clusters report
/// minors such as `30+`: the leading digits count.
fn supported_minor(info: &Info) -> Result<u32, RequirementError> {
    let digits = |s: &str| {
        let end = s.find(|c: char| !c.is_ascii_digit()).unwrap_or(s.len());
        s[..end].parse::<u32>().ok()
    };
    let (Some(major), Some(minor)) = (digits(&info.major), digits(&info.minor)) else {
        return Err(RequirementError::UnreadableVersion {
            major: info.major.clone(),
            minor: info.minor.clone(),
        });
    };
    if major == 1 && minor < FLOOR_MINOR || major < 1 {
        let version = if info.git_version.is_empty() {
            format!("{}.{}", info.major, info.minor)
        } else {
            info.git_version.clone()
        };
        return Err(RequirementError::TooOld { version });
    }
    Ok(minor)
}

/// Each needed resource that `served` lacks, named with what celgate needs it for.
fn missing_apis(served: &ServedResources) -> Result<(), RequirementError> {
    let missing: Vec<String> = NEEDED
        .iter()
        .filter(|(group, version, resource, _)| {
            !served
                .resources()
                .iter()
                .any(|r| r.group == *group && r.version == *version && r.resource == *resource)
        })
        .map(|(group, version, resource, what)| format!("{group}/{version} {resource} ({what})"))
        .collect();
    if missing.is_empty() {
        Ok(())
    } else {
        Err(RequirementError::MissingApis(missing))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fixtures;
    use kube::core::discovery::v2::APIGroupDiscoveryList;

    fn info(major: &str, minor: &str, git_version: &str) -> Info {
        Info {
            major: major.into(),
            minor: minor.into(),
            git_version: git_version.into(),
            ..Info::default()
        }
    }

    #[test]
    fn the_floor_is_1_30_and_managed_minors_count_by_their_digits() {
        assert_eq!(supported_minor(&info("1", "30", "v1.30.14")).ok(), Some(30));
        assert_eq!(
            supported_minor(&info("1", "33+", "v1.33.2-gke.1")).ok(),
            Some(33)
        );
        let err = supported_minor(&info("1", "29", "v1.29.15"))
            .expect_err("1.29 is below the floor")
            .to_string();
        assert!(
            err.starts_with("the cluster runs Kubernetes v1.29.15; celgate needs 1.30 or later"),
            "{err}"
        );
        assert!(matches!(
            supported_minor(&info("1", "", "")),
            Err(RequirementError::UnreadableVersion { .. })
        ));
    }

    fn served(groups: &[fixtures::GroupVersion<'_>]) -> ServedResources {
        let list: APIGroupDiscoveryList =
            serde_json::from_value(fixtures::discovery(groups)).expect("a discovery list");
        ServedResources::from_discovery([&list])
    }

    #[test]
    fn each_missing_api_is_named_with_its_use() {
        let webhooks: &[(&str, &str)] = &[
            (
                "validatingwebhookconfigurations",
                "ValidatingWebhookConfiguration",
            ),
            (
                "mutatingwebhookconfigurations",
                "MutatingWebhookConfiguration",
            ),
        ];
        let sar: &[(&str, &str)] = &[("subjectaccessreviews", "SubjectAccessReview")];
        let leases: &[(&str, &str)] = &[("leases", "Lease")];
        let all = served(&[
            ("admissionregistration.k8s.io", "v1", webhooks),
            ("authorization.k8s.io", "v1", sar),
            ("coordination.k8s.io", "v1", leases),
        ]);
        assert!(missing_apis(&all).is_ok());
        let without_sar = served(&[
            ("admissionregistration.k8s.io", "v1", webhooks),
            ("coordination.k8s.io", "v1", leases),
        ]);
        assert_eq!(
            missing_apis(&without_sar)
                .expect_err("SubjectAccessReviews are missing")
                .to_string(),
            "the cluster does not serve authorization.k8s.io/v1 subjectaccessreviews (the authorizer of policy expressions); enable them (kube-apiserver --runtime-config)"
        );
    }
}
