//! `celgate`: the operator with its co-located admission webhook, and offline commands.

mod authorizer;
mod backoff;
mod certs;
mod changes;
mod cli;
mod cluster_types;
mod controllers;
mod convert;
mod discovery;
mod identity;
mod leader;
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
use tracing::{error, info};

use registration::{Endpoint, Registration};

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
        .map_err(RunError::CrdsMissing)?;
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
    let certificates = certs::ensure(&client, &args.namespace, &args.cert_secret, &hosts).await?;
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
    )
    .await?;
    info!(%addr, "webhook listening");

    let registration = Registration {
        endpoint,
        ca_pem: certificates.ca_pem.clone(),
        namespace: args.namespace.clone(),
    };
    let rotation = {
        let (client, server, ns, secret) = (
            client.clone(),
            server.clone(),
            args.namespace.clone(),
            args.cert_secret.clone(),
        );
        async move {
            let mut current = certificates;
            loop {
                tokio::time::sleep(Duration::from_secs(3600)).await;
                match certs::ensure(&client, &ns, &secret, &hosts).await {
                    Ok(next) if next != current => {
                        if let Err(e) = server
                            .reload_tls(celgate_webhook::TlsMaterial {
                                cert_pem: next.cert_pem.clone(),
                                key_pem: next.key_pem.clone(),
                            })
                            .await
                        {
                            error!(error = %e, "cannot load the renewed serving certificate");
                        } else {
                            info!("serving certificate renewed");
                            current = next;
                        }
                    }
                    Ok(_) => {}
                    Err(e) => error!(error = %e, "cannot check the serving certificate"),
                }
            }
        }
    };
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
    let serving = server.clone();
    let outcome = tokio::select! {
        r = serving.serve() => r.map_err(RunError::from),
        () = controllers::run(client.clone(), store, registration, status, schema_source) => Ok(()),
        () = rotation => Ok(()),
        () = shutdown_signal() => {
            info!("shutting down");
            server.shutdown();
            Ok(())
        }
    };
    // Another replica takes over status at once instead of after the Lease expires.
    election.stop().await;
    outcome
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
