//! `celgate probe`: proves, through the API server of the cluster in `KUBECONFIG` (or in
//! cluster), that an installed celgate decides: a ConfigMap labelled `probe.celgate.io/verdict:
//! deny`, created as a dry run, comes back denied by celgate's admission webhook with the named
//! ValidatingAdmissionPolicy's message, and the same ConfigMap labelled `allow` is admitted. What
//! the chart's `helm test` pod runs, with a policy and binding made for it. Nothing is stored.

use std::time::{Duration, Instant};

use kube::Client;
use kube::api::{Api, ApiResource, DynamicObject, PostParams};
use serde_json::json;

use crate::{CliError, EXIT_FINDINGS, EXIT_OK};

/// The label whose value (`deny` or `allow`) the probe's policy decides on.
pub const LABEL: &str = "probe.celgate.io/verdict";

/// Pause between two attempts at the denial.
const RETRY: Duration = Duration::from_secs(1);

/// Arguments of `celgate probe`.
#[derive(clap::Args, Debug)]
pub struct ProbeArgs {
    /// The ValidatingAdmissionPolicy (admission.celgate.io/v1) whose binding denies a ConfigMap
    /// labelled `probe.celgate.io/verdict: deny` in --namespace
    #[arg(long)]
    pub policy: String,
    /// Namespace of the ConfigMap created as a dry run: not one excluded from celgate's webhooks
    #[arg(long, default_value = "default")]
    pub namespace: String,
    /// Seconds to wait for the denial: a new policy is enforced once celgate has compiled it and
    /// its leader has registered the webhook rules
    #[arg(long, default_value_t = 60)]
    pub timeout_seconds: u64,
}

/// What the API server answered a dry-run create.
enum Answer {
    Admitted,
    Refused { code: u16, message: String },
}

/// Runs `celgate probe`: exit code 0 when the denial and the admission came back, 1 when not
/// (the last answer is printed), 2 when the cluster cannot be asked.
pub fn run(args: &ProbeArgs, out: &mut dyn std::io::Write) -> Result<u8, CliError> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| CliError::Cluster(format!("cannot start the client's runtime: {e}")))?;
    runtime.block_on(probe(args, out))
}

async fn probe(args: &ProbeArgs, out: &mut dyn std::io::Write) -> Result<u8, CliError> {
    let client = Client::try_default().await.map_err(|e| {
        CliError::Cluster(format!(
            "{e} (run in a pod, or set KUBECONFIG to the cluster's kubeconfig)"
        ))
    })?;
    let api: Api<DynamicObject> = Api::namespaced_with(client, &args.namespace, &config_map());
    let expected = format!("ValidatingAdmissionPolicy '{}'", args.policy);
    let deadline = Instant::now() + Duration::from_secs(args.timeout_seconds);
    let mut attempts = 0u32;
    let denial = loop {
        attempts += 1;
        let last = match create(&api, "deny").await? {
            Answer::Refused { code, message }
                if message.starts_with("admission webhook \"") && message.contains(&expected) =>
            {
                break format!("HTTP {code}: {message}");
            }
            Answer::Refused { code, message } => format!("HTTP {code}: {message}"),
            Answer::Admitted => "admitted".to_string(),
        };
        if Instant::now() + RETRY > deadline {
            writeln!(
                out,
                "FAIL: a ConfigMap labelled {LABEL}=deny in {} was not denied by celgate's \
                 webhook with {expected} within {}s ({attempts} attempts); the last answer: {last}",
                args.namespace, args.timeout_seconds
            )?;
            return Ok(EXIT_FINDINGS);
        }
        tokio::time::sleep(RETRY).await;
    };
    writeln!(out, "denied by celgate's webhook: {denial}")?;
    match create(&api, "allow").await? {
        Answer::Admitted => {
            writeln!(out, "admitted: a ConfigMap labelled {LABEL}=allow")?;
            Ok(EXIT_OK)
        }
        Answer::Refused { code, message } => {
            writeln!(
                out,
                "FAIL: a ConfigMap labelled {LABEL}=allow was refused: HTTP {code}: {message}"
            )?;
            Ok(EXIT_FINDINGS)
        }
    }
}

/// ConfigMaps, the kind the probe creates.
fn config_map() -> ApiResource {
    ApiResource {
        group: String::new(),
        version: "v1".into(),
        api_version: "v1".into(),
        kind: "ConfigMap".into(),
        plural: "configmaps".into(),
    }
}

/// Creates the probe's ConfigMap labelled `verdict`, as a dry run.
async fn create(api: &Api<DynamicObject>, verdict: &str) -> Result<Answer, CliError> {
    let mut object = DynamicObject::new("celgate-probe", &config_map());
    object.metadata.labels = Some([(LABEL.to_string(), verdict.to_string())].into());
    object.data = json!({"data": {"verdict": verdict}});
    let params = PostParams {
        dry_run: true,
        ..Default::default()
    };
    match api.create(&params, &object).await {
        Ok(_) => Ok(Answer::Admitted),
        Err(kube::Error::Api(status)) => Ok(Answer::Refused {
            code: status.code,
            message: status.message,
        }),
        Err(e) => Err(CliError::Cluster(format!(
            "cannot create a ConfigMap (dry run) in {}: {e}",
            api.resource_url()
        ))),
    }
}
