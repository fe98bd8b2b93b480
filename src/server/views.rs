//! Serving the views ([`crate::transform::views`]): `<telemetry path>/<name>`,
//! and the `?name[]=` requests of the telemetry path, each answered as a view
//! of its sample names ([`View::of_sample_names`]; the last few kept).
//!
//! Each view has its own source ([`crate::pipeline::Source::view`]): the
//! same directory, links, memory budget and writers' liveness as `/metrics`,
//! but a reader that keeps only the records of the view's families, so a
//! poll loads, merges, transforms and encodes only those. The view's
//! families are then cut from the transformed ones exactly as from
//! `/metrics`'s ([`View::cut`]), so both answers agree byte for byte on the
//! view's families. An unchanged merge is skipped as for `/metrics`
//! ([`crate::pipeline::Collector::collect_since`]), and its encoded bodies
//! are kept and sent again. The exporter's own families are added only
//! when the view lists them ([`View::wants_own`]); a view's poll reports no
//! problem of its own (the collections of `/metrics` log and count them).
//!
//! Where no such source exists (subdirectories, discovered directories) or
//! the configuration has upstreams, a view is cut from a whole collection
//! (shared with `/metrics`'s scrapes): the same answer, at `/metrics`'s cost.
//!
//! A small answer is not gzipped ([`GZIP_MIN_BYTES`]).

use std::collections::HashMap;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::expose::encode::{encode, Escaping, Format};
use crate::expose::memo::Gzipper;
use crate::model::MetricFamily;
use crate::pipeline::{self, Source};
use crate::server::scrape::{
    gzipped_or_plain, Rendered, Request, Scraper, SharedBody, GZIP_MIN_BYTES,
};
use crate::server::telemetry::self_metrics::{self, SelfMetrics};
use crate::transform::config::{Config, ConfigError};
use crate::transform::views::{view_path, Matching, View};

/// View polls faster than this run on the async worker (see
/// [`Views::is_quick`]).
const QUICK_POLL: Duration = Duration::from_millis(3);

/// The `?name[]=` queries whose own sources are kept (beyond, they start
/// again from nothing).
const MAX_QUERY_VIEWS: usize = 4;

/// The views' state; one per server.
#[derive(Debug, Default)]
pub(crate) struct Views {
    by_name: Mutex<HashMap<Arc<str>, Arc<Mutex<ViewState>>>>,
}

/// One view's source and last answer.
#[derive(Debug)]
struct ViewState {
    /// The configuration it was made for (a new one makes a new state).
    config: Arc<Config>,
    view: View,
    /// Its own source, if it has one (see the module's documentation).
    source: Option<Source>,
    /// Rechecks asked for since its last collection.
    recheck_all: bool,
    rechecks: Vec<std::path::PathBuf>,
    /// The last merge's id and the view's families cut from it.
    held: Option<(u64, Arc<Vec<MetricFamily>>)>,
    /// Bodies encoded from `held` (with no own families), by request.
    bodies: Vec<(Format, Escaping, bool, SharedBody)>,
    /// How long the last poll took, in nanoseconds (0: none yet).
    last_nanos: AtomicU64,
    gzipper: Gzipper,
}

impl Views {
    /// Whether a poll of `view` may run on the async worker: its last poll
    /// took less than [`QUICK_POLL`] with its own source.
    pub(crate) fn is_quick(&self, view: &str, config: &Arc<Config>) -> bool {
        let states = self.by_name.lock().unwrap_or_else(|e| e.into_inner());
        states.get(view).is_some_and(|state| {
            state.try_lock().is_ok_and(|state| {
                let nanos = state.last_nanos.load(Ordering::Relaxed);
                Arc::ptr_eq(&state.config, config)
                    && state.source.is_some()
                    && nanos > 0
                    && nanos < QUICK_POLL.as_nanos() as u64
            })
        })
    }

    /// Serves `view` for `request`: collects its families (with its own
    /// source if it has one), adds the exporter's own it lists, encodes.
    pub(crate) fn render(
        &self,
        scraper: &Scraper,
        view: &View,
        request: &Request,
        config: &Arc<Config>,
        self_metrics: Option<&SelfMetrics>,
    ) -> SharedBody {
        let start = Instant::now();
        let state = self.state(scraper, view, config);
        let mut state = state.lock().unwrap_or_else(|e| e.into_inner());
        let body = match state.source.is_some() {
            true => state.render(scraper, request, self_metrics),
            false => {
                // Cut from a whole collection, shared with `/metrics`.
                let served = scraper.families(config, self_metrics);
                let families = view.cut(served.families());
                SharedBody::alone(state.encode(&families, request))
            }
        };
        let nanos = u64::try_from(start.elapsed().as_nanos()).unwrap_or(u64::MAX);
        state.last_nanos.store(nanos.max(1), Ordering::Relaxed);
        body
    }

    /// The state of `view` under `config`, made anew for a new
    /// configuration; every state gets the rechecks asked for since.
    fn state(&self, scraper: &Scraper, view: &View, config: &Arc<Config>) -> Arc<Mutex<ViewState>> {
        let mut states = self.by_name.lock().unwrap_or_else(|e| e.into_inner());
        let (all, paths) = scraper.take_view_rechecks();
        if all || !paths.is_empty() {
            for state in states.values() {
                let mut state = state.lock().unwrap_or_else(|e| e.into_inner());
                state.recheck_all |= all;
                if !state.recheck_all {
                    state.rechecks.extend(paths.iter().cloned());
                }
            }
        }
        // Views a new configuration no longer has are dropped with their
        // maps, and so are the `?name[]=` requests' beyond the last few.
        let queries = states
            .values()
            .filter(|s| {
                s.try_lock()
                    .is_ok_and(|s| s.view.matching == Matching::Samples)
            })
            .count();
        states.retain(|name, state| {
            state
                .try_lock()
                .map_or(true, |state| match state.view.matching {
                    Matching::Families => config.views.iter().any(|v| v.name == *name),
                    Matching::Samples => queries < MAX_QUERY_VIEWS || *name == view.name,
                })
        });
        let current = states
            .get(&view.name)
            .filter(|s| {
                s.lock()
                    .map(|s| Arc::ptr_eq(&s.config, config))
                    .unwrap_or(false)
            })
            .cloned();
        current.unwrap_or_else(|| {
            let state = Arc::new(Mutex::new(ViewState::new(scraper, view, config)));
            states.insert(view.name.clone(), state.clone());
            state
        })
    }
}

/// Why the configuration's views cannot be served under `telemetry_path`, if
/// they cannot: a view whose path is one the server already serves (the
/// metrics path, `/`, `/-/healthy`, `/-/ready`, the JSON API's).
pub fn view_clash(telemetry_path: &str, config: &Config) -> Option<ConfigError> {
    config.views.iter().find_map(|view| {
        let path = view_path(telemetry_path, &view.name);
        let taken = path == telemetry_path
            || ["/", "/-/healthy", "/-/ready"].contains(&path.as_str())
            || super::api::Endpoint::of(&path).is_some();
        taken.then(|| ConfigError::InvalidView {
            name: view.name.to_string(),
            error: format!("its path {path} is one the server already serves"),
        })
    })
}

/// The answer to a path under the metrics path that names no view: 404,
/// naming the views that exist.
pub(crate) fn unknown_view(telemetry_path: &str, config: &Config) -> axum::response::Response {
    use axum::response::IntoResponse;
    let mut text = String::from("404 page not found: no such view. ");
    if config.views.is_empty() {
        text.push_str("No view is configured.\n");
    } else {
        text.push_str("The views are:\n");
        for view in &config.views {
            text.push_str(&view_path(telemetry_path, &view.name));
            text.push('\n');
        }
    }
    (axum::http::StatusCode::NOT_FOUND, text).into_response()
}

impl ViewState {
    fn new(scraper: &Scraper, view: &View, config: &Arc<Config>) -> Self {
        let own_source = config.upstreams.is_empty();
        let source = own_source
            .then(|| scraper.view_source(view.source_filter(config), view.wants_own()))
            .flatten();
        Self {
            config: config.clone(),
            view: view.clone(),
            source,
            recheck_all: false,
            rechecks: Vec::new(),
            held: None,
            bodies: Vec::new(),
            last_nanos: AtomicU64::new(0),
            gzipper: Gzipper::default(),
        }
    }

    /// A poll with the view's own source.
    fn render(
        &mut self,
        scraper: &Scraper,
        request: &Request,
        self_metrics: Option<&SelfMetrics>,
    ) -> SharedBody {
        let families = self.collect(scraper);
        let own = match self_metrics {
            Some(m) if self.view.wants_own() => {
                let (own, _) =
                    self_metrics::without_clashes(self.view.cut(&m.families()), &families);
                own
            }
            _ => Vec::new(),
        };
        if !own.is_empty() {
            let mut all = families.to_vec();
            all.extend(own);
            return SharedBody::alone(self.encode(&all, request));
        }
        let wanted = (request.format, request.escaping, request.gzip);
        if let Some((.., body)) = self
            .bodies
            .iter()
            .find(|(f, e, g, _)| (*f, *e, *g) == wanted)
        {
            return body.clone();
        }
        let body = SharedBody::alone(self.encode(&families, request));
        self.bodies
            .push((request.format, request.escaping, request.gzip, body.clone()));
        body
    }

    /// The view's families now: merged from its source, or those held when
    /// nothing they were merged from changed.
    fn collect(&mut self, scraper: &Scraper) -> Arc<Vec<MetricFamily>> {
        let Some(source) = &mut self.source else {
            return Arc::default();
        };
        if std::mem::take(&mut self.recheck_all) {
            source.recheck_all();
        }
        for path in self.rechecks.drain(..) {
            source.recheck(&path);
        }
        source.set_per_writer(self.config.per_writer.as_ref());
        let held = self.held.as_ref().map(|(id, _)| *id);
        let gathered = catch_unwind(AssertUnwindSafe(|| source.collect_since(held)));
        let Ok(gathered) = gathered else {
            tracing::error!(view = %self.view.name, "Reading a view's metric files panicked (a bug); serving nothing this time.");
            self.source =
                scraper.view_source(self.view.source_filter(&self.config), self.view.wants_own());
            self.held = None;
            self.bodies.clear();
            return Arc::default();
        };
        let collection = gathered.collection;
        if let Some((id, families)) = &self.held {
            if collection.unchanged && held == Some(*id) {
                return families.clone();
            }
        }
        let (families, _collisions) = pipeline::transform(&self.config, collection.families);
        let families = Arc::new(self.view.cut(&families));
        self.held = Some((collection.merged_id, families.clone()));
        self.bodies.clear();
        families
    }

    /// `families` encoded for `request`, gzipped when asked and large
    /// enough to be worth it.
    fn encode(&mut self, families: &[MetricFamily], request: &Request) -> Rendered {
        let body = encode(families, request.format, request.escaping);
        if !request.gzip || body.len() < GZIP_MIN_BYTES {
            return Rendered {
                body,
                gzipped: false,
            };
        }
        let gzipped = self.gzipper.gzip(&body);
        gzipped_or_plain(body, gzipped)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::format::file_name::GaugeMode;
    use crate::format::writer::ProcessWriter;
    use crate::source::link_policy::LinkPolicy;
    use crate::source::writers::WriterPolicy;

    fn request(gzip: bool) -> Request {
        Request {
            format: Format::Text,
            escaping: Escaping::Underscores,
            names: None,
            gzip,
            scrape_timeout: None,
        }
    }

    #[test]
    fn a_view_under_a_served_path_is_refused() {
        let config = Config::default();
        assert!(view_clash("/metrics", &config).is_none());
        let mut api = Config::default();
        api.views[0].name = "status".into();
        let clash = view_clash("/api/v1", &api).unwrap().to_string();
        assert!(clash.contains("/api/v1/status"), "{clash}");
        api.views[0].name = "healthy".into();
        assert!(view_clash("/-", &api).is_some());
        // Under the API's prefix but no path of it: served.
        assert!(view_clash("/api/v1", &Config::default()).is_none());
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
        let scraper = Scraper::new(
            &[dir.path().to_path_buf()],
            None,
            LinkPolicy::default(),
            None,
            WriterPolicy::exact(),
            usize::MAX,
        );
        let config = Arc::new(Config::default());
        let view = config.views[0].clone();
        let views = Views::default();
        let whole = |scraper: &Scraper| {
            let served = scraper.families(&config, None);
            encode(
                &view.cut(served.families()),
                Format::Text,
                Escaping::Underscores,
            )
        };
        let first = views.render(&scraper, &view, &request(true), &config, None);
        assert!(!first.gzipped(), "a small answer is sent as it is");
        let text = String::from_utf8(first.as_ref().to_vec()).unwrap();
        assert!(
            text.contains("vllm:num_requests_waiting{model_name=\"m\"} 3.0"),
            "{text}"
        );
        assert!(!text.contains("prompt_tokens"), "{text}");
        assert_eq!(first.as_ref(), whole(&scraper));
        // Unchanged: the same body, shared.
        let again = views.render(&scraper, &view, &request(true), &config, None);
        assert!(std::ptr::eq(
            first.as_ref().as_ptr(),
            again.as_ref().as_ptr()
        ));
        waiting.set(&mut writer, 4.0).unwrap();
        let changed = views.render(&scraper, &view, &request(true), &config, None);
        assert!(String::from_utf8_lossy(changed.as_ref()).contains("} 4.0"));
        assert_eq!(changed.as_ref(), whole(&scraper));
        // The view's reader holds only the view's records.
        let state = views.state(&scraper, &view, &config);
        let state = state.lock().unwrap();
        assert_eq!(state.held.as_ref().unwrap().1.len(), 1);
    }
}
