//! Replays the committed fuzz corpus through the fuzz harnesses, so a plain
//! `cargo test` checks every seed and every input the fuzzers once crashed
//! on (`fuzz/corpus/<target>/`), without cargo-fuzz.
//!
//! The harnesses are `fuzz/src/lib.rs`, included here as a module: the same
//! code the `cargo fuzz` targets call, with the same properties checked.

use crate::support::fuzz_harness as harness;

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::PathBuf;

/// Runs every file of `fuzz/corpus/<target>/` through `run`; fails naming
/// every file that made it panic.
fn replay(target: &str, run: fn(&[u8])) {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("fuzz/corpus")
        .join(target);
    let mut paths: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|entry| entry.expect("corpus entry").path())
        .filter(|path| path.is_file())
        .collect();
    paths.sort();
    assert!(
        paths.len() >= 5,
        "{}: only {} inputs",
        dir.display(),
        paths.len()
    );
    let mut failures = Vec::new();
    for path in &paths {
        let data = std::fs::read(path).expect("read corpus input");
        if catch_unwind(AssertUnwindSafe(|| run(&data))).is_err() {
            failures.push(path.display().to_string());
        }
    }
    assert!(
        failures.is_empty(),
        "{} of {} {target} inputs panicked:\n{}",
        failures.len(),
        paths.len(),
        failures.join("\n")
    );
}

#[test]
fn file_parser_corpus() {
    replay("file_parser", harness::file_parser);
}

#[test]
fn merge_structured_corpus() {
    replay("merge_structured", harness::merge_structured);
}

#[test]
fn dir_reader_corpus() {
    replay("dir_reader", harness::dir_reader);
}

#[test]
fn key_decoder_corpus() {
    replay("key_decoder", harness::key_decoder);
}

#[test]
fn config_loader_corpus() {
    replay("config_loader", harness::config_loader);
}

#[test]
fn accept_header_corpus() {
    replay("accept_header", harness::accept_header);
}

/// The multi-file container round-trips, so seeds built with `join_files`
/// (by `fuzz/make-corpus`) are read as the files they were built from.
#[test]
fn multi_file_container_round_trips() {
    let files: [(&str, &[u8]); 3] = [
        ("counter_1.db", b"\x10\0\0\0\0\0\0\0abc\n==> not a marker"),
        ("gauge_all_2.db", b""),
        ("histogram_3.db", b"\n\n"),
    ];
    let joined = harness::join_files(&files);
    let split = harness::split_files(&joined);
    let split: Vec<(&str, &[u8])> = split.iter().map(|(n, b)| (n.as_str(), *b)).collect();
    // A marker inside a file's bytes starts a new section: that is the format.
    assert_eq!(
        split,
        [
            ("counter_1.db", &b"\x10\0\0\0\0\0\0\0abc"[..]),
            ("not a marker", b""),
            ("gauge_all_2.db", b""),
            ("histogram_3.db", b"\n\n"),
        ]
    );
}

#[test]
fn exposition_parser_corpus() {
    replay("exposition_parser", harness::exposition_parser);
}

#[test]
fn push_answer_corpus() {
    replay("push_answer", harness::push_answer);
}
