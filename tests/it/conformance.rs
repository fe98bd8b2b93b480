//! Conformance against the committed fixtures in `tests/fixtures/<case>/` (written by
//! `tests/python/gen_fixtures.py` with the real prometheus_client 0.26.0): for every case, `dump` on
//! `files/` in `order.txt` order must print exactly `expected.<format>.<escaping>` for both formats and both
//! escapings; this needs no Python. Every failing case is reported by name with a diff; set `MPE_CASE=<substring>`
//! to run only matching cases.
//!
//! Special cases: an empty `order.txt` means "dump an empty directory"; names in `order.txt` that are missing
//! from `files/` are passed anyway (Python skips missing `gauge_live*` files); cases with `python_error.txt`
//! contain bad files that Python raises on: the exporter must exit 0, report the bad files on stderr, and print
//! the output of the remaining files (which is what `expected.*` holds there). With the Python venv, a second test
//! checks that `gen_fixtures.py --check` reproduces the committed fixtures exactly.

use crate::support;

use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

const FORMATS: [&str; 2] = ["text", "openmetrics"];
const ESCAPINGS: [&str; 2] = ["underscores", "allow-utf-8"];

fn fixtures_dir() -> PathBuf {
    support::repo_root().join("tests").join("fixtures")
}

fn case_dirs() -> Vec<PathBuf> {
    let filter = std::env::var("MPE_CASE").unwrap_or_default();
    let mut v: Vec<PathBuf> = fs::read_dir(fixtures_dir())
        .expect("tests/fixtures missing")
        .map(|e| e.unwrap().path())
        .filter(|p| p.join("order.txt").is_file())
        .filter(|p| p.file_name().unwrap().to_string_lossy().contains(&filter))
        .collect();
    v.sort();
    v
}

/// Checks one case; returns a description of every failure.
fn check_case(dir: &Path, empty_dir: &Path) -> Vec<String> {
    let mut failures = Vec::new();
    let order = fs::read_to_string(dir.join("order.txt")).unwrap();
    let files: Vec<PathBuf> = order
        .lines()
        .filter(|l| !l.is_empty())
        .map(|l| dir.join("files").join(l))
        .collect();
    let paths: Vec<PathBuf> = if files.is_empty() {
        vec![empty_dir.to_path_buf()]
    } else {
        files
    };
    let expects_bad = dir.join("python_error.txt").is_file();

    for format in FORMATS {
        for escaping in ESCAPINGS {
            let expected_path = dir.join(format!("expected.{format}.{escaping}"));
            let expected = match fs::read(&expected_path) {
                Ok(b) => b,
                Err(e) => {
                    failures.push(format!("{}: {e}", expected_path.display()));
                    continue;
                }
            };
            let out = Command::new(support::exporter_bin())
                .args(["dump", "--format", format, "--escaping", escaping])
                .args(&paths)
                .output()
                .expect("running the exporter");
            let label = format!("--format {format} --escaping {escaping}");
            if !out.status.success() {
                failures.push(format!(
                    "{label}: exit status {}; stderr:\n{}",
                    out.status,
                    String::from_utf8_lossy(&out.stderr)
                ));
                continue;
            }
            if out.stdout != expected {
                failures.push(format!(
                    "{label}: output differs\n{}{}",
                    support::diff(&expected, &out.stdout),
                    if out.stderr.is_empty() {
                        String::new()
                    } else {
                        format!("stderr:\n{}", String::from_utf8_lossy(&out.stderr))
                    }
                ));
            }
            if expects_bad && out.stderr.is_empty() {
                failures.push(format!(
                    "{label}: the case has bad files but nothing was reported on stderr"
                ));
            }
        }
    }
    failures
}

#[test]
fn fixtures_match_python_byte_for_byte() {
    let cases = case_dirs();
    assert!(
        !cases.is_empty(),
        "no fixture cases found in {}",
        fixtures_dir().display()
    );
    let empty = tempfile::tempdir().unwrap();
    let mut failed = Vec::new();
    for dir in &cases {
        let name = dir.file_name().unwrap().to_string_lossy().into_owned();
        let failures = check_case(dir, empty.path());
        if !failures.is_empty() {
            let desc = fs::read_to_string(dir.join("description.txt")).unwrap_or_default();
            eprintln!("=== FAIL {name}: {}", desc.lines().next().unwrap_or(""));
            eprintln!(
                "    order: {}",
                fs::read_to_string(dir.join("order.txt"))
                    .unwrap()
                    .replace('\n', " ")
            );
            for f in &failures {
                eprintln!("{f}");
            }
            failed.push(name);
        }
    }
    eprintln!(
        "conformance: {} passed, {} failed",
        cases.len() - failed.len(),
        failed.len()
    );
    assert!(
        failed.is_empty(),
        "{} of {} fixture cases failed: {}",
        failed.len(),
        cases.len(),
        failed.join(", ")
    );
}

/// The committed fixtures are exactly what `gen_fixtures.py` writes today (no hand edits, no drift), and the
/// in-process writer simulation that the Python tooling relies on writes the same bytes as forked processes.
#[test]
fn fixtures_are_reproducible_with_python() {
    let Some(python) = support::python() else {
        return;
    };
    for (script, arg) in [
        ("pcharness.py", "--self-test"),
        ("gen_fixtures.py", "--check"),
    ] {
        let out = Command::new(&python)
            .arg(support::python_script(script))
            .arg(arg)
            .output()
            .expect("running Python");
        assert!(
            out.status.success(),
            "{script} {arg} failed ({}):\n{}{}",
            out.status,
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }
}
