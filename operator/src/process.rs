//! The running process: checks the cluster, starts the metrics port, the webhook, the
//! controllers, certificate following and leader election in order, runs until SIGTERM or
//! Ctrl-C, then stops gracefully.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use celgate_kinds::builtin::{BuiltinDiscovery, BuiltinError};
use k8s_openapi::api::core::v1::Namespace;
use kube::api::{ListParams, ObjectMeta, PostParams};
use kube::{Api, Client};
use thiserror::Error;
use tracing::{error, info, warn};

use crate::args::RunArgs;
use crate::cluster::{authorizer, discovery, requirements, schemas};
use celgate_crds::{MutatingAdmissionPolicy, ValidatingAdmissionPolicy};
use celgate_snapshot::SnapshotStore;
use kube::runtime::reflector;
use tokio::sync::watch;

use crate::controllers::exceptions::{self, ExceptionNamespaces, ExceptionObjects};
use crate::controllers::mutated_schemas::{self, SchemaSource};
use crate::controllers::namespaces;
use crate::controllers::policies::{self, KindStores, Stores};
use crate::controllers::stored_binding;
use crate::serving::leader::Leadership;
use crate::serving::registration::{Applied, Inputs};
use crate::serving::registration::{Endpoint, Registration};
use crate::serving::{cert_watch, certs, fence, leader, registration};
use crate::status::exceptions as exceptions_status;
use crate::status::{Checker, StatusWriter};
use crate::{audit, metrics, retry, status};

/// Why the operator could not start, or stopped abnormally.
#[derive(Debug, Error)]
pub enum RunError {
    /// No client for the cluster.
    #[error("cannot reach the cluster: {0} (set KUBECONFIG, or run in a pod)")]
    Client(#[source] kube::Error),
    /// celgate's CRDs are not installed.
    #[error(
        "celgate's CRDs are not installed ({0}); install them with `celgate crds | kubectl apply -f -`"
    )]
    CrdsMissing(#[source] kube::Error),
    /// The cluster is too old, or does not serve an API celgate needs.
    #[error(transparent)]
    Requirements(#[from] requirements::RequirementError),
    /// celgate's namespace cannot be created.
    #[error("cannot create namespace {0}: {1}")]
    Namespace(String, #[source] kube::Error),
    /// `--webhook-url` is not an https URL with a host.
    #[error("--webhook-url {0:?} must be an https:// URL with a host")]
    WebhookUrl(String),
    /// The serving certificate cannot be loaded or created.
    #[error(transparent)]
    Certs(#[from] certs::CertError),
    /// The webhook or metrics server cannot start or failed.
    #[error(transparent)]
    Server(#[from] celgate_webhook::ServerError),
    /// The embedded built-in kinds cannot be read.
    #[error(transparent)]
    Builtin(#[from] BuiltinError),
    /// The async runtime cannot start.
    #[error("cannot start the async runtime: {0}")]
    Runtime(#[source] std::io::Error),
    /// The webhook server task panicked or was cancelled.
    #[error("the webhook server task ended abnormally: {0}")]
    Task(#[source] tokio::task::JoinError),
    /// A task that must run as long as the process (the controllers and watches, certificate
    /// following) ended or panicked: the process exits non-zero so the kubelet restarts it.
    #[error("the {task} stopped ({how}); exiting so that celgate is restarted")]
    TaskEnded {
        /// Which task.
        task: &'static str,
        /// How it ended: returned, or the panic.
        how: String,
    },
}

/// Waits for the first of `tasks`, which must all run for the life of the process, to end, and
/// names it and how it ended.
async fn supervise(tasks: Vec<(&'static str, tokio::task::JoinHandle<()>)>) -> RunError {
    use futures::FutureExt;
    if tasks.is_empty() {
        return std::future::pending().await;
    }
    let ended = tasks
        .into_iter()
        .map(|(task, handle)| handle.map(move |ended| (task, ended)).boxed());
    let ((task, ended), _, _) = futures::future::select_all(ended).await;
    let how = match ended {
        Ok(()) => "returned".to_string(),
        Err(error) if error.is_panic() => format!("panicked: {error}"),
        Err(error) => error.to_string(),
    };
    RunError::TaskEnded { task, how }
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

/// Runs the operator and its webhook until the process is told to stop: logging as `args`
/// say, on a multi-threaded runtime whose threads have the stack the engine needs.
pub fn run(args: RunArgs) -> Result<(), RunError> {
    init_logging(args.log_json);
    if rustls::crypto::ring::default_provider()
        .install_default()
        .is_err()
    {
        error!("a TLS crypto provider was already installed");
    }
    tokio::runtime::Builder::new_multi_thread()
        .thread_stack_size(celgate_snapshot::dispatch::THREAD_STACK_BYTES)
        .enable_all()
        .build()
        .map_err(RunError::Runtime)?
        .block_on(serve(args))
}

/// The client configuration of the cluster in `KUBECONFIG` (or the Pod's), without kube's retry layer:
/// every operation here retries with the delays of [`retry`], and the layer would wait out a
/// `Retry-After` (5 s from a kube-apiserver still starting its watch cache) before a watch
/// could see its error and list again.
async fn client_config() -> Result<kube::Config, RunError> {
    let mut config = kube::Config::infer()
        .await
        .map_err(|e| RunError::Client(kube::Error::InferConfig(e)))?;
    config.default_retry = false;
    Ok(config)
}

/// The client of the leader's writers (webhook configurations, status, events, reports):
/// [`client_config`]'s, with every write fenced by the leader Lease ([`fence`]).
fn fenced_client(config: kube::Config, fence: &fence::Fence) -> Result<Client, RunError> {
    Ok(kube::client::ClientBuilder::try_from(config)
        .map_err(RunError::Client)?
        .with_layer(&fence.layer())
        .build())
}

async fn serve(args: RunArgs) -> Result<(), RunError> {
    let config = client_config().await?;
    let client = Client::try_from(config.clone()).map_err(RunError::Client)?;
    let cluster_minor = requirements::check(&client).await?;
    let compatibility = args
        .cel_compatibility_version
        .unwrap_or_else(|| celgate_cel::Compatibility::for_cluster(cluster_minor));
    info!(cluster = %format!("1.{cluster_minor}"), %compatibility, "cluster supported; CEL compatibility version");
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
    let (registry, webhook_metrics) = metrics::registry(args.decision_log_rate);
    let store = celgate_snapshot::SnapshotStore::new();
    let deps = celgate_snapshot::Deps {
        authorizers: Some(std::sync::Arc::new(authorizer::SarAuthorizers::new(
            client.clone(),
        ))),
        compatibility,
    };
    let auth = celgate_webhook::Authenticator::load(&args.auth())
        .map_err(celgate_webhook::ServerError::from)?;
    let state = celgate_webhook::AppState::configured(
        store.clone(),
        deps.clone(),
        webhook_metrics,
        args.limits(),
        auth,
    )?;
    // The probes answer from now on: `/healthz` fails until the webhook listens (a
    // startupProbe covers a slow first certificate), `/readyz` until policies are published.
    if args.health_port != 0 {
        let addr = SocketAddr::new(args.bind_address, args.health_port);
        celgate_webhook::ProbeServer::start(addr, state.clone())?;
        info!(%addr, "probes listening");
    }
    let certificates = first_certificates(&client, &secret).await?;
    cert_watch::record(&certificates);
    let metrics_server = match args.metrics_port {
        0 => None,
        port => {
            let addr = SocketAddr::new(args.bind_address, port);
            let server =
                celgate_webhook::MetricsServer::bind(addr, Arc::new(registry), args.limits())
                    .await?;
            info!(%addr, "metrics listening");
            Some(server)
        }
    };
    let addr = SocketAddr::new(args.bind_address, args.webhook_port);
    let server = celgate_webhook::Server::new(
        addr,
        state.clone(),
        celgate_webhook::TlsMaterial {
            cert_pem: certificates.cert_pem.clone(),
            key_pem: certificates.key_pem.clone(),
        },
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
        exemptions: registration::Exemptions {
            namespaces: registration::excluded_namespaces(
                &args.namespace,
                &args.excluded_namespaces,
            ),
            never_sent: args.never_sent.clone(),
        },
        rules: args.webhook_rules,
        timeout_seconds: args.webhook_timeout_seconds,
    };
    // One discovery and one schema cache serve the type checker and the mutated kinds.
    let discovery = discovery::Discovery::spawn(client.clone());
    let schema_cache = Arc::new(schemas::SchemaCache::new(client.clone()));
    // The audit's own clients: their connections are made, and served, on its own runtime
    // ([`audit::apart`]), never on the webhook's.
    let audit_clients = if args.audit {
        Some((
            fenced_client(config.clone(), &election.fence)?,
            Client::try_from(config.clone()).map_err(RunError::Client)?,
        ))
    } else {
        None
    };
    let status = StatusConfig {
        leadership: election.leadership.clone(),
        client: fenced_client(config, &election.fence)?,
        checker: status::ClusterChecker::start(discovery.clone(), schema_cache.clone()),
        identity,
    };
    let audit = audit_clients.map(|(writes, reads)| Audit {
        client: writes,
        config: audit::AuditConfig {
            interval: Duration::from_secs(args.audit_interval_seconds),
            page_size: args.audit_page_size,
            pages_per_second: args.audit_pages_per_second,
            writes_per_second: args.audit_report_writes_per_second,
            excluded_namespaces: registration::excluded_namespaces(
                &args.namespace,
                &args.excluded_namespaces,
            ),
            secrets: args.audit_secrets,
            passes: args.audit_report_passes,
            report_api: args.audit_report_api,
        },
        discovery: discovery.clone(),
        deps: celgate_snapshot::Deps {
            authorizers: Some(Arc::new(authorizer::SarAuthorizers::new(reads))),
            ..deps
        },
    });
    let schema_source = mutated_schemas::SchemaSource {
        discovery,
        cache: schema_cache,
        built_in_groups: Arc::new(BuiltinDiscovery::load()?.groups()),
    };
    // Serving and the controllers run as tasks of their own, so both go on while a stopping
    // replica drains.
    let mut serving = tokio::spawn({
        let server = server.clone();
        async move { server.serve().await }
    });
    let controllers = tokio::spawn(run_controllers(
        client.clone(),
        store,
        registration,
        ca,
        status,
        Publishing {
            schemas: schema_source,
            wildcard: args.wildcard_operations(),
            max_param_bytes: args.param_max_mib.saturating_mul(1024 * 1024),
            exception_namespaces: ExceptionNamespaces::new(&args.exception_namespaces),
            excepted: {
                let state = state.clone();
                Arc::new(move || {
                    (state.metrics.excepted().into_iter())
                        .map(|(id, t)| (id, (t.requests, t.last)))
                        .collect()
                })
            },
        },
        audit,
    ));
    let certificates_followed = tokio::spawn(cert_watch::follow(
        client.clone(),
        secret,
        server.clone(),
        certificates,
        ca_sender,
    ));
    let leadership_metrics = tokio::spawn(metrics::follow_leadership(election.leadership.clone()));
    let aborts = [
        controllers.abort_handle(),
        certificates_followed.abort_handle(),
        leadership_metrics.abort_handle(),
    ];
    let supervised = supervise(vec![
        ("controllers and watches", controllers),
        ("certificate follower", certificates_followed),
        ("leadership metrics", leadership_metrics),
    ]);
    let serving_metrics = async move {
        match metrics_server {
            Some(server) => server.serve().await,
            None => std::future::pending().await,
        }
    };
    let outcome = tokio::select! {
        served = &mut serving => Some(served.map_err(RunError::Task).and_then(|r| r.map_err(RunError::from))),
        served = serving_metrics => Some(served.map_err(RunError::from)),
        ended = supervised => {
            error!(error = %ended, "stopping");
            Some(Err(ended))
        }
        () = shutdown_signal() => None,
    };
    // On SIGTERM, and when a supervised task ended (the webhook still serves the last
    // snapshot), drain as a stopping pod should; a server that stopped has nothing to drain.
    let (outcome, drain) = match outcome {
        Some(Err(ended @ RunError::TaskEnded { .. })) => (Err(ended), true),
        Some(served) => (served, false),
        None => (Ok(()), true),
    };
    if drain {
        stop_gracefully(
            &server,
            &mut serving,
            election,
            Duration::from_secs(args.shutdown_delay_seconds),
            Duration::from_secs(args.shutdown_grace_seconds),
        )
        .await;
    }
    for task in aborts {
        task.abort();
    }
    outcome
}

/// How status is written: by whom, when, and with what type checker.
struct StatusConfig {
    /// Whether this replica leads (writes status) now.
    pub leadership: Leadership,
    /// The client every leader-only write goes through, fenced by the Lease.
    pub client: Client,
    /// The type checker of policies.
    pub checker: Arc<dyn Checker>,
    /// This replica's identity, reported with its events.
    pub identity: String,
}

/// How policy sets are published: with the schemas of the kinds mutating policies match, with
/// what `*` in validating policies' operations stands for, and how much of each param kind is kept.
struct Publishing {
    schemas: SchemaSource,
    /// The namespaces PolicyExceptions are honoured from.
    exception_namespaces: ExceptionNamespaces,
    /// The requests each exception let through, from the webhook's metrics.
    excepted: exceptions_status::Tally,
    wildcard: celgate_engine::model::WildcardOperations,
    /// The most bytes of param objects kept of each param kind.
    max_param_bytes: usize,
}

/// The background audit's configuration and what it needs besides the stores.
struct Audit {
    /// Its client (leader's writes: fenced).
    client: Client,
    config: audit::AuditConfig,
    discovery: discovery::Discovery,
    deps: celgate_snapshot::Deps,
}

/// Runs the operator's controllers against `client` (the leader's writes against `status.client`) until the process stops or one of them ends, publishing into `store` (as
/// `publishing` says), registers the webhooks as `registration` says
/// (trusting the CA bundle on `ca`) while this replica leads, and writes status as `status`
/// says.
async fn run_controllers(
    client: Client,
    store: Arc<SnapshotStore>,
    registration: Registration,
    ca: watch::Receiver<String>,
    status: StatusConfig,
    publishing: Publishing,
    audit: Option<Audit>,
) {
    let Publishing {
        schemas,
        wildcard,
        max_param_bytes,
        exception_namespaces,
        excepted,
    } = publishing;
    let (exception_objects, exception_watch) = watch::channel(ExceptionObjects::default());
    let exception_status = exceptions_status::run(
        client.clone(),
        exception_watch,
        exception_namespaces.clone(),
        excepted,
        status.leadership.clone(),
        status.identity.clone(),
    );
    let (policies, policy_writer) = reflector::store();
    let (bindings, binding_writer) = stored_binding::store();
    let (mutating, mutating_writer) = reflector::store();
    let (mutating_bindings, mutating_binding_writer) = stored_binding::store();
    let (published, sets) = watch::channel(None);
    let (applied_sender, applied) = watch::channel(Applied::default());
    let (live_sender, live) = watch::channel(registration::Live::default());
    let rediscovered = schemas.rediscovered();
    let stores = Stores {
        validating: KindStores { policies, bindings },
        mutating: KindStores {
            policies: mutating,
            bindings: mutating_bindings,
        },
    };
    let (audit_client, audit_store, audit_stores) = (
        status.client.clone(),
        store.clone(),
        stores.validating.clone(),
    );
    let ctx = Arc::new(
        policies::Context::new(
            client.clone(),
            store.clone(),
            stores.clone(),
            published,
            Some(schemas),
            max_param_bytes,
        )
        .with_wildcard_operations(wildcard),
    );
    let writer = StatusWriter::new(
        status.client.clone(),
        status::Sources {
            stores,
            snapshot: store.clone(),
            applied,
            touched: ctx.touched(),
            spec_changes: ctx.spec_changes(),
        },
        status.checker,
        status.identity,
    );
    let audit_or_nothing = async {
        match audit {
            Some(a) => {
                let sources = audit::Sources {
                    store: audit_store,
                    stores: audit_stores,
                    discovery: a.discovery,
                    deps: a.deps,
                };
                let leadership = status.leadership.clone();
                audit::apart(audit::run(a.client, sources, leadership, a.config)).await;
            }
            None => {
                audit::clear_while_off(
                    audit_client,
                    audit_stores.bindings,
                    status.leadership.clone(),
                )
                .await;
            }
        }
    };
    // Each runs for the life of the process: the first to end is logged and ends them all,
    // and the supervisor then stops the process.
    let ended = tokio::select! {
        () = policies::run::<ValidatingAdmissionPolicy>(
            client.clone(),
            ctx.clone(),
            policy_writer,
            binding_writer,
            futures::stream::pending(),
        ) => "validating policy controller",
        () = policies::run::<MutatingAdmissionPolicy>(
            client.clone(),
            ctx,
            mutating_writer,
            mutating_binding_writer,
            rediscovered,
        ) => "mutating policy controller",
        () = exceptions::run(
            client.clone(),
            store.clone(),
            exception_namespaces,
            exception_objects,
        ) => "PolicyException watch",
        () = exception_status => "PolicyException status writer",
        () = namespaces::run(client.clone(), store) => "namespace watch",
        () = registration::watch_live(client.clone(), live_sender) => "webhook configuration watch",
        () = registration.keep_applied(
            status.client.clone(),
            Inputs {
                sets,
                ca,
                leadership: status.leadership.clone(),
                live,
            },
            applied_sender
        ) => "webhook registration",
        () = writer.run(status.leadership.clone()) => "status writer",
        () = audit_or_nothing => "audit",
    };
    error!(task = ended, "a controller stopped");
}

/// The certificates to start serving with. With cert-manager, waits (logging) until the
/// Secret is issued; the probes fail meanwhile, since nothing listens yet.
async fn first_certificates(
    client: &Client,
    secret: &cert_watch::SecretRef,
) -> Result<certs::Certificates, RunError> {
    let mut retry = retry::Backoff::new(retry::CLUSTER);
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

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn the_supervisor_reports_the_first_task_that_ends_or_panics() {
        let forever = || tokio::spawn(std::future::pending::<()>());
        let ended = supervise(vec![
            ("a", forever()),
            ("controllers and watches", tokio::spawn(async {})),
        ])
        .await;
        assert_eq!(
            ended.to_string(),
            "the controllers and watches stopped (returned); exiting so that celgate is restarted"
        );
        #[allow(clippy::panic)]
        let panicking = tokio::spawn(async { panic!("boom") });
        let ended = supervise(vec![("a", forever()), ("watch", panicking)]).await;
        let message = ended.to_string();
        assert!(
            message.starts_with("the watch stopped (panicked"),
            "{message}"
        );
        // Tasks still running are not reported.
        let ended = tokio::time::timeout(
            std::time::Duration::from_secs(5),
            supervise(vec![("b", forever())]),
        )
        .await;
        assert!(ended.is_err(), "a running task was reported");
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
