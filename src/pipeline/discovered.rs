//! Serving every multiprocess directory found on the node through `/proc`,
//! each merged on its own and labelled with its pod (`serve
//! --discover.processes`, the node agent of issue 30).
//!
//! [`crate::source::discover`] finds the directories ([`Discovery`]: one
//! target per directory that some process holds multiprocess files of, kept
//! open so that it stays readable after its writers exit, named from the
//! holder's cgroup and the kubelet's log tree). This reader re-scans `/proc`
//! every `--discover.interval`, and at once when a collection finds that a
//! holder of the last scan has exited (checked at most once a second); then
//! it reads each target through the path discovery gives
//! (`/proc/self/fd/<n>`), following no symbolic link
//! ([`LinkPolicy::NoLinks`]), with the machinery of `--dir.subdirectories-label`
//! ([`super::parts`]): one [`crate::pipeline::Collector`] per part, exactly
//! as prometheus_client would merge that directory alone, with its own writer
//! liveness and `process_*` values, then every part's samples labelled and
//! combined.
//!
//! # Labels
//!
//! A part is the targets with the same labels
//! ([`super::discovered_labels`]): a pod's container (its directories merged
//! together, as prometheus_client would merge one directory holding all of
//! their files, so the output never holds the same series twice), or, outside
//! Kubernetes, one directory with its owner (container ID, systemd unit or
//! command name) and its path. The label names are configurable
//! (`--discover.*-label`; empty leaves one out).

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::model::Label;
pub use crate::pipeline::discovered_labels::{
    label_targets, target_labels, DiscoverLabels, LabelledTarget, Suffixed, DIRECTORY_LABEL,
    PROCESS_LABEL, UNIT_LABEL,
};
use crate::pipeline::parts::{Capped, PartCaps, PartReaders, PartSpec, PartsCollection, Pin};
use crate::source::descriptors;
use crate::source::discover::{
    Decision, DirId, Discovery, DiscoveryOptions, PodLogs, Problem, Processes, Refresh, Retention,
    Target,
};
use crate::source::link_policy::LinkPolicy;
use crate::source::writers::WriterPolicy;
use crate::source::{Input, MemoryBudget};
use crate::transform::config::PerWriter as PerWriterConfig;

/// How holders are checked for having exited between two scans, at most.
pub const HOLDER_CHECK_INTERVAL: Duration = Duration::from_secs(1);

/// What `--discover.*` asks for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DiscoverOptions {
    /// The kubelet's pod log directory (`--discover.pod-log-dir`); its
    /// sibling `containers` holds the kubelet's container links. `None`:
    /// pods are not named.
    pub pod_log_dir: Option<PathBuf>,
    /// How often `/proc` is scanned (`--discover.interval`).
    pub interval: Duration,
    /// How long a directory whose writers all exited is kept when its pod
    /// is not known (`--discover.linger`).
    pub linger: Duration,
    /// The labels' names.
    pub labels: DiscoverLabels,
    /// What one part (a pod's container, a container, a process) may cost.
    pub caps: DiscoverCaps,
    /// The longest a scrape may take (`--web.scrape-timeout`; Prometheus's
    /// `X-Prometheus-Scrape-Timeout-Seconds` when shorter): every part's
    /// collection gets [`PART_SHARE`] of it.
    pub scrape_timeout: Duration,
    /// The oldest a late part's last collection may be to be served in its
    /// place (`--discover.late-max-age`; default three scrape timeouts):
    /// past it, the part is left out.
    pub late_max_age: Duration,
}

impl Default for DiscoverOptions {
    fn default() -> Self {
        Self {
            pod_log_dir: Some(crate::source::discover::pods::DEFAULT_POD_LOG_DIR.into()),
            interval: Duration::from_secs(10),
            linger: Retention::DEFAULT_LINGER,
            labels: DiscoverLabels::default(),
            caps: DiscoverCaps::default(),
            scrape_timeout: DEFAULT_SCRAPE_TIMEOUT,
            late_max_age: crate::pipeline::parts::DEFAULT_MAX_LATE_AGE,
        }
    }
}

/// The default `--web.scrape-timeout`: Prometheus's default scrape timeout.
pub const DEFAULT_SCRAPE_TIMEOUT: Duration = Duration::from_secs(10);

/// The share of the scrape timeout every part's collection gets (they run
/// side by side), counted from the scrape's start; the rest is for the
/// scan, combining, encoding and the network (see `parts_deadline`).
pub const PART_SHARE: f64 = 0.5;

/// What one part may cost the node agent (`None`: no cap).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DiscoverCaps {
    /// Directories read per part (`--discover.max-directories-per-pod`): the
    /// oldest are read, the newer ones left out and not kept open.
    pub max_directories: Option<usize>,
    /// Files per part (`--discover.max-files-per-pod`).
    pub max_files: Option<usize>,
    /// Samples per part (`--discover.max-series-per-pod`).
    pub max_series: Option<usize>,
    /// Descriptors kept free for serving, which kept directories never take
    /// (`--discover.reserved-descriptors`).
    pub reserved_descriptors: usize,
}

impl DiscoverCaps {
    /// The default directories per part: a vLLM pod writes one, a few more
    /// over its containers' restarts.
    pub const MAX_DIRECTORIES: usize = 16;
    /// The default files per part: a vLLM pod with tens of processes writes
    /// a few thousand over its life.
    pub const MAX_FILES: usize = 10_000;
    /// The default samples per part: a vLLM pod serves some ten thousand,
    /// a few hundred thousand with many models and adapters.
    pub const MAX_SERIES: usize = 500_000;
    /// The default reserve of descriptors.
    pub const RESERVED_DESCRIPTORS: usize = 256;
}

impl Default for DiscoverCaps {
    fn default() -> Self {
        Self {
            max_directories: Some(Self::MAX_DIRECTORIES),
            max_files: Some(Self::MAX_FILES),
            max_series: Some(Self::MAX_SERIES),
            reserved_descriptors: Self::RESERVED_DESCRIPTORS,
        }
    }
}

/// What a target is at a collection.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum TargetState {
    /// A process holds its files.
    Held,
    /// No process does; kept while its pod exists.
    PodExists,
    /// No process does and its pod is not known; kept for the linger period.
    Lingering,
    /// Found, but it cannot be read (no path reaches it, or it cannot be
    /// listed).
    Unreadable,
    /// Left out: its part has `--discover.max-directories-per-pod` older
    /// ones.
    Capped,
    /// Left out: a temporary subdirectory of an earlier run of its
    /// container's server (SGLang, TensorRT-LLM), superseded by a newer run
    /// (see `superseded_runs`).
    Stale,
}

impl TargetState {
    /// Every state, in a fixed order (for metrics that list them all).
    pub const ALL: [TargetState; 6] = [
        Self::Held,
        Self::PodExists,
        Self::Lingering,
        Self::Unreadable,
        Self::Capped,
        Self::Stale,
    ];

    /// A stable label for logs and metrics.
    pub fn label(self) -> &'static str {
        match self {
            Self::Held => "held",
            Self::PodExists => "pod_exists",
            Self::Lingering => "lingering",
            Self::Unreadable => "unreadable",
            Self::Capped => "capped",
            Self::Stale => "stale",
        }
    }
}

/// One discovered directory, as the logs and metrics see it.
#[derive(Debug, Clone, PartialEq)]
pub struct TargetReport {
    /// Its part's name (`namespace/pod/container`, `container <id>`,
    /// `process <command>`).
    pub part: Arc<str>,
    /// Its part's labels.
    pub labels: Vec<Label>,
    /// Its path in its writers' mount namespace.
    pub dir: PathBuf,
    /// That mount namespace's inode.
    pub mount_ns: Option<u64>,
    /// Its holders at the last scan (pids as the exporter sees them).
    pub holders: Vec<u32>,
    /// What it is now.
    pub state: TargetState,
    /// When it was found.
    pub found: std::time::SystemTime,
}

/// Something a scan could not do, as logs and metrics take it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProblemReport {
    /// [`Problem::label`].
    pub label: &'static str,
    /// What it is about (the same at every scan while it lasts).
    pub key: String,
    /// The whole message.
    pub message: String,
    /// The pod log directory does not exist (not a Kubernetes node?).
    pub not_found: bool,
}

/// Why a scan ran.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RefreshCause {
    /// The first collection.
    First,
    /// `--discover.interval` passed.
    Period,
    /// A holder of the last scan exited.
    HolderGone,
}

/// One scan of `/proc` and what it changed.
#[derive(Debug, Clone)]
pub struct RefreshReport {
    /// Why it ran.
    pub cause: RefreshCause,
    /// Processes whose descriptors were read.
    pub processes: usize,
    /// Descriptors read.
    pub descriptors: usize,
    /// Pids whose descriptors could not be read (no `CAP_SYS_PTRACE`).
    pub unreadable: Vec<u32>,
    /// Processes outside the exporter's own process tree: 0 in a pid
    /// namespace of its own.
    pub outside_own_tree: usize,
    /// How long the scan and its processing took.
    pub duration: Duration,
    /// Targets found by this scan.
    pub added: Vec<TargetReport>,
    /// Targets dropped by this scan, and why ([`crate::source::discover::DropReason::label`]).
    pub dropped: Vec<(TargetReport, &'static str)>,
    /// What it could not do (every scan repeats what lasts).
    pub problems: Vec<ProblemReport>,
}

/// What discovery did and found, for one collection.
#[derive(Debug, Clone, Default)]
pub struct DiscoveryReport {
    /// The scans since the last collection (none, usually, or one).
    pub refreshes: Vec<RefreshReport>,
    /// Every target now, in the order served.
    pub targets: Vec<TargetReport>,
    /// The last scan's problems (they last until a scan finds them gone).
    pub problems: Vec<ProblemReport>,
    /// The last scan's count of processes whose descriptors could not be
    /// read.
    pub processes_unreadable: usize,
    /// The processes outside the exporter's own process tree (its ancestors
    /// and descendants) that the last scan saw (read or not): 0 when it runs
    /// in a pid namespace of its own (a pod without `hostPID: true`), where
    /// it can find no pod, whether started directly or under `sh -c`, tini
    /// or dumb-init.
    pub processes_visible: usize,
    /// The parts that went past a cap or their share of the scrape, or have
    /// directories not kept open (only those).
    pub parts: Vec<PartCost>,
    /// Directories kept open (one descriptor each), and how many may be
    /// (`None`: no limit).
    pub kept: (usize, Option<usize>),
}

/// A part that costs more than it may, at one collection.
#[derive(Debug, Clone, PartialEq)]
pub struct PartCost {
    /// Its name (as [`TargetReport::part`]).
    pub part: Arc<str>,
    /// Its labels.
    pub labels: Vec<Label>,
    /// Its directories left out by `--discover.max-directories-per-pod`.
    pub directories_left_out: usize,
    /// Its directories read but not kept open (the descriptors' reserve
    /// was reached, or opening failed): they go with their writers.
    pub directories_not_kept: usize,
    /// Left out by a cap of files or samples ([`Capped`]).
    pub capped: Option<Capped>,
    /// Not collected within its share of the scrape: what was served
    /// instead.
    pub late: Option<crate::pipeline::parts::LateServed>,
}

/// The combined families of every discovered directory, and what discovery
/// did.
#[derive(Debug, Clone, Default)]
pub struct DiscoveredCollection {
    /// The parts' collection.
    pub parts: PartsCollection<Vec<Label>>,
    /// Discovery's report.
    pub report: DiscoveryReport,
}

/// Finds the directories (see the module's documentation) and reads them.
#[derive(Debug)]
pub struct DiscoveredReader {
    options: DiscoverOptions,
    discovery: Discovery,
    parts: PartReaders<Vec<Label>>,
    last_refresh: Option<Instant>,
    last_holder_check: Option<Instant>,
    /// Scans not reported yet.
    pending: Vec<RefreshReport>,
    /// Each target as last reported (to report a dropped one).
    known: BTreeMap<DirId, TargetReport>,
    /// The directories told apart by their inode, for as long as they are
    /// discovered (their labels never pass to another directory).
    suffixed: Suffixed,
    /// The last scan's problems and unreadable processes.
    problems: Vec<ProblemReport>,
    processes_unreadable: usize,
    /// See [`DiscoveryReport::processes_visible`].
    processes_visible: usize,
    /// How many directories may be kept open.
    max_kept: Option<usize>,
    /// The scrape's own timeout (Prometheus's header), if shorter.
    request_timeout: Option<Duration>,
}

impl DiscoveredReader {
    /// Nothing found yet: the first collection scans.
    pub fn new(options: DiscoverOptions) -> Self {
        let pod_logs = options.pod_log_dir.as_ref().map(|dir| {
            PodLogs::new(dir.clone()).with_container_links(dir.with_file_name("containers"))
        });
        let max_kept = descriptors::retained_budget(
            descriptors::NofileLimit::current().soft,
            options.caps.reserved_descriptors,
            descriptors::open_count().unwrap_or(0),
        );
        let discovery = Discovery::new(DiscoveryOptions {
            pod_logs,
            retention: Retention {
                linger: options.linger,
            },
            max_kept,
        });
        Self {
            parts: part_readers(&options),
            options,
            discovery,
            last_refresh: None,
            last_holder_check: None,
            pending: Vec::new(),
            known: BTreeMap::new(),
            suffixed: Suffixed::default(),
            problems: Vec::new(),
            processes_unreadable: 0,
            processes_visible: 0,
            max_kept,
            request_timeout: None,
        }
    }

    /// How many directories may be kept open (`None`: no limit).
    pub fn max_kept(&self) -> Option<usize> {
        self.max_kept
    }

    /// The next collection's scrape asks for an answer within `timeout`
    /// (Prometheus's `X-Prometheus-Scrape-Timeout-Seconds`): the parts get
    /// their share of it when it is shorter than `--web.scrape-timeout`.
    pub fn set_request_timeout(&mut self, timeout: Option<Duration>) {
        self.request_timeout = timeout;
    }

    /// Learns of the processes from `processes` (`/proc` until then; a test
    /// drives discovery with its own): the scans, the holders' exits, the
    /// paths through their roots, and the clock the scans' schedule and the
    /// linger follow (the parts' deadline stays the system's).
    pub fn set_processes(&mut self, processes: Arc<dyn Processes>) {
        self.discovery.set_processes(processes);
    }

    /// The options.
    pub fn options(&self) -> &DiscoverOptions {
        &self.options
    }

    /// The targets' readers (writer policy, budget, per-writer, rechecks).
    pub fn parts(&mut self) -> &mut PartReaders<Vec<Label>> {
        &mut self.parts
    }

    /// Forgets every reader's caches (after a bug made a collection
    /// panic); the discovered directories stay open.
    pub fn reset(&mut self, budget: Option<Arc<MemoryBudget>>, policy: WriterPolicy) {
        self.parts.release_budget();
        let evidence = self.parts.evidence().clone();
        self.parts = part_readers(&self.options);
        self.parts.set_evidence(evidence);
        self.parts.set_memory_budget(budget);
        self.parts.set_writer_policy(policy);
    }

    /// [`PartReaders::set_per_writer`].
    pub fn set_per_writer(&mut self, config: Option<&PerWriterConfig>) {
        self.parts.set_per_writer(config);
    }

    /// Scans `/proc` if it is due, then reads and combines every target,
    /// each part within its share of the scrape timeout.
    pub fn collect(&mut self) -> DiscoveredCollection {
        let start = Instant::now();
        let now = self.discovery.now();
        let timeout = self
            .request_timeout
            .take()
            .map_or(self.options.scrape_timeout, |t| {
                t.min(self.options.scrape_timeout)
            });
        if let Some(cause) = self.refresh_due(now) {
            self.refresh(cause, now);
        }
        let deadline = parts_deadline(start, Instant::now(), timeout);
        let mut groups: BTreeMap<Vec<Label>, (Arc<str>, Vec<&Target>)> = BTreeMap::new();
        for LabelledTarget {
            target,
            labels,
            name,
        } in label_targets(
            self.discovery.targets().values(),
            &self.options.labels,
            &mut self.suffixed,
        ) {
            groups
                .entry(labels)
                .or_insert_with(|| (name, Vec::new()))
                .1
                .push(target);
        }
        let max_directories = self.options.caps.max_directories;
        let mut specs = Vec::with_capacity(groups.len());
        let mut reports: Vec<(DirId, Option<PathBuf>, TargetReport)> = Vec::new();
        let mut release = Vec::new();
        let mut costs: BTreeMap<Vec<Label>, PartCost> = BTreeMap::new();
        for (labels, (name, mut targets)) in groups {
            targets.sort_by_key(|t| (t.first_seen(), t.id()));
            let stale = superseded_runs(&targets);
            let (stale_targets, kept): (Vec<&Target>, Vec<&Target>) =
                targets.into_iter().partition(|t| stale.contains(&t.id()));
            let targets = kept;
            for target in stale_targets {
                let mut report = report_of(target, &labels, &name, now);
                report.state = TargetState::Stale;
                // Never read again: its directory need not stay open.
                if !target.is_released() {
                    release.push(target.id());
                }
                reports.push((target.id(), None, report));
            }
            let mut inputs = Vec::new();
            let mut shown_as = Vec::new();
            let mut pins: Vec<Pin> = Vec::new();
            let mut cost = PartCost {
                part: name.clone(),
                labels: labels.clone(),
                directories_left_out: 0,
                directories_not_kept: 0,
                capped: None,
                late: None,
            };
            for (i, target) in targets.into_iter().enumerate() {
                let over = max_directories.is_some_and(|max| i >= max);
                let path = if over || target.is_released() {
                    None
                } else {
                    target.read_path()
                };
                if let Some(path) = &path {
                    inputs.push(Input::Directory(path.clone()));
                    let shown = format!("{name}:{}", target.dir().display());
                    shown_as.push((path.clone(), PathBuf::from(shown)));
                    match target.pin() {
                        Some(pin) => pins.push(pin),
                        None => cost.directories_not_kept += 1,
                    }
                }
                let mut report = report_of(target, &labels, &name, now);
                if over || target.is_released() {
                    cost.directories_left_out += 1;
                    report.state = TargetState::Capped;
                    if !target.is_released() {
                        release.push(target.id());
                    }
                }
                reports.push((target.id(), path, report));
            }
            if cost.directories_left_out + cost.directories_not_kept > 0 {
                costs.insert(labels.clone(), cost.clone());
            }
            if !inputs.is_empty() {
                specs.push(PartSpec {
                    key: labels.clone(),
                    name: name.clone(),
                    labels: labels.clone(),
                    inputs,
                    shown_as,
                    pins,
                });
                costs.entry(labels).or_insert(cost);
            }
        }
        for id in release {
            self.discovery.release(id);
        }
        let parts = self.parts.collect_by(specs, deadline);
        for part in &parts.reports {
            if let Some(cost) = costs.get_mut(&part.key) {
                cost.capped = part.capped;
                cost.late = part.late;
            }
        }
        let unreadable: BTreeSet<&PathBuf> = parts.unreadable.iter().map(|(_, p)| p).collect();
        let mut targets = Vec::with_capacity(reports.len());
        self.known.clear();
        for (id, path, mut report) in reports {
            if !matches!(report.state, TargetState::Capped | TargetState::Stale)
                && path.as_ref().is_none_or(|p| unreadable.contains(p))
            {
                report.state = TargetState::Unreadable;
            }
            self.known.insert(id, report.clone());
            targets.push(report);
        }
        let costs = costs
            .into_values()
            .filter(|c| {
                c.directories_left_out + c.directories_not_kept > 0
                    || c.capped.is_some()
                    || c.late.is_some()
            })
            .collect();
        DiscoveredCollection {
            parts,
            report: DiscoveryReport {
                refreshes: std::mem::take(&mut self.pending),
                targets,
                problems: self.problems.clone(),
                processes_unreadable: self.processes_unreadable,
                processes_visible: self.processes_visible,
                parts: costs,
                kept: (self.discovery.kept(), self.max_kept),
            },
        }
    }

    /// Whether to scan now, and why.
    fn refresh_due(&mut self, now: Instant) -> Option<RefreshCause> {
        let Some(last) = self.last_refresh else {
            return Some(RefreshCause::First);
        };
        // A little early rather than a whole period late: a caller on the
        // same period may come a hair before it ends.
        let slack = (self.options.interval / 10).min(Duration::from_secs(1));
        if now.saturating_duration_since(last) + slack >= self.options.interval {
            return Some(RefreshCause::Period);
        }
        let check_due = self
            .last_holder_check
            .is_none_or(|at| now.saturating_duration_since(at) >= HOLDER_CHECK_INTERVAL);
        if check_due {
            self.last_holder_check = Some(now);
            if self.discovery.holder_gone() {
                return Some(RefreshCause::HolderGone);
            }
        }
        None
    }

    /// Scans `/proc` and keeps what changed for the next report.
    fn refresh(&mut self, cause: RefreshCause, now: Instant) {
        let started = Instant::now();
        let refresh: Refresh = self.discovery.refresh();
        self.last_refresh = Some(now);
        self.last_holder_check = Some(now);
        let labels = &self.options.labels;
        let targets = self.discovery.targets();
        let added = label_targets(targets.values(), labels, &mut self.suffixed)
            .into_iter()
            .filter(|t| refresh.added.contains(&t.target.id()))
            .map(|t| report_of(t.target, &t.labels, &t.name, now))
            .collect();
        let dropped = refresh
            .dropped
            .iter()
            .filter_map(|(id, reason)| Some((self.known.remove(id)?, reason.label())))
            .collect();
        let problems: Vec<ProblemReport> = refresh.problems.iter().map(problem_report).collect();
        self.problems = problems.clone();
        self.processes_unreadable = refresh.unreadable.len();
        self.processes_visible = refresh.outside_own_tree;
        self.pending.push(RefreshReport {
            cause,
            processes: refresh.processes,
            descriptors: refresh.descriptors,
            unreadable: refresh.unreadable,
            outside_own_tree: refresh.outside_own_tree,
            duration: started.elapsed(),
            added,
            dropped,
            problems,
        });
        // Never more than a few between two collections.
        if self.pending.len() > 8 {
            self.pending.remove(0);
        }
    }
}

/// When the parts' collections must end, for a scrape that started at
/// `start`, whose scan of `/proc` ended at `scanned`: [`PART_SHARE`] of the
/// timeout after the start, or, after a long scan, a quarter of it after
/// the scan; never later than nine tenths of it (the rest is for combining
/// and encoding).
fn parts_deadline(start: Instant, scanned: Instant, timeout: Duration) -> Instant {
    let share = start + timeout.mul_f64(PART_SHARE);
    let after_scan = scanned + timeout / 4;
    share.max(after_scan).min(start + timeout.mul_f64(0.9))
}

/// The parts' readers, with the caps of files and samples and the oldest
/// a late part's last collection may be.
fn part_readers(options: &DiscoverOptions) -> PartReaders<Vec<Label>> {
    let mut parts = PartReaders::new(LinkPolicy::NoLinks);
    parts.set_caps(PartCaps {
        max_files: options.caps.max_files,
        max_series: options.caps.max_series,
    });
    parts.set_max_late_age(options.late_max_age);
    parts
}

/// A target as logs and metrics see it, `now` by discovery's clock.
fn report_of(target: &Target, labels: &[Label], part: &Arc<str>, now: Instant) -> TargetReport {
    TargetReport {
        part: part.clone(),
        labels: labels.to_vec(),
        dir: target.dir().to_path_buf(),
        mount_ns: target.locations().first().map(|l| l.mount_ns),
        holders: target.holders().iter().map(|h| h.pid).collect(),
        state: match target.decision() {
            Decision::Held => TargetState::Held,
            Decision::PodExists => TargetState::PodExists,
            Decision::Lingering(_) => TargetState::Lingering,
            // Not kept: not reported.
            Decision::Drop(_) => TargetState::Unreadable,
        },
        found: std::time::SystemTime::now()
            .checked_sub(now.saturating_duration_since(target.first_seen()))
            .unwrap_or(std::time::UNIX_EPOCH),
    }
}

/// The directories of one part (in the order found) that are temporary
/// subdirectories of an earlier run of the part's server: SGLang and
/// TensorRT-LLM write in a new `tempfile.TemporaryDirectory` after each
/// restart (see [`crate::source::temporary`]), and the agent keeps the old
/// one while the pod exists. Among the part's runs of one parent directory,
/// those held by a process are current; when none is held, the one found
/// last is. The others are superseded: left out, not summed with the
/// current run.
fn superseded_runs(targets: &[&Target]) -> Vec<DirId> {
    use crate::source::temporary::is_temporary_name;
    use std::os::unix::ffi::OsStrExt as _;
    let is_run = |t: &Target| {
        t.dir()
            .file_name()
            .is_some_and(|n| is_temporary_name(n.as_bytes()))
    };
    let mut superseded = Vec::new();
    let mut parents: Vec<&Path> = targets
        .iter()
        .filter(|t| is_run(t))
        .filter_map(|t| t.dir().parent())
        .collect();
    parents.sort();
    parents.dedup();
    for parent in parents {
        let runs: Vec<&Target> = targets
            .iter()
            .copied()
            .filter(|t| is_run(t) && t.dir().parent() == Some(parent))
            .collect();
        let held = runs.iter().any(|t| matches!(t.decision(), Decision::Held));
        let last = runs.last().map(|t| t.id());
        superseded.extend(
            runs.iter()
                .filter(|t| {
                    if held {
                        !matches!(t.decision(), Decision::Held)
                    } else {
                        Some(t.id()) != last
                    }
                })
                .map(|t| t.id()),
        );
    }
    superseded
}

/// A problem as logs and metrics take it.
fn problem_report(problem: &Problem) -> ProblemReport {
    let (key, not_found) = match problem {
        Problem::DirectoryUnreadable { mount_ns, dir, .. } => {
            (format!("{mount_ns}:{}", dir.display()), false)
        }
        Problem::NotKept { id, .. } => (format!("{}:{}", id.dev, id.ino), false),
        Problem::PodLogsUnreadable { path, error } => (
            path.display().to_string(),
            error.kind() == std::io::ErrorKind::NotFound,
        ),
    };
    ProblemReport {
        label: problem.label(),
        key,
        message: problem.to_string(),
        not_found,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_parts_get_half_the_timeout_a_quarter_after_a_long_scan_never_past_nine_tenths() {
        let start = Instant::now();
        let s = Duration::from_millis;
        let timeout = Duration::from_secs(10);
        assert_eq!(
            parts_deadline(start, start + s(100), timeout),
            start + s(5000)
        );
        assert_eq!(
            parts_deadline(start, start + s(4000), timeout),
            start + s(6500)
        );
        assert_eq!(
            parts_deadline(start, start + s(8000), timeout),
            start + s(9000)
        );
    }
}
