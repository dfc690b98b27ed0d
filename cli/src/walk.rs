//! The files a path names for a command: the file itself, or the files under a folder (and its
//! subfolders) whose names the command reads.

use std::path::{Path, PathBuf};

use crate::documents::InputError;

/// `path` when it is a file; else the files under it that `wanted` accepts, sorted (symbolic
/// links to folders are not followed, so a loop cannot hold the walk).
pub fn files_under(path: &Path, wanted: fn(&Path) -> bool) -> Result<Vec<PathBuf>, InputError> {
    let read_error = |folder: &Path, source| InputError::Read {
        file: folder.display().to_string(),
        source,
    };
    if !std::fs::metadata(path)
        .map_err(|e| read_error(path, e))?
        .is_dir()
    {
        return Ok(vec![path.to_path_buf()]);
    }
    let mut found = Vec::new();
    let mut folders = vec![path.to_path_buf()];
    while let Some(folder) = folders.pop() {
        for entry in std::fs::read_dir(&folder).map_err(|e| read_error(&folder, e))? {
            let entry = entry.map_err(|e| read_error(&folder, e))?;
            let entry_path = entry.path();
            if entry.file_type().is_ok_and(|t| t.is_dir()) {
                folders.push(entry_path);
            } else if wanted(&entry_path) {
                found.push(entry_path);
            }
        }
    }
    found.sort();
    Ok(found)
}

/// The file's name, `""` when it has none that is UTF-8.
pub fn file_name(path: &Path) -> &str {
    path.file_name().and_then(|n| n.to_str()).unwrap_or("")
}
