//! One scrape: read and merge the directories, apply the configuration, add
//! the self-metrics, restrict to `?name[]=`, encode. Blocking (file I/O); the
//! HTTP handler runs it on tokio's blocking pool, or on its own worker when
//! the last scrape took under a few milliseconds and no collection is in
//! flight ([`Scraper::is_quick`], [`Scraper::render_now`]: a
//! polled pod's scrape costs less than the two thread wake-ups of a
//! hand-over).
//!
//! A single [`Reader`] is shared by all scrapes, so every scrape reuses what
//! earlier ones decoded. Concurrent scrapes are coalesced (like client_golang's
//! `CoalesceGather`): a scrape that arrives while a collection is in flight
//! waits for it and shares its result instead of reading every file again, so
//! several Prometheus replicas scraping at once cost one collection. The
//! encoded (and gzipped) body is shared too: concurrent scrapes that ask for
//! the same format, escaping, names and compression wait for one encoding
//! instead of each holding a copy, so eight scrapes of a large directory
//! cost about one body of memory.
//!
//! Between scrapes, the last collection's families (and its whole-scrape
//! bodies, up to [`KEEP_BODY_MAX_BYTES`] in all) are kept for one purpose:
//! when no file to merge changed (the same files, the same structure, every
//! value the same bit for bit) and neither did the configuration, the
//! collector skips the merge ([`crate::pipeline::Collector::collect_since`])
//! and the scrape serves those families, and those bodies, again. The
//! listing, the writers' states and every value are still read at every
//! scrape; only work whose result is known is skipped. With upstreams, the
//! families are always merged anew.
//!
//! The configuration's upstreams are fetched while the directory is read
//! and merged after it ([`crate::source::upstream`]); being part of the
//! collection, their fetches are shared by coalesced scrapes too.
//!
//! Nothing here fails a scrape: a bad file is left out, logged once when it
//! first turns bad (again only if its reason changes) and counted in the
//! self-metrics; a panic in the reader (a bug) is caught, logged, and the
//! scrape serves the self-metrics alone, with a fresh reader for the next one.

use std::collections::HashSet;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, OnceLock};

use std::time::{Duration, Instant};

use crate::expose::encode::encode;
use crate::expose::encode::{Escaping, Format};
use crate::expose::memo::{EncodeMemo, Gzipper};
use crate::insight::Point;
use crate::model::MetricFamily;
pub(crate) use crate::pipeline::rendered::{
    gzipped_or_plain, Rendered, SharedBody, GZIP_MIN_BYTES,
};
use crate::pipeline::views::ViewBase;
use crate::pipeline::{self, Gathered, Source};
use crate::server::api::{unix_now, Insight, LastCollection};
use crate::server::telemetry::events::Reporter;
use crate::server::telemetry::self_metrics::{self, SelfMetrics};
use crate::source::link_policy::LinkPolicy;
use crate::source::upstream::Upstreams;
use crate::source::writers::WriterPolicy;
use crate::source::Input;
use crate::source::MemoryBudget;
use crate::transform::{self, config::Config};

/// Reads, merges and encodes; one per server.
#[derive(Debug)]
pub(crate) struct Scraper {
    inputs: Vec<Input>,
    reads_subdirectories: bool,
    /// The directories are discovered: a collection may scan `/proc` and
    /// waits for its parts until their deadline, never on a worker.
    discovers: bool,
    state: Mutex<ScrapeState>,
    in_flight: Mutex<InFlight>,
    bodies: Mutex<Bodies>,
    finished: Condvar,
    rechecks: Mutex<Rechecks>,
    /// What the last bodies' encodings left to reuse, by format and escaping
    /// (for requests without `?name[]=`).
    memos: Mutex<Vec<EncodeMemo>>,
    /// Gzips the `?name[]=` answers (which no memo keeps).
    gzipper: Mutex<Gzipper>,
    /// How long the last scrape took to collect and encode, in nanoseconds
    /// (0 before the first).
    last_render_nanos: AtomicU64,
    /// The curated history and the last collection's status.
    insight: Insight,
    /// The labels that tell the parts apart: the vLLM numbers are kept per
    /// part (pod) and model.
    group_by: Vec<Arc<str>>,
    /// The configuration's upstreams: fetched with every collection.
    upstreams: Upstreams,
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
    /// The last result, while a scrape still uses it (the scrapes that
    /// joined the collection take it from here).
    last: std::sync::Weak<Served>,
    /// Scrapes waiting for the collection in flight.
    waiting: usize,
    /// The last result, kept until every scrape that waited for it has
    /// woken up and taken it (the scrape that ran the collection may be done
    /// with it first, which would make a joined scrape collect again).
    held: Option<Arc<Served>>,
}

/// What one collection serves: the merged (and transformed) families, then
/// the exporter's own.
#[derive(Debug, Default)]
pub(crate) struct Served {
    /// Identifies these families: a scrape that gets a [`Served`] with the
    /// same id gets the same families, and the same bodies (0: none).
    pub(crate) id: u64,
    /// The families from the metric files (and upstreams), transformed:
    /// shared, not copied, by every collection that reuses the merge, so
    /// that their encoded text is reused by identity
    /// ([`EncodeMemo::encode_shared`]).
    pub(crate) merged: Arc<Vec<MetricFamily>>,
    /// The exporter's own, which change with every scrape.
    pub(crate) own: Vec<MetricFamily>,
    /// Both, in one list, made on first use (`?name[]=`, the JSON API, push).
    all: OnceLock<Vec<MetricFamily>>,
}

impl Served {
    /// Every family, as `/metrics` serves them.
    pub(crate) fn families(&self) -> &[MetricFamily] {
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

/// A collection's families, as a sink takes them ([`crate::sink::Feed`]).
pub(crate) struct ServedFamilies(pub(crate) Arc<Served>);

impl std::ops::Deref for ServedFamilies {
    type Target = [MetricFamily];

    fn deref(&self) -> &[MetricFamily] {
        self.0.families()
    }
}

/// Scrapes faster than this run on the async worker ([`Scraper::is_quick`]).
const QUICK_SCRAPE: std::time::Duration = std::time::Duration::from_millis(3);

/// Bytes of encoded text each [`EncodeMemo`] may keep (a body this large
/// is encoded in full every time, as without a memo).
const MEMO_MAX_BYTES: usize = 16 << 20;

/// Bytes of whole-scrape bodies kept between scrapes of an unchanged
/// directory, all formats together (bodies are otherwise held only while a
/// request uses them).
const KEEP_BODY_MAX_BYTES: usize = 4 << 20;

/// The bodies being encoded or sent for the current collection, by request.
#[derive(Debug, Default)]
struct Bodies {
    /// The [`Served::id`] they are bodies of.
    served: u64,
    entries: Vec<(BodyKey, std::sync::Weak<OnceLock<Rendered>>)>,
    /// The whole-scrape bodies (no `?name[]=`) of these families, kept
    /// while they stand (see the module's documentation).
    kept: Vec<Arc<OnceLock<Rendered>>>,
}

/// What makes two scrapes' bodies equal.
#[derive(Debug, Clone, PartialEq, Eq)]
struct BodyKey {
    format: Format,
    escaping: Escaping,
    names: Option<Vec<String>>,
    gzip: bool,
}

#[derive(Debug)]
struct ScrapeState {
    source: Source,
    reporter: Reporter,
    /// The last collection, while its families can stand for the next one.
    reusable: Option<Reusable>,
    /// The last [`Served::id`] given.
    served_ids: u64,
}

/// A collection whose families stand for the next one if the collector
/// finds the merge's inputs unchanged and the configuration is the same.
#[derive(Debug)]
struct Reusable {
    /// The collector's [`pipeline::Collection::merged_id`].
    merged_id: u64,
    /// The configuration it was transformed with (kept, so that a new one
    /// cannot take its address).
    config: Arc<Config>,
    /// What it served.
    served: Arc<Served>,
    /// Its point of the history (vLLM's curated numbers).
    point: Point,
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
    /// Whether the client accepts gzip.
    pub(crate) gzip: bool,
    /// Prometheus's `X-Prometheus-Scrape-Timeout-Seconds`, if sent: caps
    /// the upstreams' deadlines.
    pub(crate) scrape_timeout: Option<Duration>,
}

impl Scraper {
    /// A scraper for these directories, following links in them by
    /// `link_policy`; with `subdirectories_label`, for each of their
    /// subdirectories, labelled (see [`crate::pipeline::subdirectories`]).
    pub(crate) fn new(
        dirs: &[PathBuf],
        subdirectories_label: Option<Arc<str>>,
        link_policy: LinkPolicy,
        memory_budget: Option<Arc<MemoryBudget>>,
        writer_policy: WriterPolicy,
        dead_files_warning: usize,
    ) -> Self {
        let inputs: Vec<Input> = dirs.iter().cloned().map(Input::Directory).collect();
        let source = Source::new(inputs, subdirectories_label, link_policy);
        Self::with_source(source, memory_budget, writer_policy, dead_files_warning)
    }

    /// A scraper reading `source` (such as one that discovers its
    /// directories: [`Source::discovered`]).
    pub(crate) fn with_source(
        source: Source,
        memory_budget: Option<Arc<MemoryBudget>>,
        writer_policy: WriterPolicy,
        dead_files_warning: usize,
    ) -> Self {
        let inputs = source.inputs().to_vec();
        Self {
            reads_subdirectories: source.reads_subdirectories(),
            discovers: source.discovers(),
            group_by: source.part_label_names(),
            state: Mutex::new(ScrapeState {
                source: source
                    .with_memory_budget(memory_budget)
                    .with_writer_policy(writer_policy),
                reporter: Reporter::new(dead_files_warning),
                reusable: None,
                served_ids: 0,
            }),
            inputs,
            in_flight: Mutex::new(InFlight::default()),
            bodies: Mutex::new(Bodies::default()),
            finished: Condvar::new(),
            rechecks: Mutex::new(Rechecks::default()),
            memos: Mutex::new(Vec::new()),
            gzipper: Mutex::new(Gzipper::default()),
            last_render_nanos: AtomicU64::new(0),
            insight: Insight::default(),
            upstreams: Upstreams::default(),
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

    /// What the views' sources are made from ([`ViewBase`]): this
    /// scraper's inputs, links, memory budget and writers' policy; `None`
    /// where a view is cut from a whole collection.
    pub(crate) fn view_base(&self) -> Option<ViewBase> {
        self.lock().source.view_base()
    }

    fn lock(&self) -> MutexGuard<'_, ScrapeState> {
        // A panic is caught inside `render`, so poisoning only means an earlier
        // scrape panicked somewhere else; the state is still usable.
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Runs one scrape and returns the encoded body, shared with the
    /// concurrent scrapes that asked for the same one.
    pub(crate) fn render(
        &self,
        request: &Request,
        config: &Arc<Config>,
        self_metrics: Option<&SelfMetrics>,
    ) -> SharedBody {
        let start = Instant::now();
        let served = self.coalesced(|| self.collect(config, self_metrics, request.scrape_timeout));
        self.render_served(request, served, start)
    }

    /// [`Self::render`] on an async worker: `None` when a collection is in
    /// flight (it is never waited for here; the scrape is handed over).
    pub(crate) fn render_now(
        &self,
        request: &Request,
        config: &Arc<Config>,
        self_metrics: Option<&SelfMetrics>,
    ) -> Option<SharedBody> {
        let start = Instant::now();
        let served =
            self.try_coalesced(|| self.collect(config, self_metrics, request.scrape_timeout))?;
        Some(self.render_served(request, served, start))
    }

    /// The body of `served` for `request`, shared with the concurrent
    /// scrapes that asked for the same one; the scrape began at `start`.
    fn render_served(&self, request: &Request, served: Arc<Served>, start: Instant) -> SharedBody {
        let key = BodyKey {
            format: request.format,
            escaping: request.escaping,
            names: request.names.clone(),
            gzip: request.gzip,
        };
        let cell = {
            let mut bodies = self.bodies.lock().unwrap_or_else(|e| e.into_inner());
            if bodies.served != served.id || served.id == 0 {
                bodies.served = served.id;
                bodies.entries.clear();
                bodies.kept.clear();
            }
            bodies.entries.retain(|(_, cell)| cell.strong_count() > 0);
            let found = bodies
                .entries
                .iter()
                .find(|(k, _)| *k == key)
                .and_then(|(_, cell)| cell.upgrade());
            found.unwrap_or_else(|| {
                let cell = Arc::new(OnceLock::new());
                bodies.entries.push((key, Arc::downgrade(&cell)));
                cell
            })
        };
        // The first scrape encodes; the others with the same key wait for it.
        let rendered = cell.get_or_init(|| self.encode(request, &served));
        if request.names.is_none() && rendered.body.len() <= KEEP_BODY_MAX_BYTES {
            let mut bodies = self.bodies.lock().unwrap_or_else(|e| e.into_inner());
            let kept_bytes: usize = bodies
                .kept
                .iter()
                .map(|k| k.get().map_or(0, |r| r.body.len()))
                .sum();
            if bodies.served == served.id
                && kept_bytes + rendered.body.len() <= KEEP_BODY_MAX_BYTES
                && !bodies.kept.iter().any(|k| Arc::ptr_eq(k, &cell))
            {
                bodies.kept.push(cell.clone());
            }
        }
        let nanos = u64::try_from(start.elapsed().as_nanos()).unwrap_or(u64::MAX);
        self.last_render_nanos
            .store(nanos.max(1), Ordering::Relaxed);
        SharedBody(cell)
    }

    /// Whether the next scrape may run on the async worker itself, saving
    /// the two thread switches of a hand-over to the blocking pool: the last
    /// scrape took less than [`QUICK_SCRAPE`] and no collection is in
    /// flight (a scrape that would wait for one is handed over). A directory
    /// that grows between two scrapes costs at most one slow scrape on a
    /// worker; the next one is handed over again.
    pub(crate) fn is_quick(&self) -> bool {
        let nanos = self.last_render_nanos.load(Ordering::Relaxed);
        !self.discovers
            && nanos > 0
            && nanos < QUICK_SCRAPE.as_nanos() as u64
            && !self
                .in_flight
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .running
    }

    /// Encodes (and gzips, if asked) a collection's body for `request`.
    fn encode(&self, request: &Request, served: &Served) -> Rendered {
        if let Some(names) = &request.names {
            // The merged and the own families restricted one list after the
            // other: no copy of every family into one list first.
            let mut families = transform::restrict(&served.merged, names);
            families.extend(transform::restrict(&served.own, names));
            let body = encode(&families, request.format, request.escaping);
            return if request.gzip && body.len() >= GZIP_MIN_BYTES {
                let gzipped = self
                    .gzipper
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .gzip(&body);
                gzipped_or_plain(body, gzipped)
            } else {
                Rendered {
                    body,
                    gzipped: false,
                }
            };
        }
        let mut memos = self.memos.lock().unwrap_or_else(|e| e.into_inner());
        let wanted = (request.format, request.escaping);
        let at = match memos.iter().position(|m| m.encodes() == wanted) {
            Some(at) => at,
            None => {
                memos.push(EncodeMemo::new(
                    request.format,
                    request.escaping,
                    MEMO_MAX_BYTES,
                ));
                memos.len() - 1
            }
        };
        let memo = &mut memos[at];
        memo.encode_shared(&served.merged, &served.own);
        let rendered = if request.gzip {
            // The text stays with the memo; only a failed gzip copies it.
            match memo.gzip() {
                Ok(body) => Rendered {
                    body,
                    gzipped: true,
                },
                Err(e) => gzipped_or_plain(memo.body().to_vec(), Err(e)),
            }
        } else {
            Rendered {
                body: memo.body().to_vec(),
                gzipped: false,
            }
        };
        memo.release_unkept();
        rendered
    }

    /// Runs `collect`, unless a collection is already in flight: then waits
    /// for it and returns its result (or, when every scrape is already done
    /// with it, runs another).
    fn coalesced(&self, collect: impl Fn() -> Arc<Served>) -> Arc<Served> {
        let in_flight = self.in_flight.lock().unwrap_or_else(|e| e.into_inner());
        self.coalesced_from(in_flight, collect)
    }

    /// [`Self::coalesced`], unless a collection is in flight: then `None`.
    fn try_coalesced(&self, collect: impl Fn() -> Arc<Served>) -> Option<Arc<Served>> {
        let in_flight = self.in_flight.lock().unwrap_or_else(|e| e.into_inner());
        (!in_flight.running).then(|| self.coalesced_from(in_flight, collect))
    }

    fn coalesced_from(
        &self,
        mut in_flight: MutexGuard<'_, InFlight>,
        collect: impl Fn() -> Arc<Served>,
    ) -> Arc<Served> {
        loop {
            if !in_flight.running {
                break;
            }
            let joined = in_flight.generation;
            in_flight.waiting += 1;
            while in_flight.generation == joined {
                in_flight = self
                    .finished
                    .wait(in_flight)
                    .unwrap_or_else(|e| e.into_inner());
            }
            in_flight.waiting -= 1;
            let last = in_flight.held.clone().or_else(|| in_flight.last.upgrade());
            if in_flight.waiting == 0 {
                in_flight.held = None;
            }
            if let Some(last) = last {
                tracing::debug!("Joined a collection in flight.");
                return last;
            }
        }
        in_flight.running = true;
        drop(in_flight);
        // Never leave `running` set: a panic (a bug) yields an empty result.
        let result = catch_unwind(AssertUnwindSafe(collect)).unwrap_or_else(|_| {
            tracing::error!("A collection panicked (a bug); serving nothing this time.");
            Arc::new(Served::default())
        });
        let mut in_flight = self.in_flight.lock().unwrap_or_else(|e| e.into_inner());
        in_flight.running = false;
        in_flight.generation += 1;
        in_flight.last = Arc::downgrade(&result);
        in_flight.held = (in_flight.waiting > 0).then(|| result.clone());
        let waiting = in_flight.waiting > 0;
        drop(in_flight);
        // A waiter counts itself in under the lock before it waits: with
        // none counted, nobody needs the wake-up (a system call every time).
        if waiting {
            self.finished.notify_all();
        }
        result
    }

    /// Reads and merges the directories, fetches the upstreams meanwhile
    /// and merges them after, applies the configuration and adds the
    /// self-metrics. The last collection's families stand when the
    /// collector finds nothing to merge changed (see the module's
    /// documentation).
    fn collect(
        &self,
        config: &Arc<Config>,
        self_metrics: Option<&SelfMetrics>,
        scrape_timeout: Option<Duration>,
    ) -> Arc<Served> {
        let pending = self.upstreams.start(&config.upstreams, scrape_timeout);
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
        state.source.set_per_writer(config.per_writer.as_ref());
        state.source.set_request_timeout(scrape_timeout);
        let held = state
            .reusable
            .as_ref()
            .filter(|r| config.upstreams.is_empty() && Arc::ptr_eq(&r.config, config))
            .map(|r| r.merged_id);
        let collected = catch_unwind(AssertUnwindSafe(|| state.source.collect_since(held)));
        let panicked = collected.is_err();
        let mut gathered = collected.unwrap_or_else(|_| {
            tracing::error!(
                "Reading the metric files panicked (a bug); serving no merged metrics this time."
            );
            state.source.reset();
            Gathered::default()
        });
        let now = unix_now();
        let reused = match state.reusable.take() {
            Some(r) if gathered.collection.unchanged && held == Some(r.merged_id) => Some(r),
            _ => None,
        };
        if let Some(mut reused) = reused {
            let merged = reused.served.merged.clone();
            let point = Point {
                at: now,
                ..reused.point.clone()
            };
            self.insight.record(
                point,
                LastCollection::of(&gathered, &merged, now, start.elapsed()),
            );
            state.reporter.collection(
                &gathered,
                merged.len(),
                start.elapsed(),
                panicked,
                self_metrics,
            );
            if self_metrics.is_some() {
                // The exporter's own families change with every scrape; the
                // merged ones are shared as they are.
                reused.served = self.served(state, merged, self_metrics);
            }
            let served = reused.served.clone();
            state.reusable = Some(reused);
            return served;
        }
        let merged = std::mem::take(&mut gathered.collection.families);
        let merged = self.upstreams.finish(pending, merged);
        // vLLM's curated numbers, from vLLM's own names.
        let point = Point::grouped(&merged, now, &self.group_by);
        let (families, collisions) = pipeline::transform(config, merged);
        self.insight.record(
            point.clone(),
            LastCollection::of(&gathered, &families, now, start.elapsed()),
        );
        state.reporter.collection(
            &gathered,
            families.len(),
            start.elapsed(),
            panicked,
            self_metrics,
        );
        state.reporter.collisions(&collisions);
        let served = self.served(state, Arc::new(families), self_metrics);
        state.reusable = (!panicked && config.upstreams.is_empty()).then(|| Reusable {
            merged_id: gathered.collection.merged_id,
            config: config.clone(),
            served: served.clone(),
            point,
        });
        served
    }

    /// What a collection serves: its transformed `families`, then the
    /// exporter's own (those whose names they do not take), under a new id.
    fn served(
        &self,
        state: &mut ScrapeState,
        merged: Arc<Vec<MetricFamily>>,
        self_metrics: Option<&SelfMetrics>,
    ) -> Arc<Served> {
        let mut own = Vec::new();
        if let Some(m) = self_metrics {
            let mut all = m.families();
            all.extend(self.upstreams.families());
            let clashes;
            (own, clashes) = self_metrics::without_clashes(all, &merged);
            state.reporter.self_metric_clashes(&clashes);
        }
        state.served_ids += 1;
        Arc::new(Served {
            id: state.served_ids,
            merged,
            own,
            all: OnceLock::new(),
        })
    }

    /// The families of a collection (run now, or joined if one is in
    /// flight), as `/metrics` serves them.
    pub(crate) fn families(
        &self,
        config: &Arc<Config>,
        self_metrics: Option<&SelfMetrics>,
    ) -> Arc<Served> {
        self.coalesced(|| self.collect(config, self_metrics, None))
    }

    /// The curated history and the last collection's status.
    pub(crate) fn insight(&self) -> &Insight {
        &self.insight
    }

    /// Whether each directory is a parent of one directory per pod.
    pub(crate) fn reads_subdirectories(&self) -> bool {
        self.reads_subdirectories
    }

    /// Whether at least one directory exists now.
    /// (With discovered directories, none is awaited: always.)
    pub(crate) fn any_directory_exists(&self) -> bool {
        self.inputs.is_empty() || self.inputs.iter().any(|i| i.path().is_dir())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::format::writer::ProcessWriter;

    fn request(format: Format, escaping: Escaping, gzip: bool) -> Request {
        Request {
            format,
            escaping,
            names: None,
            gzip,
            scrape_timeout: None,
        }
    }

    #[test]
    fn an_unchanged_directory_gets_the_kept_body_and_the_kept_bodies_stay_bounded() {
        let dir = tempfile::tempdir().unwrap();
        // About 1.6 MB of text in each format: three uncompressed bodies
        // would pass the bound together.
        let mut writer = ProcessWriter::new(dir.path(), 1);
        let label = "x".repeat(60);
        for i in 0..16_000 {
            let counter = writer
                .counter(
                    "requests",
                    "Requests.",
                    &[("path", &format!("/{label}/{i}"))],
                )
                .unwrap();
            counter.inc(&mut writer, 1.0).unwrap();
        }
        let scraper = Scraper::new(
            &[dir.path().to_path_buf()],
            None,
            LinkPolicy::default(),
            None,
            WriterPolicy::exact(),
            usize::MAX,
        );
        let config = Arc::new(Config::default());
        let requests = [
            request(Format::Text, Escaping::Underscores, false),
            request(Format::OpenMetrics, Escaping::Underscores, false),
            request(Format::OpenMetrics, Escaping::AllowUtf8, false),
            request(Format::Text, Escaping::Underscores, true),
        ];
        let first: Vec<SharedBody> = requests
            .iter()
            .map(|r| scraper.render(r, &config, None))
            .collect();
        assert!(first[0].as_ref().len() > 1_000_000);
        let kept: usize = {
            let bodies = scraper.bodies.lock().unwrap();
            bodies
                .kept
                .iter()
                .map(|k| k.get().map_or(0, |r| r.body.len()))
                .sum()
        };
        assert!(kept > 0 && kept <= KEEP_BODY_MAX_BYTES, "{kept}");
        drop(first);
        // Nothing changed: the kept bodies are sent again, the others encoded
        // again, each equal to what the first scrapes got.
        let again = scraper.render(&requests[0], &config, None);
        let fresh = scraper.render(&requests[2], &config, None);
        let bodies = scraper.bodies.lock().unwrap();
        assert!(bodies.kept.iter().any(|k| Arc::ptr_eq(k, &again.0)));
        assert!(!bodies.kept.iter().any(|k| Arc::ptr_eq(k, &fresh.0)));
        drop(bodies);
        // A new configuration: merged and encoded anew.
        let other = Arc::new(Config::default());
        let renewed = scraper.render(&requests[0], &other, None);
        assert!(!Arc::ptr_eq(&renewed.0, &again.0));
        assert_eq!(renewed.as_ref(), again.as_ref());
    }
}
