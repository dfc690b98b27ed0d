//! The caBundle follows the CA in the certificate Secret, end to end: the Secret deleted (celgate
//! mints a new CA), replaced by the user with their own CA, and written by an issuer in
//! `--cert-source=cert-manager` mode (celgate waits for it, never writes it, and follows its
//! renewals). After every change, requests are still decided through kube-apiserver, which
//! proves the serving certificate and the caBundle moved together.

// A test fails on the first thing that goes wrong.
#![allow(clippy::expect_used, clippy::unwrap_used)]

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use celgate_e2e::demo::CELGATE_API;
use celgate_e2e::{Celgate, Cluster, curl, free_port, wait_for};
use k8s_openapi::ByteString;
use k8s_openapi::api::admissionregistration::v1::{
    MutatingWebhookConfiguration, ValidatingWebhookConfiguration,
};
use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use kube::api::{Api, DeleteParams, ObjectMeta, PostParams};

const NAMESPACE: &str = "celgate-system";
const SECRET: &str = "celgate-webhook-tls";
const DENIED: &str =
    "ValidatingAdmissionPolicy 'cert-policy' with binding 'cert-binding' denied request";

const POLICY: &str = r#"
kind: ValidatingAdmissionPolicy
metadata:
  name: cert-policy
spec:
  failurePolicy: Fail
  matchConstraints:
    resourceRules:
    - {apiGroups: [""], apiVersions: [v1], operations: [CREATE], resources: [configmaps]}
  validations:
  - expression: "!has(object.data) || !('deny' in object.data)"
---
kind: ValidatingAdmissionPolicyBinding
metadata:
  name: cert-binding
spec:
  policyName: cert-policy
  validationActions: [Deny]
  matchResources:
    namespaceSelector:
      matchLabels: {kubernetes.io/metadata.name: default}
"#;

fn apply_policy(cluster: &Cluster) {
    let docs: Vec<String> = POLICY
        .split("---")
        .map(|d| format!("apiVersion: {CELGATE_API}{d}"))
        .collect();
    cluster.apply(&docs.join("\n---\n"));
}

/// A CA and a serving certificate for 127.0.0.1 made with openssl, as a user or an issuer
/// would: `(ca.crt, tls.crt, tls.key)`.
fn openssl_certificates(dir: &Path, name: &str) -> (String, String, String) {
    let dir = dir.join(name);
    std::fs::create_dir_all(&dir).expect("cert dir");
    let run = |args: &[&str]| {
        let out = Command::new("openssl")
            .args(args)
            .current_dir(&dir)
            .output()
            .expect("openssl");
        assert!(out.status.success(), "openssl {args:?}: {out:?}");
    };
    run(&[
        "req",
        "-x509",
        "-newkey",
        "rsa:2048",
        "-nodes",
        "-days",
        "30",
        "-subj",
        &format!("/CN={name}-ca"),
        "-addext",
        "basicConstraints=critical,CA:TRUE",
        "-addext",
        "keyUsage=critical,keyCertSign,cRLSign",
        "-keyout",
        "ca.key",
        "-out",
        "ca.crt",
    ]);
    run(&[
        "req",
        "-newkey",
        "rsa:2048",
        "-nodes",
        "-subj",
        "/CN=127.0.0.1",
        "-keyout",
        "tls.key",
        "-out",
        "tls.csr",
    ]);
    std::fs::write(
        dir.join("tls.ext"),
        "basicConstraints=critical,CA:FALSE\nkeyUsage=critical,digitalSignature,keyEncipherment\nextendedKeyUsage=serverAuth\nsubjectAltName=IP:127.0.0.1\n",
    )
    .expect("ext");
    run(&[
        "x509",
        "-req",
        "-in",
        "tls.csr",
        "-CA",
        "ca.crt",
        "-CAkey",
        "ca.key",
        "-CAcreateserial",
        "-days",
        "30",
        "-extfile",
        "tls.ext",
        "-out",
        "tls.crt",
    ]);
    let read = |f: &str| std::fs::read_to_string(dir.join(f)).expect("read pem");
    (read("ca.crt"), read("tls.crt"), read("tls.key"))
}

/// Writes the Secret as an issuer does: tls.crt, tls.key and ca.crt, no CA key.
async fn write_issued(client: &kube::Client, (ca, crt, key): &(String, String, String)) {
    let api: Api<Secret> = Api::namespaced(client.clone(), NAMESPACE);
    let existing = api.get_opt(SECRET).await.expect("read secret");
    let secret = Secret {
        metadata: ObjectMeta {
            name: Some(SECRET.into()),
            namespace: Some(NAMESPACE.into()),
            resource_version: existing.and_then(|s| s.metadata.resource_version),
            ..Default::default()
        },
        type_: Some("kubernetes.io/tls".into()),
        data: Some(
            [("ca.crt", ca), ("tls.crt", crt), ("tls.key", key)]
                .into_iter()
                .map(|(k, v)| (k.to_string(), ByteString(v.clone().into_bytes())))
                .collect(),
        ),
        ..Default::default()
    };
    if secret.metadata.resource_version.is_some() {
        api.replace(SECRET, &PostParams::default(), &secret)
            .await
            .expect("replace secret");
    } else {
        api.create(&PostParams::default(), &secret)
            .await
            .expect("create secret");
    }
}

async fn secret_ca(client: &kube::Client) -> Option<String> {
    let secret = Api::<Secret>::namespaced(client.clone(), NAMESPACE)
        .get_opt(SECRET)
        .await
        .ok()??;
    let bytes = secret.data?.get("ca.crt")?.0.clone();
    String::from_utf8(bytes).ok()
}

/// The caBundles of every celgate webhook, validating and mutating.
async fn bundles(client: &kube::Client) -> Vec<String> {
    let mut out = Vec::new();
    if let Ok(Some(v)) = Api::<ValidatingWebhookConfiguration>::all(client.clone())
        .get_opt("celgate")
        .await
    {
        out.extend(
            v.webhooks
                .unwrap_or_default()
                .into_iter()
                .filter_map(|w| w.client_config.ca_bundle),
        );
    }
    if let Ok(Some(m)) = Api::<MutatingWebhookConfiguration>::all(client.clone())
        .get_opt("celgate")
        .await
    {
        out.extend(
            m.webhooks
                .unwrap_or_default()
                .into_iter()
                .filter_map(|w| w.client_config.ca_bundle),
        );
    }
    out.into_iter()
        .map(|b| String::from_utf8_lossy(&b.0).into_owned())
        .collect()
}

/// Waits until every webhook's caBundle starts with `ca` (a replaced CA may follow it).
async fn wait_bundle_follows(client: &kube::Client, ca: &str, what: &str) {
    wait_for(what, Duration::from_secs(60), || async {
        let all = bundles(client).await;
        (!all.is_empty() && all.iter().all(|b| b.trim_start().starts_with(ca.trim()))).then_some(())
    })
    .await;
}

/// A request is decided through kube-apiserver (TLS from the API server to celgate works).
async fn wait_enforced(client: &kube::Client, what: &str) {
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), "default");
    let params = PostParams {
        dry_run: true,
        ..Default::default()
    };
    let mut n = 0;
    wait_for(what, Duration::from_secs(60), || {
        n += 1;
        let cm = ConfigMap {
            metadata: ObjectMeta {
                name: Some(format!("probe-{n}")),
                ..Default::default()
            },
            data: Some([("deny".to_string(), "1".to_string())].into()),
            ..Default::default()
        };
        let (api, params) = (api.clone(), params.clone());
        async move {
            match api.create(&params, &cm).await {
                Err(kube::Error::Api(s)) if s.message.contains(DENIED) => Some(()),
                _ => None,
            }
        }
    })
    .await;
}

#[tokio::test]
async fn the_ca_bundle_follows_the_secret_when_deleted_or_replaced() {
    let cluster = Cluster::start();
    cluster.install_crds();
    let client = cluster.client().await;
    let _celgate = Celgate::start(&cluster).await;
    apply_policy(&cluster);
    wait_enforced(&client, "the policy enforced").await;
    let first = secret_ca(&client).await.expect("celgate wrote its Secret");
    wait_bundle_follows(&client, &first, "the caBundle to be the Secret's CA").await;

    // Deleted: celgate mints a new CA, serves with it, and the caBundle follows.
    Api::<Secret>::namespaced(client.clone(), NAMESPACE)
        .delete(SECRET, &DeleteParams::default())
        .await
        .expect("delete the Secret");
    let second = wait_for(
        "a new CA in a new Secret",
        Duration::from_secs(60),
        || async { secret_ca(&client).await.filter(|ca| *ca != first) },
    )
    .await;
    wait_bundle_follows(&client, &second, "the caBundle to follow the new CA").await;
    let all = bundles(&client).await;
    assert!(
        all.iter().all(|b| b.contains(first.trim())),
        "the replaced CA stays trusted beside the new one while replicas switch"
    );
    wait_enforced(&client, "requests decided with the new certificate").await;

    // Replaced by the user with their own CA (no CA key): used as it is, and followed.
    let own = openssl_certificates(cluster.dir(), "user");
    write_issued(&client, &own).await;
    wait_bundle_follows(&client, &own.0, "the caBundle to follow the user's CA").await;
    wait_enforced(&client, "requests decided with the user's certificate").await;
    assert_eq!(
        secret_ca(&client).await.as_deref(),
        Some(own.0.as_str()),
        "celgate left the user's Secret as it was"
    );
}

#[tokio::test]
async fn with_cert_manager_celgate_waits_for_the_secret_and_follows_its_renewals() {
    let cluster = Cluster::start();
    cluster.install_crds();
    let client = cluster.client().await;
    let out = cluster.kubectl(&["create", "namespace", NAMESPACE], "");
    assert!(out.status.success(), "{out:?}");
    let port = free_port();
    let celgate = Celgate::spawn_with(
        &cluster,
        port,
        "celgate",
        &["--cert-source=cert-manager"],
        "info",
    );

    // Nothing issued yet: celgate waits, serves nothing, and writes no Secret.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let readyz = format!("https://127.0.0.1:{port}/readyz");
    assert!(
        !curl(&["-skf", &readyz]).status.success(),
        "ready without a certificate"
    );
    assert!(
        secret_ca(&client).await.is_none(),
        "celgate wrote the Secret"
    );
    assert!(
        celgate
            .logs()
            .contains("waiting for the serving certificate"),
        "{}",
        celgate.logs()
    );

    // Issued: celgate starts serving with it, and the caBundle is the issuer's CA.
    let issued = openssl_certificates(cluster.dir(), "issuer-1");
    write_issued(&client, &issued).await;
    celgate.wait_ready().await;
    apply_policy(&cluster);
    wait_bundle_follows(&client, &issued.0, "the caBundle to be the issuer's CA").await;
    wait_enforced(&client, "requests decided with the issued certificate").await;

    // Renewed from another CA: followed, and the Secret is still only the issuer's.
    let renewed = openssl_certificates(cluster.dir(), "issuer-2");
    write_issued(&client, &renewed).await;
    wait_bundle_follows(&client, &renewed.0, "the caBundle to follow the renewal").await;
    wait_enforced(&client, "requests decided with the renewed certificate").await;
    let secret = Api::<Secret>::namespaced(client.clone(), NAMESPACE)
        .get(SECRET)
        .await
        .expect("secret");
    let keys: Vec<&String> = secret
        .data
        .as_ref()
        .map(|d| d.keys().collect())
        .unwrap_or_default();
    assert_eq!(
        keys,
        ["ca.crt", "tls.crt", "tls.key"],
        "celgate wrote into the issuer's Secret"
    );
}
