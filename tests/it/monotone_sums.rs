//! Counters, buckets, `_count`s and `_sum`s never go down when writers exit
//! (issue 54, item 1), with real prometheus_client processes
//! (`tests/python/float_writer.py`) counting in floats.
//!
//! The generated test of the same rule, [`generated`], drives the collector
//! through every order of increments, exits, removals and collections on
//! real files and real, killed processes.

mod generated;

use std::collections::HashMap;
use std::io::{BufRead, BufReader, Write};
use std::path::Path;
use std::process::{Child, ChildStdin, Command, Stdio};
use std::time::Duration;

use crate::support::{python, repo_root, Exporter};
use crate::writers::monotone;

/// A running `float_writer.py`.
struct FloatWriter {
    child: Child,
    stdin: ChildStdin,
}

impl FloatWriter {
    fn start(python: &Path, dir: &Path, series: usize, seed: u64) -> FloatWriter {
        let mut child = Command::new(python)
            .arg(repo_root().join("tests/python/float_writer.py"))
            .args([series.to_string(), seed.to_string()])
            .env("PROMETHEUS_MULTIPROC_DIR", dir)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .expect("start float_writer.py");
        let stdin = child.stdin.take().unwrap();
        let mut line = String::new();
        BufReader::new(child.stdout.take().unwrap())
            .read_line(&mut line)
            .unwrap();
        assert_eq!(line.trim(), "ready");
        FloatWriter { child, stdin }
    }

    /// Exits without `mark_process_dead` (a recycled worker).
    fn exit(mut self) {
        writeln!(self.stdin, "exit").unwrap();
        self.child.wait().unwrap();
    }
}

impl Drop for FloatWriter {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The report: six prometheus_client writers, 300 labelled float
/// counters and histograms; four writers exit and nobody counts any more.
/// The default folded the dead writers' values into a cached base, adding
/// them before the live writers' instead of in file order, and 44 of 300
/// counters and 37 of 300 `_sum`s went down by one ulp (a counter reset to
/// Prometheus). Nothing may go down: no value dropped, no file was removed.
#[test]
fn float_counters_do_not_go_down_when_exited_writers_are_folded() {
    let Some(python) = python() else { return };
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let mut writers: Vec<FloatWriter> = (0..6)
        .map(|seed| FloatWriter::start(&python, dir, 300, seed))
        .collect();
    let exporter = Exporter::start(&["--dir", dir.to_str().unwrap()]);
    let mut last: HashMap<String, f64> = HashMap::new();
    let mut down: Vec<String> = Vec::new();
    let mut scrape = |when: &str| {
        let body = exporter.metrics();
        let series = monotone(&body);
        assert!(series.len() >= 300 * 7, "{when}: {} series", series.len());
        for (series, v) in series {
            if let Some(previous) = last.get(&series) {
                if v < *previous {
                    down.push(format!("{when}: {series} {previous:?} -> {v:?}"));
                }
            }
            last.insert(series, v);
        }
    };
    // The writers are seen holding their files: liveness from /proc.
    scrape("all live");
    scrape("all live again");
    for writer in writers.drain(..4) {
        writer.exit();
    }
    // Dead at one collection, then at two (folded), then steady.
    for i in 0..5 {
        std::thread::sleep(Duration::from_millis(200));
        scrape(&format!("scrape {i} after the exits"));
    }
    assert!(
        down.is_empty(),
        "{} series went down (of {}), e.g.\n{}",
        down.len(),
        last.len(),
        down[..down.len().min(10)].join("\n")
    );
}
