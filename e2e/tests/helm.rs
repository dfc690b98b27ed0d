//! The Helm chart (charts/celgate) against the kustomize install it packages, with no cluster:
//! `helm lint --strict` is clean; the default render is `kubectl kustomize config/default`,
//! object for object; each option with a kustomize component renders what config/default plus
//! that component renders; the options without one render the flags, mounts and objects they
//! name, and only flags `celgate run` has. helm and kubectl are the cached builds of
//! e2e/cluster/build-helm.sh and build.sh.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::OnceLock;

use celgate_e2e::workspace;
use serde_json::{Value, json};

const NAMESPACE: &str = "celgate-system";

/// Runs a build script of e2e/cluster and returns the path it prints.
fn built(script: &str) -> PathBuf {
    let out = Command::new(workspace().join("e2e/cluster").join(script))
        .output()
        .unwrap_or_else(|e| panic!("cannot run {script}: {e}"));
    assert_success(script, &out);
    PathBuf::from(String::from_utf8_lossy(&out.stdout).trim())
}

fn helm_bin() -> &'static Path {
    static HELM: OnceLock<PathBuf> = OnceLock::new();
    HELM.get_or_init(|| built("build-helm.sh"))
}

fn kubectl_bin() -> &'static Path {
    static KUBECTL: OnceLock<PathBuf> = OnceLock::new();
    KUBECTL.get_or_init(|| built("build.sh").join("kubectl"))
}

fn assert_success(what: &str, out: &Output) {
    assert!(
        out.status.success(),
        "{what} failed:\n{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

fn run(bin: &Path, args: &[&str]) -> Output {
    Command::new(bin)
        .args(args)
        .current_dir(workspace())
        .output()
        .unwrap_or_else(|e| panic!("cannot run {}: {e}", bin.display()))
}

/// The rendered objects by (kind, namespace, name).
type Objects = BTreeMap<(String, String, String), Value>;

/// The rendered objects; a container's ports in containerPort order, as they are a set keyed by
/// it (a strategic merge patch, as config/monitoring's, puts the port it names first).
fn objects(yaml: &str) -> Objects {
    let docs: Vec<Value> =
        serde_saphyr::from_multiple(yaml).unwrap_or_else(|e| panic!("rendered YAML: {e}\n{yaml}"));
    let mut objects = Objects::new();
    for mut doc in docs.into_iter().filter(|d| !d.is_null()) {
        let containers = doc.pointer_mut("/spec/template/spec/containers");
        for c in containers
            .and_then(Value::as_array_mut)
            .into_iter()
            .flatten()
        {
            if let Some(ports) = c.get_mut("ports").and_then(Value::as_array_mut) {
                ports.sort_by_key(|p| p["containerPort"].as_u64());
            }
        }
        let field = |v: &Value| v.as_str().unwrap_or_default().to_string();
        let key = (
            field(&doc["kind"]),
            field(&doc["metadata"]["namespace"]),
            field(&doc["metadata"]["name"]),
        );
        assert!(
            !key.0.is_empty() && !key.2.is_empty(),
            "no kind or name: {doc}"
        );
        let previous = objects.insert(key.clone(), doc);
        assert!(previous.is_none(), "{key:?} rendered twice");
    }
    objects
}

/// `helm template` of the chart as the release `celgate` in `namespace`, with `args` (--set …).
fn helm_template_in(namespace: &str, args: &[&str]) -> Output {
    let mut all = vec![
        "template",
        "celgate",
        "charts/celgate",
        "--namespace",
        namespace,
    ];
    all.extend_from_slice(args);
    run(helm_bin(), &all)
}

fn helm_template(args: &[&str]) -> Objects {
    let out = helm_template_in(NAMESPACE, args);
    assert_success(&format!("helm template {args:?}"), &out);
    objects(&String::from_utf8_lossy(&out.stdout))
}

/// `kubectl kustomize` of config/default with `components` (directories of config/).
fn kustomize(components: &[&str]) -> Objects {
    // kustomize takes relative paths only: an overlay three levels below the workspace.
    let name = if components.is_empty() {
        "default".to_string()
    } else {
        components.join("+")
    };
    let overlay = workspace().join("target/helm-overlays").join(name);
    std::fs::create_dir_all(&overlay).unwrap_or_else(|e| panic!("{}: {e}", overlay.display()));
    let components: Vec<String> = components
        .iter()
        .map(|c| format!("../../../config/{c}"))
        .collect();
    std::fs::write(
        overlay.join("kustomization.yaml"),
        format!("resources: [../../../config/default]\ncomponents: {components:?}\n"),
    )
    .unwrap_or_else(|e| panic!("{}: {e}", overlay.display()));
    let out = run(
        kubectl_bin(),
        &["kustomize", &overlay.display().to_string()],
    );
    assert_success("kubectl kustomize", &out);
    objects(&String::from_utf8_lossy(&out.stdout))
}

/// The same objects, each with the same content.
fn assert_same(what: &str, helm: &Objects, kustomize: &Objects) {
    let keys = |o: &Objects| o.keys().cloned().collect::<Vec<_>>();
    assert_eq!(
        keys(helm),
        keys(kustomize),
        "{what}: helm (left) and kustomize (right) render different objects"
    );
    for (key, object) in helm {
        assert!(
            object == &kustomize[key],
            "{what}: {key:?} differs\nhelm: {}\nkustomize: {}",
            serde_json::to_string_pretty(object).unwrap_or_default(),
            serde_json::to_string_pretty(&kustomize[key]).unwrap_or_default()
        );
    }
}

fn get<'a>(objects: &'a Objects, kind: &str, namespace: &str, name: &str) -> &'a Value {
    objects
        .get(&(kind.into(), namespace.into(), name.into()))
        .unwrap_or_else(|| panic!("no {kind} {namespace}/{name} in {:?}", objects.keys()))
}

fn container(objects: &Objects) -> &Value {
    &get(objects, "Deployment", NAMESPACE, "celgate")["spec"]["template"]["spec"]["containers"][0]
}

fn args(objects: &Objects) -> Vec<String> {
    container(objects)["args"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|a| a.as_str().unwrap_or_default().to_string())
        .collect()
}

#[test]
fn helm_lint_is_clean() {
    for values in [
        &[][..],
        &[
            "--set=certificates.source=cert-manager",
            "--set=monitoring.serviceMonitor.enabled=true,monitoring.rules.enabled=true",
            "--set=networkPolicy.enabled=true,authentication.token.secretName=t",
        ][..],
    ] {
        let mut args = vec!["lint", "--strict", "charts/celgate"];
        args.extend_from_slice(values);
        let out = run(helm_bin(), &args);
        assert_success(&format!("helm lint {values:?}"), &out);
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(
            text.contains("1 chart(s) linted, 0 chart(s) failed"),
            "{text}"
        );
        assert!(
            !text.contains("[WARNING]") && !text.contains("[ERROR]"),
            "{text}"
        );
    }
}

#[test]
fn default_values_render_config_default() {
    let helm = helm_template(&[]);
    assert_same("default values", &helm, &kustomize(&[]));
    // The comparison covers the whole install: four CRDs, the Deployment, the RBAC, the webhook
    // configurations.
    assert_eq!(
        helm.keys()
            .filter(|k| k.0 == "CustomResourceDefinition")
            .count(),
        4
    );
    assert_eq!(container(&helm)["image"], "celgate:0.1.0");
}

#[test]
fn options_with_a_kustomize_component_render_config_default_with_it() {
    for (values, components) in [
        (
            &["--set=certificates.source=cert-manager"][..],
            &["cert-manager"][..],
        ),
        (
            &[
                "--set=monitoring.podMonitor.enabled=true,monitoring.dashboard.enabled=true,monitoring.rules.enabled=true",
            ][..],
            &["monitoring"][..],
        ),
        (
            &["--set=networkPolicy.enabled=true"][..],
            &["network-policy"][..],
        ),
    ] {
        assert_same(
            &format!("{values:?}"),
            &helm_template(values),
            &kustomize(components),
        );
    }
}

#[test]
fn other_values_render_their_flags_mounts_and_objects() {
    let extra_rules = json!([{"apiGroups": ["example.com"], "resources": ["replicalimits"], "verbs": ["list", "watch"]}]);
    let rendered = helm_template(&[
        "--set=replicas=3,image.repository=registry.example/celgate,image.tag=1.2.3,image.pullPolicy=IfNotPresent",
        "--set=logFormat=text,webhookRules=all,excludedNamespaces={kube-system,infra},neverSent={none},webhookTimeoutSeconds=3,paramMaxMib=64",
        "--set=authentication.clientCA.secretName=celgate-client-ca,authentication.clientCA.names={kube-apiserver,apiserver-2}",
        "--set=authentication.token.secretName=celgate-webhook-token",
        "--set=monitoring.serviceMonitor.enabled=true,monitoring.serviceMonitor.interval=15s",
        "--set=resources.limits.memory=512Mi",
        &format!("--set-json=extraParamRules={extra_rules}"),
    ]);
    let deployment = get(&rendered, "Deployment", NAMESPACE, "celgate");
    assert_eq!(deployment["spec"]["replicas"], 3);
    let c = container(&rendered);
    assert_eq!(c["image"], "registry.example/celgate:1.2.3");
    assert_eq!(c["imagePullPolicy"], "IfNotPresent");
    assert_eq!(c["resources"]["limits"]["memory"], "512Mi");
    assert_eq!(c["resources"]["requests"]["cpu"], "100m");
    assert_eq!(
        args(&rendered),
        [
            "run",
            "--health-port=8081",
            "--excluded-namespaces=kube-system,infra",
            "--webhook-rules=all",
            "--never-sent=none",
            "--param-max-mib=64",
            "--webhook-timeout-seconds=3",
            "--client-ca-file=/etc/celgate/client-ca/ca.crt",
            "--client-names=kube-apiserver,apiserver-2",
            "--token-file=/etc/celgate/token/tokens",
        ]
    );
    assert_eq!(
        c["volumeMounts"],
        json!([
            {"name": "client-ca", "mountPath": "/etc/celgate/client-ca", "readOnly": true},
            {"name": "token", "mountPath": "/etc/celgate/token", "readOnly": true},
        ])
    );
    assert_eq!(
        deployment["spec"]["template"]["spec"]["volumes"],
        json!([
            {"name": "client-ca", "secret": {"secretName": "celgate-client-ca"}},
            {"name": "token", "secret": {"secretName": "celgate-webhook-token"}},
        ])
    );

    let extra = get(&rendered, "ClusterRole", "", "celgate-params-extra");
    assert_eq!(
        extra["metadata"]["labels"]["admission.celgate.io/aggregate-to-params"],
        "true"
    );
    assert_eq!(extra["rules"], extra_rules);

    let monitor = get(&rendered, "ServiceMonitor", NAMESPACE, "celgate");
    assert_eq!(
        monitor["spec"]["selector"]["matchLabels"],
        get(&rendered, "Service", NAMESPACE, "celgate-metrics")["metadata"]["labels"]
    );
    assert_eq!(
        monitor["spec"]["endpoints"],
        json!([{"port": "metrics", "path": "/metrics", "interval": "15s"}])
    );
    assert!(
        !rendered
            .keys()
            .any(|k| k.0 == "PodMonitor" || k.0 == "PrometheusRule"),
        "{:?}",
        rendered.keys()
    );

    // Every flag the chart can render is one of `celgate run`'s (docs/reference/flags.md is
    // generated from the command line, and a test keeps it so).
    let reference = std::fs::read_to_string(workspace().join("docs/reference/flags.md"))
        .unwrap_or_else(|e| panic!("docs/reference/flags.md: {e}"));
    let run_section = reference
        .split("## `celgate ")
        .find(|s| s.starts_with("run`"))
        .unwrap_or_else(|| panic!("no `celgate run` section in flags.md"));
    for arg in args(&rendered).iter().chain(&args(&helm_template(&[
        "--set=certificates.source=cert-manager,logFormat=json",
    ]))) {
        let flag = arg.split('=').next().unwrap_or_default();
        assert!(
            arg == "run" || run_section.contains(&format!("| `{flag}` |")),
            "{arg}: not a flag of celgate run"
        );
    }
}

#[test]
fn empty_lists_a_config_map_ca_and_another_namespace() {
    // [] is a value of its own: only celgate's namespace is excluded, every kind is sent.
    let rendered = helm_template(&[
        "--set-json=excludedNamespaces=[]",
        "--set=authentication.clientCA.configMapName=api-server-ca,authentication.clientCA.key=bundle.pem",
    ]);
    assert_eq!(
        args(&rendered),
        [
            "run",
            "--log-json",
            "--health-port=8081",
            "--excluded-namespaces=",
            "--client-ca-file=/etc/celgate/client-ca/bundle.pem",
        ]
    );
    assert_eq!(
        get(&rendered, "Deployment", NAMESPACE, "celgate")["spec"]["template"]["spec"]["volumes"],
        json!([{"name": "client-ca", "configMap": {"name": "api-server-ca"}}])
    );

    // Another release namespace: every namespaced object, subject and DNS name follows it.
    let out = helm_template_in(
        "admission",
        &["--set=namespace.create=false,certificates.source=cert-manager"],
    );
    assert_success("helm template -n admission", &out);
    let rendered = objects(&String::from_utf8_lossy(&out.stdout));
    assert!(
        !rendered.keys().any(|k| k.0 == "Namespace"),
        "{:?}",
        rendered.keys()
    );
    for (kind, namespace, name) in rendered.keys() {
        if !namespace.is_empty() && kind != "Role" && kind != "RoleBinding" {
            assert_eq!(namespace, "admission", "{kind} {name}");
        }
    }
    for (kind, name) in [
        ("ClusterRoleBinding", "celgate"),
        ("ClusterRoleBinding", "celgate-params"),
    ] {
        assert_eq!(
            get(&rendered, kind, "", name)["subjects"][0]["namespace"],
            "admission"
        );
    }
    assert_eq!(
        get(&rendered, "RoleBinding", "default", "celgate-events")["subjects"][0]["namespace"],
        "admission"
    );
    assert_eq!(
        get(&rendered, "Certificate", "admission", "celgate-webhook")["spec"]["dnsNames"],
        json!([
            "celgate-webhook.admission.svc",
            "celgate-webhook.admission.svc.cluster.local"
        ])
    );
}

#[test]
fn wrong_values_fail_with_what_is_allowed() {
    for (set, message) in [
        (
            "certificates.source=vault",
            "certificates.source is \"vault\": self or cert-manager",
        ),
        ("logFormat=logfmt", "logFormat is \"logfmt\": json or text"),
        ("webhookRules=some", "webhookRules is \"some\""),
        (
            "monitoring.podMonitor.enabled=true,monitoring.serviceMonitor.enabled=true",
            "enable podMonitor or serviceMonitor, not both",
        ),
        (
            "authentication.clientCA.secretName=a,authentication.clientCA.configMapName=b",
            "set secretName or configMapName, not both",
        ),
    ] {
        let out = helm_template_in(NAMESPACE, &[&format!("--set={set}")]);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(
            !out.status.success() && stderr.contains(message),
            "{set}: {stderr}"
        );
    }
}
