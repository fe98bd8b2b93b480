//! Writer processes (issue 13), with real prometheus_client processes
//! (`tests/python/writer_process.py`) that are killed, and a real gunicorn +
//! prometheus_flask_exporter app whose workers are recycled and killed:
//!
//! * a killed writer's live gauges leave the output at the next scrape, its
//!   counters and `sum` gauges stay (and are reported), and its `process_*`
//!   series end;
//! * a pid reused by an unrelated, later process does not revive it;
//! * a file a live writer is creating is pending (no WARN, not skipped); the
//!   same file left by a dead writer is reported once;
//! * gunicorn churn: no failed scrape, no WARN line, no skipped file,
//!   counters never decrease, and the final output is prometheus_client's.

use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};
use std::time::{Duration, Instant};

use crate::support::shapes::Shape;
use crate::support::{
    dump, eventually, listing_order, merged_part, python, python_exposition, repo_root,
    sample_value, skipped_by_reason, wait_for, Exporter,
};

/// A running `writer_process.py`.
pub(crate) struct Writer {
    child: Child,
    stdin: ChildStdin,
    stdout: BufReader<ChildStdout>,
}

impl Writer {
    pub(crate) fn start(python: &Path, dir: &Path) -> Writer {
        Self::start_with(python, dir, false)
    }

    /// A writer of every kind of file compaction knows, and of an `all`
    /// gauge (`WRITER_ALL_KINDS=1`).
    pub(crate) fn start_all_kinds(python: &Path, dir: &Path) -> Writer {
        Self::start_with(python, dir, true)
    }

    fn start_with(python: &Path, dir: &Path, all_kinds: bool) -> Writer {
        let mut child = Command::new(python)
            .arg(repo_root().join("tests/python/writer_process.py"))
            .env("PROMETHEUS_MULTIPROC_DIR", dir)
            .env("WRITER_ALL_KINDS", if all_kinds { "1" } else { "0" })
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .expect("start writer_process.py");
        let stdin = child.stdin.take().unwrap();
        let stdout = BufReader::new(child.stdout.take().unwrap());
        let mut writer = Writer {
            child,
            stdin,
            stdout,
        };
        writer.expect("ready");
        writer
    }

    pub(crate) fn pid(&self) -> u32 {
        self.child.id()
    }

    fn expect(&mut self, word: &str) {
        let mut line = String::new();
        self.stdout.read_line(&mut line).unwrap();
        assert_eq!(line.trim(), word);
    }

    /// Creates `name` and keeps it open at 0 bytes.
    fn hold(&mut self, name: &str) {
        writeln!(self.stdin, "hold {name}").unwrap();
        self.expect("held");
    }

    pub(crate) fn kill(mut self) {
        self.child.kill().unwrap();
        self.child.wait().unwrap();
    }

    pub(crate) fn exit(mut self) {
        writeln!(self.stdin, "exit").unwrap();
        self.child.wait().unwrap();
    }
}

fn warnings(exporter: &Exporter) -> Vec<serde_json::Value> {
    exporter.sync_logs();
    exporter
        .logs()
        .into_iter()
        .filter(|l| l["level"] == "WARN" || l["level"] == "ERROR")
        .collect()
}

fn value(body: &str, series: &str) -> f64 {
    sample_value(body, series).unwrap_or_else(|| panic!("{series} not in\n{body}"))
}

/// In both deployment shapes ([`Shape`]): from a pid namespace of its own
/// the exporter cannot see the writers, says so once, and serves as
/// prometheus_client does (a killed writer's live gauges stay, no
/// `process_*`), while a file being created is still pending.
#[test]
fn a_killed_writers_live_gauges_vanish_and_what_it_counted_stays() {
    let Some(python) = python() else { return };
    for shape in Shape::each() {
        killed_writer_in(shape, &python);
    }
}

fn killed_writer_in(shape: Shape, python: &Path) {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let a = Writer::start(python, dir);
    let mut b = Writer::start(python, dir);
    let (pid_a, pid_b) = (a.pid(), b.pid());
    let exporter = shape.start(&["--dir", dir.to_str().unwrap()]);
    let start = exporter.find_log("Starting multiproc-exporter.").unwrap();
    assert_eq!(start["writers_liveness"], "auto", "{start}");

    if !shape.pids_visible() {
        let body = exporter.metrics();
        assert_eq!(value(&body, "app_in_flight"), 2.0);
        assert_eq!(value(&body, "multiproc_exporter_writers_visible"), 0.0);
        assert_eq!(
            value(&body, "multiproc_exporter_writers{state=\"unknown\"}"),
            2.0
        );
        assert!(!body.contains(&format!("{{pid=\"{pid_a}\"}}")), "{body}");
        b.hold(&format!("histogram_{pid_b}.db"));
        let body = exporter.metrics();
        assert_eq!(value(&body, "multiproc_exporter_scrape_files_pending"), 1.0);
        a.kill();
        // Nothing shows that A exited: prometheus_client's output.
        let body = exporter.metrics();
        assert_eq!(value(&body, "app_in_flight"), 2.0);
        assert_eq!(
            value(&body, "multiproc_exporter_writers{state=\"dead\"}"),
            0.0
        );
        exporter.sync_logs();
        let said = exporter.logs_with("Writer processes are not visible (another pid namespace, or their open files cannot be read): serving as prometheus_client would; live gauges of writers that exited stay until mark_process_dead. See --writers.liveness and docs/deployment.md.");
        assert_eq!(said.len(), 1, "{:#?}", exporter.logs());
        b.kill();
        return;
    }

    let body = exporter.metrics();
    assert_eq!(value(&body, "app_in_flight"), 2.0);
    exporter.sync_logs();
    assert!(exporter
        .find_log("Writer processes are visible: the live gauges of writers that exited are left out, files being created are pending, live writers' process_* metrics are served.")
        .is_some());
    assert_eq!(value(&body, "multiproc_exporter_writers_visible"), 1.0);
    assert_eq!(
        value(&body, "multiproc_exporter_writers{state=\"live\"}"),
        2.0
    );
    for pid in [pid_a, pid_b] {
        assert!(
            value(
                &body,
                &format!("process_cpu_seconds_total{{pid=\"{pid}\"}}")
            ) >= 0.0
        );
        let start = value(
            &body,
            &format!("process_start_time_seconds{{pid=\"{pid}\"}}"),
        );
        assert!(start > 1.6e9, "{start}");
        assert!(
            value(
                &body,
                &format!("process_resident_memory_bytes{{pid=\"{pid}\"}}")
            ) > 1e6
        );
    }
    // The exporter's own process values are named apart.
    assert!(body.contains("\nmultiproc_exporter_process_cpu_seconds_total "));

    // A file B is creating: pending, not skipped, no warning.
    b.hold(&format!("histogram_{pid_b}.db"));
    let body = exporter.metrics();
    assert_eq!(value(&body, "multiproc_exporter_scrape_files_pending"), 1.0);
    assert_eq!(
        skipped_by_reason(&body).values().sum::<f64>(),
        0.0,
        "{body}"
    );

    // A crashes (no mark_process_dead).
    a.kill();
    let body = exporter.metrics();
    assert_eq!(value(&body, "app_in_flight"), 1.0);
    assert_eq!(value(&body, "app_requests_total"), 6.0);
    assert_eq!(value(&body, "app_cache_objects"), 10.0);
    assert_eq!(
        value(&body, "multiproc_exporter_writers{state=\"dead\"}"),
        1.0
    );
    assert_eq!(
        value(&body, "multiproc_exporter_writers{state=\"live\"}"),
        1.0
    );
    assert_eq!(
        value(
            &body,
            "multiproc_exporter_dead_writer_gauge_files{mode=\"livesum\",served=\"false\"}"
        ),
        1.0
    );
    assert_eq!(
        value(
            &body,
            "multiproc_exporter_dead_writer_gauge_files{mode=\"sum\",served=\"true\"}"
        ),
        1.0
    );
    assert!(!body.contains(&format!("{{pid=\"{pid_a}\"}}")), "{body}");
    assert!(warnings(&exporter).is_empty(), "{:#?}", warnings(&exporter));

    // B crashes while creating its file: now a dead writer's short file,
    // reported once however often it is scraped.
    b.kill();
    for _ in 0..3 {
        let body = exporter.metrics();
        assert_eq!(
            value(
                &body,
                "multiproc_exporter_scrape_files_skipped{reason=\"short_file\"}"
            ),
            1.0
        );
        assert_eq!(value(&body, "multiproc_exporter_scrape_files_pending"), 0.0);
        assert!(!body.contains("\napp_in_flight "), "{body}");
    }
    let warned = warnings(&exporter);
    assert_eq!(warned.len(), 1, "{warned:#?}");
    assert_eq!(warned[0]["reason_label"], "short_file");

    // A new process sees no live writer holding its files: in `auto` it
    // cannot tell "all dead" from "not visible", and serves as
    // prometheus_client does; `proc` trusts /proc. Then the opt-ins: dead
    // writers' sum gauges dropped, their live gauges kept.
    let dir_arg = dir.to_str().unwrap();
    let grace = "--writers.pending-grace=0";
    let auto = String::from_utf8(dump(&[grace, dir_arg])).unwrap();
    assert_eq!(value(&auto, "app_in_flight"), 2.0);
    let proc = String::from_utf8(dump(&["--writers.liveness=proc", grace, dir_arg])).unwrap();
    assert!(!proc.contains("\napp_in_flight "), "{proc}");
    assert_eq!(value(&proc, "app_cache_objects"), 10.0);
    let dropped = String::from_utf8(dump(&[
        "--writers.liveness=proc",
        "--writers.drop-dead-gauges",
        grace,
        dir_arg,
    ]))
    .unwrap();
    assert!(!dropped.contains("\napp_cache_objects "), "{dropped}");
    let kept = String::from_utf8(dump(&[
        "--writers.liveness=proc",
        "--writers.keep-dead-live-gauges",
        grace,
        dir_arg,
    ]))
    .unwrap();
    assert_eq!(value(&kept, "app_in_flight"), 2.0);
}

/// Regression: a dead writer's pid taken by a later, unrelated process (that
/// even holds the dead writer's files open) must not bring its live gauges
/// back; the output is then prometheus_client's after `mark_process_dead`.
#[test]
fn a_pid_reused_by_an_unrelated_process_does_not_revive_a_dead_writer() {
    let Some(python) = python() else { return };
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let witness = Writer::start(&python, dir);
    let dead = Writer::start(&python, dir);
    let dead_pid = dead.pid();
    dead.exit();
    // Past the guard's slack (0.05 s) and short of a second, so that a boot
    // time cut to whole seconds (the bug this pins) fails here on machines
    // whose boot time has a fraction above about 0.5 s.
    std::thread::sleep(Duration::from_millis(500));
    // A later process, which waits for the dead writer's files to carry its
    // pid (renaming keeps their creation time), then holds them open.
    let mut later = Command::new("sh")
        .arg("-c")
        .arg(
            r#"d=$0; while [ ! -e "$d/go" ]; do sleep 0.05; done
exec 3<"$d/gauge_livesum_$$.db" 4<"$d/counter_$$.db" 5<"$d/gauge_sum_$$.db"; exec sleep 60"#,
        )
        .arg(dir)
        .spawn()
        .unwrap();
    let reused = later.id();
    for name in listing_order(dir) {
        if let Some(prefix) = name.strip_suffix(&format!("_{dead_pid}.db")) {
            std::fs::rename(dir.join(&name), dir.join(format!("{prefix}_{reused}.db"))).unwrap();
        }
    }
    std::fs::write(dir.join("go"), b"").unwrap();
    wait_for("the later process to hold the files", || {
        let cmdline = std::fs::read(format!("/proc/{reused}/cmdline")).unwrap_or_default();
        cmdline.starts_with(b"sleep").then_some(())
    });

    let dir_arg = dir.to_str().unwrap();
    let ours = String::from_utf8(dump(&["--writers.disable-process-metrics", dir_arg])).unwrap();
    assert_eq!(value(&ours, "app_in_flight"), 1.0, "{ours}");
    assert_eq!(value(&ours, "app_requests_total"), 6.0);

    // prometheus_client, once mark_process_dead(dead writer) removed its
    // live gauge file.
    let files: Vec<PathBuf> = listing_order(dir)
        .into_iter()
        .filter(|n| n.ends_with(".db") && *n != format!("gauge_livesum_{reused}.db"))
        .map(|n| dir.join(n))
        .collect();
    let expected = python_exposition(&python, files);
    assert_eq!(ours, expected.text);
    // And prometheus_client's own semantics on request.
    let exact = String::from_utf8(dump(&["--writers.liveness=off", dir_arg])).unwrap();
    assert_eq!(value(&exact, "app_in_flight"), 2.0);
    later.kill().unwrap();
    later.wait().unwrap();
    witness.kill();
}

/// A running gunicorn serving `tests/python/gunicorn_app.py`.
struct Gunicorn {
    child: Child,
    base: String,
}

impl Gunicorn {
    fn start(python: &Path, dir: &Path) -> Option<Gunicorn> {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .ok()?
            .local_addr()
            .ok()?
            .port();
        let bin = python.parent()?.join("gunicorn");
        if !bin.exists() {
            return None;
        }
        let child = Command::new(bin)
            .args(["-c", "gunicorn_conf.py", "gunicorn_app:app"])
            .current_dir(repo_root().join("tests/python"))
            .env("PROMETHEUS_MULTIPROC_DIR", dir)
            .env("APP_BIND", format!("127.0.0.1:{port}"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .ok()?;
        let base = format!("http://127.0.0.1:{port}");
        let gunicorn = Gunicorn { child, base };
        eventually("gunicorn to answer", Duration::from_secs(30), || {
            ureq::get(&format!("{}/work", gunicorn.base))
                .call()
                .map_err(|e| e.to_string())
        });
        Some(gunicorn)
    }

    /// A worker's pid (the one that answers).
    fn worker_pid(&self) -> u32 {
        let body = ureq::get(&format!("{}/pid", self.base))
            .call()
            .unwrap()
            .into_body()
            .read_to_string()
            .unwrap();
        body.trim().parse().unwrap()
    }

    fn stop(mut self) {
        let _ = Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status();
        self.child.wait().unwrap();
    }
}

fn env_or(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// Counter-like series of a text exposition (counters, buckets, counts and
/// sums), without the exporter's self-metrics.
pub(crate) fn monotone(body: &str) -> Vec<(String, f64)> {
    let mut out = Vec::new();
    let mut monotone = false;
    for line in merged_part(body).lines() {
        if let Some(rest) = line.strip_prefix("# TYPE ") {
            monotone = ["counter", "histogram", "summary"]
                .iter()
                .any(|t| rest.ends_with(t))
                && !rest.starts_with("process_");
            continue;
        }
        if line.starts_with('#') || !monotone {
            continue;
        }
        if let Some((series, v)) = line.rsplit_once(' ') {
            out.push((series.to_owned(), v.parse().unwrap()));
        }
    }
    out
}

/// The issue's scenario: gunicorn, 4 workers recycled every ~50 requests,
/// two workers SIGKILLed, scraped throughout (`MPE_GUNICORN_REQUESTS`,
/// default 2,000; the issue's figure is 15,000).
#[test]
fn gunicorn_worker_churn_is_normal_operation() {
    let Some(python) = python() else { return };
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let Some(app) = Gunicorn::start(&python, dir) else {
        panic!("gunicorn is not in the test venv (scripts/setup-python-venv)");
    };
    let exporter = Exporter::start(&["--dir", dir.to_str().unwrap()]);
    let requests = env_or("MPE_GUNICORN_REQUESTS", 2000);
    let started = Instant::now();
    let mut last: std::collections::HashMap<String, f64> = Default::default();
    let mut scrapes = 0;
    let mut pending_seen = 0.0;
    let mut killed = 0;
    // Requests answered: the first one, the workers asked for their pid,
    // and the work.
    let mut answered = 1;
    for i in 0..requests {
        if ureq::get(&format!("{}/work", app.base)).call().is_ok() {
            answered += 1;
        }
        if i > 0 && i % (requests / 3) == 0 && killed < 2 {
            answered += 1;
            let pid = app.worker_pid();
            let _ = Command::new("kill")
                .args(["-KILL", &pid.to_string()])
                .status();
            killed += 1;
        }
        if i % 10 == 0 {
            let reply = exporter.get("/metrics");
            assert_eq!(reply.status, 200, "scrape {scrapes}");
            let body = reply.text();
            for (reason, n) in skipped_by_reason(&body) {
                assert_eq!(n, 0.0, "scrape {scrapes}: skipped for {reason}");
            }
            pending_seen +=
                sample_value(&body, "multiproc_exporter_scrape_files_pending").unwrap_or(0.0);
            for (series, v) in monotone(&body) {
                if let Some(previous) = last.get(&series) {
                    assert!(
                        v >= *previous,
                        "scrape {scrapes}: {series} {previous} -> {v}"
                    );
                }
                last.insert(series, v);
            }
            scrapes += 1;
        }
    }
    let body = exporter.metrics();
    let files = listing_order(dir).len();
    eprintln!(
        "gunicorn: {requests} requests in {:?}, {scrapes} scrapes, {files} files, \
         writers {} live / {} dead, {pending_seen} pending files seen",
        started.elapsed(),
        value(&body, "multiproc_exporter_writers{state=\"live\"}"),
        value(&body, "multiproc_exporter_writers{state=\"dead\"}"),
    );
    assert!(value(&body, "multiproc_exporter_writers{state=\"dead\"}") >= 2.0);
    let live = value(&body, "multiproc_exporter_writers{state=\"live\"}");
    assert!((1.0..=5.0).contains(&live), "{live} live workers");
    assert_eq!(
        value(
            &body,
            "flask_http_request_total{method=\"GET\",status=\"200\"}"
        ),
        f64::from(answered),
        "every request counted once, in live and dead workers' files"
    );
    assert!(warnings(&exporter).is_empty(), "{:#?}", warnings(&exporter));

    // Stopped (gunicorn marks every worker dead): prometheus_client's output.
    app.stop();
    let files: Vec<PathBuf> = listing_order(dir)
        .into_iter()
        .map(|n| dir.join(n))
        .collect();
    let expected = python_exposition(&python, files);
    assert_eq!(merged_part(&exporter.metrics()), expected.text);
    assert!(warnings(&exporter).is_empty(), "{:#?}", warnings(&exporter));
}

/// A process id that was in use and is free now (a killed `sleep`).
fn dead_pid() -> u32 {
    let mut child = Command::new("sleep").arg("60").spawn().unwrap();
    let pid = child.id();
    child.kill().unwrap();
    child.wait().unwrap();
    pid
}

/// Sets the directory's modification time an hour back, so that its listing
/// is reused while it stays unchanged.
fn settle_directory(dir: &Path) {
    std::fs::File::open(dir)
        .unwrap()
        .set_modified(std::time::SystemTime::now() - Duration::from_secs(3600))
        .unwrap();
}

/// Dead writers' files, with whole values (so that folding them in another
/// order changes no bit): a counter, a `livesum` and a `sum` gauge each.
fn write_dead_writer(dir: &Path, pid: u32, n: f64) {
    use crate::support::{key, write_db};
    write_db(
        &dir.join(format!("counter_{pid}.db")),
        &[(
            key(
                "app_requests",
                "app_requests_total",
                &[],
                "Requests handled.",
            ),
            n,
        )],
    );
    for mode in ["livesum", "sum"] {
        write_db(
            &dir.join(format!("gauge_{mode}_{pid}.db")),
            &[(
                key("app_objects", "app_objects", &[("mode", mode)], "Objects."),
                n,
            )],
        );
    }
}

/// Regression guard for issue 13's cost target: once a dead writer's files
/// are frozen and their directory is unchanged, a collection does not even
/// look them up (it merges the live writers' files onto their cached sum),
/// yet serves what merging every file gives, and notices files added and
/// removed.
#[test]
fn frozen_dead_writers_are_skipped_and_the_output_stays_that_of_every_file() {
    use multiproc_exporter::expose::encode::{encode, Escaping, Format};
    use multiproc_exporter::pipeline::Collector;
    use multiproc_exporter::source::Input;
    let Some(python) = python() else { return };
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let live = Writer::start(&python, dir);
    let killed = Writer::start(&python, dir);
    killed.kill();
    let dead: Vec<u32> = (0..40).map(|_| dead_pid()).collect();
    for (i, pid) in dead.iter().enumerate() {
        write_dead_writer(dir, *pid, i as f64);
    }
    settle_directory(dir);
    let inputs = [Input::Directory(dir.to_path_buf())];
    let collector = crate::support::proc_collector;
    let (mut folded, mut every) = (collector(true), collector(false));
    let mut counter = multiproc_exporter::format::writer::MetricsFile::open(
        dir.join(format!("counter_{}.db", live.pid())),
    )
    .unwrap();
    let mut round = 0.0;
    // What the dead writers counted: the killed one 3, the others 0..40.
    let mut dead_sum = 3.0 + 780.0;
    let mut compare = |folded: &mut Collector, every: &mut Collector, dead_sum: f64| {
        // The live writer counts on.
        round += 1.0;
        counter.write_index(0, 100.0 + round, 0.0).unwrap();
        let (a, b) = (folded.collect(&inputs), every.collect(&inputs));
        let text = |c: &multiproc_exporter::pipeline::Collection| {
            String::from_utf8(encode(&c.families, Format::Text, Escaping::Underscores)).unwrap()
        };
        assert_eq!(text(&a), text(&b));
        assert_eq!(a.writers, b.writers);
        assert_eq!(a.problems, b.problems);
        assert_eq!(b.stats.files_skipped, 0);
        let total = format!("app_requests_total {:?}\n", 100.0 + round + dead_sum);
        assert!(text(&a).contains(&total), "{total}{}", text(&a));
        a.stats.files_skipped
    };
    // Dead at two collections: frozen; then skipped.
    let skipped: Vec<usize> = (0..4)
        .map(|_| compare(&mut folded, &mut every, dead_sum))
        .collect();
    let dead_files = 3 * dead.len() + 3;
    assert_eq!(skipped[3], dead_files, "{skipped:?}");
    // The server's periodic check lists the directory again: the same
    // entries, so the frozen files are still skipped.
    folded.recheck_all();
    every.recheck_all();
    assert_eq!(compare(&mut folded, &mut every, dead_sum), dead_files);
    // A dead writer's files added, then one removed: listed again, then
    // skipped again.
    write_dead_writer(dir, dead_pid(), 1000.0);
    dead_sum += 1000.0;
    settle_directory(dir);
    let skipped: Vec<usize> = (0..4)
        .map(|_| compare(&mut folded, &mut every, dead_sum))
        .collect();
    assert_eq!(skipped[0], 0, "{skipped:?}");
    assert_eq!(skipped[3], dead_files + 3, "{skipped:?}");
    std::fs::remove_file(dir.join(format!("counter_{}.db", dead[0]))).unwrap();
    settle_directory(dir);
    // (It counted 0.)
    let skipped: Vec<usize> = (0..3)
        .map(|_| compare(&mut folded, &mut every, dead_sum))
        .collect();
    assert_eq!(skipped[0], 0, "{skipped:?}");
    assert_eq!(skipped[2], dead_files + 2, "{skipped:?}");
    live.kill();
}

/// Starts a writer whose pid is `pid` (free now), by setting the kernel's
/// last allocated pid (root only); `None` if that cannot be done here.
fn writer_with_pid(python: &Path, dir: &Path, pid: u32) -> Option<Writer> {
    for _ in 0..50 {
        std::fs::write("/proc/sys/kernel/ns_last_pid", format!("{}", pid - 1)).ok()?;
        let writer = Writer::start(python, dir);
        if writer.pid() == pid {
            return Some(writer);
        }
        // Another process took it first: try again.
        writer.kill();
    }
    None
}

/// Regression: a dead writer's verdict was final, so a later prometheus_client
/// process given its pid, which opens the same files again and counts on in
/// them, was served frozen values. Holding the files open for writing makes
/// it their writer again.
#[test]
fn a_dead_writers_pid_taken_by_a_new_prometheus_client_process_counts_on() {
    let Some(python) = python() else { return };
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let first = Writer::start(&python, dir);
    let pid = first.pid();
    first.kill();
    let exporter = Exporter::start(&[
        "--dir",
        dir.to_str().unwrap(),
        "--writers.liveness=proc",
        "--writers.disable-process-metrics",
    ]);
    for _ in 0..3 {
        let body = exporter.metrics();
        assert_eq!(value(&body, "app_requests_total"), 3.0);
        assert!(!body.contains("\napp_in_flight "), "{body}");
    }
    if !crate::support::is_root() {
        eprintln!("skipped: setting the next pid needs root");
        return;
    }
    let second = writer_with_pid(&python, dir, pid).expect("a writer with the dead writer's pid");
    // prometheus_client read 3 from the file and added 3; its live gauge is
    // back.
    eventually("the new writer's values", Duration::from_secs(20), || {
        let body = exporter.metrics();
        match (
            sample_value(&body, "app_requests_total"),
            sample_value(&body, "app_in_flight"),
        ) {
            (Some(6.0), Some(1.0)) => Ok(()),
            other => Err(format!("{other:?}")),
        }
    });
    let body = exporter.metrics();
    assert_eq!(
        value(&body, "multiproc_exporter_writers{state=\"live\"}"),
        1.0
    );
    assert_eq!(
        value(&body, "multiproc_exporter_writers{state=\"dead\"}"),
        0.0
    );
    // What prometheus_client serves for the same files.
    let files: Vec<PathBuf> = listing_order(dir)
        .into_iter()
        .map(|n| dir.join(n))
        .collect();
    let expected = python_exposition(&python, files);
    assert_eq!(merged_part(&body), expected.text);
    second.kill();
}
