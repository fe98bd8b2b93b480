//! The `.db` file format of prometheus_client's multiprocess mode, both
//! sides: reading a file's bytes into record locations and decoded keys
//! ([`layout`], [`key`], [`file_name`]) and writing files byte-identical to
//! prometheus_client's ([`writer`]). No I/O except in [`writer`].

pub mod file_name;
pub mod key;
pub mod layout;
pub mod writer;
