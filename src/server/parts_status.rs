//! Every directory a multi-directory server reads, for `/api/v1/status`
//! and the status page's "Pods" table (issue 36): with
//! `--discover.processes`, each pod's (or, outside Kubernetes, each
//! directory's) labels, its directories as their writers see them, their
//! mount namespaces, holders and states, when each was found, and its files
//! and writers; with `--dir.subdirectories-label`, each subdirectory the
//! same way. And the directories discovery dropped in the last
//! [`DROPPED_KEPT`], with the reason.

use std::collections::{BTreeMap, VecDeque};
use std::time::{Duration, UNIX_EPOCH};

use serde::Serialize;

use crate::model::Label;
use crate::pipeline::discovered::TargetReport;
use crate::pipeline::Gathered;

/// How long a dropped directory is listed.
pub(crate) const DROPPED_KEPT: Duration = Duration::from_secs(5 * 60);

/// The most dropped directories listed.
pub(crate) const DROPPED_MAX: usize = 200;

/// One part: the labels its samples get, its directories, files, writers.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct PartJson {
    /// How logs name it (`namespace/pod/container`).
    pub(crate) name: String,
    /// The labels its samples get.
    pub(crate) labels: BTreeMap<String, String>,
    /// Its directories (several: a pod's container restarted with a new
    /// directory of its own).
    pub(crate) directories: Vec<DirectoryJson>,
    pub(crate) files_listed: usize,
    pub(crate) files_merged: usize,
    pub(crate) files_skipped: usize,
    pub(crate) files_pending: usize,
    pub(crate) writers_live: usize,
    pub(crate) writers_dead: usize,
    pub(crate) writers_unknown: usize,
    /// Samples it contributed.
    pub(crate) samples: usize,
}

impl PartJson {
    /// A part nothing was read of (its directory unreadable).
    pub(crate) fn unread(
        name: String,
        labels: BTreeMap<String, String>,
        directories: Vec<DirectoryJson>,
    ) -> Self {
        Self {
            name,
            labels,
            directories,
            files_listed: 0,
            files_merged: 0,
            files_skipped: 0,
            files_pending: 0,
            writers_live: 0,
            writers_dead: 0,
            writers_unknown: 0,
            samples: 0,
        }
    }
}

/// One directory of a part.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct DirectoryJson {
    /// The directory as its writers see it (or as given).
    pub(crate) dir: String,
    /// Discovered: the inode of the writers' mount namespace.
    pub(crate) mount_ns: Option<u64>,
    /// Discovered: the pids holding its files (as the exporter sees them).
    pub(crate) holders: Vec<u32>,
    /// Discovered: `held`, `pod_exists`, `lingering`, `unreadable`.
    pub(crate) state: Option<&'static str>,
    /// Discovered: when it was found, Unix seconds.
    pub(crate) found_at: Option<f64>,
}

/// A directory discovery dropped.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct DroppedJson {
    /// When, Unix seconds.
    pub(crate) at: f64,
    pub(crate) name: String,
    pub(crate) labels: BTreeMap<String, String>,
    pub(crate) dir: String,
    pub(crate) mount_ns: Option<u64>,
    /// `crate::source::discover::DropReason::label`.
    pub(crate) reason: &'static str,
}

fn label_map(labels: &[Label]) -> BTreeMap<String, String> {
    labels
        .iter()
        .map(|(n, v)| (n.to_string(), v.to_string()))
        .collect()
}

fn unix(time: std::time::SystemTime) -> f64 {
    time.duration_since(UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs_f64())
}

fn directory_of(target: &TargetReport) -> DirectoryJson {
    DirectoryJson {
        dir: target.dir.display().to_string(),
        mount_ns: target.mount_ns,
        holders: target.holders.clone(),
        state: Some(target.state.label()),
        found_at: Some(unix(target.found)),
    }
}

/// Every part of `gathered`, in the order served; discovered directories
/// that no part reads (unreadable ones) after them.
pub(crate) fn parts_of(gathered: &Gathered) -> Vec<PartJson> {
    let targets: &[TargetReport] = gathered
        .discovery
        .as_ref()
        .map_or(&[], |d| d.targets.as_slice());
    let mut used = vec![false; targets.len()];
    // A part's targets are those with its labels (one lookup each: a node
    // may have hundreds).
    let mut by_labels: BTreeMap<&[Label], Vec<usize>> = BTreeMap::new();
    for (i, target) in targets.iter().enumerate() {
        by_labels.entry(&target.labels).or_default().push(i);
    }
    let mut out: Vec<PartJson> = gathered
        .parts
        .iter()
        .map(|part| {
            let mut directories = Vec::new();
            for &i in by_labels.get(&part.labels[..]).into_iter().flatten() {
                used[i] = true;
                directories.push(directory_of(&targets[i]));
            }
            if gathered.discovery.is_none() {
                directories = part
                    .directories
                    .iter()
                    .map(|d| DirectoryJson {
                        dir: d.display().to_string(),
                        mount_ns: None,
                        holders: Vec::new(),
                        state: None,
                        found_at: None,
                    })
                    .collect();
            }
            PartJson {
                name: part.name.to_string(),
                labels: label_map(&part.labels),
                directories,
                files_listed: part.files_listed,
                files_merged: part.files_merged,
                files_skipped: part.files_skipped,
                files_pending: part.files_pending,
                writers_live: part.writers[0],
                writers_dead: part.writers[1],
                writers_unknown: part.writers[2],
                samples: part.samples,
            }
        })
        .collect();
    for (target, _) in targets.iter().zip(used).filter(|(_, used)| !used) {
        out.push(PartJson::unread(
            target.part.to_string(),
            label_map(&target.labels),
            vec![directory_of(target)],
        ));
    }
    out
}

/// The directories discovery dropped since the last collection, at `at`.
pub(crate) fn dropped_of(gathered: &Gathered, at: f64) -> Vec<DroppedJson> {
    let Some(discovery) = &gathered.discovery else {
        return Vec::new();
    };
    discovery
        .refreshes
        .iter()
        .flat_map(|r| r.dropped.iter())
        .map(|(target, reason)| DroppedJson {
            at,
            name: target.part.to_string(),
            labels: label_map(&target.labels),
            dir: target.dir.display().to_string(),
            mount_ns: target.mount_ns,
            reason,
        })
        .collect()
}

/// The dropped directories of the last [`DROPPED_KEPT`] (at most
/// [`DROPPED_MAX`]), oldest first.
#[derive(Debug, Default)]
pub(crate) struct Dropped {
    list: VecDeque<DroppedJson>,
}

impl Dropped {
    /// Adds `dropped` and forgets what is older than [`DROPPED_KEPT`] before
    /// `now`.
    pub(crate) fn add(&mut self, dropped: Vec<DroppedJson>, now: f64) {
        self.list.extend(dropped);
        while self.list.len() > DROPPED_MAX
            || self
                .list
                .front()
                .is_some_and(|d| now - d.at > DROPPED_KEPT.as_secs_f64())
        {
            self.list.pop_front();
        }
    }

    /// What is listed.
    pub(crate) fn list(&self) -> Vec<DroppedJson> {
        self.list.iter().cloned().collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pipeline::discovered::{DiscoveryReport, TargetState};
    use crate::pipeline::part_status::PartStatus;

    fn dropped(at: f64) -> DroppedJson {
        DroppedJson {
            at,
            name: "ns/p/c".to_owned(),
            labels: BTreeMap::new(),
            dir: "/m".to_owned(),
            mount_ns: Some(1),
            reason: "pod_gone",
        }
    }

    fn labels(pod: &str) -> Vec<Label> {
        vec![
            ("namespace".into(), "ns".into()),
            ("pod".into(), pod.into()),
        ]
    }

    fn target(pod: &str, dir: &str, state: TargetState) -> TargetReport {
        TargetReport {
            part: format!("ns/{pod}").into(),
            labels: labels(pod),
            dir: dir.into(),
            mount_ns: Some(7),
            holders: vec![12],
            state,
            found: UNIX_EPOCH + Duration::from_secs(100),
        }
    }

    #[test]
    fn a_part_lists_its_directories_and_an_unread_target_is_a_part_of_its_own() {
        let mut gathered = Gathered {
            parts: vec![PartStatus {
                name: "ns/a".into(),
                labels: labels("a"),
                directories: vec!["a:/m".into(), "a:/n".into()],
                files_listed: 3,
                files_merged: 2,
                files_skipped: 1,
                files_pending: 0,
                writers: [1, 2, 0],
                samples: 9,
            }],
            discovery: Some(DiscoveryReport {
                targets: vec![
                    target("a", "/m", TargetState::Held),
                    target("b", "/x", TargetState::Unreadable),
                    target("a", "/n", TargetState::PodExists),
                ],
                ..DiscoveryReport::default()
            }),
            ..Gathered::default()
        };
        let parts = serde_json::to_value(parts_of(&gathered)).unwrap();
        assert_eq!(
            parts,
            serde_json::json!([
                {"name": "ns/a", "labels": {"namespace": "ns", "pod": "a"},
                 "directories": [
                     {"dir": "/m", "mount_ns": 7, "holders": [12], "state": "held", "found_at": 100.0},
                     {"dir": "/n", "mount_ns": 7, "holders": [12], "state": "pod_exists", "found_at": 100.0}],
                 "files_listed": 3, "files_merged": 2, "files_skipped": 1, "files_pending": 0,
                 "writers_live": 1, "writers_dead": 2, "writers_unknown": 0, "samples": 9},
                {"name": "ns/b", "labels": {"namespace": "ns", "pod": "b"},
                 "directories": [
                     {"dir": "/x", "mount_ns": 7, "holders": [12], "state": "unreadable", "found_at": 100.0}],
                 "files_listed": 0, "files_merged": 0, "files_skipped": 0, "files_pending": 0,
                 "writers_live": 0, "writers_dead": 0, "writers_unknown": 0, "samples": 0}
            ])
        );
        // Subdirectories: the part's own directories, nothing discovered.
        gathered.discovery = None;
        let parts = parts_of(&gathered);
        let dirs: Vec<_> = parts[0]
            .directories
            .iter()
            .map(|d| (&*d.dir, d.state))
            .collect();
        assert_eq!(dirs, [("a:/m", None), ("a:/n", None)]);
    }

    #[test]
    fn dropped_directories_are_listed_for_five_minutes_and_at_most_200() {
        let mut list = Dropped::default();
        list.add(vec![dropped(0.0), dropped(100.0)], 100.0);
        assert_eq!(list.list().len(), 2);
        list.add(Vec::new(), 301.0);
        assert_eq!(list.list().len(), 1);
        list.add(
            (0..300).map(|i| dropped(400.0 + f64::from(i))).collect(),
            700.0,
        );
        assert_eq!(list.list().len(), DROPPED_MAX);
        assert_eq!(list.list()[0].at, 500.0);
    }
}
