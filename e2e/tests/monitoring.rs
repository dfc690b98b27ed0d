//! celgate's monitoring against real Prometheus: the alert rules pass `promtool check rules` and
//! `promtool test rules` (every alert firing and not firing) and the PrometheusRule carries the
//! same rules as the plain rule file; on a control plane with validating, param and mutating
//! policies under load, a real `prometheus` scraping celgate's metrics port answers every panel
//! query of the Grafana dashboard with data, and evaluates every alert rule without error.
//! The kustomize component renders the PodMonitor's port, the rules and the dashboard ConfigMap.
//!
//! Prometheus and promtool come from Debian's `prometheus` package (`make deps` installs it,
//! e2e/monitoring/deps.sh). With `CELGATE_DASHBOARD_DATA=<file>`, the second test also writes
//! each panel's range query results there (for `e2e/monitoring/render.py`).

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use celgate_e2e::{Celgate, Cluster, create_namespace, curl, free_port, wait_for, workspace};
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::PostParams;
use kube::{Api, Client};
use serde_json::{Value, json};

const NAMESPACE: &str = "monitoring";

fn monitoring_dir() -> PathBuf {
    workspace().join("config/monitoring")
}

fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()))
}

/// Runs `tool` (from Debian's prometheus package) with `args` in `dir`.
fn run_tool(tool: &str, args: &[&str], dir: &Path) -> Output {
    Command::new(tool)
        .args(args)
        .current_dir(dir)
        .output()
        .unwrap_or_else(|e| {
            panic!("cannot run {tool}: {e}; install it with `make deps` (e2e/monitoring/deps.sh)")
        })
}

fn assert_success(what: &str, out: &Output) {
    assert!(
        out.status.success(),
        "{what} failed:\n{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

fn yaml(text: &str) -> Value {
    serde_saphyr::from_str(text).unwrap_or_else(|e| panic!("invalid YAML: {e}\n{text}"))
}

/// The alert names of a rule file's groups.
/// The names of every rule, alerts and recording rules alike.
fn rule_names(groups: &Value) -> Vec<String> {
    groups["groups"]
        .as_array()
        .into_iter()
        .flatten()
        .flat_map(|g| g["rules"].as_array().into_iter().flatten())
        .filter_map(|r| {
            r["alert"]
                .as_str()
                .or(r["record"].as_str())
                .map(str::to_string)
        })
        .collect()
}

fn alerts(groups: &Value) -> Vec<String> {
    groups["groups"]
        .as_array()
        .into_iter()
        .flatten()
        .flat_map(|g| g["rules"].as_array().into_iter().flatten())
        .filter_map(|r| r["alert"].as_str().map(str::to_string))
        .collect()
}

#[test]
fn alert_rules_pass_promtool_and_the_prometheus_rule_carries_the_same_rules() {
    let dir = monitoring_dir();
    let rules = yaml(&read(&dir.join("prometheus-rules.yaml")));
    let resource = yaml(&read(&dir.join("prometheusrule.yaml")));
    assert_eq!(resource["kind"], "PrometheusRule");
    assert_eq!(
        resource["spec"], rules,
        "prometheusrule.yaml's spec must be prometheus-rules.yaml"
    );

    assert_success(
        "promtool check rules",
        &run_tool(
            "promtool",
            &["check", "rules", "prometheus-rules.yaml"],
            &dir,
        ),
    );
    let tested = run_tool(
        "promtool",
        &["test", "rules", "prometheus-rules.test.yaml"],
        &dir,
    );
    assert_success("promtool test rules", &tested);

    // Every alert is tested firing (an expected alert) and not firing (an eval with none).
    let tests = yaml(&read(&dir.join("prometheus-rules.test.yaml")));
    let cases: Vec<(String, bool)> = tests["tests"]
        .as_array()
        .into_iter()
        .flatten()
        .flat_map(|t| t["alert_rule_test"].as_array().into_iter().flatten())
        .map(|c| {
            let name = c["alertname"].as_str().unwrap_or_default().to_string();
            let fires = c["exp_alerts"].as_array().is_some_and(|a| !a.is_empty());
            (name, fires)
        })
        .collect();
    let names = alerts(&rules);
    assert!(names.len() >= 6, "alerts: {names:?}");
    for alert in &names {
        for fires in [true, false] {
            assert!(
                cases.contains(&(alert.clone(), fires)),
                "{alert} has no test where it {}",
                if fires { "fires" } else { "does not fire" }
            );
        }
    }
}

/// One panel of the dashboard.
struct Panel {
    title: String,
    unit: String,
    kind: String,
    /// Its queries: (expr, legendFormat).
    targets: Vec<(String, String)>,
}

fn text(v: &Value) -> String {
    v.as_str().unwrap_or_default().to_string()
}

/// The dashboard's panels.
fn panels(dashboard: &Value) -> Vec<Panel> {
    dashboard["panels"]
        .as_array()
        .unwrap_or_else(|| panic!("the dashboard has no panels"))
        .iter()
        .map(|p| Panel {
            title: text(&p["title"]),
            unit: text(&p["fieldConfig"]["defaults"]["unit"]),
            kind: text(&p["type"]),
            targets: p["targets"]
                .as_array()
                .into_iter()
                .flatten()
                .map(|t| (text(&t["expr"]), text(&t["legendFormat"])))
                .collect(),
        })
        .collect()
}

/// The PromQL of a panel query as Grafana sends it: its variables substituted (every job, a
/// rate window that covers the test's load).
fn promql(expr: &str) -> String {
    expr.replace("$__rate_interval", "5m")
        .replace("${job}", ".*")
        .replace("$job", ".*")
}

/// A running `prometheus`; killed when dropped.
struct Prometheus {
    child: Child,
    port: u16,
}

impl Drop for Prometheus {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Prometheus {
    /// Starts Prometheus on a free loopback port, scraping `target` every second and
    /// evaluating the rule file, with its data and log under `dir`.
    fn start(dir: &Path, target: &str) -> Self {
        let rules = monitoring_dir().join("prometheus-rules.yaml");
        let config = dir.join("prometheus.yml");
        std::fs::write(
            &config,
            format!(
                "global: {{scrape_interval: 1s, evaluation_interval: 1s}}\n\
                 rule_files: [{rules:?}]\n\
                 scrape_configs:\n\
                 - job_name: celgate\n  static_configs: [{{targets: [\"{target}\"]}}]\n",
                rules = rules.display().to_string()
            ),
        )
        .unwrap_or_else(|e| panic!("cannot write the Prometheus config: {e}"));
        let port = free_port();
        let log = std::fs::File::create(dir.join("prometheus.log"))
            .unwrap_or_else(|e| panic!("cannot create the Prometheus log: {e}"));
        let child = Command::new("prometheus")
            .arg(format!("--config.file={}", config.display()))
            .arg(format!(
                "--storage.tsdb.path={}",
                dir.join("prometheus-data").display()
            ))
            .arg(format!("--web.listen-address=127.0.0.1:{port}"))
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .unwrap_or_else(|e| {
                panic!("cannot start prometheus: {e}; install it with `make deps` (e2e/monitoring/deps.sh)")
            });
        Self { child, port }
    }

    fn get(&self, path: &str, params: &[(&str, &str)]) -> Value {
        let url = format!("http://127.0.0.1:{}{path}", self.port);
        let mut args = vec!["-s".to_string(), "--get".to_string(), url.clone()];
        for (k, v) in params {
            args.push("--data-urlencode".into());
            args.push(format!("{k}={v}"));
        }
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let out = curl(&args);
        serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
            panic!(
                "GET {url} {params:?}: not JSON ({e}): {}",
                String::from_utf8_lossy(&out.stdout)
            )
        })
    }

    /// The result of an instant query now.
    fn query(&self, expr: &str) -> Vec<Value> {
        let answer = self.get("/api/v1/query", &[("query", expr)]);
        assert_eq!(answer["status"], "success", "{expr}: {answer}");
        answer["data"]["result"]
            .as_array()
            .cloned()
            .unwrap_or_default()
    }

    /// The scrapes of celgate stored so far.
    fn scrapes(&self) -> u64 {
        self.query("sum(count_over_time(up[10m]))")
            .first()
            .and_then(|r| r["value"][1].as_str()?.parse::<f64>().ok())
            .map_or(0, |n| n as u64)
    }

    /// Waits until `n` more scrapes are stored, so rates see what happened before.
    async fn wait_scrapes(&self, n: u64) {
        let target = self.scrapes() + n;
        wait_for(
            &format!("{n} more scrapes"),
            Duration::from_secs(60),
            move || async move { (self.scrapes() >= target).then_some(()) },
        )
        .await;
    }

    async fn wait_ready(&self) {
        let url = format!("http://127.0.0.1:{}/-/ready", self.port);
        wait_for("prometheus /-/ready", Duration::from_secs(60), || {
            let url = url.clone();
            async move { curl(&["-sf", &url]).status.success().then_some(()) }
        })
        .await;
    }
}

fn unix_now() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs_f64())
}

fn policies() -> String {
    let rules = r#"
    resourceRules:
    - apiGroups: [""]
      apiVersions: ["v1"]
      operations: ["CREATE", "UPDATE"]
      resources: ["configmaps"]"#;
    let selector = r#"
  matchResources:
    namespaceSelector: {matchLabels: {engine: celgate}}"#;
    format!(
        r#"apiVersion: admission.celgate.io/v1
kind: ValidatingAdmissionPolicy
metadata: {{name: no-deny-label}}
spec:
  failurePolicy: Fail
  matchConstraints:{rules}
  validations:
  - expression: "!has(object.metadata.labels) || !('deny' in object.metadata.labels)"
    message: the deny label is set
---
apiVersion: admission.celgate.io/v1
kind: ValidatingAdmissionPolicyBinding
metadata: {{name: no-deny-label-binding}}
spec:
  policyName: no-deny-label
  validationActions: [Deny]{selector}
---
apiVersion: admission.celgate.io/v1
kind: ValidatingAdmissionPolicy
metadata: {{name: max-keys}}
spec:
  failurePolicy: Ignore
  paramKind: {{apiVersion: v1, kind: ConfigMap}}
  matchConstraints:{rules}
  validations:
  - expression: "!has(object.data) || object.data.size() <= int(params.data.maxKeys)"
    messageExpression: "'at most ' + params.data.maxKeys + ' keys'"
---
apiVersion: admission.celgate.io/v1
kind: ValidatingAdmissionPolicyBinding
metadata: {{name: max-keys-binding}}
spec:
  policyName: max-keys
  paramRef: {{name: limits, parameterNotFoundAction: Deny}}
  validationActions: [Deny]{selector}
---
apiVersion: admission.celgate.io/v1
kind: MutatingAdmissionPolicy
metadata: {{name: add-label}}
spec:
  failurePolicy: Fail
  reinvocationPolicy: Never
  matchConstraints:
    resourceRules:
    - apiGroups: [""]
      apiVersions: ["v1"]
      operations: ["CREATE"]
      resources: ["configmaps"]
  matchConditions:
  - name: load
    expression: "object.metadata.name.startsWith('load-')"
  mutations:
  - patchType: ApplyConfiguration
    applyConfiguration:
      expression: "Object{{metadata: Object.metadata{{labels: {{'mutated': 'yes'}}}}}}"
---
apiVersion: admission.celgate.io/v1
kind: MutatingAdmissionPolicyBinding
metadata: {{name: add-label-binding}}
spec:
  policyName: add-label{selector}
"#
    )
}

/// A ConfigMap `name` with `keys` data keys, labeled `deny` when `deny`.
fn config_map(name: &str, keys: usize, deny: bool) -> ConfigMap {
    let data: serde_json::Map<String, Value> =
        (0..keys).map(|k| (format!("k{k}"), json!("v"))).collect();
    let labels = if deny {
        json!({"deny": "x"})
    } else {
        json!({})
    };
    serde_json::from_value(json!({"metadata": {"name": name, "labels": labels}, "data": data}))
        .unwrap_or_else(|e| panic!("config map fixture: {e}"))
}

/// Creates ConfigMaps named `<prefix>-<n>` like `object` until `done` holds for the result.
async fn wait_until_created<F>(client: &Client, prefix: &str, keys: usize, deny: bool, done: F)
where
    F: Fn(&Result<ConfigMap, kube::Error>) -> bool,
{
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), NAMESPACE);
    let mut n = 0;
    let done = &done;
    wait_for(
        &format!("{prefix} to be enforced"),
        Duration::from_secs(60),
        || {
            n += 1;
            let (api, name) = (api.clone(), format!("{prefix}-{n}"));
            async move {
                let created = api
                    .create(&PostParams::default(), &config_map(&name, keys, deny))
                    .await;
                done(&created).then_some(())
            }
        },
    )
    .await;
}

fn denied(result: &Result<ConfigMap, kube::Error>) -> bool {
    matches!(result, Err(kube::Error::Api(s)) if s.message.contains("denied the request"))
}

/// The component rendered over config/default: the dashboard ConfigMap, the rules and the
/// named metrics port.
fn check_kustomize(cluster: &Cluster) {
    let overlay = cluster.dir().join("monitoring-overlay");
    std::fs::create_dir_all(&overlay).unwrap_or_else(|e| panic!("overlay dir: {e}"));
    // kustomize takes relative paths only: up to the root, then down to the config.
    let overlay = overlay
        .canonicalize()
        .unwrap_or_else(|e| panic!("overlay dir: {e}"));
    let relative = |target: PathBuf| {
        let target = target
            .canonicalize()
            .unwrap_or_else(|e| panic!("{}: {e}", target.display()));
        let up = "../".repeat(overlay.components().count() - 1);
        format!(
            "{up}{}",
            target.strip_prefix("/").unwrap_or(&target).display()
        )
    };
    std::fs::write(
        overlay.join("kustomization.yaml"),
        format!(
            "resources: [{:?}]\ncomponents: [{:?}]\n",
            relative(workspace().join("config/default")),
            relative(monitoring_dir())
        ),
    )
    .unwrap_or_else(|e| panic!("overlay: {e}"));
    let out = cluster.kubectl(&["kustomize", &overlay.display().to_string()], "");
    assert_success("kubectl kustomize", &out);
    let docs: Vec<Value> = serde_saphyr::from_multiple(&String::from_utf8_lossy(&out.stdout))
        .unwrap_or_else(|e| panic!("kustomize output: {e}"));
    let find = |kind: &str, name: &str| {
        docs.iter()
            .find(|d| d["kind"] == kind && d["metadata"]["name"] == name)
            .unwrap_or_else(|| panic!("no {kind} {name} rendered"))
            .clone()
    };
    let dashboard = find("ConfigMap", "celgate-dashboard");
    assert_eq!(dashboard["metadata"]["labels"]["grafana_dashboard"], "1");
    let shipped: Value = serde_json::from_str(
        dashboard["data"]["celgate.json"]
            .as_str()
            .unwrap_or_default(),
    )
    .unwrap_or_else(|e| panic!("the dashboard ConfigMap holds no JSON: {e}"));
    let committed: Value = serde_json::from_str(&read(&monitoring_dir().join("dashboard.json")))
        .unwrap_or_else(|e| panic!("dashboard.json: {e}"));
    assert_eq!(shipped, committed);
    let rule = find("PrometheusRule", "celgate");
    assert_eq!(
        rule["spec"],
        yaml(&read(&monitoring_dir().join("prometheus-rules.yaml")))
    );
    let monitor = find("PodMonitor", "celgate");
    assert_eq!(monitor["spec"]["podMetricsEndpoints"][0]["port"], "metrics");
    let deployment = find("Deployment", "celgate");
    let ports = &deployment["spec"]["template"]["spec"]["containers"][0]["ports"];
    assert!(
        ports
            .as_array()
            .into_iter()
            .flatten()
            .any(|p| p["name"] == "metrics" && p["containerPort"] == 8080),
        "the Deployment names no metrics port: {ports}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_real_prometheus_answers_every_dashboard_query_and_evaluates_every_rule() {
    let cluster = Cluster::start();
    cluster.install_crds();
    check_kustomize(&cluster);
    let metrics_port = free_port().to_string();
    let celgate = Celgate::spawn_with(
        &cluster,
        free_port(),
        "celgate",
        &[
            "--metrics-port",
            &metrics_port,
            "--decision-log-rate",
            "5",
            "--log-json",
        ],
        "info",
    );
    celgate.wait_ready().await;
    let prometheus = Prometheus::start(
        cluster.dir(),
        &format!("127.0.0.1:{}", celgate.metrics_port),
    );
    prometheus.wait_ready().await;
    prometheus.wait_scrapes(2).await;
    let started = unix_now();

    let client = cluster.client().await;
    create_namespace(&client, NAMESPACE, "celgate").await;
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), NAMESPACE);
    let mut limits = config_map("limits", 0, false);
    limits.data = Some([("maxKeys".to_string(), "2".to_string())].into());
    api.create(&PostParams::default(), &limits)
        .await
        .unwrap_or_else(|e| panic!("cannot create the param: {e}"));
    cluster.apply(&policies());
    wait_until_created(&client, "wait-deny", 1, true, denied).await;
    wait_until_created(&client, "wait-keys", 3, false, denied).await;
    wait_until_created(&client, "load-wait", 1, false, |r| {
        r.as_ref().is_ok_and(|c| {
            c.metadata
                .labels
                .as_ref()
                .is_some_and(|l| l.contains_key("mutated"))
        })
    })
    .await;
    // The series the policies created are scraped before the load, so rates show the load.
    prometheus.wait_scrapes(2).await;

    // Load: 240 creates, half denied (by the label policy or the param policy), and a policy
    // change midway (its propagation is observed).
    let (mut allowed, mut refused) = (0u32, 0u32);
    for i in 0..240 {
        if i == 120 {
            cluster.apply(&policies().replace("the deny label is set", "deny label set"));
        }
        let cm = match i % 4 {
            0 => config_map(&format!("load-{i}"), 1, false),
            1 => config_map(&format!("load-{i}"), 1, true),
            2 => config_map(&format!("load-{i}"), 3, false),
            _ => config_map(&format!("load-{i}"), 2, false),
        };
        match api.create(&PostParams::default(), &cm).await {
            Ok(created) => {
                allowed += 1;
                assert!(
                    created
                        .metadata
                        .labels
                        .is_some_and(|l| l.get("mutated").is_some_and(|v| v == "yes")),
                    "load-{i} was not mutated"
                );
            }
            Err(e) => {
                refused += 1;
                assert!(
                    denied(&Err(e)),
                    "load-{i} failed otherwise than by a denial"
                );
            }
        }
    }
    assert_eq!((allowed, refused), (120, 120));

    // Reviews celgate cannot decide: answered 400, counted as errors.
    let url = format!("https://127.0.0.1:{}/validate/fail", celgate.port);
    for _ in 0..5 {
        let out = curl(&[
            "-sk",
            "-o",
            "/dev/null",
            "-w",
            "%{http_code}",
            "-H",
            "content-type: application/json",
            "-d",
            r#"{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview"}"#,
            &url,
        ]);
        assert_eq!(String::from_utf8_lossy(&out.stdout), "400");
    }

    // Prometheus has scraped the end of the load.
    let p = &prometheus;
    wait_for(
        "prometheus to scrape the load",
        Duration::from_secs(60),
        move || async move {
            let result = p.query(
                "sum(celgate_admission_decisions_total{kind=\"validating\",decision=\"denied\"})",
            );
            let seen = result
                .first()
                .and_then(|r| r["value"][1].as_str())
                .and_then(|v| v.parse::<f64>().ok())
                .unwrap_or(0.0);
            let errors = p.query("sum(celgate_webhook_errors_total)");
            let errors = errors
                .first()
                .and_then(|r| r["value"][1].as_str())
                .and_then(|v| v.parse::<f64>().ok())
                .unwrap_or(0.0);
            (seen >= 120.0 && errors >= 5.0).then_some(())
        },
    )
    .await;

    prometheus.wait_scrapes(3).await;

    // Every panel query answers, each with at least one number.
    let dashboard: Value = serde_json::from_str(&read(&monitoring_dir().join("dashboard.json")))
        .unwrap_or_else(|e| panic!("dashboard.json: {e}"));
    let panels = panels(&dashboard);
    assert!(panels.len() >= 11, "{} panels", panels.len());
    let mut empty = Vec::new();
    for Panel { title, targets, .. } in &panels {
        assert!(!targets.is_empty(), "panel {title} has no query");
        for (expr, _) in targets {
            let result = prometheus.query(&promql(expr));
            let numbers = result
                .iter()
                .filter_map(|r| r["value"][1].as_str()?.parse::<f64>().ok())
                .filter(|v| v.is_finite())
                .count();
            if numbers == 0 {
                empty.push(format!("{title}: {expr} → {result:?}"));
            }
        }
    }
    assert!(
        empty.is_empty(),
        "panel queries without data:\n{}\nscrapes stored, successful, seconds since the start: {:?}\ntargets: {}",
        empty.join("\n"),
        (
            prometheus.query("count_over_time(up[5m])"),
            prometheus.query("sum_over_time(up[5m])"),
            unix_now() - started
        ),
        prometheus.get("/api/v1/targets", &[])
    );

    // The gauges say what happened: one replica leading, two fail-closed policies (one
    // validating, one mutating) and one fail-open bound, none failing to compile, a serving
    // certificate valid for about a year, and the policy changes' propagation observed.
    let value = |expr: &str| {
        let result = prometheus.query(expr);
        result
            .first()
            .and_then(|r| r["value"][1].as_str()?.parse::<f64>().ok())
            .unwrap_or_else(|| panic!("{expr}: {result:?}"))
    };
    assert_eq!(value("max(celgate_leader)"), 1.0);
    assert_eq!(
        value("sum(celgate_bound_policies{failure_policy=\"Fail\"})"),
        2.0
    );
    assert_eq!(
        value("sum(celgate_bound_policies{failure_policy=\"Ignore\"})"),
        1.0
    );
    assert_eq!(value("sum(celgate_policy_compile_errors)"), 0.0);
    let days_left = value(
        "(max(celgate_certificate_expiry_timestamp_seconds{certificate=\"serving\"}) - time()) / 86400",
    );
    assert!((360.0..366.0).contains(&days_left), "{days_left} days");
    assert!(value("sum(celgate_policy_propagation_seconds_count)") >= 6.0);
    assert_eq!(value("sum(celgate_policy_changes_pending)"), 0.0);

    // Every rule is loaded and evaluates without error.
    let expected = rule_names(&yaml(&read(
        &monitoring_dir().join("prometheus-rules.yaml"),
    )));
    let rules = wait_for(
        "every rule to be evaluated",
        Duration::from_secs(30),
        || {
            let answer = prometheus.get("/api/v1/rules", &[]);
            let rules: Vec<Value> = answer["data"]["groups"]
                .as_array()
                .into_iter()
                .flatten()
                .flat_map(|g| g["rules"].as_array().cloned().unwrap_or_default())
                .collect();
            let evaluated =
                rules.len() == expected.len() && rules.iter().all(|r| r["health"] != "unknown");
            async move { evaluated.then_some(rules) }
        },
    )
    .await;
    for rule in &rules {
        assert_eq!(rule["health"], "ok", "{rule}");
    }
    // Nothing is wrong here, so nothing fires.
    let firing: Vec<&Value> = rules.iter().filter(|r| r["state"] == "firing").collect();
    assert!(firing.is_empty(), "firing: {firing:?}");

    // The decision log wrote structured JSON lines (at most 5 a second) and counted the rest.
    let logs = celgate.logs();
    let lines: Vec<Value> = logs
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter(|l| l["target"] == "celgate::decision")
        .collect();
    let line = lines
        .iter()
        .find(|l| l["fields"]["policy"] == "no-deny-label")
        .unwrap_or_else(|| panic!("no decision log line:\n{logs}"));
    let fields = &line["fields"];
    assert_eq!(fields["decision"], "denied", "{line}");
    assert_eq!(fields["kind"], "validating", "{line}");
    assert_eq!(fields["binding"], "no-deny-label-binding", "{line}");
    assert_eq!(fields["namespace"], "monitoring", "{line}");
    assert_eq!(fields["resource"], "v1/configmaps", "{line}");
    assert_eq!(fields["operation"], "CREATE", "{line}");
    assert!(
        fields["name"].as_str().is_some_and(|n| !n.is_empty()),
        "{line}"
    );
    assert!(
        fields["user"].as_str().is_some_and(|u| !u.is_empty()),
        "{line}"
    );
    assert_eq!(
        fields["message"],
        "ValidatingAdmissionPolicy 'no-deny-label' with binding 'no-deny-label-binding' denied request: the deny label is set",
        "{line}"
    );
    let metrics = celgate.metrics();
    let count = |name: &str| {
        metrics
            .lines()
            .find_map(|l| l.strip_prefix(&format!("{name} ")))
            .and_then(|v| v.parse::<u64>().ok())
            .unwrap_or_else(|| panic!("no {name}:\n{metrics}"))
    };
    assert!(
        count("celgate_decision_log_lines_total") + count("celgate_decision_log_dropped_total")
            >= 120
    );

    if let Some(out) = std::env::var_os("CELGATE_DASHBOARD_DATA") {
        let end = unix_now();
        let mut dumped = Vec::new();
        for Panel {
            title,
            unit,
            kind,
            targets,
        } in &panels
        {
            let series: Vec<Value> = targets
                .iter()
                .map(|(expr, legend)| {
                    let answer = prometheus.get(
                        "/api/v1/query_range",
                        &[
                            ("query", &promql(expr).replace("[5m]", "[30s]")),
                            ("start", &started.to_string()),
                            ("end", &end.to_string()),
                            ("step", "2"),
                        ],
                    );
                    json!({"expr": expr, "legend": legend, "result": answer["data"]["result"]})
                })
                .collect();
            dumped.push(json!({"title": title, "unit": unit, "type": kind, "targets": series}));
        }
        std::fs::write(
            &out,
            serde_json::to_vec_pretty(&json!({"panels": dumped})).unwrap_or_default(),
        )
        .unwrap_or_else(|e| panic!("cannot write the dashboard data: {e}"));
    }
}
