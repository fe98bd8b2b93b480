//! The frozen files a collection skipped ([`Skipped`]), and how a cached
//! file is handed to the merge ([`read_file`]).

use std::ffi::OsString;
use std::path::PathBuf;

use rustc_hash::FxHashMap;

use super::{CachedFile, ReadFile};
use crate::merge::MergeInput;
use crate::source::listing::{CachedListing, SkippedDirectory};

/// The frozen files a [`Reader::read`](super::Reader::read) skipped: files of dead writers in
/// directories unchanged since they were marked (see [`Reader::freeze`](super::Reader::freeze)).
/// Two reads that skipped files under equal [`Self::token`]s skipped the
/// same files, with the same contents.
#[derive(Debug)]
pub struct Skipped<'a> {
    pub(super) directories: Vec<SkippedDirectory>,
    pub(super) listings: &'a FxHashMap<PathBuf, CachedListing>,
    pub(super) frozen: &'a FxHashMap<OsString, CachedFile>,
    pub(super) epoch: u64,
}

/// Identifies a set of skipped files ([`Skipped::token`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SkipToken {
    /// The reader's frozen epoch.
    epoch: u64,
    /// The serial numbers of the listings skipped from.
    listings: Vec<u64>,
}

impl<'a> Skipped<'a> {
    /// Files skipped.
    pub fn len(&self) -> usize {
        self.directories.iter().map(|d| d.skipped).sum()
    }

    /// Whether no file was skipped.
    pub fn is_empty(&self) -> bool {
        self.directories.is_empty()
    }

    /// What identifies the files skipped (`None` if none was).
    pub fn token(&self) -> Option<SkipToken> {
        if self.directories.is_empty() {
            return None;
        }
        Some(SkipToken {
            epoch: self.epoch,
            listings: self
                .directories
                .iter()
                .map(|d| self.listings.get(&d.dir).map_or(0, CachedListing::serial))
                .collect(),
        })
    }

    /// The files skipped, as read files (frozen), in listing order.
    pub fn files(&self) -> Vec<ReadFile<'a>> {
        let mut files = Vec::with_capacity(self.len());
        for directory in &self.directories {
            let Some(listing) = self.listings.get(&directory.dir) else {
                continue;
            };
            for (index, path) in listing.frozen_entries() {
                if let Some(cached) = self.frozen.get(path.as_os_str()) {
                    files.push(read_file(
                        directory.first_position + index,
                        path.to_path_buf(),
                        cached,
                        true,
                    ));
                }
            }
        }
        files
    }
}

/// What the merge and the writer check need of a cached file.
fn read_file(position: usize, path: PathBuf, cached: &CachedFile, frozen: bool) -> ReadFile<'_> {
    ReadFile {
        position,
        identity: (cached.device, cached.inode),
        born: cached.born.0 as f64 + f64::from(cached.born.1 as u32) * 1e-9,
        used_bytes: cached.parsed_until,
        frozen,
        values_version: cached.values_version,
        merge: MergeInput {
            name: &cached.name,
            keys: &cached.keys,
            values: &cached.values,
            generation: cached.generation,
        },
        path,
    }
}

/// The files a collection read, in listing order, from their listing
/// indices (`read[i]`: the position and path of the file listed at `i`, if
/// it was read). The caches are scanned in their own order, each file
/// placed where it was listed ([`CachedFile::listed_at`]): no path is
/// hashed and compared again. A path listed twice (a named file inside a
/// listed directory) is looked up for its other places.
pub(super) fn read_files<'a>(
    files: &'a FxHashMap<OsString, CachedFile>,
    frozen: &'a FxHashMap<OsString, CachedFile>,
    collection: u64,
    mut read: Vec<Option<(usize, PathBuf)>>,
) -> Vec<ReadFile<'a>> {
    let mut placed: Vec<Option<ReadFile<'a>>> = Vec::with_capacity(read.len());
    placed.resize_with(read.len(), || None);
    for (cache, is_frozen) in [(files, false), (frozen, true)] {
        for cached in cache.values() {
            if cached.seen_in != collection {
                continue;
            }
            let at = cached.listed_at;
            if let Some((position, path)) = read.get_mut(at).and_then(Option::take) {
                placed[at] = Some(read_file(position, path, cached, is_frozen));
            }
        }
    }
    for (at, left) in read.into_iter().enumerate() {
        let Some((position, path)) = left else {
            continue;
        };
        placed[at] = match frozen.get(path.as_os_str()) {
            Some(cached) => Some(read_file(position, path, cached, true)),
            None => files
                .get(path.as_os_str())
                .map(|cached| read_file(position, path, cached, false)),
        };
    }
    placed.into_iter().flatten().collect()
}
