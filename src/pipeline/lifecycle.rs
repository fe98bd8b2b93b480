//! Between reading and merging: what the writers' lifecycle means for each
//! file ([`crate::source::writers`] says whether its writer is alive).
//!
//! * A dead writer's `live*` gauge files are left out, as if
//!   `mark_process_dead` had been called (unless the policy keeps them), and
//!   its `sum`, `min` and `max` gauge files too when the policy asks.
//! * A file shorter than its header whose writer is alive, or that is
//!   younger than the policy's grace period when liveness is unknown, is a
//!   file being created: pending, not a problem.
//! * Files, bytes and records are counted by writer state, and the live
//!   writers' standard `process_*` values are read.

use std::os::unix::fs::MetadataExt;
use std::path::Path;

use super::compaction::CompactionReport;
use crate::format::file_name::{is_archive_name, writer_pid, GaugeMode};
use crate::format::layout::LayoutError;
use crate::model::MetricFamily;
use crate::source::writers::{Visibility, WriterPolicy, WriterState, Writers, WrittenFile};
use crate::source::{Problem, ReadFile, SkipReason};

/// What one collection found about the writers.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct WriterReport {
    /// Whether writers could be seen.
    pub visibility: Option<Visibility>,
    /// Distinct writers (pids) by state, in [`WriterState::ALL`]'s order
    /// (files whose name gives no pid count as one unknown writer each).
    pub writers: [usize; 3],
    /// Files merged or left out for their writer's death, by state.
    pub files: [usize; 3],
    /// Their used bytes, by state.
    pub bytes: [u64; 3],
    /// Their records, by state (the share of a scrape's work).
    pub records: [usize; 3],
    /// Files being created (short, writer alive or file young).
    pub pending: usize,
    /// Dead writers' gauge files by mode: (mode, served, files).
    pub dead_gauge_files: Vec<(GaugeMode, bool, usize)>,
    /// The live writers' `process_*` families (empty unless asked for),
    /// read at most once a second ([`Writers::process_families`]).
    pub process_families: Vec<MetricFamily>,
    /// The version of that reading (0: none): equal versions, equal
    /// families.
    pub process_version: u64,
    /// What compaction did (`--dir.compact-dead-writers`).
    pub compaction: CompactionReport,
}

impl WriterReport {
    /// Adds another directory's report (its process families stay with its
    /// own families); writers are seen if they are in any directory.
    pub fn add(&mut self, other: &WriterReport) {
        for i in 0..3 {
            self.writers[i] += other.writers[i];
            self.files[i] += other.files[i];
            self.bytes[i] += other.bytes[i];
            self.records[i] += other.records[i];
        }
        self.pending += other.pending;
        self.compaction.add(&other.compaction);
        for &(mode, served, n) in &other.dead_gauge_files {
            match self
                .dead_gauge_files
                .iter_mut()
                .find(|(m, s, _)| *m == mode && *s == served)
            {
                Some(entry) => entry.2 += n,
                None => self.dead_gauge_files.push((mode, served, n)),
            }
        }
        self.dead_gauge_files
            .sort_by_key(|(mode, served, _)| (mode.as_str(), !*served));
        let rank = |v: Option<Visibility>| match v {
            Some(Visibility::Confirmed | Visibility::Assumed) => 3,
            Some(Visibility::Unconfirmed) => 2,
            Some(Visibility::Off) => 1,
            None => 0,
        };
        if rank(other.visibility) > rank(self.visibility) {
            self.visibility = other.visibility;
        }
    }
}

/// Index of a state in the report's arrays.
fn slot(state: WriterState) -> usize {
    WriterState::ALL
        .iter()
        .position(|s| *s == state)
        .unwrap_or(2)
}

fn seconds(time: std::io::Result<std::time::SystemTime>) -> Option<f64> {
    time.ok()?
        .duration_since(std::time::UNIX_EPOCH)
        .ok()
        .map(|d| d.as_secs_f64())
}

/// What the writer check needs of a file on disk (`None` if it is gone).
fn written(path: &Path) -> Option<WrittenFile> {
    let meta = std::fs::metadata(path).ok()?;
    let born = seconds(meta.created()).or_else(|| seconds(meta.modified()))?;
    let name = path.file_name()?.to_str()?;
    Some(WrittenFile {
        pid: writer_pid(name),
        identity: (meta.dev(), meta.ino()),
        born,
        archive: is_archive_name(name),
    })
}

/// The share of the files a collection skipped (frozen files of dead
/// writers, see [`crate::source::Skipped`]) in the report, worked out once
/// for a set of skipped files.
#[derive(Debug, Clone, Default)]
pub struct SkippedShare {
    /// Whether each skipped file takes part in the merge, in order.
    pub keep: Vec<bool>,
    /// Files, used bytes and records.
    files: usize,
    bytes: u64,
    records: usize,
    /// Their writers' pids, sorted, and the files whose name gives none.
    pids: Vec<u32>,
    unnamed: usize,
    /// Gauge files by mode: (mode, served, files).
    dead_gauges: Vec<(GaugeMode, bool, usize)>,
}

impl SkippedShare {
    /// The share of `files`, every one a dead writer's, under `policy`.
    pub fn new(policy: WriterPolicy, files: &[ReadFile<'_>]) -> Self {
        let mut share = SkippedShare::default();
        for file in files {
            share.files += 1;
            share.bytes += file.used_bytes as u64;
            share.records += file.merge.keys.len();
            match file_pid(file) {
                Some(pid) => share.pids.push(pid),
                None => share.unnamed += 1,
            }
            share
                .keep
                .push(keep_dead(policy, file, &mut share.dead_gauges));
        }
        share.pids.sort_unstable();
        share.pids.dedup();
        share
    }
}

/// The writer's pid, from the file's name (parsed when it was first read).
fn file_pid(file: &ReadFile<'_>) -> Option<u32> {
    file.merge.name.writer_pid
}

/// Whether a dead writer's `file` takes part in the merge under `policy`;
/// counts it in `dead_gauges` if it is a gauge file.
fn keep_dead(
    policy: WriterPolicy,
    file: &ReadFile<'_>,
    dead_gauges: &mut Vec<(GaugeMode, bool, usize)>,
) -> bool {
    let Some(mode) = file
        .merge
        .name
        .gauge_mode_name
        .as_deref()
        .and_then(GaugeMode::from_name)
    else {
        return true;
    };
    let kept = if mode.is_live() {
        policy.keep_dead_live_gauges
    } else {
        !(policy.drop_dead_gauges
            && matches!(mode, GaugeMode::Sum | GaugeMode::Min | GaugeMode::Max))
    };
    match dead_gauges
        .iter_mut()
        .find(|(m, k, _)| *m == mode && *k == kept)
    {
        Some(entry) => entry.2 += 1,
        None => dead_gauges.push((mode, kept, 1)),
    }
    kept
}

/// What one collection decided for the files read.
#[derive(Debug)]
pub struct Sorted {
    /// Whether each file takes part in the merge.
    pub keep: Vec<bool>,
    /// Whether each file's writer is dead (its values can no longer change).
    pub dead: Vec<bool>,
    /// What was found.
    pub report: WriterReport,
}

/// Decides, for one collection, which read files are merged and which
/// problems are only files being created; `problems` loses the pending
/// files. The `skipped` files' share is added to the report.
pub fn sort_out(
    writers: &mut Writers,
    files: &[ReadFile<'_>],
    skipped: Option<&SkippedShare>,
    problems: &mut Vec<(usize, Problem)>,
) -> Sorted {
    let policy = writers.policy();
    let mut report = WriterReport {
        visibility: Some(writers.visibility()),
        ..WriterReport::default()
    };
    // The files read, then the short files among the problems.
    let short: Vec<usize> = problems
        .iter()
        .enumerate()
        .filter(|(_, (_, p))| {
            matches!(
                p.reason,
                SkipReason::Layout(LayoutError::ShorterThanHeader { .. })
            )
        })
        .map(|(i, _)| i)
        .collect();
    let mut asked: Vec<WrittenFile> = files
        .iter()
        .map(|f| WrittenFile {
            pid: file_pid(f),
            identity: f.identity,
            born: f.born,
            archive: f.merge.name.archive,
        })
        .collect();
    let short_files: Vec<Option<WrittenFile>> = short
        .iter()
        .map(|&i| written(&problems[i].1.path))
        .collect();
    asked.extend(short_files.iter().flatten().copied());
    let census = match skipped {
        // The skipped files' dead verdicts stay (a pid reused by a later
        // writer of their files is looked for among them).
        Some(_) => writers.census_of_some(&asked),
        None => writers.census(&asked),
    };
    report.visibility = Some(writers.visibility());

    let mut keep = Vec::with_capacity(files.len());
    let mut pids: [Vec<u32>; 3] = Default::default();
    let mut dead_gauges: Vec<(GaugeMode, bool, usize)> = Vec::new();
    for (file, (state, written)) in files.iter().zip(census.states.iter().zip(&asked)) {
        let s = slot(*state);
        match written.pid {
            Some(pid) => pids[s].push(pid),
            None => report.writers[s] += 1,
        }
        report.files[s] += 1;
        report.bytes[s] += file.used_bytes as u64;
        report.records[s] += file.merge.keys.len();
        let kept = *state != WriterState::Dead || keep_dead(policy, file, &mut dead_gauges);
        keep.push(kept);
    }
    for p in &mut pids {
        p.sort_unstable();
        p.dedup();
    }
    if let Some(share) = skipped {
        let s = slot(WriterState::Dead);
        // A pid counts once, whether its files were skipped or read.
        pids[s].retain(|pid| share.pids.binary_search(pid).is_err());
        report.writers[s] += share.pids.len() + share.unnamed;
        report.files[s] += share.files;
        report.bytes[s] += share.bytes;
        report.records[s] += share.records;
        for &(mode, kept, n) in &share.dead_gauges {
            match dead_gauges
                .iter_mut()
                .find(|(m, k, _)| *m == mode && *k == kept)
            {
                Some(entry) => entry.2 += n,
                None => dead_gauges.push((mode, kept, n)),
            }
        }
    }
    for (s, p) in pids.iter().enumerate() {
        report.writers[s] += p.len();
    }
    dead_gauges.sort_by_key(|(mode, kept, _)| (mode.as_str(), !*kept));
    report.dead_gauge_files = dead_gauges;

    // Short files: pending when their writer is alive, or young while
    // liveness is unknown; a dead writer's stays a problem.
    let now = seconds(Ok(std::time::SystemTime::now())).unwrap_or(0.0);
    let mut short_states = census.states[files.len()..].iter();
    let mut pending = Vec::new();
    for (&index, written) in short.iter().zip(&short_files) {
        let Some(written) = written else { continue };
        let state = short_states.next().copied().unwrap_or(WriterState::Unknown);
        let young = now - written.born < policy.pending_grace.as_secs_f64();
        if state == WriterState::Live || (state == WriterState::Unknown && young) {
            pending.push(index);
        }
    }
    report.pending = pending.len();
    for index in pending.into_iter().rev() {
        problems.remove(index);
    }

    if policy.process_metrics && !census.live.is_empty() {
        let mut live = census.live.clone();
        live.dedup_by_key(|(pid, _)| *pid);
        let (families, version) = writers.process_families(&live);
        report.process_families = families.to_vec();
        report.process_version = version;
    }
    let dead = census.states[..files.len()]
        .iter()
        .map(|s| *s == WriterState::Dead)
        .collect();
    Sorted { keep, dead, report }
}
