//! The incremental reader: keys are decoded once, an unchanged directory costs
//! no JSON parsing and no re-planning, appended records are picked up, and
//! replaced, truncated and deleted files are noticed.

use multiproc_exporter::expose::encode::{encode, Escaping, Format};
use multiproc_exporter::format::writer::{GaugeMode, ProcessWriter};
use multiproc_exporter::pipeline::Collector;
use multiproc_exporter::source::Input;

fn text(
    reader: &mut Collector,
    dir: &std::path::Path,
) -> (String, multiproc_exporter::pipeline::CollectStats) {
    let collection = reader.collect(&[Input::Directory(dir.to_path_buf())]);
    let body = encode(&collection.families, Format::Text, Escaping::Underscores);
    (String::from_utf8(body).expect("utf-8"), collection.stats)
}

#[test]
fn unchanged_directory_decodes_nothing_and_reuses_the_plan() {
    let dir = tempfile::tempdir().expect("tempdir");
    for pid in 1..=3 {
        let mut writer = ProcessWriter::new(dir.path(), pid);
        let counter = writer
            .counter("requests", "Requests.", &[("code", "200")])
            .expect("counter");
        counter.inc(&mut writer, pid as f64).expect("inc");
        let gauge = writer
            .gauge("running", "Running.", &[], GaugeMode::MostRecent)
            .expect("gauge");
        gauge.set(&mut writer, pid as f64).expect("set");
    }
    let mut reader = Collector::new();
    let (first, stats) = text(&mut reader, dir.path());
    assert!(
        first.contains("requests_total{code=\"200\"} 6.0\n"),
        "{first}"
    );
    assert_eq!(
        stats.keys_decoded, 2,
        "one decode per distinct key, not per file"
    );
    assert!(stats.replanned);

    let (second, stats) = text(&mut reader, dir.path());
    assert_eq!(second, first);
    assert_eq!(stats.keys_decoded, 0);
    assert!(
        !stats.replanned,
        "an unchanged directory reuses the merge plan"
    );
    assert_eq!(stats.files_merged, 6);
    assert_eq!(stats.records, 6);
}

#[test]
fn values_written_in_place_are_read_on_every_collection() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut writer = ProcessWriter::new(dir.path(), 7);
    let counter = writer.counter("c", "h", &[]).expect("counter");
    let mut reader = Collector::new();
    for expected in 1..=5 {
        counter.inc(&mut writer, 1.0).expect("inc");
        let (body, stats) = text(&mut reader, dir.path());
        assert!(body.contains(&format!("c_total {expected}.0\n")), "{body}");
        if expected > 1 {
            assert!(!stats.replanned && stats.keys_decoded == 0);
        }
    }
}

#[test]
fn appended_records_are_decoded_incrementally() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut writer = ProcessWriter::new(dir.path(), 1);
    writer
        .counter("c", "h", &[("l", "a")])
        .expect("counter")
        .inc(&mut writer, 1.0)
        .expect("inc");
    let mut reader = Collector::new();
    let (_, stats) = text(&mut reader, dir.path());
    assert_eq!(stats.keys_decoded, 1);
    writer
        .counter("c", "h", &[("l", "b")])
        .expect("counter")
        .inc(&mut writer, 2.0)
        .expect("inc");
    let (body, stats) = text(&mut reader, dir.path());
    assert!(
        body.contains("c_total{l=\"a\"} 1.0\nc_total{l=\"b\"} 2.0\n"),
        "{body}"
    );
    assert_eq!(stats.keys_decoded, 1, "only the appended record is decoded");
    assert!(stats.replanned);
}

#[test]
fn growth_past_64_kib_is_followed() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut writer = ProcessWriter::new(dir.path(), 1);
    let mut reader = Collector::new();
    let mut total = 0.0;
    for i in 0..1500 {
        let value = i.to_string();
        writer
            .counter("c", "h", &[("i", &value)])
            .expect("counter")
            .inc(&mut writer, 1.0)
            .expect("inc");
        total += 1.0;
        if i % 500 == 0 {
            let (body, _) = text(&mut reader, dir.path());
            assert_eq!(body.matches("c_total{").count() as f64, total);
        }
    }
    let (body, _) = text(&mut reader, dir.path());
    assert_eq!(body.matches("c_total{").count(), 1500);
    assert!(
        std::fs::metadata(dir.path().join("counter_1.db"))
            .expect("stat")
            .len()
            > 65536
    );
}

#[test]
fn replaced_truncated_and_deleted_files_are_noticed() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("counter_1.db");
    let original = multiproc_exporter::format::writer::file_bytes(&[
        (r#"["c", "c_total", {"l": "a"}, "h"]"#, 1.0, 0.0),
        (r#"["c", "c_total", {"l": "b"}, "h"]"#, 2.0, 0.0),
    ]);
    std::fs::write(&path, &original).expect("write");
    let mut reader = Collector::new();
    let (body, _) = text(&mut reader, dir.path());
    assert!(body.contains("c_total{l=\"b\"} 2.0"));

    // Replaced by a different file (new inode) with fewer records.
    let replacement = multiproc_exporter::format::writer::file_bytes(&[(
        r#"["d", "d_total", {}, "h"]"#,
        5.0,
        0.0,
    )]);
    let tmp = dir.path().join("counter_1.tmp");
    std::fs::write(&tmp, &replacement).expect("write");
    std::fs::rename(&tmp, &path).expect("rename");
    let (body, _) = text(&mut reader, dir.path());
    assert_eq!(
        body,
        "# HELP d_total h\n# TYPE d_total counter\nd_total 5.0\n"
    );

    // Truncated in place to less than its header says: left out, then back
    // when fixed. The map still covers the old length and the bytes that
    // remain, so the reader is told to check the file (the server's watcher
    // does this on the inotify event a truncation produces).
    std::fs::write(&path, &replacement[..40]).expect("truncate");
    reader.recheck(&path);
    let collection = reader.collect(&[Input::Directory(dir.path().to_path_buf())]);
    assert!(collection.families.is_empty());
    assert_eq!(collection.problems.len(), 1);
    std::fs::write(&path, &original).expect("restore");
    let (body, _) = text(&mut reader, dir.path());
    assert!(
        body.contains("c_total{l=\"a\"} 1.0\nc_total{l=\"b\"} 2.0\n"),
        "{body}"
    );

    // Deleted.
    std::fs::remove_file(&path).expect("delete");
    let (body, stats) = text(&mut reader, dir.path());
    assert_eq!(body, "");
    assert_eq!(stats.files_listed, 0);
}

#[test]
fn files_stay_mapped_between_collections_without_descriptors_and_unmap_with_their_files() {
    let dir = tempfile::tempdir().expect("tempdir");
    let in_dir = |line: &str| line.contains(dir.path().to_str().expect("utf-8 temp dir"));
    // Descriptors and maps of this process that point into the test's directory.
    let open_here = || {
        std::fs::read_dir("/proc/self/fd")
            .expect("/proc")
            .filter_map(|e| std::fs::read_link(e.ok()?.path()).ok())
            .filter(|target| target.starts_with(dir.path()))
            .count()
    };
    let mapped_here = || {
        std::fs::read_to_string("/proc/self/maps")
            .expect("/proc")
            .lines()
            .filter(|l| in_dir(l))
            .count()
    };
    for pid in 0..20 {
        let mut writer = ProcessWriter::new(dir.path(), pid);
        writer
            .counter("c", "h", &[])
            .expect("counter")
            .inc(&mut writer, 1.0)
            .expect("inc");
    }
    let mut reader = Collector::new();
    let before = mapped_here();
    let (body, _) = text(&mut reader, dir.path());
    assert!(body.contains("c_total 20.0"));
    assert_eq!(open_here(), 0, "no descriptor stays open");
    assert_eq!(
        mapped_here() - before,
        20,
        "the metric files stay mapped for the next collection"
    );
    let (again, stats) = text(&mut reader, dir.path());
    assert_eq!(again, body);
    assert_eq!(stats.keys_decoded, 0);
    assert_eq!(mapped_here() - before, 20);
    for entry in std::fs::read_dir(dir.path()).expect("list") {
        std::fs::remove_file(entry.expect("entry").path()).expect("delete");
    }
    let (empty, _) = text(&mut reader, dir.path());
    assert_eq!(empty, "");
    assert_eq!(mapped_here(), before, "maps of deleted files are dropped");
}

#[test]
fn values_written_through_the_map_after_a_collection_are_read_by_the_next() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut writer = ProcessWriter::new(dir.path(), 7);
    let counter = writer.counter("c", "h", &[]).expect("counter");
    counter.inc(&mut writer, 1.0).expect("inc");
    let mut reader = Collector::new();
    let (body, _) = text(&mut reader, dir.path());
    assert!(body.contains("c_total 1.0\n"), "{body}");
    for i in 2..50 {
        counter.inc(&mut writer, 1.0).expect("inc");
        let (body, stats) = text(&mut reader, dir.path());
        assert!(body.contains(&format!("c_total {i}.0\n")), "{body}");
        assert_eq!(stats.keys_decoded, 0);
    }
}

#[test]
fn file_shrunk_under_its_map_is_reported_not_fatal() {
    // Regression test for the SIGBUS a load from a mapped page past the end
    // of a shrunk file raises: the reader must survive and report the file.
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("counter_1.db");
    let records: Vec<(String, f64, f64)> = (0..400)
        .map(|i| {
            (
                format!(r#"["c", "c_total", {{"i": "{i:0>200}"}}, "h"]"#),
                1.0,
                0.0,
            )
        })
        .collect();
    let borrowed: Vec<(&str, f64, f64)> = records
        .iter()
        .map(|(k, v, t)| (k.as_str(), *v, *t))
        .collect();
    let bytes = multiproc_exporter::format::writer::file_bytes(&borrowed);
    assert!(bytes.len() > 3 * 4096);
    std::fs::write(&path, &bytes).expect("write");
    let mut reader = Collector::new();
    let (body, _) = text(&mut reader, dir.path());
    assert_eq!(body.matches("c_total{").count(), 400);
    // Shrink in place to one page: the values on the later pages are gone.
    std::fs::OpenOptions::new()
        .write(true)
        .open(&path)
        .expect("open")
        .set_len(4096)
        .expect("truncate");
    let collection = reader.collect(&[Input::Directory(dir.path().to_path_buf())]);
    assert!(collection.families.is_empty());
    assert_eq!(collection.problems.len(), 1, "{:?}", collection.problems);
    assert_eq!(collection.problems[0].reason.label(), "bad_header");
    // Restored: served again.
    std::fs::write(&path, &bytes).expect("restore");
    let (body, _) = text(&mut reader, dir.path());
    assert_eq!(body.matches("c_total{").count(), 400);
}

/// Writes `files` counter files of `records` records each (value 1.0).
fn counter_files(dir: &std::path::Path, files: usize, records: usize) {
    let keys: Vec<String> = (0..records)
        .map(|i| format!(r#"["c", "c_total", {{"i": "{i}"}}, "h"]"#))
        .collect();
    let image: Vec<(&str, f64, f64)> = keys.iter().map(|k| (k.as_str(), 1.0, 0.0)).collect();
    let bytes = multiproc_exporter::format::writer::file_bytes(&image);
    for pid in 0..files {
        std::fs::write(dir.join(format!("counter_{pid}.db")), &bytes).expect("write");
    }
}

#[test]
fn large_directories_load_values_on_two_threads_and_survive_a_shrunk_file() {
    // 200 files x 400 records = 80,000 values: above the two-thread threshold.
    let dir = tempfile::tempdir().expect("tempdir");
    counter_files(dir.path(), 200, 400);
    let mut reader = Collector::new();
    let (first, _) = text(&mut reader, dir.path());
    assert!(first.contains("c_total{i=\"399\"} 200.0\n"), "{first}");
    let (steady, stats) = text(&mut reader, dir.path());
    assert_eq!(steady, first);
    assert_eq!(stats.keys_decoded, 0);
    // Shrink files on both halves of the split (listing order is readdir's):
    // each is reported, everything else is exact.
    for pid in [3, 101, 199] {
        std::fs::OpenOptions::new()
            .write(true)
            .open(dir.path().join(format!("counter_{pid}.db")))
            .expect("open")
            .set_len(0)
            .expect("truncate");
    }
    let collection = reader.collect(&[Input::Directory(dir.path().to_path_buf())]);
    assert_eq!(collection.problems.len(), 3, "{:?}", collection.problems);
    let body = String::from_utf8(encode(
        &collection.families,
        Format::Text,
        Escaping::Underscores,
    ))
    .expect("utf-8");
    assert!(body.contains("c_total{i=\"0\"} 197.0\n"), "{body}");
    assert!(body.contains("c_total{i=\"399\"} 197.0\n"), "{body}");
}

#[test]
fn files_added_to_a_long_unchanged_directory_are_listed() {
    // Regression guard for the listing cache: a directory whose last change
    // is old is not listed again while its modification time stays the same.
    let dir = tempfile::tempdir().expect("tempdir");
    counter_files(dir.path(), 2, 1);
    let an_hour_ago = std::time::SystemTime::now() - std::time::Duration::from_secs(3600);
    let set_old = || {
        std::fs::File::open(dir.path())
            .expect("open dir")
            .set_modified(an_hour_ago)
            .expect("set mtime");
    };
    set_old();
    let mut reader = Collector::new();
    let (body, _) = text(&mut reader, dir.path());
    assert!(body.contains("c_total{i=\"0\"} 2.0\n"), "{body}");
    let (body, _) = text(&mut reader, dir.path());
    assert!(body.contains("c_total{i=\"0\"} 2.0\n"), "{body}");
    // Added.
    counter_files(dir.path(), 3, 1);
    let (body, _) = text(&mut reader, dir.path());
    assert!(body.contains("c_total{i=\"0\"} 3.0\n"), "{body}");
    // Replaced by a rename (a new inode) after the directory settled again.
    set_old();
    let _ = text(&mut reader, dir.path());
    let replacement = multiproc_exporter::format::writer::file_bytes(&[(
        r#"["c", "c_total", {"i": "0"}, "h"]"#,
        10.0,
        0.0,
    )]);
    let tmp = dir.path().join("tmp");
    std::fs::write(&tmp, &replacement).expect("write");
    std::fs::rename(&tmp, dir.path().join("counter_0.db")).expect("rename");
    let (body, _) = text(&mut reader, dir.path());
    assert!(body.contains("c_total{i=\"0\"} 12.0\n"), "{body}");
    // Removed.
    set_old();
    let _ = text(&mut reader, dir.path());
    std::fs::remove_file(dir.path().join("counter_2.db")).expect("remove");
    let (body, _) = text(&mut reader, dir.path());
    assert!(body.contains("c_total{i=\"0\"} 11.0\n"), "{body}");
}

/// Collects `dir` as `serve` does, holding the last merge's families: the
/// text served (the held families when the merge was skipped) and whether
/// it was skipped.
fn text_since(
    reader: &mut Collector,
    dir: &std::path::Path,
    held: &mut Option<(u64, Vec<multiproc_exporter::model::MetricFamily>)>,
) -> (String, bool) {
    let collection = reader.collect_since(
        &[Input::Directory(dir.to_path_buf())],
        held.as_ref().map(|h| h.0),
    );
    let unchanged = collection.unchanged;
    if unchanged {
        assert!(collection.families.is_empty());
        assert_eq!(held.as_ref().map(|h| h.0), Some(collection.merged_id));
    } else {
        *held = Some((collection.merged_id, collection.families));
    }
    let families = &held.as_ref().expect("held").1;
    let body = encode(families, Format::Text, Escaping::Underscores);
    (String::from_utf8(body).expect("utf-8"), unchanged)
}

/// What a fresh collector makes of `dir` (nothing cached, nothing skipped).
fn fresh_text(dir: &std::path::Path) -> String {
    text(&mut Collector::new(), dir).0
}

#[test]
fn an_unchanged_merge_is_skipped_only_for_the_caller_that_holds_it() {
    let dir = tempfile::tempdir().expect("tempdir");
    for pid in 1..=3 {
        let mut writer = ProcessWriter::new(dir.path(), pid);
        let counter = writer
            .counter("requests", "Requests.", &[])
            .expect("counter");
        counter.inc(&mut writer, pid as f64).expect("inc");
    }
    // A file the merge leaves out: reported again when the merge is skipped.
    std::fs::write(dir.path().join("counter_9.db"), [1u8; 3]).expect("write");
    let inputs = [Input::Directory(dir.path().to_path_buf())];
    let mut reader = Collector::new();
    let first = reader.collect_since(&inputs, None);
    assert!(!first.unchanged);
    assert_eq!(first.problems.len(), 1);

    let again = reader.collect_since(&inputs, Some(first.merged_id));
    assert!(again.unchanged, "nothing changed: the merge is skipped");
    assert!(again.families.is_empty());
    assert_eq!(again.merged_id, first.merged_id);
    assert_eq!(again.problems, first.problems);
    assert_eq!(
        (
            again.stats.files_merged,
            again.stats.records,
            again.stats.files_listed
        ),
        (
            first.stats.files_merged,
            first.stats.records,
            first.stats.files_listed
        )
    );

    // A caller holding another merge's families, or none, gets families.
    for held in [Some(first.merged_id + 1), None] {
        let other = reader.collect_since(&inputs, held);
        assert!(!other.unchanged, "{held:?}");
        assert_eq!(other.families, first.families);
        assert_ne!(other.merged_id, first.merged_id);
    }
    // So does one holding another collector's merge of the same files (a
    // collector made anew after a panic): merge ids are never reused.
    let mut fresh = Collector::new();
    let first_of_fresh = fresh.collect_since(&inputs, None);
    let latest = reader.collect_since(&inputs, None).merged_id;
    for held in [first.merged_id, latest] {
        let other = fresh.collect_since(&inputs, Some(held));
        assert!(!other.unchanged, "{held}");
        assert_eq!(other.families, first_of_fresh.families);
    }
}

/// After a change: the next collection merges anew and serves what a fresh
/// collector serves; the one after it skips the merge and serves the same.
fn assert_merged_anew(
    what: &str,
    reader: &mut Collector,
    dir: &std::path::Path,
    held: &mut Option<(u64, Vec<multiproc_exporter::model::MetricFamily>)>,
    last: &mut String,
) {
    let (body, unchanged) = text_since(reader, dir, held);
    assert!(!unchanged, "{what}: merged anew");
    assert_ne!(body, *last, "{what}: the change is served");
    assert_eq!(body, fresh_text(dir), "{what}");
    let (again, unchanged) = text_since(reader, dir, held);
    assert!(unchanged, "{what}: then nothing changed");
    assert_eq!(again, body);
    *last = body;
}

#[test]
fn regression_every_change_after_a_skipped_merge_is_merged_anew() {
    let dir = tempfile::tempdir().expect("tempdir");
    let dir = dir.path();
    let mut writer = ProcessWriter::new(dir, 1);
    let counter = writer
        .counter("requests", "Requests.", &[])
        .expect("counter");
    counter.inc(&mut writer, 1.0).expect("inc");
    let gauge = writer
        .gauge("temperature", "T.", &[], GaugeMode::All)
        .expect("gauge");
    gauge.set(&mut writer, 0.0).expect("set");
    let mut other = ProcessWriter::new(dir, 2);
    let other_counter = other
        .counter("requests", "Requests.", &[])
        .expect("counter");
    other_counter.inc(&mut other, 5.0).expect("inc");

    let mut reader = Collector::new();
    let mut held = None;
    let (mut last, _) = text_since(&mut reader, dir, &mut held);
    let (r, h, l) = (&mut reader, &mut held, &mut last);

    counter.inc(&mut writer, 1.0).expect("inc");
    assert_merged_anew("a value written through the map", r, dir, h, l);
    gauge.set(&mut writer, -0.0).expect("set");
    assert_merged_anew("the sign bit alone (0.0 to -0.0)", r, dir, h, l);
    other_counter.inc(&mut other, 1.0).expect("inc");
    assert_merged_anew("another writer's value", r, dir, h, l);

    let labelled = writer
        .counter("requests", "Requests.", &[("code", "500")])
        .expect("counter");
    labelled.inc(&mut writer, 1.0).expect("inc");
    assert_merged_anew("a series appended", r, dir, h, l);

    let mut third = ProcessWriter::new(dir, 3);
    let third_counter = third
        .counter("requests", "Requests.", &[])
        .expect("counter");
    third_counter.inc(&mut third, 7.0).expect("inc");
    assert_merged_anew("a new writer's file", r, dir, h, l);

    let elsewhere = tempfile::tempdir().expect("tempdir");
    let mut copy = ProcessWriter::new(elsewhere.path(), 3);
    let copied = copy.counter("requests", "Requests.", &[]).expect("counter");
    copied.inc(&mut copy, 11.0).expect("inc");
    let name = multiproc_exporter::format::writer::counter_file_name(3);
    let tmp = dir.join("replacement.tmp");
    std::fs::copy(elsewhere.path().join(&name), &tmp).expect("copy");
    std::fs::rename(&tmp, dir.join(&name)).expect("rename");
    assert_merged_anew("a file replaced by one with the same keys", r, dir, h, l);

    std::fs::remove_file(dir.join(multiproc_exporter::format::writer::counter_file_name(2)))
        .expect("delete");
    assert_merged_anew("a file deleted", r, dir, h, l);
}
