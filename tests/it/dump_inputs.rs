//! What `dump` does with the inputs it is given: files named on the command
//! line (a missing one, a vanished live-gauge file), a directory's listing
//! (hidden and non-`.db` entries), a missing or empty directory, and the
//! directory from `PROMETHEUS_MULTIPROC_DIR`.
//!
//! The bad-file catalogue itself is defined once, in `faults.rs`, and every
//! case there runs against both `serve` and `dump` (text and OpenMetrics).

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn exporter() -> Command {
    Command::new(env!("CARGO_BIN_EXE_multiproc-exporter"))
}

/// Bytes of a `.db` file in prometheus_client's layout (64 KiB, like a fresh file).
fn db_bytes(records: &[(&str, f64, f64)]) -> Vec<u8> {
    multiproc_exporter::format::writer::file_bytes(records)
}

struct Scenario {
    dir: tempfile::TempDir,
}

impl Scenario {
    /// A directory with two good files: a counter (1 + 2) and a gauge.
    fn new() -> Self {
        let dir = tempfile::tempdir().expect("tempdir");
        let scenario = Self { dir };
        scenario.write(
            "counter_1.db",
            &db_bytes(&[(r#"["c", "c_total", {"l": "a"}, "help c"]"#, 1.0, 0.0)]),
        );
        scenario.write(
            "counter_2.db",
            &db_bytes(&[(r#"["c", "c_total", {"l": "a"}, "help c"]"#, 2.0, 0.0)]),
        );
        scenario.write(
            "gauge_livesum_2.db",
            &db_bytes(&[(r#"["g", "g", {}, "help g"]"#, 7.5, 0.0)]),
        );
        scenario
    }

    fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    fn write(&self, name: &str, bytes: &[u8]) -> PathBuf {
        let path = self.path(name);
        std::fs::write(&path, bytes).expect("write fixture");
        path
    }

    fn good(&self) -> Vec<PathBuf> {
        ["counter_1.db", "counter_2.db", "gauge_livesum_2.db"]
            .map(|n| self.path(n))
            .to_vec()
    }

    /// Runs `dump` on good[0], `bad`, good[1..] and checks the catalogue contract.
    fn assert_skipped(&self, bad: &Path, reason_fragment: &str) {
        let good = self.good();
        let mut with_bad = vec![good[0].clone(), bad.to_path_buf()];
        with_bad.extend(good[1..].iter().cloned());
        let expected = dump(&good);
        assert!(expected.status.success());
        assert_eq!(
            String::from_utf8_lossy(&expected.stdout),
            "# HELP c_total help c\n# TYPE c_total counter\nc_total{l=\"a\"} 3.0\n\
             # HELP g help g\n# TYPE g gauge\ng 7.5\n"
        );
        for format in ["text", "openmetrics"] {
            let expected = dump_with(&good, &["--format", format]);
            let actual = dump_with(&with_bad, &["--format", format]);
            let stderr = String::from_utf8_lossy(&actual.stderr);
            assert!(
                actual.status.success(),
                "exit status {:?}, stderr: {stderr}",
                actual.status
            );
            assert_eq!(
                String::from_utf8_lossy(&actual.stdout),
                String::from_utf8_lossy(&expected.stdout),
                "the good files' data must be merged exactly"
            );
            assert!(
                stderr.contains(&bad.display().to_string()),
                "stderr must name the bad file: {stderr}"
            );
            assert!(
                stderr.contains(reason_fragment),
                "stderr must say '{reason_fragment}': {stderr}"
            );
            assert_eq!(stderr.lines().count(), 1, "one line per bad file: {stderr}");
        }
    }
}

fn dump(paths: &[PathBuf]) -> Output {
    dump_with(paths, &[])
}

fn dump_with(paths: &[PathBuf], flags: &[&str]) -> Output {
    exporter()
        .arg("dump")
        // The bad files were made just now: a short one is bad at once.
        .arg("--writers.pending-grace=0")
        .args(flags)
        .args(paths)
        .output()
        .expect("run exporter")
}

#[test]
fn file_vanished_before_reading() {
    // A dangling link is listed by readdir but cannot be opened, exactly like
    // a file deleted between listing and reading.
    let s = Scenario::new();
    let bad = s.path("counter_3.db");
    std::os::unix::fs::symlink(s.path("deleted.db"), &bad).expect("symlink");
    s.assert_skipped(&bad, "does not exist");
}

#[test]
fn vanished_live_gauge_file_is_silent_like_python() {
    let s = Scenario::new();
    let gone = s.path("gauge_livesum_99.db");
    let mut paths = s.good();
    paths.insert(1, gone);
    let out = dump(&paths);
    assert!(out.status.success());
    assert_eq!(out.stdout, dump(&s.good()).stdout);
    assert!(
        out.stderr.is_empty(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn directory_input_skips_bad_files_and_keeps_listing_order() {
    let s = Scenario::new();
    s.write("counter_3.db", b"");
    std::fs::create_dir(s.path("x.db")).expect("mkdir");
    s.write(".hidden.db", b"");
    s.write("notes.txt", b"not a db file");
    let out = dump_with(&[s.dir.path().to_path_buf()], &[]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("c_total{l=\"a\"} 3.0\n"), "{text}");
    assert!(text.contains("\ng 7.5\n"), "{text}");
    assert_eq!(
        stderr.lines().count(),
        2,
        "counter_3.db and x.db only: {stderr}"
    );
    assert!(!stderr.contains(".hidden.db") && !stderr.contains("notes.txt"));
}

#[test]
fn missing_directory_is_an_error() {
    let out = exporter()
        .args(["dump", "/nonexistent/metrics/dir"])
        .output()
        .expect("run");
    assert_eq!(out.status.code(), Some(1));
    assert!(out.stdout.is_empty());
    assert!(String::from_utf8_lossy(&out.stderr).contains("/nonexistent/metrics/dir"));
}

#[test]
fn missing_file_is_an_error() {
    let out = exporter()
        .args(["dump", "/nonexistent/counter_1.db"])
        .output()
        .expect("run");
    assert_eq!(out.status.code(), Some(1));
}

#[test]
fn empty_directory_prints_nothing_like_python() {
    let dir = tempfile::tempdir().expect("tempdir");
    let out = exporter()
        .arg("dump")
        .arg(dir.path())
        .output()
        .expect("run");
    assert!(out.status.success());
    assert!(out.stdout.is_empty());
    let out = exporter()
        .args(["dump", "--format", "openmetrics"])
        .arg(dir.path())
        .output()
        .expect("run");
    assert_eq!(out.stdout, b"# EOF\n");
}

#[test]
fn default_path_comes_from_the_environment() {
    let s = Scenario::new();
    let out = exporter()
        .arg("dump")
        .env("PROMETHEUS_MULTIPROC_DIR", s.dir.path())
        .output()
        .expect("run");
    assert!(out.status.success());
    assert!(String::from_utf8_lossy(&out.stdout).contains("c_total{l=\"a\"} 3.0"));
    let out = exporter()
        .arg("dump")
        .env_remove("PROMETHEUS_MULTIPROC_DIR")
        .env_remove("prometheus_multiproc_dir")
        .output()
        .expect("run");
    assert_eq!(out.status.code(), Some(2));
}
