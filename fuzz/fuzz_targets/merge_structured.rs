//! cargo-fuzz target `merge_structured`: see `multiproc_exporter_fuzz::merge_structured`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| multiproc_exporter_fuzz::merge_structured(data));
