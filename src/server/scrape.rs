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

use std::collections::{HashMap, HashSet};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::PathBuf;
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::Instant;

use crate::expose::encode::{encode, Escaping, Format};
use crate::model::MetricFamily;
use crate::pipeline::subdirectories::SubdirectoryReader;
use crate::pipeline::{Collection, Collector};
use crate::source::link_policy::LinkPolicy;
use crate::source::{Input, Problem, SkipReason};
use crate::transform;
use crate::transform::config::Config;

use crate::server::subdirectories;
use crate::server::telemetry::self_metrics::{self, SelfMetrics};

/// Reads, merges and encodes; one per server.
#[derive(Debug)]
pub(crate) struct Scraper {
    inputs: Vec<Input>,
    link_policy: LinkPolicy,
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

#[derive(Debug, Default)]
struct ScrapeState {
    reader: Collector,
    /// With `--dir.subdirectories-label`: reads each subdirectory of the
    /// directories on its own instead of `reader`.
    per_subdirectory: Option<SubdirectoryReader>,
    /// Subdirectory conflicts currently present (logged when they first appear).
    logged_conflicts: HashSet<subdirectories::LoggedConflict>,
    /// Paths currently left out, with the reason last logged.
    bad: HashMap<PathBuf, SkipReason>,
    /// Renaming collisions and self-metric clashes already logged.
    logged_collisions: HashSet<(Arc<str>, Arc<str>)>,
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
        Self {
            inputs: dirs.iter().cloned().map(Input::Directory).collect(),
            state: Mutex::new(ScrapeState {
                reader: Collector::with_link_policy(link_policy),
                per_subdirectory: subdirectories_label
                    .map(|label| SubdirectoryReader::new(dirs.to_vec(), label, link_policy)),
                ..ScrapeState::default()
            }),
            link_policy,
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
        match &request.names {
            Some(names) => encode(
                &transform::restrict(&families, names),
                request.format,
                request.escaping,
            ),
            None => encode(&families, request.format, request.escaping),
        }
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
        let start = Instant::now();
        let rechecks =
            std::mem::take(&mut *self.rechecks.lock().unwrap_or_else(|e| e.into_inner()));
        let collected = catch_unwind(AssertUnwindSafe(|| {
            let state = &mut *state;
            match &mut state.per_subdirectory {
                None => {
                    if rechecks.all {
                        state.reader.recheck_all();
                    } else {
                        for path in &rechecks.paths {
                            state.reader.recheck(path);
                        }
                    }
                    (state.reader.collect(&self.inputs), None)
                }
                Some(reader) => {
                    if rechecks.all {
                        reader.recheck_all();
                    } else {
                        for path in &rechecks.paths {
                            reader.recheck(path);
                        }
                    }
                    let (collection, outcome) =
                        subdirectories::collect(reader, &mut state.logged_conflicts);
                    (collection, Some(outcome))
                }
            }
        }));
        let panicked = collected.is_err();
        let (
            Collection {
                families,
                problems,
                stats,
            },
            subdirectory_outcome,
        ) = collected.unwrap_or_else(|_| {
            tracing::error!(
                "Reading the metric files panicked (a bug); serving no merged metrics this time."
            );
            state.reader = Collector::with_link_policy(self.link_policy);
            if let Some(reader) = &mut state.per_subdirectory {
                *reader = SubdirectoryReader::new(
                    reader.parents().to_vec(),
                    reader.label(),
                    self.link_policy,
                );
            }
            (Collection::default(), None)
        });
        state.log_problems(&problems);
        let transformed = transform::apply(config, families);
        for c in &transformed.collisions {
            if state
                .logged_collisions
                .insert((c.original.clone(), c.renamed.clone()))
            {
                tracing::warn!(
                    family = %c.original,
                    renamed = %c.renamed,
                    "Dropping a metric family: its new name is already used by another family."
                );
            }
        }
        let mut families = transformed.families;
        if let Some(m) = self_metrics {
            m.observe_scrape(&stats, &problems, families.len(), start.elapsed(), panicked);
            if let Some(outcome) = &subdirectory_outcome {
                m.observe_subdirectories(outcome.subdirectories, &outcome.conflicts);
            }
            let (own, clashes) = self_metrics::without_clashes(m.families(), &families);
            for name in clashes {
                if state.logged_collisions.insert((name.clone(), name.clone())) {
                    tracing::warn!(
                        family = %name,
                        "Leaving out an exporter self-metric: a merged family has the same name."
                    );
                }
            }
            families.extend(own);
        }
        families
    }

    /// Whether at least one directory exists now.
    pub(crate) fn any_directory_exists(&self) -> bool {
        self.inputs.iter().any(|i| i.path().is_dir())
    }
}

impl ScrapeState {
    /// Logs paths that turned bad or changed reason, and those that recovered.
    fn log_problems(&mut self, problems: &[Problem]) {
        let mut now: HashMap<PathBuf, SkipReason> = HashMap::with_capacity(problems.len());
        for problem in problems {
            if self.bad.get(&problem.path) != Some(&problem.reason) {
                log_problem(problem);
            }
            now.insert(problem.path.clone(), problem.reason.clone());
        }
        for (path, reason) in &self.bad {
            if !now.contains_key(path) {
                match reason {
                    SkipReason::Vanished => {}
                    SkipReason::DirectoryMissing => {
                        tracing::debug!(path = %path.display(), "Metrics directory exists now.")
                    }
                    _ => tracing::info!(path = %path.display(), "File is readable again."),
                }
            }
        }
        self.bad = now;
    }
}

fn log_problem(problem: &Problem) {
    let path = problem.path.display();
    let reason = &problem.reason;
    let label = reason.label();
    match reason {
        // The watcher logs directories appearing and disappearing.
        SkipReason::DirectoryMissing => {
            tracing::debug!(%path, "Metrics directory does not exist (yet); serving nothing from it.")
        }
        // Deleted between listing and reading: normal when a process exits.
        SkipReason::Vanished => {
            tracing::debug!(%path, %reason, reason_label = label, "Skipping file.")
        }
        _ => tracing::warn!(%path, %reason, reason_label = label, "Skipping file."),
    }
}
