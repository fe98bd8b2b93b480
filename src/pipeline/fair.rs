//! Parts collected side by side against a deadline, so that no part can make
//! the others wait (the node agent's fair share of a scrape, issues 35 and 40).
//!
//! Each part's [`Collector`] lives in a [`Slot`] with one long-lived worker
//! thread of its own, started with the part and ended when it goes: a
//! collection hands every idle slot's worker a job and waits until all are
//! done or the deadline passes (no thread is started per collection). A
//! part done in time is served fresh; a part still running is served from
//! its last collection while that is younger than the maximum age
//! ([`Settings::max_late_age`]), and otherwise (or before its first) left
//! out; its job goes on in the background: its result is taken by the
//! first collection after it ends, and no new job is started for it
//! meanwhile, so a slow part never costs more than its own thread and never
//! piles up work. The operating system shares the cores between the
//! workers, so a part with thousands of files slows itself, not the others.
//!
//! Every step of a part's read runs on its worker, under the deadline: the
//! listing that checks the cap of files (before its first read, and while it
//! was over the cap), and the read itself, charged to the part's own share
//! of the memory budget ([`MemoryBudget::share_of`]), so that a hostile
//! part cannot take the others' budget before its caps apply.
//!
//! What the collector is told between collections (rechecks, the writer
//! policy, per-writer merging) is queued in the slot and applied by its next
//! job, never by waiting for a running one.

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::PathBuf;
use std::sync::mpsc;
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use crate::model::MetricFamily;
use crate::pipeline::{Collection, Collector};
use crate::source::link_policy::LinkPolicy;
use crate::source::writers::WriterPolicy;
use crate::source::{Input, MemoryBudget};
use crate::transform::config::PerWriter as PerWriterConfig;

/// Something a part's read keeps alive until it ends (a discovered
/// directory's descriptor: `PartSpec::pins` of `pipeline::parts`).
pub type Pin = Arc<dyn std::any::Any + Send + Sync>;

/// Beyond this many queued rechecks, every file is rechecked instead.
const MAX_PENDING_RECHECKS: usize = 4096;

/// What every part's collector is set up with.
#[derive(Debug, Clone)]
pub(crate) struct Settings {
    /// Which links the readers follow.
    pub(crate) link_policy: LinkPolicy,
    /// The shared memory budget (each part reads within its share of it).
    pub(crate) budget: Option<Arc<MemoryBudget>>,
    /// What the readers do about writers.
    pub(crate) policy: WriterPolicy,
    /// Per-writer merging.
    pub(crate) per_writer: Option<PerWriterConfig>,
    /// The oldest a late part's last collection may be to be served in its
    /// place (`--discover.late-max-age`); older, the part is left out.
    pub(crate) max_late_age: Duration,
}

/// Signals a finished job to the collection waiting for it.
#[derive(Debug, Default)]
pub(crate) struct Finished {
    lock: Mutex<()>,
    done: Condvar,
}

impl Finished {
    fn notify(&self) {
        let _guard = lock(&self.lock);
        self.done.notify_all();
    }
}

/// One part's collector, its worker and its job's state.
#[derive(Debug)]
pub(crate) struct Slot {
    shared: Arc<Shared>,
    /// Hands jobs to the part's worker (started with its first job; it
    /// ends when this is dropped, after the job it runs).
    worker: Option<mpsc::Sender<Job>>,
    /// The families last collected (what a late collection serves), and
    /// when they were.
    last: Option<(Vec<MetricFamily>, Instant)>,
    /// Its last collection listed more files than the cap allows: its
    /// next job lists its directories before reading them.
    over_files: bool,
    /// It has been read (or tried) once: its first job lists its
    /// directories against the cap of files before reading them.
    read_once: bool,
    /// Workers started for it (one, unless a worker died).
    workers_started: usize,
}

#[derive(Debug)]
struct Shared {
    collector: Mutex<Collector>,
    state: Mutex<State>,
    /// The part's share of the memory budget (`None`: no budget).
    budget: Option<Arc<MemoryBudget>>,
}

#[derive(Debug, Default)]
struct State {
    /// A job is running.
    busy: bool,
    /// The result of a job not taken yet, and when it ended.
    done: Option<(Done, Instant)>,
    /// Rechecks for the next job.
    rechecks: Vec<PathBuf>,
    recheck_all: bool,
    /// The part is gone: the running job releases the budget when done.
    retired: bool,
}

/// What a job did.
#[derive(Debug)]
enum Done {
    Read(Box<Collection>),
    /// Not read: its directories list this many files, more than the cap.
    OverFiles(usize),
}

/// One read of a part, for its worker.
struct Job {
    inputs: Vec<Input>,
    /// Dropped when the job ends.
    pins: Vec<Pin>,
    settings: Settings,
    /// The cap of files to check by listing before reading, if any.
    check_files: Option<usize>,
    finished: Arc<Finished>,
}

/// How a part's collection went.
#[derive(Debug)]
pub(crate) enum Outcome {
    /// Done in time.
    Fresh(Box<Collection>),
    /// Not done in time: its last families, if it has some young enough.
    Late(Late),
    /// Not read: still this many files, more than the cap.
    OverFiles(usize),
}

/// What a late part serves.
#[derive(Debug)]
pub(crate) enum Late {
    /// Its last collection, younger than [`Settings::max_late_age`].
    Last(Vec<MetricFamily>),
    /// Nothing: its last collection is older than the maximum age.
    Expired,
    /// Nothing: it was never collected.
    None,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl Slot {
    /// A new part's slot, reading within `share` bytes of the memory
    /// budget (see [`Slot::set_share`]).
    pub(crate) fn new(settings: &Settings, share: usize) -> Self {
        let budget = settings
            .budget
            .clone()
            .map(|budget| Arc::new(MemoryBudget::share_of(budget, share)));
        let mut collector = Collector::with_link_policy(settings.link_policy);
        apply(&mut collector, settings, budget.as_ref());
        Self {
            shared: Arc::new(Shared {
                collector: Mutex::new(collector),
                state: Mutex::new(State::default()),
                budget,
            }),
            worker: None,
            last: None,
            over_files: false,
            read_once: false,
            workers_started: 0,
        }
    }

    /// Sets the part's share of the memory budget.
    pub(crate) fn set_share(&self, share: usize) {
        if let Some(budget) = &self.shared.budget {
            budget.set_limit(share);
        }
    }

    /// Queues a recheck of `path` for the next job.
    pub(crate) fn recheck(&self, path: &std::path::Path) {
        let mut state = lock(&self.shared.state);
        if !state.recheck_all {
            state.rechecks.push(path.to_path_buf());
            if state.rechecks.len() > MAX_PENDING_RECHECKS {
                state.recheck_all = true;
                state.rechecks.clear();
            }
        }
    }

    /// Queues a recheck of every file for the next job.
    pub(crate) fn recheck_all(&self) {
        let mut state = lock(&self.shared.state);
        state.recheck_all = true;
        state.rechecks.clear();
    }

    /// The part is gone: its collector releases its share of the budget now,
    /// or when its running job ends; its worker ends after that job.
    pub(crate) fn retire(self) {
        let mut state = lock(&self.shared.state);
        state.retired = true;
        if !state.busy {
            drop(state);
            lock(&self.shared.collector).release_budget();
        }
    }

    /// Hands the part's worker a job reading `inputs` unless one is
    /// running. The result of a job that ended after its collection's
    /// deadline becomes the last families (what this collection serves if
    /// the new job is late too).
    pub(crate) fn start(
        &mut self,
        inputs: &[Input],
        pins: &[Pin],
        settings: &Settings,
        max_files: Option<usize>,
        finished: &Arc<Finished>,
    ) {
        let late = {
            let mut state = lock(&self.shared.state);
            if state.busy {
                return;
            }
            state.busy = true;
            state.done.take()
        };
        if let Some((done, at)) = late {
            self.took(done, at);
        }
        let job = Job {
            inputs: inputs.to_vec(),
            pins: pins.to_vec(),
            settings: settings.clone(),
            check_files: self.files_to_check(max_files),
            finished: finished.clone(),
        };
        self.read_once = true;
        let job = match &self.worker {
            Some(worker) => match worker.send(job) {
                Ok(()) => return,
                // Its worker is gone (a panic outside the read): another.
                Err(mpsc::SendError(job)) => job,
            },
            None => job,
        };
        let (sender, jobs) = mpsc::channel::<Job>();
        let shared = self.shared.clone();
        let spawned = std::thread::Builder::new()
            .name("part-collect".into())
            .spawn(move || {
                for job in jobs {
                    run_job(&shared, job);
                }
            });
        match spawned {
            Ok(_) => {
                // The receiver is alive: the send cannot fail.
                let _ = sender.send(job);
                self.worker = Some(sender);
                self.workers_started += 1;
            }
            Err(error) => {
                tracing::warn!(%error, "Cannot start a thread to read a part; it is left out this time.");
                lock(&self.shared.state).busy = false;
            }
        }
    }

    /// The cap of files the next read checks by listing first: before the
    /// first read, and while the part was over it.
    fn files_to_check(&self, max_files: Option<usize>) -> Option<usize> {
        max_files.filter(|_| self.over_files || !self.read_once)
    }

    /// Reads `inputs` now, on this thread (no deadline).
    pub(crate) fn run(
        &mut self,
        inputs: &[Input],
        settings: &Settings,
        max_files: Option<usize>,
    ) -> Outcome {
        let check_files = self.files_to_check(max_files);
        self.read_once = true;
        let done = read(&self.shared, inputs, settings, check_files);
        self.took(done, Instant::now())
    }

    /// Takes a job's result: what it read becomes the last families.
    fn took(&mut self, done: Done, at: Instant) -> Outcome {
        match done {
            Done::Read(collection) => {
                self.over_files = false;
                self.last = Some((collection.families.clone(), at));
                Outcome::Fresh(collection)
            }
            Done::OverFiles(files) => {
                self.over_files();
                Outcome::OverFiles(files)
            }
        }
    }

    /// The part listed more files than the cap allows: its last families
    /// are forgotten, and its next job lists its directories first.
    pub(crate) fn over_files(&mut self) {
        self.last = None;
        self.over_files = true;
    }

    /// Holds the collector, as a read stuck in the kernel would, until the
    /// returned sender is dropped (tests).
    #[cfg(test)]
    pub(crate) fn stall(&self) -> std::sync::mpsc::Sender<()> {
        let shared = self.shared.clone();
        let (release, released) = std::sync::mpsc::channel::<()>();
        let (locked, is_locked) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let _held = lock(&shared.collector);
            locked.send(()).unwrap();
            let _ = released.recv();
        });
        is_locked.recv().unwrap();
        release
    }

    /// What the part's share of the memory budget holds now (tests).
    #[cfg(test)]
    pub(crate) fn share_held(&self) -> Option<usize> {
        self.shared.budget.as_ref().map(|b| b.held())
    }

    /// Workers started for this part so far (tests).
    #[cfg_attr(not(test), allow(dead_code))]
    pub(crate) fn workers_started(&self) -> usize {
        self.workers_started
    }

    /// Whether a job is running.
    fn busy(&self) -> bool {
        lock(&self.shared.state).busy
    }

    /// The part's outcome: its job's result if done, else its last
    /// families while they are younger than `max_age`.
    pub(crate) fn outcome(&mut self, max_age: Duration) -> Outcome {
        let done = lock(&self.shared.state).done.take();
        match done {
            Some((done, at)) => self.took(done, at),
            None => Outcome::Late(match &self.last {
                Some((families, at)) if at.elapsed() <= max_age => Late::Last(families.clone()),
                Some(_) => Late::Expired,
                None => Late::None,
            }),
        }
    }
}

/// Runs one job on a part's worker and tells the waiting collection.
fn run_job(shared: &Shared, job: Job) {
    let done = read(shared, &job.inputs, &job.settings, job.check_files);
    let mut state = lock(&shared.state);
    if state.retired {
        lock(&shared.collector).release_budget();
    }
    drop(job.pins);
    state.busy = false;
    state.done = Some((done, Instant::now()));
    drop(state);
    job.finished.notify();
}

/// Reads a part's `inputs`; with `check_files`, lists them first and reads
/// nothing (letting go of what its collector holds) when they hold more
/// metric files than that.
fn read(
    shared: &Shared,
    inputs: &[Input],
    settings: &Settings,
    check_files: Option<usize>,
) -> Done {
    let (rechecks, all) = take_rechecks(shared);
    let mut collector = lock(&shared.collector);
    if let Some(max) = check_files {
        let files: usize = inputs.iter().map(count_files).sum();
        if files > max {
            collector.release_budget();
            *collector = Collector::with_link_policy(settings.link_policy);
            apply(&mut collector, settings, shared.budget.as_ref());
            return Done::OverFiles(files);
        }
    }
    prepare(
        &mut collector,
        settings,
        shared.budget.as_ref(),
        &rechecks,
        all,
    );
    let collected = catch_unwind(AssertUnwindSafe(|| collector.collect(inputs)));
    Done::Read(Box::new(collected.unwrap_or_else(|_| {
        tracing::error!(
            "Reading a discovered part's metric files panicked (a bug); serving none of its metrics this time."
        );
        *collector = Collector::with_link_policy(settings.link_policy);
        apply(&mut collector, settings, shared.budget.as_ref());
        Collection::default()
    })))
}

/// The metric files (`*.db`) an input holds: a directory's entries so
/// named, without reading them (0 when it cannot be listed).
fn count_files(input: &Input) -> usize {
    match input {
        Input::File(_) => 1,
        Input::Directory(dir) => std::fs::read_dir(dir).map_or(0, |entries| {
            entries
                .filter_map(Result::ok)
                .filter(|e| e.file_name().as_encoded_bytes().ends_with(b".db"))
                .count()
        }),
    }
}

/// Waits until none of `slots` is busy or `deadline` passes.
pub(crate) fn wait<'a>(
    finished: &Finished,
    slots: impl Iterator<Item = &'a Slot> + Clone,
    deadline: Instant,
) {
    let mut guard = lock(&finished.lock);
    loop {
        if !slots.clone().any(Slot::busy) {
            return;
        }
        let now = Instant::now();
        if now >= deadline {
            return;
        }
        guard = finished
            .done
            .wait_timeout(guard, deadline - now)
            .unwrap_or_else(|e| e.into_inner())
            .0;
    }
}

/// Sets `collector` up as `settings` say, within `budget` (the part's
/// share; each setter does nothing when nothing changed).
fn apply(collector: &mut Collector, settings: &Settings, budget: Option<&Arc<MemoryBudget>>) {
    collector.set_memory_budget(budget.cloned());
    collector.set_writer_policy(settings.policy);
    collector.set_per_writer(settings.per_writer.as_ref());
}

/// The rechecks queued for the next job.
fn take_rechecks(shared: &Shared) -> (Vec<PathBuf>, bool) {
    let mut state = lock(&shared.state);
    (
        std::mem::take(&mut state.rechecks),
        std::mem::take(&mut state.recheck_all),
    )
}

/// [`apply`], then the queued rechecks.
fn prepare(
    collector: &mut Collector,
    settings: &Settings,
    budget: Option<&Arc<MemoryBudget>>,
    rechecks: &[PathBuf],
    all: bool,
) {
    apply(collector, settings, budget);
    if all {
        collector.recheck_all();
    }
    for path in rechecks {
        collector.recheck(path);
    }
}
