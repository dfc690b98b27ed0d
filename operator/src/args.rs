//! The flags of `celgate run` (each with its environment variable): `docs/reference/flags.md`
//! is generated from them.

use std::net::IpAddr;

use crate::serving::certs::CertSource;
use crate::serving::registration::WebhookRules;

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
    /// celgate's own (always excluded): a broken celgate cannot lock the control plane out.
    /// Set it to "" to exclude only celgate's namespace.
    #[arg(
        long,
        env = "CELGATE_EXCLUDED_NAMESPACES",
        value_delimiter = ',',
        default_value = "kube-system"
    )]
    pub excluded_namespaces: Vec<String>,
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
    /// Plain-HTTP port serving `/metrics` (OpenMetrics text) on the bind address; 0 disables it.
    #[arg(long, env = "CELGATE_METRICS_PORT", default_value_t = 8080)]
    pub metrics_port: u16,
    /// Denials written to the decision log per second, at most (target `celgate::decision`);
    /// the rest are counted in `celgate_decision_log_dropped_total`. 0 disables the log.
    #[arg(long, env = "CELGATE_DECISION_LOG_RATE", default_value_t = 10)]
    pub decision_log_rate: u32,
    /// Log as JSON lines.
    #[arg(long, env = "CELGATE_LOG_JSON")]
    pub log_json: bool,
    /// Kubernetes compatibility version of new CEL expressions (1.33 to 1.36): a policy
    /// written or changed may only use CEL libraries introduced by then, as kube-apiserver's
    /// `--emulated-version` minus one decides. Stored expressions keep every library.
    #[arg(long, env = "CELGATE_CEL_COMPATIBILITY_VERSION", default_value_t = celgate_cel::Compatibility::DEFAULT)]
    pub cel_compatibility_version: celgate_cel::Compatibility,
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
}
