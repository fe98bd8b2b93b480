//! One scrape: read and merge the directories, apply the configuration, add
//! the self-metrics, restrict to `?name[]=`, encode. Blocking (file I/O); the
//! HTTP handler runs it on tokio's blocking pool.
//!
//! A single [`Reader`] is shared by all scrapes, so every scrape reuses what
//! earlier ones decoded. Concurrent scrapes are coalesced (like client_golang's
//! `CoalesceGather`): a scrape that arrives while a collection is in flight
//! waits for it and shares its result instead of reading every file again, so
//! several Prometheus replicas scraping at once cost one collection. Each
//! request then restricts and encodes the shared families in its own format.
//!
//! Nothing here fails a scrape: a bad file is left out, logged once when it
//! first turns bad (again only if its reason changes) and counted in the
//! self-metrics; a panic in the reader (a bug) is caught, logged, and the
//! scrape serves the self-metrics alone, with a fresh reader for the next one.

use std::collections::HashSet;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::PathBuf;
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::Instant;

use crate::expose::encode::{Escaping, Format};
use crate::model::MetricFamily;
use crate::pipeline::{self, Gathered, Source};
use crate::server::telemetry::events::Reporter;
use crate::server::telemetry::self_metrics::{self, SelfMetrics};
use crate::source::link_policy::LinkPolicy;
use crate::source::Input;
use crate::transform::config::Config;

/// Reads, merges and encodes; one per server.
#[derive(Debug)]
pub(crate) struct Scraper {
    inputs: Vec<Input>,
    reads_subdirectories: bool,
    state: Mutex<ScrapeState>,
    in_flight: Mutex<InFlight>,
    finished: Condvar,
    rechecks: Mutex<Rechecks>,
}

/// Files the watcher saw modified since the last collection: their maps are
/// checked with `stat` before being trusted again (see [`crate::source::Reader::recheck`]).
#[derive(Debug, Default)]
struct Rechecks {
    all: bool,
    paths: HashSet<PathBuf>,
}

/// Beyond this many pending paths, every file is rechecked instead.
const MAX_PENDING_RECHECKS: usize = 4096;

/// The collection currently running, if any, and the last result.
#[derive(Debug, Default)]
struct InFlight {
    running: bool,
    /// Incremented each time a collection finishes.
    generation: u64,
    last: Arc<Vec<MetricFamily>>,
}

#[derive(Debug)]
struct ScrapeState {
    source: Source,
    reporter: Reporter,
}

/// What a scrape asks for.
#[derive(Debug, Clone)]
pub(crate) struct Request {
    /// Format.
    pub(crate) format: Format,
    /// Escaping.
    pub(crate) escaping: Escaping,
    /// `?name[]=` values, if any.
    pub(crate) names: Option<Vec<String>>,
}

impl Scraper {
    /// A scraper for these directories, following links in them by
    /// `link_policy`; with `subdirectories_label`, for each of their
    /// subdirectories, labelled (see [`crate::pipeline::subdirectories`]).
    pub(crate) fn new(
        dirs: &[PathBuf],
        subdirectories_label: Option<Arc<str>>,
        link_policy: LinkPolicy,
    ) -> Self {
        let inputs: Vec<Input> = dirs.iter().cloned().map(Input::Directory).collect();
        Self {
            reads_subdirectories: subdirectories_label.is_some(),
            state: Mutex::new(ScrapeState {
                source: Source::new(inputs.clone(), subdirectories_label, link_policy),
                reporter: Reporter::default(),
            }),
            inputs,
            in_flight: Mutex::new(InFlight::default()),
            finished: Condvar::new(),
            rechecks: Mutex::new(Rechecks::default()),
        }
    }

    /// Has the next collection check these files with `stat` before
    /// trusting their maps (they were modified: truncated, grown, replaced).
    pub(crate) fn recheck(&self, paths: impl IntoIterator<Item = PathBuf>) {
        let mut rechecks = self.rechecks.lock().unwrap_or_else(|e| e.into_inner());
        if !rechecks.all {
            rechecks.paths.extend(paths);
            if rechecks.paths.len() > MAX_PENDING_RECHECKS {
                rechecks.all = true;
                rechecks.paths.clear();
            }
        }
    }

    /// Has the next collection check every file with `stat`.
    pub(crate) fn recheck_all(&self) {
        let mut rechecks = self.rechecks.lock().unwrap_or_else(|e| e.into_inner());
        rechecks.all = true;
        rechecks.paths.clear();
    }

    fn lock(&self) -> MutexGuard<'_, ScrapeState> {
        // A panic is caught inside `render`, so poisoning only means an earlier
        // scrape panicked somewhere else; the state is still usable.
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Runs one scrape and returns the encoded body.
    pub(crate) fn render(
        &self,
        request: &Request,
        config: &Config,
        self_metrics: Option<&SelfMetrics>,
    ) -> Vec<u8> {
        let families = self.coalesced(|| self.collect(config, self_metrics));
        pipeline::render(
            &families,
            request.names.as_deref(),
            request.format,
            request.escaping,
        )
    }

    /// Runs `collect`, unless a collection is already in flight: then waits
    /// for it and returns its result.
    fn coalesced(&self, collect: impl FnOnce() -> Vec<MetricFamily>) -> Arc<Vec<MetricFamily>> {
        let mut in_flight = self.in_flight.lock().unwrap_or_else(|e| e.into_inner());
        if in_flight.running {
            let joined = in_flight.generation;
            while in_flight.generation == joined {
                in_flight = self
                    .finished
                    .wait(in_flight)
                    .unwrap_or_else(|e| e.into_inner());
            }
            tracing::debug!("Joined a collection in flight.");
            return in_flight.last.clone();
        }
        in_flight.running = true;
        drop(in_flight);
        // Never leave `running` set: a panic (a bug) yields an empty result.
        let result = Arc::new(catch_unwind(AssertUnwindSafe(collect)).unwrap_or_else(|_| {
            tracing::error!("A collection panicked (a bug); serving nothing this time.");
            Vec::new()
        }));
        let mut in_flight = self.in_flight.lock().unwrap_or_else(|e| e.into_inner());
        in_flight.running = false;
        in_flight.generation += 1;
        in_flight.last = result.clone();
        drop(in_flight);
        self.finished.notify_all();
        result
    }

    /// Reads and merges the directories, applies the configuration and adds
    /// the self-metrics.
    fn collect(&self, config: &Config, self_metrics: Option<&SelfMetrics>) -> Vec<MetricFamily> {
        let mut state = self.lock();
        let state = &mut *state;
        let start = Instant::now();
        let rechecks =
            std::mem::take(&mut *self.rechecks.lock().unwrap_or_else(|e| e.into_inner()));
        if rechecks.all {
            state.source.recheck_all();
        } else {
            for path in &rechecks.paths {
                state.source.recheck(path);
            }
        }
        let collected = catch_unwind(AssertUnwindSafe(|| state.source.collect()));
        let panicked = collected.is_err();
        let mut gathered = collected.unwrap_or_else(|_| {
            tracing::error!(
                "Reading the metric files panicked (a bug); serving no merged metrics this time."
            );
            state.source.reset();
            Gathered::default()
        });
        let (mut families, collisions) =
            pipeline::transform(config, std::mem::take(&mut gathered.collection.families));
        state.reporter.collection(
            &gathered,
            families.len(),
            start.elapsed(),
            panicked,
            self_metrics,
        );
        state.reporter.collisions(&collisions);
        if let Some(m) = self_metrics {
            let (own, clashes) = self_metrics::without_clashes(m.families(), &families);
            state.reporter.self_metric_clashes(&clashes);
            families.extend(own);
        }
        families
    }

    /// Whether each directory is a parent of one directory per pod.
    pub(crate) fn reads_subdirectories(&self) -> bool {
        self.reads_subdirectories
    }

    /// Whether at least one directory exists now.
    pub(crate) fn any_directory_exists(&self) -> bool {
        self.inputs.iter().any(|i| i.path().is_dir())
    }
}
