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
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::model::Label;
pub use crate::pipeline::discovered_labels::{
    label_targets, target_labels, DiscoverLabels, LabelledTarget, DIRECTORY_LABEL, PROCESS_LABEL,
    UNIT_LABEL,
};
use crate::pipeline::parts::{PartReaders, PartSpec, PartsCollection};
use crate::source::discover::{
    Decision, DirId, Discovery, DiscoveryOptions, PodLogs, Problem, Refresh, Retention, Target,
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
}

impl Default for DiscoverOptions {
    fn default() -> Self {
        Self {
            pod_log_dir: Some(crate::source::discover::pods::DEFAULT_POD_LOG_DIR.into()),
            interval: Duration::from_secs(10),
            linger: Retention::DEFAULT_LINGER,
            labels: DiscoverLabels::default(),
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
}

impl TargetState {
    /// Every state, in a fixed order (for metrics that list them all).
    pub const ALL: [TargetState; 4] = [
        Self::Held,
        Self::PodExists,
        Self::Lingering,
        Self::Unreadable,
    ];

    /// A stable label for logs and metrics.
    pub fn label(self) -> &'static str {
        match self {
            Self::Held => "held",
            Self::PodExists => "pod_exists",
            Self::Lingering => "lingering",
            Self::Unreadable => "unreadable",
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
    /// The last scan's problems and unreadable processes.
    problems: Vec<ProblemReport>,
    processes_unreadable: usize,
}

impl DiscoveredReader {
    /// Nothing found yet: the first collection scans.
    pub fn new(options: DiscoverOptions) -> Self {
        let pod_logs = options.pod_log_dir.as_ref().map(|dir| {
            PodLogs::new(dir.clone()).with_container_links(dir.with_file_name("containers"))
        });
        let discovery = Discovery::new(DiscoveryOptions {
            pod_logs,
            retention: Retention {
                linger: options.linger,
            },
        });
        Self {
            options,
            discovery,
            parts: PartReaders::new(LinkPolicy::NoLinks),
            last_refresh: None,
            last_holder_check: None,
            pending: Vec::new(),
            known: BTreeMap::new(),
            problems: Vec::new(),
            processes_unreadable: 0,
        }
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
        self.parts = PartReaders::new(LinkPolicy::NoLinks);
        self.parts.set_memory_budget(budget);
        self.parts.set_writer_policy(policy);
    }

    /// [`PartReaders::set_per_writer`].
    pub fn set_per_writer(&mut self, config: Option<&PerWriterConfig>) {
        self.parts.set_per_writer(config);
    }

    /// Scans `/proc` if it is due, then reads and combines every target.
    pub fn collect(&mut self) -> DiscoveredCollection {
        let now = Instant::now();
        if let Some(cause) = self.refresh_due(now) {
            self.refresh(cause, now);
        }
        let mut groups: BTreeMap<Vec<Label>, (Arc<str>, Vec<&Target>)> = BTreeMap::new();
        for LabelledTarget {
            target,
            labels,
            name,
        } in label_targets(self.discovery.targets().values(), &self.options.labels)
        {
            groups
                .entry(labels)
                .or_insert_with(|| (name, Vec::new()))
                .1
                .push(target);
        }
        let mut specs = Vec::with_capacity(groups.len());
        let mut reports: Vec<(DirId, Option<PathBuf>, TargetReport)> = Vec::new();
        for (labels, (name, mut targets)) in groups {
            targets.sort_by_key(|t| (t.first_seen(), t.id()));
            let mut inputs = Vec::new();
            let mut shown_as = Vec::new();
            for target in targets {
                let path = target.read_path();
                if let Some(path) = &path {
                    inputs.push(Input::Directory(path.clone()));
                    let shown = format!("{name}:{}", target.dir().display());
                    shown_as.push((path.clone(), PathBuf::from(shown)));
                }
                reports.push((target.id(), path, report_of(target, &labels, &name)));
            }
            if !inputs.is_empty() {
                specs.push(PartSpec {
                    key: labels.clone(),
                    name: name.clone(),
                    labels,
                    inputs,
                    shown_as,
                });
            }
        }
        let parts = self.parts.collect(specs);
        let unreadable: BTreeSet<&PathBuf> = parts.unreadable.iter().map(|(_, p)| p).collect();
        let mut targets = Vec::with_capacity(reports.len());
        self.known.clear();
        for (id, path, mut report) in reports {
            if path.as_ref().is_none_or(|p| unreadable.contains(p)) {
                report.state = TargetState::Unreadable;
            }
            self.known.insert(id, report.clone());
            targets.push(report);
        }
        DiscoveredCollection {
            parts,
            report: DiscoveryReport {
                refreshes: std::mem::take(&mut self.pending),
                targets,
                problems: self.problems.clone(),
                processes_unreadable: self.processes_unreadable,
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
        let refresh: Refresh = self.discovery.refresh();
        self.last_refresh = Some(now);
        self.last_holder_check = Some(now);
        let labels = &self.options.labels;
        let targets = self.discovery.targets();
        let added = label_targets(targets.values(), labels)
            .into_iter()
            .filter(|t| refresh.added.contains(&t.target.id()))
            .map(|t| report_of(t.target, &t.labels, &t.name))
            .collect();
        let dropped = refresh
            .dropped
            .iter()
            .filter_map(|(id, reason)| Some((self.known.remove(id)?, reason.label())))
            .collect();
        let problems: Vec<ProblemReport> = refresh.problems.iter().map(problem_report).collect();
        self.problems = problems.clone();
        self.processes_unreadable = refresh.unreadable.len();
        self.pending.push(RefreshReport {
            cause,
            processes: refresh.processes,
            descriptors: refresh.descriptors,
            unreadable: refresh.unreadable,
            duration: now.elapsed(),
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

/// A target as logs and metrics see it.
fn report_of(target: &Target, labels: &[Label], part: &Arc<str>) -> TargetReport {
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
            .checked_sub(target.first_seen().elapsed())
            .unwrap_or(std::time::UNIX_EPOCH),
    }
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
