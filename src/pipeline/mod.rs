//! The pipeline shared by `dump` and `serve`: collect (a directory, or a
//! parent's subdirectories), transform, encode.

pub mod subdirectories;
