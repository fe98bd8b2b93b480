//! What `--discover.processes` logs and counts: each directory found and
//! dropped (one line each), each scan problem once while it lasts, processes
//! whose open files cannot be read once when they first appear, and the
//! `multiproc_exporter_discovery_*` self-metrics (docs/metrics.md).
//!
//! A directory that is found but cannot be listed afterwards is a
//! collection problem like any other (`Cannot list the metrics directory`,
//! logged once by [`super::events`], the path written
//! `<namespace>/<pod>/<container>:<directory>`), and counts here as a target
//! in state `unreadable`.

use std::collections::HashSet;
use std::sync::Mutex;

use crate::model::family_list::FamilyList;
use crate::model::MetricType;
use crate::pipeline::discovered::{DiscoveryReport, PartCost, RefreshCause, TargetState};
use crate::server::telemetry::part_costs::{self, pids_text, PartCostLog};

/// Every `reason` of `multiproc_exporter_discovery_targets_dropped_total`.
const DROP_REASONS: [&str; 3] = ["pod_gone", "linger_expired", "not_kept"];

/// Every `reason` of `multiproc_exporter_discovery_problems`.
const PROBLEM_REASONS: [&str; 3] = ["directory_unreadable", "not_kept", "pod_logs_unreadable"];

/// Every `reason` of `multiproc_exporter_discovery_family_conflicts`.
const CONFLICT_REASONS: [&str; 2] = ["type_mismatch", "help_mismatch"];

/// What has been logged, so that a lasting problem is logged once.
#[derive(Debug, Default)]
pub(crate) struct DiscoveryLog {
    /// The last scan's problems, by reason and subject.
    problems: HashSet<(&'static str, String)>,
    /// Whether the last scan had processes it could not read.
    unreadable_processes: bool,
    /// Whether a scan that saw no process but the exporter's own was logged
    /// (once per process: the pid namespace does not change).
    alone_logged: bool,
    /// What was logged about parts that cost more than they may.
    parts: PartCostLog,
}

impl DiscoveryLog {
    /// Logs the scans of one collection.
    pub(crate) fn observe(&mut self, report: &DiscoveryReport) {
        for refresh in &report.refreshes {
            tracing::debug!(
                cause = match refresh.cause {
                    RefreshCause::First => "first",
                    RefreshCause::Period => "period",
                    RefreshCause::HolderGone => "holder_gone",
                },
                processes = refresh.processes,
                descriptors = refresh.descriptors,
                processes_unreadable = refresh.unreadable.len(),
                duration_seconds = refresh.duration.as_secs_f64(),
                "Scanned /proc for multiprocess directories."
            );
            part_costs::log_found_and_dropped(refresh);
            let mut now = HashSet::with_capacity(refresh.problems.len());
            for problem in &refresh.problems {
                let key = (problem.label, problem.key.clone());
                if !self.problems.contains(&key) {
                    if problem.not_found {
                        tracing::info!(
                            reason_label = problem.label,
                            error = %problem.message,
                            "No pod log directory (not a Kubernetes node?): pods are not named, and directories whose writers exited are kept for --discover.linger."
                        );
                    } else {
                        tracing::warn!(
                            reason_label = problem.label,
                            error = %problem.message,
                            "Discovery cannot use a directory it found; the others are served."
                        );
                    }
                }
                now.insert(key);
            }
            self.problems = now;
            let unreadable = !refresh.unreadable.is_empty();
            if unreadable && !self.unreadable_processes {
                let shown: Vec<u32> = refresh.unreadable.iter().copied().take(10).collect();
                tracing::warn!(
                    processes = refresh.unreadable.len(),
                    pids = %pids_text(&shown),
                    "Cannot read the open files of some processes (CAP_SYS_PTRACE and CAP_DAC_READ_SEARCH are needed for other users' processes): directories only they write are not found."
                );
            }
            self.unreadable_processes = unreadable;
            if refresh.outside_own_tree == 0 && !self.alone_logged {
                self.alone_logged = true;
                tracing::warn!(
                    "The node agent sees no process but its own: it runs in a pid namespace of its own (a pod without hostPID: true, a container without --pid=host), so it finds no pod's directory. --discover.processes finds writers through /proc: run it in the host's pid namespace (hostPID: true, as deploy/kubernetes' DaemonSet has)."
                );
            }
        }
        self.parts.observe(&report.parts);
    }
}

/// The values of the discovery self-metrics.
#[derive(Debug, Default)]
pub(crate) struct DiscoveryMetrics {
    /// Whether discovery is on (the metrics are served only then).
    enabled: bool,
    state: Mutex<Values>,
}

#[derive(Debug, Default, Clone)]
struct Values {
    targets: [usize; 6],
    processes_unreadable: usize,
    processes_visible: usize,
    last_scan_seconds: f64,
    scans: u64,
    dropped: [u64; 3],
    problems: [usize; 3],
    conflicts: [usize; 2],
    parts: Vec<PartCost>,
    late: u64,
    expired: u64,
    kept: usize,
    max_kept: Option<usize>,
}

impl DiscoveryMetrics {
    /// Serves the metrics (with `--discover.processes`).
    pub(crate) fn register(&mut self) {
        self.enabled = true;
    }

    /// Records one collection's report; `conflicts` are the reason labels
    /// of its family conflicts.
    pub(crate) fn observe(&self, report: &DiscoveryReport, conflicts: &[&str]) {
        let mut v = self.state.lock().unwrap_or_else(|e| e.into_inner());
        v.targets = [0; 6];
        for target in &report.targets {
            let i = TargetState::ALL
                .iter()
                .position(|s| *s == target.state)
                .unwrap_or(3);
            v.targets[i] += 1;
        }
        v.problems = [0; 3];
        for problem in &report.problems {
            if let Some(i) = PROBLEM_REASONS.iter().position(|r| *r == problem.label) {
                v.problems[i] += 1;
            }
        }
        // A directory found unreadable is a target that cannot be read.
        v.targets[3] += v.problems[0];
        v.processes_unreadable = report.processes_unreadable;
        v.processes_visible = report.processes_visible;
        for refresh in &report.refreshes {
            v.scans += 1;
            v.last_scan_seconds = refresh.duration.as_secs_f64();
            for (_, reason) in &refresh.dropped {
                if let Some(i) = DROP_REASONS.iter().position(|r| r == reason) {
                    v.dropped[i] += 1;
                }
            }
        }
        v.parts = report.parts.clone();
        v.late += report.parts.iter().filter(|p| p.late.is_some()).count() as u64;
        v.expired += report
            .parts
            .iter()
            .filter(|p| p.late == Some(crate::pipeline::parts::LateServed::Expired))
            .count() as u64;
        (v.kept, v.max_kept) = report.kept;
        v.conflicts = [0; 2];
        for conflict in conflicts {
            if let Some(i) = CONFLICT_REASONS.iter().position(|r| r == conflict) {
                v.conflicts[i] += 1;
            }
        }
    }

    /// Adds the families (`p` is the self-metrics' prefix), if discovery is
    /// on.
    pub(crate) fn add_families(&self, p: &str, out: &mut FamilyList) {
        if !self.enabled {
            return;
        }
        let v = self.state.lock().unwrap_or_else(|e| e.into_inner()).clone();
        out.by_label(
            &format!("{p}discovery_targets"),
            "Multiprocess directories discovered through /proc at the last scrape, by state: held (a process holds their files), pod_exists (their writers exited, their pod exists), lingering (their writers exited, no pod known: kept for --discover.linger), unreadable (found but cannot be read), capped (left out: their pod has --discover.max-directories-per-pod older ones), stale (left out: a temporary subdirectory of an earlier run of their container's server, superseded by a newer run).",
            MetricType::Gauge,
            "state",
            TargetState::ALL
                .iter()
                .zip(v.targets)
                .map(|(s, n)| (s.label(), n as f64)),
        );
        out.gauge(
            &format!("{p}discovery_processes_unreadable"),
            "Processes whose open files the last scan of /proc could not read (another user's, without CAP_SYS_PTRACE and CAP_DAC_READ_SEARCH): directories only they write are not found.",
            v.processes_unreadable as f64,
        );
        out.gauge(
            &format!("{p}discovery_processes_visible"),
            "Processes other than the exporter's own that the last scan of /proc saw: 0 in a pid namespace of its own (a pod without hostPID: true), where no pod can be found.",
            v.processes_visible as f64,
        );
        out.gauge(
            &format!("{p}discovery_last_scan_duration_seconds"),
            "Time the last scan of /proc for multiprocess directories took, in seconds.",
            v.last_scan_seconds,
        );
        out.counter(
            &format!("{p}discovery_scans"),
            "Scans of /proc for multiprocess directories (every --discover.interval, and when a writer of the last scan exited).",
            v.scans as f64,
        );
        out.by_label(
            &format!("{p}discovery_targets_dropped"),
            "Discovered directories no longer served, by reason: pod_gone (their writers and their pod are gone), linger_expired (writers gone, no pod known, --discover.linger over), not_kept (writers gone, and it could not be kept open).",
            MetricType::Counter,
            "reason",
            DROP_REASONS
                .iter()
                .zip(v.dropped)
                .map(|(r, n)| (*r, n as f64)),
        );
        out.by_label(
            &format!("{p}discovery_problems"),
            "What the last scan could not do, by reason: directory_unreadable (a directory its writers hold cannot be reached or read), not_kept (a directory cannot be kept open: it will go with its writers), pod_logs_unreadable (--discover.pod-log-dir cannot be read: pods are not named).",
            MetricType::Gauge,
            "reason",
            PROBLEM_REASONS
                .iter()
                .zip(v.problems)
                .map(|(r, n)| (*r, n as f64)),
        );
        out.by_label(
            &format!("{p}discovery_family_conflicts"),
            "Metric families of a discovered directory whose type (left out) or help (kept under the first help) differs from the same family of an earlier one, at the last scrape.",
            MetricType::Gauge,
            "reason",
            CONFLICT_REASONS
                .iter()
                .zip(v.conflicts)
                .map(|(r, n)| (*r, n as f64)),
        );
        out.gauge(
            &format!("{p}discovery_kept_directories"),
            "Discovered directories kept open (one descriptor each) so that their dead writers' files stay readable.",
            v.kept as f64,
        );
        if let Some(max) = v.max_kept {
            out.gauge(
                &format!("{p}discovery_kept_directories_max"),
                "The most discovered directories kept open at once: the descriptor limit less --discover.reserved-descriptors and those open at start. Directories found beyond it are read while their writers live and not kept.",
                max as f64,
            );
        }
        out.counter(
            &format!("{p}discovery_late_collections"),
            "Collections of a discovered pod not done within its share of the scrape timeout (half of --web.scrape-timeout, or of Prometheus's own when shorter): that scrape served the pod's last collection, or none.",
            v.late as f64,
        );
        out.counter(
            &format!("{p}discovery_expired_collections"),
            "Collections of a discovered pod that was late and whose last collection was older than --discover.late-max-age: that scrape left the pod out (a gap instead of frozen values).",
            v.expired as f64,
        );
        part_costs::add_families(p, &v.parts, out);
    }
}

/// The labels' lists cover every variant's label.
#[cfg(test)]
mod tests {
    use super::*;
    use crate::source::discover::{DropReason, Problem};

    #[test]
    fn label_lists_are_complete() {
        for reason in [
            DropReason::PodGone,
            DropReason::LingerExpired,
            DropReason::NotKept,
        ] {
            assert!(DROP_REASONS.contains(&reason.label()));
        }
        let io = || std::io::Error::other("x");
        for problem in [
            Problem::DirectoryUnreadable {
                mount_ns: 1,
                dir: "/m".into(),
                holders: vec![1],
                error: io(),
            },
            Problem::NotKept {
                id: crate::source::discover::DirId { dev: 1, ino: 2 },
                dir: "/m".into(),
                error: io(),
            },
            Problem::PodLogsUnreadable {
                path: "/l".into(),
                error: io(),
            },
        ] {
            assert!(PROBLEM_REASONS.contains(&problem.label()));
        }
        for reason in crate::transform::combine::ConflictReason::ALL {
            assert!(CONFLICT_REASONS.contains(&reason.label()));
        }
    }

    #[test]
    fn families_only_with_discovery() {
        let mut m = DiscoveryMetrics::default();
        let mut out = FamilyList::default();
        m.add_families("p_", &mut out);
        assert!(out.into_families().is_empty());
        m.register();
        m.observe(&DiscoveryReport::default(), &["help_mismatch"]);
        let mut out = FamilyList::default();
        m.add_families("p_", &mut out);
        let names: Vec<String> = out
            .into_families()
            .iter()
            .map(|f| f.name.to_string())
            .collect();
        assert_eq!(
            names,
            [
                "p_discovery_targets",
                "p_discovery_processes_unreadable",
                "p_discovery_processes_visible",
                "p_discovery_last_scan_duration_seconds",
                "p_discovery_scans",
                "p_discovery_targets_dropped",
                "p_discovery_problems",
                "p_discovery_family_conflicts",
                "p_discovery_kept_directories",
                "p_discovery_late_collections",
                "p_discovery_expired_collections",
                "p_discovery_part_directories_left_out",
                "p_discovery_part_directories_not_kept",
                "p_discovery_part_capped",
                "p_discovery_part_late",
            ]
        );
    }
}
