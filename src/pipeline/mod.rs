//! The pipeline shared by `dump` and `serve`: collect (a directory, or a
//! parent's subdirectories), transform, encode.

mod collector;
pub mod subdirectories;

pub use collector::{CollectStats, Collection, Collector};
