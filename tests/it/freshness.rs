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
