//! Log volume under worker churn: gunicorn with `max_requests` creates and
//! removes a worker's files every few seconds, which is normal operation.
//! Per-file lines are `debug`; `info` gets at most one summary line per
//! directory per rescan interval, and only when files came or went.

use std::time::{Duration, Instant};

use multiproc_exporter::format::writer;

use crate::support::{eventually, Exporter};

/// Info lines whose message speaks of files (not the change of state of
/// the writers' visibility, which names their open files and is logged
/// once).
fn info_lines_about_files(exporter: &Exporter) -> Vec<serde_json::Value> {
    exporter
        .logs()
        .into_iter()
        .filter(|l| {
            l["level"] == "INFO"
                && l["message"].as_str().is_some_and(|m| {
                    m.to_ascii_lowercase().contains("file") && !m.starts_with("Writer processes")
                })
        })
        .collect()
}

/// Regression: 4 gunicorn workers with `max_requests` 50 under load wrote an
/// info line `Metric files changed.` for every directory event (1,150 in
/// 100 s). Here 25 files a second are created and removed for 20 s, with
/// scrapes in between.
#[test]
fn regression_worker_churn_logs_a_summary_per_interval_not_a_line_per_file() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let key = writer::encode_key("c", "c_total", &[("l", "a")], "help c");
    let bytes = writer::file_bytes(&[(&key, 1.0, 0.0)]);
    // One file present before start-up: found, not reported as a change.
    std::fs::write(dir.join("counter_1.db"), &bytes).unwrap();
    let exporter = Exporter::start(&["--dir", dir.to_str().unwrap()]);

    let started = Instant::now();
    let mut live = std::collections::VecDeque::new();
    let (mut created, mut removed) = (0usize, 0usize);
    let mut next_pid = 100u32;
    let mut last_scrape = Instant::now();
    while started.elapsed() < Duration::from_secs(20) {
        // 25 files a second by the clock, however slow the machine: a late
        // round catches up.
        let due = started.elapsed().as_millis() as usize / 40 + 1;
        while created < due {
            let path = dir.join(format!("counter_{next_pid}.db"));
            next_pid += 1;
            std::fs::write(&path, &bytes).unwrap();
            created += 1;
            live.push_back(path);
            // Each file lives about a second, as a short-lived worker's would.
            if live.len() > 25 {
                std::fs::remove_file(live.pop_front().unwrap()).unwrap();
                removed += 1;
            }
        }
        if last_scrape.elapsed() >= Duration::from_millis(200) {
            assert_eq!(exporter.get("/metrics").status, 200);
            last_scrape = Instant::now();
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    for path in live.drain(..) {
        std::fs::remove_file(path).unwrap();
        removed += 1;
    }
    assert!(created >= 500, "{created} files in 20 s");

    // The last summary (after the churn stopped) says the directory holds
    // the one file of start-up again.
    let summaries = eventually(
        "the summary after the churn",
        Duration::from_secs(30),
        || {
            let lines = exporter.logs_with("Metric files changed.");
            match lines.last() {
                Some(last) if last["files"] == 1 => Ok(lines),
                _ => Err(format!("{lines:#?}")),
            }
        },
    );
    exporter.sync_logs();
    let about_files = info_lines_about_files(&exporter);
    assert!(
        about_files.len() <= 4,
        "{} info lines about files: {about_files:#?}",
        about_files.len()
    );
    // The summaries add up to what happened (a file that came and went
    // between two rescans would be missed; each lived about a second).
    let sum = |field: &str| -> usize {
        summaries
            .iter()
            .map(|l| l[field].as_u64().unwrap() as usize)
            .sum()
    };
    assert!(
        sum("added") <= created && sum("added") * 10 >= created * 9,
        "added {} of {created}: {summaries:#?}",
        sum("added")
    );
    assert!(
        sum("removed") <= removed && sum("removed") * 10 >= removed * 9,
        "removed {} of {removed}: {summaries:#?}",
        sum("removed")
    );
    // Each file is still named at debug level.
    let added_lines = exporter.logs_with("Metric file added.").len();
    assert!(
        added_lines * 10 >= created * 9,
        "{added_lines} of {created}"
    );
    assert!(
        exporter
            .logs_with("Metric file added.")
            .iter()
            .all(|l| l["level"] == "DEBUG"),
        "per-file lines are debug"
    );
}
