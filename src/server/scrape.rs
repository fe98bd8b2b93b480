//! One scrape's answer: the shared collection's families
//! ([`crate::pipeline::shared::SharedCollection`], which owns the reading,
//! the coalescing and the skip of an unchanged merge), restricted to
//! `?name[]=`, encoded. Blocking (a collection reads files); the HTTP
//! handler runs it on tokio's blocking pool, or on its own worker when the
//! last scrape took under a few milliseconds and no collection is in flight
//! ([`Scraper::is_quick`], [`Scraper::render_now`]: a polled pod's scrape
//! costs less than the two thread wake-ups of a hand-over).
//!
//! What this keeps is the encoder's: the encoded (and gzipped) body is
//! shared, so that concurrent scrapes that ask for the same format,
//! escaping, names and compression wait for one encoding instead of each
//! holding a copy (eight scrapes of a large directory cost about one body
//! of memory), and the last collection's whole-scrape bodies (up to
//! [`KEEP_BODY_MAX_BYTES`] in all) are sent again while the collection
//! serves the same families. It also watches each collection for the
//! server ([`Telemetry`], the pipeline's [`Observer`]): a bad file is
//! logged once when it first turns bad (again only if its reason changes)
//! and counted in the self-metrics, and the status page's history records a
//! point.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use crate::expose::encode::encode;
use crate::expose::encode::{Escaping, Format};
use crate::expose::memo::{EncodeMemo, Gzipper};
use crate::insight::Point;
use crate::model::MetricFamily;
pub(crate) use crate::pipeline::rendered::{
    gzipped_or_plain, Rendered, SharedBody, GZIP_MIN_BYTES,
};
use crate::pipeline::shared::{Collected, Observer, SharedCollection};
pub(crate) use crate::pipeline::shared::{Served, ServedFamilies};
use crate::pipeline::Source;
use crate::server::api::{unix_now, Insight, LastCollection};
use crate::server::telemetry::events::Reporter;
use crate::server::telemetry::self_metrics::{self, SelfMetrics};
use crate::source::link_policy::LinkPolicy;
use crate::source::writers::WriterPolicy;
use crate::source::Input;
use crate::source::MemoryBudget;
use crate::transform::{self, config::Config};

/// Encodes the shared collection's families; one per server.
#[derive(Debug)]
pub(crate) struct Scraper {
    /// What every scrape reads (the pipeline's state).
    collection: SharedCollection,
    bodies: Mutex<Bodies>,
    /// What the last bodies' encodings left to reuse, by format and escaping
    /// (for requests without `?name[]=`).
    memos: Mutex<Vec<EncodeMemo>>,
    /// Gzips the `?name[]=` answers (which no memo keeps).
    gzipper: Mutex<Gzipper>,
    /// How long the last scrape took to collect and encode, in nanoseconds
    /// (0 before the first).
    last_render_nanos: AtomicU64,
    /// What the collections' telemetry keeps between them.
    watch: Watch,
}

/// What the server's telemetry keeps between collections: what was logged,
/// and the status page's history.
#[derive(Debug)]
struct Watch {
    reporter: Mutex<Reporter>,
    /// The curated history and the last collection's status.
    insight: Insight,
    /// The last fresh merge's point of the history (vLLM's curated
    /// numbers), recorded again while the merge stands.
    point: Mutex<Option<Point>>,
    /// The labels that tell the parts apart: the vLLM numbers are kept per
    /// part (pod) and model.
    group_by: Vec<Arc<str>>,
}

/// One collection's [`Observer`]: the logs, the self-metrics (if served)
/// and the history.
struct Telemetry<'a> {
    watch: &'a Watch,
    self_metrics: Option<&'a SelfMetrics>,
}

impl Observer for Telemetry<'_> {
    fn merged(&self, families: &[MetricFamily]) {
        // vLLM's curated numbers, from vLLM's own names.
        let point = Point::grouped(families, unix_now(), &self.watch.group_by);
        *self.watch.point.lock().unwrap_or_else(|e| e.into_inner()) = Some(point);
    }

    fn collected(&self, collected: &Collected<'_>) {
        let now = unix_now();
        let point = self
            .watch
            .point
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone();
        if let Some(point) = point {
            self.watch.insight.record(
                Point { at: now, ..point },
                LastCollection::of(collected.gathered, collected.families, now, collected.took),
            );
        }
        let mut reporter = self
            .watch
            .reporter
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        reporter.collection(
            collected.gathered,
            collected.families.len(),
            collected.took,
            collected.panicked,
            self.self_metrics,
        );
        reporter.collisions(collected.collisions);
    }

    fn own_families(
        &self,
        merged: &[MetricFamily],
        upstreams: Vec<MetricFamily>,
    ) -> Option<Vec<MetricFamily>> {
        let m = self.self_metrics?;
        let mut all = m.families();
        all.extend(upstreams);
        let (own, clashes) = self_metrics::without_clashes(all, merged);
        self.watch
            .reporter
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .self_metric_clashes(&clashes);
        Some(own)
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
        dirs: &[std::path::PathBuf],
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
        let collection = SharedCollection::new(
            source
                .with_memory_budget(memory_budget)
                .with_writer_policy(writer_policy),
        );
        Self {
            watch: Watch {
                reporter: Mutex::new(Reporter::new(dead_files_warning)),
                insight: Insight::default(),
                point: Mutex::new(None),
                group_by: collection.group_by().to_vec(),
            },
            collection,
            bodies: Mutex::new(Bodies::default()),
            memos: Mutex::new(Vec::new()),
            gzipper: Mutex::new(Gzipper::default()),
            last_render_nanos: AtomicU64::new(0),
        }
    }

    /// The shared collection every scrape reads.
    pub(crate) fn collection(&self) -> &SharedCollection {
        &self.collection
    }

    fn telemetry<'a>(&'a self, self_metrics: Option<&'a SelfMetrics>) -> Telemetry<'a> {
        Telemetry {
            watch: &self.watch,
            self_metrics,
        }
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
        let served = self.collection.families(
            config,
            &self.telemetry(self_metrics),
            request.scrape_timeout,
        );
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
        let served = self.collection.families_now(
            config,
            &self.telemetry(self_metrics),
            request.scrape_timeout,
        )?;
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
        !self.collection.discovers()
            && nanos > 0
            && nanos < QUICK_SCRAPE.as_nanos() as u64
            && !self.collection.in_flight()
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

    /// The families of a collection (run now, or joined if one is in
    /// flight), as `/metrics` serves them.
    pub(crate) fn families(
        &self,
        config: &Arc<Config>,
        self_metrics: Option<&SelfMetrics>,
    ) -> Arc<Served> {
        self.collection
            .families(config, &self.telemetry(self_metrics), None)
    }

    /// The curated history and the last collection's status.
    pub(crate) fn insight(&self) -> &Insight {
        &self.watch.insight
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
