//! cargo-fuzz target `exposition_parser`: see `multiproc_exporter_fuzz::exposition_parser`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| multiproc_exporter_fuzz::exposition_parser(data));
