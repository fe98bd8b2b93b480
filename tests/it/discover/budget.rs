//! Pods of unequal size under one `--memory.budget` (issue 47): the node
//! agent gives each pod an equal share as a floor, not a cap, so a pod
//! bigger than its share is read whole while the budget has room.

use std::io::{BufRead as _, Write as _};

use super::harness::{privileged, Driver, Pod};
use super::serve::{pod_value, spec, Work};
use crate::support::{python, wait_for, Exporter};

/// Has every writer of `pod` write `series` series of `app_paths_total`.
fn write_series(pod: &mut Pod, series: usize) {
    for writer in &mut pod.writers {
        writeln!(writer.stdin, "series {series}").unwrap();
        writer.stdin.flush().unwrap();
        let mut line = String::new();
        writer._stdout.read_line(&mut line).unwrap();
        assert_eq!(line.trim(), "wrote");
    }
}

/// Issue 47: a pod of 4 writers x 5,000 series beside three small pods,
/// under `--memory.budget 8MiB`: its equal share (a quarter) was a cap, so
/// some of its files were skipped although the budget had room, and its
/// counters were served short.
#[test]
fn a_pod_bigger_than_its_share_is_read_whole_while_the_budget_has_room() {
    if !privileged() {
        return;
    }
    // Every pod on the machine shares the budget: no other test's beside it.
    let _alone = super::machine_wide();
    let Some(python) = python() else { return };
    let work = Work::new();
    let ns = "disc-budget";
    let Some(mut big) = work.pod(
        &python,
        spec(Driver::Cgroupfs, (ns, "big", "vllm"), &["vllm"], 4),
    ) else {
        return;
    };
    write_series(&mut big, 5000);
    let mut small = Vec::new();
    for name in ["small-a", "small-b", "small-c"] {
        let Some(pod) = work.pod(
            &python,
            spec(Driver::Systemd, (ns, name, "server"), &["server"], 1),
        ) else {
            return;
        };
        small.push(pod);
    }
    let exporter = Exporter::start(&work.args(&["--memory.budget", "8MiB"]));
    let whole = |text: &str| {
        text.contains(
            "multiproc_exporter_scrape_files_skipped{reason=\"over_memory_budget\"} 0.0\n",
        ) && pod_value(text, "app_paths_total", &big, &[("path", "/p/4999")]).as_deref()
            == Some("4.0")
            && small.iter().all(|pod| {
                pod_value(text, "app_requests_total", pod, &[]).as_deref() == Some("3.0")
            })
    };
    // The first scrape may find every pod new (their needs unknown: the big
    // one is read again once the small ones are known, unless the deadline
    // passes first on a slow machine); from then on, every scrape is whole.
    wait_for("a scrape with every pod whole", || {
        whole(&exporter.metrics()).then_some(())
    });
    for _ in 0..3 {
        let text = exporter.metrics();
        exporter.sync_logs();
        assert!(
            whole(&text),
            "{}\n{:#?}",
            text.lines()
                .filter(|l| l.contains("over_memory_budget") || l.contains("/p/4999"))
                .collect::<Vec<_>>()
                .join("\n"),
            exporter.logs_with("A part needs more")
        );
    }
}

/// Issue 47: the age of a late pod's last result was taken from when the
/// job before ended and compared only at the next collection: with a pod of
/// 100,000 series, `--web.scrape-timeout 8ms --discover.late-max-age 500ms`
/// and a scrape a second, every read finished in the background and the pod
/// was expired at every scrape. A pod whose reads finish is served, at worst
/// one collection late (generous bounds: any machine speed passes).
#[test]
fn a_slow_pod_whose_reads_finish_is_served_not_expired_at_every_scrape() {
    if !privileged() {
        return;
    }
    let _beside = super::beside_others();
    let Some(python) = python() else { return };
    let work = Work::new();
    let Some(mut slow) = work.pod(
        &python,
        spec(
            Driver::Cgroupfs,
            ("disc-slow", "slow", "vllm"),
            &["vllm"],
            1,
        ),
    ) else {
        return;
    };
    write_series(&mut slow, 100_000);
    let exporter = Exporter::start(&work.args(&[
        "--web.scrape-timeout",
        "8ms",
        "--discover.late-max-age",
        "500ms",
    ]));
    // A scrape a second: every read finishes between two scrapes (the
    // first, that decodes every key, may take a few), so the pod is served
    // by every scrape once its first read has finished, never expired.
    let expired = |text: &str| {
        text.lines()
            .find(|l| l.starts_with("multiproc_exporter_discovery_expired_collections_total "))
            .and_then(|l| l.rsplit(' ').next())
            .and_then(|v| v.parse::<f64>().ok())
            .unwrap_or(0.0)
    };
    let mut served = 0;
    for _ in 0..60 {
        let text = exporter.metrics();
        assert_eq!(
            expired(&text),
            0.0,
            "the slow pod was expired although its reads finish (served {served} times before)"
        );
        let value = pod_value(&text, "app_paths_total", &slow, &[("path", "/p/99999")]);
        if value.as_deref() == Some("1.0") {
            served += 1;
            if served == 5 {
                return;
            }
        }
        std::thread::sleep(std::time::Duration::from_secs(1));
    }
    panic!("the slow pod was served {served} times in 60 scrapes a second apart");
}
