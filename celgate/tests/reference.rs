//! The reference pages generated from the code: `docs/reference/flags.md` from the command
//! line's definition and `docs/reference/metrics.md` from the metrics registry the process
//! serves. Each test fails when its committed page differs from what the code generates;
//! `make docs` writes both (the tests with `CELGATE_WRITE_DOCS=1`).

#![allow(clippy::expect_used, clippy::unwrap_used)]

use std::collections::BTreeSet;
use std::fmt::Write as _;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use clap::CommandFactory;

/// Compares `generated` with the committed page, or writes it when `CELGATE_WRITE_DOCS` is set.
fn check(page: &str, generated: &str) {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../docs/reference")
        .join(page);
    if std::env::var_os("CELGATE_WRITE_DOCS").is_some() {
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(&path, generated).unwrap();
        return;
    }
    let committed = std::fs::read_to_string(&path).unwrap_or_default();
    if committed != generated {
        let line = committed
            .lines()
            .zip(generated.lines())
            .position(|(a, b)| a != b)
            .unwrap_or_else(|| committed.lines().count().min(generated.lines().count()));
        panic!(
            "docs/reference/{page} is not what the code generates (first difference at line {}): run `make docs`",
            line + 1
        );
    }
}

/// Text for one cell of a Markdown table.
fn cell(text: &str) -> String {
    text.split_whitespace()
        .collect::<Vec<_>>()
        .join(" ")
        .replace('|', "\\|")
}

fn flags() -> String {
    let command = celgate::Cli::command();
    let mut page = String::from(
        "# Command-line reference\n\n\
         Generated from the command line's definition by `make docs`; a test fails when this page\n\
         and the code differ. Every flag of `celgate run` can also be set by its environment\n\
         variable; `celgate` without a command is `celgate run`.\n",
    );
    for sub in command.get_subcommands() {
        let _ = write!(
            page,
            "\n## `celgate {}`\n\n{}\n",
            sub.get_name(),
            cell(&sub.get_about().map(ToString::to_string).unwrap_or_default())
        );
        let args: Vec<_> = sub
            .get_arguments()
            .filter(|a| !["help", "version"].contains(&a.get_id().as_str()))
            .collect();
        if args.is_empty() {
            page.push_str("\nNo flags.\n");
            continue;
        }
        page.push_str("\n| flag | environment | default | description |\n|---|---|---|---|\n");
        for arg in args {
            let name = match (arg.get_long(), arg.get_short()) {
                (Some(long), Some(short)) => format!("`-{short}`, `--{long}`"),
                (Some(long), None) => format!("`--{long}`"),
                _ => format!("`<{}>`", arg.get_id().as_str().to_uppercase()),
            };
            let env = arg
                .get_env()
                .map(|e| format!("`{}`", e.to_string_lossy()))
                .unwrap_or_default();
            let default: Vec<String> = arg
                .get_default_values()
                .iter()
                .map(|v| v.to_string_lossy().into_owned())
                .collect();
            let default = if default.is_empty() {
                String::new()
            } else {
                format!("`{}`", default.join(","))
            };
            let mut help = arg
                .get_long_help()
                .or(arg.get_help())
                .map(ToString::to_string)
                .unwrap_or_default();
            let values: Vec<String> = arg
                .get_possible_values()
                .iter()
                .filter(|v| !v.is_hide_set())
                .map(|v| format!("`{}`", v.get_name()))
                .collect();
            if !values.is_empty() && arg.get_action().takes_values() {
                let _ = write!(help, ". One of: {}", values.join(", "));
            }
            if arg.is_required_set() {
                help.push_str(" Required.");
            }
            let _ = writeln!(page, "| {name} | {env} | {default} | {} |", cell(&help));
        }
    }
    page
}

/// One family of the exposition: its type, help and label names.
#[derive(Default)]
struct Family {
    kind: String,
    help: String,
    unit: String,
    labels: BTreeSet<String>,
}

/// Every family of the registry with at least one series: the webhook's families and the
/// certificates' have series only once something happened, so one of each happens here.
fn exercised() -> prometheus_client::registry::Registry {
    use celgate_engine::mutate::MutationCheck;
    use celgate_engine::validate::{Check, ErrorType};
    use celgate_webhook::decision_log::{AdmissionKind, Line};

    let (registry, webhook) = celgate_operator::metrics::registry(10);
    let (policy, binding): (Arc<str>, Arc<str>) = (Arc::from("p"), Arc::from("b"));
    let elapsed = Duration::from_micros(5);
    webhook.record(&[Check {
        policy: policy.clone(),
        binding: binding.clone(),
        error_type: ErrorType::InvalidError,
        enforcement_action: "deny",
        message: Some(Arc::from("denied")),
        elapsed,
    }]);
    webhook.record_mutations(&[MutationCheck {
        policy,
        binding,
        error_type: ErrorType::NoError,
        elapsed,
    }]);
    webhook.record_excepted(
        &[celgate_engine::validate::Excepted {
            policy: Arc::from("p"),
            binding: Arc::from("b"),
            exception: Arc::from("team-a/web"),
        }],
        std::time::SystemTime::now(),
    );
    celgate_operator::metrics::audit_binding(&Arc::from("p"), &Arc::from("b"), 10, 2);
    webhook.request("/validate/fail", 200, elapsed);
    webhook.error("/validate/fail", "not_ready");
    webhook.connection_closed("over_limit");
    webhook.connections_open(1);
    let request = serde_json::json!({"operation": "CREATE"});
    webhook.decided(
        AdmissionKind::Validating,
        &request,
        Some(Line::denied(Some(("p", "b")), "denied")),
    );
    let pem = rcgen::generate_simple_self_signed(vec!["celgate".to_string()])
        .unwrap()
        .cert
        .pem();
    celgate_operator::metrics::certificates(&pem, &pem).unwrap();
    registry
}

fn metrics() -> String {
    let registry = exercised();
    let mut text = String::new();
    prometheus_client::encoding::text::encode(&mut text, &registry).unwrap();
    let mut families: Vec<(String, Family)> = Vec::new();
    for line in text.lines() {
        if line == "# EOF" {
            break;
        }
        if let Some(rest) = line.strip_prefix("# ") {
            let mut parts = rest.splitn(3, ' ');
            let (what, name, value) = (
                parts.next().unwrap_or_default(),
                parts.next().unwrap_or_default(),
                parts.next().unwrap_or_default(),
            );
            if families.last().is_none_or(|(n, _)| n != name) {
                families.push((name.to_string(), Family::default()));
            }
            let family = &mut families.last_mut().unwrap().1;
            match what {
                "TYPE" => family.kind = value.to_string(),
                "HELP" => family.help = value.to_string(),
                "UNIT" => family.unit = value.to_string(),
                _ => {}
            }
        } else if let Some((_, labels)) = line.split_once('{')
            && let Some((_, family)) = families.last_mut()
        {
            let labels = labels.split('}').next().unwrap_or_default();
            for pair in labels.split(',') {
                if let Some((key, _)) = pair.split_once('=')
                    && key != "le"
                {
                    family.labels.insert(key.to_string());
                }
            }
        }
    }
    // The registry's descriptors (its Debug form is the only way to list them): each must be
    // in the page, so a family added without being exercised above fails here.
    let described = format!("{registry:?}");
    for name in described.split("Descriptor { name: \"").skip(1) {
        let name = name.split('"').next().unwrap_or_default();
        assert!(
            families
                .iter()
                .any(|(f, _)| f == &format!("celgate_{name}")),
            "the family celgate_{name} has no series: exercise it in `exercised()`"
        );
    }
    let mut page = String::from(
        "# Metrics reference\n\n\
         Every family celgate serves on its metrics port (`/metrics`, OpenMetrics text),\n\
         generated from the registry by `make docs`; a test fails when this page and the code\n\
         differ. Histograms are exposed as `_bucket`, `_sum` and `_count` series. Each family is listed with its label names.\n\
         [monitoring.md](../monitoring.md) explains how to read them.\n\n\
         | metric | type | labels | description |\n|---|---|---|---|\n",
    );
    for (name, family) in families {
        let labels: Vec<String> = family.labels.iter().map(|l| format!("`{l}`")).collect();
        let unit = if family.unit.is_empty() {
            String::new()
        } else {
            format!(" (unit: {})", family.unit)
        };
        let exposed = if family.kind == "counter" {
            format!("{name}_total")
        } else {
            name
        };
        let _ = writeln!(
            page,
            "| `{exposed}` | {} | {} | {}{unit} |",
            family.kind,
            labels.join(", "),
            cell(&family.help)
        );
    }
    page
}

#[test]
fn the_flags_reference_is_what_the_command_line_defines() {
    check("flags.md", &flags());
}

#[test]
fn the_metrics_reference_is_what_the_registry_serves() {
    check("metrics.md", &metrics());
}
