//! The layout `docs/architecture.md` describes holds: dependencies between
//! the stage folders of `src/` point one way (no import cycle), the files of
//! one folder use each other without a circle, `unsafe`
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
    ("http_client", &[]),
    ("transform", &["model"]),
    ("expose", &["model"]),
    (
        "source",
        &[
            "transform",
            "expose",
            "http_client",
            "merge",
            "format",
            "model",
        ],
    ),
    ("insight", &["model"]),
    (
        "pipeline",
        &["source", "transform", "expose", "merge", "format", "model"],
    ),
    ("sink", &["expose", "http_client", "model"]),
    ("demo", &["format", "model"]),
    (
        "server",
        &[
            "sink",
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
            "sink",
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

/// The module path of a source file (`src/server/telemetry/events.rs` →
/// `server::telemetry::events`; a `mod.rs` is its folder's module).
fn module_path(path: &Path) -> Vec<String> {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut parts: Vec<String> = path
        .strip_prefix(&src)
        .unwrap()
        .with_extension("")
        .components()
        .map(|c| c.as_os_str().to_string_lossy().into_owned())
        .collect();
    if parts
        .last()
        .is_some_and(|p| p == "mod" || p == "lib" || p == "main")
    {
        parts.pop();
    }
    parts
}

/// The module paths a file's code names: `crate::a::b` as written,
/// `super::x` resolved against the file's own module.
fn named_paths(module: &[String], is_folder_root: bool, code: &str) -> Vec<Vec<String>> {
    let segments = |rest: &str| -> Vec<String> {
        let mut out = Vec::new();
        let mut rest = rest;
        loop {
            let ident: String = rest
                .chars()
                .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                .collect();
            if ident.is_empty() {
                break;
            }
            rest = &rest[ident.len()..];
            out.push(ident);
            match rest.strip_prefix("::") {
                Some(r) => rest = r,
                None => break,
            }
        }
        out
    };
    let mut found = Vec::new();
    for (i, _) in code.match_indices("crate::") {
        let before = code[..i].chars().next_back();
        if before.is_some_and(|c| c.is_ascii_alphanumeric() || c == '_' || c == ':') {
            continue;
        }
        found.push(segments(&code[i + "crate::".len()..]));
    }
    for (i, _) in code.match_indices("super::") {
        let before = code[..i].chars().next_back();
        if before.is_some_and(|c| c.is_ascii_alphanumeric() || c == '_' || c == ':') {
            continue;
        }
        let mut rest = &code[i..];
        // `super` of a file's module is its folder; of a folder's `mod.rs`,
        // the folder's parent.
        let mut base: Vec<String> = module.to_vec();
        if !is_folder_root || !base.is_empty() {
            base.pop();
        }
        rest = &rest["super::".len()..];
        while let Some(r) = rest.strip_prefix("super::") {
            base.pop();
            rest = r;
        }
        base.extend(segments(rest));
        found.push(base);
    }
    found
}

/// Regression (issue 28): `telemetry/events.rs` and `self_metrics.rs` used
/// each other. Within any folder below `src/`, its files and subfolders
/// (each taken as a whole; the folder's own `mod.rs` aside) use each other
/// without a circle.
#[test]
fn the_files_of_a_folder_use_each_other_without_a_circle() {
    // folder → (unit → units it uses)
    let mut graphs: BTreeMap<Vec<String>, BTreeMap<String, std::collections::BTreeSet<String>>> =
        BTreeMap::new();
    for (_, path) in src_files() {
        let module = module_path(&path);
        let is_folder_root = path.file_name().is_some_and(|n| n == "mod.rs");
        let code = code(&std::fs::read_to_string(&path).unwrap());
        for named in named_paths(&module, is_folder_root, &code) {
            let common = module
                .iter()
                .zip(&named)
                .take_while(|(a, b)| a == b)
                .count();
            // Only within a folder below `src/` (the stages are checked above),
            // between two of its units.
            if common == 0 || common >= module.len() || common >= named.len() {
                continue;
            }
            let folder = module[..common].to_vec();
            let (from, to) = (module[common].clone(), named[common].clone());
            graphs
                .entry(folder)
                .or_default()
                .entry(from)
                .or_default()
                .insert(to);
        }
    }
    let mut circles = Vec::new();
    for (folder, graph) in &graphs {
        for start in graph.keys() {
            // Depth-first from `start`: a path back to it is a circle.
            let mut stack = vec![(start.clone(), vec![start.clone()])];
            let mut seen = std::collections::BTreeSet::new();
            while let Some((unit, trail)) = stack.pop() {
                for next in graph.get(&unit).into_iter().flatten() {
                    if next == start {
                        circles.push(format!(
                            "{}: {} → {next}",
                            folder.join("::"),
                            trail.join(" → ")
                        ));
                    } else if seen.insert(next.clone()) {
                        let mut longer = trail.clone();
                        longer.push(next.clone());
                        stack.push((next.clone(), longer));
                    }
                }
            }
        }
    }
    circles.sort();
    circles.dedup();
    assert!(circles.is_empty(), "{circles:#?}");
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

/// Issue 40: the HTTP layer routes, negotiates and encodes; the state of a
/// collection (a source, its coalescing, the skip of an unchanged merge,
/// the views' sources) is owned by `src/pipeline/` (`shared.rs`,
/// `views.rs`). Before, `server/scrape.rs` and `server/views.rs` ran
/// collections and waited on them with condition variables of their own.
#[test]
fn the_http_layer_keeps_no_collection_state() {
    let held = [
        "collect_since",
        "Condvar",
        "Coalescer",
        "Reusable",
        "Rechecks",
    ];
    let mut found = Vec::new();
    for (module, path) in src_files() {
        if module != "server" {
            continue;
        }
        let code = code(&std::fs::read_to_string(&path).unwrap());
        for name in held {
            if code.contains(name) {
                found.push(format!("{}: {name}", path.display()));
            }
        }
    }
    assert!(
        found.is_empty(),
        "collection state in src/server/: {found:#?}"
    );
}
