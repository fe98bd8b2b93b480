//! The shared collection: the one source that every `/metrics` scrape,
//! push, JSON API call and view cut from `/metrics` reads, and its state
//! (the HTTP layer keeps none: it encodes what this serves).
//!
//! A single source is shared by all collections, so every collection
//! reuses what earlier ones decoded. Concurrent collections are coalesced
//! ([`Coalescer`], like client_golang's `CoalesceGather`): a call that
//! arrives while a collection is in flight waits for it and shares its
//! result instead of reading every file again, so several Prometheus
//! replicas scraping at once cost one collection.
//!
//! Between collections, the last one's families are kept for one purpose:
//! when no file to merge changed (the same files, the same structure, every
//! value the same bit for bit) and neither did the configuration, the
//! collector skips the merge ([`super::Collector::collect_since`]) and the
//! same families are served again, under the same [`Served::merged`] (so
//! that encoders keep their text by identity). The listing, the writers'
//! states and every value are still read at every collection; only work
//! whose result is known is skipped. With upstreams, the families are always
//! merged anew.
//!
//! The configuration's upstreams are fetched while the directory is read
//! and merged after it (`source::upstream`); being part of the
//! collection, their fetches are shared by coalesced calls too.
//!
//! Nothing here fails a collection: a bad file is left out (the
//! [`Observer`] logs and counts it); a panic in the reader (a bug) is
//! caught, logged, and the collection serves the exporter's own families
//! alone, with a fresh reader for the next one.

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::PathBuf;
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};
use std::time::{Duration, Instant};

use crate::model::MetricFamily;
use crate::source::upstream::Upstreams;
use crate::source::Input;
use crate::transform::config::Config;
use crate::transform::Collision;

use super::coalesce::{Coalescer, InFlight, Rechecks};
use super::views::ViewBase;
use super::{Gathered, Source};

/// What one collection serves: the merged (and transformed) families, then
/// the exporter's own.
#[derive(Debug, Default)]
pub struct Served {
    /// Identifies these families: a call that gets a [`Served`] with the
    /// same id gets the same families (0: none).
    pub id: u64,
    /// The families from the metric files (and upstreams), transformed:
    /// shared, not copied, by every collection that reuses the merge, so
    /// that their encoded text is reused by identity
    /// ([`crate::expose::memo::EncodeMemo::encode_shared`]).
    pub merged: Arc<Vec<MetricFamily>>,
    /// The exporter's own, which change with every collection.
    pub own: Vec<MetricFamily>,
    /// Both, in one list, made on first use (`?name[]=`, the JSON API, push).
    all: OnceLock<Vec<MetricFamily>>,
    /// Whether every source answered in full (no upstream failed, no file
    /// failed to read, no part late, capped or cut by the budget): a sink
    /// takes a series absent from an incomplete collection for missing,
    /// not gone.
    pub complete: bool,
}

impl Served {
    /// Every family, as `/metrics` serves them.
    pub fn families(&self) -> &[MetricFamily] {
        if self.own.is_empty() {
            return &self.merged;
        }
        self.all.get_or_init(|| {
            let mut all = Vec::with_capacity(self.merged.len() + self.own.len());
            all.extend(self.merged.iter().cloned());
            all.extend(self.own.iter().cloned());
            all
        })
    }
}

/// A collection's families, as a sink takes them (the sinks' `Feed`).
#[derive(Debug)]
pub struct ServedFamilies(pub Arc<Served>);

impl std::ops::Deref for ServedFamilies {
    type Target = [MetricFamily];

    fn deref(&self) -> &[MetricFamily] {
        self.0.families()
    }
}

/// What a collection did, told to its [`Observer`] once it is done.
#[derive(Debug)]
pub struct Collected<'a> {
    /// What the source gathered (its problems and events).
    pub gathered: &'a Gathered,
    /// The transformed families it serves (without the exporter's own).
    pub families: &'a [MetricFamily],
    /// How long it took.
    pub took: Duration,
    /// Whether the reader panicked (a bug): nothing merged was served.
    pub panicked: bool,
    /// Families dropped because their new name was taken.
    pub collisions: &'a [Collision],
    /// Whether the last merge stood (nothing to merge changed):
    /// [`Observer::merged`] was not called for this collection.
    pub reused: bool,
}

/// Who watches the shared collection: the server's telemetry (logs,
/// self-metrics, the status page's history). The pipeline calls it; it owns
/// no collection state.
pub trait Observer {
    /// The families of a fresh merge, before the configuration applies
    /// (vLLM's own names): called before [`Observer::collected`], except
    /// when the last merge stands.
    fn merged(&self, families: &[MetricFamily]);
    /// One collection is done.
    fn collected(&self, collected: &Collected<'_>);
    /// The exporter's own families to serve after `merged`, with the
    /// upstreams' (`upstreams`); `None` when it serves none.
    fn own_families(
        &self,
        merged: &[MetricFamily],
        upstreams: Vec<MetricFamily>,
    ) -> Option<Vec<MetricFamily>>;
}

/// The shared collection (see the module's documentation); one per server.
#[derive(Debug)]
pub struct SharedCollection {
    inputs: Vec<Input>,
    reads_subdirectories: bool,
    /// The directories are discovered: a collection may scan `/proc` and
    /// waits for its parts until their deadline, never on an async worker.
    discovers: bool,
    group_by: Vec<Arc<str>>,
    flight: Coalescer<Arc<Served>>,
    /// Locked only by the call that runs the collection.
    state: Mutex<State>,
    rechecks: Rechecks,
    /// The configuration's upstreams: fetched with every collection.
    upstreams: Upstreams,
}

#[derive(Debug)]
struct State {
    source: Source,
    /// The last collection, while its families can stand for the next one.
    reusable: Option<Reusable>,
    /// The last [`Served::id`] given.
    served_ids: u64,
}

/// A collection whose families stand for the next one if the collector
/// finds the merge's inputs unchanged and the configuration is the same.
#[derive(Debug)]
struct Reusable {
    /// The collector's [`super::Collection::merged_id`].
    merged_id: u64,
    /// The configuration it was transformed with (kept, so that a new one
    /// cannot take its address).
    config: Arc<Config>,
    /// What it served.
    served: Arc<Served>,
}

impl SharedCollection {
    /// The shared collection of `source`.
    pub fn new(source: Source) -> Self {
        Self {
            inputs: source.inputs().to_vec(),
            reads_subdirectories: source.reads_subdirectories(),
            discovers: source.discovers(),
            group_by: source.part_label_names(),
            flight: Coalescer::default(),
            state: Mutex::new(State {
                source,
                reusable: None,
                served_ids: 0,
            }),
            rechecks: Rechecks::default(),
            upstreams: Upstreams::default(),
        }
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        // A panic is caught inside `collect`, so poisoning only means an
        // earlier call panicked somewhere else; the state is still usable.
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Runs a collection, or joins the one in flight, and returns what it
    /// serves.
    pub fn families(
        &self,
        config: &Arc<Config>,
        observer: &dyn Observer,
        scrape_timeout: Option<Duration>,
    ) -> Arc<Served> {
        self.flight
            .run(|| self.collect_caught(config, observer, scrape_timeout))
    }

    /// [`Self::families`], unless a collection is in flight: then `None`
    /// (it is never waited for: for an async worker).
    pub fn families_now(
        &self,
        config: &Arc<Config>,
        observer: &dyn Observer,
        scrape_timeout: Option<Duration>,
    ) -> Option<Arc<Served>> {
        self.flight
            .try_run(|| self.collect_caught(config, observer, scrape_timeout))
    }

    /// Whether a collection is in flight.
    pub fn in_flight(&self) -> bool {
        self.flight.running()
    }

    /// Has the next collection check these files with `stat` before
    /// trusting their maps (they were modified: truncated, grown, replaced).
    pub fn recheck(&self, paths: impl IntoIterator<Item = PathBuf>) {
        self.rechecks.add(paths);
    }

    /// Has the next collection check every file with `stat`.
    pub fn recheck_all(&self) {
        self.rechecks.add_all();
    }

    /// What the views' sources are made from ([`ViewBase`]): this source's
    /// inputs, links, memory budget and writers' policy; `None` where a
    /// view is cut from a whole collection.
    pub fn view_base(&self) -> Option<ViewBase> {
        self.lock().source.view_base()
    }

    /// The labels that tell the parts (pods) apart.
    pub fn group_by(&self) -> &[Arc<str>] {
        &self.group_by
    }

    /// Whether each directory is a parent of one directory per pod.
    pub fn reads_subdirectories(&self) -> bool {
        self.reads_subdirectories
    }

    /// Whether the directories are discovered through `/proc`.
    pub fn discovers(&self) -> bool {
        self.discovers
    }

    /// Whether at least one directory exists now.
    /// (With discovered directories, none is awaited: always.)
    pub fn any_directory_exists(&self) -> bool {
        self.inputs.is_empty() || self.inputs.iter().any(|i| i.path().is_dir())
    }

    /// [`Self::collect`], a panic outside the reader (a bug) serving
    /// nothing this time instead of failing every coalesced caller.
    fn collect_caught(
        &self,
        config: &Arc<Config>,
        observer: &dyn Observer,
        scrape_timeout: Option<Duration>,
    ) -> Arc<Served> {
        catch_unwind(AssertUnwindSafe(|| {
            self.collect(config, observer, scrape_timeout)
        }))
        .unwrap_or_else(|_| {
            tracing::error!("A collection panicked (a bug); serving nothing this time.");
            Arc::new(Served::default())
        })
    }

    /// Reads and merges the directories, fetches the upstreams meanwhile
    /// and merges them after, applies the configuration and adds the
    /// exporter's own families. The last collection's families stand when
    /// the collector finds nothing to merge changed (see the module's
    /// documentation).
    fn collect(
        &self,
        config: &Arc<Config>,
        observer: &dyn Observer,
        scrape_timeout: Option<Duration>,
    ) -> Arc<Served> {
        let pending = self.upstreams.start(&config.upstreams, scrape_timeout);
        let mut state = self.lock();
        let state = &mut *state;
        let start = Instant::now();
        self.rechecks.apply_to(&mut state.source);
        state.source.set_per_writer(config.per_writer.as_ref());
        state.source.set_request_timeout(scrape_timeout);
        let held = state
            .reusable
            .as_ref()
            .filter(|r| config.upstreams.is_empty() && Arc::ptr_eq(&r.config, config))
            .map(|r| r.merged_id);
        let collected = catch_unwind(AssertUnwindSafe(|| state.source.collect_since(held)));
        // A part's read that panicked (`pipeline/fair.rs`) counts too.
        let mut panicked = collected.is_err();
        let mut gathered = collected.unwrap_or_else(|_| {
            tracing::error!(
                "Reading the metric files panicked (a bug); serving no merged metrics this time."
            );
            state.source.reset();
            Gathered::default()
        });
        panicked |= gathered.collection.stats.parts_panicked > 0;
        let reused = match state.reusable.take() {
            Some(r) if gathered.collection.unchanged && held == Some(r.merged_id) => Some(r),
            _ => None,
        };
        if let Some(mut reused) = reused {
            let merged = reused.served.merged.clone();
            observer.collected(&Collected {
                gathered: &gathered,
                families: &merged,
                took: start.elapsed(),
                panicked,
                collisions: &[],
                reused: true,
            });
            let complete = !panicked && gathered.complete();
            if let Some(own) = observer.own_families(&merged, self.upstreams.families()) {
                // The exporter's own families change with every collection;
                // the merged ones are shared as they are.
                reused.served = Self::served(state, merged, own, complete);
            } else if reused.served.complete != complete {
                reused.served = Self::served(state, merged, Vec::new(), complete);
            }
            let served = reused.served.clone();
            state.reusable = Some(reused);
            return served;
        }
        let merged = std::mem::take(&mut gathered.collection.families);
        let (merged, answered) = self.upstreams.finish(pending, merged);
        let complete = answered && !panicked && gathered.complete();
        observer.merged(&merged);
        let (families, collisions) = super::transform(config, merged);
        observer.collected(&Collected {
            gathered: &gathered,
            families: &families,
            took: start.elapsed(),
            panicked,
            collisions: &collisions,
            reused: false,
        });
        let own = observer
            .own_families(&families, self.upstreams.families())
            .unwrap_or_default();
        let served = Self::served(state, Arc::new(families), own, complete);
        state.reusable = (!panicked && config.upstreams.is_empty()).then(|| Reusable {
            merged_id: gathered.collection.merged_id,
            config: config.clone(),
            served: served.clone(),
        });
        served
    }

    /// What a collection serves: its transformed `merged` families, then
    /// `own`, under a new id.
    fn served(
        state: &mut State,
        merged: Arc<Vec<MetricFamily>>,
        own: Vec<MetricFamily>,
        complete: bool,
    ) -> Arc<Served> {
        state.served_ids += 1;
        Arc::new(Served {
            id: state.served_ids,
            merged,
            own,
            all: OnceLock::new(),
            complete,
        })
    }
}

impl InFlight for SharedCollection {
    fn in_flight(&self) -> bool {
        SharedCollection::in_flight(self)
    }
}
