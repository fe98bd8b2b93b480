//! The views' sources ([`crate::transform::views`]): one owner,
//! [`ViewSources`], beside the main source, for the configured views
//! (`<telemetry path>/<name>`) and the `?name[]=` requests, with the same
//! guarantees as `/metrics`'s collections.
//!
//! * **Each view reads only its families.** A view's source
//!   ([`ViewBase::source`]) reads the main source's inputs with the same
//!   links, memory budget and writers' policy, but its reader leaves out
//!   every record whose family the view cannot serve before the record's key
//!   is interned ([`crate::transform::views::SourceFilter`]), so its key
//!   store, its values and its merge hold the view's families only. Its
//!   families are transformed as `/metrics`'s are, then made into the view's
//!   answer by [`view_families`], the one place a view's families are
//!   produced (after the merge and the transform, before encoding).
//! * **Coalesced.** Concurrent polls of one view share one collection
//!   ([`super::coalesce::Coalescer`]); an unchanged merge is skipped
//!   ([`super::Collector::collect_since`]) and its encoded bodies sent again.
//! * **Bounded.** Configured views have one source each, dropped with the
//!   configuration that declared them (a reload: [`ViewSources::reconfigured`]).
//!   `?name[]=` requests are keyed by the canonical set of their decoded
//!   names ([`ViewKey`]: sorted, deduplicated, never a joined string, so an
//!   encoded `&` in a name cannot make two requests one). At most
//!   [`MAX_KEPT_QUERIES`] sets keep a source, together within
//!   [`KEPT_QUERIES_BUDGET_SHARE`] of the memory budget, the least recently
//!   used evicted first; none is made while the budget is more than
//!   [`QUERY_ADMISSION_PERCENT`] full, and the kept ones go when it passes
//!   [`QUERY_EVICTION_PERCENT`], so that they never take what `/metrics`
//!   needs. A set that finds no room (every kept one polled
//!   within [`QUERY_IDLE`]) gets no source: the HTTP layer cuts it from the
//!   shared collection of `/metrics`, as before the views existed, so
//!   clients rotating more sets than are kept never make a poll a fresh
//!   read of the whole directory.
//! * **`/metrics`'s share.** Every view's and set's source reads within
//!   one share of the memory budget, [`VIEWS_BUDGET_PERCENT`] of it for all
//!   of them together; the rest is `/metrics`'s, which they cannot take
//!   whatever was polled first (issue 53: configured views, never evicted,
//!   left `/metrics` short).
//! * **The budget given back.** A source's reader gives back what it
//!   charged to the memory budget when it is dropped (`Drop` for
//!   [`crate::source::Reader`]): evicted, reloaded, rebuilt after a panic.
//! * **Prometheus's scrape first.** A view's or a set's source whose first
//!   collection is still to come (a read of every file of the directory) is
//!   not read while the shared collection of `/metrics` is in flight: the
//!   poll is cut from that collection instead ([`ViewSources::entry`] and
//!   [`ViewSources::families`] answer `None`), so a burst of polls beside
//!   Prometheus's first scrape costs one read of the directory. The reads
//!   of the views' own sources run one at a time (one lane for all of them,
//!   [`ViewSources::families`]); `/metrics` never waits for that lane nor
//!   for any view's read, so beside its collection runs at most one
//!   restricted read.
//! * **Never blocking an async worker.** The map of entries is locked only
//!   to find, add or drop an entry, never during a collection; whether a
//!   poll is quick enough to run on the async worker
//!   ([`ViewEntry::is_quick`]) reads atomics, and such a poll runs only if
//!   neither a collection of the view nor another view's read is in flight
//!   ([`ViewSources::families_now`]). The sources evicted or reconfigured
//!   away are dropped (their files unmapped, their budget given back) after
//!   the map is unlocked, and never on an async worker: a source whose last
//!   holder lets it go there is handed to the blocking pool
//!   (`Drop for ViewEntry`).

use std::collections::HashMap;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, TryLockError};
use std::time::{Duration, Instant};

use crate::expose::encode::{Escaping, Format};
use crate::expose::memo::Gzipper;
use crate::model::MetricFamily;
use crate::source::link_policy::LinkPolicy;
use crate::source::writers::WriterPolicy;
use crate::source::{Input, MemoryBudget};
use crate::transform::config::Config;
use crate::transform::views::{Matching, SourceFilter, View};

use super::coalesce::{Coalescer, InFlight, Rechecks};
use super::rendered::{encoded, SharedBody};
use super::Source;

/// The share of the memory budget (in percent) the views' sources may
/// charge together, configured views (the endpoint picker's built-in one
/// too) and `?name[]=` sets alike: the rest is `/metrics`'s, which no view
/// can take (issue 53: configured views, never evicted, polled before
/// Prometheus's first scrape left `/metrics` short).
pub const VIEWS_BUDGET_PERCENT: usize = 50;

/// `?name[]=` sets that keep a source of their own.
pub const MAX_KEPT_QUERIES: usize = 4;

/// The share of the memory budget (in percent) the kept `?name[]=` sources
/// may charge together; beyond, the least recently used are evicted.
pub const KEPT_QUERIES_BUDGET_SHARE: usize = 25;

/// A new `?name[]=` set gets a source only while every reader together
/// holds at most this share of the memory budget (in percent).
pub const QUERY_ADMISSION_PERCENT: usize = 75;

/// Beyond this share of the memory budget held by every reader together (in
/// percent), the kept `?name[]=` sources are evicted, least recently used
/// first, until it is below or none is left.
pub const QUERY_EVICTION_PERCENT: usize = 90;

/// A kept `?name[]=` source not polled for this long makes room for a new
/// set.
pub const QUERY_IDLE: Duration = Duration::from_secs(60);

/// Polls faster than this may run on the async worker
/// ([`ViewEntry::is_quick`]).
pub const QUICK_POLL: Duration = Duration::from_millis(3);

/// What a view's source is made from: the main source's inputs, links,
/// memory budget and writers' policy ([`Source::view_base`]).
#[derive(Debug, Clone)]
pub struct ViewBase {
    pub(super) inputs: Vec<Input>,
    pub(super) link_policy: LinkPolicy,
    pub(super) memory_budget: Option<Arc<MemoryBudget>>,
    pub(super) writer_policy: WriterPolicy,
    /// The main source's temporary runs, whose evidence every view shares
    /// (issue 53: each source started blind).
    pub(super) runs: Option<crate::source::temporary::SharedRuns>,
    /// Where liveness evidence comes from.
    pub(super) evidence: Arc<dyn crate::source::writers::evidence::Evidence>,
}

impl ViewBase {
    /// A source reading only the records `filter` keeps, with the writers'
    /// `process_*` families only if `process_metrics` (see [`Source::view`]).
    pub fn source(&self, filter: SourceFilter, process_metrics: bool) -> Source {
        Source::of_view(self, filter, process_metrics)
    }
}

/// What identifies a view's source: a configured view's name, or the
/// canonical set of a `?name[]=` request's decoded names.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum ViewKey {
    /// A configured view.
    Configured(Arc<str>),
    /// A `?name[]=` request: its names sorted, each once.
    Names(Box<[Arc<str>]>),
}

impl ViewKey {
    /// The key of `view`.
    pub fn of(view: &View) -> Self {
        match view.matching {
            Matching::Families => Self::Configured(view.name.clone()),
            Matching::Samples => {
                let mut names = view.families.clone();
                names.sort_unstable();
                names.dedup();
                Self::Names(names.into_boxed_slice())
            }
        }
    }
}

/// The one place a view's families are produced: from `transformed` (the
/// families of a view's source, or of `/metrics`, after the configuration's
/// transform), the view's, in their order. Encoding follows.
pub fn view_families(view: &View, transformed: &[MetricFamily]) -> Vec<MetricFamily> {
    view.families_of(transformed)
}

/// A view's families from one collection.
#[derive(Debug, Default)]
pub struct ViewFamilies {
    /// Identifies them among the view's collections: the same id, the same
    /// families (0: none).
    pub id: u64,
    /// The view's families ([`view_families`]).
    pub families: Arc<Vec<MetricFamily>>,
}

/// The views' sources; one per server.
#[derive(Debug)]
pub struct ViewSources {
    /// `None`: no view has a source of its own (subdirectories, discovered
    /// directories). Its memory budget is the views' share
    /// ([`VIEWS_BUDGET_PERCENT`] of the whole).
    base: Option<ViewBase>,
    /// The whole memory budget, shared with `/metrics` (the views' share's
    /// parent).
    whole: Option<Arc<MemoryBudget>>,
    entries: Mutex<Entries>,
    /// Sources made so far (each one's first collection reads every file).
    made: AtomicU64,
    epoch: Instant,
    /// How long a kept `?name[]=` source stays unpolled before a new set
    /// may take its place ([`QUERY_IDLE`]).
    query_idle: Duration,
    /// The views' reads run one at a time, in this lane.
    lane: Lane,
    #[cfg(test)]
    hooks: priority_tests::Hooks,
}

/// One read of a view's source at a time (`/metrics`'s collection never
/// enters it).
#[derive(Debug, Default)]
struct Lane {
    turn: Mutex<()>,
    /// Polls waiting for their turn.
    waiting: AtomicUsize,
}

impl Lane {
    /// Waits for the turn (blocking).
    fn take(&self) -> MutexGuard<'_, ()> {
        self.waiting.fetch_add(1, Ordering::SeqCst);
        let turn = self.turn.lock().unwrap_or_else(|e| e.into_inner());
        self.waiting.fetch_sub(1, Ordering::SeqCst);
        turn
    }

    /// The turn, if no read has it (never waits).
    fn try_take(&self) -> Option<MutexGuard<'_, ()>> {
        match self.turn.try_lock() {
            Ok(turn) => Some(turn),
            Err(TryLockError::Poisoned(e)) => Some(e.into_inner()),
            Err(TryLockError::WouldBlock) => None,
        }
    }
}

/// Entries taken out of the map (evicted, reconfigured away), to be dropped
/// once it is unlocked: dropping one may unmap every file its source read.
type Retired = Vec<Arc<ViewEntry>>;

#[derive(Debug, Default)]
struct Entries {
    /// The configuration the entries were made for.
    config: Option<Arc<Config>>,
    configured: HashMap<Arc<str>, Arc<ViewEntry>>,
    /// The kept `?name[]=` sets, least recently used first.
    queries: Vec<Arc<ViewEntry>>,
}

/// One view's source and last answer.
#[derive(Debug)]
pub struct ViewEntry {
    key: ViewKey,
    view: View,
    config: Arc<Config>,
    /// `None`: cut from the shared collection instead
    /// ([`ViewSources::families`]).
    flight: Coalescer<Option<Arc<ViewFamilies>>>,
    /// Locked only by the poll that runs the collection; `None` only while
    /// the entry is dropped.
    state: Mutex<Option<EntryState>>,
    rechecks: Rechecks,
    bodies: Mutex<Bodies>,
    /// How long its last collection took, in nanoseconds (0: none yet).
    last_nanos: AtomicU64,
    /// When it was last asked for, in milliseconds since the owner's epoch.
    last_used: AtomicU64,
    /// What its source charged to the memory budget after its last
    /// collection.
    charged: AtomicUsize,
}

impl Drop for ViewEntry {
    /// Its source (every file it maps) is dropped off the async workers.
    fn drop(&mut self) {
        let state = self
            .state
            .get_mut()
            .unwrap_or_else(|e| e.into_inner())
            .take();
        off_workers(state);
    }
}

thread_local! {
    /// Whether this thread is known not to be an async worker (a view's
    /// blocking poll, a reload).
    static OFF_WORKER: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// Marks this thread as no async worker while it lives.
struct OffWorker(bool);

impl OffWorker {
    fn enter() -> Self {
        Self(OFF_WORKER.replace(true))
    }
}

impl Drop for OffWorker {
    fn drop(&mut self) {
        OFF_WORKER.set(self.0);
    }
}

/// Drops `value` here when this thread is no async worker (or no tokio
/// runtime runs), else on the blocking pool. (Dropping a source unmaps
/// every file it read: long enough to stall a worker.)
fn off_workers<T: Send + 'static>(value: T) {
    if OFF_WORKER.get() {
        return drop(value);
    }
    match tokio::runtime::Handle::try_current() {
        Ok(runtime) => {
            runtime.spawn_blocking(move || {
                let _off = OffWorker::enter();
                drop(value)
            });
        }
        Err(_) => drop(value),
    }
}

#[derive(Debug)]
struct EntryState {
    source: Source,
    held: Option<Arc<ViewFamilies>>,
    #[cfg(test)]
    dropped: Option<priority_tests::Hook>,
}

#[cfg(test)]
impl Drop for EntryState {
    fn drop(&mut self) {
        if let Some(hook) = &self.dropped {
            (hook.0)();
        }
    }
}

/// Bodies encoded from the families of [`Bodies::id`], by request.
#[derive(Debug, Default)]
struct Bodies {
    id: u64,
    list: Vec<((Format, Escaping, bool), SharedBody)>,
    gzipper: Gzipper,
}

impl ViewSources {
    /// The views' sources, made from `base` (`None`: every view is cut
    /// from the shared collection).
    pub fn new(base: Option<ViewBase>) -> Self {
        let whole = base.as_ref().and_then(|b| b.memory_budget.clone());
        let base = base.map(|base| ViewBase {
            memory_budget: whole.clone().map(|whole| {
                let share = whole.limit() / 100 * VIEWS_BUDGET_PERCENT;
                Arc::new(MemoryBudget::share_of(whole, share))
            }),
            ..base
        });
        Self {
            base,
            whole,
            entries: Mutex::default(),
            made: AtomicU64::new(0),
            epoch: Instant::now(),
            query_idle: QUERY_IDLE,
            lane: Lane::default(),
            #[cfg(test)]
            hooks: priority_tests::Hooks::default(),
        }
    }

    fn entries(&self) -> MutexGuard<'_, Entries> {
        self.entries.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn now_millis(&self) -> u64 {
        u64::try_from(self.epoch.elapsed().as_millis()).unwrap_or(u64::MAX)
    }

    /// The entry that serves `view` under `config`, made if needed; `None`
    /// when the view is to be cut from the shared collection of `/metrics`
    /// (`shared`): no source of its own here, upstreams configured, a
    /// `?name[]=` set that finds no room, or a source whose first collection
    /// (a read of every file) is still to come while `shared`'s is in
    /// flight. Never waits for a collection. Called on an async worker: the
    /// sources it evicts are dropped on the blocking pool.
    pub fn entry(
        &self,
        view: &View,
        config: &Arc<Config>,
        shared: &dyn InFlight,
    ) -> Option<Arc<ViewEntry>> {
        let mut retired = Retired::new();
        let entry = self.find_or_make(view, config, shared.in_flight(), &mut retired);
        // The map is unlocked; on an async worker, each source goes to the
        // blocking pool (`Drop for ViewEntry`).
        drop(retired);
        entry
    }

    /// [`Self::entry`], the map locked; the entries it takes out go to
    /// `retired`. `shared_in_flight`: whether `/metrics`'s collection is.
    fn find_or_make(
        &self,
        view: &View,
        config: &Arc<Config>,
        shared_in_flight: bool,
        retired: &mut Retired,
    ) -> Option<Arc<ViewEntry>> {
        let base = self.base.as_ref()?;
        if !config.upstreams.is_empty() {
            return None;
        }
        let key = ViewKey::of(view);
        let now = self.now_millis();
        let mut entries = self.entries();
        retired.extend(entries.keep_only(config));
        let found = match &key {
            ViewKey::Configured(name) => entries.configured.get(name).cloned(),
            ViewKey::Names(_) => entries.queries.iter().find(|e| e.key == key).cloned(),
        };
        // Prometheus's scrape first: no read of every file beside it (the
        // poll joins it), and no set made to be read later.
        if shared_in_flight && found.as_ref().is_none_or(|e| e.needs_first_read()) {
            return None;
        }
        let entry = match (&key, found) {
            (ViewKey::Names(_), Some(entry)) => {
                entries.queries.retain(|e| !Arc::ptr_eq(e, &entry));
                entries.queries.push(entry.clone());
                entry
            }
            (_, Some(entry)) => entry,
            (ViewKey::Configured(name), None) => {
                let entry = self.make(base, key.clone(), view, config);
                entries.configured.insert(name.clone(), entry.clone());
                entry
            }
            (ViewKey::Names(_), None) => {
                let budget = self.whole.as_deref();
                if budget.is_some_and(|b| b.held() > b.limit() / 100 * QUERY_ADMISSION_PERCENT) {
                    return None;
                }
                if entries.queries.len() >= MAX_KEPT_QUERIES {
                    let idle = u64::try_from(self.query_idle.as_millis()).unwrap_or(u64::MAX);
                    let oldest = entries.queries[0].last_used.load(Ordering::Relaxed);
                    if now.saturating_sub(oldest) < idle {
                        return None;
                    }
                    retired.push(entries.queries.remove(0));
                }
                let entry = self.make(base, key.clone(), view, config);
                entries.queries.push(entry.clone());
                entry
            }
        };
        entry.last_used.store(now, Ordering::Relaxed);
        Some(entry)
    }

    fn make(
        &self,
        base: &ViewBase,
        key: ViewKey,
        view: &View,
        config: &Arc<Config>,
    ) -> Arc<ViewEntry> {
        self.made.fetch_add(1, Ordering::Relaxed);
        Arc::new(ViewEntry {
            key,
            view: view.clone(),
            config: config.clone(),
            flight: Coalescer::default(),
            state: Mutex::new(Some(EntryState {
                source: base.source(view.source_filter(config), view.wants_own()),
                held: None,
                #[cfg(test)]
                dropped: self.hooks.dropped(),
            })),
            rechecks: Rechecks::default(),
            bodies: Mutex::default(),
            last_nanos: AtomicU64::new(0),
            last_used: AtomicU64::new(0),
            charged: AtomicUsize::new(0),
        })
    }

    /// Drops every source made for another configuration than `config`
    /// (call it when the configuration is reloaded, off the async workers):
    /// their readers give back their budget as soon as no poll uses them.
    pub fn reconfigured(&self, config: &Arc<Config>) {
        let _off = OffWorker::enter();
        let retired = self.entries().keep_only(config);
        // The map is unlocked: the sources go here.
        drop(retired);
    }

    /// Has every source check these files with `stat` before trusting its
    /// maps (see [`crate::source::Reader::recheck`]).
    pub fn recheck(&self, paths: &[PathBuf]) {
        for entry in self.entries().all() {
            entry.rechecks.add(paths.iter().cloned());
        }
    }

    /// Has every source check every file with `stat`.
    pub fn recheck_all(&self) {
        for entry in self.entries().all() {
            entry.rechecks.add_all();
        }
    }

    /// Sources made so far: each one's first collection reads every file
    /// of the directory.
    pub fn sources_made(&self) -> u64 {
        self.made.load(Ordering::Relaxed)
    }

    /// The `?name[]=` sets kept now, least recently used first.
    pub fn kept_queries(&self) -> Vec<ViewKey> {
        self.entries()
            .queries
            .iter()
            .map(|e| e.key.clone())
            .collect()
    }

    /// The view's families now, coalesced with the polls of `entry` in
    /// flight and read in the views' lane, one read at a time (blocking: run
    /// it off the async workers). `None` when the source's first collection
    /// is still to come and the shared collection of `/metrics` (`shared`)
    /// is in flight when the turn comes: cut the view from that one instead
    /// (no second read of every file beside it).
    pub fn families(&self, entry: &ViewEntry, shared: &dyn InFlight) -> Option<Arc<ViewFamilies>> {
        let _off = OffWorker::enter();
        let families = entry.flight.run(|| {
            let _turn = self.lane.take();
            if entry.is_cold() && shared.in_flight() {
                return None;
            }
            Some(self.read(entry))
        });
        // The map is unlocked, and this is no async worker: evicted sources
        // go here.
        drop(self.trim(entry));
        families
    }

    /// [`Self::families`], unless a collection of `entry` or another view's
    /// read is in flight: then `None` (a poll on an async worker never waits
    /// for one). For a source already read once ([`ViewEntry::is_quick`]).
    pub fn families_now(&self, entry: &ViewEntry) -> Option<Arc<ViewFamilies>> {
        let turn = self.lane.try_take()?;
        let families = entry.flight.try_run(|| Some(self.read(entry))).flatten()?;
        drop(turn);
        // To the blocking pool (`Drop for ViewEntry`), the map unlocked.
        drop(self.trim(entry));
        Some(families)
    }

    /// One read of `entry`'s source, in the lane.
    fn read(&self, entry: &ViewEntry) -> Arc<ViewFamilies> {
        #[cfg(test)]
        self.hooks.reading();
        entry.collect()
    }

    /// Polls waiting for their turn to read a view's source.
    pub fn reads_waiting(&self) -> usize {
        self.lane.waiting.load(Ordering::SeqCst)
    }

    /// Evicts the least recently used `?name[]=` sources while the kept ones
    /// charge more than their share of the memory budget (the last one
    /// kept stays), or the budget as a whole is nearly full; returns them,
    /// to be dropped once the map is unlocked.
    fn trim(&self, entry: &ViewEntry) -> Retired {
        let mut retired = Retired::new();
        let Some(budget) = self.whole.as_ref() else {
            return retired;
        };
        if matches!(entry.key, ViewKey::Configured(_)) {
            return retired;
        }
        let cap = budget.limit() / 100 * KEPT_QUERIES_BUDGET_SHARE;
        let mut entries = self.entries();
        let mut charged: usize = entries
            .queries
            .iter()
            .map(|e| e.charged.load(Ordering::Relaxed))
            .sum();
        while charged > cap && entries.queries.len() > 1 {
            let evicted = entries.queries.remove(0);
            charged -= evicted.charged.load(Ordering::Relaxed);
            tracing::debug!(view = %evicted.view.name, "Evicted a ?name[]= view's source over its share of the memory budget.");
            retired.push(evicted);
        }
        // The whole budget nearly full: `/metrics` comes first. (An evicted
        // source gives its budget back when its last poll is done with it.)
        let full = budget.limit() / 100 * QUERY_EVICTION_PERCENT;
        let mut held = budget.held();
        while held > full && !entries.queries.is_empty() {
            let evicted = entries.queries.remove(0);
            held = held.saturating_sub(evicted.charged.load(Ordering::Relaxed));
            tracing::debug!(view = %evicted.view.name, "Evicted a ?name[]= view's source: the memory budget is nearly full.");
            retired.push(evicted);
        }
        retired
    }
}

impl Entries {
    /// Takes out the entries of another configuration than `config` (to be
    /// dropped once the map is unlocked).
    fn keep_only(&mut self, config: &Arc<Config>) -> Retired {
        if self.config.as_ref().is_some_and(|c| Arc::ptr_eq(c, config)) {
            return Retired::new();
        }
        self.config = Some(config.clone());
        let mut retired: Retired = self.configured.drain().map(|(_, e)| e).collect();
        retired.append(&mut self.queries);
        retired
    }

    fn all(&self) -> impl Iterator<Item = &Arc<ViewEntry>> {
        self.configured.values().chain(&self.queries)
    }
}

impl ViewEntry {
    /// The view it serves.
    pub fn view(&self) -> &View {
        &self.view
    }

    /// Whether a poll may run on the async worker: the last collection took
    /// less than [`QUICK_POLL`] and none is in flight. Reads atomics only.
    pub fn is_quick(&self) -> bool {
        let nanos = self.last_nanos.load(Ordering::Relaxed);
        nanos > 0 && nanos < QUICK_POLL.as_nanos() as u64 && !self.flight.running()
    }

    /// Whether no collection of its source has ended yet (its first reads
    /// every file of the directory).
    fn is_cold(&self) -> bool {
        self.last_nanos.load(Ordering::Relaxed) == 0
    }

    /// Whether a poll would start the source's first collection: none has
    /// ended and none is in flight to join.
    fn needs_first_read(&self) -> bool {
        self.is_cold() && !self.flight.running()
    }

    /// `families` encoded for a request, shared with the other requests for
    /// the same format, escaping and compression while the families stand.
    pub fn body(
        &self,
        families: &ViewFamilies,
        format: Format,
        escaping: Escaping,
        gzip: bool,
    ) -> SharedBody {
        let mut bodies = self.bodies.lock().unwrap_or_else(|e| e.into_inner());
        if bodies.id != families.id || families.id == 0 {
            bodies.id = families.id;
            bodies.list.clear();
        }
        let wanted = (format, escaping, gzip);
        if let Some((_, body)) = bodies.list.iter().find(|(k, _)| *k == wanted) {
            return body.clone();
        }
        let rendered = encoded(
            &families.families,
            format,
            escaping,
            gzip,
            &mut bodies.gzipper,
        );
        let body = SharedBody::alone(rendered);
        bodies.list.push((wanted, body.clone()));
        body
    }

    /// One collection of the view's source (run by one poll at a time).
    fn collect(&self) -> Arc<ViewFamilies> {
        let start = Instant::now();
        let mut state = self.state.lock().unwrap_or_else(|e| e.into_inner());
        let Some(state) = state.as_mut() else {
            return Arc::new(ViewFamilies::default());
        };
        self.rechecks.apply_to(&mut state.source);
        state.source.set_per_writer(self.config.per_writer.as_ref());
        let held = state.held.as_ref().map(|h| h.id);
        let collected = catch_unwind(AssertUnwindSafe(|| state.source.collect_since(held)));
        let families = match collected {
            Err(_) => {
                tracing::error!(view = %self.view.name, "Reading a view's metric files panicked (a bug); serving nothing this time.");
                // The old reader gives its budget back as it goes.
                state.source.reset();
                state.held = None;
                // A new reader's merges may take the ids of the old one's.
                self.bodies
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .list
                    .clear();
                Arc::new(ViewFamilies::default())
            }
            Ok(gathered) => {
                let collection = gathered.collection;
                match &state.held {
                    Some(held) if collection.unchanged && held.id == collection.merged_id => {
                        held.clone()
                    }
                    _ => {
                        let (transformed, _collisions) =
                            super::transform(&self.config, collection.families);
                        let families = Arc::new(ViewFamilies {
                            id: collection.merged_id,
                            families: Arc::new(view_families(&self.view, &transformed)),
                        });
                        state.held = Some(families.clone());
                        families
                    }
                }
            }
        };
        self.charged
            .store(state.source.charged(), Ordering::Relaxed);
        let nanos = u64::try_from(start.elapsed().as_nanos()).unwrap_or(u64::MAX);
        self.last_nanos.store(nanos.max(1), Ordering::Relaxed);
        families
    }
}

#[cfg(test)]
#[path = "views_priority_tests.rs"]
mod priority_tests;

#[cfg(test)]
mod tests {
    use super::*;
    use crate::expose::encode::encode;
    use crate::format::file_name::GaugeMode;
    use crate::format::writer::ProcessWriter;
    use crate::source::writers::WriterPolicy;

    pub(super) fn sources(
        dir: &std::path::Path,
        budget: Option<Arc<MemoryBudget>>,
    ) -> (Source, ViewSources) {
        let main = Source::new(
            vec![Input::Directory(dir.to_path_buf())],
            None,
            LinkPolicy::default(),
        )
        .with_memory_budget(budget)
        .with_writer_policy(WriterPolicy::exact());
        let views = ViewSources::new(main.view_base());
        (main, views)
    }

    /// A shared collection of `/metrics` with none in flight.
    pub(super) struct Idle;

    impl InFlight for Idle {
        fn in_flight(&self) -> bool {
            false
        }
    }

    /// A directory of one writer's 50 counters, `family_<i>_total`.
    pub(super) fn fifty_counters() -> tempfile::TempDir {
        let dir = tempfile::tempdir().unwrap();
        let mut writer = ProcessWriter::new(dir.path(), 1);
        for i in 0..50 {
            let counter = writer
                .counter(&format!("family_{i}"), "Help.", &[("i", &i.to_string())])
                .unwrap();
            counter.inc(&mut writer, 1.0).unwrap();
        }
        dir
    }

    /// `/metrics`'s families (transformed) as the main source collects them.
    fn whole(main: &mut Source, config: &Config) -> Vec<MetricFamily> {
        super::super::transform(config, main.collect_since(None).collection.families).0
    }

    #[test]
    fn a_view_serves_its_families_as_cut_from_metrics_and_follows_changes() {
        let dir = tempfile::tempdir().unwrap();
        let mut writer = ProcessWriter::new(dir.path(), 1);
        let waiting = writer
            .gauge(
                "vllm:num_requests_waiting",
                "Waiting.",
                &[("model_name", "m")],
                GaugeMode::MostRecent,
            )
            .unwrap();
        waiting.set(&mut writer, 3.0).unwrap();
        let tokens = writer
            .counter("vllm:prompt_tokens", "Tokens.", &[("model_name", "m")])
            .unwrap();
        tokens.inc(&mut writer, 5.0).unwrap();
        let (mut main, views) = sources(dir.path(), None);
        let config = Arc::new(Config::default());
        let view = config.views[0].clone();
        let shared = Idle;
        let entry = views.entry(&view, &config, &shared).unwrap();
        let first = views.families(&entry, &shared).unwrap();
        let text = String::from_utf8(encode(&first.families, Format::Text, Escaping::Underscores))
            .unwrap();
        assert!(
            text.contains("vllm:num_requests_waiting{model_name=\"m\"} 3.0"),
            "{text}"
        );
        assert!(!text.contains("prompt_tokens"), "{text}");
        assert_eq!(
            *first.families,
            view_families(&view, &whole(&mut main, &config))
        );
        // Unchanged: the same families, and the same body, shared.
        let again = views.families(&entry, &shared).unwrap();
        assert!(Arc::ptr_eq(&first, &again));
        let body = entry.body(&again, Format::Text, Escaping::Underscores, true);
        assert!(!body.gzipped(), "a small answer is sent as it is");
        let body_again = entry.body(&again, Format::Text, Escaping::Underscores, true);
        assert!(std::ptr::eq(
            body.as_ref().as_ptr(),
            body_again.as_ref().as_ptr()
        ));
        waiting.set(&mut writer, 4.0).unwrap();
        let changed = views.families(&entry, &shared).unwrap();
        assert_eq!(
            *changed.families,
            view_families(&view, &whole(&mut main, &config))
        );
        // The view's reader interned only the view's keys.
        let state = entry.state.lock().unwrap();
        let held = &state.as_ref().unwrap().held;
        assert_eq!(held.as_ref().unwrap().families.len(), 1);
    }

    #[test]
    fn an_encoded_name_and_the_names_it_spells_are_two_keys() {
        let encoded = View::of_sample_names(&["A&name[]=B".to_owned()]);
        let two = View::of_sample_names(&["A".to_owned(), "B".to_owned()]);
        assert_eq!(encoded.name, two.name, "the joined names, as keyed before");
        assert_ne!(ViewKey::of(&encoded), ViewKey::of(&two));
        // Order and repetition make no other set.
        let reordered = View::of_sample_names(&["B".to_owned(), "A".to_owned(), "B".to_owned()]);
        assert_eq!(ViewKey::of(&reordered), ViewKey::of(&two));
    }

    #[test]
    fn a_view_source_gives_its_budget_back_when_evicted_reloaded_or_rebuilt() {
        let dir = fifty_counters();
        let budget = Arc::new(MemoryBudget::new(usize::MAX / 2));
        let (mut main, views) = sources(dir.path(), Some(budget.clone()));
        let config = Arc::new(Config::default());
        main.collect_since(None);
        let before = budget.held();
        assert!(before > 0);
        let shared = Idle;
        for i in 0..20 {
            let view = View::of_sample_names(&[format!("family_{i}_total")]);
            if let Some(entry) = views.entry(&view, &config, &shared) {
                let families = views.families(&entry, &shared).unwrap();
                assert_eq!(families.families.len(), 1);
            }
        }
        assert!(budget.held() > before, "the kept sources hold their keys");
        assert!(views.kept_queries().len() <= MAX_KEPT_QUERIES);
        views.reconfigured(&Arc::new(Config::default()));
        assert_eq!(budget.held(), before);
    }

    #[test]
    fn a_name_set_gets_no_source_of_its_own_when_the_budget_is_nearly_full() {
        let dir = fifty_counters();
        let config = Arc::new(Config::default());
        let query = View::of_sample_names(&["family_0_total".to_owned()]);
        // How much the main source holds, measured with room to spare.
        let roomy = Arc::new(MemoryBudget::new(usize::MAX / 2));
        let (mut main, _) = sources(dir.path(), Some(roomy.clone()));
        main.collect_since(None);
        let needed = roomy.held();
        // A budget the main source fills to about 80%: above the admission
        // share, so `/metrics` keeps every file and the set is cut from the
        // shared collection.
        let tight = Arc::new(MemoryBudget::new(needed * 100 / 80));
        let (mut main, views) = sources(dir.path(), Some(tight.clone()));
        assert!(main.collect_since(None).collection.problems.is_empty());
        let shared = Idle;
        assert!(views.entry(&query, &config, &shared).is_none());
        // With room, the set gets its own.
        let (mut main, views) = sources(dir.path(), Some(roomy));
        main.collect_since(None);
        assert!(views.entry(&query, &config, &shared).is_some());
    }
}
