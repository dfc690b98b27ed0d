//! `celgate`: the operator with its co-located admission webhook, and offline commands.

mod authorizer;
mod backoff;
mod cert_watch;
mod certs;
mod changes;
mod cli;
mod cluster_types;
mod controllers;
mod convert;
mod discovery;
mod identity;
mod leader;
mod metrics;
mod mutating;
mod namespaces;
mod params;
mod policies;
mod policy_set;
mod registration;
mod schemas;
mod status;

#[cfg(test)]
mod fixtures;

use std::net::{IpAddr, SocketAddr};
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use clap::{Parser, Subcommand};
use k8s_openapi::api::core::v1::Namespace;
use kube::api::{ListParams, ObjectMeta, PostParams};
use kube::{Api, Client};
use thiserror::Error;
use tracing::{error, info, warn};

use registration::{Endpoint, Registration, WebhookRules};

/// mimalloc rather than the system allocator: the webhook allocates and frees a JSON tree per
/// review across worker threads, where glibc's malloc took a fifth of the request path's CPU.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// celgate: ValidatingAdmissionPolicy and MutatingAdmissionPolicy for any cluster, as CRDs.
///
/// Without a command, celgate runs the operator (as `celgate run`).
#[derive(Parser, Debug)]
#[command(version, about, args_conflicts_with_subcommands = true)]
struct Cli {
    #[command(subcommand)]
    command: Option<Command>,
    #[command(flatten)]
    run: RunArgs,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Run the operator and the admission webhook against the cluster in KUBECONFIG (or in-cluster).
    Run(Box<RunArgs>),
    /// Print the CRDs of celgate's four kinds as YAML, ready for `kubectl apply -f -`.
    Crds,
    /// Decide one admission request offline, with a trace of every expression
    /// (exit code 0 allowed, 1 denied, 2 wrong input).
    Eval(cli::eval::EvalArgs),
    /// Type-check policy files offline against the built-in kinds and CRD files
    /// (exit code 0 clean, 1 findings, 2 wrong input).
    Check(cli::check::CheckArgs),
}

#[derive(clap::Args, Debug)]
struct RunArgs {
    /// Address the webhook listens on.
    #[arg(long, env = "CELGATE_BIND_ADDRESS", default_value = "0.0.0.0")]
    bind_address: IpAddr,
    /// HTTPS port of the webhook.
    #[arg(long, env = "CELGATE_WEBHOOK_PORT", default_value_t = 9443)]
    webhook_port: u16,
    /// Base URL the API server calls the webhook at (out of cluster), e.g. https://127.0.0.1:9443.
    /// Without it, the webhook is registered as the Service below.
    #[arg(long, env = "CELGATE_WEBHOOK_URL")]
    webhook_url: Option<String>,
    /// celgate's own namespace: holds the certificate Secret and is excluded from the webhooks.
    #[arg(long, env = "CELGATE_NAMESPACE", default_value = "celgate-system")]
    namespace: String,
    /// Name of the webhook's Service (in cluster).
    #[arg(long, env = "CELGATE_SERVICE_NAME", default_value = "celgate-webhook")]
    service_name: String,
    /// Port of the webhook's Service (in cluster).
    #[arg(long, env = "CELGATE_SERVICE_PORT", default_value_t = 443)]
    service_port: i32,
    /// Name of the Secret holding the webhook CA and serving certificate.
    #[arg(
        long,
        env = "CELGATE_CERT_SECRET",
        default_value = "celgate-webhook-tls"
    )]
    cert_secret: String,
    /// Who writes the certificate Secret: `self` (celgate keeps its own CA, renews and
    /// re-creates it) or `cert-manager` (a Certificate writes tls.crt, tls.key and ca.crt;
    /// celgate only follows it).
    #[arg(long, env = "CELGATE_CERT_SOURCE", value_enum, default_value = "self")]
    cert_source: certs::CertSource,
    /// Which requests the policy webhooks are sent: `policies` (what the compiled policies'
    /// rules match; a policy over a resource no other policy matches waits for kube-apiserver
    /// to load the changed webhook configuration) or `all` (every resource, subresource and
    /// operation outside celgate's namespace: a new policy is enforced once compiled, but every
    /// write waits on celgate, and with failurePolicy Fail fails while celgate is unreachable).
    #[arg(
        long,
        env = "CELGATE_WEBHOOK_RULES",
        value_enum,
        default_value = "policies"
    )]
    webhook_rules: WebhookRules,
    /// On SIGTERM, seconds `/readyz` fails while requests are still served, so load balancers
    /// and Service endpoints stop sending new connections before the listener closes.
    #[arg(long, env = "CELGATE_SHUTDOWN_DELAY_SECONDS", default_value_t = 5)]
    shutdown_delay_seconds: u64,
    /// After that, seconds in-flight reviews may take to finish before the process exits
    /// (delay + grace must stay below the pod's terminationGracePeriodSeconds).
    #[arg(long, env = "CELGATE_SHUTDOWN_GRACE_SECONDS", default_value_t = 15)]
    shutdown_grace_seconds: u64,
    /// Plain-HTTP port serving `/metrics` (OpenMetrics text) on the bind address; 0 disables it.
    #[arg(long, env = "CELGATE_METRICS_PORT", default_value_t = 8080)]
    metrics_port: u16,
    /// Denials written to the decision log per second, at most (target `celgate::decision`);
    /// the rest are counted in `celgate_decision_log_dropped_total`. 0 disables the log.
    #[arg(long, env = "CELGATE_DECISION_LOG_RATE", default_value_t = 10)]
    decision_log_rate: u32,
    /// Log as JSON lines.
    #[arg(long, env = "CELGATE_LOG_JSON")]
    log_json: bool,
    /// Kubernetes compatibility version of new CEL expressions (1.33 to 1.36): a policy
    /// written or changed may only use CEL libraries introduced by then, as kube-apiserver's
    /// `--emulated-version` minus one decides. Stored expressions keep every library.
    #[arg(long, env = "CELGATE_CEL_COMPATIBILITY_VERSION", default_value_t = celgate_cel::Compatibility::DEFAULT)]
    cel_compatibility_version: celgate_cel::Compatibility,
    /// Name of the Lease whose holder writes status and events (every replica serves admission).
    #[arg(long, env = "CELGATE_LEASE_NAME", default_value = "celgate-leader")]
    lease_name: String,
    /// Namespace of the Lease; celgate's own namespace when unset.
    #[arg(long, env = "CELGATE_LEASE_NAMESPACE")]
    lease_namespace: Option<String>,
    /// Seconds a leader keeps the Lease without renewing it: how long status goes unwritten
    /// when the leader dies without releasing it.
    #[arg(long, env = "CELGATE_LEASE_DURATION_SECONDS", default_value_t = 15,
          value_parser = clap::value_parser!(u64).range(2..=3600))]
    lease_duration_seconds: u64,
    /// This replica's identity in the Lease; the pod name in a cluster (POD_NAME from the
    /// downward API), else `<host name>-<process id>`.
    #[arg(long, env = "POD_NAME")]
    identity: Option<String>,
}

#[derive(Debug, Error)]
enum RunError {
    #[error("cannot reach the cluster: {0} (set KUBECONFIG, or run in a pod)")]
    Client(#[source] kube::Error),
    #[error(
        "celgate's CRDs are not installed ({0}); install them with `celgate crds | kubectl apply -f -`"
    )]
    CrdsMissing(#[source] kube::Error),
    #[error("cannot create namespace {0}: {1}")]
    Namespace(String, #[source] kube::Error),
    #[error("--webhook-url {0:?} must be an https:// URL with a host")]
    WebhookUrl(String),
    #[error(transparent)]
    Certs(#[from] certs::CertError),
    #[error(transparent)]
    Server(#[from] celgate_webhook::ServerError),
    #[error("cannot render CRD YAML: {0}")]
    Yaml(#[from] celgate_crds::YamlError),
    #[error(transparent)]
    Cli(#[from] cli::CliError),
    #[error("the webhook server task ended abnormally: {0}")]
    Task(#[source] tokio::task::JoinError),
}

fn init_logging(json: bool) {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    let builder = tracing_subscriber::fmt().with_env_filter(filter);
    if json {
        builder.json().init();
    } else {
        builder.init();
    }
}

/// The host of an `https://host[:port][/path]` URL.
fn url_host(url: &str) -> Option<String> {
    let rest = url.strip_prefix("https://")?;
    let authority = rest.split('/').next()?;
    let host = if let Some(v6) = authority.strip_prefix('[') {
        v6.split(']').next()?
    } else {
        authority.rsplit_once(':').map_or(authority, |(h, _)| h)
    };
    (!host.is_empty()).then(|| host.to_string())
}

async fn ensure_namespace(client: &Client, name: &str) -> Result<(), RunError> {
    let api: Api<Namespace> = Api::all(client.clone());
    if api
        .get_opt(name)
        .await
        .map_err(|e| RunError::Namespace(name.into(), e))?
        .is_some()
    {
        return Ok(());
    }
    let ns = Namespace {
        metadata: ObjectMeta {
            name: Some(name.to_string()),
            ..Default::default()
        },
        ..Default::default()
    };
    match api.create(&PostParams::default(), &ns).await {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(s)) if s.code == 409 => Ok(()),
        Err(e) => Err(RunError::Namespace(name.into(), e)),
    }
}

async fn run(args: RunArgs) -> Result<(), RunError> {
    let client = Client::try_default().await.map_err(RunError::Client)?;
    Api::<celgate_crds::ValidatingAdmissionPolicy>::all(client.clone())
        .list(&ListParams::default().limit(1))
        .await
        .map_err(|e| match e {
            kube::Error::Api(ref s) if s.code == 404 => RunError::CrdsMissing(e),
            other => RunError::Client(other),
        })?;
    ensure_namespace(&client, &args.namespace).await?;

    let (endpoint, hosts) = match &args.webhook_url {
        Some(url) => {
            let host = url_host(url).ok_or_else(|| RunError::WebhookUrl(url.clone()))?;
            (Endpoint::Url(url.clone()), vec![host])
        }
        None => {
            let svc = format!("{}.{}.svc", args.service_name, args.namespace);
            (
                Endpoint::Service {
                    namespace: args.namespace.clone(),
                    name: args.service_name.clone(),
                    port: args.service_port,
                },
                vec![svc.clone(), format!("{svc}.cluster.local")],
            )
        }
    };
    let secret = cert_watch::SecretRef {
        namespace: args.namespace.clone(),
        name: args.cert_secret.clone(),
        hosts,
        source: args.cert_source,
    };
    let certificates = first_certificates(&client, &secret).await?;
    cert_watch::record(&certificates);
    let (registry, webhook_metrics) = metrics::registry(args.decision_log_rate);
    let metrics_server = match args.metrics_port {
        0 => None,
        port => {
            let addr = SocketAddr::new(args.bind_address, port);
            let server = celgate_webhook::MetricsServer::bind(addr, Arc::new(registry)).await?;
            info!(%addr, "metrics listening");
            Some(server)
        }
    };
    let store = celgate_snapshot::SnapshotStore::new();
    let deps = celgate_snapshot::Deps {
        authorizers: Some(std::sync::Arc::new(authorizer::SarAuthorizers::new(
            client.clone(),
        ))),
        compatibility: args.cel_compatibility_version,
    };
    let addr = SocketAddr::new(args.bind_address, args.webhook_port);
    let server = celgate_webhook::Server::new(
        addr,
        store.clone(),
        deps,
        celgate_webhook::TlsMaterial {
            cert_pem: certificates.cert_pem.clone(),
            key_pem: certificates.key_pem.clone(),
        },
        webhook_metrics,
    )
    .await?;
    info!(%addr, "webhook listening");

    let identity = args
        .identity
        .clone()
        .unwrap_or_else(leader::default_identity);
    let election = leader::Election::start(
        client.clone(),
        leader::LeaseConfig {
            name: args.lease_name.clone(),
            namespace: args
                .lease_namespace
                .clone()
                .unwrap_or_else(|| args.namespace.clone()),
            duration_seconds: args.lease_duration_seconds,
            identity: identity.clone(),
        },
    );
    let (ca_sender, ca) = tokio::sync::watch::channel(certificates.ca_pem.clone());
    let registration = Registration {
        create_missing: matches!(endpoint, Endpoint::Url(_)),
        endpoint,
        namespace: args.namespace.clone(),
        rules: args.webhook_rules,
    };
    // One discovery and one schema cache serve the type checker and the mutated kinds.
    let discovery = discovery::Discovery::spawn(client.clone());
    let schema_cache = Arc::new(schemas::SchemaCache::new(client.clone()));
    let status = controllers::StatusConfig {
        leadership: election.leadership.clone(),
        checker: status::ClusterChecker::start(discovery.clone(), schema_cache.clone()),
        identity,
    };
    let schema_source = mutating::SchemaSource {
        discovery,
        cache: schema_cache,
        built_in_groups: Arc::new(cli::types::builtin_groups()?),
    };
    // Serving and the controllers run as tasks of their own, so both go on while a stopping
    // replica drains.
    let mut serving = tokio::spawn({
        let server = server.clone();
        async move { server.serve().await }
    });
    let controllers = tokio::spawn(controllers::run(
        client.clone(),
        store,
        registration,
        ca,
        status,
        schema_source,
    ));
    let certificates_followed = tokio::spawn(cert_watch::follow(
        client.clone(),
        secret,
        server.clone(),
        certificates,
        ca_sender,
    ));
    tokio::spawn(metrics::follow_leadership(election.leadership.clone()));
    let serving_metrics = async move {
        match metrics_server {
            Some(server) => server.serve().await,
            None => std::future::pending().await,
        }
    };
    let outcome = tokio::select! {
        served = &mut serving => Some(served),
        served = serving_metrics => Some(Ok(served)),
        () = shutdown_signal() => None,
    };
    let outcome = match outcome {
        Some(served) => served
            .map_err(RunError::Task)
            .and_then(|r| r.map_err(RunError::from)),
        None => {
            stop_gracefully(
                &server,
                &mut serving,
                election,
                Duration::from_secs(args.shutdown_delay_seconds),
                Duration::from_secs(args.shutdown_grace_seconds),
            )
            .await;
            Ok(())
        }
    };
    controllers.abort();
    certificates_followed.abort();
    outcome
}

/// The certificates to start serving with. With cert-manager, waits (logging) until the
/// Secret is issued; the probes fail meanwhile, since nothing listens yet.
async fn first_certificates(
    client: &Client,
    secret: &cert_watch::SecretRef,
) -> Result<certs::Certificates, RunError> {
    let mut retry = backoff::Backoff::new(Duration::from_secs(1), Duration::from_secs(30));
    loop {
        match secret.load(client).await {
            Ok(certificates) => return Ok(certificates),
            Err(e @ (certs::CertError::NotIssued(_) | certs::CertError::Incomplete(..)))
                if secret.source == certs::CertSource::CertManager =>
            {
                let delay = retry.next_delay();
                info!(error = %e, retry_in_s = delay.as_secs_f64(), "waiting for the serving certificate");
                tokio::time::sleep(delay).await;
            }
            Err(e) => return Err(e.into()),
        }
    }
}

/// A graceful stop: `/readyz` fails at once and the Lease is released, requests are served for
/// `delay` more (endpoints and load balancers stop sending new connections), then the listener
/// closes, HTTP/2 clients are told to go elsewhere, and in-flight reviews get `grace` to finish.
async fn stop_gracefully(
    server: &celgate_webhook::Server,
    serving: &mut tokio::task::JoinHandle<Result<(), celgate_webhook::ServerError>>,
    election: leader::Election,
    delay: Duration,
    grace: Duration,
) {
    info!(
        delay_s = delay.as_secs(),
        grace_s = grace.as_secs(),
        "stopping: readiness off, still serving"
    );
    server.drain();
    tokio::join!(election.stop(), tokio::time::sleep(delay));
    info!(
        connections = server.connections(),
        "closing the listener; in-flight reviews finish"
    );
    server.shutdown(grace);
    match tokio::time::timeout(grace + Duration::from_secs(1), serving).await {
        Ok(_) => info!("stopped"),
        Err(_) => warn!(
            connections = server.connections(),
            "stopped with reviews still in flight after the grace period"
        ),
    }
}

/// Completes on SIGINT (Ctrl-C) or SIGTERM (what the kubelet sends a stopping pod).
async fn shutdown_signal() {
    let terminate = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut terminate) => {
                terminate.recv().await;
            }
            Err(e) => {
                error!(error = %e, "cannot listen for SIGTERM; only Ctrl-C stops celgate gracefully");
                std::future::pending::<()>().await;
            }
        }
    };
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        () = terminate => {}
    }
}

fn print_crds() -> Result<(), RunError> {
    for (_, crd) in celgate_crds::crds() {
        println!("---\n{}", celgate_crds::to_yaml(&crd)?);
    }
    Ok(())
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.command.unwrap_or(Command::Run(Box::new(cli.run))) {
        Command::Crds => print_crds(),
        Command::Check(args) => {
            return cli::run(move || cli::check::run(&args, &mut std::io::stdout().lock()));
        }
        Command::Eval(args) => {
            return cli::run(move || cli::eval::run(&args, &mut std::io::stdout().lock()));
        }
        Command::Run(args) => {
            let args = *args;
            init_logging(args.log_json);
            if rustls::crypto::ring::default_provider()
                .install_default()
                .is_err()
            {
                error!("a TLS crypto provider was already installed");
            }
            match tokio::runtime::Builder::new_multi_thread()
                .thread_stack_size(celgate_snapshot::dispatch::THREAD_STACK_BYTES)
                .enable_all()
                .build()
            {
                Ok(rt) => rt.block_on(run(args)),
                Err(e) => {
                    eprintln!("celgate: cannot start the async runtime: {e}");
                    return ExitCode::FAILURE;
                }
            }
        }
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("celgate: {e}");
            ExitCode::FAILURE
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    #[test]
    fn cli_is_well_formed() {
        Cli::command().debug_assert();
    }

    #[test]
    fn no_command_runs_the_operator_and_offline_commands_parse_their_arguments() {
        let cli = Cli::try_parse_from(["celgate", "--webhook-port", "9444"]).expect("parses");
        assert!(cli.command.is_none());
        assert_eq!(cli.run.webhook_port, 9444);
        let cli = Cli::try_parse_from(["celgate", "run", "--log-json"]).expect("parses");
        assert!(matches!(cli.command, Some(Command::Run(args)) if args.log_json));

        let cli = Cli::try_parse_from([
            "celgate",
            "eval",
            "--policy",
            "p.yaml",
            "--binding",
            "b1.yaml",
            "b2.yaml",
            "--object",
            "o.yaml",
            "--params",
            "a.yaml",
            "b.yaml",
            "--operation",
            "delete",
            "-o",
            "json",
        ])
        .expect("parses");
        let Some(Command::Eval(args)) = cli.command else {
            panic!("not eval: {:?}", cli.command);
        };
        assert_eq!(args.binding.len(), 2);
        assert_eq!(args.params.len(), 2);
        assert_eq!(args.operation, Some(cli::eval::Operation::Delete));
        assert_eq!(args.output, cli::Format::Json);
        assert_eq!(args.user, "celgate-eval");
        assert_eq!(args.groups, vec!["system:authenticated".to_string()]);

        let missing = Cli::try_parse_from(["celgate", "eval", "--policy", "p.yaml"]);
        let err = missing.expect_err("--binding and --object are required");
        assert_eq!(err.exit_code(), i32::from(cli::EXIT_USAGE));
        let mixed = Cli::try_parse_from(["celgate", "--webhook-port", "1", "eval"]);
        assert!(
            mixed.is_err(),
            "operator flags do not go with an offline command"
        );
    }

    #[test]
    fn url_hosts() {
        assert_eq!(
            url_host("https://127.0.0.1:9443").as_deref(),
            Some("127.0.0.1")
        );
        assert_eq!(
            url_host("https://celgate.example.com/x").as_deref(),
            Some("celgate.example.com")
        );
        assert_eq!(url_host("https://[::1]:9443").as_deref(), Some("::1"));
        assert_eq!(url_host("http://127.0.0.1"), None);
        assert_eq!(url_host("https://"), None);
    }
}
