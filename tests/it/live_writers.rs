//! Live writers: real prometheus_client 0.26.0 processes write at a high rate
//! (`tests/python/live_writers.py`: counters, gauges in all ten multiprocess
//! modes, histograms and summaries; processes starting, exiting and being
//! marked dead; files growing past 64 KiB and being remapped) while this test
//! scrapes the running exporter continuously, alternating text and
//! OpenMetrics (gzipped). It checks that
//!
//! * every scrape answers 200 and parses;
//! * every counter, every histogram bucket, `_count` and `_sum`, and every
//!   summary `_count` and `_sum` is non-decreasing from one scrape to the
//!   next, and none of these series disappears (files of dead processes stay;
//!   the writers' own `process_*` series end with them);
//! * no file is ever skipped: a file prometheus_client has created but not
//!   yet sized (0 bytes) is pending while its writer lives;
//! * once the writers have stopped, the exporter serves exactly what
//!   prometheus_client prints for the same directory once every writer is
//!   marked dead (the exporter leaves out exited writers' live gauges), in
//!   both formats and both escapings.
//!
//! `MPE_LIVE_SECONDS` (default 60) sets how long the writers run,
//! `MPE_LIVE_PROCESSES` (default 4) how many run at once, `MPE_LIVE_RATE`
//! (default 20000) the operations per second of each. The long variant:
//! `MPE_LIVE_SECONDS=600 cargo test --test live_writers -- --nocapture`.

use crate::support;

use std::collections::HashMap;
use std::io::Read as _;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::support::{
    merged_part, python, python_exposition, repo_root, sample_value, skipped_by_reason, Exporter,
    Launch, ACCEPT_OPENMETRICS,
};

fn env_or<T: std::str::FromStr>(name: &str, default: T) -> T {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// The samples of an exposition (text or OpenMetrics) whose family is a
/// counter, histogram or summary, as `series -> value`.
fn monotone_samples(body: &str) -> HashMap<String, f64> {
    let mut samples = HashMap::new();
    let mut monotone = false;
    for line in body.lines() {
        if let Some(rest) = line.strip_prefix("# TYPE ") {
            let kind = rest.rsplit(' ').next().unwrap_or("");
            // A writer's `process_*` series end with the process.
            monotone = matches!(kind, "counter" | "histogram" | "summary")
                && !rest.starts_with("process_");
            continue;
        }
        if line.starts_with('#') || line.is_empty() || !monotone {
            continue;
        }
        let (series, value) = line
            .rsplit_once(' ')
            .unwrap_or_else(|| panic!("malformed sample line {line:?}"));
        let value: f64 = value
            .parse()
            .unwrap_or_else(|_| panic!("malformed value in {line:?}"));
        assert!(
            samples.insert(series.to_owned(), value).is_none(),
            "duplicate series {series}"
        );
    }
    samples
}

fn gunzip(bytes: &[u8]) -> String {
    let mut out = String::new();
    flate2::read::GzDecoder::new(bytes)
        .read_to_string(&mut out)
        .expect("valid gzip");
    out
}

#[test]
fn scrapes_stay_consistent_while_processes_write() {
    let Some(python) = python() else { return };
    let seconds: f64 = env_or("MPE_LIVE_SECONDS", 60.0);
    let processes: usize = env_or("MPE_LIVE_PROCESSES", 4);
    let rate: f64 = env_or("MPE_LIVE_RATE", 20000.0);
    let seed = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos() as u64
        % 1_000_000;
    eprintln!("live writers: {seconds} s, {processes} processes, {rate} ops/s each, seed {seed}");
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("metrics");
    std::fs::create_dir(&dir).unwrap();
    let dir_s = dir.to_str().unwrap();
    let mut exporter = Exporter::launch(
        &["--dir", dir_s],
        &Launch {
            log_level: "info",
            ..Launch::default()
        },
    );
    let mut writers = Command::new(&python)
        .arg(repo_root().join("tests/python/live_writers.py"))
        .arg(dir_s)
        .args(["--seconds", &seconds.to_string()])
        .args(["--processes", &processes.to_string()])
        .args(["--rate", &rate.to_string()])
        .args(["--seed", &seed.to_string()])
        .stdout(Stdio::piped())
        .spawn()
        .expect("start live_writers.py");

    let mut last: HashMap<String, f64> = HashMap::new();
    let mut scrapes = 0usize;
    let mut short_files = 0usize;
    let mut latencies: Vec<Duration> = Vec::new();
    let mut series_max = 0usize;
    while writers.try_wait().unwrap().is_none() {
        let openmetrics = scrapes % 2 == 1;
        let started = Instant::now();
        let headers: &[(&str, &str)] = if openmetrics {
            &[("Accept", ACCEPT_OPENMETRICS), ("Accept-Encoding", "gzip")]
        } else {
            &[]
        };
        let reply = exporter.get_or_explain("/metrics", headers);
        latencies.push(started.elapsed());
        assert_eq!(reply.status, 200, "scrape {scrapes}");
        let body = if openmetrics {
            assert_eq!(reply.header("content-encoding"), Some("gzip"));
            let body = gunzip(&reply.body);
            assert!(body.ends_with("# EOF\n"));
            body
        } else {
            reply.text()
        };
        // prometheus_client creates a file, then sizes it: pending while
        // its writer lives, never skipped.
        for (reason, n) in skipped_by_reason(&body) {
            assert_eq!(n, 0.0, "scrape {scrapes}: skipped for {reason}");
        }
        short_files +=
            sample_value(&body, "multiproc_exporter_scrape_files_pending").unwrap_or(0.0) as usize;
        let now = monotone_samples(merged_part(&body));
        for (series, previous) in &last {
            let current = now
                .get(series)
                .unwrap_or_else(|| panic!("scrape {scrapes}: {series} disappeared"));
            assert!(
                current >= previous,
                "scrape {scrapes}: {series} went from {previous} to {current}"
            );
        }
        series_max = series_max.max(now.len());
        last = now;
        scrapes += 1;
    }
    let status = writers.wait().unwrap();
    let mut summary = String::new();
    writers
        .stdout
        .take()
        .unwrap()
        .read_to_string(&mut summary)
        .unwrap();
    assert!(status.success(), "live_writers.py failed: {status}");
    let summary: serde_json::Value =
        serde_json::from_str(summary.lines().last().expect("a summary line")).unwrap();
    let scraping: Duration = latencies.iter().sum();
    latencies.sort();
    let percentile = |p: f64| latencies[((latencies.len() - 1) as f64 * p) as usize];
    eprintln!(
        "live writers: {summary}; {scrapes} scrapes, {series_max} monotone series, \
         {scraping:?} of them waiting for answers, latency p50 {:?} p99 {:?} max {:?}; \
         {short_files} files seen pending (0 bytes, being created)",
        percentile(0.5),
        percentile(0.99),
        latencies.last().unwrap()
    );
    assert!(scrapes >= 10, "only {scrapes} scrapes");
    assert!(summary["files_over_64k"].as_u64().unwrap() > 0, "{summary}");
    assert!(summary["marked_dead"].as_u64().unwrap() > 0, "{summary}");

    // The writers have stopped: exactly prometheus_client's output once
    // `mark_process_dead` has been called for every writer (the exporter
    // leaves out the live gauges of writers it saw exit).
    let files: Vec<_> = support::listing_order(&dir)
        .into_iter()
        .filter(|n| !n.starts_with("gauge_live"))
        .map(|n| dir.join(n))
        .collect();
    let expected = python_exposition(&python, files);
    assert_eq!(merged_part(&exporter.metrics()), expected.text);
    let body = exporter
        .get_with("/metrics", &[("Accept", ACCEPT_OPENMETRICS)])
        .text();
    assert_eq!(
        merged_part(&body),
        expected.openmetrics.strip_suffix("# EOF\n").unwrap()
    );
    exporter.assert_alive();
}
