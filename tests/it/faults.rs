//! The fault catalogue, against the running server (`multiproc-exporter serve`
//! on an ephemeral port, real HTTP client, JSON logs captured).
//!
//! Every case puts bad entries next to good files (written by the crate's
//! writer, byte-identical to prometheus_client's) and checks the contract:
//!
//! * every scrape answers 200, and its merged part is byte for byte what
//!   prometheus_client 0.26.0 prints for the good files alone, in the order the
//!   directory lists them (text and OpenMetrics);
//! * `multiproc_exporter_scrape_files_skipped{reason=...}` counts each bad
//!   entry under its reason, every other reason is 0, and
//!   `multiproc_exporter_scrape_files_read` counts the good files;
//! * each bad entry is logged exactly once over several scrapes, with its
//!   path and `reason_label`, and nothing is logged as an error;
//! * the process is still running and answers `/-/healthy`.
//!
//! The races (a file deleted or replaced between listing and reading, a file
//! truncated while being read, the directory deleted and re-created) run a
//! thread that does it in a tight loop while the test scrapes in a tight loop,
//! and accept exactly the outputs prometheus_client prints for the states the
//! directory can be in. `docs/reliability.md` lists the catalogue.
//!
//! Environment: `MPE_FAULTS_RACE_SECONDS` (default 3) sets how long each race
//! runs; `MPE_FAULTS_FILES` (default 100000) the size of the many-files case.

use crate::support;

use std::collections::{HashMap, HashSet};
use std::os::unix::fs::{symlink, FileExt as _, PermissionsExt as _};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::support::{
    family_blocks, get_within, listing_order, merged_part, python, python_expositions,
    sample_value, skipped_by_reason, unprivileged_launch, Exporter, Exposition, Launch,
    ACCEPT_OPENMETRICS,
};
use multiproc_exporter::format::writer::{self, GaugeMode, ProcessWriter};
use multiproc_exporter::source::SkipReason;

/// Every `reason` label of `multiproc_exporter_scrape_files_skipped`: the
/// file skip reasons (one list in the crate) and `panic`.
fn reasons() -> impl Iterator<Item = &'static str> {
    SkipReason::FILE_LABELS.iter().copied().chain(["panic"])
}

const PROMPT_TOKENS: &str = "vllm:prompt_tokens";
const PROMPT_HELP: &str = "Number of prefill tokens processed.";
const RUNNING: &str = "vllm:num_requests_running";
const RUNNING_HELP: &str = "Number of requests in model execution batches.";

/// Writes the good files every case starts with, as two vLLM-like processes
/// (100 and 200) would: counters in both, a `livesum` and a `mostrecent`
/// gauge, a histogram and a summary. Returns their names.
fn write_good_files(dir: &Path) -> Vec<String> {
    let model = [("model_name", "m")];
    let mut a = ProcessWriter::new(dir, 100);
    let prompt = a.counter(PROMPT_TOKENS, PROMPT_HELP, &model).unwrap();
    prompt.inc(&mut a, 1.0).unwrap();
    let success = a
        .counter(
            "vllm:request_success",
            "Count of successfully processed requests.",
            &[("finished_reason", "stop"), ("model_name", "m")],
        )
        .unwrap();
    success.inc(&mut a, 4.0).unwrap();
    let running = a
        .gauge(RUNNING, RUNNING_HELP, &model, GaugeMode::LiveSum)
        .unwrap();
    running.set(&mut a, 7.5).unwrap();
    let latency = a
        .histogram(
            "vllm:e2e_request_latency_seconds",
            "Histogram of e2e request latency in seconds.",
            &model,
            &[0.3, 1.0, 2.5],
        )
        .unwrap();
    for v in [0.25, 0.5, 3.0] {
        latency.observe(&mut a, v).unwrap();
    }
    let mut b = ProcessWriter::new(dir, 200);
    let prompt = b.counter(PROMPT_TOKENS, PROMPT_HELP, &model).unwrap();
    prompt.inc(&mut b, 2.0).unwrap();
    let usage = b
        .gauge(
            "vllm:kv_cache_usage_perc",
            "KV-cache usage. 1 means 100 percent usage.",
            &model,
            GaugeMode::MostRecent,
        )
        .unwrap();
    usage.set_at(&mut b, 0.25, 1_700_000_000.5).unwrap();
    let queue = b
        .summary("http_request_size_bytes", "Request size.", &[])
        .unwrap();
    queue.observe(&mut b, 512.0).unwrap();
    let mut names: Vec<String> = a
        .files()
        .chain(b.files())
        .map(|(_, f)| f.path().file_name().unwrap().to_string_lossy().into_owned())
        .collect();
    names.sort();
    names
}

/// Bytes of a file with one counter record `c_total{l="a"}`.
fn one_record_file() -> Vec<u8> {
    let key = writer::encode_key("c", "c_total", &[("l", "a")], "help c");
    writer::file_bytes(&[(&key, 100.0, 0.0)])
}

/// `one_record_file` with `bytes` written at `offset`.
fn patched(offset: usize, bytes: &[u8]) -> Vec<u8> {
    let mut data = one_record_file();
    data[offset..offset + bytes.len()].copy_from_slice(bytes);
    data
}

/// A file in the layout of prometheus_client before 0.18: records without
/// the 8-byte timestamp (`i32 len | key | padding | f64 value`).
fn pre_0_18_file(records: &[(&str, f64)]) -> Vec<u8> {
    let mut data = vec![0u8; 8];
    for (key, value) in records {
        let mut padded = key.as_bytes().to_vec();
        padded.resize(key.len() + 8 - (key.len() + 4) % 8, b' ');
        data.extend_from_slice(&(key.len() as i32).to_ne_bytes());
        data.extend_from_slice(&padded);
        data.extend_from_slice(&value.to_ne_bytes());
    }
    let used = data.len() as i32;
    data[..4].copy_from_slice(&used.to_ne_bytes());
    data.resize(1 << 16, 0);
    data
}

fn mkfifo(path: &Path) {
    let status = std::process::Command::new("mkfifo")
        .arg(path)
        .status()
        .expect("run mkfifo (coreutils)");
    assert!(status.success());
}

/// One catalogue case: a metrics directory with the good files, bad entries
/// added by the test, and how to run the exporter.
struct Case {
    _tmp: tempfile::TempDir,
    /// The temporary root (holds `metrics/` and anything outside it).
    root: PathBuf,
    /// The metrics directory.
    dir: PathBuf,
    /// Names of the entries whose data must be served.
    good: Vec<String>,
    /// Bad entries and the reason each must be reported with.
    bad: Vec<(PathBuf, &'static str)>,
    args: Vec<String>,
    launch: Launch,
}

impl Case {
    fn new() -> Self {
        let tmp = tempfile::tempdir().unwrap();
        let root = tmp.path().to_path_buf();
        let dir = root.join("metrics");
        std::fs::create_dir(&dir).unwrap();
        let good = write_good_files(&dir);
        Self {
            _tmp: tmp,
            root,
            // The bad files were made just now: report a short one at
            // once, not after the grace given to files being created.
            args: vec![
                "--dir".into(),
                dir.display().to_string(),
                "--writers.pending-grace=0".into(),
            ],
            dir,
            good,
            bad: Vec::new(),
            launch: Launch::default(),
        }
    }

    /// Writes a bad file into the directory.
    fn bad_file(&mut self, name: &str, bytes: &[u8], reason: &'static str) -> PathBuf {
        let path = self.dir.join(name);
        std::fs::write(&path, bytes).unwrap();
        self.bad.push((path.clone(), reason));
        path
    }

    /// Registers a bad entry the test created itself.
    fn bad_entry(&mut self, name: &str, reason: &'static str) -> PathBuf {
        let path = self.dir.join(name);
        self.bad.push((path.clone(), reason));
        path
    }

    /// Registers an entry (a link, say) whose data must be served.
    fn good_entry(&mut self, name: &str) {
        self.good.push(name.to_owned());
    }

    fn arg(&mut self, arg: &str) {
        self.args.push(arg.to_owned());
    }

    /// prometheus_client's exposition of the good entries, in listing order.
    fn expected(&self, python: &Path) -> Exposition {
        let in_order: Vec<PathBuf> = listing_order(&self.dir)
            .into_iter()
            .filter(|n| self.good.contains(n))
            .map(|n| self.dir.join(n))
            .collect();
        assert_eq!(
            in_order.len(),
            self.good.len(),
            "every good entry is listed"
        );
        python_expositions(python, &[("good".into(), in_order)])
            .remove("good")
            .unwrap()
    }

    /// Runs the exporter and checks the catalogue contract (module docs).
    fn check(self) {
        let Some(python) = python() else { return };
        let expected = self.expected(&python);
        let args: Vec<&str> = self.args.iter().map(String::as_str).collect();
        let mut exporter = Exporter::launch(&args, &self.launch);
        let mut counts: HashMap<&str, f64> = HashMap::new();
        for (_, reason) in &self.bad {
            *counts.entry(reason).or_default() += 1.0;
        }
        for round in 0..3 {
            let reply = exporter.get("/metrics");
            assert_eq!(reply.status, 200, "round {round}");
            let body = reply.text();
            assert_eq!(merged_part(&body), expected.text, "round {round}");
            let skipped = skipped_by_reason(&body);
            for reason in reasons() {
                assert_eq!(
                    skipped.get(reason).copied(),
                    Some(counts.get(reason).copied().unwrap_or(0.0)),
                    "round {round}: files skipped for {reason}: {body}"
                );
            }
            assert_eq!(
                sample_value(&body, "multiproc_exporter_scrape_files_read"),
                Some(self.good.len() as f64),
                "round {round}"
            );
        }
        let reply = exporter.get_with("/metrics", &[("Accept", ACCEPT_OPENMETRICS)]);
        assert_eq!(reply.status, 200);
        let body = reply.text();
        assert!(body.ends_with("# EOF\n"));
        assert_eq!(
            merged_part(&body),
            expected.openmetrics.strip_suffix("# EOF\n").unwrap()
        );
        exporter.sync_logs();
        let skipping = exporter.logs_with("Skipping file.");
        for (path, reason) in &self.bad {
            let lines: Vec<_> = skipping
                .iter()
                .filter(|l| l["path"].as_str() == path.to_str())
                .collect();
            assert_eq!(lines.len(), 1, "{} logged once: {lines:#?}", path.display());
            assert_eq!(lines[0]["reason_label"], *reason, "{}", path.display());
        }
        assert_eq!(skipping.len(), self.bad.len(), "{skipping:#?}");
        let errors: Vec<_> = exporter
            .logs()
            .into_iter()
            .filter(|l| l["level"] == "ERROR")
            .collect();
        assert!(errors.is_empty(), "{errors:#?}");
        exporter.assert_alive();
        self.check_dump(&expected);
    }

    /// The same directory through `dump` (same launch, same flags), in both
    /// formats: exit 0, exactly the good files' exposition on standard
    /// output, and one line on standard error for each bad entry, naming it.
    fn check_dump(&self, expected: &Exposition) {
        self.check_dump_format("text", &expected.text);
        self.check_dump_format("openmetrics", &expected.openmetrics);
    }

    fn check_dump_format(&self, format: &str, expected: &str) {
        let mut command = match self.launch.wrapper.split_first() {
            None => Command::new(&self.launch.binary),
            Some((program, args)) => {
                let mut command = Command::new(program);
                command.args(args).arg(&self.launch.binary);
                command
            }
        };
        command.args(["dump", "--format", format]);
        let mut args = self.args.iter();
        while let Some(arg) = args.next() {
            if arg == "--dir" {
                command.arg(args.next().expect("--dir DIR"));
            } else {
                command.arg(arg);
            }
        }
        for (name, value) in &self.launch.env {
            command.env(name, value);
        }
        let output = command
            .env_remove("PROMETHEUS_MULTIPROC_DIR")
            .stdin(Stdio::null())
            .output()
            .expect("run dump");
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(
            output.status.success(),
            "dump: {:?}\n{stderr}",
            output.status
        );
        assert_eq!(
            String::from_utf8_lossy(&output.stdout),
            expected,
            "dump --format {format}\n{stderr}"
        );
        for (path, _) in &self.bad {
            let named = format!("skipped {}: ", path.display());
            assert_eq!(
                stderr.lines().filter(|l| l.contains(&named)).count(),
                1,
                "dump names {} once:\n{stderr}",
                path.display()
            );
        }
        assert_eq!(stderr.lines().count(), self.bad.len(), "{stderr}");
    }
}

#[test]
fn zero_byte_file() {
    let mut case = Case::new();
    case.bad_file("counter_3.db", b"", "short_file");
    case.check();
}

#[test]
fn file_shorter_than_the_header() {
    let mut case = Case::new();
    case.bad_file("counter_3.db", &[16, 0, 0, 0, 0], "short_file");
    case.check();
}

#[test]
fn used_larger_than_the_file() {
    let mut case = Case::new();
    case.bad_file(
        "counter_3.db",
        &patched(0, &70_000i32.to_ne_bytes()),
        "bad_header",
    );
    case.check();
}

/// A writer creating a file has sized it (zeros) but not yet written its
/// header: no records, nothing to report (prometheus_client reads no records).
#[test]
fn file_sized_but_header_not_yet_written() {
    let mut case = Case::new();
    std::fs::write(case.dir.join("counter_3.db"), vec![0u8; 1 << 16]).unwrap();
    case.good_entry("counter_3.db");
    case.check();
}

#[test]
fn used_negative_or_below_the_header() {
    let mut case = Case::new();
    case.bad_file(
        "counter_3.db",
        &patched(0, &(-1i32).to_ne_bytes()),
        "bad_header",
    );
    case.bad_file(
        "counter_4.db",
        &patched(0, &4i32.to_ne_bytes()),
        "bad_header",
    );
    case.check();
}

#[test]
fn record_length_negative_huge_or_past_used_or_overwritten_with_junk() {
    let mut case = Case::new();
    case.bad_file(
        "counter_3.db",
        &patched(8, &(-5i32).to_ne_bytes()),
        "bad_record",
    );
    case.bad_file(
        "counter_4.db",
        &patched(8, &i32::MAX.to_ne_bytes()),
        "bad_record",
    );
    case.bad_file(
        "counter_5.db",
        &patched(8, &1000i32.to_ne_bytes()),
        "bad_record",
    );
    // client_python's own `test_corruption_detected` overwrites bytes 8..16.
    case.bad_file("counter_6.db", &patched(8, b"somejunk"), "bad_record");
    case.check();
}

#[test]
fn key_not_utf8() {
    let mut case = Case::new();
    case.bad_file("counter_3.db", &patched(14, &[0xff]), "key_not_utf8");
    case.check();
}

#[test]
fn key_not_json() {
    let mut case = Case::new();
    let key = r#"["c", "c_total", {"l": "a"}, "help c""#;
    case.bad_file(
        "counter_3.db",
        &writer::file_bytes(&[(key, 1.0, 0.0)]),
        "key_not_json",
    );
    case.check();
}

#[test]
fn key_with_three_elements_from_prometheus_client_before_0_16() {
    let mut case = Case::new();
    let key = r#"["c", "c_total", {"l": "a"}]"#;
    case.bad_file(
        "counter_3.db",
        &writer::file_bytes(&[(key, 1.0, 0.0)]),
        "key_bad_shape",
    );
    let key = r#"["c", "c_total", {"l": 1}, "help c"]"#;
    case.bad_file(
        "counter_4.db",
        &writer::file_bytes(&[(key, 1.0, 0.0)]),
        "key_bad_shape",
    );
    case.check();
}

/// Not a fault for prometheus_client: a sample whose name has no known suffix
/// is merged and printed like any other, so it is served exactly as Python
/// prints it (nothing skipped).
#[test]
fn unknown_sample_suffix_is_merged_like_python() {
    let mut case = Case::new();
    let records = [
        (
            writer::encode_key("h", "h_foo", &[], "help h"),
            3.0,
            "histogram_3.db",
        ),
        (
            writer::encode_key("c", "c_weird", &[("l", "a")], "help c"),
            2.0,
            "counter_3.db",
        ),
    ];
    for (key, value, name) in &records {
        std::fs::write(
            case.dir.join(name),
            writer::file_bytes(&[(key, *value, 0.0)]),
        )
        .unwrap();
        case.good_entry(name);
    }
    case.check();
}

#[test]
fn file_from_prometheus_client_before_0_18_with_8_byte_records() {
    let mut case = Case::new();
    let a = writer::encode_key("c", "c_total", &[("l", "a")], "help c");
    let b = writer::encode_key("c", "c_total", &[("l", "b")], "help c");
    case.bad_file("counter_3.db", &pre_0_18_file(&[(&a, 5.0)]), "bad_record");
    case.bad_file(
        "counter_4.db",
        &pre_0_18_file(&[(&a, 5.0), (&b, 7.0)]),
        "bad_record",
    );
    case.check();
}

#[test]
fn unknown_type_prefix_and_gauge_name_without_pid() {
    let mut case = Case::new();
    case.bad_file("foo_3.db", &one_record_file(), "unknown_type");
    let key = writer::encode_key("g", "g", &[], "help g");
    case.bad_file(
        "gauge_3.db",
        &writer::file_bytes(&[(&key, 1.0, 0.0)]),
        "bad_file_name",
    );
    case.check();
}

#[test]
fn histogram_bucket_bound_not_a_number() {
    let mut case = Case::new();
    let key = writer::encode_key("h", "h_bucket", &[("le", "abc")], "help h");
    case.bad_file(
        "histogram_3.db",
        &writer::file_bytes(&[(&key, 1.0, 0.0)]),
        "bad_bucket_bound",
    );
    case.check();
}

/// client_python #878: an application's SQLite database in the metrics
/// directory, named like another program's file and like a metric file.
#[test]
fn sqlite_databases_named_db() {
    let Some(python) = python() else { return };
    let mut case = Case::new();
    let script = "import sqlite3, sys\n\
                  for path in sys.argv[1:]:\n    \
                  db = sqlite3.connect(path)\n    \
                  db.execute('create table t (k text primary key, v real)')\n    \
                  db.executemany('insert into t values (?, ?)', [(str(i), i * 0.5) for i in range(500)])\n    \
                  db.commit()\n    \
                  db.close()\n";
    let app = case.bad_entry("app.db", "unknown_type");
    let metric_like = case.bad_entry("counter_9.db", "bad_header");
    support::run_python(
        &python,
        script,
        &[app.to_str().unwrap(), metric_like.to_str().unwrap()],
        &[],
    );
    assert!(std::fs::read(&app)
        .unwrap()
        .starts_with(b"SQLite format 3\0"));
    case.check();
}

#[test]
fn random_binary_file() {
    let mut case = Case::new();
    let mut state = 0x2545_f491_4f6c_dd1du64;
    let bytes: Vec<u8> = (0..65536)
        .map(|_| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            (state >> 24) as u8
        })
        .collect();
    let used = i32::from_ne_bytes(bytes[..4].try_into().unwrap());
    // With this seed `used` is neither 0 nor within the file.
    assert!(!(8..=65536).contains(&used), "{used}");
    case.bad_file("counter_3.db", &bytes, "bad_header");
    // The same bytes after a plausible header.
    let mut with_header = bytes.clone();
    with_header[..8].copy_from_slice(&[0, 1, 0, 0, 0, 0, 0, 0]);
    case.bad_file("counter_4.db", &with_header, "bad_record");
    case.check();
}

#[test]
fn directories_named_db() {
    let mut case = Case::new();
    std::fs::create_dir(case.bad_entry("x.db", "not_regular_file")).unwrap();
    std::fs::create_dir(case.bad_entry("counter_3.db", "not_regular_file")).unwrap();
    case.check();
}

#[test]
fn link_to_dev_zero_is_not_followed_out_of_the_directory() {
    let mut case = Case::new();
    symlink(
        "/dev/zero",
        case.bad_entry("counter_3.db", "link_outside_directory"),
    )
    .unwrap();
    case.check();
}

/// Allowed to follow links anywhere, the exporter finds a device and skips it
/// without reading.
#[test]
fn link_to_dev_zero_followed_on_request_is_not_a_regular_file() {
    let mut case = Case::new();
    case.arg("--dir.follow-links-outside");
    symlink(
        "/dev/zero",
        case.bad_entry("counter_3.db", "not_regular_file"),
    )
    .unwrap();
    case.check();
}

/// A FIFO without a writer: opening it for reading would block forever (as it
/// does in prometheus_client). The scrapes must return (the HTTP client gives
/// up after 20 s, so a blocked scrape fails the test).
#[test]
fn fifo_and_links_to_fifos_do_not_block_the_scrape() {
    let mut case = Case::new();
    mkfifo(&case.bad_entry("counter_3.db", "not_regular_file"));
    mkfifo(&case.dir.join("a-fifo"));
    symlink("a-fifo", case.bad_entry("counter_4.db", "not_regular_file")).unwrap();
    let outside = case.root.join("outside-fifo");
    mkfifo(&outside);
    symlink(&outside, case.bad_entry("counter_5.db", "not_regular_file")).unwrap();
    case.arg("--dir.follow-links-outside");
    case.check();
}

#[test]
fn link_to_a_file_outside_the_directory_is_not_followed() {
    let mut case = Case::new();
    let outside = case.root.join("elsewhere");
    std::fs::create_dir(&outside).unwrap();
    std::fs::write(outside.join("counter_7.db"), one_record_file()).unwrap();
    symlink(
        "../elsewhere/counter_7.db",
        case.bad_entry("counter_7.db", "link_outside_directory"),
    )
    .unwrap();
    // A sibling directory whose name starts with the metrics directory's.
    let sibling = case.root.join("metrics-old");
    std::fs::create_dir(&sibling).unwrap();
    std::fs::write(sibling.join("counter_8.db"), one_record_file()).unwrap();
    symlink(
        sibling.join("counter_8.db"),
        case.bad_entry("counter_8.db", "link_outside_directory"),
    )
    .unwrap();
    case.check();
}

#[test]
fn link_to_a_file_outside_the_directory_is_followed_on_request() {
    let mut case = Case::new();
    case.arg("--dir.follow-links-outside");
    let outside = case.root.join("elsewhere");
    std::fs::create_dir(&outside).unwrap();
    std::fs::write(outside.join("data"), one_record_file()).unwrap();
    symlink("../elsewhere/data", case.dir.join("counter_7.db")).unwrap();
    case.good_entry("counter_7.db");
    case.check();
}

/// Links that stay inside the directory (relative, absolute, through a
/// subdirectory) are followed, as prometheus_client follows them.
#[test]
fn links_inside_the_directory_are_followed() {
    let mut case = Case::new();
    std::fs::create_dir(case.dir.join("real")).unwrap();
    std::fs::write(case.dir.join("real/data"), one_record_file()).unwrap();
    symlink("real/data", case.dir.join("counter_7.db")).unwrap();
    symlink(case.dir.join("real/data"), case.dir.join("counter_8.db")).unwrap();
    case.good_entry("counter_7.db");
    case.good_entry("counter_8.db");
    case.check();
}

#[test]
fn link_loops() {
    for follow_anywhere in [false, true] {
        let mut case = Case::new();
        if follow_anywhere {
            case.arg("--dir.follow-links-outside");
        }
        symlink("counter_3.db", case.bad_entry("counter_3.db", "link_loop")).unwrap();
        symlink("counter_5.db", case.bad_entry("counter_4.db", "link_loop")).unwrap();
        symlink("counter_4.db", case.bad_entry("counter_5.db", "link_loop")).unwrap();
        case.check();
    }
}

/// A dangling link is what a file deleted between listing and reading looks
/// like, every time (the race itself is `file_deleted_or_replaced_...`).
#[test]
fn dangling_link() {
    let mut case = Case::new();
    symlink("gone", case.bad_entry("counter_3.db", "vanished")).unwrap();
    case.check();
}

/// As root, through `setpriv` as `nobody`; otherwise as the current user.
#[test]
fn unreadable_file() {
    let mut case = Case::new();
    let bad = case.bad_file("counter_3.db", &one_record_file(), "permission_denied");
    std::fs::set_permissions(&bad, std::fs::Permissions::from_mode(0o000)).unwrap();
    case.launch = unprivileged_launch(&case.root);
    case.check();
}

/// A second metrics directory that cannot be listed: reported once in the log
/// and as `multiproc_exporter_scrape_directories{state="unreadable"}`; the
/// readable directory is served in full.
#[test]
fn unreadable_directory() {
    let Some(python) = python() else { return };
    let case = Case::new();
    let locked = case.root.join("locked");
    std::fs::create_dir(&locked).unwrap();
    write_good_files(&locked);
    std::fs::set_permissions(&locked, std::fs::Permissions::from_mode(0o000)).unwrap();
    let expected = case.expected(&python);
    let launch = unprivileged_launch(&case.root);
    let mut exporter = Exporter::launch(
        &[
            "--dir",
            case.dir.to_str().unwrap(),
            "--dir",
            locked.to_str().unwrap(),
        ],
        &launch,
    );
    for _ in 0..3 {
        let body = exporter.metrics();
        assert_eq!(merged_part(&body), expected.text);
        for (state, n) in [("present", 1.0), ("missing", 0.0), ("unreadable", 1.0)] {
            assert_eq!(
                sample_value(
                    &body,
                    &format!("multiproc_exporter_scrape_directories{{state=\"{state}\"}}")
                ),
                Some(n),
                "{state}"
            );
        }
    }
    exporter.sync_logs();
    // Named as a directory, not as a file (issue 10).
    let logged: Vec<_> = exporter
        .logs_with("Cannot list the metrics directory; serving nothing from it.")
        .into_iter()
        .filter(|l| l["path"].as_str() == locked.to_str())
        .collect();
    assert_eq!(logged.len(), 1, "{logged:#?}");
    assert_eq!(logged[0]["reason_label"], "directory_unreadable");
    exporter.assert_alive();
}

// ---------------------------------------------------------------------------------------------
// Races
// ---------------------------------------------------------------------------------------------

/// How long each race runs.
fn race_duration() -> Duration {
    let seconds = std::env::var("MPE_FAULTS_RACE_SECONDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(3.0);
    Duration::from_secs_f64(seconds)
}

/// Runs `mutate` in a loop on another thread while scraping in a loop for
/// [`race_duration`]; calls `check` with every scrape body (all must be 200).
/// Returns (scrapes, mutation rounds).
fn race(
    exporter: &mut Exporter,
    mutate: impl FnMut() + Send + 'static,
    mut check: impl FnMut(&str),
) -> (usize, usize) {
    /// Stops the mutating thread even when a check fails (before the
    /// temporary directory goes away under it).
    struct StopOnDrop(Arc<AtomicBool>);
    impl Drop for StopOnDrop {
        fn drop(&mut self) {
            self.0.store(true, Ordering::Relaxed);
        }
    }
    let stop = Arc::new(AtomicBool::new(false));
    let _stop_on_drop = StopOnDrop(stop.clone());
    let rounds = Arc::new(AtomicUsize::new(0));
    let mutator = {
        let (stop, rounds) = (stop.clone(), rounds.clone());
        let mut mutate = mutate;
        std::thread::spawn(move || {
            while !stop.load(Ordering::Relaxed) {
                mutate();
                rounds.fetch_add(1, Ordering::Relaxed);
            }
        })
    };
    let deadline = Instant::now() + race_duration();
    let mut scrapes = 0;
    while Instant::now() < deadline {
        let reply = exporter.get_or_explain("/metrics", &[]);
        assert_eq!(reply.status, 200);
        check(&reply.text());
        scrapes += 1;
    }
    stop.store(true, Ordering::Relaxed);
    mutator.join().expect("the mutating thread");
    exporter.assert_alive();
    (scrapes, rounds.load(Ordering::Relaxed))
}

/// Normalised expected outputs (sorted family blocks) of named file lists.
fn allowed_outputs(python: &Path, lists: &[(String, Vec<PathBuf>)]) -> HashSet<Vec<String>> {
    python_expositions(python, lists)
        .into_values()
        .map(|e| family_blocks(&e.text))
        .collect()
}

/// The bytes of one process's counter file with `vllm:prompt_tokens_total` = `value`
/// (a copy with the same name, in `scratch`, for Python to merge).
fn counter_file(scratch: &Path, pid: u32, value: f64) -> (PathBuf, Vec<u8>) {
    std::fs::create_dir_all(scratch).unwrap();
    let mut w = ProcessWriter::new(scratch, pid);
    let c = w
        .counter(PROMPT_TOKENS, PROMPT_HELP, &[("model_name", "m")])
        .unwrap();
    c.inc(&mut w, value).unwrap();
    drop(w);
    let path = scratch.join(format!("counter_{pid}.db"));
    let bytes = std::fs::read(&path).unwrap();
    (path, bytes)
}

/// Writes `bytes` to `path` as a new inode (temporary file, then rename).
fn replace(path: &Path, bytes: &[u8]) {
    let tmp = path.with_extension("db.tmp");
    std::fs::write(&tmp, bytes).unwrap();
    std::fs::rename(&tmp, path).unwrap();
}

/// Another process's files are created, replaced (a new inode under the same
/// name) and deleted in a tight loop while scraping: every scrape serves the
/// stable files exactly, plus the churning file's data or not; a file gone
/// between listing and reading is `vanished` (and a live gauge file silently
/// left out, as Python does), nothing else is skipped.
#[test]
fn file_deleted_or_replaced_between_listing_and_reading() {
    let Some(python) = python() else { return };
    let case = Case::new();
    let scratch = case.root.join("scratch");
    let (counter_copy, counter) = counter_file(&scratch, 9, 2.0);
    let (_, counter_other) = counter_file(&case.root.join("scratch2"), 9, 2.0);
    let gauge = {
        let mut w = ProcessWriter::new(&scratch, 9);
        let g = w
            .gauge(
                RUNNING,
                RUNNING_HELP,
                &[("model_name", "m")],
                GaugeMode::LiveSum,
            )
            .unwrap();
        g.set(&mut w, 1.5).unwrap();
        std::fs::read(scratch.join("gauge_livesum_9.db")).unwrap()
    };
    let gauge_copy = scratch.join("gauge_livesum_9.db");
    let good: Vec<PathBuf> = case.good.iter().map(|n| case.dir.join(n)).collect();
    let with = |extra: &[&PathBuf]| {
        let mut files = good.clone();
        files.extend(extra.iter().map(|p| (*p).clone()));
        files
    };
    let allowed = allowed_outputs(
        &python,
        &[
            ("none".into(), with(&[])),
            ("counter".into(), with(&[&counter_copy])),
            ("gauge".into(), with(&[&gauge_copy])),
            ("both".into(), with(&[&counter_copy, &gauge_copy])),
        ],
    );
    let mut exporter = Exporter::start(&["--dir", case.dir.to_str().unwrap()]);
    let (counter_path, gauge_path) = (
        case.dir.join("counter_9.db"),
        case.dir.join("gauge_livesum_9.db"),
    );
    let mutate = {
        let (counter_path, gauge_path) = (counter_path.clone(), gauge_path.clone());
        move || {
            replace(&counter_path, &counter);
            replace(&gauge_path, &gauge);
            replace(&counter_path, &counter_other);
            std::fs::remove_file(&counter_path).unwrap();
            std::fs::remove_file(&gauge_path).unwrap();
        }
    };
    let mut seen: HashMap<usize, usize> = HashMap::new();
    let mut vanished = 0;
    let (scrapes, rounds) = race(&mut exporter, mutate, |body| {
        let blocks = family_blocks(merged_part(body));
        assert!(allowed.contains(&blocks), "unexpected output:\n{body}");
        *seen.entry(blocks.len()).or_default() += 1;
        for (reason, n) in skipped_by_reason(body) {
            match reason.as_str() {
                "vanished" => {
                    assert!(n <= 1.0);
                    vanished += n as usize;
                }
                _ => assert_eq!(n, 0.0, "{reason}: {body}"),
            }
        }
    });
    eprintln!("{scrapes} scrapes, {rounds} rounds, {vanished} saw a vanished file");
    // Settled: exactly the stable files.
    let expected = case.expected(&python);
    assert_eq!(merged_part(&exporter.metrics()), expected.text);
    exporter.sync_logs();
    let warnings: Vec<_> = exporter
        .logs()
        .into_iter()
        .filter(|l| l["level"] == "WARN" || l["level"] == "ERROR")
        .collect();
    assert!(warnings.is_empty(), "{warnings:#?}");
}

/// A file shrinks (to 0, into its header, into its records) and grows back,
/// in place, in a tight loop while scraping. With a reader that maps files
/// this is the SIGBUS case: touching a mapped page past the new end of the
/// file kills the process unless it is guarded. The process must survive,
/// every scrape must serve the stable files exactly (with the shrinking file's
/// data or without it), and once the file stays whole it is served again.
#[test]
fn file_truncated_while_being_read() {
    let Some(python) = python() else { return };
    let case = Case::new();
    let scratch = case.root.join("scratch");
    // 2.0 has a single non-zero byte, so even a torn read sees 0 or 2.
    let (copy, bytes) = counter_file(&scratch, 9, 2.0);
    let path = case.dir.join("counter_9.db");
    std::fs::write(&path, &bytes).unwrap();
    let good: Vec<PathBuf> = case.good.iter().map(|n| case.dir.join(n)).collect();
    let mut with_it = good.clone();
    with_it.push(copy);
    let allowed = allowed_outputs(
        &python,
        &[("without".into(), good), ("with".into(), with_it)],
    );
    let used = i32::from_ne_bytes(bytes[..4].try_into().unwrap()) as u64;
    let mut exporter = Exporter::start(&["--dir", case.dir.to_str().unwrap()]);
    let mutate = {
        let file = std::fs::OpenOptions::new().write(true).open(&path).unwrap();
        let full = bytes.len() as u64;
        let mut round = 0u64;
        move || {
            // Cut to nothing, into the header, into the first record, to just
            // below `used`; then grow back and rewrite, in place.
            let cut = [0, 4, 12, used - 1][(round % 4) as usize];
            round += 1;
            file.set_len(cut).unwrap();
            file.set_len(full).unwrap();
            file.write_all_at(&bytes, 0).unwrap();
        }
    };
    let mut outcomes: HashMap<String, usize> = HashMap::new();
    let (scrapes, rounds) = race(&mut exporter, mutate, |body| {
        let blocks = family_blocks(merged_part(body));
        assert!(allowed.contains(&blocks), "unexpected output:\n{body}");
        let skipped: Vec<String> = skipped_by_reason(body)
            .into_iter()
            .filter(|(_, n)| *n > 0.0)
            .map(|(reason, _)| reason)
            .collect();
        assert!(skipped.len() <= 1, "only the shrinking file: {body}");
        let outcome = skipped.first().map_or("read", String::as_str);
        *outcomes.entry(outcome.to_owned()).or_default() += 1;
    });
    eprintln!("{scrapes} scrapes ({outcomes:?}), {rounds} truncations");
    let mut good_then = case.good.clone();
    good_then.push("counter_9.db".into());
    let settled = Case {
        good: good_then,
        ..case
    };
    let expected = settled.expected(&python);
    assert_eq!(merged_part(&exporter.metrics()), expected.text);
    exporter.assert_alive();
}

/// The directory is deleted and re-created (renamed away and replaced whole,
/// or emptied file by file and refilled) in a loop while scraping: every
/// scrape serves exactly what prometheus_client prints for some subset of the
/// files (nothing while the directory is missing), and once it stays, all of it.
#[test]
fn directory_deleted_and_recreated() {
    let Some(python) = python() else { return };
    let case = Case::new();
    let template = case.root.join("template");
    support::copy_dir(&case.dir, &template);
    let names = case.good.clone();
    assert!(names.len() <= 8);
    let lists: Vec<(String, Vec<PathBuf>)> = (0..1u32 << names.len())
        .map(|mask| {
            let files = names
                .iter()
                .enumerate()
                .filter(|(i, _)| mask & (1 << i) != 0)
                .map(|(_, n)| template.join(n))
                .collect();
            (mask.to_string(), files)
        })
        .collect();
    let mut allowed = allowed_outputs(&python, &lists);
    allowed.insert(Vec::new());
    let mut exporter = Exporter::start(&["--dir", case.dir.to_str().unwrap()]);
    let mutate = {
        let (dir, root, template, names) = (
            case.dir.clone(),
            case.root.clone(),
            template.clone(),
            names.clone(),
        );
        let mut round = 0u64;
        move || {
            round += 1;
            if round % 2 == 0 {
                // Atomic swap: rename away, rename a full copy in, delete the old one.
                let old = root.join(format!("old-{round}"));
                let new = root.join(format!("new-{round}"));
                support::copy_dir(&template, &new);
                std::fs::rename(&dir, &old).unwrap();
                std::fs::rename(&new, &dir).unwrap();
                std::fs::remove_dir_all(&old).unwrap();
            } else {
                // Deleted file by file, re-created, refilled file by file.
                std::fs::remove_dir_all(&dir).unwrap();
                std::fs::create_dir(&dir).unwrap();
                for n in &names {
                    std::fs::copy(template.join(n), dir.join(n)).unwrap();
                }
            }
        }
    };
    let mut missing = 0;
    let (scrapes, rounds) = race(&mut exporter, mutate, |body| {
        let blocks = family_blocks(merged_part(body));
        assert!(allowed.contains(&blocks), "unexpected output:\n{body}");
        missing += usize::from(
            sample_value(
                body,
                "multiproc_exporter_scrape_directories{state=\"missing\"}",
            ) == Some(1.0),
        );
        // Files being copied in are briefly empty or shorter than their header says.
        for (reason, n) in skipped_by_reason(body) {
            if !["vanished", "short_file", "bad_header"].contains(&reason.as_str()) {
                assert_eq!(n, 0.0, "{reason}: {body}");
            }
        }
    });
    eprintln!("{scrapes} scrapes ({missing} with the directory missing), {rounds} re-creations");
    let expected = case.expected(&python);
    assert_eq!(merged_part(&exporter.metrics()), expected.text);
    assert_eq!(exporter.get("/-/ready").status, 200);
}

// ---------------------------------------------------------------------------------------------
// Scale
// ---------------------------------------------------------------------------------------------

/// 100,000 files (one counter each, cut to their used bytes), one of them
/// bad, with the open-file limit at 1,024 (far fewer descriptors than files)
/// and more files than the exporter may keep mapped (a quarter of
/// `vm.max_map_count`): the scrape succeeds with the exact bytes
/// prometheus_client prints, the bad file is the only one skipped, the server
/// keeps answering other requests while it reads, and no descriptor runs out.
#[test]
fn one_hundred_thousand_files() {
    let files: usize = std::env::var("MPE_FAULTS_FILES")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(100_000);
    // In memory when possible, like a Kubernetes `emptyDir` with `medium: Memory`.
    let shm = Path::new("/dev/shm");
    let tmp = if shm.is_dir() {
        tempfile::tempdir_in(shm).or_else(|_| tempfile::tempdir())
    } else {
        tempfile::tempdir()
    }
    .unwrap();
    let dir = tmp.path().join("metrics");
    std::fs::create_dir(&dir).unwrap();
    let started = Instant::now();
    let key = writer::encode_key(PROMPT_TOKENS, "vllm:prompt_tokens_total", &[], PROMPT_HELP);
    let mut bytes = writer::file_bytes(&[(&key, 1.0, 0.0)]);
    let used = i32::from_ne_bytes(bytes[..4].try_into().unwrap()) as usize;
    bytes.truncate(used);
    for pid in 0..files {
        std::fs::write(dir.join(format!("counter_{pid}.db")), &bytes).unwrap();
    }
    std::fs::write(dir.join("counter_bad.db"), b"").unwrap();
    eprintln!("wrote {files} files in {:?}", started.elapsed());

    let launch = Launch {
        wrapper: ["prlimit", "--nofile=1024:1024", "--"]
            .map(Into::into)
            .to_vec(),
        log_level: "info",
        ..Launch::default()
    };
    let mut exporter = Exporter::launch(
        &["--dir", dir.to_str().unwrap(), "--writers.pending-grace=0"],
        &launch,
    );
    let url = format!("{}/metrics", exporter.base);
    // What prometheus_client prints for the good files (checked by hand: it
    // takes Python about 6 s to merge them).
    let expected = format!(
        "# HELP vllm:prompt_tokens_total {PROMPT_HELP}\n\
         # TYPE vllm:prompt_tokens_total counter\n\
         vllm:prompt_tokens_total {files}.0\n"
    );
    for round in 0..2 {
        let started = Instant::now();
        let scrape = {
            let url = url.clone();
            // A hang detector only: a debug build needs a few seconds.
            std::thread::spawn(move || get_within(&url, &[], Duration::from_secs(300)))
        };
        let mut health_checks = 0;
        while !scrape.is_finished() {
            assert_eq!(exporter.get("/-/healthy").status, 200);
            health_checks += 1;
            std::thread::sleep(Duration::from_millis(50));
        }
        let reply = scrape.join().unwrap();
        eprintln!(
            "scrape {round}: {:?} ({health_checks} health checks answered meanwhile)",
            started.elapsed()
        );
        assert_eq!(reply.status, 200);
        let body = reply.text();
        assert_eq!(merged_part(&body), expected);
        assert_eq!(
            sample_value(&body, "multiproc_exporter_scrape_files_read"),
            Some(files as f64)
        );
        let skipped = skipped_by_reason(&body);
        assert_eq!(skipped.get("short_file"), Some(&1.0));
        assert_eq!(skipped.values().sum::<f64>(), 1.0, "{skipped:?}");
        let open = sample_value(&body, "multiproc_exporter_process_open_fds").unwrap();
        let max = sample_value(&body, "multiproc_exporter_process_max_fds").unwrap();
        assert!(open < max, "{open} descriptors open of {max}");
    }
    exporter.sync_logs();
    let skipping = exporter.logs_with("Skipping file.");
    assert_eq!(skipping.len(), 1, "{skipping:#?}");
    assert_eq!(skipping[0]["reason_label"], "short_file");
    exporter.assert_alive();
}

/// Regression: a file that was bad at one size and is then repaired in place
/// (same inode, same `used`), as when a reader sees a record's `used` before
/// its bytes (possible on weakly ordered CPUs such as ARM64, where
/// prometheus_client's stores into its mapping carry no barrier), must be read
/// again, not skipped until its size changes.
#[test]
fn a_file_repaired_in_place_is_read_again() {
    let Some(python) = python() else { return };
    let case = Case::new();
    let (_, bytes) = counter_file(&case.root.join("scratch"), 9, 2.0);
    let path = case.dir.join("counter_9.db");
    let mut broken = bytes.clone();
    broken[14] = 0xff;
    std::fs::write(&path, &broken).unwrap();
    let mut exporter = Exporter::start(&["--dir", case.dir.to_str().unwrap()]);
    for _ in 0..2 {
        let body = exporter.metrics();
        assert_eq!(skipped_by_reason(&body)["key_not_utf8"], 1.0);
    }
    let file = std::fs::OpenOptions::new().write(true).open(&path).unwrap();
    file.write_all_at(&bytes[14..15], 14).unwrap();
    let mut good = case.good.clone();
    good.push("counter_9.db".into());
    let repaired = Case { good, ..case };
    let expected = repaired.expected(&python);
    let body = exporter.metrics();
    assert_eq!(merged_part(&body), expected.text);
    assert_eq!(skipped_by_reason(&body)["key_not_utf8"], 0.0);
    exporter.sync_logs();
    assert!(exporter.find_log("File is readable again.").is_some());
    exporter.assert_alive();
}
