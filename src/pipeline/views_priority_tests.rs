//! Issue 47: Prometheus's scrape first. A view or `?name[]=` poll beside
//! the shared collection of `/metrics` reads no file again, the views'
//! reads run one at a time and `/metrics` never waits for one, and evicted
//! sources are dropped outside the map's lock, off the async workers. With
//! fakes of the stage's callers ([`Observer`], hooks in the views' reads
//! and drops) that block on channels: nothing here depends on timing.

use std::sync::atomic::AtomicUsize;
use std::sync::mpsc::{channel, Receiver, Sender};
use std::thread::ThreadId;

use super::tests::{fifty_counters, sources, Idle};
use super::*;
use crate::pipeline::shared::{Collected, Observer, SharedCollection};

/// A hook run by the views' sources in tests.
#[derive(Clone)]
pub(super) struct Hook(pub(super) Arc<dyn Fn() + Send + Sync>);

impl std::fmt::Debug for Hook {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Hook")
    }
}

/// What tests hook into: each read of a view's source (in the lane), and
/// the drop of each entry made after it is set.
#[derive(Debug, Default)]
pub(super) struct Hooks {
    reading: Mutex<Option<Hook>>,
    dropped: Mutex<Option<Hook>>,
}

impl Hooks {
    pub(super) fn reading(&self) {
        let hook = self.reading.lock().unwrap().clone();
        if let Some(hook) = hook {
            (hook.0)();
        }
    }

    pub(super) fn dropped(&self) -> Option<Hook> {
        self.dropped.lock().unwrap().clone()
    }
}

/// An [`Observer`] counting collections; the first one, if `gate` is
/// given, says it started and waits for the gate (it stays in flight).
struct Blocking {
    collections: AtomicUsize,
    started: Mutex<Option<Sender<()>>>,
    gate: Mutex<Option<Receiver<()>>>,
}

/// What tells a blocked collection started, and what lets it go on.
type Gate = (Receiver<()>, Sender<()>);

/// A collection held in flight: its observer, what lets it go on, its
/// thread.
type InFlight = (
    Arc<Blocking>,
    Sender<()>,
    std::thread::JoinHandle<Arc<super::super::shared::Served>>,
);

impl Blocking {
    /// An observer and, if `blocks`, the channels that tell its first
    /// collection started and let it go on.
    fn new(blocks: bool) -> (Arc<Self>, Option<Gate>) {
        let (started_tx, started_rx) = channel();
        let (gate_tx, gate_rx) = channel();
        let observer = Arc::new(Self {
            collections: AtomicUsize::new(0),
            started: Mutex::new(blocks.then_some(started_tx)),
            gate: Mutex::new(blocks.then_some(gate_rx)),
        });
        (observer, blocks.then_some((started_rx, gate_tx)))
    }
}

impl Observer for Blocking {
    fn merged(&self, _: &[MetricFamily]) {}

    fn collected(&self, _: &Collected<'_>) {
        self.collections.fetch_add(1, Ordering::SeqCst);
        if let Some(started) = self.started.lock().unwrap().take() {
            started.send(()).unwrap();
            let gate = self.gate.lock().unwrap().take().unwrap();
            gate.recv().unwrap();
        }
    }

    fn own_families(&self, _: &[MetricFamily], _: Vec<MetricFamily>) -> Option<Vec<MetricFamily>> {
        None
    }
}

/// Waits (without a deadline that could fail a slow machine, but never
/// forever) until `done` holds.
fn until(what: &str, done: impl Fn() -> bool) {
    let start = Instant::now();
    while !done() {
        assert!(start.elapsed() < Duration::from_secs(120), "never: {what}");
        std::thread::sleep(Duration::from_millis(1));
    }
}

/// `/metrics`'s collection of `shared` on its own thread, held in flight
/// until the returned sender sends.
fn in_flight(shared: &Arc<SharedCollection>, config: &Arc<Config>) -> InFlight {
    let (observer, channels) = Blocking::new(true);
    let (started, gate) = channels.unwrap();
    let collection = {
        let (shared, config, observer) = (shared.clone(), config.clone(), observer.clone());
        std::thread::spawn(move || shared.families(&config, &*observer, None))
    };
    started.recv().unwrap();
    assert!(shared.in_flight());
    (observer, gate, collection)
}

#[test]
fn a_name_set_or_view_arriving_during_the_metrics_collection_reads_no_file_again() {
    let dir = fifty_counters();
    let (main, views) = sources(dir.path(), None);
    let reads = Arc::new(AtomicUsize::new(0));
    *views.hooks.reading.lock().unwrap() = Some(Hook({
        let reads = reads.clone();
        Arc::new(move || {
            reads.fetch_add(1, Ordering::SeqCst);
        })
    }));
    let shared = Arc::new(SharedCollection::new(main));
    let config = Arc::new(Config::default());
    let query = View::of_sample_names(&["family_3_total".to_owned()]);
    let picker = config.views[0].clone();
    // A set whose poll came just before Prometheus's scrape: made, its turn
    // to read comes while the scrape is in flight.
    let early = View::of_sample_names(&["family_4_total".to_owned()]);
    let early = views.entry(&early, &config, &Idle).unwrap();
    let (observer, gate, collection) = in_flight(&shared, &config);
    // Four new sets and a view: none is made (each is cut from the
    // collection in flight), and the early one does not read either.
    for i in 0..4 {
        let set = View::of_sample_names(&[format!("family_{i}_total")]);
        assert!(views.entry(&set, &config, &*shared).is_none(), "set {i}");
    }
    assert!(views.entry(&picker, &config, &*shared).is_none());
    assert!(views.families(&early, &*shared).is_none());
    assert_eq!(views.sources_made(), 1, "only the early set's");
    assert_eq!(reads.load(Ordering::SeqCst), 0, "no view's source read");
    gate.send(()).unwrap();
    collection.join().unwrap();
    assert_eq!(observer.collections.load(Ordering::SeqCst), 1);
    // Once the scrape is done, the sets get their own sources again.
    let own = views.entry(&query, &config, &*shared).unwrap();
    let families = views.families(&own, &*shared).unwrap();
    assert_eq!(families.families.len(), 1);
    assert_eq!(reads.load(Ordering::SeqCst), 1);
    // A source read once is read beside the scrape (it reads its families
    // only): the poll is not made to wait for it.
    let (observer, gate, collection) = in_flight(&shared, &config);
    let again = views.entry(&query, &config, &*shared).unwrap();
    assert!(Arc::ptr_eq(&again, &own));
    assert!(views.families(&again, &*shared).is_some());
    gate.send(()).unwrap();
    collection.join().unwrap();
    assert_eq!(observer.collections.load(Ordering::SeqCst), 1);
}

#[test]
fn the_views_reads_run_one_at_a_time_and_metrics_never_waits_for_one() {
    let dir = fifty_counters();
    let (main, views) = sources(dir.path(), None);
    let views = Arc::new(views);
    let shared = Arc::new(SharedCollection::new(main));
    let config = Arc::new(Config::default());
    // The first read says it started and waits for `release`.
    let entered = Arc::new(AtomicUsize::new(0));
    let (started_tx, started) = channel();
    let (release, release_rx) = channel::<()>();
    let first = Mutex::new(Some((started_tx, release_rx)));
    *views.hooks.reading.lock().unwrap() = Some(Hook({
        let entered = entered.clone();
        Arc::new(move || {
            entered.fetch_add(1, Ordering::SeqCst);
            let first = first.lock().unwrap().take();
            if let Some((started, release)) = first {
                started.send(()).unwrap();
                release.recv().unwrap();
            }
        })
    }));
    let entries: Vec<_> = (0..2)
        .map(|i| {
            let set = View::of_sample_names(&[format!("family_{i}_total")]);
            views.entry(&set, &config, &*shared).unwrap()
        })
        .collect();
    let poll = |at: usize| {
        let (views, shared, entry) = (views.clone(), shared.clone(), entries[at].clone());
        std::thread::spawn(move || views.families(&entry, &*shared))
    };
    let blocked = poll(0);
    started.recv().unwrap();
    let second = poll(1);
    until("the second poll waits or reads", || {
        views.reads_waiting() == 1 || entered.load(Ordering::SeqCst) == 2
    });
    assert_eq!(entered.load(Ordering::SeqCst), 1, "two reads at once");
    // An async worker's poll never waits for the lane.
    assert!(views.families_now(&entries[1]).is_none());
    // `/metrics` collects while a view's read is stuck and another waits.
    let (observer, _) = Blocking::new(false);
    let (done_tx, done) = channel();
    {
        let (shared, config, observer) = (shared.clone(), config.clone(), observer.clone());
        std::thread::spawn(move || {
            let served = shared.families(&config, &*observer, None);
            done_tx.send(served.merged.len()).unwrap();
        });
    }
    let merged = done
        .recv_timeout(Duration::from_secs(120))
        .expect("/metrics waited for a view's read");
    assert_eq!(merged, 50);
    assert_eq!(entered.load(Ordering::SeqCst), 1);
    release.send(()).unwrap();
    assert!(blocked.join().unwrap().is_some());
    assert!(second.join().unwrap().is_some());
    assert_eq!(entered.load(Ordering::SeqCst), 2);
}

#[tokio::test]
async fn an_evicted_source_is_dropped_outside_the_entries_lock_and_off_the_async_worker() {
    let dir = fifty_counters();
    let (main, mut views) = sources(dir.path(), None);
    // Every kept set idle at once: the next new one evicts the oldest.
    views.query_idle = Duration::ZERO;
    let views = Arc::new(views);
    let shared = SharedCollection::new(main);
    let config = Arc::new(Config::default());
    // Where and how each entry is dropped: (thread, the map locked).
    let (dropped_tx, dropped) = channel::<(ThreadId, bool)>();
    let dropped_tx = Mutex::new(dropped_tx);
    *views.hooks.dropped.lock().unwrap() = Some(Hook({
        let views = Arc::downgrade(&views);
        Arc::new(move || {
            let locked = views
                .upgrade()
                .is_some_and(|v| matches!(v.entries.try_lock(), Err(TryLockError::WouldBlock)));
            let _ = dropped_tx
                .lock()
                .unwrap()
                .send((std::thread::current().id(), locked));
        })
    }));
    for i in 0..=MAX_KEPT_QUERIES {
        let set = View::of_sample_names(&[format!("family_{i}_total")]);
        let entry = views.entry(&set, &config, &shared).unwrap();
        let families = views.families(&entry, &shared).unwrap();
        assert_eq!(families.families.len(), 1);
    }
    assert_eq!(views.kept_queries().len(), MAX_KEPT_QUERIES);
    let (thread, locked) = tokio::task::spawn_blocking(move || {
        dropped
            .recv_timeout(Duration::from_secs(120))
            .map(|d| (d, dropped))
    })
    .await
    .unwrap()
    .map(|(d, rest)| {
        // A reload drops the others here (off the async workers already).
        views.reconfigured(&Arc::new(Config::default()));
        for _ in 0..MAX_KEPT_QUERIES {
            let (_, locked) = rest.recv().unwrap();
            assert!(!locked, "a reconfigured source dropped under the lock");
        }
        d
    })
    .expect("the evicted source was never dropped");
    assert!(
        !locked,
        "the evicted source was dropped under the entries lock"
    );
    assert_ne!(
        thread,
        std::thread::current().id(),
        "the evicted source was dropped on the async worker"
    );
}
