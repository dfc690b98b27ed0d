//! Embeds the snapshot of the built-in kinds' discovery and OpenAPI v3 documents
//! (`schemas/builtin-<minor>.json`, written by `make schemas`) gzip-compressed, for the
//! offline commands (`builtin.rs`).

use std::fs;
use std::io::Write as _;
use std::path::PathBuf;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let dir = PathBuf::from(std::env::var("CARGO_MANIFEST_DIR")?).join("schemas");
    println!("cargo::rerun-if-changed={}", dir.display());
    let snapshots: Vec<PathBuf> = fs::read_dir(&dir)?
        .filter_map(Result::ok)
        .map(|e| e.path())
        .filter(|p| {
            p.file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.starts_with("builtin-") && n.ends_with(".json"))
        })
        .collect();
    let [snapshot] = snapshots.as_slice() else {
        return Err(format!(
            "{} must hold exactly one builtin-<minor>.json (run `make schemas`), found {}",
            dir.display(),
            snapshots.len()
        )
        .into());
    };
    let text = fs::read(snapshot)?;
    let out = PathBuf::from(std::env::var("OUT_DIR")?).join("builtin-schemas.json.gz");
    let mut encoder =
        flate2::write::GzEncoder::new(fs::File::create(out)?, flate2::Compression::best());
    encoder.write_all(&text)?;
    encoder.finish()?;
    Ok(())
}
