//! Parts collected side by side against a deadline, so that no part can make
//! the others wait (the node agent's fair share of a scrape, issue 35).
//!
//! Each part's [`Collector`] lives in a [`Slot`]. A collection hands every
//! idle slot a job on a thread of its own and waits until all are done or
//! the deadline passes. A part done in time is served fresh; a part still
//! running is served from its last collection (or, before its first, left
//! out), and its job goes on in the background: its result is taken by the
//! first collection after it ends, and no new job is started for it
//! meanwhile, so a slow part never costs more than one thread and never
//! piles up work. The operating system shares the cores between the jobs,
//! so a part with thousands of files slows itself, not the others.
//!
//! What the collector is told between collections (rechecks, the writer
//! policy, the memory budget, per-writer merging) is queued in the slot and
//! applied by its next job, never by waiting for a running one.

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::PathBuf;
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::Instant;

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
    /// The shared memory budget.
    pub(crate) budget: Option<Arc<MemoryBudget>>,
    /// What the readers do about writers.
    pub(crate) policy: WriterPolicy,
    /// Per-writer merging.
    pub(crate) per_writer: Option<PerWriterConfig>,
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

/// One part's collector and its job's state.
#[derive(Debug)]
pub(crate) struct Slot {
    shared: Arc<Shared>,
    /// The families last collected (what a late collection serves).
    last: Option<Vec<MetricFamily>>,
    /// Its last collection listed more files than the cap allows: it is
    /// not read again until its directories hold fewer.
    over_files: bool,
}

#[derive(Debug)]
struct Shared {
    collector: Mutex<Collector>,
    state: Mutex<State>,
}

#[derive(Debug, Default)]
struct State {
    /// A job is running.
    busy: bool,
    /// The result of a job not taken yet.
    done: Option<Collection>,
    /// Rechecks for the next job.
    rechecks: Vec<PathBuf>,
    recheck_all: bool,
    /// The part is gone: the running job releases the budget when done.
    retired: bool,
}

/// How a part's collection went.
#[derive(Debug)]
pub(crate) enum Outcome {
    /// Done in time.
    Fresh(Box<Collection>),
    /// Not done in time: its last families (none before its first
    /// collection).
    Late(Option<Vec<MetricFamily>>),
    /// Not read: still this many files, more than the cap.
    OverFiles(usize),
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl Slot {
    /// A new part's slot.
    pub(crate) fn new(settings: &Settings) -> Self {
        let mut collector = Collector::with_link_policy(settings.link_policy);
        apply(&mut collector, settings);
        Self {
            shared: Arc::new(Shared {
                collector: Mutex::new(collector),
                state: Mutex::new(State::default()),
            }),
            last: None,
            over_files: false,
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
    /// or when its running job ends.
    pub(crate) fn retire(self) {
        let mut state = lock(&self.shared.state);
        state.retired = true;
        if !state.busy {
            drop(state);
            lock(&self.shared.collector).release_budget();
        }
    }

    /// Starts a job reading `inputs` unless one is running. The result of a
    /// job that ended after its collection's deadline becomes the last
    /// families (what this collection serves if the new job is late too).
    pub(crate) fn start(
        &mut self,
        inputs: &[Input],
        pins: &[Pin],
        settings: &Settings,
        finished: &Arc<Finished>,
    ) {
        {
            let mut state = lock(&self.shared.state);
            if state.busy {
                return;
            }
            if let Some(late) = state.done.take() {
                self.last = Some(late.families);
            }
            state.busy = true;
        }
        let shared = self.shared.clone();
        let inputs = inputs.to_vec();
        // Dropped when the job ends.
        let pins = pins.to_vec();
        let settings = settings.clone();
        let finished = finished.clone();
        let job = move || {
            let (rechecks, all) = take_rechecks(&shared);
            let mut collector = lock(&shared.collector);
            prepare(&mut collector, &settings, &rechecks, all);
            let collected = catch_unwind(AssertUnwindSafe(|| collector.collect(&inputs)));
            let collected = collected.unwrap_or_else(|_| {
                tracing::error!(
                    "Reading a discovered part's metric files panicked (a bug); serving none of its metrics this time."
                );
                *collector = Collector::with_link_policy(settings.link_policy);
                Collection::default()
            });
            let mut state = lock(&shared.state);
            if state.retired {
                collector.release_budget();
            }
            drop(collector);
            drop(pins);
            state.busy = false;
            state.done = Some(collected);
            drop(state);
            finished.notify();
        };
        let spawned = std::thread::Builder::new()
            .name("part-collect".into())
            .spawn(job);
        if let Err(error) = spawned {
            tracing::warn!(%error, "Cannot start a thread to read a part; it is left out this time.");
            lock(&self.shared.state).busy = false;
        }
    }

    /// Reads `inputs` now, on this thread (no deadline).
    pub(crate) fn run(&mut self, inputs: &[Input], settings: &Settings) -> Collection {
        let (rechecks, all) = self.take_rechecks();
        let mut collector = lock(&self.shared.collector);
        prepare(&mut collector, settings, &rechecks, all);
        collector.collect(inputs)
    }

    fn take_rechecks(&self) -> (Vec<PathBuf>, bool) {
        take_rechecks(&self.shared)
    }

    /// The part listed more files than `max` allows: its last families are
    /// forgotten, and it is not read again while its directories hold more.
    pub(crate) fn over_files(&mut self) {
        self.last = None;
        self.over_files = true;
    }

    /// For a part over the cap of files at its last collection: how many
    /// metric files its `inputs` hold now if still more than `max` (it is
    /// then not read, and its collector's maps are let go), else `None`
    /// (it is read again).
    pub(crate) fn still_over_files(
        &mut self,
        inputs: &[Input],
        max: usize,
        settings: &Settings,
    ) -> Option<usize> {
        if !self.over_files {
            return None;
        }
        let files: usize = inputs.iter().map(count_files).sum();
        if files <= max {
            self.over_files = false;
            return None;
        }
        if !lock(&self.shared.state).busy {
            if let Ok(mut collector) = self.shared.collector.try_lock() {
                collector.release_budget();
                *collector = Collector::with_link_policy(settings.link_policy);
                apply(&mut collector, settings);
            }
        }
        Some(files)
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

    /// Whether a job is running.
    fn busy(&self) -> bool {
        lock(&self.shared.state).busy
    }

    /// The part's outcome: its job's result if done, else its last
    /// families.
    pub(crate) fn outcome(&mut self) -> Outcome {
        let done = lock(&self.shared.state).done.take();
        match done {
            Some(collection) => {
                self.last = Some(collection.families.clone());
                Outcome::Fresh(Box::new(collection))
            }
            None => Outcome::Late(self.last.clone()),
        }
    }
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

/// Sets `collector` up as `settings` say (each setter does nothing when
/// nothing changed).
fn apply(collector: &mut Collector, settings: &Settings) {
    collector.set_memory_budget(settings.budget.clone());
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
fn prepare(collector: &mut Collector, settings: &Settings, rechecks: &[PathBuf], all: bool) {
    apply(collector, settings);
    if all {
        collector.recheck_all();
    }
    for path in rechecks {
        collector.recheck(path);
    }
}
