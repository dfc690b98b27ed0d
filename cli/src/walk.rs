//! The files a path names for a command: the file itself, or the files under a folder (and its
//! subfolders) whose names the command reads.

use std::path::{Path, PathBuf};

use crate::documents::InputError;

/// `path` when it is a file; else the files under it that `wanted` accepts, sorted (symbolic
/// links to folders are not followed, so a loop cannot hold the walk).
pub fn files_under(path: &Path, wanted: fn(&Path) -> bool) -> Result<Vec<PathBuf>, InputError> {
    let mut found = Vec::new();
    for entry in walkdir::WalkDir::new(path).sort_by_file_name() {
        let entry = entry.map_err(|e| InputError::Read {
            file: e.path().unwrap_or(path).display().to_string(),
            source: e.into(),
        })?;
        if entry.depth() == 0 && !entry.file_type().is_dir() {
            return Ok(vec![path.to_path_buf()]);
        }
        if !entry.file_type().is_dir() && wanted(entry.path()) {
            found.push(entry.into_path());
        }
    }
    found.sort();
    Ok(found)
}

/// The file's name, `""` when it has none that is UTF-8.
pub fn file_name(path: &Path) -> &str {
    path.file_name().and_then(|n| n.to_str()).unwrap_or("")
}
