//! Compaction of dead writers' files (`--dir.compact-dead-writers`, issue 13):
//! real prometheus_client writers are killed, the exporter folds their files
//! into archives, and prometheus_client itself reads the compacted directory
//! to the same families and values; a compaction killed (SIGKILL) after any
//! of its steps loses nothing and counts nothing twice once recovered.

use std::os::unix::fs::MetadataExt;
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use multiproc_exporter::pipeline::compaction::{self, Candidate, Step};

use crate::support::{
    copy_dir, eventually, listing_order, merged_part, python, python_exposition, sample_value,
    Exporter,
};
use crate::writers::Writer;

/// A text exposition as sorted family blocks, each with its samples sorted:
/// what "the same families and values" means (their order follows the files').
fn families_and_values(text: &str) -> Vec<String> {
    crate::support::family_blocks(text)
        .into_iter()
        .map(|block| {
            let mut lines: Vec<&str> = block.lines().collect();
            let (head, samples) = lines.split_at_mut(2.min(block.lines().count()));
            samples.sort_unstable();
            head.iter()
                .chain(samples.iter())
                .map(|l| format!("{l}\n"))
                .collect()
        })
        .collect()
}

/// What prometheus_client serves for every `*.db` file of `dir`, in listing order.
fn prometheus_client_reads(python: &Path, dir: &Path) -> Vec<String> {
    let files: Vec<PathBuf> = listing_order(dir)
        .into_iter()
        .filter(|n| n.ends_with(".db") && !n.starts_with('.'))
        .map(|n| dir.join(n))
        .collect();
    families_and_values(&python_exposition(python, files).text)
}

/// A directory with one live and three killed prometheus_client writers.
fn churned(python: &Path, dir: &Path) -> Writer {
    let live = Writer::start_all_kinds(python, dir);
    for _ in 0..3 {
        Writer::start_all_kinds(python, dir).kill();
    }
    live
}

fn names(dir: &Path) -> Vec<String> {
    let mut names = listing_order(dir);
    names.sort();
    names
}

#[test]
fn the_exporter_folds_dead_writers_files_into_archives_prometheus_client_reads_alike() {
    let Some(python) = python() else { return };
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let live = churned(&python, dir);
    let before = prometheus_client_reads(&python, dir);
    let files_before = names(dir).len();
    let exporter = Exporter::start(&[
        "--dir",
        dir.to_str().unwrap(),
        "--writers.liveness=proc",
        "--dir.compact-dead-writers",
    ]);
    let served_before = families_and_values(merged_part(&exporter.metrics()));
    // Dead at two collections, then compacted.
    let body = eventually("a compaction", Duration::from_secs(20), || {
        let body = exporter.metrics();
        match sample_value(&body, "multiproc_exporter_compacted_files_total") {
            Some(n) if n > 0.0 => Ok(body),
            other => Err(format!("{other:?}")),
        }
    });
    // 3 writers x (counter, histogram, summary, sum, min, max, mostrecent).
    assert_eq!(
        sample_value(&body, "multiproc_exporter_compacted_files_total"),
        Some(21.0),
        "{body}"
    );
    assert_eq!(
        sample_value(&body, "multiproc_exporter_compactions_total{result=\"ok\"}"),
        Some(1.0)
    );
    let after = names(dir);
    assert_eq!(after.len(), files_before - 21 + 7, "{after:?}");
    for kind in [
        "counter",
        "histogram",
        "summary",
        "gauge_sum",
        "gauge_min",
        "gauge_max",
        "gauge_mostrecent",
    ] {
        assert!(after.contains(&format!("{kind}_archive.db")), "{after:?}");
        // The live writer's files are untouched.
        assert!(
            after.contains(&format!("{kind}_{}.db", live.pid())),
            "{after:?}"
        );
    }
    // `all` and `live*` gauges of dead writers are never compacted.
    assert_eq!(
        after.iter().filter(|n| n.starts_with("gauge_all_")).count(),
        4
    );
    assert_eq!(
        after
            .iter()
            .filter(|n| n.starts_with("gauge_livesum_"))
            .count(),
        4
    );
    // prometheus_client reads the compacted directory to the same families
    // and values, and so does the exporter.
    assert_eq!(prometheus_client_reads(&python, dir), before);
    assert_eq!(
        families_and_values(merged_part(&exporter.metrics())),
        served_before
    );
    exporter.sync_logs();
    assert!(exporter
        .find_log("Compacted dead writers' files into archive files.")
        .is_some());
    live.kill();
}

/// The compaction run by a child of this test binary (see
/// `a_compaction_killed_after_any_step_loses_nothing_and_counts_nothing_twice`):
/// compacts `MPE_COMPACT_DIR` and kills itself after step `MPE_COMPACT_KILL_AT`.
#[test]
#[ignore = "run as a child process by the crash test"]
fn compaction_child() {
    let (Ok(dir), Ok(kill_at)) = (
        std::env::var("MPE_COMPACT_DIR"),
        std::env::var("MPE_COMPACT_KILL_AT"),
    ) else {
        return;
    };
    let dir = PathBuf::from(dir);
    let kill_at: usize = kill_at.parse().unwrap();
    let candidates: Vec<Candidate> = listing_order(&dir)
        .into_iter()
        .filter_map(|name| {
            let path = dir.join(name);
            let meta = std::fs::metadata(&path).ok()?;
            Candidate::of(&path, (meta.dev(), meta.ino()))
        })
        .collect();
    let mut steps = 0;
    compaction::compact(&dir, &candidates, &mut |_: Step| {
        if steps == kill_at {
            // As a crash: no unwinding, no cleanup.
            let _ = Command::new("kill")
                .args(["-KILL", &std::process::id().to_string()])
                .status();
            std::thread::sleep(Duration::from_secs(60));
        }
        steps += 1;
    })
    .unwrap();
}

#[test]
fn a_compaction_killed_after_any_step_loses_nothing_and_counts_nothing_twice() {
    let Some(python) = python() else { return };
    let tmp = tempfile::tempdir().unwrap();
    let template = tmp.path().join("template");
    std::fs::create_dir(&template).unwrap();
    // Only dead writers: every compactable file is compacted.
    for _ in 0..3 {
        Writer::start_all_kinds(&python, &template).kill();
    }
    let expected = prometheus_client_reads(&python, &template);
    let mut kill_at = 0;
    loop {
        let dir = tmp.path().join(format!("crash-{kill_at}"));
        copy_dir(&template, &dir);
        let status = Command::new(std::env::current_exe().unwrap())
            .args([
                "compaction::compaction_child",
                "--exact",
                "--ignored",
                "--nocapture",
            ])
            .env("MPE_COMPACT_DIR", &dir)
            .env("MPE_COMPACT_KILL_AT", kill_at.to_string())
            .output()
            .unwrap()
            .status;
        let killed = status.signal() == Some(libc::SIGKILL);
        assert!(killed || status.success(), "{status:?}");
        // The exporter recovers before its first read: it serves the dead
        // writers' values once each ...
        let exporter = Exporter::start(&[
            "--dir",
            dir.to_str().unwrap(),
            "--writers.liveness=proc",
            "--dir.compact-dead-writers",
            "--writers.keep-dead-live-gauges",
        ]);
        let served = families_and_values(merged_part(&exporter.metrics()));
        // ... and prometheus_client reads the recovered directory alike.
        assert_eq!(
            prometheus_client_reads(&python, &dir),
            expected,
            "killed after step {kill_at}"
        );
        assert_eq!(served, expected, "killed after step {kill_at}");
        assert!(!dir.join(compaction::journal::JOURNAL).exists());
        drop(exporter);
        if !killed {
            break;
        }
        kill_at += 1;
    }
    // 7 archives written, the journal, 7 renamed, 21 files removed, the end.
    assert_eq!(kill_at, 7 + 1 + 7 + 21 + 1);
}
