//! cargo-fuzz target `accept_header`: see `multiproc_exporter_fuzz::accept_header`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| multiproc_exporter_fuzz::accept_header(data));
