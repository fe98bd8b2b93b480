//! Folding by kind, and a round stopped after every step then recovered:
//! the directory's values are never lost nor counted twice.

use super::journal::JOURNAL;
use super::*;
use crate::format::writer::{file_bytes, Record};

fn record(key: &str, value: f64, timestamp: f64) -> Record {
    Record {
        key: key.to_owned(),
        value,
        timestamp,
        offset: 0,
    }
}

#[test]
fn records_fold_as_prometheus_client_merges_them() {
    let files = [
        vec![record("a", 1.0, 0.0), record("b", 5.0, 10.0)],
        vec![record("b", 2.0, 30.0), record("a", 4.0, 0.0)],
        vec![record("b", 9.0, 30.0), record("c", 7.0, 0.0)],
    ];
    let folded = |fold| {
        let mut folder = Folder::new(fold);
        for f in &files {
            folder.add(f);
        }
        folder.records
    };
    let r = |k: &str, v, t| (k.to_owned(), v, t);
    assert_eq!(
        folded(Fold::Add),
        [r("a", 5.0, 0.0), r("b", 16.0, 0.0), r("c", 7.0, 0.0)]
    );
    assert_eq!(
        folded(Fold::Min),
        [r("a", 1.0, 0.0), r("b", 2.0, 0.0), r("c", 7.0, 0.0)]
    );
    assert_eq!(
        folded(Fold::Max),
        [r("a", 4.0, 0.0), r("b", 9.0, 0.0), r("c", 7.0, 0.0)]
    );
    // The newest timestamp, the first of equal ones; no timestamp: the first.
    assert_eq!(
        folded(Fold::MostRecent),
        [r("a", 1.0, 0.0), r("b", 2.0, 30.0), r("c", 7.0, 0.0)]
    );
}

#[test]
fn only_kinds_whose_merge_ignores_the_pid_are_compacted() {
    for name in [
        "counter_1.db",
        "histogram_1.db",
        "summary_1.db",
        "gauge_sum_1.db",
        "gauge_min_1.db",
        "gauge_max_1.db",
        "gauge_mostrecent_1.db",
        "counter_archive.db",
    ] {
        assert!(kind_of(name).is_some(), "{name}");
    }
    for name in [
        "gauge_all_1.db",
        "gauge_liveall_1.db",
        "gauge_livesum_1.db",
        "gauge_livemostrecent_1.db",
        "counter_worker-1.db",
        "app.db",
    ] {
        assert!(kind_of(name).is_none(), "{name}");
    }
}

/// The sum of each key's values over every `*.db` file of `dir`.
fn totals(dir: &Path) -> std::collections::BTreeMap<String, f64> {
    let mut totals = std::collections::BTreeMap::new();
    for entry in std::fs::read_dir(dir).unwrap().flatten() {
        let name = entry.file_name().into_string().unwrap();
        if name.ends_with(".db") && !name.starts_with('.') {
            for r in read_records(&entry.path()).unwrap() {
                *totals.entry(r.key).or_insert(0.0) += r.value;
            }
        }
    }
    totals
}

fn candidates(dir: &Path) -> Vec<Candidate> {
    let mut out: Vec<Candidate> = std::fs::read_dir(dir)
        .unwrap()
        .flatten()
        .filter_map(|e| {
            let meta = e.metadata().ok()?;
            Candidate::of(&e.path(), (meta.dev(), meta.ino()))
        })
        .collect();
    out.sort_by(|a, b| a.path.cmp(&b.path));
    out
}

/// A round panicking (as a crash would stop it) after each of its steps,
/// then recovered: the same totals as before, and a later round works.
#[test]
fn a_round_stopped_after_any_step_recovers_without_loss_or_double_count() {
    let write = |dir: &Path, name: &str, value: f64| {
        std::fs::write(dir.join(name), file_bytes(&[("k", value, 0.0)])).unwrap();
    };
    let mut steps = 0;
    loop {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path();
        write(dir, "counter_archive.db", 100.0);
        for pid in 1..=3 {
            write(dir, &format!("counter_{pid}.db"), f64::from(pid));
            write(dir, &format!("gauge_sum_{pid}.db"), 10.0);
        }
        write(dir, "gauge_livesum_1.db", 1000.0);
        let before = totals(dir);
        let mut seen = 0;
        let stopped = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            compact(dir, &candidates(dir), &mut |_| {
                if seen == steps {
                    panic!("crash");
                }
                seen += 1;
            })
        }));
        let recovered = recover(dir).unwrap();
        assert_eq!(totals(dir), before, "stopped after step {steps}");
        assert!(!dir.join(JOURNAL).exists());
        if stopped.is_ok() {
            assert_eq!(recovered, Recovered::default());
            // Everything compactable is in two archives; the live gauge stays.
            let mut names: Vec<String> = std::fs::read_dir(dir)
                .unwrap()
                .flatten()
                .map(|e| e.file_name().into_string().unwrap())
                .collect();
            names.sort();
            assert_eq!(
                names,
                [
                    "counter_archive.db",
                    "gauge_livesum_1.db",
                    "gauge_sum_archive.db"
                ]
            );
            break;
        }
        steps += 1;
    }
    // 2 archives written, the journal, 2 renamed, 6 files removed, the end.
    assert_eq!(steps, 12);
}
