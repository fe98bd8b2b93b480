//! cargo-fuzz target `file_parser`: see `multiproc_exporter_fuzz::file_parser`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| multiproc_exporter_fuzz::file_parser(data));
