//! Unit tests of [`super::PartReaders`]: parts merged apart and labelled,
//! deadlines, caps, late parts, workers and the shared budget.

use super::*;
use crate::source::SkipReason;

pub(super) fn counter(dir: &Path, pid: u32, value: f64) {
    let key = crate::format::writer::encode_key("c", "c_total", &[], "C.");
    let bytes = crate::format::writer::file_bytes(&[(key.as_str(), value, 0.0)]);
    std::fs::write(dir.join(format!("counter_{pid}.db")), bytes).unwrap();
}

pub(super) fn spec(key: &str, dir: &Path, shown: &str) -> PartSpec<String> {
    PartSpec {
        key: key.to_owned(),
        name: key.into(),
        labels: vec![("part".into(), key.into())],
        inputs: vec![Input::Directory(dir.to_path_buf())],
        shown_as: vec![(dir.to_path_buf(), PathBuf::from(shown))],
        pins: Vec::new(),
    }
}

#[test]
fn parts_are_merged_apart_labelled_and_forgotten_when_gone() {
    let tmp = tempfile::tempdir().unwrap();
    let (a, b) = (tmp.path().join("a"), tmp.path().join("b"));
    std::fs::create_dir_all(&a).unwrap();
    std::fs::create_dir_all(&b).unwrap();
    counter(&a, 1, 1.0);
    counter(&a, 2, 2.0);
    counter(&b, 1, 5.0);
    std::fs::write(b.join("counter_3.db"), b"bad").unwrap();
    let mut readers = PartReaders::new(LinkPolicy::NoLinks);
    let out = readers.collect(vec![spec("a", &a, "A:/m"), spec("b", &b, "B:/m")]);
    assert_eq!(out.appeared, ["a", "b"]);
    let text = String::from_utf8(crate::expose::encode::encode(
        &out.collection.families,
        crate::expose::encode::Format::Text,
        crate::expose::encode::Escaping::Underscores,
    ))
    .unwrap();
    assert_eq!(
        text,
        "# HELP c_total C.\n# TYPE c_total counter\nc_total{part=\"a\"} 3.0\nc_total{part=\"b\"} 5.0\n"
    );
    assert_eq!(out.collection.stats.files_merged, 3);
    assert_eq!(out.collection.stats.directories_present, 2);
    let problems: Vec<_> = out.collection.problems.iter().map(|p| &p.path).collect();
    assert_eq!(problems, [Path::new("B:/m/counter_3.db")]);

    // `b` gone, its directory missing for `a`: reported, forgotten.
    std::fs::remove_dir_all(&a).unwrap();
    let out = readers.collect(vec![spec("a", &a, "A:/m")]);
    assert_eq!(out.disappeared, ["b"]);
    assert_eq!(out.unreadable, [("a".to_owned(), a.clone())]);
    assert_eq!(
        out.collection.problems[0].reason,
        SkipReason::DirectoryMissing
    );
    assert_eq!(out.collection.problems[0].path, Path::new("A:/m"));
    assert!(out.collection.families.is_empty());
}

#[test]
fn a_part_not_done_by_the_deadline_is_served_from_its_last_collection_and_the_others_anew() {
    use std::time::Duration;
    let tmp = tempfile::tempdir().unwrap();
    let (a, b) = (tmp.path().join("a"), tmp.path().join("b"));
    std::fs::create_dir_all(&a).unwrap();
    std::fs::create_dir_all(&b).unwrap();
    counter(&a, 1, 1.0);
    counter(&b, 1, 5.0);
    let specs = || vec![spec("a", &a, "A:/m"), spec("b", &b, "B:/m")];
    let text = |out: &PartsCollection<String>| {
        String::from_utf8(crate::expose::encode::encode(
            &out.collection.families,
            crate::expose::encode::Format::Text,
            crate::expose::encode::Escaping::Underscores,
        ))
        .unwrap()
    };
    let late = |out: &PartsCollection<String>| -> Vec<Option<bool>> {
        out.reports
            .iter()
            .map(|r| r.late.map(|l| l == LateServed::Last))
            .collect()
    };
    let soon = || Instant::now() + Duration::from_secs(60);
    let mut readers = PartReaders::new(LinkPolicy::NoLinks);
    let out = readers.collect_by(specs(), soon());
    assert_eq!(late(&out), [None, None]);
    assert!(text(&out).contains("c_total{part=\"b\"} 5.0"));

    // `b`'s read is stuck: the collection ends at its deadline with `a`
    // anew and `b` as it was.
    counter(&a, 1, 2.0);
    counter(&b, 1, 6.0);
    let stuck = readers.readers[&"b".to_owned()].stall();
    let start = Instant::now();
    let out = readers.collect_by(specs(), start + Duration::from_millis(100));
    assert!(start.elapsed() < Duration::from_secs(30));
    assert_eq!(late(&out), [None, Some(true)]);
    assert_eq!(out.reports[1].series, 1);
    let served = text(&out);
    assert!(served.contains("c_total{part=\"a\"} 2.0"), "{served}");
    assert!(served.contains("c_total{part=\"b\"} 5.0"), "{served}");
    // Still stuck: no second job is started, `b` is served as it was.
    let out = readers.collect_by(specs(), Instant::now() + Duration::from_millis(50));
    assert_eq!(late(&out), [None, Some(true)]);

    // Unstuck, its job ends in the background; the next collection
    // serves it anew.
    drop(stuck);
    let out = readers.collect_by(specs(), soon());
    assert_eq!(late(&out), [None, None]);
    assert!(text(&out).contains("c_total{part=\"b\"} 6.0"));

    // A new part stuck before its first collection is left out.
    let c = tmp.path().join("c");
    std::fs::create_dir_all(&c).unwrap();
    counter(&c, 1, 7.0);
    let slot = Slot::new(&readers.settings, usize::MAX);
    let stuck = slot.stall();
    readers.readers.insert("c".to_owned(), slot);
    let mut with_c = specs();
    with_c.push(spec("c", &c, "C:/m"));
    let out = readers.collect_by(with_c, Instant::now() + Duration::from_millis(50));
    assert_eq!(late(&out), [None, None, Some(false)]);
    assert!(!text(&out).contains("part=\"c\""));
    drop(stuck);
}

#[test]
fn a_part_past_a_cap_is_left_out_alone() {
    let tmp = tempfile::tempdir().unwrap();
    let (a, b) = (tmp.path().join("a"), tmp.path().join("b"));
    std::fs::create_dir_all(&a).unwrap();
    std::fs::create_dir_all(&b).unwrap();
    counter(&a, 1, 1.0);
    counter(&b, 1, 5.0);
    counter(&b, 2, 5.0);
    let mut readers = PartReaders::new(LinkPolicy::NoLinks);
    readers.set_caps(PartCaps {
        max_files: Some(1),
        max_series: None,
    });
    let out = readers.collect(vec![spec("a", &a, "A:/m"), spec("b", &b, "B:/m")]);
    let capped: Vec<_> = out.reports.iter().map(|r| r.capped).collect();
    assert_eq!(capped, [None, Some(Capped::Files(2))]);
    assert_eq!(out.collection.families[0].samples.len(), 1);
    // Still over: not read again (its files unread: 3 counted from the
    // listing, none merged), until it holds no more than the cap.
    counter(&b, 3, 5.0);
    let out = readers.collect_by(
        vec![spec("a", &a, "A:/m"), spec("b", &b, "B:/m")],
        Instant::now() + std::time::Duration::from_secs(60),
    );
    assert_eq!(out.reports[1].capped, Some(Capped::Files(3)));
    assert_eq!(out.collection.stats.files_listed, 1);
    for pid in [2, 3] {
        std::fs::remove_file(b.join(format!("counter_{pid}.db"))).unwrap();
    }
    let out = readers.collect(vec![spec("a", &a, "A:/m"), spec("b", &b, "B:/m")]);
    assert_eq!(out.reports[1].capped, None);
    assert_eq!(out.reports[1].series, 1);
    readers.set_caps(PartCaps {
        max_files: None,
        max_series: Some(0),
    });
    let out = readers.collect(vec![spec("a", &a, "A:/m")]);
    assert_eq!(out.reports[0].capped, Some(Capped::Series(1)));
    assert!(out.collection.families.is_empty());
}

pub(super) fn text_of(out: &PartsCollection<String>) -> String {
    String::from_utf8(crate::expose::encode::encode(
        &out.collection.families,
        crate::expose::encode::Format::Text,
        crate::expose::encode::Escaping::Underscores,
    ))
    .unwrap()
}

/// Issue 40: a late pod was served from its last collection with no
/// age limit, so a read stuck in the kernel served frozen values for
/// ever (flat lines in Prometheus instead of a gap).
#[test]
fn a_stuck_pod_is_left_out_after_the_age_limit_and_the_others_stay_fresh() {
    use std::time::Duration;
    let tmp = tempfile::tempdir().unwrap();
    let (a, b) = (tmp.path().join("a"), tmp.path().join("b"));
    std::fs::create_dir_all(&a).unwrap();
    std::fs::create_dir_all(&b).unwrap();
    counter(&a, 1, 1.0);
    counter(&b, 1, 5.0);
    let specs = || vec![spec("a", &a, "A:/m"), spec("b", &b, "B:/m")];
    let mut readers = PartReaders::new(LinkPolicy::NoLinks);
    let max_age = Duration::from_secs(2);
    readers.set_max_late_age(max_age);
    let soon = || Instant::now() + Duration::from_secs(60);
    readers.collect_by(specs(), soon());
    let stuck = readers.readers[&"b".to_owned()].stall();
    counter(&a, 1, 2.0);
    let out = readers.collect_by(specs(), Instant::now() + Duration::from_millis(50));
    assert_eq!(out.reports[1].late, Some(LateServed::Last));
    assert!(text_of(&out).contains("c_total{part=\"b\"} 5.0"));
    // Past the age limit: left out, counted as expired; `a` is fresh.
    std::thread::sleep(max_age + Duration::from_millis(500));
    counter(&a, 1, 3.0);
    let out = readers.collect_by(specs(), Instant::now() + Duration::from_millis(50));
    assert_eq!(out.reports[0].late, None);
    assert_eq!(out.reports[1].late, Some(LateServed::Expired));
    let served = text_of(&out);
    assert!(served.contains("c_total{part=\"a\"} 3.0"), "{served}");
    assert!(!served.contains("part=\"b\""), "{served}");
    // Unstuck: served anew.
    drop(stuck);
    let out = readers.collect_by(specs(), soon());
    assert_eq!(out.reports[1].late, None);
    assert!(text_of(&out).contains("c_total{part=\"b\"} 5.0"));
}

/// Issue 40: every collection started one OS thread per pod.
#[test]
fn each_pod_has_one_long_lived_worker_not_a_thread_per_collection() {
    let tmp = tempfile::tempdir().unwrap();
    let (a, b) = (tmp.path().join("a"), tmp.path().join("b"));
    std::fs::create_dir_all(&a).unwrap();
    std::fs::create_dir_all(&b).unwrap();
    counter(&a, 1, 1.0);
    counter(&b, 1, 5.0);
    let mut readers = PartReaders::new(LinkPolicy::NoLinks);
    for i in 0..10 {
        counter(&a, 1, f64::from(i));
        let out = readers.collect_by(
            vec![spec("a", &a, "A:/m"), spec("b", &b, "B:/m")],
            Instant::now() + std::time::Duration::from_secs(60),
        );
        assert!(text_of(&out).contains(&format!("c_total{{part=\"a\"}} {}.0", i)));
    }
    let workers: Vec<usize> = readers
        .readers
        .values()
        .map(Slot::workers_started)
        .collect();
    assert_eq!(workers, [1, 1]);
}

/// Issue 40: a hostile pod's first read mapped all its files against
/// the shared budget before its caps applied, leaving the others none.
#[test]
fn a_hostile_pod_cannot_take_the_others_budget_before_its_caps_apply() {
    let tmp = tempfile::tempdir().unwrap();
    let (hostile, quiet) = (tmp.path().join("hostile"), tmp.path().join("quiet"));
    std::fs::create_dir_all(&hostile).unwrap();
    std::fs::create_dir_all(&quiet).unwrap();
    for pid in 0..40 {
        counter(&hostile, pid, 1.0);
    }
    counter(&quiet, 1, 5.0);
    // What one file costs, measured.
    let one = {
        let budget = Arc::new(MemoryBudget::new(usize::MAX));
        let mut readers = PartReaders::new(LinkPolicy::NoLinks);
        readers.set_memory_budget(Some(budget.clone()));
        readers.collect(vec![spec("quiet", &quiet, "Q:/m")]);
        budget.held()
    };
    assert!(one > 0);
    // Room for the quiet pod's file and 20 of the hostile's 40: read
    // first, the hostile pod used to take it all.
    let budget = Arc::new(MemoryBudget::new(one * 21));
    let mut readers = PartReaders::new(LinkPolicy::NoLinks);
    readers.set_memory_budget(Some(budget.clone()));
    let out = readers.collect(vec![
        spec("hostile", &hostile, "H:/m"),
        spec("quiet", &quiet, "Q:/m"),
    ]);
    let served = text_of(&out);
    assert!(served.contains("c_total{part=\"quiet\"} 5.0"), "{served}");
    assert!(budget.held() <= budget.limit());

    // Past the cap of files, a pod is listed, never read, not even once.
    let budget = Arc::new(MemoryBudget::new(usize::MAX));
    let mut readers = PartReaders::new(LinkPolicy::NoLinks);
    readers.set_memory_budget(Some(budget.clone()));
    readers.set_caps(PartCaps {
        max_files: Some(10),
        max_series: None,
    });
    let out = readers.collect_by(
        vec![
            spec("hostile", &hostile, "H:/m"),
            spec("quiet", &quiet, "Q:/m"),
        ],
        Instant::now() + std::time::Duration::from_secs(60),
    );
    assert_eq!(out.reports[0].capped, Some(Capped::Files(40)));
    assert_eq!(readers.readers[&"hostile".to_owned()].share_held(), Some(0));
    assert_eq!(budget.held(), one);
}
