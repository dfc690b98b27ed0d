//! The `celgate` command line: the operator with its co-located admission webhook (`celgate
//! run`, the default), the offline commands (`check`, `eval`, `test`, `scan`, `convert`, `crds`) and
//! `probe`, which proves an installed celgate decides. It only reads the
//! command line and hands it to the operator library or the offline commands.

use std::process::ExitCode;

use celgate_operator::RunArgs;
use clap::{Parser, Subcommand};

/// What `celgate --version` prints after the name: the crate version and the git revision it was
/// built from (build.rs).
pub const VERSION: &str = concat!(
    env!("CARGO_PKG_VERSION"),
    " (rev ",
    env!("CELGATE_REVISION"),
    ")"
);

/// celgate: ValidatingAdmissionPolicy and MutatingAdmissionPolicy for any cluster, as CRDs.
///
/// Without a command, celgate runs the operator (as `celgate run`).
#[derive(Parser, Debug)]
#[command(version = VERSION, about, args_conflicts_with_subcommands = true)]
pub struct Cli {
    #[command(subcommand)]
    command: Option<Command>,
    #[command(flatten)]
    run: RunArgs,
}

/// The commands.
#[derive(Subcommand, Debug)]
enum Command {
    /// Run the operator and the admission webhook against the cluster in KUBECONFIG (or in-cluster).
    Run(Box<RunArgs>),
    /// Print the CRDs of celgate's four kinds as YAML, ready for `kubectl apply -f -`.
    Crds,
    /// Decide one admission request offline, with a trace of every expression
    /// (exit code 0 allowed, 1 denied, 2 wrong input).
    Eval(celgate_cli::eval::EvalArgs),
    /// Write in-tree ValidatingAdmissionPolicies, MutatingAdmissionPolicies and their bindings
    /// (admissionregistration.k8s.io v1, v1beta1, v1alpha1) as admission.celgate.io/v1 objects,
    /// converted and defaulted as kube-apiserver serves them as v1 (exit code 0 written, 2 wrong
    /// input).
    Convert(celgate_cli::convert::ConvertArgs),
    /// Type-check policy files offline against the built-in kinds and CRD files
    /// (exit code 0 clean, 1 findings, 2 wrong input).
    Check(celgate_cli::check::CheckArgs),
    /// Run policy test suites offline: each case's request decided as `eval` decides it and
    /// compared with its expected result (exit code 0 all pass, 1 a case fails, 2 wrong input).
    Test(celgate_cli::suite::TestArgs),
    /// List the would-be violations of manifests, or with --cluster of a cluster's objects: each
    /// object decided as a CREATE under every ValidatingAdmissionPolicy binding (exit code 0
    /// none, 1 violations, 2 wrong input).
    Scan(celgate_cli::scan::ScanArgs),
    /// Prove through the API server that the installed celgate decides: a dry-run ConfigMap
    /// labelled probe.celgate.io/verdict=deny is denied by celgate's webhook with the named
    /// policy's message, one labelled allow is admitted (what `helm test` runs; exit code 0
    /// proven, 1 not, 2 the cluster cannot be asked).
    Probe(celgate_cli::probe::ProbeArgs),
}

/// Prints the CRDs as a multi-document YAML stream.
fn print_crds() -> Result<(), celgate_crds::YamlError> {
    for (_, crd) in celgate_crds::crds() {
        println!("---\n{}", celgate_crds::to_yaml(&crd)?);
    }
    Ok(())
}

/// Runs what the command line asks for; the process exits with the code returned.
pub fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.command.unwrap_or(Command::Run(Box::new(cli.run))) {
        Command::Check(args) => {
            return celgate_cli::run(move || {
                celgate_cli::check::run(&args, &mut std::io::stdout().lock())
            });
        }
        Command::Convert(args) => {
            return celgate_cli::run(move || {
                celgate_cli::convert::run(&args, &mut std::io::stdout().lock())
            });
        }
        Command::Eval(args) => {
            return celgate_cli::run(move || {
                celgate_cli::eval::run(&args, &mut std::io::stdout().lock())
            });
        }
        Command::Test(args) => {
            return celgate_cli::run(move || {
                celgate_cli::suite::run(&args, &mut std::io::stdout().lock())
            });
        }
        Command::Scan(args) => {
            return celgate_cli::run(move || {
                celgate_cli::scan::run(&args, &mut std::io::stdout().lock())
            });
        }
        Command::Probe(args) => {
            return celgate_cli::run(move || {
                celgate_cli::probe::run(&args, &mut std::io::stdout().lock())
            });
        }
        Command::Crds => print_crds().map_err(|e| format!("cannot render CRD YAML: {e}")),
        Command::Run(args) => celgate_operator::run(*args).map_err(|e| e.to_string()),
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
        assert_eq!(args.operation, Some(celgate_cli::eval::Operation::Delete));
        assert_eq!(args.output, celgate_cli::Format::Json);
        assert_eq!(args.user, "celgate-eval");
        assert_eq!(args.groups, vec!["system:authenticated".to_string()]);

        let cli = Cli::try_parse_from(["celgate", "test", "a", "b", "--format", "junit"])
            .expect("parses");
        let Some(Command::Test(args)) = cli.command else {
            panic!("not test: {:?}", cli.command);
        };
        assert_eq!(args.paths.len(), 2);
        assert_eq!(args.output, celgate_cli::suite::TestFormat::Junit);
        let cli = Cli::try_parse_from([
            "celgate",
            "scan",
            "m/",
            "--policies",
            "p.yaml",
            "-o",
            "json",
        ])
        .expect("parses");
        assert!(
            matches!(cli.command, Some(Command::Scan(args)) if args.output == celgate_cli::Format::Json)
        );
        let err =
            Cli::try_parse_from(["celgate", "scan", "m/"]).expect_err("--policies is required");
        assert_eq!(err.exit_code(), i32::from(celgate_cli::EXIT_USAGE));

        let missing = Cli::try_parse_from(["celgate", "eval", "--policy", "p.yaml"]);
        let err = missing.expect_err("--binding and --object are required");
        assert_eq!(err.exit_code(), i32::from(celgate_cli::EXIT_USAGE));
        let mixed = Cli::try_parse_from(["celgate", "--webhook-port", "1", "eval"]);
        assert!(
            mixed.is_err(),
            "operator flags do not go with an offline command"
        );
    }
}
