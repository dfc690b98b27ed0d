//! The controllers that make Pods from a template, which a Pod policy opted into autogen also
//! covers ([`crate::autogen`]).

use celgate_cel::Relocation;

/// A controller that makes Pods from a template.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum PodController {
    /// apps/v1 Deployment.
    Deployment,
    /// apps/v1 ReplicaSet.
    ReplicaSet,
    /// apps/v1 StatefulSet.
    StatefulSet,
    /// apps/v1 DaemonSet.
    DaemonSet,
    /// batch/v1 Job.
    Job,
    /// batch/v1 CronJob.
    CronJob,
}

impl PodController {
    /// Every controller, in the order variants are made.
    pub const ALL: [PodController; 6] = [
        PodController::Deployment,
        PodController::ReplicaSet,
        PodController::StatefulSet,
        PodController::DaemonSet,
        PodController::Job,
        PodController::CronJob,
    ];

    /// The kind.
    pub fn kind(self) -> &'static str {
        match self {
            PodController::Deployment => "Deployment",
            PodController::ReplicaSet => "ReplicaSet",
            PodController::StatefulSet => "StatefulSet",
            PodController::DaemonSet => "DaemonSet",
            PodController::Job => "Job",
            PodController::CronJob => "CronJob",
        }
    }

    /// The API group.
    pub fn group(self) -> &'static str {
        match self {
            PodController::Job | PodController::CronJob => "batch",
            _ => "apps",
        }
    }

    /// The resource.
    pub fn resource(self) -> &'static str {
        match self {
            PodController::Deployment => "deployments",
            PodController::ReplicaSet => "replicasets",
            PodController::StatefulSet => "statefulsets",
            PodController::DaemonSet => "daemonsets",
            PodController::Job => "jobs",
            PodController::CronJob => "cronjobs",
        }
    }

    /// Where the controller holds its Pod template.
    pub fn template_path(self) -> &'static [&'static str] {
        match self {
            PodController::CronJob => &["spec", "jobTemplate", "spec", "template"],
            _ => &["spec", "template"],
        }
    }

    /// Where a Pod policy's reads and writes move: the Pod's `spec` and `metadata` to the
    /// template's, but `metadata.name` and `metadata.namespace` stay the controller's (a
    /// template has neither; its Pods take the controller's namespace and a name made from
    /// the controller's).
    pub fn relocation(self) -> Relocation {
        let under = |field: &str| -> Vec<String> {
            (self.template_path().iter().copied())
                .chain([field])
                .map(String::from)
                .collect()
        };
        let path = |p: &[&str]| -> Vec<String> { p.iter().map(|s| s.to_string()).collect() };
        let stays = |p: &[&str]| (path(p), path(p));
        Relocation {
            roots: path(&["object", "oldObject"]),
            moves: vec![
                (path(&["spec"]), under("spec")),
                (path(&["metadata"]), under("metadata")),
                stays(&["metadata", "name"]),
                stays(&["metadata", "namespace"]),
            ],
            message_root: Some("Object".into()),
            json_patch: Some("JSONPatch".into()),
        }
    }

    /// The controller named `name`: its kind or resource, any case.
    pub(crate) fn named(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|c| {
            name.eq_ignore_ascii_case(c.kind()) || name.eq_ignore_ascii_case(c.resource())
        })
    }
}
