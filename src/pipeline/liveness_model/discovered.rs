//! The node agent of the liveness state-machine test: `serve
//! --discover.processes` finding the pods of `pods.rs` (the same
//! subdirectories, the same writers) through their writers' descriptors, as
//! it finds them on a node: each pod's directory held by its writers'
//! processes, named from a kubelet log tree the test keeps (a pod's log
//! directory made with it, removed when it goes) or, outside Kubernetes,
//! by the container its writers' cgroup names; kept open after its writers
//! exit while its pod exists (outside Kubernetes, for the linger), dropped
//! once it is gone.
//!
//! The agent runs on the host (`hostPID`, `CAP_SYS_PTRACE`), whatever the
//! shape of the sidecar exporter beside it: its evidence ([`HostView`]) is a
//! process table of its own ([`host_table`]: every pod's writer with a host
//! pid of its own, [`host_pid`], and its pid in its pod's namespace as its
//! innermost; every descriptor readable), with the world's clocks and
//! births. Discovery is driven through its seam ([`Processes`]): the
//! scripted processes scan that table, name the paths its descriptors hold
//! (the pods' real files, found by identity) in one mount namespace, and
//! follow the world's clock (the scans' schedule, the linger). The parts'
//! collectors are given the same evidence ([`Source::with_evidence`]).
//! Settings that make the outcome replay from a seed: a scrape timeout of
//! ten minutes (no part is late: none is served from its last collection)
//! and no memory budget (parts read side by side do not race for one).
//!
//! Its answer must equal, after every ask, a fresh prometheus_client merge
//! of each target's files less the live gauges of the writers its
//! collector finds dead (`model::Model::ask_discovered`: the targets of the
//! last scan, scanned when the reader's schedule says), each labelled as
//! the node agent labels a pod (or a container), in the order of their
//! labels. The sequences the generator found for it are pinned below.

use std::collections::BTreeMap;
use std::os::unix::fs::MetadataExt as _;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::model::{Asker, Home, Model, Shape, Step, Tree, BUDGET};
use super::{replay, replay_model};
use crate::model::{Label, MetricFamily};
use crate::pipeline::discovered::DiscoverOptions;
use crate::pipeline::{Collector, Source};
use crate::source::discover::cgroup::CgroupOwner;
use crate::source::discover::scan::{count_outside_own_tree, HeldFile};
use crate::source::discover::{Holder, Processes, Scan, Sighting};
use crate::source::writers::evidence::{Births, Evidence, ProcessHandle};
use crate::source::writers::procfs::OpenFile;
use crate::source::writers::scripted::Scripted;
use crate::source::writers::WriterPolicy;
use crate::transform::combine::{combine_labelled, LabelledPart};

/// The node agent's pid on the host, its threads next.
const AGENT_PID: u32 = 900;

/// The host's process table as the node agent sees it: the agent, and the
/// pods' writers as [`World`](super::World) starts them ([`host_pid`]).
pub(super) fn host_table() -> Scripted {
    Scripted::new(AGENT_PID, (AGENT_PID + 1..=AGENT_PID + 4).collect())
}

/// The host pid of writer `writer` (its pid in its pod's namespace is the
/// model's): one of its own, past the agent's threads.
pub(super) fn host_pid(writer: usize) -> u32 {
    1000 + u32::try_from(writer).unwrap()
}

/// The node agent's evidence: the host's process table (every pid and
/// descriptor readable, each writer's pid in its pod's namespace its
/// innermost), the world's clocks and files' births, and births first seen
/// by another process than the sidecar exporter.
#[derive(Debug)]
struct HostView {
    table: Scripted,
    clock: Scripted,
    births: Births,
}

impl Evidence for HostView {
    fn own_pid(&self) -> u32 {
        self.table.own_pid()
    }

    fn own_task(&self, host: u32) -> bool {
        self.table.own_task(host)
    }

    fn processes(&self) -> Vec<u32> {
        self.table.processes()
    }

    fn parent_pid(&self, host: u32) -> Option<u32> {
        self.table.parent_pid(host)
    }

    fn start_time(&self, host: u32) -> Option<f64> {
        self.table.start_time(host)
    }

    fn open_files(&self, host: u32) -> Option<Vec<OpenFile>> {
        self.table.open_files(host)
    }

    fn innermost_pid(&self, host: u32) -> Option<u32> {
        self.table.innermost_pid(host)
    }

    fn handle(&self, host: u32) -> Option<Box<dyn ProcessHandle>> {
        self.table.handle(host)
    }

    fn now(&self) -> Instant {
        self.clock.now()
    }

    fn clocks(&self) -> Option<(f64, f64)> {
        self.clock.clocks()
    }

    fn births(&self) -> &Births {
        &self.births
    }

    fn birth(&self, identity: (u64, u64), recorded: f64) -> f64 {
        self.clock.birth(identity, recorded)
    }
}

/// The container every pod has (its only log directory).
const CONTAINER: &str = "vllm";
/// The writers' mount namespace (one for all: the pods' directories are
/// reached at their own paths).
const MOUNT_NS: u64 = 4_026_531_840;

/// The number of the pod named `name` (`default_vllm-<n>`).
fn pod_number(name: &str) -> u64 {
    name.rsplit('-')
        .next()
        .and_then(|n| n.parse().ok())
        .unwrap()
}

/// The UID of the pod named `name`.
fn pod_uid(name: &str) -> String {
    format!("00000000-0000-4000-8000-{:012}", pod_number(name))
}

/// The ID of the container of the pod named `name`.
fn container_id(name: &str) -> String {
    format!("{:064x}", 0xc0de_0000 + pod_number(name))
}

/// Discovery's processes in the scripted world.
#[derive(Debug)]
struct ScriptedProcesses {
    evidence: Arc<HostView>,
    /// The pods' parent: the files the processes hold are there.
    pods: PathBuf,
    /// In Kubernetes: the writers' cgroups name their pods.
    kubernetes: bool,
}

impl ScriptedProcesses {
    /// Every file of every pod (its identity → its pod's directory and its
    /// name): what a descriptor's link names.
    fn files(&self) -> BTreeMap<(u64, u64), (PathBuf, String)> {
        let mut files = BTreeMap::new();
        for pod in std::fs::read_dir(&self.pods).unwrap() {
            let dir = pod.unwrap().path();
            let Ok(entries) = std::fs::read_dir(&dir) else {
                continue;
            };
            for entry in entries {
                let entry = entry.unwrap();
                let Ok(meta) = entry.metadata() else { continue };
                let name = entry.file_name().to_string_lossy().into_owned();
                files.insert((meta.dev(), meta.ino()), (dir.clone(), name));
            }
        }
        files
    }
}

impl Processes for ScriptedProcesses {
    fn scan(&self) -> Scan {
        let me = self.evidence.own_pid();
        let pids = self.evidence.processes();
        let mut scan = Scan {
            outside_own_tree: count_outside_own_tree(&*self.evidence, &pids),
            ..Scan::default()
        };
        let files = self.files();
        let mut sightings: BTreeMap<PathBuf, Sighting> = BTreeMap::new();
        for pid in pids.into_iter().filter(|&pid| pid != me) {
            let Some(open) = self.evidence.open_files(pid) else {
                scan.unreadable.push(pid);
                continue;
            };
            scan.processes += 1;
            scan.descriptors += open.len();
            let mut held: BTreeMap<&Path, Vec<HeldFile>> = BTreeMap::new();
            for file in open.iter().filter(|f| f.writable) {
                if let Some((dir, name)) = files.get(&file.identity) {
                    held.entry(dir).or_default().push(HeldFile {
                        name: name.clone(),
                        identity: file.identity,
                    });
                }
            }
            for (dir, held) in held {
                let name = dir.file_name().unwrap().to_string_lossy();
                let (uid, id) = (pod_uid(&name), container_id(&name));
                let holder = Holder {
                    pid,
                    ns_pid: self.evidence.innermost_pid(pid),
                    start_time: self.evidence.start_time(pid),
                    command: Some("python".into()),
                    cgroup: Some(if self.kubernetes {
                        CgroupOwner {
                            path: format!("/kubepods/pod{uid}/{id}"),
                            pod_uid: Some(uid),
                            container_id: Some(id),
                        }
                    } else {
                        CgroupOwner {
                            path: format!("/system.slice/docker-{id}.scope"),
                            pod_uid: None,
                            container_id: Some(id),
                        }
                    }),
                    files: held.len(),
                };
                let sample = held.into_iter().next().expect("one at least");
                sightings
                    .entry(dir.to_path_buf())
                    .or_insert_with(|| Sighting {
                        mount_ns: MOUNT_NS,
                        dir: dir.to_path_buf(),
                        holders: Vec::new(),
                        sample,
                    })
                    .holders
                    .push(holder);
            }
        }
        scan.sightings = sightings.into_values().collect();
        scan
    }

    fn is_alive(&self, holder: &Holder) -> bool {
        let now = self.evidence.start_time(holder.pid);
        now.is_some() && now == holder.start_time
    }

    fn through_root(&self, _pid: u32, dir: &Path) -> PathBuf {
        dir.to_path_buf()
    }

    fn now(&self) -> Instant {
        self.evidence.now()
    }
}

/// The node agent and the kubelet's log tree.
pub(super) struct Agent {
    /// `/var/log/pods`; `None` outside Kubernetes.
    logs: Option<PathBuf>,
    source: Source,
}

impl Agent {
    pub(super) fn new(
        root: &Path,
        pods: &Path,
        model: &Model,
        policy: WriterPolicy,
        world: &Scripted,
        host: &Scripted,
    ) -> Self {
        let logs = model.kubernetes.then(|| root.join("log/pods"));
        if let Some(logs) = &logs {
            std::fs::create_dir_all(logs).unwrap();
        }
        let options = DiscoverOptions {
            pod_log_dir: logs.clone(),
            scrape_timeout: Duration::from_secs(600),
            ..DiscoverOptions::default()
        };
        let evidence = Arc::new(HostView {
            table: host.clone(),
            clock: world.clone(),
            births: Births::default(),
        });
        let processes = ScriptedProcesses {
            evidence: evidence.clone(),
            pods: pods.to_path_buf(),
            kubernetes: model.kubernetes,
        };
        let source = Source::discovered(options)
            .with_evidence(evidence)
            .with_processes(Arc::new(processes))
            .with_writer_policy(policy);
        Self { logs, source }
    }

    /// The log directory of pod `pod` (`<namespace>_<pod>_<uid>`), in
    /// Kubernetes.
    fn log_dir(&self, model: &Model, pod: usize) -> Option<PathBuf> {
        let name = &model.pods[pod].name;
        let logs = self.logs.as_ref()?;
        Some(logs.join(format!("{name}_{}", pod_uid(name))))
    }

    /// Pod `pod` is made: the kubelet writes its container's logs.
    pub(super) fn pod_added(&self, model: &Model, pod: usize) {
        if let Some(dir) = self.log_dir(model, pod) {
            std::fs::create_dir_all(dir.join(CONTAINER)).unwrap();
        }
    }

    /// Pod `pod` is deleted: the kubelet removes its logs.
    pub(super) fn pod_removed(&self, model: &Model, pod: usize) {
        if let Some(dir) = self.log_dir(model, pod) {
            std::fs::remove_dir_all(dir).unwrap();
        }
    }

    /// The node agent's answer.
    pub(super) fn answer(&mut self) -> Vec<MetricFamily> {
        self.source.collect().collection.families
    }

    /// A fresh prometheus_client merge of each target's files (in the order
    /// a listing gives them, as the agent reads them; none once its
    /// directory is removed), less the live gauges of the writers the model
    /// found dead, labelled as the agent labels a pod, in the order of the
    /// labels.
    pub(super) fn expected(
        &self,
        model: &Model,
        pod_dir: impl Fn(usize) -> PathBuf,
    ) -> Vec<MetricFamily> {
        let expected = model.expected.as_ref().expect("an ask");
        let mut parts: Vec<LabelledPart> = expected
            .pods
            .iter()
            .map(|&pod| {
                let dir = pod_dir(pod);
                let dropped = expected.dropped_in(model, Home::Pod(pod));
                let files = if dir.exists() {
                    super::served_files(&dir, &dropped, &[])
                } else {
                    Vec::new()
                };
                let families = Collector::new().collect(&files).families;
                let pod_name = &model.pods[pod].name;
                if !model.kubernetes {
                    let (id, dir) = (container_id(pod_name), dir.display().to_string());
                    return LabelledPart {
                        name: format!("container {id} {dir}").into(),
                        labels: vec![
                            ("container".into(), id.into()),
                            ("directory".into(), dir.into()),
                        ],
                        families,
                    };
                }
                let (namespace, name) = pod_name.split_once('_').unwrap();
                let labels: Vec<Label> = vec![
                    ("namespace".into(), namespace.into()),
                    ("pod".into(), name.into()),
                    ("container".into(), CONTAINER.into()),
                ];
                LabelledPart {
                    name: format!("{namespace}/{name}/{CONTAINER}").into(),
                    labels,
                    families,
                }
            })
            .collect();
        parts.sort_by(|a, b| a.labels.cmp(&b.labels));
        combine_labelled(parts).families
    }
}

// Sequences the generator found, pinned.

/// The node agent's parts judged by the evidence their source is given, as
/// the generator found it with that withheld (`Source::with_evidence` not
/// reaching the discovered parts; seeds 53, 1, 2 and 3): the parts asked
/// `/proc`, where no process 100 holds the pod's file, so with
/// `--writers.liveness=proc` the live writer was judged dead (its live
/// gauge left out), and with `auto` (as an earlier generator found it) the
/// killed writer, seen alive by the scan and the first collection, stayed
/// unknown (its live gauge served).
#[test]
#[rustfmt::skip]
fn the_evidence_a_source_is_given_reaches_the_discovered_parts() {
    use Step::*;
    let mut model = Model::new(Shape::SharedProc, false);
    model.kubernetes = false;
    replay_model(model, &[
        AddPod { pid: 100 },
        Ask(Asker::Discovered),
    ]);
    replay(Shape::SharedAuto, false, &[
        AddPod { pid: 100 },
        Ask(Asker::Discovered),
        Exit { writer: 0, kill: true },
        Ask(Asker::Discovered),
    ]);
}

/// A model of the writers' pid namespace with descriptors readable, the
/// node agent outside Kubernetes.
fn outside_kubernetes() -> Model {
    let mut model = Model::new(Shape::SharedAuto, false);
    model.kubernetes = false;
    model
}

/// Outside Kubernetes, as the generator found it with the linger made
/// endless (seed 53, at the 1,039th of 2,000 cases).
#[test]
#[rustfmt::skip]
fn outside_kubernetes_a_directory_no_process_holds_lingers_then_goes() {
    use Step::*;
    replay_model(outside_kubernetes(), &[
        AddPod { pid: 100 },
        PodWorker { pod: 0, pid: 101 },
        Exit { writer: 1, kill: true },
        Ask(Asker::Discovered),
        Advance { secs: 700 },
        Exit { writer: 0, kill: false },
        Ask(Asker::Discovered),
    ]);
}

/// As the generator found it with the node agent scanning only on its
/// interval (seed 53, at the 61st case): a holder of the last scan exited,
/// so the agent scans again at once and finds the pod started since (its
/// writer pid 1 in its pod's namespace, as the first's was: another
/// process on the host).
#[test]
#[rustfmt::skip]
fn the_node_agent_scans_again_when_a_holder_exits() {
    use Step::*;
    let mut model = Model::with(Shape::Own, false, Some(BUDGET), Tree::Alone);
    model.kubernetes = false;
    replay_model(model, &[
        AddPod { pid: 1 },
        Ask(Asker::Discovered),
        Exit { writer: 0, kill: false },
        AddPod { pid: 1 },
        Advance { secs: 1 },
        Ask(Asker::Discovered),
    ]);
}

/// Found by the generator once the node agent ran on the host (seed 11 of
/// 3,000 cases): the wall clock stepped forward between a pod's new
/// writer's birth and the agent's first sight of its files moved their
/// birth back in the boot clock, before the agent's table of nested pid
/// namespaces was built; the table was not built again, the writer (seen
/// only through its pod's namespace) was not found and its live gauge left
/// out, for good. A writer about to be called dead is now looked for in a
/// table of this collection.
#[test]
#[rustfmt::skip]
fn a_wall_clock_step_never_hides_a_new_writer_of_a_discovered_pod() {
    use Step::*;
    replay_model(outside_kubernetes(), &[
        AddPod { pid: 100 },
        Ask(Asker::Discovered),
        PodWorker { pod: 0, pid: 101 },
        ClockJump { secs: 5 },
        Ask(Asker::Discovered),
    ]);
}
