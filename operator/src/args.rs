//! The flags of `celgate run` (each with its environment variable): `docs/reference/flags.md`
//! is generated from them.

use std::net::IpAddr;
use std::path::PathBuf;
use std::time::Duration;

use celgate_webhook::{AuthConfig, Limits};
use clap::builder::TypedValueParser as _;

use crate::serving::certs::CertSource;
use crate::serving::registration::{DEFAULT_TIMEOUT_SECONDS, NeverSent, WebhookRules};

/// How the operator runs.
#[derive(clap::Args, Debug)]
pub struct RunArgs {
    /// Address the webhook listens on.
    #[arg(long, env = "CELGATE_BIND_ADDRESS", default_value = "0.0.0.0")]
    pub bind_address: IpAddr,
    /// HTTPS port of the webhook.
    #[arg(long, env = "CELGATE_WEBHOOK_PORT", default_value_t = 9443)]
    pub webhook_port: u16,
    /// Base URL the API server calls the webhook at (out of cluster), e.g. https://127.0.0.1:9443.
    /// Without it, the webhook is registered as the Service below.
    #[arg(long, env = "CELGATE_WEBHOOK_URL")]
    pub webhook_url: Option<String>,
    /// celgate's own namespace: holds the certificate Secret and is excluded from the webhooks.
    #[arg(long, env = "CELGATE_NAMESPACE", default_value = "celgate-system")]
    pub namespace: String,
    /// Namespaces whose requests never reach the policy webhooks, comma-separated, besides
    /// celgate's own (always excluded): a broken celgate cannot lock the control plane out
    /// (kube-node-lease holds the nodes' heartbeats, kube-public the cluster-info bootstrap
    /// reads). Set it to "" to exclude only celgate's namespace.
    #[arg(
        long,
        env = "CELGATE_EXCLUDED_NAMESPACES",
        value_delimiter = ',',
        default_value = "kube-system,kube-node-lease,kube-public"
    )]
    pub excluded_namespaces: Vec<String>,
    /// Kinds of request the policy webhooks are never sent, comma-separated, whatever the
    /// policies match (docs/behaviour.md says why each): `none` sends every request, as
    /// in-tree does.
    #[arg(
        long,
        env = "CELGATE_NEVER_SENT",
        value_enum,
        value_delimiter = ',',
        default_value = "events,leases,authentication-reviews,authorization-reviews,nodes,certificate-signing-requests,ip-allocations,api-services"
    )]
    pub never_sent: Vec<NeverSent>,
    /// Seconds kube-apiserver waits for each of celgate's webhooks to answer (their
    /// `timeoutSeconds`, 1 to 30) before the webhook's failurePolicy decides: how long a write
    /// waits on an unreachable celgate that does not refuse connections (docs/limitations.md
    /// gives the measurement the default is chosen by).
    #[arg(long, env = "CELGATE_WEBHOOK_TIMEOUT_SECONDS", default_value_t = DEFAULT_TIMEOUT_SECONDS,
          value_parser = clap::value_parser!(i32).range(1..=30))]
    pub webhook_timeout_seconds: i32,
    /// MiB of param objects (as JSON) celgate keeps in total, every paramKind together: what
    /// the bindings' paramRefs select (only that is watched). A kind whose selection would pass
    /// it has its objects dropped and its bindings fail under their failurePolicy with a
    /// message saying so (status reason ParamsTooLarge) until it fits again (its selection
    /// shrinks, or another kind's does).
    #[arg(long, env = "CELGATE_PARAM_MAX_MIB", default_value_t = 32,
          value_parser = clap::value_parser!(u32).range(1..=4096).map(|n| n as usize))]
    pub param_max_mib: usize,
    /// Whether `*` in a validating or mutating policy's operations includes CONNECT (`kubectl
    /// exec`, `attach`, `port-forward`, proxy), as in-tree. Off by default: `*` is CREATE,
    /// UPDATE and DELETE, and only a policy naming CONNECT decides or mutates connections (its
    /// status and `celgate check` warn where `*` would include them in-tree).
    #[arg(long, env = "CELGATE_WILDCARD_INCLUDES_CONNECT")]
    pub wildcard_includes_connect: bool,
    /// Name of the webhook's Service (in cluster).
    #[arg(long, env = "CELGATE_SERVICE_NAME", default_value = "celgate-webhook")]
    pub service_name: String,
    /// Port of the webhook's Service (in cluster).
    #[arg(long, env = "CELGATE_SERVICE_PORT", default_value_t = 443)]
    pub service_port: i32,
    /// Name of the Secret holding the webhook CA and serving certificate.
    #[arg(
        long,
        env = "CELGATE_CERT_SECRET",
        default_value = "celgate-webhook-tls"
    )]
    pub cert_secret: String,
    /// Who writes the certificate Secret: `self` (celgate keeps its own CA, renews and
    /// re-creates it) or `cert-manager` (a Certificate writes tls.crt, tls.key and ca.crt;
    /// celgate only follows it).
    #[arg(long, env = "CELGATE_CERT_SOURCE", value_enum, default_value = "self")]
    pub cert_source: CertSource,
    /// Which requests the policy webhooks are sent: `policies` (what the compiled policies'
    /// rules match; a policy over a resource no other policy matches waits for kube-apiserver
    /// to load the changed webhook configuration) or `all` (every resource, subresource and
    /// operation but CONNECT outside the excluded namespaces: a new policy is enforced once compiled, but every
    /// write waits on celgate, and with failurePolicy Fail fails while celgate is unreachable).
    #[arg(
        long,
        env = "CELGATE_WEBHOOK_RULES",
        value_enum,
        default_value = "policies"
    )]
    pub webhook_rules: WebhookRules,
    /// On SIGTERM, seconds `/readyz` fails while requests are still served, so load balancers
    /// and Service endpoints stop sending new connections before the listener closes.
    #[arg(long, env = "CELGATE_SHUTDOWN_DELAY_SECONDS", default_value_t = 5)]
    pub shutdown_delay_seconds: u64,
    /// After that, seconds in-flight reviews may take to finish before the process exits
    /// (delay + grace must stay below the pod's terminationGracePeriodSeconds).
    #[arg(long, env = "CELGATE_SHUTDOWN_GRACE_SECONDS", default_value_t = 15)]
    pub shutdown_grace_seconds: u64,
    /// Plain-HTTP port serving `/healthz` and `/readyz` from a thread of their own, so the
    /// kubelet's probes are answered while reviews saturate the webhook; 0 (the default, for
    /// several processes on one host) serves them only on the webhook port. The Deployment
    /// sets 8081.
    #[arg(long, env = "CELGATE_HEALTH_PORT", default_value_t = 0)]
    pub health_port: u16,
    /// Connections the webhook holds open at once; one more is closed when accepted. An API
    /// server over HTTP/2 uses one; over HTTP/1.1 (behind a Service) one per concurrent call.
    /// About 100 KiB each of TLS and HTTP buffers at most.
    #[arg(long, env = "CELGATE_WEBHOOK_MAX_CONNECTIONS", default_value_t = Limits::DEFAULT.max_connections,
          value_parser = clap::value_parser!(u32).range(1..).map(|n| n as usize))]
    pub webhook_max_connections: usize,
    /// Reviews read or decided at once; one more is answered HTTP 429 with Retry-After at once
    /// (the API server then applies the webhook's failurePolicy).
    #[arg(long, env = "CELGATE_WEBHOOK_MAX_IN_FLIGHT", default_value_t = Limits::DEFAULT.max_in_flight,
          value_parser = clap::value_parser!(u32).range(1..).map(|n| n as usize))]
    pub webhook_max_in_flight: usize,
    /// MiB the reviews read or decided at once may take: each its body (as declared by
    /// Content-Length), then what decoding it builds (counted before it is decoded); reviews of
    /// 64 KiB or more take seven eighths at most, the rest is kept for the small ones. A review
    /// that would pass it is answered HTTP 429 at once, one that alone would pass it (or its
    /// share) HTTP 413.
    /// What bounds memory under load: with the default, a replica peaks well under the
    /// Deployment's 256 MiB limit (docs/limitations.md).
    #[arg(long, env = "CELGATE_WEBHOOK_MAX_IN_FLIGHT_MIB", default_value_t = Limits::DEFAULT.max_in_flight_bytes / MIB,
          value_parser = clap::value_parser!(u32).range(1..=4096).map(|n| n as usize))]
    pub webhook_max_in_flight_mib: usize,
    /// Largest review body in MiB (413 beyond): kube-apiserver accepts objects up to 3 MiB and
    /// a review carries the object and its old version.
    #[arg(long, env = "CELGATE_WEBHOOK_MAX_BODY_MIB", default_value_t = Limits::DEFAULT.max_body_bytes / MIB,
          value_parser = clap::value_parser!(u32).range(1..=1024).map(|n| n as usize))]
    pub webhook_max_body_mib: usize,
    /// Seconds a new connection has for its TLS handshake and first request's headers, a
    /// request for its headers from its first byte, and a review for its body after its headers
    /// (slow clients are cut off; a body late is answered HTTP 408).
    #[arg(long, env = "CELGATE_WEBHOOK_HEADER_TIMEOUT_SECONDS", default_value_t = Limits::DEFAULT.header_timeout.as_secs(),
          value_parser = clap::value_parser!(u64).range(1..=300))]
    pub webhook_header_timeout_seconds: u64,
    /// Seconds a connection (HTTP/2 or HTTP/1.1) stays open with no request in flight. Longer than the 90 s after
    /// which kube-apiserver's client drops an idle connection, so the client closes first and
    /// never sends a review on a connection the server is closing.
    #[arg(long, env = "CELGATE_WEBHOOK_IDLE_TIMEOUT_SECONDS", default_value_t = Limits::DEFAULT.idle_timeout.as_secs(),
          value_parser = clap::value_parser!(u64).range(1..=3600))]
    pub webhook_idle_timeout_seconds: u64,
    /// Seconds between HTTP/2 PINGs to a quiet client; one unanswered for 20 s closes the
    /// connection (a peer gone without a FIN stops holding a connection slot).
    #[arg(long, env = "CELGATE_WEBHOOK_HTTP2_KEEPALIVE_SECONDS", default_value_t = Limits::DEFAULT.http2_keep_alive.as_secs(),
          value_parser = clap::value_parser!(u64).range(1..=3600))]
    pub webhook_http2_keepalive_seconds: u64,
    /// PEM bundle of the CAs whose client certificates authenticate an API server (its
    /// AdmissionConfiguration's kubeconfig names the certificate). With this or
    /// `--token-file`, unauthenticated reviews are answered 401 and never evaluated.
    #[arg(long, env = "CELGATE_CLIENT_CA_FILE")]
    pub client_ca_file: Option<PathBuf>,
    /// Comma-separated names a client certificate must carry one of (subject common name or
    /// DNS subject alternative name); empty accepts any certificate the CAs signed.
    #[arg(long, env = "CELGATE_CLIENT_NAMES", value_delimiter = ',')]
    pub client_names: Vec<String>,
    /// File of the bearer tokens that authenticate an API server, one a line (its
    /// AdmissionConfiguration's kubeconfig names the token). Read at start.
    #[arg(long, env = "CELGATE_TOKEN_FILE")]
    pub token_file: Option<PathBuf>,
    /// Plain-HTTP port serving `/metrics` (OpenMetrics text) on the bind address, under the
    /// webhook's connection limit and timeouts; 0 disables it.
    #[arg(long, env = "CELGATE_METRICS_PORT", default_value_t = 8080)]
    pub metrics_port: u16,
    /// Decision log lines (denials, warnings, audited failures) per second, at most (target
    /// `celgate::decision`); the rest are counted in `celgate_decision_log_dropped_total`. 0
    /// disables the log.
    #[arg(long, env = "CELGATE_DECISION_LOG_RATE", default_value_t = 10)]
    pub decision_log_rate: u32,
    /// Log as JSON lines.
    #[arg(long, env = "CELGATE_LOG_JSON")]
    pub log_json: bool,
    /// Kubernetes compatibility version of new CEL expressions (1.29 to 1.36): a policy
    /// written or changed may only use CEL libraries introduced by then, as kube-apiserver's
    /// `--emulated-version` minus one decides. Stored expressions keep every library. Unset,
    /// the cluster's default: its minor minus one (1.29 on 1.30).
    #[arg(long, env = "CELGATE_CEL_COMPATIBILITY_VERSION")]
    pub cel_compatibility_version: Option<celgate_cel::Compatibility>,
    /// Name of the Lease whose holder writes status and events (every replica serves admission).
    #[arg(long, env = "CELGATE_LEASE_NAME", default_value = "celgate-leader")]
    pub lease_name: String,
    /// Namespace of the Lease; celgate's own namespace when unset.
    #[arg(long, env = "CELGATE_LEASE_NAMESPACE")]
    pub lease_namespace: Option<String>,
    /// Seconds a leader keeps the Lease without renewing it: how long status goes unwritten
    /// when the leader dies without releasing it.
    #[arg(long, env = "CELGATE_LEASE_DURATION_SECONDS", default_value_t = 15,
          value_parser = clap::value_parser!(u64).range(2..=3600))]
    pub lease_duration_seconds: u64,
    /// This replica's identity in the Lease; the pod name in a cluster (POD_NAME from the
    /// downward API), else `<host name>-<process id>`.
    #[arg(long, env = "POD_NAME")]
    pub identity: Option<String>,
    /// The background audit (leader only): objects already stored that a ValidatingAdmissionPolicy
    /// binding would deny, warn or audit if they were created now, in PolicyReports, each
    /// binding's `status.audit` and `celgate_audit_*` metrics. A binding opts out with the
    /// annotation `audit.celgate.io/scan: "false"`. Off, the leader removes every binding's
    /// `status.audit` (an earlier run's).
    #[arg(long, env = "CELGATE_AUDIT", default_value_t = true, action = clap::ArgAction::Set)]
    pub audit: bool,
    /// Seconds between full audit scans (changes of policies, bindings, params, namespaces
    /// and CRDs start one too, and watches keep results in step between scans).
    #[arg(long, env = "CELGATE_AUDIT_INTERVAL_SECONDS", default_value_t = 3600,
          value_parser = clap::value_parser!(u64).range(10..))]
    pub audit_interval_seconds: u64,
    /// Objects per list page of an audit scan.
    #[arg(long, env = "CELGATE_AUDIT_PAGE_SIZE", default_value_t = 500,
          value_parser = clap::value_parser!(u32).range(1..=10_000))]
    pub audit_page_size: u32,
    /// List pages an audit scan requests per second, at most (all resources together).
    #[arg(long, env = "CELGATE_AUDIT_PAGES_PER_SECOND", default_value_t = 10,
          value_parser = clap::value_parser!(u32).range(1..=1000))]
    pub audit_pages_per_second: u32,
    /// Report writes and deletes per second, at most.
    #[arg(long, env = "CELGATE_AUDIT_REPORT_WRITES_PER_SECOND", default_value_t = 50,
          value_parser = clap::value_parser!(u32).range(1..=1000))]
    pub audit_report_writes_per_second: u32,
    /// Whether the audit reads Secrets too. Off by default: the audit would list every Secret
    /// of the cluster, and a policy's message could copy their data into the reports.
    #[arg(long, env = "CELGATE_AUDIT_SECRETS", default_value_t = false, action = clap::ArgAction::Set)]
    pub audit_secrets: bool,
    /// Whether the audit's reports carry a `pass` result for each binding that evaluated the
    /// object and allowed it, so dashboards can show a compliance share. Off by default: only
    /// objects with violations have a report. On, every object a binding matched has one.
    #[arg(long, env = "CELGATE_AUDIT_REPORT_PASSES", default_value_t = false, action = clap::ArgAction::Set)]
    pub audit_report_passes: bool,
    /// The report API the audit writes: `wgpolicyk8s` (PolicyReport and ClusterPolicyReport,
    /// wgpolicyk8s.io/v1alpha2) or `openreports` (Report and ClusterReport,
    /// openreports.io/v1alpha1). Its CRDs must be installed; until they are, no reports are
    /// written and the log says so.
    #[arg(long, env = "CELGATE_AUDIT_REPORT_API", value_enum, default_value_t = ReportApi::Wgpolicyk8s)]
    pub audit_report_api: ReportApi,
    /// Comma-separated namespaces whose PolicyExceptions (admission.celgate.io/v1alpha1) are
    /// honoured, `*` for every namespace; none by default. One elsewhere is ignored, and its
    /// status says so. Who may write exceptions in these namespaces is RBAC on the kind.
    #[arg(long, env = "CELGATE_EXCEPTION_NAMESPACES", value_delimiter = ',')]
    pub exception_namespaces: Vec<String>,
}

/// One MiB.
const MIB: usize = 1024 * 1024;

impl RunArgs {
    /// What `*` in validating policies' operations stands for.
    pub fn wildcard_operations(&self) -> celgate_engine::model::WildcardOperations {
        if self.wildcard_includes_connect {
            celgate_engine::model::WildcardOperations::InTree
        } else {
            celgate_engine::model::WildcardOperations::WithoutConnect
        }
    }

    /// The webhook's limits these flags set.
    pub fn limits(&self) -> Limits {
        Limits {
            max_connections: self.webhook_max_connections,
            max_in_flight: self.webhook_max_in_flight,
            max_in_flight_bytes: self.webhook_max_in_flight_mib.saturating_mul(MIB),
            max_body_bytes: self.webhook_max_body_mib.saturating_mul(MIB),
            header_timeout: Duration::from_secs(self.webhook_header_timeout_seconds),
            idle_timeout: Duration::from_secs(self.webhook_idle_timeout_seconds),
            http2_keep_alive: Duration::from_secs(self.webhook_http2_keepalive_seconds),
        }
    }

    /// The credentials the webhook accepts, as these flags name them.
    pub fn auth(&self) -> AuthConfig {
        AuthConfig {
            client_ca_file: self.client_ca_file.clone(),
            client_names: self
                .client_names
                .iter()
                .map(|n| n.trim().to_string())
                .filter(|n| !n.is_empty())
                .collect(),
            token_file: self.token_file.clone(),
        }
    }
}

/// The report API the audit writes (`--audit-report-api`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum ReportApi {
    /// `wgpolicyk8s.io/v1alpha2` PolicyReport and ClusterPolicyReport.
    #[default]
    Wgpolicyk8s,
    /// `openreports.io/v1alpha1` Report and ClusterReport.
    Openreports,
}
