//! Reading metric files from disk, incrementally: the I/O stage.
//!
//! A [`Reader`] keeps, for every file it has seen, the keys of its records and
//! where their values live. On each [`Reader::read`] it lists the inputs in
//! `readdir` order (as Python's `glob` does), reads each file's
//! used bytes with one positioned read, and decodes only records appended
//! since the last call. Merging is the next stage's ([`crate::merge`]); the
//! pipeline's collector puts the two together.
//!
//! A file is read whole with `pread` the first time and whenever it grew;
//! after that it stays mapped read-only (`source::mapped`, which also guards
//! against files that shrink under the map), so reading an unchanged file
//! costs no system call at all: the listing's inode number (from `readdir`)
//! tells that the path still names the same file, and the `used` header and
//! the values are loaded straight from the map. Files are opened read-only and
//! non-blocking (a FIFO named `*.db` cannot stall a scrape), and anything that
//! is not a regular file is skipped. A file that cannot be read or parsed is
//! left out whole and reported as a [`Problem`]; everything else is merged as
//! prometheus_client would merge it without that file. Symbolic links are
//! followed according to a [`link_policy::LinkPolicy`] (by default only links that stay
//! inside the directory, see [`crate::source::link_policy`]).

pub mod budget;
pub mod descriptors;
pub mod discover;
pub mod link_policy;
mod listing;
mod mapped;
pub mod ray_workers;
mod reader;
mod skip;
pub mod temporary;
pub(crate) mod upstream;
pub mod writers;

use std::path::{Path, PathBuf};

pub use budget::MemoryBudget;
pub use mapped::{limit_heap_arenas, release_free_heap};
pub use reader::{Read, ReadFile, Reader, SkipToken, Skipped};
pub use skip::{Problem, SkipReason};

/// An input to read: a directory (its `*.db` entries, in `readdir` order) or
/// one file.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Input {
    /// A metrics directory (`PROMETHEUS_MULTIPROC_DIR`).
    Directory(PathBuf),
    /// A single `.db` file.
    File(PathBuf),
}

impl Input {
    /// A directory input if `path` is a directory now, else a file input.
    pub fn detect(path: impl Into<PathBuf>) -> Self {
        let path = path.into();
        if path.is_dir() {
            Self::Directory(path)
        } else {
            Self::File(path)
        }
    }

    /// The path of this input.
    pub fn path(&self) -> &Path {
        match self {
            Self::Directory(p) | Self::File(p) => p,
        }
    }
}

/// Counters describing one read of the inputs.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ReadStats {
    /// Input directories that exist.
    pub directories_present: usize,
    /// Input directories that do not exist.
    pub directories_missing: usize,
    /// Input directories that exist but cannot be listed.
    pub directories_unreadable: usize,
    /// Files listed (after the `*.db` filter) or named.
    pub files_listed: usize,
    /// Bytes read from files.
    pub bytes_read: u64,
    /// Files read before that are gone now (their state was released).
    pub files_forgotten: usize,
}
