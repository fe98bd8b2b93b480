//! The layout `docs/architecture.md` describes holds: dependencies between
//! the stage folders of `src/` point one way (no import cycle), `unsafe`
//! appears only in `src/source/mapped.rs`, every source file opens with a
//! doc comment, and no source file is over 1,000 lines.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// Each top-level module of the crate and the modules it may use: only
/// lower layers (`model` is used by everything).
const LAYERS: &[(&str, &[&str])] = &[
    ("model", &[]),
    ("build_info", &[]),
    ("format", &["model"]),
    ("merge", &["format", "model"]),
    ("source", &["merge", "format", "model"]),
    ("transform", &["model"]),
    ("expose", &["model"]),
    ("insight", &["model"]),
    (
        "pipeline",
        &["source", "transform", "expose", "merge", "format", "model"],
    ),
    ("demo", &["format", "model"]),
    (
        "server",
        &[
            "pipeline",
            "source",
            "transform",
            "expose",
            "insight",
            "merge",
            "format",
            "model",
            "build_info",
        ],
    ),
    (
        "cli",
        &[
            "server",
            "pipeline",
            "demo",
            "source",
            "transform",
            "expose",
            "insight",
            "merge",
            "format",
            "model",
            "build_info",
        ],
    ),
];

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

fn src_files() -> Vec<(String, PathBuf)> {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    rust_files(&src, &mut files);
    files.sort();
    files
        .into_iter()
        .map(|path| {
            let relative = path.strip_prefix(&src).unwrap();
            let first = relative.components().next().unwrap().as_os_str();
            let module = Path::new(first)
                .file_stem()
                .unwrap()
                .to_string_lossy()
                .into_owned();
            (module, path)
        })
        .collect()
}

/// The code of a file without its comments (doc links are not dependencies)
/// and without its unit tests (which may use any module to check the output).
fn code(text: &str) -> String {
    let text = text.split("#[cfg(test)]\nmod tests").next().unwrap_or(text);
    text.lines()
        .map(|line| match line.find("//") {
            Some(i) => &line[..i],
            None => line,
        })
        .collect::<Vec<_>>()
        .join("\n")
}

#[test]
fn dependencies_between_stages_point_one_way() {
    let allowed: BTreeMap<&str, &[&str]> = LAYERS.iter().copied().collect();
    let mut violations = Vec::new();
    for (module, path) in src_files() {
        let Some(may_use) = allowed.get(module.as_str()) else {
            assert!(
                ["lib", "main"].contains(&module.as_str()),
                "{}: module `{module}` is in no layer of LAYERS",
                path.display()
            );
            continue;
        };
        let code = code(&std::fs::read_to_string(&path).unwrap());
        for (i, _) in code.match_indices("crate::") {
            let used: String = code[i + "crate::".len()..]
                .chars()
                .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                .collect();
            if used != module && !may_use.contains(&used.as_str()) {
                violations.push(format!("{}: {module} uses {used}", path.display()));
            }
        }
    }
    violations.dedup();
    assert!(violations.is_empty(), "{violations:#?}");
}

#[test]
fn unsafe_code_lives_in_one_module() {
    for (_, path) in src_files() {
        let code = code(&std::fs::read_to_string(&path).unwrap());
        let has_unsafe =
            code.contains("unsafe {") || code.contains("unsafe fn") || code.contains("unsafe impl");
        assert!(
            !has_unsafe || path.ends_with("src/source/mapped.rs"),
            "{} uses unsafe",
            path.display()
        );
    }
}

#[test]
fn every_source_file_opens_with_a_doc_comment_and_stays_small() {
    let mut problems = Vec::new();
    for (_, path) in src_files() {
        let text = std::fs::read_to_string(&path).unwrap();
        if !text.starts_with("//!") {
            problems.push(format!(
                "{} does not open with a doc comment",
                path.display()
            ));
        }
        let lines = text.lines().count();
        if lines > 1_000 {
            problems.push(format!("{} has {lines} lines", path.display()));
        }
    }
    assert!(problems.is_empty(), "{problems:#?}");
}
