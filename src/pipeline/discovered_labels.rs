//! The labels of a directory found by `--discover.processes`
//! ([`super::discovered`]): which pod, container, systemd unit or process it
//! belongs to, chosen so that two unrelated directories never get one label
//! set (issue 36).
//!
//! * In Kubernetes (the holder's cgroup names a pod whose log directory is
//!   found): `namespace`, `pod`, `container` (the container's name; its ID
//!   when the log tree does not tell which container of the pod it is), and,
//!   when asked for, the pod's UID. Several directories of one container (a
//!   container restarted with a new directory of its own while its pod keeps
//!   the old one, two applications of one container) get the same labels and
//!   are merged together, as prometheus_client would merge one directory
//!   holding all of their files.
//! * Everywhere else, the directory's owner, then [`DIRECTORY_LABEL`]: the
//!   directory as its writers see it. The owner is `container` with the
//!   container's ID (Docker, Podman, a pod whose log directory is not found;
//!   with the pod's UID when asked for and known), else [`UNIT_LABEL`] with
//!   the systemd service the cgroup names (`unit="gunicorn.service"`), else
//!   [`PROCESS_LABEL`] with the command name of the directory's oldest holder
//!   (`/proc/<pid>/comm`). So two processes of one name (or two services of
//!   one container) writing two directories are two label sets, never one
//!   sum. When two directories would still get one label set (one path in
//!   two mount namespaces, or a directory deleted and made anew at the same
//!   path while the old one is kept), the one found later (of two found at
//!   once, the one made later: its birth time, where the file system keeps
//!   it, so that a restart of the agent does not swap their labels) has
//!   `#<device>:<inode>` (its own identity, as `stat -c %d:%i` prints it:
//!   the inode alone is not enough, every `tmpfs`'s root being inode 1)
//!   after its path in [`DIRECTORY_LABEL`], and keeps it for as long as it
//!   is discovered ([`Suffixed`]): when the older one goes, the younger does
//!   not take over its labels, so two directories' series never join
//!   (issue 40).

use std::collections::{BTreeSet, HashSet};
use std::sync::Arc;

use crate::model::Label;
use crate::source::discover::{DirId, Target};

/// The directories given `#<device>:<inode>` after their path, remembered for as
/// long as they are discovered (their labels never change back to another
/// directory's); one per discovering reader.
#[derive(Debug, Default)]
pub struct Suffixed(HashSet<DirId>);

/// The label of a directory written by a process outside any container and
/// systemd service: its command name.
pub const PROCESS_LABEL: &str = "process";

/// The label of a directory written by a systemd service outside
/// Kubernetes: the unit's name.
pub const UNIT_LABEL: &str = "unit";

/// The label of a directory found outside Kubernetes: its path as its
/// writers see it.
pub const DIRECTORY_LABEL: &str = "directory";

/// The names of the labels a discovered part gets (`None`: not added).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DiscoverLabels {
    /// The pod's namespace (`--discover.namespace-label`).
    pub namespace: Option<Arc<str>>,
    /// The pod's name (`--discover.pod-label`).
    pub pod: Option<Arc<str>>,
    /// The container's name or ID (`--discover.container-label`).
    pub container: Option<Arc<str>>,
    /// The pod's UID (`--discover.pod-uid-label`; none by default).
    pub pod_uid: Option<Arc<str>>,
}

impl Default for DiscoverLabels {
    fn default() -> Self {
        Self {
            namespace: Some("namespace".into()),
            pod: Some("pod".into()),
            container: Some("container".into()),
            pod_uid: None,
        }
    }
}

impl DiscoverLabels {
    /// Every label name a discovered part may get, in the order they are
    /// added (the status page and `/api/v1/summary` group by them).
    pub fn names(&self) -> Vec<Arc<str>> {
        [&self.namespace, &self.pod, &self.container, &self.pod_uid]
            .into_iter()
            .flatten()
            .cloned()
            .chain([UNIT_LABEL, PROCESS_LABEL, DIRECTORY_LABEL].map(Arc::from))
            .collect()
    }
}

/// One target with its labels and its part's name.
#[derive(Debug)]
pub struct LabelledTarget<'a> {
    /// The target.
    pub target: &'a Target,
    /// Its labels.
    pub labels: Vec<Label>,
    /// Its part's name (`namespace/pod/container`; outside Kubernetes the
    /// owner and the directory: `container <id> <dir>`, `unit <unit> <dir>`,
    /// `process <command> <dir>`).
    pub name: Arc<str>,
}

/// Every target with its labels (see the module's documentation), in the
/// order given; only a pod's directories may share a label set. `suffixed`
/// remembers which directories had to be told apart by their inode.
pub fn label_targets<'a>(
    targets: impl IntoIterator<Item = &'a Target>,
    names: &DiscoverLabels,
    suffixed: &mut Suffixed,
) -> Vec<LabelledTarget<'a>> {
    let targets: Vec<&Target> = targets.into_iter().collect();
    let present: HashSet<DirId> = targets.iter().map(|t| t.id()).collect();
    suffixed.0.retain(|id| present.contains(id));
    // The one found first keeps its path alone, whatever the caller's order
    // (of those found at once, the one made first: not the order of the
    // scan, so that a restart of the agent gives them the labels they had);
    // those told apart before keep their suffix, whatever has gone since.
    let mut by_age: Vec<usize> = (0..targets.len()).collect();
    by_age.sort_by_key(|&i| {
        let target = targets[i];
        (
            !suffixed.0.contains(&target.id()),
            target.first_seen(),
            target.born().is_none(),
            target.born(),
            target.id(),
        )
    });
    let mut out: Vec<Option<LabelledTarget<'a>>> = targets.iter().map(|_| None).collect();
    let mut taken: BTreeSet<Vec<Label>> = BTreeSet::new();
    for i in by_age {
        let target = targets[i];
        let (mut labels, mut name) = target_labels(target, names);
        if target.pod().is_none()
            && (suffixed.0.contains(&target.id()) || !taken.insert(labels.clone()))
        {
            let DirId { dev, ino } = target.id();
            let unique = format!("{}#{dev}:{ino}", target.dir().display());
            if let Some(last) = labels.last_mut() {
                last.1 = unique.as_str().into();
            }
            name = format!("{name}#{dev}:{ino}").into();
            taken.insert(labels.clone());
            suffixed.0.insert(target.id());
        }
        out[i] = Some(LabelledTarget {
            target,
            labels,
            name,
        });
    }
    out.into_iter().flatten().collect()
}

/// A target's labels (in the order of [`DiscoverLabels`]'s fields, then the
/// owner's and [`DIRECTORY_LABEL`]; only those with a name and a value) and
/// its part's name, before [`label_targets`] tells apart two directories
/// that would share them.
pub fn target_labels(target: &Target, names: &DiscoverLabels) -> (Vec<Label>, Arc<str>) {
    let mut labels: Vec<Label> = Vec::new();
    let mut push = |name: &Option<Arc<str>>, value: Option<&str>| {
        if let (Some(name), Some(value)) = (name, value.filter(|v| !v.is_empty())) {
            labels.push((name.clone(), value.into()));
        }
    };
    if let Some(pod) = target.pod() {
        let container = pod.container.as_deref().or(target.container_id());
        push(&names.namespace, Some(&pod.namespace));
        push(&names.pod, Some(&pod.pod));
        push(&names.container, container);
        push(&names.pod_uid, Some(&pod.uid));
        let name = format!(
            "{}/{}/{}",
            pod.namespace,
            pod.pod,
            container.unwrap_or_default()
        );
        return (labels, name.into());
    }
    let dir = target.dir().display().to_string();
    let owner = match (target.container_id(), target.pod_uid()) {
        (None, None) => {
            let unit = target
                .owner()
                .and_then(|o| o.cgroup.as_ref())
                .and_then(|c| c.systemd_unit());
            match unit {
                Some(unit) => {
                    push(&Some(UNIT_LABEL.into()), Some(unit));
                    format!("unit {unit}")
                }
                None => {
                    let command = target
                        .owner()
                        .and_then(|o| o.command.as_deref())
                        .unwrap_or("unknown");
                    push(&Some(PROCESS_LABEL.into()), Some(command));
                    format!("process {command}")
                }
            }
        }
        (container, uid) => {
            push(&names.container, container);
            push(&names.pod_uid, uid);
            match (container, uid) {
                (Some(id), _) => format!("container {id}"),
                (None, uid) => format!("pod {}", uid.unwrap_or_default()),
            }
        }
    };
    // Never empty: a directory's path is absolute.
    let shown = if dir.is_empty() { "?" } else { &dir };
    push(&Some(DIRECTORY_LABEL.into()), Some(shown));
    (labels, format!("{owner} {shown}").into())
}
