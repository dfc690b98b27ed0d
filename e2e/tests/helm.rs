//! The Helm chart (charts/celgate) against the kustomize install it packages: `helm lint
//! --strict` is clean; with `namespace.create=true` the render is `kubectl kustomize
//! config/default`, object for object, and with the defaults the same without the Namespace (the
//! chart leaves the namespace to whoever makes it); each option with a kustomize component
//! renders what config/default plus that component renders; the values peer charts have render
//! where they belong; values.schema.json refuses wrong values; the CRDs carry the annotations
//! that keep them (the only difference from config/crd, stripped before comparing). helm and
//! kubectl are the cached builds of e2e/cluster/build-helm.sh and build.sh.
//!
//! One test runs the chart on a control plane (no kubelet: celgate runs beside it as a process):
//! install into a namespace Helm creates, policies applied and enforced, uninstall and reinstall
//! with every policy still there and enforced, an upgrade whose CRD adds a field and a failed
//! upgrade rolled back, both keeping the policies; what Argo CD and Flux apply leaves celgate's
//! webhooks alone; the `helm test` probe proves the webhook answers and a policy denies.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::OnceLock;

use std::time::Duration;

use celgate_e2e::{CRDS, Celgate, Cluster, create_namespace, demo, wait_denied, workspace};
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

/// `--kube-version=` the pinned Kubernetes (e2e/cluster/versions.env): what `helm template` and
/// `helm lint` check the chart's kubeVersion against (Helm's own default is 1.20).
fn kube_version() -> &'static str {
    static FLAG: OnceLock<String> = OnceLock::new();
    FLAG.get_or_init(|| {
        let file = workspace().join("e2e/cluster/versions.env");
        let versions =
            std::fs::read_to_string(&file).unwrap_or_else(|e| panic!("{}: {e}", file.display()));
        let version = versions
            .lines()
            .find_map(|l| l.strip_prefix("K8S_VERSION="))
            .unwrap_or_else(|| panic!("no K8S_VERSION in {}", file.display()));
        format!("--kube-version={}", version.trim())
    })
}

/// `helm template` of the chart as the release `celgate` in `namespace`, with `args` (--set …).
fn helm_template_in(namespace: &str, args: &[&str]) -> Output {
    let mut all = vec![
        "template",
        "celgate",
        "charts/celgate",
        "--namespace",
        namespace,
        kube_version(),
    ];
    all.extend_from_slice(args);
    run(helm_bin(), &all)
}

/// The objects the chart installs with `args` (not the `helm test` hooks).
fn helm_template(args: &[&str]) -> Objects {
    let mut all = vec!["--skip-tests"];
    all.extend_from_slice(args);
    let out = helm_template_in(NAMESPACE, &all);
    assert_success(&format!("helm template {args:?}"), &out);
    objects(&String::from_utf8_lossy(&out.stdout))
}

/// The annotations that keep a CRD (charts/celgate/templates/_helpers.tpl, "celgate.kept"):
/// Helm's resource policy, and Argo CD's sync options.
const KEPT: [(&str, &str); 2] = [
    ("helm.sh/resource-policy", "keep"),
    (
        "argocd.argoproj.io/sync-options",
        "Delete=false,Prune=false",
    ),
];

/// The render without the CRDs' keep annotations, after checking every CRD has exactly them and
/// no other: what config/crd and config/policy-reports ship.
fn without_keep(mut objects: Objects) -> Objects {
    let kept: serde_json::Map<String, Value> = KEPT
        .iter()
        .map(|(k, v)| ((*k).to_string(), json!(v)))
        .collect();
    for ((kind, _, name), object) in objects.iter_mut() {
        if kind != "CustomResourceDefinition" {
            continue;
        }
        let metadata = object["metadata"]
            .as_object_mut()
            .unwrap_or_else(|| panic!("CRD {name} has no metadata"));
        assert_eq!(
            metadata.remove("annotations"),
            Some(Value::Object(kept.clone())),
            "CRD {name}: the annotations that keep it on uninstall"
        );
    }
    objects
}

/// The kustomize render without its Namespace: what the chart renders when it leaves the
/// namespace alone (`namespace.create=false`, the default).
fn without_namespace(mut objects: Objects) -> Objects {
    let namespace = (
        "Namespace".to_string(),
        String::new(),
        NAMESPACE.to_string(),
    );
    assert!(
        objects.remove(&namespace).is_some(),
        "config/default ships the Namespace"
    );
    objects
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

fn pod_spec(objects: &Objects) -> &Value {
    &get(objects, "Deployment", NAMESPACE, "celgate")["spec"]["template"]["spec"]
}

#[test]
fn helm_lint_is_clean() {
    for values in [
        &[][..],
        &[
            "--set=certificates.source=cert-manager,namespace.create=true",
            "--set=monitoring.serviceMonitor.enabled=true,monitoring.rules.enabled=true",
            "--set=networkPolicy.enabled=true,authentication.token.secretName=t",
        ][..],
        &[
            "--set=hostNetwork=true,ports.webhook=10443,webhook.timeoutSeconds=5",
            "--set=serviceAccount.create=false,serviceAccount.name=platform-celgate",
        ][..],
    ] {
        let mut args = vec!["lint", "--strict", "charts/celgate", kube_version()];
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
fn default_values_render_config_default_but_its_namespace() {
    let kustomized = kustomize(&[]);
    let helm = without_keep(helm_template(&[]));
    assert_same(
        "default values",
        &helm,
        &without_namespace(kustomized.clone()),
    );
    // namespace.create=true: the chart owns the namespace, with its Pod Security labels.
    assert_same(
        "namespace.create=true",
        &without_keep(helm_template(&["--set=namespace.create=true"])),
        &kustomized,
    );
    // The comparison covers the whole install: five CRDs, the Deployment, the RBAC, the webhook
    // configurations.
    assert_eq!(
        helm.keys()
            .filter(|k| k.0 == "CustomResourceDefinition")
            .count(),
        5
    );
    assert_eq!(container(&helm)["image"], "celgate:0.1.0");
    // Spread over nodes and zones, softly: one node still runs both replicas.
    let spread = &pod_spec(&helm)["topologySpreadConstraints"];
    let keys: Vec<&Value> = spread
        .as_array()
        .into_iter()
        .flatten()
        .map(|c| &c["topologyKey"])
        .collect();
    assert_eq!(
        keys,
        [
            &json!("kubernetes.io/hostname"),
            &json!("topology.kubernetes.io/zone")
        ]
    );
    for c in spread.as_array().into_iter().flatten() {
        assert_eq!(c["whenUnsatisfiable"], "ScheduleAnyway", "{c}");
        assert_eq!(
            c["labelSelector"]["matchLabels"],
            json!({"app.kubernetes.io/name": "celgate"})
        );
    }
}

#[test]
fn chart_metadata_names_the_crds_and_the_tested_kubernetes() {
    let file = workspace().join("charts/celgate/Chart.yaml");
    let text = std::fs::read_to_string(&file).unwrap_or_else(|e| panic!("{}: {e}", file.display()));
    let chart: Value = serde_saphyr::from_str(&text).unwrap_or_else(|e| panic!("Chart.yaml: {e}"));
    // ArtifactHub's list of the CRDs is the CRDs the chart installs.
    let listed: Vec<Value> = serde_saphyr::from_str(
        chart["annotations"]["artifacthub.io/crds"]
            .as_str()
            .unwrap_or_default(),
    )
    .unwrap_or_else(|e| panic!("artifacthub.io/crds: {e}"));
    let mut listed: Vec<(String, String)> = listed
        .iter()
        .map(|c| {
            (
                c["name"].as_str().unwrap_or_default().to_string(),
                c["kind"].as_str().unwrap_or_default().to_string(),
            )
        })
        .collect();
    listed.sort();
    let rendered = helm_template(&[]);
    let mut crds: Vec<(String, String)> = rendered
        .iter()
        .filter(|(k, _)| k.0 == "CustomResourceDefinition")
        .map(|(k, crd)| {
            (
                k.2.clone(),
                crd["spec"]["names"]["kind"]
                    .as_str()
                    .unwrap_or_default()
                    .to_string(),
            )
        })
        .collect();
    crds.sort();
    assert_eq!(listed, crds);
    // kubeVersion admits the pinned Kubernetes (every render here passes it) and the floor
    // celgate checks at start (1.30, make e2e-versions), and refuses the minor before it.
    let out = helm_template_in(NAMESPACE, &["--kube-version=1.30.0"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let out = helm_template_in(NAMESPACE, &["--kube-version=1.29.15"]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success() && stderr.contains("chart requires kubeVersion: >=1.30.0-0"),
        "{stderr}"
    );
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
        let mut values = values.to_vec();
        values.push("--set=namespace.create=true");
        assert_same(
            &format!("{values:?}"),
            &without_keep(helm_template(&values)),
            &kustomize(components),
        );
    }
}

#[test]
fn policy_report_crds_are_config_policy_reports_and_kept() {
    let rendered = without_keep(helm_template(&["--set=audit.policyReportCRDs=true"]));
    let out = run(
        kubectl_bin(),
        &[
            "kustomize",
            &workspace()
                .join("config/policy-reports")
                .display()
                .to_string(),
        ],
    );
    assert_success("kubectl kustomize config/policy-reports", &out);
    let reports = objects(&String::from_utf8_lossy(&out.stdout));
    assert_eq!(reports.len(), 2);
    for (key, crd) in &reports {
        assert_eq!(rendered.get(key), Some(crd), "{key:?}");
    }
}

#[test]
fn other_values_render_their_flags_mounts_and_objects() {
    let extra_rules = json!([{"apiGroups": ["example.com"], "resources": ["replicalimits"], "verbs": ["list", "watch"]}]);
    let rendered = helm_template(&[
        "--set=replicas=3,image.repository=registry.example/celgate,image.tag=1.2.3,image.pullPolicy=IfNotPresent",
        "--set=logFormat=text,webhookRules=all,excludedNamespaces={kube-system,infra},neverSent={none},paramMaxMib=64,webhook.timeoutSeconds=3,audit.secrets=true",
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
            "--audit-secrets=true",
            "--webhook-rules=all",
            "--never-sent=none",
            "--param-max-mib=64",
            "--client-ca-file=/etc/celgate/client-ca/ca.crt",
            "--client-names=kube-apiserver,apiserver-2",
            "--token-file=/etc/celgate/token/tokens",
            "--webhook-timeout-seconds=3",
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
fn peer_chart_values_render_where_they_belong() {
    let env = json!([{"name": "HTTPS_PROXY", "value": "http://proxy:3128"}]);
    let affinity = json!({"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
        "nodeSelectorTerms": [{"matchExpressions": [{"key": "pool", "operator": "In", "values": ["system"]}]}]}}});
    let spread = json!([{"maxSkew": 1, "topologyKey": "kubernetes.io/hostname", "whenUnsatisfiable": "DoNotSchedule",
                "labelSelector": {"matchLabels": {"app.kubernetes.io/name": "celgate"}}}]);
    // Merged key by key with the defaults, as Helm merges maps; null drops a key.
    let pod_security = json!({"runAsUser": 1000, "fsGroup": 1000, "seccompProfile": null});
    let container_security =
        json!({"runAsUser": 1000, "capabilities": {"drop": ["ALL"], "add": ["NET_BIND_SERVICE"]}});
    let strategy =
        json!({"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": 1, "maxSurge": 0}});
    let rendered = helm_template(&[
        "--set=podAnnotations.team=platform,podLabels.tier=admission",
        "--set=serviceAccount.name=platform-celgate",
        "--set=serviceAccount.annotations.eks\\.amazonaws\\.com/role-arn=arn:aws:iam::1:role/celgate",
        "--set=webhook.annotations.owner=platform,webhook.labels.tier=admission,webhook.timeoutSeconds=5",
        "--set=priorityClassName=system-cluster-critical",
        "--set=hostNetwork=true,ports.webhook=10443,ports.metrics=10080,ports.health=10081",
        "--set=networkPolicy.enabled=true",
        "--set-json=extraArgs=[\"--decision-log-rate=20\"]",
        &format!("--set-json=extraEnv={env}"),
        &format!("--set-json=affinity={affinity}"),
        &format!("--set-json=topologySpreadConstraints={spread}"),
        &format!("--set-json=podSecurityContext={pod_security}"),
        &format!("--set-json=securityContext={container_security}"),
        &format!("--set-json=updateStrategy={strategy}"),
    ]);
    let deployment = get(&rendered, "Deployment", NAMESPACE, "celgate");
    let template = &deployment["spec"]["template"];
    let spec = &template["spec"];
    assert_eq!(
        template["metadata"]["annotations"],
        json!({"team": "platform"})
    );
    assert_eq!(
        template["metadata"]["labels"],
        json!({"app.kubernetes.io/name": "celgate", "tier": "admission"})
    );
    // The selector stays what it was: a Deployment's selector cannot change.
    assert_eq!(
        deployment["spec"]["selector"]["matchLabels"],
        json!({"app.kubernetes.io/name": "celgate"})
    );
    assert_eq!(deployment["spec"]["strategy"], strategy);
    assert_eq!(spec["affinity"], affinity);
    assert_eq!(spec["topologySpreadConstraints"], spread);
    assert_eq!(
        spec["securityContext"],
        json!({"runAsNonRoot": true, "runAsUser": 1000, "runAsGroup": 65532, "fsGroup": 1000})
    );
    assert_eq!(spec["priorityClassName"], "system-cluster-critical");
    assert_eq!(spec["hostNetwork"], true);
    assert_eq!(spec["dnsPolicy"], "ClusterFirstWithHostNet");
    let c = container(&rendered);
    assert_eq!(
        c["securityContext"],
        json!({
            "allowPrivilegeEscalation": false,
            "readOnlyRootFilesystem": true,
            "runAsNonRoot": true,
            "runAsUser": 1000,
            "runAsGroup": 65532,
            "capabilities": {"drop": ["ALL"], "add": ["NET_BIND_SERVICE"]},
            "seccompProfile": {"type": "RuntimeDefault"},
        })
    );
    assert_eq!(
        args(&rendered),
        [
            "run",
            "--log-json",
            "--webhook-port=10443",
            "--metrics-port=10080",
            "--health-port=10081",
            "--webhook-timeout-seconds=5",
            "--decision-log-rate=20",
        ]
    );
    assert_eq!(
        c["ports"],
        json!([
            {"name": "metrics", "containerPort": 10080},
            {"name": "health", "containerPort": 10081},
            {"name": "webhook", "containerPort": 10443},
        ])
    );
    assert_eq!(c["env"][2], env[0]);
    assert_eq!(c["env"].as_array().map(Vec::len), Some(3));
    let policy = get(&rendered, "NetworkPolicy", NAMESPACE, "celgate");
    let ports: Vec<&Value> = policy["spec"]["ingress"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|rule| &rule["ports"][0]["port"])
        .collect();
    assert_eq!(ports, [&json!(10443), &json!(10081), &json!(10080)]);

    // The ServiceAccount's name and annotations, and every binding's subject follows it.
    assert_eq!(spec["serviceAccountName"], "platform-celgate");
    let account = get(&rendered, "ServiceAccount", NAMESPACE, "platform-celgate");
    assert_eq!(
        account["metadata"]["annotations"],
        json!({"eks.amazonaws.com/role-arn": "arn:aws:iam::1:role/celgate"})
    );
    let mut bindings = 0;
    for ((kind, _, name), object) in &rendered {
        if kind.ends_with("Binding") {
            bindings += 1;
            assert_eq!(
                object["subjects"],
                json!([{"kind": "ServiceAccount", "name": "platform-celgate", "namespace": NAMESPACE}]),
                "{kind} {name}"
            );
        }
    }
    assert_eq!(
        bindings, 5,
        "celgate, -params, -audit, and the two RoleBindings"
    );

    for kind in [
        "ValidatingWebhookConfiguration",
        "MutatingWebhookConfiguration",
    ] {
        let metadata = &get(&rendered, kind, "", "celgate")["metadata"];
        assert_eq!(metadata["annotations"], json!({"owner": "platform"}));
        assert_eq!(
            metadata["labels"],
            json!({"app.kubernetes.io/name": "celgate", "tier": "admission"})
        );
    }

    // An existing ServiceAccount: none rendered, still bound.
    let rendered = helm_template(&["--set=serviceAccount.create=false"]);
    assert!(!rendered.keys().any(|k| k.0 == "ServiceAccount"));
    assert_eq!(pod_spec(&rendered)["serviceAccountName"], "celgate");
}

#[test]
fn the_default_resources_hold_the_measured_peak() {
    let rendered = helm_template(&[]);
    let resources = &container(&rendered)["resources"];
    assert_eq!(
        *resources,
        json!({"requests": {"cpu": "100m", "memory": "64Mi"}, "limits": {"memory": "256Mi"}})
    );
    // The peak the memory limit is sized for: docs/limitations.md, measured by
    // `make bench-decode` (128 concurrent maximal reviews of every shape, default limits).
    let limitations = std::fs::read_to_string(workspace().join("docs/limitations.md"))
        .unwrap_or_else(|e| panic!("docs/limitations.md: {e}"));
    let peak: u32 = limitations
        .split_once("peaks at ")
        .and_then(|(_, rest)| rest.split_once(" MiB resident"))
        .and_then(|(n, _)| n.parse().ok())
        .unwrap_or_else(|| {
            panic!("docs/limitations.md states no peak (\"peaks at N MiB resident\")")
        });
    assert!(
        peak < 256,
        "the measured peak ({peak} MiB) must stay under the 256Mi limit"
    );
}

#[test]
fn the_helm_test_hook_runs_celgate_probe_with_celgate_s_image() {
    let out = helm_template_in(
        NAMESPACE,
        &[
            "--set=image.repository=registry.example/celgate,image.tag=1.2.3",
            "--show-only=templates/tests/probe.yaml",
        ],
    );
    assert_success("helm template --show-only probe", &out);
    let hooks = objects(&String::from_utf8_lossy(&out.stdout));
    for ((kind, _, name), object) in &hooks {
        assert_eq!(
            object["metadata"]["annotations"]["helm.sh/hook"], "test",
            "{kind} {name}"
        );
        // Deleted once the test passes, but the pod: `helm test --logs` reads its log after.
        let deleted = if kind == "Pod" {
            "before-hook-creation"
        } else {
            "before-hook-creation,hook-succeeded"
        };
        assert_eq!(
            object["metadata"]["annotations"]["helm.sh/hook-delete-policy"], deleted,
            "{kind} {name}"
        );
    }
    let pod = get(&hooks, "Pod", NAMESPACE, "celgate-test");
    let probe = &pod["spec"]["containers"][0];
    // The Deployment's image: the only one a cluster without a public registry can pull.
    assert_eq!(probe["image"], "registry.example/celgate:1.2.3");
    assert_eq!(
        probe["args"],
        json!([
            "probe",
            "--policy=celgate-test",
            "--namespace=default",
            "--timeout-seconds=60"
        ])
    );
    assert_eq!(pod["spec"]["serviceAccountName"], "celgate-test");
    assert_eq!(pod["spec"]["restartPolicy"], "Never");
    // The policy and RBAC come first (weight -1), the pod after them. Every hook is named as the
    // pod: `helm test --logs` asks for a pod's log by each test hook's name.
    for (kind, namespace, name) in [
        ("ValidatingAdmissionPolicy", "", "celgate-test"),
        ("ValidatingAdmissionPolicyBinding", "", "celgate-test"),
        ("ServiceAccount", NAMESPACE, "celgate-test"),
        ("Role", "default", "celgate-test"),
        ("RoleBinding", "default", "celgate-test"),
    ] {
        assert_eq!(
            get(&hooks, kind, namespace, name)["metadata"]["annotations"]["helm.sh/hook-weight"],
            "-1"
        );
    }
    assert_eq!(
        get(&hooks, "Role", "default", "celgate-test")["rules"],
        json!([{"apiGroups": [""], "resources": ["configmaps"], "verbs": ["create"]}])
    );
    // The binding selects only the probe's ConfigMaps, in the test namespace.
    assert_eq!(
        get(
            &hooks,
            "ValidatingAdmissionPolicyBinding",
            "",
            "celgate-test"
        )["spec"]["matchResources"],
        json!({
            "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "default"}},
            "objectSelector": {"matchExpressions": [{"key": "probe.celgate.io/verdict", "operator": "Exists"}]},
        })
    );
    // `celgate probe` is a command of the binary (docs/reference/flags.md is generated from it).
    let reference = std::fs::read_to_string(workspace().join("docs/reference/flags.md"))
        .unwrap_or_else(|e| panic!("docs/reference/flags.md: {e}"));
    let section = reference
        .split("## `celgate ")
        .find(|s| s.starts_with("probe`"))
        .unwrap_or_else(|| panic!("no `celgate probe` section in flags.md"));
    for flag in ["--policy", "--namespace", "--timeout-seconds"] {
        assert!(section.contains(&format!("| `{flag}` |")), "{flag}");
    }
}

/// A released chart pins its image by digest (make release sets `image.digest`): the Deployment
/// and the helm test pod run `repository@digest`, whatever the tag.
#[test]
fn an_image_digest_pins_the_deployment_and_the_test_pod() {
    let digest = format!("sha256:{}", "0123456789abcdef".repeat(4));
    let args = [
        "--set=image.repository=registry.example/celgate,image.tag=1.2.3",
        &format!("--set=image.digest={digest}"),
    ];
    let pinned = format!("registry.example/celgate@{digest}");
    assert_eq!(container(&helm_template(&args))["image"], pinned.as_str());
    let out = helm_template_in(
        NAMESPACE,
        &[args[0], args[1], "--show-only=templates/tests/probe.yaml"],
    );
    assert_success("helm template --show-only probe", &out);
    let hooks = objects(&String::from_utf8_lossy(&out.stdout));
    let pod = get(&hooks, "Pod", NAMESPACE, "celgate-test");
    assert_eq!(pod["spec"]["containers"][0]["image"], pinned.as_str());
}

#[test]
fn openreports_are_granted_only_when_the_audit_writes_them() {
    let grants_openreports = |objects: &Objects| {
        let role = get(objects, "ClusterRole", "", "celgate");
        role["rules"]
            .as_array()
            .is_some_and(|rules| rules.iter().any(|r| r["apiGroups"][0] == "openreports.io"))
    };
    let default = helm_template(&[]);
    assert!(!grants_openreports(&default), "default: PolicyReports only");
    assert!(
        !args(&default)
            .iter()
            .any(|a| a.starts_with("--audit-report-api"))
    );
    let chosen = helm_template(&["--set=audit.reportApi=openreports"]);
    assert!(grants_openreports(&chosen));
    assert!(
        args(&chosen).contains(&"--audit-report-api=openreports".to_string()),
        "{:?}",
        args(&chosen)
    );
    // What config/rbac/openreports adds for a kustomize install is the same rule.
    let out = run(
        kubectl_bin(),
        &[
            "kustomize",
            &workspace()
                .join("config/rbac/openreports")
                .display()
                .to_string(),
        ],
    );
    assert_success("kubectl kustomize config/rbac/openreports", &out);
    let kustomized = objects(&String::from_utf8_lossy(&out.stdout));
    let rule = |o: &Objects, name: &str| {
        get(o, "ClusterRole", "", name)["rules"]
            .as_array()
            .and_then(|rules| rules.iter().find(|r| r["apiGroups"][0] == "openreports.io"))
            .cloned()
    };
    assert_eq!(
        rule(&chosen, "celgate"),
        rule(&kustomized, "celgate-openreports")
    );
    assert!(rule(&kustomized, "celgate-openreports").is_some());
}

#[test]
fn wrong_values_fail_with_what_is_allowed() {
    for (set, message) in [
        // values.schema.json
        ("certificates.source=vault", "/certificates/source"),
        ("logFormat=logfmt", "/logFormat"),
        ("webhookRules=some", "/webhookRules"),
        ("replicas=two", "/replicas"),
        ("webhook.timeoutSeconds=60", "/webhook/timeoutSeconds"),
        ("ports.webhook=70000", "/ports/webhook"),
        ("replica=3", "replica"),
        ("neverSent={events,pods}", "/neverSent/1"),
        ("extraArgs={run}", "/extraArgs/0"),
        ("image.digest=1.2.3", "/image/digest"),
        // one value against another (templates/_helpers.tpl)
        (
            "monitoring.podMonitor.enabled=true,monitoring.serviceMonitor.enabled=true",
            "enable podMonitor or serviceMonitor, not both",
        ),
        (
            "authentication.clientCA.secretName=a,authentication.clientCA.configMapName=b",
            "set secretName or configMapName, not both",
        ),
        (
            "hostNetwork=true,namespace.create=true",
            "refuses host networking",
        ),
        (
            "test.namespace=kube-system",
            "test.namespace is \"kube-system\", which celgate's webhooks exclude",
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

/// helm with `args` against the control plane; its output.
fn helm_on(cluster: &Cluster, args: &[&str]) -> Output {
    eprintln!("$ helm {}", args.join(" "));
    Command::new(helm_bin())
        .args(args)
        .current_dir(workspace())
        .env("KUBECONFIG", &cluster.kubeconfig)
        .output()
        .unwrap_or_else(|e| panic!("cannot run helm: {e}"))
}

fn helm_on_ok(cluster: &Cluster, args: &[&str]) {
    let out = helm_on(cluster, args);
    assert_success(&format!("helm {}", args.join(" ")), &out);
}

/// The webhooks celgate registered in its ValidatingWebhookConfiguration.
fn registered_webhooks(cluster: &Cluster) -> Vec<Value> {
    let out = cluster.kubectl_ok(&[
        "get",
        "validatingwebhookconfiguration",
        "celgate",
        "-o",
        "json",
    ]);
    let config: Value = serde_json::from_str(&out).unwrap_or_else(|e| panic!("{e}: {out}"));
    config["webhooks"].as_array().cloned().unwrap_or_default()
}

/// The demo policy and binding are stored, unchanged since they were applied.
fn assert_policies_stored(cluster: &Cluster, uid: &str) {
    let out = cluster.kubectl_ok(&[
        "get",
        "validatingadmissionpolicies.admission.celgate.io",
        demo::POLICY_NAME,
        "-o",
        "jsonpath={.metadata.uid}",
    ]);
    assert_eq!(out, uid, "the policy is the one applied before");
    cluster.kubectl_ok(&[
        "get",
        "validatingadmissionpolicybindings.admission.celgate.io",
        demo::BINDING_NAME,
    ]);
}

/// The chart with its CRD of ValidatingAdmissionPolicies given one more field, `spec.upgradeProbe`:
/// a copy (links followed) under `dir`.
fn chart_with_a_new_crd_field(dir: &Path) -> PathBuf {
    let chart = dir.join("celgate");
    let out = Command::new("cp")
        .args(["-rL", "charts/celgate"])
        .arg(&chart)
        .current_dir(workspace())
        .output()
        .unwrap_or_else(|e| panic!("cannot run cp: {e}"));
    assert_success("cp -rL charts/celgate", &out);
    let file = chart.join("files/crd/validatingadmissionpolicies.yaml");
    let crd = std::fs::read_to_string(&file).unwrap_or_else(|e| panic!("{}: {e}", file.display()));
    let anchor = "\n          spec:\n            description: A set of CEL validations applied to the requests its bindings select.\n            properties:\n";
    assert!(crd.contains(anchor), "the CRD's spec properties moved");
    let patched = crd.replace(
        anchor,
        &format!(
            "{anchor}              upgradeProbe:\n                description: A field the next chart adds.\n                type: string\n"
        ),
    );
    std::fs::write(&file, patched).unwrap_or_else(|e| panic!("{}: {e}", file.display()));
    chart
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_a_control_plane_policies_survive_uninstall_reinstall_and_upgrades() {
    let cluster = Cluster::start();
    let client = cluster.client().await;
    let install = [
        "install",
        "celgate",
        "charts/celgate",
        "--namespace",
        NAMESPACE,
        "--create-namespace",
    ];
    // A namespace Helm creates, no --take-ownership: the chart leaves the namespace alone.
    helm_on_ok(&cluster, &install);
    let mut wait = vec!["wait", "--for=condition=Established", "--timeout=60s"];
    wait.extend(CRDS);
    cluster.kubectl_ok(&wait);
    // No kubelet runs the Deployment: celgate runs beside the control plane as a process, and
    // fills the chart's webhook configurations.
    let mut celgate = Celgate::start(&cluster).await;
    create_namespace(&client, "helm-demo", "celgate").await;
    cluster.apply(&demo::policy(demo::CELGATE_API, 5));
    cluster.apply(&demo::binding(demo::CELGATE_API, "celgate"));
    let (message, _) = wait_denied(&client, "helm-demo", 10).await;
    assert!(message.contains(demo::POLICY_NAME), "{message}");
    // The memory the chart requests is sized by this (printed, not asserted).
    let status =
        std::fs::read_to_string(format!("/proc/{}/status", celgate.pid())).unwrap_or_default();
    let memory: Vec<&str> = status
        .lines()
        .filter(|l| l.starts_with("VmRSS") || l.starts_with("VmHWM"))
        .collect();
    eprintln!("celgate serving one policy: {memory:?}");
    let uid = cluster.kubectl_ok(&[
        "get",
        "validatingadmissionpolicies.admission.celgate.io",
        demo::POLICY_NAME,
        "-o",
        "jsonpath={.metadata.uid}",
    ]);

    // GitOps: what Argo CD applies (client-side, its default; server-side with
    // ServerSideApply=true, as Flux's drift correction does) leaves celgate's webhooks alone,
    // and neither diff sees drift in them.
    let webhooks = registered_webhooks(&cluster);
    assert!(!webhooks.is_empty(), "celgate registered its webhooks");
    let rendered = helm_template_in(NAMESPACE, &["--skip-tests"]);
    assert_success("helm template", &rendered);
    let rendered = String::from_utf8_lossy(&rendered.stdout).into_owned();
    for apply in [
        &["apply", "-f", "-"][..],
        &[
            "apply",
            "--server-side",
            "--force-conflicts",
            "--field-manager=gitops",
            "-f",
            "-",
        ][..],
    ] {
        let out = cluster.kubectl(apply, &rendered);
        assert!(
            out.status.success(),
            "kubectl {apply:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert_eq!(registered_webhooks(&cluster), webhooks, "{apply:?}");
    }
    for diff in [
        &["diff", "-f", "-"][..],
        &["diff", "--server-side", "--field-manager=gitops", "-f", "-"][..],
    ] {
        let out = cluster.kubectl(diff, &rendered);
        assert!(
            out.status.success(),
            "kubectl {diff:?} sees drift:\n{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }

    // Uninstall (the pods go with the release): the CRDs, the policy and its binding stay.
    celgate.kill();
    helm_on_ok(
        &cluster,
        &["uninstall", "celgate", "--namespace", NAMESPACE],
    );
    for crd in CRDS {
        let annotations =
            cluster.kubectl_ok(&["get", crd, "-o", "jsonpath={.metadata.annotations}"]);
        assert!(
            annotations.contains("\"helm.sh/resource-policy\":\"keep\""),
            "{crd}: {annotations}"
        );
    }
    assert_policies_stored(&cluster, &uid);
    let left = cluster.kubectl(&["get", "validatingwebhookconfiguration", "celgate"], "");
    assert!(
        !left.status.success(),
        "the webhook configuration goes with the release"
    );

    // Reinstall: the kept CRDs carry this release's name and namespace, so Helm adopts them;
    // the policy is enforced again as it was.
    helm_on_ok(&cluster, &install);
    let mut celgate = Celgate::start(&cluster).await;
    wait_denied(&client, "helm-demo", 10).await;
    assert_policies_stored(&cluster, &uid);

    // An upgrade to a chart whose CRD adds a field: the CRD is updated (a policy keeps the
    // field), the policies stay.
    let work = workspace().join("target/helm-upgrade");
    let _ = std::fs::remove_dir_all(&work);
    std::fs::create_dir_all(&work).unwrap_or_else(|e| panic!("{}: {e}", work.display()));
    let next = chart_with_a_new_crd_field(&work);
    let next = next.display().to_string();
    helm_on_ok(
        &cluster,
        &[
            "upgrade",
            "celgate",
            &next,
            "--namespace",
            NAMESPACE,
            "--reset-then-reuse-values",
        ],
    );
    let probe_field = "{\"metadata\":{\"name\":\"upgrade-probe.example.com\"},\"apiVersion\":\"admission.celgate.io/v1\",\"kind\":\"ValidatingAdmissionPolicy\",\"spec\":{\"upgradeProbe\":\"kept\",\"matchConstraints\":{\"resourceRules\":[{\"apiGroups\":[\"example.com\"],\"apiVersions\":[\"v1\"],\"operations\":[\"CREATE\"],\"resources\":[\"widgets\"]}]},\"validations\":[{\"expression\":\"true\"}]}}";
    // kubectl validates fields strictly: before the upgrade, the field is refused as unknown.
    let mut last = String::new();
    for _ in 0..30 {
        let out = cluster.kubectl(
            &["apply", "-f", "-", "-o", "jsonpath={.spec.upgradeProbe}"],
            probe_field,
        );
        last = format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        if last == "kept" {
            break;
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    let stored = last;
    assert_eq!(stored, "kept", "the upgraded CRD keeps spec.upgradeProbe");
    assert_policies_stored(&cluster, &uid);

    // A failed upgrade (a Deployment the API server refuses), then `helm rollback` (--atomic
    // would roll back with --wait, for replicas no kubelet runs here): the CRDs are those of the
    // last good revision, the policies stay.
    let failed = helm_on(
        &cluster,
        &[
            "upgrade",
            "celgate",
            "charts/celgate",
            "--namespace",
            NAMESPACE,
            "--reset-then-reuse-values",
            "--set=updateStrategy.type=Recreate",
        ],
    );
    assert!(
        !failed.status.success()
            && String::from_utf8_lossy(&failed.stderr).contains("UPGRADE FAILED"),
        "the upgrade fails: {}",
        String::from_utf8_lossy(&failed.stderr)
    );
    assert_policies_stored(&cluster, &uid);
    helm_on_ok(&cluster, &["rollback", "celgate", "--namespace", NAMESPACE]);
    let field = cluster.kubectl_ok(&[
        "get",
        "validatingadmissionpolicies.admission.celgate.io",
        "upgrade-probe.example.com",
        "-o",
        "jsonpath={.spec.upgradeProbe}",
    ]);
    assert_eq!(field, "kept", "the rolled-back CRD is the upgraded one");
    assert_policies_stored(&cluster, &uid);
    wait_denied(&client, "helm-demo", 10).await;

    // The `helm test` probe (its pod cannot run here): the hook's policy, binding and RBAC
    // applied, `celgate probe` as the hook's ServiceAccount sees the denial through celgate's
    // webhook and the allowed ConfigMap admitted.
    let out = helm_template_in(NAMESPACE, &["--show-only=templates/tests/probe.yaml"]);
    assert_success("helm template --show-only probe", &out);
    let hooks = objects(&String::from_utf8_lossy(&out.stdout));
    for ((kind, _, _), object) in &hooks {
        if kind != "Pod" {
            cluster.apply(&object.to_string());
        }
    }
    let probe = |timeout: &str| {
        let kubeconfig = cluster.token_kubeconfig(NAMESPACE, "celgate-test");
        Command::new(Celgate::binary())
            .args(["probe", "--policy=celgate-test", "--namespace=default"])
            .arg(format!("--timeout-seconds={timeout}"))
            .env("KUBECONFIG", kubeconfig)
            .output()
            .unwrap_or_else(|e| panic!("cannot run celgate probe: {e}"))
    };
    let out = probe("60");
    let said = String::from_utf8_lossy(&out.stdout).into_owned();
    eprintln!("celgate probe:\n{said}");
    assert_success("celgate probe", &out);
    assert!(
        said.contains("denied by celgate's webhook: HTTP 422")
            && said.contains("ValidatingAdmissionPolicy 'celgate-test'")
            && said.contains("admitted"),
        "{said}"
    );
    // Without celgate the probe fails, saying what it got instead.
    celgate.kill();
    let started = std::time::Instant::now();
    let out = probe("3");
    let said = String::from_utf8_lossy(&out.stdout).into_owned();
    eprintln!(
        "celgate probe without celgate ({:.1?}):\n{said}",
        started.elapsed()
    );
    assert_eq!(out.status.code(), Some(1), "{said}");
    assert!(
        said.contains("FAIL: a ConfigMap labelled probe.celgate.io/verdict=deny"),
        "{said}"
    );
}
