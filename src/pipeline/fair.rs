//! Parts collected side by side against a deadline, so that no part can make
//! the others wait (the node agent's fair share of a scrape, issues 35 and 40).
//!
//! Each part's [`Collector`] lives in a [`Slot`] with one long-lived worker
//! thread of its own, started with the part and ended when it goes: a
//! collection hands every idle slot's worker a job and waits until all are
//! done or the deadline passes (no thread is started per collection). A
//! part done in time is served fresh; a part still running is served from
//! its last collection, and otherwise (before its first) left out; its job
//! goes on in the background: its result is taken by the first collection
//! after it ends, and no new job is started for it meanwhile, so a slow
//! part never costs more than its own thread and never piles up work. The
//! operating system shares the cores between the workers, so a part with
//! thousands of files slows itself, not the others.
//!
//! A late part's last collection ages from when its read *finished*
//! (issue 47): a result no collection has served yet (a read that ended
//! in the background) is served by the next collection whatever its age,
//! so a pod whose reads finish is served at worst one collection late; a
//! result already served is served again only while younger than the
//! maximum age ([`Settings::max_late_age`]). A part is expired (left out)
//! only when no read of it has finished within that age.
//!
//! Every step of a part's read runs on its worker, under the deadline: the
//! listing that checks the cap of files (before its first read, and while it
//! was over the cap), and the read itself, charged to the part's own share
//! of the memory budget ([`MemoryBudget::share_of`]), whose limit is the
//! part's allowance ([`crate::source::budget::allowances`], set by
//! [`Slot::set_allowance`] before the job starts), so that a hostile part
//! cannot take the others' budget before its caps apply.
//!
//! A job that panics (a bug), inside the read or around it, serves none of
//! the part's metrics this time, is logged once per part and counted
//! ([`crate::pipeline::CollectStats::parts_panicked`]); the part is read
//! anew by its next job, never left busy for good.
//!
//! What the collector is told between collections (rechecks, the writer
//! policy, per-writer merging) is queued in the slot and applied by its next
//! job, never by waiting for a running one.

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::{Path, PathBuf};
use std::sync::mpsc;
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use crate::model::MetricFamily;
use crate::pipeline::{Collection, Collector};
use crate::source::link_policy::LinkPolicy;
use crate::source::writers::evidence::Evidence;
use crate::source::writers::WriterPolicy;
use crate::source::{Input, MemoryBudget, SkipReason};
use crate::transform::config::PerWriter as PerWriterConfig;

/// Something a part's read keeps alive until it ends (a discovered
/// directory's descriptor: `PartSpec::pins` of `pipeline::parts`).
pub type Pin = Arc<dyn std::any::Any + Send + Sync>;

/// About how many bytes of the memory budget one byte in use of a metric
/// file costs once read (its key decoded and interned, its record's value,
/// offset and share of the merge plan): what a part cut for the budget is
/// estimated to need for the files it skipped.
pub(crate) const CHARGE_PER_BYTE_IN_USE: usize = 4;

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
    /// Where the readers' liveness evidence comes from (the system's, or
    /// the source's: `PartReaders::set_evidence`).
    pub(crate) evidence: Arc<dyn Evidence>,
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
    /// The families last collected (what a late collection serves).
    last: Option<Last>,
    /// What the part needed of the memory budget at its last read: what
    /// it held, or, when files were skipped for the budget, that plus an
    /// estimate of what they would cost ([`Cut::needed`]); `None` before its
    /// first read.
    need: Option<usize>,
    /// How its last read went against its allowance, if it was cut.
    cut: Option<Cut>,
    /// The cut last logged ([`Slot::cut_changed`]).
    cut_logged: Option<(usize, usize)>,
    /// Its last collection listed more files than the cap allows: its
    /// next job lists its directories before reading them.
    over_files: bool,
    /// It has been read (or tried) once: its first job lists its
    /// directories against the cap of files before reading them.
    read_once: bool,
    /// Workers started for it (one, unless a worker died).
    workers_started: usize,
    /// Room handed to it beyond its allowance, out of what the budget left
    /// unused ([`Slot::extend_allowance`]), and the parts' needs it was
    /// handed for: kept while they stay the same.
    extra: Option<(usize, Vec<usize>)>,
}

/// A part's last collection.
#[derive(Debug)]
struct Last {
    families: Vec<MetricFamily>,
    /// When the read that collected them finished.
    at: Instant,
    /// No collection has served them yet (the read ended in the
    /// background): the next one serves them whatever their age.
    unserved: bool,
}

/// A part's read cut short by its allowance of the memory budget.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Cut {
    /// Its allowance (the limit of its share) when it was read.
    pub(crate) granted: usize,
    /// What it held after the read.
    pub(crate) held: usize,
    /// About what it needed: what it held plus what the files skipped for
    /// the budget would cost ([`CHARGE_PER_BYTE_IN_USE`] times their bytes
    /// in use).
    pub(crate) needed: usize,
    /// Files skipped for the budget.
    pub(crate) files: usize,
}

/// What a read left charged to the part's share of the memory budget.
#[derive(Debug, Clone, Copy, Default)]
struct Charge {
    /// What it held after the read.
    held: usize,
    /// Files were skipped for the budget.
    cut: Option<Cut>,
}

/// How a part's read went against its allowance, when that changed since
/// last logged ([`Slot::cut_changed`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum CutChange {
    /// Cut (anew, or to another allowance or number of files).
    Cut(Cut),
    /// Read whole again after a cut.
    Whole,
}

#[derive(Debug)]
struct Shared {
    collector: Mutex<Collector>,
    state: Mutex<State>,
    /// The part's share of the memory budget (`None`: no budget).
    budget: Option<Arc<MemoryBudget>>,
    /// The next job panics before its read (tests).
    #[cfg(test)]
    panic_next: std::sync::atomic::AtomicBool,
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
    /// A job of this part panicked (logged once).
    panicked: bool,
}

/// What a job did.
#[derive(Debug)]
enum Done {
    Read(Box<Collection>, Charge),
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
    /// Its last collection: not served yet, or finished within
    /// [`Settings::max_late_age`].
    Last(Vec<MetricFamily>),
    /// Nothing: it was served already, and no read of the part has
    /// finished within the maximum age.
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
                #[cfg(test)]
                panic_next: std::sync::atomic::AtomicBool::new(false),
            }),
            worker: None,
            last: None,
            need: None,
            cut: None,
            cut_logged: None,
            over_files: false,
            read_once: false,
            workers_started: 0,
            extra: None,
        }
    }

    /// Sets the part's allowance of the memory budget (the limit of its
    /// share). Unless a job is running, a part holding more than its new
    /// allowance lets go of everything it holds, and its next job reads
    /// anew within it; so does a part that was cut and is now allowed more
    /// (the files it skipped are read again). What a part holds is what its
    /// reader charged after the merge, within the allowance it was read
    /// with, so a part whose allowance did not change keeps it.
    pub(crate) fn set_allowance(&mut self, allowance: usize, settings: &Settings) {
        let Some(budget) = &self.shared.budget else {
            return;
        };
        budget.set_limit(allowance);
        if self.busy() {
            return;
        }
        let over = budget.held() > allowance;
        let grown = self.cut.is_some_and(|cut| allowance > cut.granted);
        if !(over || grown) {
            return;
        }
        // Not busy: its worker does not hold the collector (a test's
        // `stall` may; then it stays as it is).
        let collector = match self.shared.collector.try_lock() {
            Ok(guard) => Some(guard),
            Err(std::sync::TryLockError::Poisoned(e)) => Some(e.into_inner()),
            Err(std::sync::TryLockError::WouldBlock) => None,
        };
        if let Some(mut collector) = collector {
            renew(&mut collector, settings, Some(budget));
            self.cut = None;
        }
    }

    /// The room handed to the part beyond its allowance while the parts
    /// need `needs` (the same as when it was handed), else 0.
    pub(crate) fn extra_for(&self, needs: &[usize]) -> usize {
        self.extra
            .as_ref()
            .filter(|(_, given_for)| given_for == needs)
            .map_or(0, |&(extra, _)| extra)
    }

    /// Lets the part hold up to `limit`, more than its allowance, out of
    /// what the budget leaves unused: it holds less than that
    /// (nothing is let go), and its next read retries the files it skipped.
    pub(crate) fn extend_allowance(&mut self, limit: usize) {
        if let Some(budget) = &self.shared.budget {
            let before = self.extra.as_ref().map_or(0, |&(extra, _)| extra);
            let extra = before.saturating_add(limit.saturating_sub(budget.limit()));
            budget.set_limit(limit);
            self.extra = Some((extra, Vec::new()));
        }
    }

    /// Keeps the room handed to the part beyond its allowance for as long
    /// as the parts need `needs` (what they need once it was read with it).
    pub(crate) fn keep_extra_for(&mut self, needs: &[usize]) {
        if let Some((_, given_for)) = &mut self.extra {
            needs.clone_into(given_for);
        }
    }

    /// Forgets the room handed to it beyond its allowance.
    pub(crate) fn drop_extra(&mut self) {
        self.extra = None;
    }

    /// The most the part could hold now: its allowance, less what the
    /// other parts hold beyond what is left of the whole budget
    /// ([`MemoryBudget::room`]; `usize::MAX`: no budget).
    pub(crate) fn room(&self) -> usize {
        self.shared.budget.as_ref().map_or(usize::MAX, |b| b.room())
    }

    /// What the part needed of the memory budget at its last read (what
    /// it held; `usize::MAX` when it was cut), `None` before its first.
    pub(crate) fn need(&self) -> Option<usize> {
        self.need
    }

    /// How the part's last read went against its allowance, when that
    /// changed since the last call (to log it once per change).
    pub(crate) fn cut_changed(&mut self) -> Option<CutChange> {
        let now = self.cut.map(|cut| (cut.granted, cut.files));
        if now == self.cut_logged {
            return None;
        }
        let was_cut = self.cut_logged.is_some();
        self.cut_logged = now;
        match self.cut {
            Some(cut) => Some(CutChange::Cut(cut)),
            None if was_cut => Some(CutChange::Whole),
            None => None,
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
            // A read that ended after its collection: no collection has
            // served it yet.
            self.took(done, at);
            if let Some(last) = &mut self.last {
                last.unserved = true;
            }
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
        let done = read_caught(&self.shared, inputs, settings, check_files);
        self.took(done, Instant::now())
    }

    /// Takes a job's result: what it read becomes the last families.
    fn took(&mut self, done: Done, at: Instant) -> Outcome {
        match done {
            Done::Read(collection, charge) => {
                self.over_files = false;
                // A part cut needs about what it holds plus what its skipped
                // files would cost: never "unbounded" (issue 53: a small
                // part cut by another's stale charge then dragged every
                // other part's allowance down); and never less than the
                // allowance it was cut at (issue 53: a part cut while the
                // others held more than its allowance left it, needing less
                // than its floor but more than the estimate and what reading
                // reserves, was left cut: counted at its allowance, the
                // others let go of what it is owed).
                self.need = Some(
                    charge
                        .cut
                        .map_or(charge.held, |cut| cut.needed.max(cut.granted)),
                );
                self.cut = charge.cut;
                self.last = Some(Last {
                    families: collection.families.clone(),
                    at,
                    unserved: false,
                });
                Outcome::Fresh(collection)
            }
            Done::OverFiles(files) => {
                self.need = Some(0);
                self.cut = None;
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

    /// What the part's share of the memory budget holds now (`None`: no
    /// budget).
    pub(crate) fn share_held(&self) -> Option<usize> {
        self.shared.budget.as_ref().map(|b| b.held())
    }

    /// Makes the next job panic outside the reader's own guard, as a bug
    /// around the read would (tests).
    #[cfg(test)]
    pub(crate) fn panic_next_job(&self) {
        self.shared
            .panic_next
            .store(true, std::sync::atomic::Ordering::Relaxed);
    }

    /// Waits until no job runs (tests).
    #[cfg(test)]
    pub(crate) fn wait_idle(&self, finished: &Finished) {
        let mut guard = lock(&finished.lock);
        while self.busy() {
            guard = finished
                .done
                .wait_timeout(guard, Duration::from_millis(10))
                .unwrap_or_else(|e| e.into_inner())
                .0;
        }
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
    /// families if no collection served them yet or their read finished
    /// within `max_age`.
    pub(crate) fn outcome(&mut self, max_age: Duration) -> Outcome {
        let done = lock(&self.shared.state).done.take();
        match done {
            Some((done, at)) => self.took(done, at),
            None => Outcome::Late(match &mut self.last {
                Some(last) if last.unserved || last.at.elapsed() <= max_age => {
                    last.unserved = false;
                    Late::Last(last.families.clone())
                }
                Some(_) => Late::Expired,
                None => Late::None,
            }),
        }
    }
}

/// Runs one job on a part's worker and tells the waiting collection. A
/// panic anywhere in the read (a bug) leaves the part idle, with a fresh
/// collector for its next job: logged once per part, and counted.
fn run_job(shared: &Shared, job: Job) {
    let done = read_caught(shared, &job.inputs, &job.settings, job.check_files);
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

/// [`read`], a panic anywhere in it (a bug) leaving a fresh collector and
/// serving nothing this time.
fn read_caught(
    shared: &Shared,
    inputs: &[Input],
    settings: &Settings,
    check_files: Option<usize>,
) -> Done {
    catch_unwind(AssertUnwindSafe(|| {
        read(shared, inputs, settings, check_files)
    }))
    .unwrap_or_else(|_| {
        renew(
            &mut lock(&shared.collector),
            settings,
            shared.budget.as_ref(),
        );
        panicked(shared)
    })
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
    #[cfg(test)]
    if shared
        .panic_next
        .swap(false, std::sync::atomic::Ordering::Relaxed)
    {
        panic!("a bug around the read (test)");
    }
    let mut collector = lock(&shared.collector);
    if let Some(max) = check_files {
        let files: usize = inputs.iter().map(count_files).sum();
        if files > max {
            renew(&mut collector, settings, shared.budget.as_ref());
            return Done::OverFiles(files);
        }
    }
    let granted = shared.budget.as_ref().map_or(usize::MAX, |b| b.limit());
    prepare(
        &mut collector,
        settings,
        shared.budget.as_ref(),
        &rechecks,
        all,
    );
    let collected = catch_unwind(AssertUnwindSafe(|| collector.collect(inputs)));
    let Ok(collection) = collected else {
        renew(&mut collector, settings, shared.budget.as_ref());
        drop(collector);
        return panicked(shared);
    };
    let held = shared.budget.as_ref().map_or(0, |b| b.held());
    let skipped: Vec<&Path> = collection
        .problems
        .iter()
        .filter(|p| matches!(p.reason, SkipReason::OverMemoryBudget { .. }))
        .map(|p| p.path.as_path())
        .collect();
    let cut = (!skipped.is_empty()).then(|| Cut {
        granted,
        held,
        needed: skipped
            .iter()
            .map(|path| bytes_in_use(path).saturating_mul(CHARGE_PER_BYTE_IN_USE))
            .fold(held, usize::saturating_add),
        files: skipped.len(),
    });
    Done::Read(Box::new(collection), Charge { held, cut })
}

/// What a job that panicked serves: nothing, counted; logged the first
/// time for the part.
fn panicked(shared: &Shared) -> Done {
    let first = !std::mem::replace(&mut lock(&shared.state).panicked, true);
    if first {
        tracing::error!(
            "Reading a part's metric files panicked (a bug); serving none of its metrics this time, reading it anew next time (multiproc_exporter_files_skipped_total{{reason=\"panic\"}}; logged once per part)."
        );
    }
    let mut collection = Collection::default();
    collection.stats.parts_panicked = 1;
    Done::Read(Box::new(collection), Charge::default())
}

/// The bytes in use of a metric file (its header's `used`), 0 when it
/// cannot be read: what reading it would cost, about.
fn bytes_in_use(path: &Path) -> usize {
    use std::io::Read as _;
    let mut header = [0u8; crate::format::layout::HEADER_LEN];
    std::fs::File::open(path)
        .and_then(|mut file| {
            file.read_exact(&mut header)?;
            file.metadata()
        })
        .ok()
        .and_then(|meta| {
            let len = usize::try_from(meta.len()).unwrap_or(usize::MAX);
            crate::format::layout::read_used(&header, len).ok()
        })
        .flatten()
        .unwrap_or(0)
}

/// Replaces `collector` by a fresh one (releasing what it charged to the
/// budget), set up as `settings` say.
fn renew(collector: &mut Collector, settings: &Settings, budget: Option<&Arc<MemoryBudget>>) {
    collector.release_budget();
    *collector = Collector::with_link_policy(settings.link_policy);
    apply(collector, settings, budget);
}

/// The metric files (`*.db`) an input holds: a directory's entries so
/// named, without reading them (0 when it cannot be listed).
pub(crate) fn count_files(input: &Input) -> usize {
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
    collector.set_evidence(settings.evidence.clone());
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
