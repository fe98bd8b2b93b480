//! Differential test against the real prometheus_client: runs `tests/python/differential.py` with this build's
//! exporter binary. It writes random multiprocess scenarios with the library, merges them in Python and with
//! `dump`, and compares the bytes for both formats and both escapings. Seed from `MPE_DIFF_SEED` (else a fresh
//! random seed, printed), scenario count from `MPE_DIFF_COUNT` (default 500); `MPE_DIFF_WORKDIR` keeps the
//! scenario directories there (failing scenarios are always kept and their location printed).

use crate::support;

use std::process::Command;

#[test]
fn exporter_matches_python_on_random_scenarios() {
    let Some(python) = support::python() else {
        return;
    };
    let seed: u64 = match std::env::var("MPE_DIFF_SEED") {
        Ok(s) if !s.is_empty() => s.parse().expect("MPE_DIFF_SEED must be an integer"),
        _ => support::random_seed(),
    };
    let count: u64 = match std::env::var("MPE_DIFF_COUNT") {
        Ok(s) if !s.is_empty() => s.parse().expect("MPE_DIFF_COUNT must be an integer"),
        _ => 500,
    };
    eprintln!("differential: seed {seed}, {count} scenarios (reproduce with MPE_DIFF_SEED={seed})");
    let mut cmd = Command::new(&python);
    cmd.arg(support::python_script("differential.py"))
        .arg("--binary")
        .arg(support::exporter_bin())
        .args(["--seed", &seed.to_string(), "--count", &count.to_string()]);
    if let Some(dir) = std::env::var_os("MPE_DIFF_WORKDIR").filter(|d| !d.is_empty()) {
        cmd.arg("--workdir").arg(dir);
    }
    let out = cmd.output().expect("running differential.py");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    // Shown by the test harness on failure (or always with --nocapture).
    println!("{stdout}");
    eprintln!("{stderr}");
    let summary = stdout
        .lines()
        .rev()
        .find(|l| l.starts_with("differential: "))
        .unwrap_or("no summary line");
    assert!(
        out.status.success(),
        "differential.py (seed {seed}) failed with {}: {summary}\n(reproduce: MPE_DIFF_SEED={seed} MPE_DIFF_COUNT={count} \
         cargo test --test differential -- --nocapture)",
        out.status
    );
    assert_eq!(summary, format!("differential: {count} passed, 0 failed"));
}
