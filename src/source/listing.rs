//! Listing the inputs: directories in `readdir` order (their `*.db` entries,
//! as Python's `glob` takes them), links checked against the [`LinkPolicy`],
//! and a settled directory's listing reused while it is unchanged.

use std::io;
use std::os::unix::ffi::OsStrExt as _;
use std::os::unix::fs::{DirEntryExt, MetadataExt};
use std::path::{Path, PathBuf};

use rustc_hash::FxHashMap;

use super::link_policy::{LinkCheck, LinkPolicy};
use super::{Input, Problem, ReadStats, SkipReason};
use crate::format::file_name::is_listed_name;

/// A file to read, as listed.
#[derive(Debug)]
pub(super) struct Listed {
    pub(super) path: PathBuf,
    /// The inode number `readdir` gave for an entry that is a regular file
    /// (not a link), which identifies the file without a `stat`.
    pub(super) inode: Option<u64>,
    /// The device of the directory it was listed in (with `inode`, the
    /// file's identity: a tmpfs mounted over the directory gives new files
    /// the old inode numbers, on another device).
    pub(super) device: Option<u64>,
    /// Named as an input (not found in a directory): if it does not exist,
    /// it never did as far as the reader knows.
    pub(super) named: bool,
    /// Listed from a listing reused because the directory has not changed
    /// since: no entry was created, removed or renamed, so the entry is the
    /// file it was at the last collection.
    pub(super) unchanged: bool,
    /// Its position among every file listed, the skipped frozen ones
    /// included (problems are reported at theirs).
    pub(super) position: usize,
}

/// A directory whose frozen entries were skipped: not listed as files to
/// read, since the directory is unchanged and they are files of dead writers
/// (see [`CachedListing::mark_frozen`]).
#[derive(Debug)]
pub(super) struct SkippedDirectory {
    /// The directory, as its input names it.
    pub(super) dir: PathBuf,
    /// The position of its first entry.
    pub(super) first_position: usize,
    /// Entries skipped.
    pub(super) skipped: usize,
}

/// What [`list_inputs`] gives: the files to read, and the directories whose
/// frozen entries it skipped.
#[derive(Debug, Default)]
pub(super) struct Listing {
    pub(super) paths: Vec<Listed>,
    pub(super) skipped: Vec<SkippedDirectory>,
    /// Whether a directory was listed anew (so a file may have vanished).
    pub(super) relisted: bool,
}

/// A directory's `*.db` entries as last listed.
#[derive(Debug)]
pub(super) struct CachedListing {
    device: u64,
    inode: u64,
    /// Modification and change times: a new entry changes the first, a
    /// `chmod` the second (so an unreadable directory is noticed at once).
    changed: [i64; 4],
    /// Whether the exporter may open the directory's entries (search
    /// permission); if not, every entry is skipped as `permission_denied`.
    searchable: bool,
    entries: Vec<ListedEntry>,
    /// Which entries are frozen files, as of the reader's frozen epoch in
    /// `frozen_epoch` (see [`CachedListing::mark_frozen`]).
    frozen: Vec<bool>,
    frozen_count: usize,
    frozen_epoch: Option<u64>,
    /// Tells this listing from any other made by the process.
    serial: u64,
    /// Read the directory again at the next use, as a check of its
    /// modification time ([`CachedListing::verify_next`]).
    verify: bool,
}

/// The next [`CachedListing::serial`].
static NEXT_SERIAL: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);

impl CachedListing {
    /// Makes the next [`list_inputs`] read the directory even if its times
    /// are unchanged (a periodic check, for file systems whose directory
    /// times cannot be trusted); the same entries keep this listing, with its
    /// frozen marks.
    pub(super) fn verify_next(&mut self) {
        self.verify = true;
    }

    /// Tells this listing from any other made by the process.
    pub(super) fn serial(&self) -> u64 {
        self.serial
    }

    /// Whether the frozen marks are those of `epoch`.
    pub(super) fn frozen_epoch(&self) -> Option<u64> {
        self.frozen_epoch
    }

    /// Marks the entries that `is_frozen` says are frozen files (never a
    /// link: its target may change while the directory does not), as of the
    /// reader's frozen `epoch`. While the directory stays unchanged and the
    /// epoch the same, [`list_inputs`] skips them.
    pub(super) fn mark_frozen(&mut self, epoch: u64, is_frozen: impl Fn(&Path) -> bool) {
        self.frozen = self
            .entries
            .iter()
            .map(|entry| !entry.is_link && self.searchable && is_frozen(&entry.path))
            .collect();
        self.frozen_count = self.frozen.iter().filter(|f| **f).count();
        self.frozen_epoch = Some(epoch);
    }

    /// The paths of the frozen entries with their positions, counted from
    /// the directory's first entry.
    pub(super) fn frozen_entries(&self) -> impl Iterator<Item = (usize, &Path)> {
        self.entries
            .iter()
            .zip(&self.frozen)
            .enumerate()
            .filter(|(_, (_, frozen))| **frozen)
            .map(|(i, (entry, _))| (i, entry.path.as_path()))
    }
}

/// One entry of a [`CachedListing`].
#[derive(Debug, PartialEq, Eq)]
struct ListedEntry {
    path: PathBuf,
    /// The inode number of a regular file (see [`Listed::inode`]).
    inode: Option<u64>,
    is_link: bool,
}

/// How long a directory must have been unchanged before its listing is
/// reused: file-system timestamps advance in ticks (a few milliseconds), so
/// an entry added in the same tick as the last change could leave the
/// modification time as it was. Once the last change is older than this when
/// the directory is listed, any later change gives a new modification time.
const LISTING_SETTLE: std::time::Duration = std::time::Duration::from_secs(2);

/// Expands inputs into the ordered list of files to read.
///
/// A directory whose identity (device, inode) and modification and change
/// times are those of its last listing, made when its last change was already
/// [`LISTING_SETTLE`] old, is not listed again: one `stat` replaces reading
/// every entry (adding, removing or renaming an entry always changes the
/// directory's modification time, a permission change its change time).
/// Links are checked against the policy on every call.
///
/// The entries of an unchanged directory that were marked frozen at
/// `frozen_epoch` are skipped (they keep their positions).
pub(super) fn list_inputs(
    inputs: &[Input],
    link_policy: LinkPolicy,
    listings: &mut FxHashMap<PathBuf, CachedListing>,
    frozen_epoch: u64,
    stats: &mut ReadStats,
    problems: &mut Vec<(usize, Problem)>,
) -> Listing {
    let mut listing_out = Listing::default();
    let mut position = 0;
    listings.retain(|dir, _| inputs.iter().any(|i| i.path() == dir));
    for input in inputs {
        let dir = match input {
            Input::File(path) => {
                listing_out.paths.push(Listed {
                    path: path.clone(),
                    inode: None,
                    device: None,
                    named: true,
                    unchanged: false,
                    position,
                });
                position += 1;
                continue;
            }
            Input::Directory(dir) => dir,
        };
        let listed_at = std::time::SystemTime::now();
        let identity = std::fs::metadata(dir).ok().filter(|m| m.is_dir()).map(|m| {
            (
                m.dev(),
                m.ino(),
                [m.mtime(), m.mtime_nsec(), m.ctime(), m.ctime_nsec()],
            )
        });
        let same_times = identity.is_some_and(|(device, inode, changed)| {
            listings
                .get(dir)
                .is_some_and(|l| l.device == device && l.inode == inode && l.changed == changed)
        });
        let mut unchanged = same_times;
        let mut entries = None;
        if let Some(listing) = listings.get_mut(dir).filter(|l| same_times && l.verify) {
            // The periodic check: the same entries keep the listing.
            let read = read_directory(dir, stats, problems, position);
            if read.as_ref() == Some(&listing.entries) {
                listing.verify = false;
                stats.directories_present -= 1;
            } else {
                unchanged = false;
                entries = Some(read);
            }
        }
        if !unchanged {
            listings.remove(dir);
            listing_out.relisted = true;
            let read = match entries {
                Some(read) => read,
                None => read_directory(dir, stats, problems, position),
            };
            let Some(entries) = read else {
                position += 1;
                continue;
            };
            let settled = identity.filter(|(_, _, [secs, nanos, _, _])| {
                let modified = u64::try_from(*secs).ok().map(|secs| {
                    std::time::UNIX_EPOCH
                        + std::time::Duration::new(secs, u32::try_from(*nanos).unwrap_or(0))
                });
                modified.is_some_and(|m| m + LISTING_SETTLE <= listed_at)
            });
            let listing = CachedListing {
                device: identity.map_or(0, |i| i.0),
                inode: identity.map_or(0, |i| i.1),
                changed: identity.map_or([0; 4], |i| i.2),
                searchable: searchable(&entries),
                entries,
                frozen: Vec::new(),
                frozen_count: 0,
                frozen_epoch: None,
                serial: NEXT_SERIAL.fetch_add(1, std::sync::atomic::Ordering::Relaxed),
                verify: false,
            };
            if settled.is_none() {
                position += push_listing(
                    &listing,
                    dir,
                    link_policy,
                    (false, false),
                    position,
                    &mut listing_out.paths,
                    problems,
                );
                continue;
            }
            listings.insert(dir.clone(), listing);
        } else {
            stats.directories_present += 1;
        }
        if let Some(listing) = listings.get(dir) {
            let skip = unchanged && listing.frozen_epoch == Some(frozen_epoch);
            let first = position;
            position += push_listing(
                listing,
                dir,
                link_policy,
                (unchanged, skip),
                first,
                &mut listing_out.paths,
                problems,
            );
            let skipped = if skip { listing.frozen_count } else { 0 };
            if skipped > 0 {
                listing_out.skipped.push(SkippedDirectory {
                    dir: dir.clone(),
                    first_position: first,
                    skipped,
                });
            }
        }
    }
    listing_out
}

/// Lists the `*.db` entries of `dir` in `readdir` order, or reports why it
/// cannot (at `position` in the problems).
fn read_directory(
    dir: &Path,
    stats: &mut ReadStats,
    problems: &mut Vec<(usize, Problem)>,
    position: usize,
) -> Option<Vec<ListedEntry>> {
    match std::fs::read_dir(dir) {
        Ok(entries) => {
            stats.directories_present += 1;
            let mut listed = Vec::new();
            for entry in entries.flatten() {
                // By bytes: prometheus_client's `glob` lists names that are not
                // UTF-8 too (as surrogate escapes).
                if !is_listed_name(entry.file_name().as_bytes()) {
                    continue;
                }
                // `file_type` comes from `readdir` (no `stat`) on the file
                // systems metrics live on.
                let file_type = entry.file_type().ok();
                listed.push(ListedEntry {
                    path: entry.path(),
                    inode: file_type.is_some_and(|t| t.is_file()).then(|| entry.ino()),
                    is_link: file_type.is_some_and(|t| t.is_symlink()),
                });
            }
            Some(listed)
        }
        Err(e) => {
            let reason = if e.kind() == io::ErrorKind::NotFound {
                stats.directories_missing += 1;
                SkipReason::DirectoryMissing
            } else {
                stats.directories_unreadable += 1;
                SkipReason::DirectoryUnreadable(e.to_string())
            };
            problems.push((
                position,
                Problem {
                    path: dir.to_path_buf(),
                    reason,
                },
            ));
            None
        }
    }
}

/// Appends a listing's entries to `paths` (the first at position `first`),
/// leaving out (and reporting) links that the policy does not follow, and,
/// when `skip_frozen`, the entries marked frozen. Returns the number of
/// entries (the positions taken).
fn push_listing(
    listing: &CachedListing,
    dir: &Path,
    link_policy: LinkPolicy,
    (unchanged, skip_frozen): (bool, bool),
    first: usize,
    paths: &mut Vec<Listed>,
    problems: &mut Vec<(usize, Problem)>,
) -> usize {
    let mut links = LinkCheck::new(dir, link_policy);
    for (index, entry) in listing.entries.iter().enumerate() {
        if skip_frozen && listing.frozen.get(index).copied().unwrap_or(false) {
            continue;
        }
        let position = first + index;
        let allowed = if !listing.searchable {
            Err(SkipReason::PermissionDenied)
        } else if entry.is_link {
            links.check(&entry.path)
        } else {
            Ok(())
        };
        match allowed {
            Ok(()) => paths.push(Listed {
                path: entry.path.clone(),
                inode: entry.inode,
                device: Some(listing.device),
                named: false,
                unchanged,
                position,
            }),
            Err(reason) => problems.push((
                position,
                Problem {
                    path: entry.path.clone(),
                    reason,
                },
            )),
        }
    }
    listing.entries.len()
}

/// Whether the entries of a listed directory can be reached (the directory
/// has search permission for this process): a `stat` of its first entry
/// fails with `EACCES` otherwise. An empty listing has nothing to reach.
fn searchable(entries: &[ListedEntry]) -> bool {
    entries.first().is_none_or(|entry| {
        std::fs::symlink_metadata(&entry.path)
            .map_or_else(|e| e.kind() != io::ErrorKind::PermissionDenied, |_| true)
    })
}
