//! Compaction of dead writers' files (`--dir.compact-dead-writers`, off by
//! default; the only thing that writes to a metrics directory): the files of
//! writers that exited, of kinds whose merge does not depend on the pid, are
//! folded into one archive file per kind, in prometheus_client's own format,
//! so that prometheus_client itself reads the compacted directory to the same
//! families and values.
//!
//! * Kinds: counters, histograms, summaries, and gauges in `sum`, `min`, `max`
//!   and `mostrecent` modes. Never an `all` or `live*` gauge, never a live
//!   writer's file.
//! * Archives are named after their kind with `archive` for a pid
//!   (`counter_archive.db`, `gauge_sum_archive.db`); a later round folds the
//!   archive again with the new dead writers' files.
//! * Values fold as prometheus_client merges them (sums add, `min`/`max`
//!   compare, `mostrecent` keeps the newest timestamp), per record key, in
//!   the order prometheus_client would meet them; floats may then differ from
//!   the uncompacted directory's only by summation order.
//! * Crash safety is [`journal`]'s: no value is lost or counted twice
//!   whatever step a crash stops at, once [`journal::recover`] has run (the
//!   exporter runs it before it reads the directory).

pub mod journal;
pub mod stale_runs;

use std::collections::HashMap;
use std::io;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use crate::format::file_name::{is_archive_name, writer_pid, ARCHIVE_WRITER};
use crate::format::writer::read_records;

pub use journal::{recover, Recovered, Step};

/// How an archive kind folds two values of the same record key.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Fold {
    /// Counters, histograms, summaries, `sum` gauges.
    Add,
    /// `min` gauges: the first value, replaced by any smaller one.
    Min,
    /// `max` gauges: the first value, replaced by any larger one.
    Max,
    /// `mostrecent` gauges: the value of the newest timestamp (the first of
    /// equal ones; a timestamp of 0 never wins, as in prometheus_client).
    MostRecent,
}

/// The kinds compacted: the file name's part before the pid, and how it folds.
const KINDS: [(&str, Fold); 7] = [
    ("counter", Fold::Add),
    ("histogram", Fold::Add),
    ("summary", Fold::Add),
    ("gauge_sum", Fold::Add),
    ("gauge_min", Fold::Min),
    ("gauge_max", Fold::Max),
    ("gauge_mostrecent", Fold::MostRecent),
];

/// The kind of a file name that may be compacted (`counter_12.db` and
/// `counter_archive.db` are `counter`), with how it folds.
fn kind_of(basename: &str) -> Option<(&'static str, Fold)> {
    let stem = basename.strip_suffix(".db")?;
    let (prefix, writer) = stem.rsplit_once('_')?;
    if writer != ARCHIVE_WRITER && writer_pid(basename).is_none() {
        return None;
    }
    KINDS.iter().copied().find(|(kind, _)| *kind == prefix)
}

/// A dead writer's file offered for compaction.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Candidate {
    /// Its path (in the directory compacted).
    pub path: PathBuf,
    /// Its device and inode, as last read: a file replaced since is left.
    pub identity: (u64, u64),
}

impl Candidate {
    /// The file at `path`, if it is of a kind that can be compacted.
    pub fn of(path: &Path, identity: (u64, u64)) -> Option<Candidate> {
        let name = path.file_name()?.to_str()?;
        kind_of(name)?;
        Some(Candidate {
            path: path.to_path_buf(),
            identity,
        })
    }
}

/// One archive to write: its name, records, and the files it replaces.
#[derive(Debug, Clone, PartialEq)]
pub struct Archive {
    /// Its file name (`counter_archive.db`).
    pub name: String,
    /// Its records (key, value, timestamp), in first-seen order.
    pub records: Vec<(String, f64, f64)>,
    /// The files folded into it (the previous archive among them), by name,
    /// device and inode.
    pub sources: Vec<(String, (u64, u64))>,
}

/// What one round did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Compacted {
    /// Archives written.
    pub archives: usize,
    /// Dead writers' files removed (previous archives not counted).
    pub files_removed: usize,
}

/// Plans the archives for `candidates` (all in `dir`): per kind with at
/// least one dead writer's file, that file and the others of the kind, after
/// the kind's present archive. A file that changed identity or cannot be
/// read is left where it is.
pub fn plan(dir: &Path, candidates: &[Candidate]) -> Vec<Archive> {
    let mut archives = Vec::new();
    for (kind, fold) in KINDS {
        let sources: Vec<&Candidate> = candidates
            .iter()
            .filter(|c| {
                c.path.parent() == Some(dir)
                    && c.path
                        .file_name()
                        .and_then(|n| n.to_str())
                        .and_then(kind_of)
                        .is_some_and(|(k, _)| k == kind)
                    && !is_archive_path(&c.path)
            })
            .collect();
        if sources.is_empty() {
            continue;
        }
        let name = format!("{kind}_{ARCHIVE_WRITER}.db");
        let mut folder = Folder::new(fold);
        let mut archive = Archive {
            name: name.clone(),
            records: Vec::new(),
            sources: Vec::new(),
        };
        // The archive there now is folded first (it is replaced).
        let present = dir.join(&name);
        if let Ok(meta) = std::fs::metadata(&present) {
            match read_records(&present) {
                Ok(records) => {
                    folder.add(&records);
                    archive
                        .sources
                        .push((name.clone(), (meta.dev(), meta.ino())));
                }
                // An archive that cannot be read is not replaced.
                Err(_) => continue,
            }
        }
        let sticky = std::fs::metadata(dir)
            .ok()
            .filter(|m| m.mode() & 0o1000 != 0);
        for source in sources {
            let Some(file_name) = source.path.file_name().and_then(|n| n.to_str()) else {
                continue;
            };
            let same = std::fs::metadata(&source.path).is_ok_and(|m| {
                (m.dev(), m.ino()) == source.identity
                    && sticky.as_ref().is_none_or(|d| removable_from_sticky(d, &m))
            });
            let Ok(records) = read_records(&source.path) else {
                continue;
            };
            if !same {
                continue;
            }
            folder.add(&records);
            archive
                .sources
                .push((file_name.to_owned(), source.identity));
        }
        if archive.sources.iter().any(|(n, _)| *n != name) {
            archive.records = folder.records;
            archives.push(archive);
        }
    }
    archives
}

/// Compacts `candidates` (dead writers' files in `dir`) after recovering
/// from any round a crash interrupted; `hook` is called after each step
/// (tests stop the process there).
pub fn compact(
    dir: &Path,
    candidates: &[Candidate],
    hook: &mut dyn FnMut(Step),
) -> io::Result<Compacted> {
    recover(dir)?;
    let archives = plan(dir, candidates);
    if archives.is_empty() {
        return Ok(Compacted::default());
    }
    journal::commit(dir, &archives, hook)?;
    Ok(Compacted {
        archives: archives.len(),
        files_removed: archives
            .iter()
            .map(|a| a.sources.iter().filter(|(n, _)| *n != a.name).count())
            .sum(),
    })
}

/// Files a round takes at most (in listing order; the next rounds take the
/// rest), so that the scrape that runs it is not held long.
pub const MAX_FILES_PER_ROUND: usize = 2000;

/// How often a collector compacts at most.
pub const COMPACTION_INTERVAL: std::time::Duration = std::time::Duration::from_secs(60);

/// What compaction did during one collection (summed over directories).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CompactionReport {
    /// Rounds that wrote archives.
    pub rounds: usize,
    /// Archives written.
    pub archives: usize,
    /// Dead writers' files folded in and removed.
    pub files_removed: usize,
    /// Rounds a crash had interrupted, finished or thrown away.
    pub recovered: usize,
    /// Directories that could not be compacted, and why.
    pub errors: Vec<(PathBuf, String)>,
}

impl CompactionReport {
    /// Adds another collection's report.
    pub fn add(&mut self, other: &CompactionReport) {
        self.rounds += other.rounds;
        self.archives += other.archives;
        self.files_removed += other.files_removed;
        self.recovered += other.recovered;
        self.errors.extend(other.errors.iter().cloned());
    }
}

/// A collector's compaction state: the first collection recovers any round
/// a crash interrupted, then a round runs at most every
/// [`COMPACTION_INTERVAL`].
#[derive(Debug, Default)]
pub struct Compactor {
    recovered: bool,
    last_round: Option<std::time::Instant>,
}

impl Compactor {
    /// Before reading: recovers the directories once (so that a round a
    /// crash interrupted is never read half done).
    pub fn before_reading(&mut self, dirs: &[&Path], report: &mut CompactionReport) {
        if std::mem::replace(&mut self.recovered, true) {
            return;
        }
        for dir in dirs {
            match recover(dir) {
                Ok(r) if r.finished || r.discarded > 0 => report.recovered += 1,
                Ok(_) => {}
                Err(e) => report.errors.push((dir.to_path_buf(), e.to_string())),
            }
        }
    }

    /// Whether a round is due.
    pub fn due(&self) -> bool {
        self.last_round
            .is_none_or(|at| at.elapsed() >= COMPACTION_INTERVAL)
    }

    /// Compacts `candidates` (dead writers' files, in listing order; the
    /// first [`MAX_FILES_PER_ROUND`]), directory by directory.
    pub fn round(&mut self, candidates: &[Candidate], report: &mut CompactionReport) {
        self.last_round = Some(std::time::Instant::now());
        let candidates = &candidates[..candidates.len().min(MAX_FILES_PER_ROUND)];
        let mut dirs: Vec<&Path> = candidates.iter().filter_map(|c| c.path.parent()).collect();
        dirs.dedup();
        for dir in dirs {
            let mine: Vec<Candidate> = candidates
                .iter()
                .filter(|c| c.path.parent() == Some(dir))
                .cloned()
                .collect();
            match compact(dir, &mine, &mut |_| {}) {
                Ok(done) if done.archives > 0 => {
                    report.rounds += 1;
                    report.archives += done.archives;
                    report.files_removed += done.files_removed;
                }
                Ok(_) => {}
                Err(e) => report.errors.push((dir.to_path_buf(), e.to_string())),
            }
        }
    }
}

/// Whether this process may remove a file of `owner`'s from a directory with
/// the sticky bit (`/tmp`-like): only its owner, the directory's, or root
/// may. A file that could not be removed after its archive is in place
/// would be counted twice, so it is not folded in.
fn removable_from_sticky(dir: &std::fs::Metadata, file: &std::fs::Metadata) -> bool {
    let me = std::fs::metadata("/proc/self").map_or(u32::MAX, |m| m.uid());
    me == 0 || me == file.uid() || me == dir.uid()
}

fn is_archive_path(path: &Path) -> bool {
    path.file_name()
        .and_then(|n| n.to_str())
        .is_some_and(is_archive_name)
}

/// Folds records of one kind by key, in the order met.
#[derive(Debug)]
struct Folder {
    fold: Fold,
    records: Vec<(String, f64, f64)>,
    index: HashMap<String, usize>,
}

impl Folder {
    fn new(fold: Fold) -> Self {
        Self {
            fold,
            records: Vec::new(),
            index: HashMap::new(),
        }
    }

    fn add(&mut self, records: &[crate::format::writer::Record]) {
        for record in records {
            let Some(&i) = self.index.get(&record.key) else {
                self.index.insert(record.key.clone(), self.records.len());
                let timestamp = if self.fold == Fold::MostRecent {
                    record.timestamp
                } else {
                    0.0
                };
                self.records
                    .push((record.key.clone(), record.value, timestamp));
                continue;
            };
            let (_, value, timestamp) = &mut self.records[i];
            match self.fold {
                Fold::Add => *value += record.value,
                Fold::Min => {
                    if record.value < *value {
                        *value = record.value;
                    }
                }
                Fold::Max => {
                    if record.value > *value {
                        *value = record.value;
                    }
                }
                Fold::MostRecent => {
                    // The first record's value stands while every timestamp
                    // is 0 (prometheus_client then shows none of them).
                    if record.timestamp > *timestamp {
                        *value = record.value;
                        *timestamp = record.timestamp;
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests;
