//! cargo-fuzz target `dir_reader`: see `multiproc_exporter_fuzz::dir_reader`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| multiproc_exporter_fuzz::dir_reader(data));
