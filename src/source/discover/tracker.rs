//! The discovered directories across scans: [`Discovery`] turns each
//! [`Scan`] into [`Target`]s, one per directory, keeps each one open while it
//! may be read ([`super::retain`]), names its pod from the kubelet's log tree
//! ([`super::pods`]), and drops it when the retention rule says so.
//!
//! A target is a directory, not a path: sightings of the same directory
//! (same device and inode, [`DirId`]) from several mount namespaces are one
//! target with several [`Location`]s, and two directories at the same path in
//! two namespaces are two targets. Before a sighting is taken, the path
//! through the holder's root must reach the very file the holder has open:
//! a path the pod could swap for a link (pointing into the exporter's own
//! file system) is refused, not followed.

use std::collections::BTreeMap;
use std::fmt;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use super::pods::{PodIndex, PodLogs};
use super::processes::{Processes, SystemProcesses};
use super::retain::{self, Decision, DirId, DropReason, KeptDir, PodState, Retention};
use super::scan::{Holder, Scan, Sighting};

/// How discovery names pods and keeps directories.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DiscoveryOptions {
    /// The kubelet's log tree, in Kubernetes (`--discover.pod-log-dir`);
    /// `None` outside it: no pod names, and every directory without holders
    /// lingers.
    pub pod_logs: Option<PodLogs>,
    /// How long a directory without holders and without a known pod is kept.
    pub retention: Retention,
    /// How many directories may be kept open at once (`None`: no limit):
    /// the descriptors left once a reserve for serving is set aside
    /// ([`crate::source::descriptors::retained_budget`]). A directory found
    /// beyond it is read while its holders live and not kept
    /// ([`Refresh::unretained`]).
    pub max_kept: Option<usize>,
}

/// Where a target was seen: a path in a mount namespace.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct Location {
    /// The inode of the mount namespace.
    pub mount_ns: u64,
    /// The directory's path there.
    pub dir: PathBuf,
}

/// The Kubernetes names of a target, from the kubelet's log tree.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PodRef {
    /// The pod's namespace.
    pub namespace: String,
    /// The pod's name.
    pub pod: String,
    /// The pod's UID.
    pub uid: String,
    /// The container's name, when the rules of [`super::pods`] decide it.
    pub container: Option<String>,
}

/// One discovered directory.
#[derive(Debug)]
pub struct Target {
    id: DirId,
    kept: Option<Arc<KeptDir>>,
    locations: Vec<Location>,
    holders: Vec<Holder>,
    via: Option<PathBuf>,
    owner: Option<Holder>,
    pod: Option<PodRef>,
    decision: Decision,
    first_seen: Instant,
    born: Option<SystemTime>,
    last_held: Instant,
    /// Let go by [`Discovery::release`]: never opened again.
    released: bool,
}

impl Target {
    /// The directory's identity (the key of [`Discovery::targets`]).
    pub fn id(&self) -> DirId {
        self.id
    }

    /// The path to read the directory through: its kept descriptor
    /// (`/proc/self/fd/<n>`, valid in this process only, while the target
    /// lives), else, while a holder lives, `/proc/<pid>/root/<dir>`; `None`
    /// when neither can reach it. The latter is checked again now: the
    /// path must still reach this directory (its device and inode), so
    /// that a pid reused since the scan by a process of another container
    /// cannot hand that container's directory this one's labels.
    pub fn read_path(&self) -> Option<PathBuf> {
        match &self.kept {
            Some(kept) => Some(kept.path()),
            None if self.is_held() => self
                .via
                .clone()
                .filter(|via| DirId::of(via).ok() == Some(self.id)),
            None => None,
        }
    }

    /// The kept descriptor, shared: while a reader holds it, the path
    /// [`Target::read_path`] gave stays this directory's even after the
    /// target is dropped (its descriptor number cannot be reused for another
    /// directory meanwhile).
    pub fn pin(&self) -> Option<Arc<KeptDir>> {
        self.kept.clone()
    }

    /// Whether the directory is held open by the exporter (readable after its
    /// holders exit).
    pub fn is_kept(&self) -> bool {
        self.kept.is_some()
    }

    /// The directory's path in its holders' mount namespace (the first
    /// location's).
    pub fn dir(&self) -> &Path {
        self.locations.first().map_or(Path::new(""), |l| &l.dir)
    }

    /// Where it was last seen, ordered by mount namespace and path.
    pub fn locations(&self) -> &[Location] {
        &self.locations
    }

    /// The processes holding its files at the last refresh, by pid; empty
    /// when none was left.
    pub fn holders(&self) -> &[Holder] {
        &self.holders
    }

    /// Whether a process held its files at the last refresh.
    pub fn is_held(&self) -> bool {
        !self.holders.is_empty()
    }

    /// Whether a holder of the last refresh has exited since (a reason to
    /// refresh now rather than at the next period), as `/proc` tells
    /// ([`Discovery::holder_gone`] asks its [`Processes`]).
    pub fn holder_gone(&self) -> bool {
        self.holders.iter().any(|h| !h.is_alive())
    }

    /// The oldest holder when the directory was last held (the application's
    /// main process, usually): its cgroup and command name the target.
    pub fn owner(&self) -> Option<&Holder> {
        self.owner.as_ref()
    }

    /// The pod UID the owner's cgroup names.
    pub fn pod_uid(&self) -> Option<&str> {
        self.owner.as_ref()?.cgroup.as_ref()?.pod_uid.as_deref()
    }

    /// The container ID the owner's cgroup names.
    pub fn container_id(&self) -> Option<&str> {
        self.owner
            .as_ref()?
            .cgroup
            .as_ref()?
            .container_id
            .as_deref()
    }

    /// The pod's names, once found in the kubelet's log tree.
    pub fn pod(&self) -> Option<&PodRef> {
        self.pod.as_ref()
    }

    /// What the retention rule decided at the last refresh.
    pub fn decision(&self) -> Decision {
        self.decision
    }

    /// When it was first discovered.
    pub fn first_seen(&self) -> Instant {
        self.first_seen
    }

    /// When the directory was made (its birth time, `statx`'s
    /// `STATX_BTIME`, read when it was found), where the file system keeps
    /// it: of two directories found at once that would get one label set,
    /// the older keeps its path alone whatever the order they were found
    /// in (`pipeline::discovered_labels`), so that their labels stay the
    /// same across a restart of the agent.
    pub fn born(&self) -> Option<SystemTime> {
        self.born
    }

    /// When a holder was last seen.
    pub fn last_held(&self) -> Instant {
        self.last_held
    }

    /// Whether [`Discovery::release`] let it go (it is not read any more,
    /// and dropped with its last holder).
    pub fn is_released(&self) -> bool {
        self.released
    }
}

/// Something discovery could not do; the rest went on.
#[derive(Debug)]
pub enum Problem {
    /// A directory whose holders were found cannot be reached through them
    /// (no `CAP_DAC_READ_SEARCH` for a directory of another user, or the
    /// path does not lead to the files the holders have open).
    DirectoryUnreadable {
        /// The holders' mount namespace.
        mount_ns: u64,
        /// The directory's path there.
        dir: PathBuf,
        /// The holders' pids.
        holders: Vec<u32>,
        /// Why.
        error: io::Error,
    },
    /// A directory was found and can be read while its holders live, but could
    /// not be kept open: it will not outlive them.
    NotKept {
        /// The directory.
        id: DirId,
        /// Its path in the holders' namespace.
        dir: PathBuf,
        /// Why.
        error: io::Error,
    },
    /// The kubelet's pod log directory cannot be read: pods are not named,
    /// and directories without holders linger.
    PodLogsUnreadable {
        /// The directory.
        path: PathBuf,
        /// Why.
        error: io::Error,
    },
}

impl Problem {
    /// A stable label for logs and metrics.
    pub fn label(&self) -> &'static str {
        match self {
            Problem::DirectoryUnreadable { .. } => "directory_unreadable",
            Problem::NotKept { .. } => "not_kept",
            Problem::PodLogsUnreadable { .. } => "pod_logs_unreadable",
        }
    }
}

impl fmt::Display for Problem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Problem::DirectoryUnreadable {
                mount_ns,
                dir,
                holders,
                error,
            } => write!(
                f,
                "cannot read directory {} of mount namespace {mount_ns} (held by pids {holders:?}): {error}",
                dir.display()
            ),
            Problem::NotKept { dir, error, .. } => write!(
                f,
                "cannot keep directory {} open ({error}): it will be dropped when its writers exit",
                dir.display()
            ),
            Problem::PodLogsUnreadable { path, error } => {
                write!(f, "cannot read the pod log directory {} ({error})", path.display())
            }
        }
    }
}

/// What one refresh found and did.
#[derive(Debug, Default)]
pub struct Refresh {
    /// Processes whose descriptors were read.
    pub processes: usize,
    /// Descriptors read.
    pub descriptors: usize,
    /// Pids whose descriptors could not be read (permission denied): count
    /// them, and log that `CAP_SYS_PTRACE` is missing.
    pub unreadable: Vec<u32>,
    /// Processes outside the exporter's own process tree
    /// ([`Scan::outside_own_tree`]).
    pub outside_own_tree: usize,
    /// How long the scan of `/proc` took.
    pub scan_time: Duration,
    /// Targets discovered by this refresh.
    pub added: Vec<DirId>,
    /// Targets dropped by this refresh, and why.
    pub dropped: Vec<(DirId, DropReason)>,
    /// What could not be done (repeated at every refresh while it lasts).
    pub problems: Vec<Problem>,
    /// Targets found by this refresh that were not kept open because
    /// [`DiscoveryOptions::max_kept`] directories already are: read while
    /// their holders live, dropped with the last.
    pub unretained: Vec<DirId>,
}

/// The discovered directories, refreshed from `/proc` (or what
/// [`Discovery::set_processes`] gives).
#[derive(Debug)]
pub struct Discovery {
    options: DiscoveryOptions,
    targets: BTreeMap<DirId, Target>,
    processes: Arc<dyn Processes>,
}

impl Default for Discovery {
    fn default() -> Self {
        Self::new(DiscoveryOptions::default())
    }
}

impl Discovery {
    /// No targets yet; [`Discovery::refresh`] finds them.
    pub fn new(options: DiscoveryOptions) -> Self {
        Self {
            options,
            targets: BTreeMap::new(),
            processes: Arc::new(SystemProcesses),
        }
    }

    /// Learns of the processes from `processes` from now on (`/proc` until
    /// then; a test drives discovery with its own).
    pub fn set_processes(&mut self, processes: Arc<dyn Processes>) {
        self.processes = processes;
    }

    /// The time now, by the clock of its [`Processes`].
    pub fn now(&self) -> Instant {
        self.processes.now()
    }

    /// The options.
    pub fn options(&self) -> &DiscoveryOptions {
        &self.options
    }

    /// The targets, by identity.
    pub fn targets(&self) -> &BTreeMap<DirId, Target> {
        &self.targets
    }

    /// Whether a holder seen at the last refresh has exited since.
    pub fn holder_gone(&self) -> bool {
        self.targets
            .values()
            .flat_map(|t| &t.holders)
            .any(|h| !self.processes.is_alive(h))
    }

    /// How many targets are kept open (one descriptor each).
    pub fn kept(&self) -> usize {
        self.targets.values().filter(|t| t.is_kept()).count()
    }

    /// Lets target `id` go (a cap of its part left it out): closes its
    /// descriptor, never opens it again, and drops it once its holders are
    /// gone. Returns whether it was kept open.
    pub fn release(&mut self, id: DirId) -> bool {
        match self.targets.get_mut(&id) {
            Some(target) => {
                target.released = true;
                target.kept.take().is_some()
            }
            None => false,
        }
    }

    /// Scans `/proc` ([`super::scan::scan`], through its [`Processes`]) and
    /// applies the result.
    pub fn refresh(&mut self) -> Refresh {
        let scan = self.processes.scan();
        let now = self.processes.now();
        self.apply(scan, now)
    }

    /// Applies one scan taken at `now`: updates the targets and their
    /// holders, opens new directories, names pods, and drops what the
    /// retention rule says to drop.
    pub fn apply(&mut self, scan: Scan, now: Instant) -> Refresh {
        let mut refresh = Refresh {
            processes: scan.processes,
            descriptors: scan.descriptors,
            unreadable: scan.unreadable,
            outside_own_tree: scan.outside_own_tree,
            scan_time: scan.elapsed,
            ..Refresh::default()
        };
        let mut seen: BTreeMap<DirId, Vec<(Sighting, PathBuf)>> = BTreeMap::new();
        for sighting in scan.sightings {
            match identify(&*self.processes, &sighting) {
                Ok((id, path)) => seen.entry(id).or_default().push((sighting, path)),
                Err(error) => refresh.problems.push(Problem::DirectoryUnreadable {
                    mount_ns: sighting.mount_ns,
                    dir: sighting.dir.clone(),
                    holders: sighting.holders.iter().map(|h| h.pid).collect(),
                    error,
                }),
            }
        }
        for target in self.targets.values_mut() {
            if !seen.contains_key(&target.id) {
                target.holders.clear();
            }
        }
        let mut room = self
            .options
            .max_kept
            .map(|max| max.saturating_sub(self.kept()));
        for (id, sightings) in seen {
            let target = self.targets.entry(id).or_insert_with(|| {
                refresh.added.push(id);
                let born = sightings
                    .first()
                    .and_then(|(_, path)| std::fs::metadata(path).and_then(|m| m.created()).ok());
                Target {
                    id,
                    kept: None,
                    locations: Vec::new(),
                    holders: Vec::new(),
                    via: None,
                    owner: None,
                    pod: None,
                    decision: Decision::Held,
                    first_seen: now,
                    born,
                    last_held: now,
                    released: false,
                }
            });
            let was_kept = target.kept.is_some();
            let may_open = !target.released && room.is_none_or(|r| r > 0);
            target.update(sightings, now, may_open, &mut refresh.problems);
            if !was_kept {
                match (&mut room, target.kept.is_some()) {
                    (Some(r), true) => *r -= 1,
                    (Some(_), false) if !target.released && !may_open => {
                        refresh.unretained.push(id)
                    }
                    _ => {}
                }
            }
        }
        let index = self.options.pod_logs.as_ref().and_then(|logs| {
            logs.index()
                .map_err(|error| {
                    refresh.problems.push(Problem::PodLogsUnreadable {
                        path: logs.pods_dir().to_path_buf(),
                        error,
                    })
                })
                .ok()
        });
        let retention = self.options.retention;
        let logs = self.options.pod_logs.as_ref();
        self.targets.retain(|id, target| {
            let state = target.resolve_pod(logs, index.as_ref());
            target.decision = retain::decide(
                target.is_held(),
                target.kept.is_some(),
                state,
                now.saturating_duration_since(target.last_held),
                retention,
            );
            if let Decision::Drop(reason) = target.decision {
                refresh.dropped.push((*id, reason));
            }
            target.decision.keeps()
        });
        refresh
    }
}

impl Target {
    /// Takes this refresh's sightings of the directory.
    fn update(
        &mut self,
        sightings: Vec<(Sighting, PathBuf)>,
        now: Instant,
        may_open: bool,
        problems: &mut Vec<Problem>,
    ) {
        let mut holders: BTreeMap<u32, Holder> = BTreeMap::new();
        let mut locations = Vec::new();
        for (sighting, path) in sightings {
            if self.kept.is_none() && may_open {
                match KeptDir::open(&path) {
                    Ok(kept) if kept.id() == self.id => self.kept = Some(Arc::new(kept)),
                    Ok(_) => problems.push(Problem::NotKept {
                        id: self.id,
                        dir: sighting.dir.clone(),
                        error: io::Error::other("the directory changed while it was opened"),
                    }),
                    Err(error) => problems.push(Problem::NotKept {
                        id: self.id,
                        dir: sighting.dir.clone(),
                        error,
                    }),
                }
            }
            self.via = Some(path);
            locations.push(Location {
                mount_ns: sighting.mount_ns,
                dir: sighting.dir,
            });
            for holder in sighting.holders {
                // One process seeing the directory at two paths (a bind
                // mount) is one holder.
                holders
                    .entry(holder.pid)
                    .and_modify(|h| h.files += holder.files)
                    .or_insert(holder);
            }
        }
        locations.sort();
        locations.dedup();
        self.locations = locations;
        self.holders = holders.into_values().collect();
        self.last_held = now;
        let oldest = self
            .holders
            .iter()
            .min_by(|a, b| {
                let start = |h: &Holder| h.start_time.unwrap_or(f64::INFINITY);
                start(a).total_cmp(&start(b)).then(a.pid.cmp(&b.pid))
            })
            .cloned();
        let same_place = |a: &Holder, b: &Holder| a.cgroup == b.cgroup;
        if let (Some(old), Some(new)) = (&self.owner, &oldest) {
            if !same_place(old, new) {
                // Another container took the directory over: name it anew.
                self.pod = None;
            }
        }
        if oldest.is_some() {
            self.owner = oldest;
        }
    }

    /// Whether the target's pod exists, naming it when found.
    fn resolve_pod(&mut self, logs: Option<&PodLogs>, index: Option<&PodIndex>) -> PodState {
        let (Some(logs), Some(index), Some(uid)) = (logs, index, self.pod_uid()) else {
            return PodState::Unknown;
        };
        let Some(entry) = index.get(uid) else {
            return PodState::Gone;
        };
        // Named once; a container the log tree did not decide yet (its link
        // not written yet) is looked for again at each refresh.
        if self.pod.as_ref().is_none_or(|p| p.container.is_none()) {
            let container = logs.container_name(entry, self.container_id());
            self.pod = Some(PodRef {
                namespace: entry.namespace.clone(),
                pod: entry.name.clone(),
                uid: entry.uid.clone(),
                container,
            });
        }
        PodState::Exists
    }
}

/// The directory's identity and a path to it through one of its holders
/// (in pid order, as [`Sighting::paths`]), checked to reach the very file
/// that holder has open.
fn identify(processes: &dyn Processes, sighting: &Sighting) -> io::Result<(DirId, PathBuf)> {
    let mut last = io::Error::new(io::ErrorKind::NotFound, "no holder");
    let paths = sighting
        .holders
        .iter()
        .map(|h| processes.through_root(h.pid, &sighting.dir));
    for path in paths {
        let found = DirId::of(&path).and_then(|id| {
            let file = DirId::of(&path.join(&sighting.sample.name))?;
            if (file.dev, file.ino) != sighting.sample.identity {
                return Err(io::Error::new(
                    io::ErrorKind::InvalidData,
                    format!(
                        "{} through the holder's root is not the file it holds",
                        sighting.sample.name
                    ),
                ));
            }
            Ok(id)
        });
        match found {
            Ok(id) => return Ok((id, path)),
            Err(e) => last = e,
        }
    }
    Err(last)
}

#[cfg(test)]
mod tests;
