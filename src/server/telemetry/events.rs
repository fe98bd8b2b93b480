//! What the server does with a collection's problems and events: each kind
//! is logged once when it first appears (again only if it changes) and
//! counted in the self-metrics, in one place (Vector's internal-event
//! pattern). A problem that persists is not logged again on every scrape.

use std::collections::{HashMap, HashSet};
use std::path::PathBuf;
use std::sync::Arc;

use crate::pipeline::lifecycle::WriterReport;
use crate::pipeline::{Event, Gathered};
use crate::server::telemetry::discovery::DiscoveryLog;
use crate::server::telemetry::self_metrics::{SelfMetrics, DUPLICATE_NAME};
use crate::source::writers::Visibility;
use crate::source::{Problem, SkipReason};
use crate::transform::Collision;

/// A subdirectory conflict as last logged: (family or path, subdirectory,
/// reason label).
type LoggedConflict = (Arc<str>, Arc<str>, &'static str);

/// What has been logged, so that a persisting problem is logged once.
#[derive(Debug, Default)]
pub(crate) struct Reporter {
    /// Dead writers' files that make a warning (0: never).
    dead_files_warning: usize,
    /// Whether the dead writers' files are past that threshold (logged).
    dead_files_warned: bool,
    /// Whether writers were visible at the last collection with files.
    visible: Option<bool>,
    /// Paths currently left out, with the reason last logged.
    bad: HashMap<PathBuf, SkipReason>,
    /// Subdirectory conflicts currently present.
    conflicts: HashSet<LoggedConflict>,
    /// Renaming collisions and self-metric clashes already logged.
    collisions: HashSet<(Arc<str>, Arc<str>)>,
    /// What discovery logged (`--discover.processes`).
    discovery: DiscoveryLog,
}

impl Reporter {
    /// A reporter warning when dead writers' files number at least
    /// `dead_files_warning` (0: never).
    pub(crate) fn new(dead_files_warning: usize) -> Self {
        Self {
            dead_files_warning,
            ..Self::default()
        }
    }

    /// Logs and counts what one collection found.
    pub(crate) fn collection(
        &mut self,
        gathered: &Gathered,
        families: usize,
        elapsed: std::time::Duration,
        panicked: bool,
        metrics: Option<&SelfMetrics>,
    ) {
        self.problems(&gathered.collection.problems);
        self.writers(&gathered.collection.writers);
        let conflicts = self.events(&gathered.events);
        if let Some(m) = metrics {
            m.observe_scrape(
                &gathered.collection.stats,
                &gathered.collection.writers,
                &gathered.collection.problems,
                families,
                elapsed,
                panicked,
            );
            m.observe_stale_subdirectories(gathered.runs.stale.len());
            if let Some(subdirectories) = gathered.subdirectories {
                m.observe_subdirectories(subdirectories, &conflicts);
            }
        }
        if let Some(report) = &gathered.discovery {
            self.discovery.observe(report);
            if let Some(m) = metrics {
                m.discovery.observe(report, &conflicts);
            }
        }
    }

    /// Logs the families dropped by renaming (once each).
    pub(crate) fn collisions(&mut self, collisions: &[Collision]) {
        for c in collisions {
            if self
                .collisions
                .insert((c.original.clone(), c.renamed.clone()))
            {
                tracing::warn!(
                    family = %c.original,
                    renamed = %c.renamed,
                    "Dropping a metric family: its new name is already used by another family."
                );
            }
        }
    }

    /// Logs self-metrics left out because a merged family has their name
    /// (once each).
    pub(crate) fn self_metric_clashes(&mut self, names: &[Arc<str>]) {
        for name in names {
            if self.collisions.insert((name.clone(), name.clone())) {
                tracing::warn!(
                    family = %name,
                    "Leaving out an exporter self-metric: a merged family has the same name."
                );
            }
        }
    }

    /// Logs whether writers are visible (at the first collection with files,
    /// then when it changes) and dead writers' files passing the threshold.
    fn writers(&mut self, report: &WriterReport) {
        let files: usize = report.files.iter().sum();
        // `off` was asked for (the start-up line says so): nothing to tell.
        if files > 0 && report.visibility != Some(Visibility::Off) {
            let visible = matches!(
                report.visibility,
                Some(Visibility::Confirmed | Visibility::Assumed)
            );
            if self.visible != Some(visible) {
                match report.visibility {
                    Some(Visibility::Confirmed) => tracing::info!(
                        "Writer processes are visible: the live gauges of writers that exited are left out, files being created are pending, live writers' process_* metrics are served."
                    ),
                    Some(Visibility::Assumed) => tracing::info!(
                        "Writer liveness is taken from /proc (--writers.liveness=proc)."
                    ),
                    _ => tracing::info!(
                        "Writer processes are not visible (another pid namespace, or their open files cannot be read): serving as prometheus_client would; live gauges of writers that exited stay until mark_process_dead. See --writers.liveness and docs/deployment.md."
                    ),
                }
                self.visible = Some(visible);
            }
        }
        let dead_files = report.files[1];
        let past = self.dead_files_warning > 0 && dead_files >= self.dead_files_warning;
        if past && !self.dead_files_warned {
            tracing::warn!(
                dead_files,
                dead_writers = report.writers[1],
                dead_bytes = report.bytes[1],
                threshold = self.dead_files_warning,
                "Writers that exited left many files in the metrics directory; they slow every scrape. See docs/troubleshooting.md (dead writers)."
            );
        }
        self.dead_files_warned = past;
        let compaction = &report.compaction;
        if compaction.recovered > 0 {
            tracing::info!(
                directories = compaction.recovered,
                "Finished (or undid) a compaction of dead writers' files that a crash had interrupted."
            );
        }
        if compaction.rounds > 0 {
            tracing::info!(
                files_removed = compaction.files_removed,
                archives = compaction.archives,
                "Compacted dead writers' files into archive files."
            );
        }
        for (dir, error) in &compaction.errors {
            tracing::warn!(
                dir = %dir.display(),
                error = %error,
                "Cannot compact dead writers' files; the directory is left as it was. Compaction needs write access (docs/deployment.md)."
            );
        }
    }

    /// Logs paths that turned bad or changed reason, and those that recovered.
    fn problems(&mut self, problems: &[Problem]) {
        let mut now: HashMap<PathBuf, SkipReason> = HashMap::with_capacity(problems.len());
        for problem in problems {
            if self.bad.get(&problem.path) != Some(&problem.reason) {
                log_problem(problem);
            }
            now.insert(problem.path.clone(), problem.reason.clone());
        }
        for (path, reason) in &self.bad {
            if !now.contains_key(path) {
                match reason {
                    SkipReason::Vanished => {}
                    SkipReason::DirectoryMissing => {
                        tracing::debug!(path = %path.display(), "Metrics directory exists now.")
                    }
                    _ => tracing::info!(path = %path.display(), "File is readable again."),
                }
            }
        }
        self.bad = now;
    }

    /// Logs subdirectory events; returns the reason label of every conflict
    /// present (one entry per conflict), for the self-metrics.
    fn events(&mut self, events: &[Event]) -> Vec<&'static str> {
        let mut now: HashSet<LoggedConflict> = HashSet::new();
        let mut conflicts = Vec::new();
        for event in events {
            match event {
                Event::SubdirectoryAppeared(path) => {
                    tracing::info!(path = %path.display(), "Reading a new subdirectory.")
                }
                Event::SubdirectoryGone(path) => tracing::info!(
                    path = %path.display(),
                    "Subdirectory is gone; its series are no longer served."
                ),
                Event::DuplicateSubdirectory(path) => {
                    let key: LoggedConflict =
                        (path.to_string_lossy().into(), "".into(), DUPLICATE_NAME);
                    if !self.conflicts.contains(&key) {
                        tracing::warn!(
                            path = %path.display(),
                            reason_label = DUPLICATE_NAME,
                            "Leaving out a subdirectory: an earlier directory has one of the same name."
                        );
                    }
                    now.insert(key);
                    conflicts.push(DUPLICATE_NAME);
                }
                Event::FamilyConflict(conflict) => {
                    let label = conflict.reason.label();
                    let key: LoggedConflict =
                        (conflict.family.clone(), conflict.part.clone(), label);
                    if !self.conflicts.contains(&key) {
                        tracing::warn!(
                            family = %conflict.family,
                            subdirectory = %conflict.part,
                            kept_from = %conflict.kept_from,
                            reason_label = label,
                            "Subdirectories disagree about a metric family; keeping the first one's type and help."
                        );
                    }
                    now.insert(key);
                    conflicts.push(label);
                }
                Event::DiscoveredConflict(conflict) => {
                    let label = conflict.reason.label();
                    let key: LoggedConflict = (
                        conflict.family.clone(),
                        format!("discovered {}", conflict.part).into(),
                        label,
                    );
                    if !self.conflicts.contains(&key) {
                        tracing::warn!(
                            family = %conflict.family,
                            part = %conflict.part,
                            kept_from = %conflict.kept_from,
                            reason_label = label,
                            "Discovered directories disagree about a metric family; keeping the first one's type and help."
                        );
                    }
                    now.insert(key);
                    conflicts.push(label);
                }
                Event::RayLogsUnreadable { path, error } => {
                    let key: LoggedConflict = (
                        path.to_string_lossy().into(),
                        "".into(),
                        "ray_logs_unreadable",
                    );
                    if !self.conflicts.contains(&key) {
                        tracing::warn!(
                            path = %path.display(),
                            %error,
                            "Cannot read Ray's log directory (per_writer.ray_logs); labelling writers with their pids."
                        );
                    }
                    now.insert(key);
                }
                Event::StaleRun(run) => tracing::warn!(
                    path = %run.path.display(),
                    files = run.files,
                    writers_dead = run.writers_dead,
                    "Leaving out a temporary subdirectory left by an earlier run of the server (its values are not summed with the current run's); --dir.remove-stale-subdirectories removes such subdirectories."
                ),
                Event::StaleRunsUnremovable(dir) => tracing::warn!(
                    dir = %dir.display(),
                    "Not removing temporary subdirectories left by earlier runs (--dir.remove-stale-subdirectories): the writers' processes cannot be seen (the exporter runs in a pid namespace of its own, such as a Kubernetes sidecar without shareProcessNamespace), so nothing shows that their writers exited; share the pod's process namespace to have them removed."
                ),
                Event::StaleRunRemoved(path) => tracing::info!(
                    path = %path.display(),
                    "Removed a temporary subdirectory left by an earlier run (--dir.remove-stale-subdirectories)."
                ),
                Event::StaleRunNotRemoved { path, error } => {
                    let key: LoggedConflict = (
                        path.to_string_lossy().into(),
                        "".into(),
                        "stale_run_not_removed",
                    );
                    if !self.conflicts.contains(&key) {
                        tracing::warn!(
                            path = %path.display(),
                            %error,
                            "Cannot remove a temporary subdirectory left by an earlier run (--dir.remove-stale-subdirectories): does the exporter have write access to the directory?"
                        );
                    }
                    now.insert(key);
                }
                Event::WriterConflict(conflict) => {
                    let key: LoggedConflict = (
                        conflict.family.clone(),
                        format!("writer {}", conflict.part).into(),
                        conflict.reason.label(),
                    );
                    if !self.conflicts.contains(&key) {
                        tracing::warn!(
                            family = %conflict.family,
                            writer = %conflict.part,
                            kept_from = %conflict.kept_from,
                            "A writer's metric family has another type than an earlier writer's; leaving out its series (per_writer)."
                        );
                    }
                    now.insert(key);
                }
            }
        }
        self.conflicts = now;
        conflicts
    }
}

fn log_problem(problem: &Problem) {
    let path = problem.path.display();
    let reason = &problem.reason;
    let label = reason.label();
    match reason {
        // The watcher logs directories appearing and disappearing.
        SkipReason::DirectoryMissing => {
            tracing::debug!(%path, "Metrics directory does not exist (yet); serving nothing from it.")
        }
        SkipReason::DirectoryUnreadable(_) => tracing::warn!(
            %path,
            %reason,
            reason_label = label,
            "Cannot list the metrics directory; serving nothing from it."
        ),
        // Deleted between listing and reading: normal when a process exits.
        SkipReason::Vanished => {
            tracing::debug!(%path, %reason, reason_label = label, "Skipping file.")
        }
        _ => tracing::warn!(%path, %reason, reason_label = label, "Skipping file."),
    }
}
