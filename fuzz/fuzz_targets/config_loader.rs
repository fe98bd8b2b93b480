//! cargo-fuzz target `config_loader`: see `multiproc_exporter_fuzz::config_loader`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| multiproc_exporter_fuzz::config_loader(data));
