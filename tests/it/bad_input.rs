//! The bad-input catalogue: every kind of file prometheus_client would choke on
//! is skipped whole and reported, the rest is merged exactly, and `dump` exits 0.
//!
//! Each test puts one bad file between two good ones and checks that `dump`
//! prints exactly what it prints for the good files alone, names the bad file
//! and its reason on stderr, and exits 0.

use std::os::unix::fs::PermissionsExt;
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
        .args(flags)
        .args(paths)
        .output()
        .expect("run exporter")
}

#[test]
fn zero_byte_file() {
    let s = Scenario::new();
    let bad = s.write("counter_3.db", b"");
    s.assert_skipped(&bad, "shorter than the 8-byte header");
}

#[test]
fn file_shorter_than_header() {
    let s = Scenario::new();
    let bad = s.write("counter_3.db", &[16, 0, 0, 0, 0]);
    s.assert_skipped(&bad, "shorter than the 8-byte header");
}

#[test]
fn used_beyond_end_of_file() {
    let s = Scenario::new();
    let mut bytes = db_bytes(&[(r#"["c", "c_total", {"l": "a"}, "help c"]"#, 100.0, 0.0)]);
    bytes[..4].copy_from_slice(&70000i32.to_ne_bytes());
    let bad = s.write("counter_3.db", &bytes);
    s.assert_skipped(&bad, "used but the file has");
}

#[test]
fn record_length_past_used() {
    let s = Scenario::new();
    let mut bytes = db_bytes(&[(r#"["c", "c_total", {"l": "a"}, "help c"]"#, 100.0, 0.0)]);
    bytes[8..12].copy_from_slice(&1000i32.to_ne_bytes());
    let bad = s.write("counter_3.db", &bytes);
    s.assert_skipped(&bad, "runs past used");
}

#[test]
fn client_python_corruption_test_somejunk() {
    // client_python's test_corruption_detected overwrites bytes 8..16.
    let s = Scenario::new();
    let mut bytes = db_bytes(&[(r#"["c", "c_total", {"l": "a"}, "help c"]"#, 100.0, 0.0)]);
    bytes[8..16].copy_from_slice(b"somejunk");
    let bad = s.write("counter_3.db", &bytes);
    s.assert_skipped(&bad, "corrupt file");
}

#[test]
fn negative_record_length() {
    let s = Scenario::new();
    let mut bytes = db_bytes(&[(r#"["c", "c_total", {"l": "a"}, "help c"]"#, 100.0, 0.0)]);
    bytes[8..12].copy_from_slice(&(-5i32).to_ne_bytes());
    let bad = s.write("counter_3.db", &bytes);
    s.assert_skipped(&bad, "negative key length");
}

#[test]
fn key_not_utf8() {
    let s = Scenario::new();
    let mut bytes = db_bytes(&[(r#"["c", "c_total", {"l": "a"}, "help c"]"#, 100.0, 0.0)]);
    bytes[14] = 0xff;
    let bad = s.write("counter_3.db", &bytes);
    s.assert_skipped(&bad, "not valid UTF-8");
}

#[test]
fn key_not_json() {
    let s = Scenario::new();
    let bad = s.write(
        "counter_3.db",
        &db_bytes(&[(r#"["c", "c_total", {"l": "a"}, "help c""#, 100.0, 0.0)]),
    );
    s.assert_skipped(&bad, "not valid JSON");
}

#[test]
fn key_with_three_elements_from_prometheus_client_before_0_16() {
    let s = Scenario::new();
    let bad = s.write(
        "counter_3.db",
        &db_bytes(&[(r#"["c", "c_total", {"l": "a"}]"#, 100.0, 0.0)]),
    );
    s.assert_skipped(&bad, "fewer than 4 elements");
}

#[test]
fn key_with_non_string_label_value() {
    let s = Scenario::new();
    let bad = s.write(
        "counter_3.db",
        &db_bytes(&[(r#"["c", "c_total", {"l": 1}, "help c"]"#, 100.0, 0.0)]),
    );
    s.assert_skipped(&bad, "label value is not a string");
}

#[test]
fn unknown_type_prefix() {
    let s = Scenario::new();
    let bad = s.write(
        "foo_3.db",
        &db_bytes(&[(r#"["c", "c_total", {"l": "a"}, "help c"]"#, 100.0, 0.0)]),
    );
    s.assert_skipped(&bad, "unknown metric type 'foo'");
}

#[test]
fn histogram_bucket_bound_not_a_number() {
    let s = Scenario::new();
    let bad = s.write(
        "histogram_3.db",
        &db_bytes(&[(r#"["h", "h_bucket", {"le": "abc"}, "help h"]"#, 1.0, 0.0)]),
    );
    s.assert_skipped(&bad, "le=\"abc\" is not a number");
}

#[test]
fn directory_named_db() {
    // Only a directory listing can contain it: a directory given as PATH is read as a directory.
    let s = Scenario::new();
    let bad = s.path("counter_3.db");
    std::fs::create_dir(&bad).expect("mkdir");
    let out = exporter()
        .arg("dump")
        .arg(s.dir.path())
        .output()
        .expect("run");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("c_total{l=\"a\"} 3.0\n") && text.contains("\ng 7.5\n"),
        "{text}"
    );
    assert_eq!(
        stderr.trim(),
        format!(
            "multiproc-exporter: skipped {}: not a regular file",
            bad.display()
        )
    );
}

#[test]
fn sqlite_database_named_db() {
    // client_python #878: an application's SQLite file in the metrics directory.
    let s = Scenario::new();
    let mut bytes = b"SQLite format 3\0".to_vec();
    bytes.extend_from_slice(&[0x10, 0x00, 0x01, 0x01, 0x00, 0x40, 0x20, 0x20]);
    bytes.resize(8192, 0);
    let bad = s.write("app.db", &bytes);
    s.assert_skipped(&bad, "unknown metric type 'app.db'");
    let bad = s.write("counter_9.db", &bytes);
    s.assert_skipped(&bad, "used but the file has");
}

#[test]
fn random_binary_file() {
    let s = Scenario::new();
    let mut state = 0x2545_f491_4f6c_dd1du64;
    let bytes: Vec<u8> = (0..4096)
        .map(|_| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state as u8
        })
        .collect();
    let bad = s.write("counter_3.db", &bytes);
    let good = s.good();
    let out = dump(&[
        good[0].clone(),
        bad.clone(),
        good[1].clone(),
        good[2].clone(),
    ]);
    assert!(out.status.success());
    assert_eq!(out.stdout, dump(&good).stdout);
    assert!(String::from_utf8_lossy(&out.stderr).contains(&bad.display().to_string()));
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
fn permission_denied() {
    let s = Scenario::new();
    let bad = s.write(
        "counter_3.db",
        &db_bytes(&[(r#"["c", "c_total", {"l": "a"}, "help c"]"#, 100.0, 0.0)]),
    );
    std::fs::set_permissions(&bad, std::fs::Permissions::from_mode(0o000)).expect("chmod");
    // root ignores file modes, so run the exporter as an unprivileged user then.
    let is_root =
        std::fs::metadata("/proc/self").is_ok_and(|m| std::os::unix::fs::MetadataExt::uid(&m) == 0);
    if !is_root {
        s.assert_skipped(&bad, "permission denied");
        return;
    }
    std::fs::set_permissions(s.dir.path(), std::fs::Permissions::from_mode(0o755))
        .expect("chmod dir");
    // The build directory may not be reachable for nobody: run a copy from here.
    let binary = s.path("multiproc-exporter");
    std::fs::copy(env!("CARGO_BIN_EXE_multiproc-exporter"), &binary).expect("copy the binary");
    let good = s.good();
    let as_nobody = |paths: &[PathBuf]| {
        Command::new("setpriv")
            .args(["--reuid=65534", "--regid=65534", "--clear-groups", "--"])
            .arg(&binary)
            .arg("dump")
            .args(paths)
            .output()
            .expect("setpriv (util-linux) runs the exporter as nobody")
    };
    let expected = as_nobody(&good);
    assert!(
        expected.status.success(),
        "{}",
        String::from_utf8_lossy(&expected.stderr)
    );
    let actual = as_nobody(&[
        good[0].clone(),
        bad.clone(),
        good[1].clone(),
        good[2].clone(),
    ]);
    let stderr = String::from_utf8_lossy(&actual.stderr);
    assert!(actual.status.success(), "{stderr}");
    assert_eq!(actual.stdout, expected.stdout);
    assert!(
        stderr.contains("permission denied") && stderr.contains(&bad.display().to_string()),
        "{stderr}"
    );
}

#[test]
fn directory_input_skips_bad_files_and_keeps_listing_order() {
    let s = Scenario::new();
    s.write("counter_3.db", b"");
    std::fs::create_dir(s.path("x.db")).expect("mkdir");
    s.write(".hidden.db", b"");
    s.write("notes.txt", b"not a db file");
    let out = exporter()
        .arg("dump")
        .arg(s.dir.path())
        .output()
        .expect("run");
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
