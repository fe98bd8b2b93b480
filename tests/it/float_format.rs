//! `multiproc_exporter::model::float::go_float_string` against Python's `prometheus_client.utils.floatToGoString`:
//! (a) the committed table `tests/data/float_cases.txt` (20,000 cases written by `tests/python/float_cases.py`,
//! needs no Python); (b) with the Python venv, 1,000,000 fresh cases streamed from `float_cases.py` with a random
//! seed (or `MPE_FLOAT_SEED`; count `MPE_FLOAT_COUNT`), all compared, reporting the number of mismatches and the
//! first 20.

use crate::support;

use std::fs;
use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};

use multiproc_exporter::model::float::go_float_string;

/// Checks one `<16 hex digits> <expected>` line; `Some(message)` on mismatch.
fn check_line(line: &str) -> Result<Option<String>, String> {
    let (hex, expected) = line
        .split_once(' ')
        .ok_or_else(|| format!("malformed line {line:?}"))?;
    let bits = u64::from_str_radix(hex, 16).map_err(|e| format!("malformed line {line:?}: {e}"))?;
    let x = f64::from_bits(bits);
    let actual = go_float_string(x);
    Ok((actual != expected)
        .then(|| format!("{hex} ({x:e}): expected {expected:?}, got {actual:?}")))
}

fn report(what: &str, total: usize, mismatches: &[String], count: usize) {
    eprintln!("{what}: {total} cases, {count} mismatches");
    for m in mismatches {
        eprintln!("  {m}");
    }
    assert_eq!(
        count, 0,
        "{what}: {count} of {total} cases differ from Python (first ones above)"
    );
}

#[test]
fn committed_table_matches_python() {
    let path = support::repo_root()
        .join("tests")
        .join("data")
        .join("float_cases.txt");
    let text = fs::read_to_string(&path).expect("tests/data/float_cases.txt");
    let (mut total, mut count, mut first) = (0, 0, Vec::new());
    for line in text.lines().filter(|l| !l.is_empty()) {
        total += 1;
        if let Some(m) = check_line(line).unwrap() {
            count += 1;
            if first.len() < 20 {
                first.push(m);
            }
        }
    }
    assert!(total >= 20_000, "only {total} cases in {}", path.display());
    report("float_cases.txt", total, &first, count);
}

#[test]
fn fresh_python_cases_match() {
    let Some(python) = support::python() else {
        return;
    };
    let seed: u64 = std::env::var("MPE_FLOAT_SEED")
        .ok()
        .map(|s| s.parse().expect("MPE_FLOAT_SEED"))
        .unwrap_or_else(support::random_seed);
    let want: usize = std::env::var("MPE_FLOAT_COUNT")
        .ok()
        .map(|s| s.parse().expect("MPE_FLOAT_COUNT"))
        .unwrap_or(1_000_000);
    eprintln!(
        "float_cases.py --seed {seed} --count {want} (set MPE_FLOAT_SEED={seed} to reproduce)"
    );
    let mut child = Command::new(&python)
        .arg(support::python_script("float_cases.py"))
        .args(["--seed", &seed.to_string(), "--count", &want.to_string()])
        .stdout(Stdio::piped())
        .spawn()
        .expect("running float_cases.py");
    let stdout = child.stdout.take().unwrap();
    let (mut total, mut count, mut first) = (0, 0, Vec::new());
    for line in BufReader::with_capacity(1 << 16, stdout).lines() {
        let line = line.expect("reading float_cases.py output");
        total += 1;
        if let Some(m) = check_line(&line).unwrap() {
            count += 1;
            if first.len() < 20 {
                first.push(m);
            }
        }
    }
    let status = child.wait().unwrap();
    assert!(status.success(), "float_cases.py failed: {status}");
    assert_eq!(
        total, want,
        "float_cases.py printed {total} lines, expected {want}"
    );
    report(
        &format!("float_cases.py --seed {seed}"),
        total,
        &first,
        count,
    );
}
