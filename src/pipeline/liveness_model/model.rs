//! The reference model of the liveness state-machine test: the world (runs,
//! writers, clocks) and, for each source that asks, which runs it must read
//! and which dead writers' live gauges it must leave out, by the rules of
//! `docs/reliability.md` ("Deployment shapes and liveness"). Pure: no file,
//! no process; the test applies the same steps to real files and checks the
//! exporter's output against a fresh prometheus_client merge of what this
//! model says is served.

use std::collections::{BTreeMap, BTreeSet};

mod agent;

use agent::Agent;

/// Metrics directories (`--dir m0 --dir m1`).
pub(super) const DIRS: usize = 2;
/// How often a run's content is looked at, at most (`activity`).
const CHECK: f64 = 2.0;
/// How long a run stays changing after its content moved.
const WINDOW: f64 = 600.0;
/// The second look at a run first seen (`temporary::SECOND_LOOK`).
pub(super) const SECOND_LOOK: f64 = 1.0;
/// How long after the last event a process starts (seconds).
pub(super) const START_GAP: f64 = 0.1;
/// Times are sums of tenths of seconds: compared to within this.
const EPSILON: f64 = 1e-6;
/// How far a start may be after a birth and still be its writer's.
const SLACK: f64 = 0.05;

/// Where the exporter runs, and what it can see of the writers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Shape {
    /// The writers' pid namespace, descriptors readable (`auto`).
    SharedAuto,
    /// The writers' pid namespace, `--writers.liveness=proc`, descriptors
    /// unreadable (the shipped sidecar manifest).
    SharedProc,
    /// A pid namespace of its own: pid 1, threads 2 to 5; the writers' pids
    /// (1 to 8 in theirs) unseen.
    Own,
}

/// The exporter's own process tree.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Tree {
    /// Run directly: its parent outside its namespace (pid 1 in a namespace
    /// of its own; beside a `pause` pid 1 in a shared one).
    Alone,
    /// Under tini (pid 1).
    UnderInit,
    /// Under `sh -c` under dumb-init (pid 1; the shell pid 2 in a namespace
    /// of its own, 40 in a shared one).
    UnderShell,
}

/// A file a collection does not read whole, put in a run.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Oversized {
    /// The fault catalogue's: real records, then a header claiming
    /// 1.75 GiB over a sparse tail.
    SparseHuge,
    /// The same claiming 40 MiB: within the reader's per-file limit
    /// without a budget.
    SparseMid,
    /// A real file of about 320 KiB of records: over the budget where
    /// there is one, read whole where there is none.
    Large,
}

impl Oversized {
    /// Its real records, and what its header claims (`None`: its records).
    pub(super) fn layout(self) -> (usize, Option<u32>) {
        match self {
            Self::SparseHuge => (100, Some(1_879_048_192)),
            Self::SparseMid => (100, Some(40 << 20)),
            Self::Large => (4_800, None),
        }
    }
}

/// The memory budget where there is one (`--memory.budget`).
pub(super) const BUDGET: usize = 256 << 10;

impl Shape {
    /// The pids writers are drawn from (colliding with the exporter's
    /// thread ids in a namespace of its own).
    pub(super) fn pids(self) -> std::ops::RangeInclusive<u32> {
        if self == Self::Own {
            1..=8
        } else {
            100..=107
        }
    }
}

/// A source that asks for the merged families.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(super) enum Asker {
    /// `/metrics` (removes stale runs when the policy says so).
    Metrics,
    /// A configured view (`running` only), made at start.
    View,
    /// A new `?name[]=` set, made at this ask.
    NameSet,
    /// `dump`: another process, with no history.
    Dump,
    /// `/metrics` of an exporter reading the pods' parent directory
    /// (`--dir.subdirectories-label pod`).
    Pods,
    /// `/metrics` of the node agent (`serve --discover.processes`), which
    /// finds the same pods through their writers' descriptors.
    Discovered,
}

/// A pod: a subdirectory of the pods' parent, its writers' files in it.
#[derive(Clone, Debug)]
pub(super) struct Pod {
    pub(super) name: String,
    pub(super) removed: bool,
    pub(super) writers: Vec<usize>,
    /// What its collector knows (kept while the pod is there).
    seen: Seen,
}

/// Where a writer writes its files.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Home {
    /// A run of a `--dir`.
    Run(usize),
    /// A pod of the pods' parent.
    Pod(usize),
}

/// One event.
#[derive(Clone, Debug)]
pub(super) enum Step {
    /// A file a collection does not read whole appears in a run.
    Oversized { run: usize, file: Oversized },
    /// A child of the exporter starts (`true`) or exits.
    Child { start: bool },
    /// A pod appears (its subdirectory), with its first writer.
    AddPod { pid: u32 },
    /// Another writer of a pod starts (it counts and exits as
    /// [`Step::Write`], [`Step::Exit`] and [`Step::MarkDead`] say, as a
    /// run's).
    PodWorker { pod: usize, pid: u32 },
    /// A pod goes: its writers killed, its subdirectory removed.
    RemovePod { pod: usize },
    /// A server starts: a new run (`TemporaryDirectory`) and its first writer.
    StartRun { dir: usize, pid: u32, busy: bool },
    /// Another worker of a live run starts.
    StartWriter { run: usize, pid: u32, busy: bool },
    /// A writer (of a run or a pod) counts a request.
    Write { writer: usize },
    /// A writer exits: by SIGKILL (files left), or cleanly with
    /// `mark_process_dead` (its live gauge removed).
    Exit { writer: usize, kill: bool },
    /// `mark_process_dead` of a dead writer, late.
    MarkDead { writer: usize },
    /// A server stops: cleanly (its run removed) or killed (left behind).
    StopRun { run: usize, clean: bool },
    /// Time passes; writers that are busy write meanwhile.
    Advance { secs: u32 },
    /// The wall clock steps (NTP; the boot clock does not).
    ClockJump { secs: i32 },
    /// A source asks.
    Ask(Asker),
}

#[derive(Clone, Debug)]
pub(super) struct Writer {
    pub(super) pid: u32,
    pub(super) home: Home,
    pub(super) alive: bool,
    pub(super) busy: bool,
    /// Its live gauge file is there.
    pub(super) gauge: bool,
    /// When it started and its files were born (boot clock).
    born: f64,
    /// The wall clock less the boot clock when its files were born.
    born_offset: f64,
    /// The same when the exporter process first saw them.
    first_offset: Option<f64>,
}

#[derive(Clone, Debug)]
pub(super) struct Run {
    pub(super) dir: usize,
    pub(super) name: String,
    created_wall: f64,
    pub(super) removed: bool,
    /// Moves with every change of its files' content.
    version: u64,
    pub(super) writers: Vec<usize>,
}

#[derive(Clone, Debug)]
struct Look {
    seen: u64,
    checked: f64,
    changed: Option<f64>,
}

/// What one exporter process keeps of the runs.
#[derive(Clone, Debug, Default)]
struct RunsModel {
    looks: BTreeMap<usize, Look>,
    superseded: BTreeSet<usize>,
    /// Liveness (a `Writers`): pids seen, and the writers known dead (a
    /// verdict reached when no process had the pid is final).
    seen: Seen,
}

/// What one `Writers` knows.
#[derive(Clone, Debug, Default)]
struct Seen {
    confirmed: bool,
    dead: BTreeSet<usize>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum State {
    Live,
    Changing,
    Dead,
    Unknown,
}

/// What the last ask must have served.
#[derive(Clone, Debug, PartialEq)]
pub(super) struct Expected {
    pub(super) asker: Asker,
    /// The runs read, in order (by directory, then name).
    pub(super) runs: Vec<usize>,
    /// Writers whose live gauge is left out (seen dead).
    pub(super) dropped_gauges: BTreeSet<usize>,
    /// The node agent's targets (pods), read in this order.
    pub(super) pods: Vec<usize>,
}

impl Expected {
    /// The pids of the writers of `home` whose live gauge is left out.
    pub(super) fn dropped_in(&self, model: &Model, home: Home) -> Vec<u32> {
        self.dropped_gauges
            .iter()
            .map(|&w| &model.writers[w])
            .filter(|w| w.home == home)
            .map(|w| w.pid)
            .collect()
    }
}

/// An oversized file in a run.
#[derive(Clone, Debug)]
pub(super) struct OddFile {
    pub(super) run: usize,
    pub(super) file: Oversized,
    /// The pid its name carries (no process has it).
    pub(super) pid: u32,
}

#[derive(Clone, Debug)]
pub(super) struct Model {
    pub(super) shape: Shape,
    pub(super) remove_stale: bool,
    /// The memory budget (`None`: none).
    pub(super) budget: Option<usize>,
    pub(super) tree: Tree,
    /// The node agent runs in Kubernetes (the pods named from the kubelet's
    /// log tree), or outside it (Docker containers: no pod known, a
    /// directory no process holds lingers).
    pub(super) kubernetes: bool,
    /// The exporter's child runs.
    pub(super) child: bool,
    pub(super) odd: Vec<OddFile>,
    pub(super) pods: Vec<Pod>,
    pub(super) runs: Vec<Run>,
    pub(super) writers: Vec<Writer>,
    boot: f64,
    wall_offset: f64,
    shared: RunsModel,
    /// What `/metrics`'s and the view's collectors know.
    collectors: BTreeMap<Asker, Seen>,
    /// The node agent.
    agent: Agent,
    pub(super) expected: Option<Expected>,
}

impl Model {
    pub(super) fn new(shape: Shape, remove_stale: bool) -> Self {
        Self::with(shape, remove_stale, None, Tree::Alone)
    }

    pub(super) fn with(
        shape: Shape,
        remove_stale: bool,
        budget: Option<usize>,
        tree: Tree,
    ) -> Self {
        Self {
            shape,
            remove_stale,
            budget,
            tree,
            kubernetes: true,
            child: false,
            odd: Vec::new(),
            pods: Vec::new(),
            runs: Vec::new(),
            writers: Vec::new(),
            boot: 100.0,
            wall_offset: 1_700_000_000.0 - 100.0,
            shared: RunsModel::default(),
            collectors: BTreeMap::new(),
            agent: Agent::default(),
            expected: None,
        }
    }

    /// The exporter's ancestors, from the top: (pid, its parent).
    pub(super) fn ancestors(&self) -> Vec<(u32, u32)> {
        let shared = self.shape != Shape::Own;
        match self.tree {
            Tree::Alone => Vec::new(),
            Tree::UnderInit => vec![(1, 0)],
            Tree::UnderShell => vec![(1, 0), (if shared { 40 } else { 2 }, 1)],
        }
    }

    /// The exporter's pid.
    pub(super) fn own_pid(&self) -> u32 {
        match self.shape {
            Shape::Own => 1 + self.ancestors().len() as u32,
            _ => 50,
        }
    }

    /// The exporter's parent (0: outside its namespace).
    pub(super) fn own_parent(&self) -> u32 {
        self.ancestors().last().map_or(0, |&(pid, _)| pid)
    }

    /// The exporter's other threads.
    pub(super) fn own_threads(&self) -> Vec<u32> {
        let me = self.own_pid();
        (me + 1..=me + 4).collect()
    }

    /// The pid of the exporter's child (past its threads).
    pub(super) fn child_pid(&self) -> u32 {
        self.own_pid() + 5
    }

    /// How many processes are outside the exporter's own process tree
    /// (neither it, nor its ancestors, nor its child): in a pid namespace of
    /// its own none (whatever runs above it); in the writers' namespace the
    /// live writers, and the `pause` pid 1 unless it is an ancestor.
    pub(super) fn processes_outside_own_tree(&self) -> usize {
        if self.shape == Shape::Own {
            // Its ancestors and its child are in its tree; writers unseen.
            return 0;
        }
        let pause = usize::from(self.tree == Tree::Alone);
        let writers: BTreeSet<u32> = self
            .writers
            .iter()
            .filter(|w| w.alive)
            .map(|w| w.pid)
            .collect();
        pause + writers.len()
    }

    /// What a collection reads of a file at most (issue 53: liveness
    /// evidence is read within the budget and the reader's per-file limits,
    /// at no more than the cost of a collection): `used` and `len` are its
    /// header's claim and its length, `odd` the kind if it is oversized.
    pub(super) fn collection_cost(&self, used: u64, len: u64, odd: Option<Oversized>) -> u64 {
        /// The reader's first read, then its chunks.
        const FIRST_READ: u64 = 4096;
        const READ_CHUNK: u64 = 1 << 20;
        let end = used.min(len);
        let over_budget = self
            .budget
            .is_some_and(|b| used.saturating_sub(8) > b as u64);
        if over_budget {
            return FIRST_READ.min(len);
        }
        match odd {
            // Its real records, then the first zero-filled one: a first
            // read and one chunk.
            Some(Oversized::SparseHuge | Oversized::SparseMid) => {
                (FIRST_READ + READ_CHUNK).min(end)
            }
            _ => end,
        }
    }

    /// Whether a collection serves the oversized `file` (only a real file
    /// within the budget, where there is one).
    pub(super) fn odd_served(&self, file: Oversized) -> bool {
        file == Oversized::Large && self.budget.is_none()
    }

    /// The name of the next run (as `tempfile` names them).
    pub(super) fn next_run_name(&self) -> String {
        format!("tmp{:08}", self.runs.len())
    }

    pub(super) fn present(&self, run: usize) -> bool {
        self.runs.get(run).is_some_and(|r| !r.removed)
    }

    /// Whether `home` is there.
    pub(super) fn home_present(&self, home: Home) -> bool {
        match home {
            Home::Run(run) => self.present(run),
            Home::Pod(pod) => self.pods.get(pod).is_some_and(|p| !p.removed),
        }
    }

    /// The writers of `home`.
    pub(super) fn home_writers(&self, home: Home) -> &[usize] {
        match home {
            Home::Run(run) => &self.runs[run].writers,
            Home::Pod(pod) => &self.pods[pod].writers,
        }
    }

    /// Whether a writer of pid `pid` (of a run or a pod) runs.
    pub(super) fn alive_pid(&self, pid: u32) -> bool {
        self.writers.iter().any(|w| w.alive && w.pid == pid)
    }

    /// Whether `step` can happen now.
    pub(super) fn allows(&self, step: &Step) -> bool {
        let pid_free = |home: Option<Home>, pid: u32| {
            self.shape.pids().contains(&pid)
                && (self.shape == Shape::Own || !self.alive_pid(pid))
                && home.is_none_or(|h| {
                    self.home_writers(h)
                        .iter()
                        .all(|&w| self.writers[w].pid != pid)
                })
        };
        match *step {
            Step::StartRun { dir, pid, .. } => dir < DIRS && pid_free(None, pid),
            Step::StartWriter { run, pid, .. } => {
                self.present(run)
                    && self.runs[run]
                        .writers
                        .iter()
                        .any(|&w| self.writers[w].alive)
                    && pid_free(Some(Home::Run(run)), pid)
            }
            Step::Write { writer } | Step::Exit { writer, .. } => {
                self.writers.get(writer).is_some_and(|w| w.alive)
            }
            Step::MarkDead { writer } => self
                .writers
                .get(writer)
                .is_some_and(|w| !w.alive && w.gauge && self.home_present(w.home)),
            Step::StopRun { run, .. } => self.present(run),
            Step::Oversized { run, .. } => self.present(run) && self.odd.len() < 3,
            Step::Child { start } => start != self.child,
            Step::AddPod { pid } => self.pods.len() < 6 && pid_free(None, pid),
            Step::PodWorker { pod, pid } => {
                self.home_present(Home::Pod(pod)) && pid_free(Some(Home::Pod(pod)), pid)
            }
            Step::RemovePod { pod } => self.pods.get(pod).is_some_and(|p| !p.removed),
            Step::Advance { .. } | Step::ClockJump { .. } | Step::Ask(_) => true,
        }
    }

    fn write(&mut self, writer: usize) {
        if let Home::Run(run) = self.writers[writer].home {
            self.runs[run].version += 1;
        }
    }

    fn add_writer(&mut self, home: Home, pid: u32, busy: bool) {
        // A process starts a while after the last event (a pid given again
        // within the start times' precision is not told apart).
        self.boot += START_GAP;
        self.writers.push(Writer {
            pid,
            home,
            alive: true,
            busy,
            gauge: true,
            born: self.boot,
            born_offset: self.wall_offset,
            first_offset: None,
        });
        let writer = self.writers.len() - 1;
        match home {
            Home::Run(run) => {
                self.runs[run].writers.push(writer);
                self.runs[run].version += 1;
            }
            Home::Pod(pod) => self.pods[pod].writers.push(writer),
        }
    }

    fn exit(&mut self, writer: usize, kill: bool) {
        self.writers[writer].alive = false;
        if !kill {
            self.mark_dead(writer);
        }
    }

    fn mark_dead(&mut self, writer: usize) {
        if std::mem::replace(&mut self.writers[writer].gauge, false) {
            self.write(writer);
        }
    }

    /// Time passes; busy writers write once.
    fn advance(&mut self, secs: f64) {
        self.boot += secs;
        for w in 0..self.writers.len() {
            let writer = &self.writers[w];
            if writer.alive && writer.busy && self.home_present(writer.home) {
                self.write(w);
            }
        }
    }

    pub(super) fn apply(&mut self, step: &Step) {
        self.expected = None;
        match *step {
            Step::StartRun { dir, pid, busy } => {
                self.boot += START_GAP;
                self.runs.push(Run {
                    dir,
                    name: self.next_run_name(),
                    created_wall: self.boot + self.wall_offset,
                    removed: false,
                    version: 0,
                    writers: Vec::new(),
                });
                self.add_writer(Home::Run(self.runs.len() - 1), pid, busy);
            }
            Step::StartWriter { run, pid, busy } => self.add_writer(Home::Run(run), pid, busy),
            Step::Write { writer } => self.write(writer),
            Step::Exit { writer, kill } => self.exit(writer, kill),
            Step::MarkDead { writer } => self.mark_dead(writer),
            Step::Oversized { run, file } => {
                let pid = 9000 + self.odd.len() as u32;
                self.odd.push(OddFile { run, file, pid });
                self.runs[run].version += 1;
            }
            Step::Child { start } => self.child = start,
            Step::AddPod { pid } => {
                self.pods.push(Pod {
                    name: format!("default_vllm-{}", self.pods.len()),
                    removed: false,
                    writers: Vec::new(),
                    seen: Seen::default(),
                });
                self.add_writer(Home::Pod(self.pods.len() - 1), pid, false);
            }
            Step::PodWorker { pod, pid } => self.add_writer(Home::Pod(pod), pid, false),
            Step::RemovePod { pod } => {
                for w in self.pods[pod].writers.clone() {
                    self.writers[w].alive = false;
                }
                self.pods[pod].removed = true;
            }
            Step::StopRun { run, clean } => {
                for w in self.runs[run].writers.clone() {
                    self.writers[w].alive = false;
                }
                self.runs[run].removed = clean;
            }
            Step::Advance { secs } => self.advance(f64::from(secs)),
            Step::ClockJump { secs } => self.wall_offset += f64::from(secs),
            Step::Ask(asker) => self.ask(asker),
        }
    }

    /// What the exporter makes of `writer` (`confirmed`: pids seen, in
    /// `auto`), given when it first saw its files. Starts are compared with
    /// births in the boot clock, converted at first sight, so a wall clock
    /// stepped forward between a birth and its first sight makes a writer
    /// whose descriptors cannot be read look later than its file: unknown,
    /// never dead (only the clocks say so); stepped backward, a later
    /// process given a dead writer's pid is taken for it (a documented
    /// limit). A dead writer whose pid a later process has is unknown where
    /// descriptors cannot be read. `shape`: how the collector sees the
    /// writers (the node agent sees every pid and descriptor, as
    /// [`Shape::SharedAuto`] does).
    fn writer_state(&self, shape: Shape, writer: usize, first_offset: f64, seen: &Seen) -> State {
        let w = &self.writers[writer];
        let confirmed = seen.confirmed;
        if seen.dead.contains(&writer) {
            return State::Dead;
        }
        match shape {
            Shape::Own => State::Unknown,
            Shape::SharedAuto if w.alive => State::Live,
            Shape::SharedAuto if confirmed => State::Dead,
            Shape::SharedAuto => State::Unknown,
            Shape::SharedProc => {
                // Its birth as converted at first sight: a step between the
                // two moves it; a process of its pid that started no later
                // is taken for its writer.
                let born = w.born + (w.born_offset - first_offset);
                let of_pid = self.writers.iter().filter(|p| p.alive && p.pid == w.pid);
                if of_pid.clone().any(|p| p.born <= born + SLACK) {
                    State::Live
                } else if of_pid.count() > 0 {
                    State::Unknown
                } else {
                    State::Dead
                }
            }
        }
    }

    /// What a collector that keeps `seen` makes of the writers of the
    /// files it reads (`read_writers`, first seen as `first` says): a writer
    /// seen alive among them confirms that pids are seen (`auto`); the
    /// writers it finds dead, whose live gauges it leaves out, kept dead.
    fn collector_verdicts(
        &self,
        shape: Shape,
        read_writers: &[usize],
        first: &BTreeMap<usize, f64>,
        seen: &mut Seen,
    ) -> BTreeSet<usize> {
        let assumed = Seen {
            confirmed: true,
            ..Seen::default()
        };
        seen.confirmed = seen.confirmed
            || shape == Shape::SharedProc
            || read_writers
                .iter()
                .any(|&w| self.writer_state(shape, w, first[&w], &assumed) == State::Live);
        let dropped: BTreeSet<usize> = read_writers
            .iter()
            .copied()
            .filter(|&w| self.writer_state(shape, w, first[&w], seen) == State::Dead)
            .collect();
        seen.dead.extend(dropped.iter().copied());
        dropped
    }

    /// The pods' exporter asks: each present pod read whole (no temporary
    /// runs in a pod), by a collector of its own that keeps what it knows
    /// while the pod is there, leaving out the live gauges of the writers it
    /// finds dead, by the rules of a directory's.
    fn ask_pods(&mut self) {
        let mut first = BTreeMap::new();
        for (i, w) in self.writers.iter_mut().enumerate() {
            if matches!(w.home, Home::Pod(p) if !self.pods[p].removed) {
                first.insert(i, *w.first_offset.get_or_insert(self.wall_offset));
            }
        }
        let mut dropped_gauges = BTreeSet::new();
        for pod in 0..self.pods.len() {
            if self.pods[pod].removed {
                continue;
            }
            let mut seen = std::mem::take(&mut self.pods[pod].seen);
            let read = self.pods[pod].writers.clone();
            dropped_gauges.extend(self.collector_verdicts(self.shape, &read, &first, &mut seen));
            self.pods[pod].seen = seen;
        }
        self.expected = Some(Expected {
            asker: Asker::Pods,
            runs: Vec::new(),
            dropped_gauges,
            pods: Vec::new(),
        });
    }

    fn ask(&mut self, asker: Asker) {
        match asker {
            Asker::Pods => return self.ask_pods(),
            Asker::Discovered => return self.ask_discovered(),
            _ => {}
        }
        let fresh = asker == Asker::Dump;
        let mut first = BTreeMap::new();
        for (i, w) in self.writers.iter_mut().enumerate() {
            if matches!(w.home, Home::Run(r) if !self.runs[r].removed) {
                let offset = if fresh {
                    self.wall_offset
                } else {
                    *w.first_offset.get_or_insert(self.wall_offset)
                };
                first.insert(i, offset);
            }
        }
        let mut runs_model = if fresh {
            RunsModel::default()
        } else {
            std::mem::take(&mut self.shared)
        };
        let mut read = Vec::new();
        for dir in 0..DIRS {
            let (current, stale_dead) = self.survey(&mut runs_model, dir, &first);
            read.extend(current);
            if asker == Asker::Metrics && self.remove_stale {
                for run in stale_dead {
                    self.runs[run].removed = true;
                }
            }
        }
        if !fresh {
            self.shared = runs_model;
        }
        // The collector's own evidence: a writer seen alive among the files
        // it reads confirms that pids are seen (`auto`).
        let read_writers: Vec<usize> = read
            .iter()
            .flat_map(|&r| self.runs[r].writers.clone())
            .collect();
        let kept = matches!(asker, Asker::Metrics | Asker::View);
        let mut seen = if kept {
            self.collectors.remove(&asker).unwrap_or_default()
        } else {
            Seen::default()
        };
        let dropped_gauges = self.collector_verdicts(self.shape, &read_writers, &first, &mut seen);
        if kept {
            self.collectors.insert(asker, seen);
        }
        self.expected = Some(Expected {
            asker,
            runs: read,
            dropped_gauges,
            pods: Vec::new(),
        });
    }

    /// One directory's survey: its current runs in name order, and its
    /// stale runs that may be removed.
    fn survey(
        &mut self,
        m: &mut RunsModel,
        dir: usize,
        first: &BTreeMap<usize, f64>,
    ) -> (Vec<usize>, Vec<usize>) {
        let found: Vec<usize> = (0..self.runs.len())
            .filter(|&r| self.runs[r].dir == dir && !self.runs[r].removed)
            .collect();
        if found.is_empty() {
            return (Vec::new(), Vec::new());
        }
        let writer_states = |model: &Self, r: usize, seen: &Seen| -> Vec<State> {
            model.runs[r]
                .writers
                .iter()
                .map(|&w| model.writer_state(model.shape, w, first[&w], seen))
                .collect()
        };
        let assumed = Seen {
            confirmed: true,
            ..Seen::default()
        };
        m.seen.confirmed |= self.shape == Shape::SharedProc
            || found
                .iter()
                .any(|&r| writer_states(self, r, &assumed).contains(&State::Live));
        let visible = m.seen.confirmed;
        for &r in &found {
            for (&w, state) in self.runs[r]
                .writers
                .iter()
                .zip(writer_states(self, r, &m.seen))
            {
                if state == State::Dead {
                    m.seen.dead.insert(w);
                }
            }
        }
        let first_looks: Vec<bool> = found.iter().map(|r| !m.looks.contains_key(r)).collect();
        let states = |model: &Self, m: &mut RunsModel| -> Vec<State> {
            found
                .iter()
                .map(|&r| {
                    let ws = writer_states(model, r, &m.seen);
                    if ws.contains(&State::Live) {
                        return State::Live;
                    }
                    if visible && ws.iter().all(|s| *s == State::Dead) {
                        return State::Dead;
                    }
                    let (now, version) = (model.boot, model.runs[r].version);
                    let look = m.looks.entry(r).or_insert(Look {
                        seen: version,
                        checked: now,
                        changed: None,
                    });
                    if now - look.checked >= CHECK - EPSILON {
                        if look.seen != version {
                            look.seen = version;
                            look.changed = Some(now);
                        }
                        look.checked = now;
                    }
                    if look.changed.is_some_and(|at| now - at < WINDOW - EPSILON) {
                        State::Changing
                    } else {
                        State::Unknown
                    }
                })
                .collect()
        };
        let newest = |model: &Self, m: &RunsModel, states: &[State]| {
            let any_live = states.contains(&State::Live);
            let newest = (0..found.len())
                .filter(|&i| {
                    matches!(states[i], State::Live | State::Changing)
                        || !m.superseded.contains(&found[i])
                })
                .max_by(|&a, &b| {
                    let (ra, rb) = (&model.runs[found[a]], &model.runs[found[b]]);
                    ra.created_wall
                        .total_cmp(&rb.created_wall)
                        .then_with(|| ra.name.cmp(&rb.name))
                });
            (any_live, newest)
        };
        let mut st = states(self, m);
        let (any_live, newest_i) = newest(self, m, &st);
        let second = !visible
            && (0..found.len()).any(|i| {
                first_looks[i] && st[i] == State::Unknown && (any_live || Some(i) != newest_i)
            });
        if second {
            self.advance(SECOND_LOOK);
            let now = self.boot;
            for (i, &r) in found.iter().enumerate() {
                if first_looks[i] {
                    let version = self.runs[r].version;
                    let look = m.looks.get_mut(&r).expect("looked at");
                    if look.seen != version {
                        look.seen = version;
                        look.changed = Some(now);
                    }
                    look.checked = now;
                }
            }
            st = states(self, m);
        }
        let (any_live, newest_i) = newest(self, m, &st);
        let key = |model: &Self, r: usize| (model.runs[r].created_wall, model.runs[r].name.clone());
        let newest_key = newest_i.map(|i| key(self, found[i]));
        let (mut current, mut stale_dead) = (Vec::new(), Vec::new());
        for (i, &r) in found.iter().enumerate() {
            let is_current = match st[i] {
                State::Live | State::Changing => {
                    m.superseded.remove(&r);
                    true
                }
                State::Dead | State::Unknown => !any_live && Some(i) == newest_i,
            };
            let (created, name) = key(self, r);
            let newer = newest_key
                .as_ref()
                .is_some_and(|(c, n)| c.total_cmp(&created).then_with(|| n.cmp(&name)).is_gt());
            if !is_current && matches!(st[i], State::Dead | State::Unknown) && newer {
                m.superseded.insert(r);
            }
            if is_current {
                current.push(r);
            } else if st[i] == State::Dead
                && self.runs[r]
                    .writers
                    .iter()
                    .all(|&w| !self.alive_pid(self.writers[w].pid))
            {
                stale_dead.push(r);
            }
        }
        current.sort_by(|&a, &b| self.runs[a].name.cmp(&self.runs[b].name));
        (current, stale_dead)
    }
}
