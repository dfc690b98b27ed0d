//! The offline commands: `celgate eval` decides one admission request from files, `celgate
//! check` type-checks policy files, `celgate convert` writes in-tree policies as celgate's, `celgate test` runs policy test suites and `celgate scan`
//! lists the would-be violations of manifests, all without a cluster (`scan --cluster` reads a
//! cluster's objects, read-only); `celgate probe` asks a cluster's API server to prove that an
//! installed celgate decides (dry runs, nothing stored). Each runs on a thread
//! with the stack the engine needs and exits 0 (allowed / clean), 1 (denied / findings) or 2
//! (the command line or an input file is wrong).

pub mod check;
pub mod convert;
pub mod defaults;
pub mod documents;
pub mod eval;
pub mod intree;
pub mod probe;
pub mod scan;
pub mod suite;
pub mod types;
pub mod walk;

use std::process::ExitCode;

use thiserror::Error;

/// Exit code of a request that is allowed, files with no finding, suites that pass or manifests
/// with no violation.
pub const EXIT_OK: u8 = 0;
/// Exit code of a request that is denied, files with findings, a suite case that fails or a
/// violation.
pub const EXIT_FINDINGS: u8 = 1;
/// Exit code of a wrong command line or input file (clap uses it for usage errors too).
pub const EXIT_USAGE: u8 = 2;

/// How a command prints its result.
#[derive(clap::ValueEnum, Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Format {
    /// Text for people.
    #[default]
    Human,
    /// One JSON document.
    Json,
}

/// Writes a report in the output format: `human()` for people, or the report as JSON.
fn write_report(
    format: Format,
    report: &impl serde::Serialize,
    human: impl FnOnce() -> String,
    out: &mut dyn std::io::Write,
) -> Result<(), CliError> {
    match format {
        Format::Human => out.write_all(human().as_bytes())?,
        Format::Json => {
            serde_json::to_writer_pretty(&mut *out, report)
                .map_err(|e| CliError::Internal(e.to_string()))?;
            out.write_all(b"\n")?;
        }
    }
    Ok(())
}

/// Why an offline command could not do its work (exit code 2).
#[derive(Debug, Error)]
pub enum CliError {
    /// An input file cannot be used.
    #[error(transparent)]
    Input(#[from] documents::InputError),
    /// The command line asks for something that cannot be done.
    #[error("{0}")]
    Usage(String),
    /// The result cannot be written.
    #[error("cannot write the result: {0}")]
    Output(#[from] std::io::Error),
    /// A case of a `celgate test` suite cannot be run.
    #[error("{suite}, case {case:?}: {source}")]
    Case {
        /// The suite file.
        suite: String,
        /// The case's name.
        case: String,
        /// Why.
        #[source]
        source: Box<CliError>,
    },
    /// The embedded snapshot of the built-in kinds cannot be read.
    #[error(transparent)]
    Builtin(#[from] celgate_kinds::builtin::BuiltinError),
    /// The cluster in `KUBECONFIG` cannot be read (`celgate scan --cluster`, `celgate probe`).
    #[error("cannot read the cluster: {0}")]
    Cluster(String),
    /// The command's thread failed.
    #[error("internal error: {0}")]
    Internal(String),
}

/// Runs an offline command on a thread with the engine's stack size and turns its result into
/// the process exit code.
pub fn run(command: impl FnOnce() -> Result<u8, CliError> + Send + 'static) -> ExitCode {
    let spawned = std::thread::Builder::new()
        .name("celgate-offline".into())
        .stack_size(celgate_snapshot::dispatch::THREAD_STACK_BYTES)
        .spawn(command);
    let result = match spawned {
        Ok(handle) => handle
            .join()
            .unwrap_or_else(|_| Err(CliError::Internal("the command panicked".into()))),
        Err(e) => Err(CliError::Internal(format!("cannot start a thread: {e}"))),
    };
    match result {
        Ok(code) => ExitCode::from(code),
        Err(e) => {
            eprintln!("celgate: {e}");
            ExitCode::from(EXIT_USAGE)
        }
    }
}
