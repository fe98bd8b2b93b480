//! The processes that write the files: which one wrote each file (the pid in
//! its name), and whether it is alive, decided from `/proc`.
//!
//! A file's writer is alive when a process with that pid exists, started no
//! later than the file was created (so a pid reused by a later process does
//! not revive a dead writer), and, where its open descriptors can be read,
//! holds the file open (prometheus_client keeps every file it writes open
//! for the life of the process). Pids are looked up directly in `/proc`, and
//! through each process's innermost pid (`NSpid`) when the exporter sees
//! nested pid namespaces (a DaemonSet with `hostPID`).
//!
//! Whether the writers' pid namespace is visible at all is decided, in the
//! default `auto` mode, by evidence: once a process is seen holding one of
//! the files its name says it wrote, absent processes mean dead writers.
//! Until then (another pid namespace, or descriptors that cannot be read)
//! every writer is `unknown` and the output is prometheus_client's. The
//! `proc` mode trusts `/proc` without that evidence (a sidecar sharing the
//! pod's pid namespace but running as another user); `off` never looks.
//!
//! This module is the one owner of liveness: the live gauges, the dead
//! gauges, the process metrics, the temporary runs
//! ([`crate::source::temporary`]) and their removal
//! (`crate::pipeline::compaction::stale_runs`) all ask it, none decides on
//! its own. Where pids cannot be seen, a group of files (a temporary run) is
//! told live by its content changing ([`activity`]), never by its
//! modification time (writes through `mmap` do not move it).
//!
//! The process that collects is a writer only where it may write: the
//! standalone exporter never writes metric files (and holds every file it
//! reads open, which would make it look like any file's writer), so its own
//! pid is never a candidate; the Python drop-in collects inside the
//! application (a gunicorn or uvicorn worker serving `/metrics`), whose own
//! files are live ([`WriterPolicy::collector_writes`]).

pub mod activity;
pub mod evidence;
pub mod procfs;
mod sampled;
#[cfg(test)]
pub(crate) mod scripted;

pub use sampled::PROCESS_SAMPLE_INTERVAL;

use crate::model::MetricFamily;
use evidence::{Evidence, ProcessHandle};
use rustc_hash::FxHashMap as HashMap;
use sampled::ProcessSampler;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// How the liveness of writers is decided (`--writers.liveness`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum LivenessMode {
    /// From `/proc` once a writer is seen holding its file; until then unknown.
    #[default]
    Auto,
    /// From `/proc`, trusted without evidence (the pid namespace is shared).
    Proc,
    /// Never: every writer is unknown (prometheus_client's semantics).
    Off,
}

/// What the exporter does about writers (validated settings).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct WriterPolicy {
    /// How liveness is decided.
    pub liveness: LivenessMode,
    /// Serve a dead writer's `live*` gauges anyway (prometheus_client's
    /// output when nobody calls `mark_process_dead`).
    pub keep_dead_live_gauges: bool,
    /// Leave out a dead writer's `sum`, `min` and `max` gauges.
    pub drop_dead_gauges: bool,
    /// Serve the standard `process_*` metrics of the live writers.
    pub process_metrics: bool,
    /// How old a file shorter than its header may be, while its writer's
    /// liveness is unknown, and still be taken for one being created
    /// (pending, not a problem). Zero: never.
    pub pending_grace: Duration,
    /// Fold dead writers' values into a cached base once instead of adding
    /// them in file order at every collection (sums may then differ from
    /// prometheus_client's in their last bits).
    pub fold_dead: bool,
    /// Fold dead writers' files into archive files in the directory
    /// (`--dir.compact-dead-writers`; see `crate::pipeline::compaction`).
    pub compact_dead: bool,
    /// Read the current run among the directory's temporary subdirectories
    /// with it, and leave out the stale ones (see
    /// [`crate::source::temporary`]); `--dir.ignore-temporary-subdirectories`
    /// turns it off.
    pub temporary_runs: bool,
    /// Remove the stale runs (`--dir.remove-stale-subdirectories`; see
    /// `crate::pipeline::compaction::stale_runs`).
    pub remove_stale_runs: bool,
    /// The collecting process may itself write metric files (the Python
    /// drop-in inside a gunicorn or uvicorn worker that serves `/metrics`):
    /// a file named with its own pid that it holds open for writing is a
    /// live writer's. `false` for the standalone exporter, which writes no
    /// metric file and holds the files it reads open.
    pub collector_writes: bool,
}

impl Default for WriterPolicy {
    fn default() -> Self {
        Self {
            liveness: LivenessMode::Auto,
            keep_dead_live_gauges: false,
            drop_dead_gauges: false,
            process_metrics: true,
            pending_grace: Duration::from_secs(10),
            fold_dead: true,
            compact_dead: false,
            temporary_runs: true,
            remove_stale_runs: false,
            collector_writes: false,
        }
    }
}

impl WriterPolicy {
    /// prometheus_client's semantics: no liveness, nothing dropped, no
    /// process metrics, every short file a problem (a temporary
    /// subdirectory's current run is read, as the application's own
    /// collector reads the directory it writes).
    pub fn exact() -> Self {
        Self {
            liveness: LivenessMode::Off,
            keep_dead_live_gauges: true,
            drop_dead_gauges: false,
            process_metrics: false,
            pending_grace: Duration::ZERO,
            fold_dead: false,
            compact_dead: false,
            temporary_runs: true,
            remove_stale_runs: false,
            collector_writes: false,
        }
    }
}

/// A writer's state, as the `state` label says it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum WriterState {
    /// Its process is running.
    Live,
    /// Its process has exited (its files can no longer change).
    Dead,
    /// Its process cannot be seen (or the name gives no pid).
    Unknown,
}

impl WriterState {
    /// Every state, in the order the self-metrics list them.
    pub const ALL: [WriterState; 3] = [Self::Live, Self::Dead, Self::Unknown];

    /// The `state` label value.
    pub fn label(self) -> &'static str {
        match self {
            Self::Live => "live",
            Self::Dead => "dead",
            Self::Unknown => "unknown",
        }
    }
}

/// Whether the writers' processes can be seen, as last decided.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Visibility {
    /// `--writers.liveness=off`.
    Off,
    /// No writer seen holding its file yet: states are unknown.
    Unconfirmed,
    /// A writer was seen holding its file: `/proc` is trusted.
    Confirmed,
    /// `--writers.liveness=proc`: `/proc` is trusted.
    Assumed,
}

/// A file whose writer is asked about.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct WrittenFile {
    /// The writer's pid, from the file's name.
    pub pid: Option<u32>,
    /// The file's device and inode.
    pub identity: (u64, u64),
    /// When the file was created (or last changed, where the file system
    /// keeps no birth time), in seconds since the Unix epoch.
    pub born: f64,
    /// An archive the exporter's compaction wrote (`counter_archive.db`):
    /// dead writers' values, final.
    pub archive: bool,
}

impl WrittenFile {
    /// What tells this file from any other: device, inode and creation time.
    pub fn key(&self) -> (u64, u64, u64) {
        (self.identity.0, self.identity.1, self.born.to_bits())
    }
}

/// A process's start time and a file's creation time are each read to a few
/// hundredths of a second ([`procfs::START_TIME_PRECISION_SECONDS`]): a
/// process that seems to have started this much after a file was created may
/// still have created it. A pid reused within this time is not told from its
/// first process.
const START_SLACK_SECONDS: f64 = procfs::START_TIME_PRECISION_SECONDS;

/// How long a pid's lookup in `/proc` is reused for files not decided yet.
const LOOKUP_TTL: Duration = Duration::from_secs(2);

/// How often the pids of dead writers are looked for among the running
/// processes ([`Writers::revived`]).
const REVIVAL_INTERVAL: Duration = Duration::from_secs(5);

/// How often the table of nested pid namespaces is rebuilt.
const NAMESPACE_TABLE_TTL: Duration = Duration::from_secs(30);

/// A process that may be a file's writer.
#[derive(Clone, Debug)]
struct Candidate {
    /// Its pid as the exporter sees it.
    host: u32,
    /// When it started, in seconds since boot.
    start: f64,
    /// The files it holds open; `None` if they cannot be read.
    open: Option<Vec<procfs::OpenFile>>,
    /// The collecting process itself ([`WriterPolicy::collector_writes`]):
    /// it holds the files it reads open, so only a descriptor open for
    /// writing makes it a file's writer.
    own: bool,
}

/// What is known of a file's writer.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Verdict {
    /// Alive as the process `host` started at `start` (rechecked each time).
    Alive { host: u32, start: f64 },
    /// Dead: final (the file can no longer change) unless a process of the
    /// pid holds the file again ([`Writers::revived`]).
    Dead { pid: u32 },
}

/// The innermost pids of processes in nested pid namespaces.
#[derive(Debug, Default)]
struct NamespaceTable {
    built: Option<Instant>,
    /// When it was built, in seconds since boot (to compare with file
    /// creation times).
    built_boot: f64,
    /// Innermost pid -> pids as the exporter sees them (only processes whose
    /// innermost pid differs from the exporter's view).
    nested: HashMap<u32, Vec<u32>>,
}

/// Tracks the writers of a set of files across collections.
#[derive(Debug)]
pub struct Writers {
    policy: WriterPolicy,
    visibility: Visibility,
    /// By device, inode and creation time (an inode number is reused by
    /// a later file once the old one is deleted).
    verdicts: HashMap<(u64, u64, u64), Verdict>,
    /// Candidates by pid: when looked up (monotonic, and seconds since boot,
    /// to compare with file creation times).
    lookups: HashMap<u32, (Instant, f64, Vec<Candidate>)>,
    namespaces: NamespaceTable,
    self_pid: u32,
    /// When [`Self::revived`] last looked.
    revival_checked: Option<Instant>,
    /// Live writers' processes, kept open: one `pread` per scrape tells each
    /// is still the same process.
    handles: HashMap<u32, Box<dyn ProcessHandle>>,
    /// The live writers' `process_*` values, read once a second at most.
    sampler: ProcessSampler,
    /// Groups of files whose content is watched where pids cannot be seen.
    activity: activity::Activity,
    /// Where every piece of evidence comes from.
    evidence: Arc<dyn Evidence>,
    /// How much of a run's files the content check reads.
    content_limits: evidence::ContentLimits,
}

/// What the writers of a group of files (a temporary run) are known to be.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RunState {
    /// One of its writers is seen alive.
    Live,
    /// Pids cannot be seen, and its content moved within
    /// [`activity::ACTIVE_WINDOW`]: being written.
    Changing,
    /// Every one of its writers is seen to have exited (pids visible):
    /// positive evidence, the only one that allows removing it.
    Dead,
    /// Nothing is known (pids cannot be seen and its content is still).
    Unknown,
}

/// The states of one collection's files, and the live writers' processes.
#[derive(Debug, Default, Clone, PartialEq)]
pub struct Census {
    /// Each file's writer state, in the order asked.
    pub states: Vec<WriterState>,
    /// Live writers: (pid from the file names, pid as the exporter sees it).
    pub live: Vec<(u32, u32)>,
}

impl Writers {
    /// A tracker applying `policy`, to the running system's processes.
    pub fn new(policy: WriterPolicy) -> Self {
        Self::with_evidence(policy, evidence::system())
    }

    /// A tracker applying `policy`, deciding from `evidence`.
    pub fn with_evidence(policy: WriterPolicy, evidence: Arc<dyn Evidence>) -> Self {
        let visibility = match policy.liveness {
            LivenessMode::Auto => Visibility::Unconfirmed,
            LivenessMode::Proc => Visibility::Assumed,
            LivenessMode::Off => Visibility::Off,
        };
        Self {
            policy,
            visibility,
            verdicts: HashMap::default(),
            lookups: HashMap::default(),
            namespaces: NamespaceTable::default(),
            self_pid: evidence.own_pid(),
            revival_checked: None,
            handles: HashMap::default(),
            content_limits: evidence::ContentLimits::default(),
            sampler: ProcessSampler::default(),
            activity: activity::Activity::default(),
            evidence,
        }
    }

    /// Where the evidence comes from.
    pub fn evidence(&self) -> &Arc<dyn Evidence> {
        &self.evidence
    }

    /// The start time of process `host` (seconds since boot), from its kept
    /// handle while that process lives, else from a newly opened one (kept
    /// in turn); `None` if no process has that pid, or if the kept one has
    /// exited (once: the next call opens a handle on its successor).
    fn current_start(&mut self, host: u32) -> Option<f64> {
        if let Some(kept) = self.handles.get(&host) {
            if let Some(start) = kept.start_time() {
                return Some(start);
            }
            // The process it was kept for is gone: whatever has its pid now
            // is another one (even one started within the same clock tick).
            self.handles.remove(&host);
            return None;
        }
        let handle = self.evidence.handle(host)?;
        let start = handle.start_time();
        self.handles.insert(host, handle);
        start
    }

    /// When `file` was born, in seconds since boot: converted from the wall
    /// clock the first time the process saw it ([`evidence::Births`]).
    fn born(&self, file: &WrittenFile) -> f64 {
        self.evidence
            .births()
            .boot_birth(&*self.evidence, file.identity, file.born)
    }

    /// Seconds since boot now (0 if the clock cannot be read).
    fn boot_now(&self) -> f64 {
        self.evidence.clocks().map_or(0.0, |(boot, _)| boot)
    }

    /// What the writers of the run `run` are, from its files' writer
    /// `states` (a census of them) and, where pids cannot be seen, from its
    /// content (`files`) moving.
    pub fn run_state(&mut self, run: &Path, files: &[&Path], states: &[WriterState]) -> RunState {
        if states.contains(&WriterState::Live) {
            return RunState::Live;
        }
        if self.pids_visible()
            && !states.is_empty()
            && states.iter().all(|s| *s == WriterState::Dead)
        {
            return RunState::Dead;
        }
        // Not known: its content moving tells (where pids are seen too, for
        // writers that could not be told from a later process).
        let now = self.evidence.now();
        let (evidence, limits) = (self.evidence.clone(), self.content_limits);
        if self
            .activity
            .changing(run, now, || evidence.content(files, limits))
        {
            RunState::Changing
        } else {
            RunState::Unknown
        }
    }

    /// Forgets the content of the runs `keep` does not keep.
    pub fn retain_runs(&mut self, keep: impl Fn(&Path) -> bool) {
        self.activity.retain(keep);
    }

    /// Whether the content of `run` was looked at already.
    pub fn looked_at(&self, run: &Path) -> bool {
        self.activity.known(run)
    }

    /// Looks at the content of `run`'s `files` again now, whenever it was
    /// last looked at (a second look shortly after the first).
    pub fn look_again(&mut self, run: &Path, files: &[&Path]) {
        let now = self.evidence.now();
        let (evidence, limits) = (self.evidence.clone(), self.content_limits);
        self.activity
            .look_again(run, now, || evidence.content(files, limits));
    }

    /// Reads at most `limits` of a run's files to tell their content moved.
    pub fn set_content_limits(&mut self, limits: evidence::ContentLimits) {
        self.content_limits = limits;
    }

    /// The policy applied.
    pub fn policy(&self) -> WriterPolicy {
        self.policy
    }

    /// Whether writers can be seen, as last decided.
    pub fn visibility(&self) -> Visibility {
        self.visibility
    }

    /// Whether the writers' pids can be seen (`/proc` is trusted): only then
    /// is a writer known to be dead.
    pub fn pids_visible(&self) -> bool {
        matches!(self.visibility, Visibility::Confirmed | Visibility::Assumed)
    }

    /// The state of each file's writer. Dead verdicts are kept (a dead
    /// writer's file cannot change); live ones are checked again each time
    /// (one read of the process's start time).
    pub fn census(&mut self, files: &[WrittenFile]) -> Census {
        self.census_of(files, true)
    }

    /// [`Self::census`] of some of the files only (the others were skipped,
    /// their writers known dead): what was decided about the others is kept.
    pub fn census_of_some(&mut self, files: &[WrittenFile]) -> Census {
        self.census_of(files, false)
    }

    fn census_of(&mut self, files: &[WrittenFile], all: bool) -> Census {
        if self.visibility == Visibility::Off {
            return Census {
                states: vec![WriterState::Unknown; files.len()],
                live: Vec::new(),
            };
        }
        let now = self.evidence.now();
        let unconfirmed = self.visibility == Visibility::Unconfirmed;
        let mut starts: HashMap<u32, Option<f64>> = HashMap::default();
        let mut states = Vec::with_capacity(files.len());
        let mut live: Vec<(u32, u32)> = Vec::new();
        for file in files {
            if file.archive {
                states.push(WriterState::Dead);
                continue;
            }
            let Some(pid) = file.pid else {
                states.push(WriterState::Unknown);
                continue;
            };
            let state = match self.verdicts.get(&file.key()).copied() {
                Some(Verdict::Dead { .. }) => WriterState::Dead,
                Some(Verdict::Alive { host, start }) => {
                    let current = match starts.get(&host) {
                        Some(current) => *current,
                        None => {
                            let current = self.current_start(host);
                            starts.insert(host, current);
                            current
                        }
                    };
                    if current == Some(start) {
                        live.push((pid, host));
                        WriterState::Live
                    } else {
                        self.verdicts.remove(&file.key());
                        self.lookups.remove(&pid);
                        self.decide(pid, file, now, &mut live)
                    }
                }
                None => self.decide(pid, file, now, &mut live),
            };
            states.push(state);
        }
        // Evidence found on a file listed after others: decide those again.
        if unconfirmed && self.visibility == Visibility::Confirmed {
            for (file, state) in files.iter().zip(states.iter_mut()) {
                if let (WriterState::Unknown, Some(pid)) = (*state, file.pid) {
                    *state = self.decide(pid, file, now, &mut live);
                }
            }
        }
        // Forget what no file asked about (vanished files, exited pids).
        if all && self.verdicts.len() > 2 * files.len() + 1024 {
            let asked: std::collections::HashSet<(u64, u64, u64)> =
                files.iter().map(WrittenFile::key).collect();
            self.verdicts.retain(|id, _| asked.contains(id));
        }
        self.lookups
            .retain(|_, (at, _, _)| now.duration_since(*at) < LOOKUP_TTL);
        if all {
            let alive: std::collections::HashSet<u32> = self
                .verdicts
                .values()
                .filter_map(|v| match v {
                    Verdict::Alive { host, .. } => Some(*host),
                    Verdict::Dead { .. } => None,
                })
                .collect();
            self.handles.retain(|host, _| alive.contains(host));
        }
        live.sort_unstable();
        live.dedup();
        Census { states, live }
    }

    /// The `process_*` families of the `live` writers of a census (one entry
    /// per pid), read from `/proc` at most once every
    /// [`PROCESS_SAMPLE_INTERVAL`] (at once when the live writers change),
    /// and the reading's version: equal versions, equal families.
    pub fn process_families(&mut self, live: &[(u32, u32)]) -> (&[MetricFamily], u64) {
        let now = self.evidence.now();
        self.sampler.families(live, now)
    }

    /// Looks (at most every few seconds) for a running process with a dead
    /// writer's pid that holds one of that writer's files open: a later
    /// process given the pid that opened the file again, as prometheus_client
    /// does with an existing file of its pid, writes to it. Its dead verdicts
    /// are forgotten (the next census decides afresh) and the pids returned,
    /// so that their files are no longer taken as final.
    pub fn revived(&mut self) -> Vec<u32> {
        let now = self.evidence.now();
        let due = self
            .revival_checked
            .is_none_or(|at| now.duration_since(at) >= REVIVAL_INTERVAL);
        if !due || !matches!(self.visibility, Visibility::Confirmed | Visibility::Assumed) {
            return Vec::new();
        }
        self.revival_checked = Some(now);
        let mut dead: HashMap<u32, Vec<(u64, u64)>> = HashMap::default();
        for (&(device, inode, _), verdict) in &self.verdicts {
            if let Verdict::Dead { pid } = *verdict {
                dead.entry(pid).or_default().push((device, inode));
            }
        }
        if dead.is_empty() {
            return Vec::new();
        }
        if self
            .namespaces
            .built
            .is_none_or(|at| now.duration_since(at) >= NAMESPACE_TABLE_TTL)
        {
            self.namespaces = NamespaceTable::build(&*self.evidence, now);
        }
        let mut revived = Vec::new();
        for host in self.evidence.processes() {
            if self.excluded(host) {
                continue;
            }
            let mut pids: Vec<u32> = Vec::new();
            if dead.contains_key(&host) {
                pids.push(host);
            }
            for (inner, hosts) in &self.namespaces.nested {
                if hosts.contains(&host) && dead.contains_key(inner) {
                    pids.push(*inner);
                }
            }
            if pids.is_empty() {
                continue;
            }
            let Some(open) = self.evidence.open_files(host) else {
                continue;
            };
            for pid in pids {
                // Held for writing: prometheus_client opened it again.
                let held = dead.get(&pid).is_some_and(|files| {
                    open.iter()
                        .any(|o| o.writable && files.contains(&o.identity))
                });
                if held {
                    revived.push(pid);
                }
            }
        }
        revived.sort_unstable();
        revived.dedup();
        if !revived.is_empty() {
            self.verdicts.retain(|_, verdict| {
                !matches!(verdict, Verdict::Dead { pid } if revived.binary_search(pid).is_ok())
            });
            for pid in &revived {
                self.lookups.remove(pid);
            }
        }
        revived
    }

    /// Whether a running process has `pid`, as the exporter sees pids or as
    /// the innermost pid of a nested namespace (as last tabulated).
    pub fn pid_in_use(&self, pid: u32) -> bool {
        (!self.evidence.own_task(pid) && self.evidence.start_time(pid).is_some())
            || self.namespaces.nested.contains_key(&pid)
    }

    /// Whether process `host` can be no writer: a task of the exporter's own
    /// thread group (its pid, unless the collector writes, or any of its
    /// threads: their ids are pids in `/proc` too).
    fn excluded(&self, host: u32) -> bool {
        if host == self.self_pid {
            return !self.policy.collector_writes;
        }
        self.evidence.own_task(host)
    }

    fn decide(
        &mut self,
        pid: u32,
        file: &WrittenFile,
        now: Instant,
        live: &mut Vec<(u32, u32)>,
    ) -> WriterState {
        let born = self.born(file);
        let kept = self
            .lookups
            .get(&pid)
            .is_some_and(|(at, _, _)| now.duration_since(*at) < LOOKUP_TTL);
        let mut candidates = self.candidates(pid, now, false);
        let (mut holder, mut possible, mut later) = Self::weigh(&candidates, file, born);
        if holder.is_none() && possible.is_none() && !later && kept {
            // A kept lookup may predate the file (a writer opens files as
            // its metrics are first used; the clocks cannot tell when a
            // wall clock stepped): look again before calling it dead.
            candidates = self.candidates(pid, now, true);
            (holder, possible, later) = Self::weigh(&candidates, file, born);
        }
        if holder.is_none()
            && possible.is_none()
            && self.namespaces.built_boot < born + START_SLACK_SECONDS
        {
            // The table of nested pid namespaces may predate the writer (a
            // process started since in a pod, seen with hostPID): build it
            // again before calling it dead (once per file born after it).
            self.namespaces = NamespaceTable::build(&*self.evidence, now);
            candidates = self.candidates(pid, now, true);
            (holder, possible, later) = Self::weigh(&candidates, file, born);
        }
        let trusted = matches!(self.visibility, Visibility::Confirmed | Visibility::Assumed);
        if holder.is_none()
            && possible.is_none()
            && !later
            && trusted
            && self.namespaces.built.is_none_or(|at| at < now)
        {
            // About to be called dead, for good: looked for in a table of
            // this collection. The check above compares the file's birth
            // with the table's in the boot clock, and a wall clock stepped
            // forward between the birth and its first sight moves the
            // birth back (issue 53: a live writer seen only through its
            // pod's namespace was called dead). At most once a collection.
            self.namespaces = NamespaceTable::build(&*self.evidence, now);
            candidates = self.candidates(pid, now, true);
            (holder, possible, later) = Self::weigh(&candidates, file, born);
        }
        if holder.is_some() && self.visibility == Visibility::Unconfirmed {
            self.visibility = Visibility::Confirmed;
        }
        let trusted = matches!(self.visibility, Visibility::Confirmed | Visibility::Assumed);
        // The holder, or else (trusted) a process whose files cannot be read.
        if let Some(i) = holder.or(possible.filter(|_| trusted)) {
            let (host, start) = (candidates[i].host, candidates[i].start);
            // Kept from now on: a successor given its pid, even within the
            // same clock tick, is never taken for it.
            if self.current_start(host) != Some(start) {
                return WriterState::Unknown;
            }
            self.verdicts
                .insert(file.key(), Verdict::Alive { host, start });
            live.push((pid, host));
            return WriterState::Live;
        }
        match possible {
            Some(_) => WriterState::Unknown,
            // A process of the pid runs, told from the writer by clocks only
            // (a pid given again, or a wall clock stepped since the file was
            // born): not known dead.
            None if later => WriterState::Unknown,
            None if trusted => {
                self.verdicts.insert(file.key(), Verdict::Dead { pid });
                WriterState::Dead
            }
            None => WriterState::Unknown,
        }
    }

    /// Among `candidates`: the one holding `file` open, the first whose open
    /// files cannot be read, and whether one whose open files cannot be read
    /// seems to have started after the file was created (only the clocks
    /// say so: no evidence that the writer is dead). A process that started after the file was
    /// created is not its writer (its pid was reused), unless it holds the
    /// file open for writing: prometheus_client in a later process given a
    /// dead writer's pid opens that writer's files again and writes to them.
    fn weigh(
        candidates: &[Candidate],
        file: &WrittenFile,
        born: f64,
    ) -> (Option<usize>, Option<usize>, bool) {
        let mut holder = None;
        let mut possible = None;
        let mut later = false;
        for (i, c) in candidates.iter().enumerate() {
            let earlier = c.start <= born + START_SLACK_SECONDS;
            match &c.open {
                Some(open) => {
                    let held = open.iter().any(|o| {
                        o.identity == file.identity && ((earlier && !c.own) || o.writable)
                    });
                    if held {
                        holder = Some(i);
                    }
                }
                None if earlier => possible = possible.or(Some(i)),
                None => later = true,
            }
        }
        (holder, possible, later)
    }

    /// The processes that may have written files named with `pid`: the
    /// process of that pid (if it is no task of the exporter's own thread
    /// group), and those whose innermost pid it is in a nested namespace.
    /// Looked up again when `fresh` or older than [`LOOKUP_TTL`].
    fn candidates(&mut self, pid: u32, now: Instant, fresh: bool) -> Vec<Candidate> {
        if let Some((at, _, found)) = self.lookups.get(&pid) {
            if !fresh && now.duration_since(*at) < LOOKUP_TTL {
                let found = found.clone();
                // Kept only while each of its processes still runs (one may
                // have exited, and its pid been given again).
                if found
                    .iter()
                    .all(|c| self.current_start(c.host) == Some(c.start))
                {
                    return found;
                }
            }
        }
        let boot = self.boot_now();
        let mut hosts = Vec::new();
        if !self.excluded(pid) {
            hosts.push(pid);
        }
        let stale = self
            .namespaces
            .built
            .is_none_or(|at| now.duration_since(at) >= NAMESPACE_TABLE_TTL);
        if stale {
            self.namespaces = NamespaceTable::build(&*self.evidence, now);
        }
        if let Some(nested) = self.namespaces.nested.get(&pid) {
            hosts.extend(nested.iter().copied());
        }
        let found: Vec<Candidate> = hosts
            .into_iter()
            .filter_map(|host| {
                let start = self.evidence.start_time(host)?;
                Some(Candidate {
                    host,
                    start,
                    open: self.evidence.open_files(host),
                    own: host == self.self_pid,
                })
            })
            .collect();
        self.lookups.insert(pid, (now, boot, found.clone()));
        found
    }
}

impl NamespaceTable {
    /// Reads every process's innermost pid; keeps those that differ from
    /// the exporter's view of them.
    fn build(evidence: &dyn Evidence, now: Instant) -> Self {
        let mut nested: HashMap<u32, Vec<u32>> = HashMap::default();
        for host in evidence.processes() {
            if evidence.own_task(host) {
                continue;
            }
            if let Some(inner) = evidence.innermost_pid(host) {
                if inner != host {
                    nested.entry(inner).or_default().push(host);
                }
            }
        }
        Self {
            built: Some(now),
            built_boot: evidence.clocks().map_or(0.0, |(boot, _)| boot),
            nested,
        }
    }
}

#[cfg(test)]
mod tests;
