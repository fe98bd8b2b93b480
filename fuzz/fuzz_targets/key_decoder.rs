//! cargo-fuzz target `key_decoder`: see `multiproc_exporter_fuzz::key_decoder`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| multiproc_exporter_fuzz::key_decoder(data));
