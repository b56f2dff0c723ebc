//! The pipeline is one-way: each top-level module of the gateway imports only modules in lower
//! layers (docs/ARCHITECTURE.md draws the same picture), and no source file outgrows ~600 lines.
//! Reads the sources, so a new `use crate::…` that points upward fails here, with its file.

#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a panic is the failure report

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

/// Outer to inner. A module may import any module in a later layer, none in its own or earlier.
const LAYERS: &[&[&str]] = &[
    &["server"],
    &["console"],
    &["batch"],
    &["epp"],
    &["a2a", "admin", "catalog", "mcp", "proxy"],
    &["policy"],
    &["app"],
    &["http"],
    &["agents", "experiments", "org_rules"],
    &["auth", "cache", "guard", "limit", "metrics", "store", "telemetry"],
    &["route", "usage", "error", "shared"],
    &["translate", "upstream"],
    &["config", "records"],
    &["endpoint", "clock", "glob", "memory", "redact"],
];

const MAX_LINES: usize = 600;

fn layer_of(module: &str) -> Option<usize> {
    LAYERS.iter().position(|layer| layer.contains(&module))
}

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

/// The top-level modules a source names as `crate::x` or `crate::{x, y}`.
fn imports(text: &str) -> BTreeSet<String> {
    let mut found = BTreeSet::new();
    let mut rest = text;
    while let Some(at) = rest.find("crate::") {
        rest = &rest[at + "crate::".len()..];
        let names = match rest.strip_prefix('{') {
            Some(group) => &group[..group.find('}').unwrap_or(group.len())],
            None => rest,
        };
        for name in names.split(',') {
            let name: String =
                name.trim().chars().take_while(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || *c == '_').collect();
            if !name.is_empty() {
                found.insert(name);
            }
            if !rest.starts_with('{') {
                break;
            }
        }
    }
    found
}

#[test]
fn modules_import_only_lower_layers_and_files_stay_small() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    sources(&src, &mut files);
    let mut problems = Vec::new();
    for file in &files {
        let rel = file.strip_prefix(&src).unwrap();
        let top = rel.components().next().unwrap().as_os_str().to_string_lossy();
        let module = top.trim_end_matches(".rs");
        if module == "lib" {
            continue;
        }
        let text = std::fs::read_to_string(file).unwrap();
        let lines = text.lines().count();
        if lines > MAX_LINES {
            problems.push(format!("{} has {lines} lines (at most {MAX_LINES}): split it", rel.display()));
        }
        let Some(own) = layer_of(module) else {
            problems
                .push(format!("module `{module}` ({}) is in no layer: add it to LAYERS and the docs", rel.display()));
            continue;
        };
        for import in imports(&text) {
            if import == module {
                continue;
            }
            match layer_of(&import) {
                Some(layer) if layer > own => {}
                Some(_) => {
                    problems.push(format!("{} imports `{import}`, which is not below `{module}`", rel.display()))
                }
                None => problems.push(format!("{} imports `{import}`, which is in no layer", rel.display())),
            }
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

#[test]
fn the_import_reader_sees_both_forms() {
    let text = "use crate::app::App;\nuse crate::{http, limit::Permit};\nlet x = crate::clock::unix_ms();";
    let names: Vec<String> = imports(text).into_iter().collect();
    assert_eq!(names, ["app", "clock", "http", "limit"]);
}
