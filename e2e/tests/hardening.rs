//! celgate as the cluster's fail-closed component, against a real control plane whose
//! kube-apiserver presents credentials to webhooks (the AdmissionConfiguration of `up.sh`):
//!
//! 1. With `--client-ca-file` (names pinned), then with `--token-file`, kube-apiserver decides
//!    through celgate; a forged review without the certificate or token is answered 401 and
//!    makes no SubjectAccessReview (counted in the API server's audit log), while the same
//!    review with them is decided and makes one. Spellings of the routes (percent-encoded,
//!    doubled or trailing slashes, case, dot segments), over HTTP/1.1 and HTTP/2, are answered
//!    401 without credentials and 404 with them: never decided.
//! 2. With celgate stopped and a fail-closed policy over everything (and `kubectl exec`) bound
//!    everywhere, writes and exec fail in ordinary namespaces, but Pods, Leases and ConfigMaps
//!    in `kube-system`, exec into its Pods, Leases and Events anywhere, and the deletion of
//!    celgate's own policies go through.
//! 3. The live configuration edited by hand (failurePolicy) or deleted is put back by the
//!    leader; the times are reported.
//! 4. kube-apiserver restarted five times under load: after each, the next policy change is
//!    enforced; the times are reported.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use celgate_e2e::demo::CELGATE_API;
use celgate_e2e::{Celgate, Cluster, configmap_create_review, create_namespace, curl, wait_for};
use k8s_openapi::api::admissionregistration::v1::ValidatingWebhookConfiguration;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{ConfigMap, Event, Pod};
use kube::Api;
use kube::api::PostParams;
use serde_json::json;

/// The name on kube-apiserver's webhook client certificate (`up.sh`).
const CLIENT_NAME: &str = "kube-apiserver-webhook-client";

/// A ConfigMap named `name` with label `verdict`.
fn config_map(name: &str, verdict: &str) -> ConfigMap {
    serde_json::from_value(json!({"metadata": {"name": name, "labels": {"verdict": verdict}}}))
        .unwrap_or_else(|e| panic!("config map: {e}"))
}

/// Creates (as a dry run) a ConfigMap in `namespace`; the API server's error message if refused.
async fn try_create(client: &kube::Client, namespace: &str, verdict: &str) -> Result<(), String> {
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), namespace);
    let dry_run = PostParams {
        dry_run: true,
        ..PostParams::default()
    };
    api.create(&dry_run, &config_map("probe", verdict))
        .await
        .map(|_| ())
        .map_err(|e| e.to_string())
}

/// A policy and its binding: ConfigMaps in `namespace` must pass `expression`.
fn config_map_policy(name: &str, namespace: &str, expression: &str, message: &str) -> String {
    format!(
        "apiVersion: {CELGATE_API}\nkind: ValidatingAdmissionPolicy\nmetadata:\n  name: {name}\nspec:\n  failurePolicy: Fail\n  matchConstraints:\n    resourceRules:\n    - {{apiGroups: [\"\"], apiVersions: [v1], operations: [CREATE], resources: [configmaps]}}\n  validations:\n  - expression: \"{expression}\"\n    message: \"{message}\"\n---\napiVersion: {CELGATE_API}\nkind: ValidatingAdmissionPolicyBinding\nmetadata:\n  name: {name}\nspec:\n  policyName: {name}\n  validationActions: [Deny]\n  matchResources:\n    namespaceSelector:\n      matchLabels: {{kubernetes.io/metadata.name: {namespace}}}\n"
    )
}

/// Waits (30 s at most) until a ConfigMap created in `namespace` is denied with `message`.
async fn wait_denied(client: &kube::Client, namespace: &str, verdict: &str, message: &str) {
    wait_for(
        &format!("a ConfigMap in {namespace} denied with {message:?}"),
        Duration::from_secs(30),
        || async {
            match try_create(client, namespace, verdict).await {
                Err(e) if e.contains(message) => Some(()),
                _ => None,
            }
        },
    )
    .await;
}

/// SubjectAccessReviews created so far, from the API server's audit log.
fn access_reviews(cluster: &Cluster) -> usize {
    access_review_users(cluster).len()
}

/// Who created each SubjectAccessReview so far, and when, in order.
fn access_review_users(cluster: &Cluster) -> Vec<String> {
    let log = std::fs::read_to_string(cluster.dir().join("audit.log")).unwrap_or_default();
    log.lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .filter(|e| {
            e["stage"] == "ResponseComplete"
                && e["verb"] == "create"
                && e["objectRef"]["resource"] == "subjectaccessreviews"
        })
        .map(|e| {
            format!(
                "{} at {}",
                e["user"]["username"], e["requestReceivedTimestamp"]
            )
        })
        .collect()
}

/// A review kube-apiserver could send for a ConfigMap created in `namespace` by `user`.
fn forged_review(namespace: &str, user: &str) -> String {
    let object = json!({"apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": "forged", "namespace": namespace}});
    configmap_create_review(namespace, &object, user, false).to_string()
}

/// Spellings of the admission routes that are not the routes (sent as they are, `--path-as-is`).
const NOT_ROUTES: [&str; 9] = [
    "/validate/%66ail",
    "/validate/fai%6c",
    "/mutate/%66ail/never",
    "/mutate/fail/%6eever",
    "//validate/fail",
    "/validate/fail/",
    "/Validate/fail",
    "/validate/./fail",
    "/validate/x/../fail",
];

/// POSTs `body` to celgate's `path` with extra curl `args`; the HTTP status.
fn post(celgate: &Celgate, path: &str, body: &str, args: &[&str]) -> u16 {
    let url = format!("https://127.0.0.1:{}{path}?timeout=10s", celgate.port);
    // HTTP/1.1: a refused review's body is never read, and over HTTP/2 the stream is then
    // reset after the answer, which curl (unlike Go's client) may report instead of it.
    let mut all = vec![
        "--http1.1",
        "-sk",
        "-o",
        "/dev/null",
        "-w",
        "%{http_code}",
        "-X",
        "POST",
        "-H",
        "content-type: application/json",
        "--data-binary",
        body,
    ];
    all.extend_from_slice(args);
    all.push(&url);
    let out = curl(&all);
    String::from_utf8_lossy(&out.stdout)
        .trim()
        .parse()
        .ok()
        .filter(|status| *status != 0)
        .unwrap_or_else(|| panic!("curl {path} failed: {out:?}\n{}", celgate.logs()))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kube_apiserver_authenticates_and_forged_reviews_get_401_and_no_access_review() {
    let cluster = Cluster::start();
    cluster.install_crds();
    let client = cluster.client().await;
    create_namespace(&client, "guarded", "celgate").await;
    let pki = cluster.dir().join("pki");
    let path = |file: &str| pki.join(file).to_string_lossy().into_owned();
    let (ca, token_file) = (path("ca.crt"), path("webhook-token"));
    let token = std::fs::read_to_string(&token_file)
        .unwrap_or_else(|e| panic!("{token_file}: {e}"))
        .trim()
        .to_string();
    let (admin_cert, admin_key) = (path("admin.crt"), path("admin.key"));
    let (client_cert, client_key) = (path("webhook-client.crt"), path("webhook-client.key"));
    let forged = forged_review("guarded", "mallory");
    let bearer = format!("authorization: Bearer {token}");

    // The audit evaluates the namespace's ConfigMaps (asking the authorizer) whenever it runs:
    // off, so every SubjectAccessReview counted below comes from a review.
    for (mode, args) in [
        (
            "client certificate",
            vec![
                "--client-ca-file",
                &ca,
                "--client-names",
                CLIENT_NAME,
                "--audit=false",
            ],
        ),
        (
            "bearer token",
            vec!["--token-file", &token_file, "--audit=false"],
        ),
    ] {
        let celgate = Celgate::start_with(&cluster, &args).await;
        // The policy asks the authorizer, so every evaluation makes a SubjectAccessReview.
        cluster.apply(&config_map_policy(
            "secret-readers",
            "guarded",
            "!authorizer.group('').resource('secrets').namespace(object.metadata.namespace).check('get').allowed()",
            "who may read secrets may not create config maps here",
        ));
        // kube-apiserver authenticates with the AdmissionConfiguration and celgate decides.
        wait_denied(
            &client,
            "guarded",
            "any",
            "who may read secrets may not create config maps here",
        )
        .await;

        let before = access_reviews(&cluster);
        let wrong_token = "authorization: Bearer not-the-token".to_string();
        let refused: Vec<(&str, Vec<&str>)> = vec![
            ("no credentials", vec![]),
            (
                "a certificate of the cluster CA with another name",
                vec!["--cert", &admin_cert, "--key", &admin_key],
            ),
            ("a wrong token", vec!["-H", &wrong_token]),
        ];
        for (what, extra) in &refused {
            for endpoint in ["/validate/fail", "/validate/ignore", "/validate-policies"] {
                assert_eq!(
                    post(&celgate, endpoint, &forged, extra),
                    401,
                    "{mode}: a forged review to {endpoint} with {what}"
                );
            }
        }
        let accepted = match mode {
            "client certificate" => vec!["--cert", &client_cert, "--key", &client_key],
            _ => vec!["-H", &bearer],
        };
        let mut spellings = 0;
        for path in NOT_ROUTES {
            // Over HTTP/2 without a body: the refusals do not read it, and curl may report the
            // stream then reset (or the connection closed after a 401) instead of the answer.
            for (protocol, body) in [("--http1.1", forged.as_str()), ("--http2", "")] {
                let plain = [protocol, "--path-as-is"];
                assert_eq!(
                    post(&celgate, path, body, &plain),
                    401,
                    "{mode}: {path} ({protocol}) without credentials"
                );
                let mut credentials = plain.to_vec();
                credentials.extend_from_slice(&accepted);
                assert_eq!(
                    post(&celgate, path, body, &credentials),
                    404,
                    "{mode}: {path} ({protocol}) with credentials"
                );
                spellings += 2;
            }
        }
        // The audit log is written as requests complete; give a stray review time to show.
        tokio::time::sleep(Duration::from_secs(2)).await;
        assert_eq!(
            access_reviews(&cluster),
            before,
            "{mode}: a refused review made a SubjectAccessReview (all of them: {:?})",
            access_review_users(&cluster)
        );
        // The same review with kube-apiserver's credentials is decided, and is seen asking.
        assert_eq!(post(&celgate, "/validate/fail", &forged, &accepted), 200);
        wait_for(
            "the accepted review's SubjectAccessReview in the audit log",
            Duration::from_secs(10),
            || async { (access_reviews(&cluster) > before).then_some(()) },
        )
        .await;
        eprintln!(
            "hardening: {mode}: kube-apiserver decided through celgate; {} forged reviews answered 401 \
             or 404 and made no SubjectAccessReview (audit log: {before} before and after); the same \
             review with kube-apiserver's credentials was decided",
            refused.len() * 3 + spellings
        );
        // SIGTERM: the Lease is released, so the next process leads (and registers) at once.
        let mut celgate = celgate;
        celgate.terminate(Duration::from_secs(30));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_celgate_stopped_a_fail_closed_policy_over_everything_locks_nothing_out() {
    let cluster = Cluster::start();
    cluster.install_crds();
    let client = cluster.client().await;
    let mut celgate = Celgate::start(&cluster).await;
    let pod = |name: &str| -> Pod {
        serde_json::from_value(json!({"metadata": {"name": name},
            "spec": {"containers": [{"name": "c", "image": "registry.example/app:1"}]}}))
        .unwrap_or_else(|e| panic!("pod: {e}"))
    };
    let post = PostParams::default();
    Api::<Pod>::namespaced(client.clone(), "default")
        .create(&post, &pod("exec-target"))
        .await
        .unwrap_or_else(|e| panic!("a Pod in default: {e}"));
    // `kubectl exec` into a Pod of `namespace`: kube-apiserver's answer (admission comes first;
    // no node runs the Pod, so one admitted fails with `does not have a host assigned`).
    let exec = |namespace: &str, name: &str| {
        let out = cluster.kubectl(&["exec", "-n", namespace, name, "--", "ls"], "");
        String::from_utf8_lossy(&out.stderr).into_owned()
    };
    cluster.apply(&format!(
        "apiVersion: {CELGATE_API}\nkind: ValidatingAdmissionPolicy\nmetadata:\n  name: deny-everything\nspec:\n  failurePolicy: Fail\n  matchConstraints:\n    resourceRules:\n    - {{apiGroups: [\"*\"], apiVersions: [\"*\"], operations: [\"*\"], resources: [\"*/*\"]}}\n    - {{apiGroups: [\"\"], apiVersions: [\"v1\"], operations: [\"CONNECT\"], resources: [\"pods/exec\"]}}\n  validations:\n  - expression: \"false\"\n    message: everything is denied\n---\napiVersion: {CELGATE_API}\nkind: ValidatingAdmissionPolicyBinding\nmetadata:\n  name: deny-everything\nspec:\n  policyName: deny-everything\n  validationActions: [Deny]\n"
    ));
    wait_denied(&client, "default", "any", "everything is denied").await;
    let denied = exec("default", "exec-target");
    assert!(
        denied.contains("everything is denied"),
        "exec into default, celgate up: {denied}"
    );
    celgate.kill();

    // Ordinary writes now fail: the webhook is fail-closed and unreachable.
    let refused = try_create(&client, "default", "any").await;
    assert!(
        refused
            .as_ref()
            .is_err_and(|e| e.contains("failed calling webhook")),
        "a ConfigMap in default while celgate is down: {refused:?}"
    );
    let refused = exec("default", "exec-target");
    assert!(
        refused.contains("failed calling webhook"),
        "exec into default while celgate is down: {refused}"
    );
    let lease = |name: &str| -> Lease {
        serde_json::from_value(json!({"metadata": {"name": name}, "spec": {"holderIdentity": "x"}}))
            .unwrap_or_else(|e| panic!("lease: {e}"))
    };
    // kube-system is excluded.
    Api::<ConfigMap>::namespaced(client.clone(), "kube-system")
        .create(&post, &config_map("while-down", "any"))
        .await
        .unwrap_or_else(|e| panic!("a ConfigMap in kube-system: {e}"));
    Api::<Lease>::namespaced(client.clone(), "kube-system")
        .create(&post, &lease("while-down"))
        .await
        .unwrap_or_else(|e| panic!("a Lease in kube-system: {e}"));
    Api::<Pod>::namespaced(client.clone(), "kube-system")
        .create(&post, &pod("while-down"))
        .await
        .unwrap_or_else(|e| panic!("a Pod in kube-system: {e}"));
    // The break-glass: exec into kube-system passes admission.
    let admitted = exec("kube-system", "while-down");
    assert!(
        admitted.contains("does not have a host assigned"),
        "exec into kube-system while celgate is down: {admitted}"
    );
    // Leases and Events are never sent, in any namespace.
    Api::<Lease>::namespaced(client.clone(), "default")
        .create(&post, &lease("while-down"))
        .await
        .unwrap_or_else(|e| panic!("a Lease in default: {e}"));
    let event: Event = serde_json::from_value(json!({"metadata": {"name": "while-down"},
        "involvedObject": {"kind": "Namespace", "name": "default"},
        "reason": "Test", "message": "written while celgate is down", "type": "Normal"}))
    .unwrap_or_else(|e| panic!("event: {e}"));
    Api::<Event>::namespaced(client.clone(), "default")
        .create(&post, &event)
        .await
        .unwrap_or_else(|e| panic!("an Event in default: {e}"));
    // The namespaces of the nodes' heartbeats and of the bootstrap cluster-info are excluded.
    Api::<Lease>::namespaced(client.clone(), "kube-node-lease")
        .create(&post, &lease("while-down"))
        .await
        .unwrap_or_else(|e| panic!("a Lease in kube-node-lease: {e}"));
    Api::<ConfigMap>::namespaced(client.clone(), "kube-public")
        .create(&post, &config_map("while-down", "any"))
        .await
        .unwrap_or_else(|e| panic!("a ConfigMap in kube-public: {e}"));
    // What the cluster heals itself with is never sent: a node and its status, a
    // CertificateSigningRequest, a Service IP address, an APIService.
    cluster.apply(
        "apiVersion: v1\nkind: Node\nmetadata:\n  name: while-down\n---\n\
         apiVersion: networking.k8s.io/v1\nkind: IPAddress\nmetadata:\n  name: 10.0.0.250\n\
         spec:\n  parentRef: {group: \"\", resource: services, namespace: default, name: x}\n---\n\
         apiVersion: apiregistration.k8s.io/v1\nkind: APIService\nmetadata:\n  name: v1.while-down.example.com\n\
         spec: {group: while-down.example.com, version: v1, groupPriorityMinimum: 100, versionPriority: 100}\n",
    );
    cluster.kubectl_ok(&[
        "patch",
        "node",
        "while-down",
        "--subresource=status",
        "--type=merge",
        "-p",
        r#"{"status":{"conditions":[{"type":"Ready","status":"True","reason":"KubeletReady","message":"written while celgate is down"}]}}"#,
    ]);
    cluster.apply(&format!(
        "apiVersion: certificates.k8s.io/v1\nkind: CertificateSigningRequest\nmetadata:\n  name: while-down\n\
         spec:\n  signerName: kubernetes.io/kube-apiserver-client\n  usages: [client auth]\n  request: {}\n",
        certificate_request()
    ));
    // celgate's own policies can be deleted.
    cluster.kubectl_ok(&[
        "delete",
        "validatingadmissionpolicybindings.admission.celgate.io/deny-everything",
        "validatingadmissionpolicies.admission.celgate.io/deny-everything",
    ]);
    eprintln!(
        "hardening: celgate stopped, fail-closed policy over everything and exec: ConfigMap and exec in \
         default refused; ConfigMap, Lease and Pod in kube-system created and exec into it admitted, \
         Lease and Event in default, Lease in kube-node-lease, ConfigMap in kube-public, Node and its \
         status, IPAddress, APIService and CSR created; the policy deleted"
    );
}

/// A PEM certificate request for a new key, base64-encoded as a CSR's `spec.request` holds it.
fn certificate_request() -> String {
    let out = std::process::Command::new("sh")
        .args([
            "-c",
            "openssl req -new -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes \
             -keyout /dev/null -subj /CN=while-down 2>/dev/null | base64 -w0",
        ])
        .output()
        .unwrap_or_else(|e| panic!("cannot run openssl: {e}"));
    let encoded = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success() && !encoded.is_empty(),
        "openssl req | base64 failed"
    );
    encoded
}

/// The failurePolicy of celgate's fail-closed webhook as the API server holds it.
async fn fail_closed_policy(api: &Api<ValidatingWebhookConfiguration>) -> Option<String> {
    let cfg = api.get_opt("celgate").await.ok().flatten()?;
    cfg.webhooks?
        .into_iter()
        .find(|w| w.name == "validate.celgate.io")?
        .failure_policy
}

/// How long (30 s at most) until the fail-closed webhook is fail-closed again, from now.
async fn put_back(api: &Api<ValidatingWebhookConfiguration>, what: &str) -> Duration {
    let changed = Instant::now();
    wait_for(what, Duration::from_secs(30), || async {
        (fail_closed_policy(api).await.as_deref() == Some("Fail")).then_some(())
    })
    .await;
    changed.elapsed()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_leader_puts_back_a_configuration_edited_or_deleted_by_hand() {
    let cluster = Cluster::start();
    cluster.install_crds();
    let client = cluster.client().await;
    create_namespace(&client, "drift", "celgate").await;
    let _celgate = Celgate::start(&cluster).await;
    cluster.apply(&config_map_policy(
        "no-deny",
        "drift",
        "object.metadata.labels.verdict != 'deny'",
        "denied by label",
    ));
    wait_denied(&client, "drift", "deny", "denied by label").await;
    let api: Api<ValidatingWebhookConfiguration> = Api::all(client.clone());
    assert_eq!(fail_closed_policy(&api).await.as_deref(), Some("Fail"));

    let index = api
        .get("celgate")
        .await
        .unwrap_or_else(|e| panic!("{e}"))
        .webhooks
        .unwrap_or_default()
        .iter()
        .position(|w| w.name == "validate.celgate.io")
        .unwrap_or_else(|| panic!("no validate.celgate.io webhook"));
    let patch = format!(
        "[{{\"op\": \"replace\", \"path\": \"/webhooks/{index}/failurePolicy\", \"value\": \"Ignore\"}}]"
    );
    cluster.kubectl_ok(&[
        "patch",
        "validatingwebhookconfiguration",
        "celgate",
        "--type=json",
        "-p",
        &patch,
    ]);
    let reverted_in = put_back(&api, "failurePolicy Fail put back").await;
    cluster.kubectl_ok(&["delete", "validatingwebhookconfiguration", "celgate"]);
    let recreated_in = put_back(&api, "the deleted configuration re-created").await;
    wait_denied(&client, "drift", "deny", "denied by label").await;
    eprintln!(
        "hardening: failurePolicy edited by hand put back {reverted_in:.2?} later; \
         the deleted configuration re-created {recreated_in:.2?} later"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn after_each_of_five_api_server_restarts_under_load_the_next_change_is_enforced() {
    const RESTARTS: usize = 5;
    let cluster = Cluster::start();
    cluster.install_crds();
    let client = cluster.client().await;
    create_namespace(&client, "restarts", "celgate").await;
    let _celgate = Celgate::start(&cluster).await;
    let policy = |denied: &[String]| {
        let list = denied
            .iter()
            .map(|d| format!("'{d}'"))
            .collect::<Vec<_>>()
            .join(", ");
        config_map_policy(
            "restarts",
            "restarts",
            &format!("!(object.metadata.labels.verdict in [{list}])"),
            "denied by label",
        )
    };
    let mut denied = vec!["deny-0".to_string()];
    cluster.apply(&policy(&denied));
    wait_denied(&client, "restarts", "deny-0", "denied by label").await;

    // Load: allowed creates back to back until the end.
    let stop = Arc::new(AtomicBool::new(false));
    let (sent, failed) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
    let load = {
        let (client, stop, sent, failed) =
            (client.clone(), stop.clone(), sent.clone(), failed.clone());
        tokio::spawn(async move {
            let mut rounds = 0u32;
            while !stop.load(Ordering::Relaxed) && rounds < 1_000_000 {
                rounds += 1;
                sent.fetch_add(1, Ordering::Relaxed);
                if let Err(e) = try_create(&client, "restarts", "allow").await
                    && e.contains("denied")
                {
                    failed.fetch_add(1, Ordering::Relaxed);
                }
            }
        })
    };

    let mut enforced = Vec::new();
    for round in 1..=RESTARTS {
        let away = tokio::task::block_in_place(|| cluster.restart_apiserver());
        let verdict = format!("deny-{round}");
        denied.push(verdict.clone());
        cluster.apply(&policy(&denied));
        let applied = Instant::now();
        wait_denied(&client, "restarts", &verdict, "denied by label").await;
        let took = applied.elapsed();
        eprintln!(
            "hardening: restart {round}: kube-apiserver away {away:.1} s; next change enforced {took:.0?} after kubectl apply returned"
        );
        enforced.push(took);
    }
    stop.store(true, Ordering::Relaxed);
    load.await.unwrap_or_else(|e| panic!("load task: {e}"));
    enforced.sort();
    eprintln!(
        "hardening: {RESTARTS} restarts: change enforced in {:?} (max {:.0?}); {} creates under load, {} wrongly denied",
        enforced,
        enforced.last().copied().unwrap_or_default(),
        sent.load(Ordering::Relaxed),
        failed.load(Ordering::Relaxed)
    );
    assert_eq!(
        failed.load(Ordering::Relaxed),
        0,
        "allowed creates were denied"
    );
}
