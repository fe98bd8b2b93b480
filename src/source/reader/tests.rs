//! Tests of the windowed reading and the memory budget of [`super::Reader`].

use std::fs::{File, OpenOptions};
use std::io::Write as _;
use std::os::unix::fs::FileExt as _;

use super::*;
use crate::format::layout::file_bytes;
use crate::format::writer::encode_key;

fn key(i: usize, padding: usize) -> String {
    let value = format!("{i}-{}", "x".repeat(padding));
    encode_key("req", "req_total", &[("path", &value)], "Requests.")
}

fn write_file(path: &Path, keys: &[String]) {
    let records: Vec<(&str, f64, f64)> = keys
        .iter()
        .enumerate()
        .map(|(i, k)| (k.as_str(), i as f64, 0.0))
        .collect();
    std::fs::write(path, file_bytes(&records)).unwrap();
}

fn read_values(reader: &mut Reader, dir: &Path, store: &mut KeyStore) -> Vec<Vec<f64>> {
    let read = reader.read(&[Input::Directory(dir.to_path_buf())], store);
    assert!(read.problems.is_empty(), "{:?}", read.problems);
    read.files
        .iter()
        .map(|f| f.merge.values.iter().map(|v| v.0).collect())
        .collect()
}

/// Regression: a file was read into one buffer as large as its header
/// claimed (2 GiB for a sparse file).
#[test]
fn a_file_larger_than_a_chunk_is_read_in_bounded_windows() {
    let dir = tempfile::tempdir().unwrap();
    let keys: Vec<String> = (0..40_000).map(|i| key(i, 40)).collect();
    let path = dir.path().join("counter_1.db");
    write_file(&path, &keys);
    assert!(std::fs::metadata(&path).unwrap().len() > 3 * READ_CHUNK as u64);
    let mut reader = Reader::new();
    let mut store = KeyStore::new();
    let values = read_values(&mut reader, dir.path(), &mut store);
    let expected: Vec<f64> = (0..40_000).map(|i| i as f64).collect();
    assert_eq!(values, vec![expected.clone()]);
    assert_eq!(store.len(), 40_000);
    assert!(
        reader.buffer.capacity() <= READ_CHUNK,
        "{}",
        reader.buffer.capacity()
    );

    // Grown past another chunk: old values (from the map or read again)
    // and new ones, in order.
    let more: Vec<String> = (0..60_000).map(|i| key(i, 40)).collect();
    write_file(&path, &more);
    reader.recheck_all();
    let values = read_values(&mut reader, dir.path(), &mut store);
    assert_eq!(
        values,
        vec![(0..60_000).map(|i| i as f64).collect::<Vec<_>>()]
    );
    assert!(reader.buffer.capacity() <= READ_CHUNK);
}

#[test]
fn a_record_larger_than_a_chunk_is_read_whole() {
    let dir = tempfile::tempdir().unwrap();
    let keys = vec![key(0, 10), key(1, 3 * READ_CHUNK / 2), key(2, 10)];
    write_file(&dir.path().join("counter_1.db"), &keys);
    let mut reader = Reader::new();
    let mut store = KeyStore::new();
    assert_eq!(
        read_values(&mut reader, dir.path(), &mut store),
        vec![vec![0.0, 1.0, 2.0]]
    );
    // The large buffer is not kept.
    assert!(reader.buffer.capacity() <= READ_CHUNK);
}

fn sparse_file_claiming(path: &Path, used: i32) {
    let mut file = File::create(path).unwrap();
    file.set_len(used as u64).unwrap();
    file.write_all(&used.to_ne_bytes()).unwrap();
}

/// Regression: the 2 GiB sparse file allocated and read 2 GiB on
/// every scrape before it was skipped.
#[test]
fn a_sparse_file_claiming_2_gib_costs_one_window() {
    let dir = tempfile::tempdir().unwrap();
    write_file(&dir.path().join("counter_1.db"), &[key(0, 1)]);
    sparse_file_claiming(&dir.path().join("counter_2.db"), i32::MAX - 7);
    let mut reader = Reader::new();
    let mut store = KeyStore::new();
    let read = reader.read(&[Input::Directory(dir.path().to_path_buf())], &mut store);
    assert_eq!(read.files.len(), 1);
    assert_eq!(read.problems.len(), 1);
    assert_eq!(read.problems[0].1.reason.label(), "key_not_json");
    assert!(
        read.stats.bytes_read < 4 * READ_CHUNK as u64,
        "{}",
        read.stats.bytes_read
    );
}

#[test]
fn a_file_over_the_memory_budget_is_skipped_and_not_read_again_while_unchanged() {
    let dir = tempfile::tempdir().unwrap();
    write_file(&dir.path().join("counter_1.db"), &[key(0, 1)]);
    let big: Vec<String> = (0..50_000).map(|i| key(i, 40)).collect();
    write_file(&dir.path().join("counter_2.db"), &big);
    let budget = Arc::new(MemoryBudget::new(4 << 20));
    let mut reader = Reader::new();
    reader.set_memory_budget(Some(budget.clone()));
    let mut store = KeyStore::new();
    let inputs = [Input::Directory(dir.path().to_path_buf())];
    let read = reader.read(&inputs, &mut store);
    assert_eq!(read.files.len(), 1);
    let labels: Vec<_> = read.problems.iter().map(|p| p.1.reason.label()).collect();
    assert_eq!(labels, ["over_memory_budget"]);
    assert!(
        budget.held() <= budget.limit(),
        "{} > {}",
        budget.held(),
        budget.limit()
    );
    // Unchanged: skipped after reading one page.
    let read = reader.read(&inputs, &mut store);
    assert_eq!(read.problems.len(), 1);
    assert!(
        read.stats.bytes_read <= FIRST_READ as u64 + 64,
        "{}",
        read.stats.bytes_read
    );
    // Without a budget the same files are read whole.
    let mut unlimited = Reader::new();
    let read = unlimited.read(&inputs, &mut KeyStore::new());
    assert_eq!((read.files.len(), read.problems.len()), (2, 0));
}

#[test]
fn a_file_whose_records_exceed_the_whole_budget_is_skipped_before_it_is_read() {
    let dir = tempfile::tempdir().unwrap();
    sparse_file_claiming(&dir.path().join("counter_2.db"), i32::MAX - 7);
    let mut reader = Reader::new();
    reader.set_memory_budget(Some(Arc::new(MemoryBudget::new(256 << 20))));
    let read = reader.read(
        &[Input::Directory(dir.path().to_path_buf())],
        &mut KeyStore::new(),
    );
    assert_eq!(read.problems[0].1.reason.label(), "over_memory_budget");
    assert!(read.stats.bytes_read <= FIRST_READ as u64);
}

/// A frozen file (its writer is dead) costs a collection nothing: neither
/// its header nor its values are loaded, even on the periodic recheck; a
/// modification event for it (`recheck`) reads it again.
#[test]
fn a_frozen_file_is_not_loaded_again_until_a_modification_event() {
    let dir = tempfile::tempdir().unwrap();
    let keys: Vec<String> = (0..4).map(|i| key(i, 4)).collect();
    let path = dir.path().join("counter_1.db");
    write_file(&path, &keys);
    let mut reader = Reader::new();
    let mut store = KeyStore::new();
    assert_eq!(
        read_values(&mut reader, dir.path(), &mut store),
        [[0.0, 1.0, 2.0, 3.0]]
    );
    assert_eq!(
        read_values(&mut reader, dir.path(), &mut store),
        [[0.0, 1.0, 2.0, 3.0]]
    );
    let meta = std::fs::metadata(&path).unwrap();
    reader.freeze(&path, (meta.dev(), meta.ino()));
    // Changed in place (as only a live writer could): not seen while frozen.
    let first_value = HEADER_LEN + 4 + (keys[0].len() + 4).next_multiple_of(8) - 4;
    let file = OpenOptions::new().write(true).open(&path).unwrap();
    file.write_all_at(&7.0f64.to_ne_bytes(), first_value as u64)
        .unwrap();
    let read = reader.read(&[Input::Directory(dir.path().to_path_buf())], &mut store);
    assert_eq!(read.stats.bytes_read, 0);
    assert_eq!(read.files[0].merge.values[0].0, 0.0);
    reader.recheck_all();
    assert_eq!(read_values(&mut reader, dir.path(), &mut store)[0][0], 0.0);
    reader.recheck(&path);
    assert_eq!(read_values(&mut reader, dir.path(), &mut store)[0][0], 7.0);
}

/// The files come back in listing order with their own values, a file
/// listed twice (named, and inside a listed directory) in both places,
/// on every read (the second one finds them mapped).
#[test]
fn a_file_listed_twice_is_read_in_both_places() {
    let dir = tempfile::tempdir().unwrap();
    let a = dir.path().join("counter_1.db");
    let b = dir.path().join("counter_2.db");
    write_file(&a, &[key(1, 0)]);
    write_file(&b, &[key(1, 0), key(2, 0)]);
    let inputs = [
        Input::File(b.clone()),
        Input::Directory(dir.path().to_path_buf()),
        Input::File(a.clone()),
    ];
    let mut reader = Reader::new();
    let mut store = KeyStore::new();
    for _ in 0..3 {
        let read = reader.read(&inputs, &mut store);
        assert!(read.problems.is_empty(), "{:?}", read.problems);
        let paths: Vec<&Path> = read.files.iter().map(|f| f.path.as_path()).collect();
        let mut listed = vec![b.as_path()];
        let mut in_dir = vec![a.as_path(), b.as_path()];
        in_dir.sort_by_key(|p| {
            std::fs::read_dir(dir.path())
                .unwrap()
                .position(|e| e.unwrap().path() == *p)
        });
        listed.extend(in_dir);
        listed.push(a.as_path());
        assert_eq!(paths, listed);
        for file in &read.files {
            let expected = if file.path == a { 1 } else { 2 };
            assert_eq!(file.merge.values.len(), expected, "{:?}", file.path);
        }
    }
}

/// A mapped file that grew between two reads is seen to have grown when
/// its values are loaded, and read again with its new records; so is one
/// among many files, loaded on two threads.
#[test]
fn a_mapped_file_that_grew_is_read_again() {
    for files in [1, 300] {
        let dir = tempfile::tempdir().unwrap();
        // 300 files of 256 records: over the two-thread threshold.
        let keys: Vec<String> = (0..256).map(|i| key(i, 0)).collect();
        for i in 0..files {
            write_file(&dir.path().join(format!("counter_{i}.db")), &keys);
        }
        let mut reader = Reader::new();
        let mut store = KeyStore::new();
        let first = read_values(&mut reader, dir.path(), &mut store);
        assert!(first.iter().all(|v| v.len() == 256));
        let grown: Vec<String> = (0..300).map(|i| key(i, 0)).collect();
        write_file(&dir.path().join("counter_0.db"), &grown);
        let read = reader.read(&[Input::Directory(dir.path().to_path_buf())], &mut store);
        assert!(read.problems.is_empty(), "{:?}", read.problems);
        for file in &read.files {
            let expected = if file.path.ends_with("counter_0.db") {
                300
            } else {
                256
            };
            assert_eq!(file.merge.values.len(), expected, "{:?}", file.path);
            let values: Vec<f64> = file.merge.values.iter().map(|v| v.0).collect();
            assert_eq!(values, (0..expected).map(|i| i as f64).collect::<Vec<_>>());
        }
    }
}

/// Files truncated under their maps in a directory large enough for two
/// loading threads: the loads that fault are absorbed on whichever thread
/// ran them, those files are read again from the file (and left out, being
/// shorter than their header says), and every other file keeps its values.
#[test]
fn files_truncated_under_their_maps_are_left_out_on_either_thread() {
    let dir = tempfile::tempdir().unwrap();
    let keys: Vec<String> = (0..256).map(|i| key(i, 0)).collect();
    for i in 0..300 {
        write_file(&dir.path().join(format!("counter_{i}.db")), &keys);
    }
    let mut reader = Reader::new();
    let mut store = KeyStore::new();
    assert_eq!(read_values(&mut reader, dir.path(), &mut store).len(), 300);
    let truncated: Vec<PathBuf> = (0..300)
        .step_by(7)
        .map(|i| dir.path().join(format!("counter_{i}.db")))
        .collect();
    for path in &truncated {
        let file = OpenOptions::new().write(true).open(path).unwrap();
        file.set_len(4096).unwrap();
    }
    let read = reader.read(&[Input::Directory(dir.path().to_path_buf())], &mut store);
    let mut left_out: Vec<&Path> = read
        .problems
        .iter()
        .map(|(_, p)| p.path.as_path())
        .collect();
    left_out.sort();
    let mut expected: Vec<&Path> = truncated.iter().map(PathBuf::as_path).collect();
    expected.sort();
    assert_eq!(left_out, expected);
    assert_eq!(read.files.len(), 300 - truncated.len());
    for file in &read.files {
        let values: Vec<f64> = file.merge.values.iter().map(|v| v.0).collect();
        assert_eq!(values, (0..256).map(|i| i as f64).collect::<Vec<_>>());
    }
}

/// Regression (fuzz `dir_reader`): a mapped file rewritten in place with a
/// header claiming more than the file holds was left out but kept its
/// parsed keys (its header is read after it was marked as listed); rewritten
/// again with other keys below the old `used`, it was served with the old
/// keys. A file whose header cannot be read keeps nothing: it is read afresh.
#[test]
fn a_file_left_out_after_its_map_was_dropped_is_read_afresh() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("counter_1.db");
    write_file(&path, &[key(1, 0)]);
    let mut reader = Reader::new();
    let mut store = KeyStore::new();
    assert_eq!(read_values(&mut reader, dir.path(), &mut store), [[0.0]]);
    // In place (same inode): a header claiming more than the file holds.
    let mut bad = std::fs::read(&path).unwrap();
    let beyond = i32::try_from(bad.len() * 2).unwrap();
    bad[..4].copy_from_slice(&beyond.to_ne_bytes());
    let file = OpenOptions::new().write(true).open(&path).unwrap();
    file.write_all_at(&bad, 0).unwrap();
    let read = reader.read(&[Input::Directory(dir.path().to_path_buf())], &mut store);
    assert_eq!(read.problems.len(), 1, "{:?}", read.problems);
    drop(read);
    // In place again: as long as the first version, another key.
    let other = file_bytes(&[(key(2, 0).as_str(), 5.0, 0.0)]);
    assert_eq!(other.len(), bad.len());
    file.write_all_at(&other, 0).unwrap();
    let read = reader.read(&[Input::Directory(dir.path().to_path_buf())], &mut store);
    assert!(read.problems.is_empty(), "{:?}", read.problems);
    let keys = read.files[0].merge.keys.to_vec();
    let values: Vec<f64> = read.files[0].merge.values.iter().map(|v| v.0).collect();
    drop(read);
    let mut fresh = Reader::new();
    let read = fresh.read(&[Input::Directory(dir.path().to_path_buf())], &mut store);
    assert_eq!(keys, read.files[0].merge.keys);
    assert_eq!(values, [5.0]);
}
