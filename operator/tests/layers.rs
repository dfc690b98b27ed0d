//! The operator's rooms import only downwards, read from the code's own `use crate::…` lines
//! (test modules left out): each room may use the rooms of lower floors and no room of its
//! own floor or above, so the pipeline reads bottom-up and no import circle can form. The
//! runtime never names the offline commands. `docs/architecture.md` describes the floors.

#![allow(clippy::expect_used, clippy::unwrap_used)]

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

/// Each room (a top-level module of `src/`) and its floor, bottom first.
const FLOORS: &[(&str, u8)] = &[
    ("retry", 0),
    ("metrics", 0),
    ("policy_kind", 1),
    ("cluster", 1),
    ("serving", 1),
    ("args", 2),
    ("controllers", 2),
    ("status", 3),
    ("audit", 3),
    ("process", 4),
    ("lib", 5),
    // Test fixtures, used only by test modules.
    ("fixtures", 5),
];

fn floor(room: &str) -> u8 {
    FLOORS
        .iter()
        .find(|(r, _)| *r == room)
        .map(|(_, f)| *f)
        .unwrap_or_else(|| panic!("room {room} has no floor in FLOORS: give it one"))
}

/// Every `.rs` file below `dir`.
fn sources(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            sources(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// The rooms a file's code (before its test module) names as `crate::<room>`.
fn imported_rooms(code: &str) -> BTreeSet<String> {
    let code = code.split("#[cfg(test)]\nmod tests").next().unwrap_or(code);
    let mut rooms = BTreeSet::new();
    for (at, _) in code.match_indices("crate::") {
        let rest = &code[at + "crate::".len()..];
        let names: Vec<&str> = if let Some(group) = rest.strip_prefix('{') {
            let group = group.split('}').next().unwrap_or_default();
            group
                .split(',')
                .map(|n| n.trim().split("::").next().unwrap_or_default())
                .collect()
        } else {
            vec![
                rest.split(|c: char| !c.is_alphanumeric() && c != '_')
                    .next()
                    .unwrap_or_default(),
            ]
        };
        rooms.extend(
            names
                .into_iter()
                .filter(|n| !n.is_empty())
                .map(str::to_string),
        );
    }
    rooms
}

#[test]
fn rooms_import_only_from_lower_floors_and_never_the_offline_commands() {
    let src = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    sources(&src, &mut files);
    let mut upward = Vec::new();
    for file in &files {
        let relative = file.strip_prefix(&src).unwrap();
        let room = relative
            .components()
            .next()
            .unwrap()
            .as_os_str()
            .to_string_lossy()
            .trim_end_matches(".rs")
            .to_string();
        let code = std::fs::read_to_string(file).unwrap();
        assert!(
            !code.contains("celgate_cli"),
            "{} names the offline commands (celgate_cli): the runtime must not",
            relative.display()
        );
        for target in imported_rooms(&code) {
            if target != room && floor(&target) >= floor(&room) {
                upward.push(format!("{} ({room}) imports {target}", relative.display()));
            }
        }
    }
    assert!(
        upward.is_empty(),
        "imports that do not run downwards: {upward:#?}"
    );
}

#[test]
fn the_reader_sees_grouped_and_nested_imports() {
    let rooms = imported_rooms(
        "use crate::controllers::policies::{self, Stores};\nuse crate::{metrics, retry::Backoff};\nfn f() { crate::status::x(); }\n#[cfg(test)]\nmod tests { use crate::fixtures; }",
    );
    let expected: BTreeSet<String> = ["controllers", "metrics", "retry", "status"]
        .into_iter()
        .map(str::to_string)
        .collect();
    assert_eq!(rooms, expected);
}
