//! Writes the CRD YAML of the four kinds into a directory (default `config/crd`).

use std::path::PathBuf;
use std::process::ExitCode;

fn main() -> ExitCode {
    let dir = PathBuf::from(
        std::env::args()
            .nth(1)
            .unwrap_or_else(|| "config/crd".into()),
    );
    if let Err(e) = std::fs::create_dir_all(&dir) {
        eprintln!("crdgen: cannot create {}: {e}", dir.display());
        return ExitCode::FAILURE;
    }
    for (file, crd) in celgate_crds::crds() {
        let path = dir.join(file);
        let yaml = match celgate_crds::to_yaml(&crd) {
            Ok(yaml) => yaml,
            Err(e) => {
                eprintln!("crdgen: cannot render {file}: {e}");
                return ExitCode::FAILURE;
            }
        };
        if let Err(e) = std::fs::write(&path, yaml) {
            eprintln!("crdgen: cannot write {}: {e}", path.display());
            return ExitCode::FAILURE;
        }
        println!("wrote {}", path.display());
    }
    ExitCode::SUCCESS
}
