//! cargo-fuzz target `push_answer`: see `multiproc_exporter_fuzz::push_answer`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| multiproc_exporter_fuzz::push_answer(data));
