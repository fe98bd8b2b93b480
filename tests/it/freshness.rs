//! Freshness under polling (issue 29): whatever the scrape path reuses
//! between scrapes (the merge of an unchanged directory, the encoded body of
//! the merged families, the writers' `process_*` values read once a second),
//! a value a live prometheus_client writer wrote before a scrape started is
//! in that scrape's answer, in every format and with or without gzip.
//!
//! Each writer (a real prometheus_client 0.26.0 process) counts rounds: in
//! round `i` it increments a counter, sets a `livesum` gauge to `i` and
//! observes `i` in a histogram, and only then publishes `i` in a side file.
//! The test reads the published round of every writer, then scrapes: the
//! counter's total, the gauge's sum and the histogram's `_count` must be at
//! least the sum of the rounds published before the request was sent.

use std::io::Read as _;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::support::{python, sample_value, wait_for, Exporter, ACCEPT_OPENMETRICS};

/// A writer publishing its round after each round of writes.
const WRITER: &str = r#"
import os, sys, time
from prometheus_client import Counter, Gauge, Histogram
published = sys.argv[1]
c = Counter("fresh_rounds", "Rounds written.")
g = Gauge("fresh_round", "The last round.", multiprocess_mode="livesum")
h = Histogram("fresh_seconds", "Rounds observed.", buckets=[10.0, 1000.0])
i = 0
while True:
    i += 1
    c.inc()
    g.set(i)
    h.observe(i)
    with open(published + ".tmp", "w") as f:
        f.write(str(i))
    os.replace(published + ".tmp", published)
    time.sleep(0.002)
"#;

struct Writer {
    child: Child,
    published: PathBuf,
}

impl Writer {
    fn start(python: &Path, dir: &Path, published: PathBuf) -> Self {
        let child = Command::new(python)
            .arg("-c")
            .arg(WRITER)
            .arg(&published)
            .env("PROMETHEUS_MULTIPROC_DIR", dir)
            .stdin(Stdio::null())
            .spawn()
            .expect("start a writer");
        Self { child, published }
    }

    /// The last round published (0 before the first).
    fn published(&self) -> u64 {
        std::fs::read_to_string(&self.published)
            .ok()
            .and_then(|s| s.trim().parse().ok())
            .unwrap_or(0)
    }
}

impl Drop for Writer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn body(reply: &crate::support::Reply) -> String {
    if reply.header("content-encoding") == Some("gzip") {
        let mut out = String::new();
        flate2::read::GzDecoder::new(&reply.body[..])
            .read_to_string(&mut out)
            .expect("valid gzip");
        out
    } else {
        reply.text()
    }
}

/// Regression guard for issue 29's caches: no value is served stale.
#[test]
fn a_value_written_before_a_scrape_is_in_its_answer_while_writers_run() {
    let Some(python) = python() else { return };
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("metrics");
    std::fs::create_dir(&dir).unwrap();
    let writers: Vec<Writer> = (0..2)
        .map(|i| Writer::start(&python, &dir, tmp.path().join(format!("published-{i}"))))
        .collect();
    wait_for("both writers to publish", || {
        writers.iter().all(|w| w.published() > 0).then_some(())
    });
    // The default flags: own metrics, liveness and the writers' process_*
    // values on, as in a pod.
    let exporter = Exporter::start(&["--dir", dir.to_str().unwrap()]);
    // The endpoint picker's request (no Accept, gzip), Prometheus's, and
    // plain text.
    let requests: [&[(&str, &str)]; 3] = [
        &[("Accept-Encoding", "gzip")],
        &[("Accept", ACCEPT_OPENMETRICS), ("Accept-Encoding", "gzip")],
        &[],
    ];
    let deadline = Instant::now() + Duration::from_secs(6);
    let mut scrapes = 0;
    while Instant::now() < deadline || scrapes < 150 {
        let before: u64 = writers.iter().map(Writer::published).sum();
        let headers = requests[scrapes % requests.len()];
        let reply = exporter.get_with("/metrics", headers);
        assert_eq!(reply.status, 200);
        let text = body(&reply);
        for series in ["fresh_rounds_total", "fresh_round", "fresh_seconds_count"] {
            let value = sample_value(&text, series)
                .unwrap_or_else(|| panic!("no {series} in scrape {scrapes}:\n{text}"));
            assert!(
                value >= before as f64,
                "scrape {scrapes} ({headers:?}): {series} is {value}, but {before} rounds were written before it started"
            );
        }
        scrapes += 1;
        if scrapes > 2_000 {
            break;
        }
    }
    assert!(scrapes >= 150, "{scrapes} scrapes");
}

/// The families of `text` (a text or OpenMetrics exposition) whose `# HELP`
/// names one of `names`, as they are written (a view cut from the whole
/// answer).
fn cut(text: &str, names: &[&str]) -> String {
    let mut out = String::new();
    let mut keep = false;
    for line in text.split_inclusive('\n') {
        if let Some(rest) = line.strip_prefix("# HELP ") {
            keep = names.iter().any(|n| rest.split(' ').next() == Some(n));
        }
        if keep && line != "# EOF\n" {
            out.push_str(line);
        }
    }
    if text.ends_with("# EOF\n") {
        out.push_str("# EOF\n");
    }
    out
}

/// The view's families asked for by their samples' names.
const NAMES_QUERY: &str = "/metrics?name[]=fresh_round&name[]=fresh_rounds_total";

/// Issue 34: a view reads only its families' records with its own reader,
/// yet serves what `/metrics` serves of them: fresh while writers write,
/// and, once they stop or exit, byte for byte the families cut from
/// `/metrics`, in every format.
#[test]
fn a_view_is_fresh_and_equals_its_families_cut_from_metrics_as_writers_change_and_exit() {
    let Some(python) = python() else { return };
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("metrics");
    std::fs::create_dir(&dir).unwrap();
    let mut writers: Vec<Writer> = (0..3)
        .map(|i| Writer::start(&python, &dir, tmp.path().join(format!("published-{i}"))))
        .collect();
    wait_for("the writers to publish", || {
        writers.iter().all(|w| w.published() > 0).then_some(())
    });
    let config = tmp.path().join("config.yaml");
    // Two of the three families; the counter by the name the text declares.
    std::fs::write(
        &config,
        "views:\n  fresh: [fresh_rounds_total, fresh_round]\n",
    )
    .unwrap();
    let exporter = Exporter::start(&[
        "--dir",
        dir.to_str().unwrap(),
        "--config",
        config.to_str().unwrap(),
    ]);
    let requests: [&[(&str, &str)]; 3] = [
        &[("Accept-Encoding", "gzip")],
        &[("Accept", ACCEPT_OPENMETRICS), ("Accept-Encoding", "gzip")],
        &[],
    ];
    for scrape in 0..150 {
        let before: u64 = writers.iter().map(Writer::published).sum();
        let headers = requests[scrape % requests.len()];
        // Every other poll asks for the same families by their samples'
        // names (issue 40: `?name[]=` has a source of its own too).
        let path = match scrape % 2 {
            0 => "/metrics/fresh",
            _ => NAMES_QUERY,
        };
        let reply = exporter.get_with(path, headers);
        assert_eq!(reply.status, 200);
        let text = body(&reply);
        for series in ["fresh_rounds_total", "fresh_round"] {
            let value = sample_value(&text, series)
                .unwrap_or_else(|| panic!("no {series} in {path} poll {scrape}:\n{text}"));
            assert!(
                value >= before as f64,
                "{path} poll {scrape} ({headers:?}): {series} is {value}, but {before} rounds were written before it"
            );
        }
        assert!(!text.contains("fresh_seconds"), "{text}");
        assert!(!text.contains("process_"), "no own metrics: {text}");
    }
    let equal_slices = |when: &str| {
        for headers in requests {
            let whole = body(&exporter.get_with("/metrics", headers));
            let view = body(&exporter.get_with("/metrics/fresh", headers));
            assert_eq!(
                view,
                cut(&whole, &["fresh_rounds", "fresh_rounds_total", "fresh_round"]),
                "{when} ({headers:?}): the view differs from its families cut from /metrics:\n{whole}"
            );
            let names = body(&exporter.get_with(NAMES_QUERY, headers));
            assert_eq!(
                names, view,
                "{when} ({headers:?}): `?name[]=` differs from the view"
            );
        }
    };
    // Values stop changing (the writers are alive, stopped).
    for w in &writers {
        let _ = Command::new("kill")
            .args(["-STOP", &w.child.id().to_string()])
            .status();
    }
    std::thread::sleep(Duration::from_millis(50));
    equal_slices("writers stopped");
    // One writer exits: its live gauge leaves both answers, its counter stays.
    let gone = writers.remove(0);
    let before = sample_value(
        &body(&exporter.get_with("/metrics/fresh", &[])),
        "fresh_round",
    );
    drop(gone);
    let after = wait_for("the exited writer's live gauge to leave the view", || {
        let value = sample_value(
            &body(&exporter.get_with("/metrics/fresh", &[])),
            "fresh_round",
        )?;
        (Some(value) != before).then_some(value)
    });
    assert!(Some(after) < before, "{after} {before:?}");
    equal_slices("a writer exited");
    for w in &writers {
        let _ = Command::new("kill")
            .args(["-CONT", &w.child.id().to_string()])
            .status();
    }
}
