//! `make schemas`: starts a local control plane of the pinned version, writes the snapshot of
//! its built-in kinds' discovery and OpenAPI v3 documents (see `celgate_e2e::schemas`) to the
//! path given, or to `kinds/schemas/builtin-<major>.<minor>.json`, and stops it.

use std::process::ExitCode;

use celgate_e2e::Cluster;
use celgate_e2e::schemas::{builtin_schemas_path, builtin_snapshot};

#[tokio::main]
async fn main() -> ExitCode {
    let out = match std::env::args_os().nth(1) {
        Some(path) => path.into(),
        None => match builtin_schemas_path() {
            Ok(path) => path,
            Err(e) => {
                eprintln!("builtin-schemas: {e}");
                return ExitCode::FAILURE;
            }
        },
    };
    let cluster = Cluster::start();
    let snapshot = match builtin_snapshot(&cluster.client().await).await {
        Ok(snapshot) => snapshot,
        Err(e) => {
            eprintln!("builtin-schemas: {e}");
            return ExitCode::FAILURE;
        }
    };
    if let Err(e) = std::fs::write(&out, snapshot) {
        eprintln!("builtin-schemas: cannot write {}: {e}", out.display());
        return ExitCode::FAILURE;
    }
    eprintln!("builtin-schemas: wrote {}", out.display());
    ExitCode::SUCCESS
}
