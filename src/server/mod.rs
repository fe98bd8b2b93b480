//! The HTTP sidecar: `multiproc-exporter serve` (also what runs with no
//! subcommand).
//!
//! * [`ServeSettings`]: what it serves and how, validated by the command line
//!   (`crate::cli`, whose flags `docs/configuration.md` lists).
//! * [`app`]: the axum [`Router`] (testable with `tower::ServiceExt::oneshot`):
//!   the metrics path, `/-/healthy`, `/-/ready`, the status page at `/`
//!   (`status_page`) and the JSON API under `/api/v1/` (`api`).
//! * [`run`]: binds every listen address, starts the watcher (`watch`) and
//!   serves until SIGTERM or SIGINT, then shuts down gracefully (in-flight
//!   scrapes finish). Scrapes go through [`crate::pipeline`] (`scrape`, which
//!   coalesces concurrent ones); the HTTP plumbing is `http`, the web
//!   configuration `web_config`, the exporter's own telemetry `telemetry`.
//! * With `--push.remote-write-url` and/or `--push.otlp-url`, the served
//!   metrics are also pushed with Prometheus remote write and/or OTLP on an
//!   interval ([`crate::sink::push`], fed by the server's shared state as a
//!   `sink::Feed`).
//!
//! The server starts serving at once, even when no metrics directory exists
//! yet (vLLM creates its files only after engine start-up): scrapes then
//! return only the self-metrics, and `/-/ready` answers 503 until a directory
//! exists.

mod api;
mod discover;
mod html;
mod http;
mod parts_status;
mod scrape;
mod signals;
mod status_page;
mod status_pods;
mod telemetry;
mod views;
#[cfg(test)]
mod views_tests;

use crate::server::telemetry::operational::ConfigReload;
use http::{limits, listen};
use telemetry::self_metrics;
use web_config::auth;
mod watch;
mod web_config;

use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;

use axum::body::Body;
use axum::extract::{RawQuery, State};
use axum::http::{header, HeaderMap, HeaderValue, Method, StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::Router;

use crate::expose::negotiate::{gzip_accepted, name_params, negotiate, Negotiation};
use crate::source::link_policy::LinkPolicy;
use crate::source::writers::WriterPolicy;
use crate::source::MemoryBudget;
use crate::transform::config::{Config, ConfigError};

pub use listen::DEFAULT_LISTEN_ADDRESS;
pub use telemetry::logging::{init as init_logging, LogFormat, LogLevel};
pub use views::view_clash;
pub use web_config::{HttpServerConfig, TlsServerConfig, WebConfigFile};

/// What triggered a configuration reload.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ReloadTrigger {
    /// The file (or its directory) changed: reload only if the bytes changed.
    FileChanged,
    /// SIGHUP: always reload.
    Signal,
}

/// What was last read from the configuration file.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Seen {
    Bytes(Vec<u8>),
    Unreadable(String),
}

/// State shared by the handlers and the watcher.
#[derive(Debug)]
pub(crate) struct Shared {
    dirs: Vec<PathBuf>,
    telemetry_path: String,
    exporter_metrics: bool,
    openmetrics: bool,
    negotiation: Negotiation,
    directory_warn_interval: Duration,
    config_path: Option<PathBuf>,
    /// `--dir.compact-dead-writers` (a reloaded `per_writer` is refused).
    compacting: bool,
    config: RwLock<Arc<Config>>,
    config_seen: Mutex<Option<Seen>>,
    scraper: scrape::Scraper,
    /// The views' sources and last answers.
    views: crate::pipeline::views::ViewSources,
    pub(crate) self_metrics: self_metrics::SelfMetrics,
}

/// Cheaply clonable handle to the server state (the axum state).
#[derive(Debug, Clone)]
pub struct AppState(pub(crate) Arc<Shared>);

/// Settings of an [`AppState`], already validated.
#[derive(Debug, Clone)]
pub struct Settings {
    /// Metrics directories (need not exist).
    pub dirs: Vec<PathBuf>,
    /// With a label name: `dirs` are parents whose subdirectories are each
    /// merged on their own and labelled with their name (already validated
    /// as a label name).
    pub subdirectories_label: Option<Arc<str>>,
    /// Which symbolic links in the directories are followed.
    pub link_policy: LinkPolicy,
    /// The memory budget of the records read (`--memory.budget`), if any.
    pub memory_budget: Option<Arc<MemoryBudget>>,
    /// What is done about the writer processes (`--writers.*`).
    pub writer_policy: WriterPolicy,
    /// Dead writers' files that make a warning (`--writers.dead-files-warning`; 0: never).
    pub dead_files_warning: usize,
    /// Metrics path (starts with `/`).
    pub telemetry_path: String,
    /// Whether to append the exporter's own metrics.
    pub exporter_metrics: bool,
    /// Whether OpenMetrics may be negotiated.
    pub openmetrics: bool,
    /// How the format is negotiated.
    pub negotiation: Negotiation,
    /// How often a directory that gives nothing to serve (missing, empty,
    /// unreadable, only subdirectories) is warned about.
    pub directory_warn_interval: Duration,
    /// The configuration file, if any (for reloads).
    pub config_path: Option<PathBuf>,
    /// The configuration in force at start.
    pub config: Config,
    /// With `--discover.processes`: the directories are found through
    /// `/proc` (`dirs` is then empty).
    pub discovery: Option<crate::pipeline::discovered::DiscoverOptions>,
}

impl AppState {
    /// A new state; nothing is read until the first scrape.
    pub fn new(settings: Settings) -> Self {
        let self_metrics = self_metrics::SelfMetrics::new(settings.exporter_metrics);
        Self::with_self_metrics(settings, self_metrics)
    }

    /// A new state with self-metrics made beforehand.
    fn with_self_metrics(settings: Settings, mut self_metrics: self_metrics::SelfMetrics) -> Self {
        if settings.subdirectories_label.is_some() {
            self_metrics.register_subdirectory_metrics();
        }
        if settings.discovery.is_some() {
            self_metrics.discovery.register();
        }
        self_metrics.observe_initial_config();
        let scraper = match settings.discovery {
            Some(options) => scrape::Scraper::with_source(
                crate::pipeline::Source::discovered(options),
                settings.memory_budget,
                settings.writer_policy,
                settings.dead_files_warning,
            ),
            None => scrape::Scraper::new(
                &settings.dirs,
                settings.subdirectories_label,
                settings.link_policy,
                settings.memory_budget,
                settings.writer_policy,
                settings.dead_files_warning,
            ),
        };
        let views = crate::pipeline::views::ViewSources::new(scraper.collection().view_base());
        Self(Arc::new(Shared {
            scraper,
            views,
            dirs: settings.dirs,
            telemetry_path: settings.telemetry_path,
            exporter_metrics: settings.exporter_metrics,
            openmetrics: settings.openmetrics,
            negotiation: settings.negotiation,
            directory_warn_interval: settings.directory_warn_interval,
            config_seen: Mutex::new(None),
            config_path: settings.config_path,
            compacting: settings.writer_policy.compact_dead,
            config: RwLock::new(Arc::new(settings.config)),
            self_metrics,
        }))
    }

    /// The configuration in force.
    pub fn config(&self) -> Arc<Config> {
        self.0.config()
    }
}

impl Shared {
    fn config(&self) -> Arc<Config> {
        self.config
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// Runs (or joins) a collection, as a scrape does; its families as
    /// `/metrics` serves them.
    fn collect_now(&self) -> Arc<scrape::Served> {
        let config = self.config();
        let self_metrics = self.exporter_metrics.then_some(&self.self_metrics);
        self.scraper.families(&config, self_metrics)
    }

    /// The exporter's own metrics, if they are served.
    fn own_metrics(&self) -> Option<&self_metrics::SelfMetrics> {
        self.exporter_metrics.then_some(&self.self_metrics)
    }

    /// Has the next collections (of `/metrics` and of the views) check these
    /// files with `stat` before trusting their maps.
    pub(crate) fn recheck(&self, paths: impl IntoIterator<Item = PathBuf>) {
        let paths: Vec<PathBuf> = paths.into_iter().collect();
        self.views.recheck(&paths);
        self.scraper.collection().recheck(paths);
    }

    /// Has the next collections check every file with `stat`.
    pub(crate) fn recheck_all(&self) {
        self.views.recheck_all();
        self.scraper.collection().recheck_all();
    }

    /// Re-reads the configuration file; a bad file keeps the configuration in
    /// force. Blocking (reads the file).
    pub(crate) fn reload_config(&self, trigger: ReloadTrigger) {
        let Some(path) = &self.config_path else {
            if trigger == ReloadTrigger::Signal {
                tracing::info!("No configuration file was given (--config); nothing to reload.");
            }
            return;
        };
        let read = std::fs::read(path);
        let seen = match &read {
            Ok(bytes) => Seen::Bytes(bytes.clone()),
            Err(e) => Seen::Unreadable(e.to_string()),
        };
        {
            let mut last = self.config_seen.lock().unwrap_or_else(|e| e.into_inner());
            if trigger == ReloadTrigger::FileChanged && last.as_ref() == Some(&seen) {
                return;
            }
            *last = Some(seen);
        }
        let loaded = match read {
            Ok(bytes) => Config::from_bytes(&bytes),
            Err(e) => Err(ConfigError::Read {
                path: path.clone(),
                error: e.to_string(),
            }),
        };
        let loaded = loaded.and_then(|config| match config.compaction_conflict() {
            Some(conflict) if self.compacting => Err(ConfigError::Syntax(conflict.to_owned())),
            _ => Ok(config),
        });
        let loaded = loaded.and_then(|config| match view_clash(&self.telemetry_path, &config) {
            Some(clash) => Err(clash),
            None => Ok(config),
        });
        match loaded {
            Ok(config) => {
                let changed = *self.config() != config;
                let config = Arc::new(config);
                *self.config.write().unwrap_or_else(|e| e.into_inner()) = config.clone();
                // The views' sources made for the old one go, and give back
                // their budget.
                self.views.reconfigured(&config);
                ConfigReload {
                    path,
                    outcome: Ok(changed),
                }
                .emit(&self.self_metrics);
            }
            Err(e) => ConfigReload {
                path,
                outcome: Err(&e),
            }
            .emit(&self.self_metrics),
        }
    }

    /// Records the bytes the initial configuration was loaded from, so that
    /// an unchanged file does not count as a reload.
    fn remember_config_bytes(&self, bytes: Vec<u8>) {
        *self.config_seen.lock().unwrap_or_else(|e| e.into_inner()) = Some(Seen::Bytes(bytes));
    }
}

/// The HTTP routes.
pub fn app(state: AppState) -> Router {
    Router::new()
        .route("/-/healthy", get(healthy))
        .route("/-/ready", get(ready))
        .fallback(dispatch)
        .with_state(state)
}

async fn healthy() -> &'static str {
    "Healthy.\n"
}

async fn ready(State(state): State<AppState>) -> Response {
    let shared = state.0.clone();
    let ready =
        tokio::task::spawn_blocking(move || shared.scraper.collection().any_directory_exists())
            .await
            .unwrap_or(false);
    if ready {
        (StatusCode::OK, "Ready.\n").into_response()
    } else {
        (
            StatusCode::SERVICE_UNAVAILABLE,
            "Not ready: no metrics directory exists yet.\n",
        )
            .into_response()
    }
}

/// The metrics path, the status page and the JSON API; anything else is 404.
async fn dispatch(
    State(state): State<AppState>,
    method: Method,
    uri: Uri,
    headers: HeaderMap,
    RawQuery(query): RawQuery,
) -> Response {
    let path = uri.path();
    let is_metrics = path == state.0.telemetry_path;
    let is_landing = path == "/" && !is_metrics;
    let endpoint = (!is_metrics).then(|| api::Endpoint::of(path)).flatten();
    let mut view = None;
    if !is_metrics && !is_landing && endpoint.is_none() {
        let config = state.0.config();
        use crate::transform::views::{view_of, ViewPath};
        match view_of(&config.views, &state.0.telemetry_path, path) {
            ViewPath::View(found) => view = Some(found.clone()),
            ViewPath::Elsewhere => {
                return (StatusCode::NOT_FOUND, "404 page not found\n").into_response()
            }
            ViewPath::Unknown => return views::unknown_view(&state.0.telemetry_path, &config),
        }
    }
    if method != Method::GET && method != Method::HEAD {
        let mut response =
            (StatusCode::METHOD_NOT_ALLOWED, "Method not allowed.\n").into_response();
        response
            .headers_mut()
            .insert(header::ALLOW, HeaderValue::from_static("GET, HEAD"));
        return response;
    }
    if is_landing {
        return status(state).await;
    }
    if let Some(endpoint) = endpoint {
        return api_json(state, endpoint, query).await;
    }
    metrics(state, &headers, query.as_deref(), view).await
}

/// Prometheus's `X-Prometheus-Scrape-Timeout-Seconds`, when it is a
/// positive number of seconds.
fn scrape_timeout(headers: &HeaderMap) -> Option<Duration> {
    let seconds: f64 = headers
        .get("x-prometheus-scrape-timeout-seconds")?
        .to_str()
        .ok()?
        .trim()
        .parse()
        .ok()?;
    (seconds.is_finite() && seconds > 0.0 && seconds < 1e9)
        .then(|| Duration::from_secs_f64(seconds))
}

/// All values of a header joined with `,` (as Python's ASGI app joins them).
fn joined(headers: &HeaderMap, name: header::HeaderName) -> Option<String> {
    let values: Vec<&str> = headers
        .get_all(name)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .collect();
    (!values.is_empty()).then(|| values.join(","))
}

/// The metrics path, or a view's (whose query is ignored).
async fn metrics(
    state: AppState,
    headers: &HeaderMap,
    query: Option<&str>,
    view: Option<crate::transform::views::View>,
) -> Response {
    let accept = joined(headers, header::ACCEPT);
    let negotiated = negotiate(accept.as_deref(), state.0.negotiation, state.0.openmetrics);
    let gzip = gzip_accepted(joined(headers, header::ACCEPT_ENCODING).as_deref());
    let request = scrape::Request {
        format: negotiated.format,
        escaping: negotiated.escaping,
        names: view.is_none().then(|| name_params(query)).flatten(),
        gzip,
        scrape_timeout: scrape_timeout(headers),
    };
    let shared = state.0.clone();
    let config = state.0.config();
    // A `?name[]=` request reads only the families of its samples, as a
    // view of them; not with upstreams (everything is collected anyway),
    // nor when it asks for the exporter's own metrics (they describe the
    // scrape that serves them).
    let view = match (view, &request.names) {
        (None, Some(names)) if config.upstreams.is_empty() => {
            Some(crate::transform::views::View::of_sample_names(names))
                .filter(|view| !view.wants_own())
        }
        (view, _) => view,
    };
    // A view is served by its entry among the views' sources, or cut from
    // the shared collection where the pipeline gives it none (or, later,
    // no read: `render`); a `?name[]=` set is then restricted from it as
    // `/metrics?name[]=` always was.
    let entry = view.as_ref().and_then(|view| {
        state
            .0
            .views
            .entry(view, &config, shared.scraper.collection())
    });
    let shared_view = match view {
        Some(view) if view.matching == crate::transform::views::Matching::Families => Some(view),
        _ => None,
    };
    // A quick poll runs on the worker, unless a collection is in flight
    // (none is ever waited for here). Upstreams are waited for with a
    // blocking receive: never on a worker.
    let inline = match &entry {
        Some(entry) if entry.is_quick() => {
            std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                views::render_now(&shared.views, entry, &request, shared.own_metrics())
            }))
            .ok()
            .flatten()
        }
        Some(_) => None,
        None if shared_view.is_none()
            && config.upstreams.is_empty()
            && shared.scraper.is_quick() =>
        {
            // A few milliseconds at most last time: cheaper here than a
            // hand-over to the blocking pool (two thread wake-ups).
            std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                shared
                    .scraper
                    .render_now(&request, &config, shared.own_metrics())
            }))
            .ok()
            .flatten()
        }
        None => None,
    };
    let body = match inline {
        Some(body) => Ok(body),
        None => {
            let scrape = move || {
                let own = shared.own_metrics();
                let collection = shared.scraper.collection();
                let body = entry.as_ref().and_then(|entry| {
                    views::render(&shared.views, entry, collection, &request, own)
                });
                match (body, &shared_view) {
                    (Some(body), _) => body,
                    (None, Some(view)) => {
                        views::render_from_shared(&shared.scraper, view, &request, &config, own)
                    }
                    (None, None) => shared.scraper.render(&request, &config, own),
                }
            };
            tokio::task::spawn_blocking(scrape)
                .await
                .map_err(|e| e.to_string())
        }
    };
    let body = body.unwrap_or_else(|e| {
        tracing::error!(error = %e, "The scrape task failed; serving an empty body.");
        scrape::SharedBody::alone(scrape::Rendered {
            body: Vec::new(),
            gzipped: false,
        })
    });
    let content_type = HeaderValue::from_str(&negotiated.content_type).unwrap_or_else(|_| {
        HeaderValue::from_static(crate::expose::negotiate::CONTENT_TYPE_TEXT_0_0_4)
    });
    let mut response = Response::new(Body::empty());
    response
        .headers_mut()
        .insert(header::CONTENT_TYPE, content_type);
    if body.gzipped() {
        response
            .headers_mut()
            .insert(header::CONTENT_ENCODING, HeaderValue::from_static("gzip"));
    }
    *response.body_mut() = Body::from(axum::body::Bytes::from_owner(body));
    response
}

/// The status page, after a collection (see [`status_page`]).
async fn status(state: AppState) -> Response {
    let shared = state.0.clone();
    let html = tokio::task::spawn_blocking(move || {
        shared.collect_now();
        let page = status_page::page(
            &shared.telemetry_path,
            &shared.dirs,
            shared.scraper.insight().last().as_ref(),
        );
        status_page::with_views(page, &shared.telemetry_path, &shared.config().views)
    })
    .await
    .unwrap_or_else(|e| {
        tracing::error!(error = %e, "The status page task failed.");
        status_page::page(&state.0.telemetry_path, &state.0.dirs, None)
    });
    ([(header::CONTENT_TYPE, "text/html; charset=UTF-8")], html).into_response()
}

/// A JSON endpoint of [`api`], after a collection.
async fn api_json(state: AppState, endpoint: api::Endpoint, query: Option<String>) -> Response {
    let shared = state.0.clone();
    let body = tokio::task::spawn_blocking(move || {
        let served = shared.collect_now();
        api::answer(
            endpoint,
            served.families(),
            shared.scraper.insight(),
            &shared.dirs,
            query.as_deref(),
        )
    })
    .await
    .unwrap_or_else(|e| {
        tracing::error!(error = %e, "The API task failed.");
        b"{}".to_vec()
    });
    (
        [
            (header::CONTENT_TYPE, "application/json"),
            (header::CACHE_CONTROL, "no-store"),
        ],
        body,
    )
        .into_response()
}

/// Everything `serve` needs, validated (the command line makes it:
/// [`crate::cli`]).
#[derive(Debug, Clone)]
pub struct ServeSettings {
    /// What the handlers serve.
    pub app: Settings,
    /// The configuration file's bytes as read at start (to tell a real change
    /// from a touch later).
    pub config_bytes: Option<Vec<u8>>,
    /// Addresses to listen on.
    pub listen_addresses: Vec<String>,
    /// The web configuration file (exporter-toolkit format), if any.
    pub web_config_file: Option<PathBuf>,
    /// Scrapes served at once (0: no limit).
    pub max_requests: usize,
    /// Open connections (0: no limit).
    pub max_connections: usize,
    /// Time for the TLS handshake and the request headers.
    pub read_header_timeout: Option<Duration>,
    /// Time a kept-alive connection may wait for its next request.
    pub idle_timeout: Option<Duration>,
    /// Time from a request's headers to the last byte of its response.
    pub write_timeout: Option<Duration>,
    /// Pushing with remote write and/or OTLP (`--push.*`), if on.
    pub push: Option<crate::sink::push::PushSettings>,
}

/// Runs the server until SIGTERM or SIGINT; the process exit code. Logging
/// must be set up already ([`init_logging`]).
pub fn run(settings: ServeSettings) -> ExitCode {
    // One heap per core: scrapes on several threads at once would otherwise
    // each keep a heap of their own resident (measured: 34 MiB instead of
    // 21 MiB at 1,024 writers after concurrent scrapes).
    crate::source::limit_heap_arenas(std::thread::available_parallelism().map_or(2, |n| n.get()));
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .thread_name("multiproc-exporter")
        // Scrapes are coalesced into one collection and only their encoding
        // runs in parallel, so a few blocking threads keep the cores busy;
        // tokio's default (512) lets a burst of scrapes start hundreds of
        // threads, each growing its own malloc arena (the load test saw RSS
        // creep from 55 to 65 MiB that way).
        .max_blocking_threads(8)
        .build()
    {
        Ok(r) => r,
        Err(e) => {
            tracing::error!(error = %e, "Cannot start the async runtime.");
            return ExitCode::from(1);
        }
    };
    let code = runtime.block_on(serve(settings));
    // A collection still running on the blocking pool (a slow upstream)
    // does not hold the exit up: the push's flush deadline has passed.
    runtime.shutdown_timeout(Duration::from_millis(200));
    code
}

/// Binds and serves until a shutdown signal.
pub async fn serve(settings: ServeSettings) -> ExitCode {
    let ServeSettings {
        app: settings,
        config_bytes,
        listen_addresses,
        web_config_file: web_config_path,
        max_requests,
        max_connections,
        read_header_timeout,
        idle_timeout,
        write_timeout,
        push: push_settings,
    } = settings;
    let self_metrics = self_metrics::SelfMetrics::new(settings.exporter_metrics);
    let web = match web_config::WebSettings::load(web_config_path.clone(), self_metrics.web.clone())
    {
        Ok(web) => web,
        Err(e) => {
            tracing::error!(
                "Invalid web configuration file {}: {e}",
                web_config_path.unwrap_or_default().display()
            );
            return ExitCode::from(2);
        }
    };
    let listeners = match listen::bind_all(&listen_addresses).await {
        Ok(l) => l,
        Err(e) => {
            tracing::error!("{e}");
            return ExitCode::from(1);
        }
    };
    let dirs = settings.dirs.clone();
    let subdirectories_label = settings.subdirectories_label.clone();
    let follow_links_outside = settings.link_policy == LinkPolicy::Anywhere;
    // 0 for none.
    let memory_budget_bytes = settings.memory_budget.as_ref().map_or(0, |b| b.limit());
    let writers_liveness = match settings.writer_policy.liveness {
        crate::source::writers::LivenessMode::Auto => "auto",
        crate::source::writers::LivenessMode::Proc => "proc",
        crate::source::writers::LivenessMode::Off => "off",
    };
    let config_path = settings.config_path.clone();
    let telemetry_path = settings.telemetry_path.clone();
    let discovery = settings.discovery.clone();
    let state = AppState::with_self_metrics(settings, self_metrics);
    if let Some(bytes) = config_bytes {
        state.0.remember_config_bytes(bytes);
    }
    // Values as values: paths joined with ',' and an empty string for none.
    let shown = |path: &Option<PathBuf>| {
        path.as_deref()
            .map(|p| p.display().to_string())
            .unwrap_or_default()
    };
    let nofile = crate::source::descriptors::limit_at_start();
    let limit_text = |v: Option<u64>| v.map_or_else(|| "unlimited".to_owned(), |v| v.to_string());
    tracing::info!(
        version = crate::build_info::VERSION,
        revision = crate::build_info::REVISION,
        dirs = %dirs.iter().map(|d| d.display().to_string()).collect::<Vec<_>>().join(","),
        subdirectories_label = %subdirectories_label.as_deref().unwrap_or_default(),
        follow_links_outside,
        memory_budget_bytes,
        writers_liveness,
        config = %shown(&config_path),
        telemetry_path = %telemetry_path,
        web_config = %shown(&web_config_path),
        tls = web.tls_enabled(),
        basic_auth = !web.current().users.is_empty(),
        discover_processes = discovery.is_some(),
        nofile_soft = %limit_text(nofile.soft),
        nofile_hard = %limit_text(nofile.hard),
        nofile_raised_from = %if nofile.raised() { limit_text(nofile.before) } else { String::new() },
        "Starting multiproc-exporter."
    );
    if let Some(options) = &discovery {
        discover::log_start(options);
        discover::log_privileges(crate::source::discover::Privileges::current());
    }

    // Every signal the exporter handles is handled from before it says it
    // listens: a SIGHUP or SIGTERM sent on "Listening." is never the
    // default action (the end of the process).
    let hangup = watch::hangup_signal();
    let stop = signals::StopSignals::new();
    let (shutdown_tx, shutdown_rx) = tokio::sync::watch::channel(false);
    let pusher = match push_settings {
        None => None,
        Some(push_settings) => {
            match crate::sink::push::start(state.0.clone(), push_settings, shutdown_rx.clone()) {
                Ok(pusher) => Some(pusher),
                Err(e) => {
                    tracing::error!("Cannot push: {e}.");
                    return ExitCode::from(2);
                }
            }
        }
    };
    let watcher = tokio::spawn(watch::run(state.0.clone(), shutdown_rx.clone(), hangup));
    let discoverer = discovery.map(|d| {
        tokio::spawn(discover::run(
            state.0.clone(),
            d.interval,
            shutdown_rx.clone(),
        ))
    });
    let web_watcher = tokio::spawn(web.clone().watch(shutdown_rx.clone()));
    let metrics = web.metrics().clone();
    let scrape_limit =
        limits::ScrapeLimit::new(telemetry_path.clone(), max_requests, metrics.clone());
    let web_layer = Arc::new(auth::WebLayer {
        web: web.clone(),
        auth: auth::BasicAuth::new(metrics.clone()),
    });
    let router = app(state)
        .layer(axum::middleware::from_fn_with_state(
            scrape_limit,
            limits::limit_scrapes,
        ))
        .layer(axum::middleware::from_fn_with_state(
            web_layer,
            auth::apply_web_config,
        ));
    let context = Arc::new(listen::ServeContext {
        router,
        connections: limits::Connections::new(
            max_connections,
            limits::Timeouts {
                read_header: read_header_timeout,
                idle: idle_timeout,
                write: write_timeout,
            },
            metrics,
        ),
        web: web.clone(),
    });
    let mut servers = Vec::new();
    for listener in listeners {
        if let Ok(address) = listener.local_addr() {
            tracing::info!(
                address = %address,
                tls = web.tls_enabled(),
                "Listening."
            );
        }
        servers.push(tokio::spawn(listen::serve_listener(
            listener,
            context.clone(),
            shutdown_rx.clone(),
        )));
    }
    stop.received().await;
    tracing::info!("Shutting down: finishing in-flight requests.");
    let _ = shutdown_tx.send(true);
    let mut code = ExitCode::SUCCESS;
    for server in servers {
        if let Err(e) = server.await {
            tracing::error!(error = %e, "Server task failed.");
            code = ExitCode::from(1);
        }
    }
    if let Some(pusher) = pusher {
        tracing::info!("Pushing the last collection.");
        let _ = pusher.await;
    }
    let _ = watcher.await;
    if let Some(discoverer) = discoverer {
        let _ = discoverer.await;
    }
    let _ = web_watcher.await;
    tracing::info!("Stopped.");
    code
}

/// A collection as the sinks take it.
impl crate::sink::Collection for scrape::ServedFamilies {
    fn complete(&self) -> bool {
        self.0.complete
    }
}

/// The server feeds the sinks (push) with its collections.
impl crate::sink::Feed for Shared {
    fn collect_now(&self) -> impl crate::sink::Collection {
        scrape::ServedFamilies(Shared::collect_now(self))
    }

    fn push_metrics(&self) -> &crate::sink::metrics::PushMetrics {
        &self.self_metrics.push
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::http::Request;
    use tower::ServiceExt;

    fn state(dir: PathBuf, exporter_metrics: bool) -> AppState {
        AppState::new(Settings {
            dirs: vec![dir],
            subdirectories_label: None,
            link_policy: LinkPolicy::default(),
            memory_budget: None,
            writer_policy: WriterPolicy::default(),
            dead_files_warning: 1000,
            telemetry_path: "/metrics".into(),
            exporter_metrics,
            openmetrics: true,
            negotiation: Negotiation::PrometheusClient,
            directory_warn_interval: Duration::from_secs(60),
            config_path: None,
            config: Config::default(),
            discovery: None,
        })
    }

    async fn get_response(app: Router, uri: &str) -> (StatusCode, HeaderMap, Vec<u8>) {
        let response = app
            .oneshot(Request::get(uri).body(Body::empty()).unwrap())
            .await
            .unwrap();
        let status = response.status();
        let headers = response.headers().clone();
        let body = axum::body::to_bytes(response.into_body(), usize::MAX)
            .await
            .unwrap();
        (status, headers, body.to_vec())
    }

    #[tokio::test]
    async fn routes() {
        let dir = tempfile::tempdir().unwrap();
        let missing = dir.path().join("missing");
        let app = app(state(missing.clone(), false));
        let (status, _, body) = get_response(app.clone(), "/-/healthy").await;
        assert_eq!((status, &body[..]), (StatusCode::OK, &b"Healthy.\n"[..]));
        let (status, _, _) = get_response(app.clone(), "/-/ready").await;
        assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE);
        std::fs::create_dir(&missing).unwrap();
        let (status, _, _) = get_response(app.clone(), "/-/ready").await;
        assert_eq!(status, StatusCode::OK);
        let (status, headers, body) = get_response(app.clone(), "/").await;
        assert_eq!(status, StatusCode::OK);
        assert_eq!(headers[header::CONTENT_TYPE], "text/html; charset=UTF-8");
        assert!(String::from_utf8(body)
            .unwrap()
            .contains("<a href=\"/metrics\">"));
        let (status, headers, body) = get_response(app.clone(), "/metrics").await;
        assert_eq!(status, StatusCode::OK);
        assert_eq!(
            headers[header::CONTENT_TYPE],
            "text/plain; version=0.0.4; charset=utf-8"
        );
        assert!(body.is_empty());
        let (status, _, _) = get_response(app.clone(), "/metrics/").await;
        assert_eq!(status, StatusCode::NOT_FOUND);
        let response = app
            .oneshot(Request::post("/metrics").body(Body::empty()).unwrap())
            .await
            .unwrap();
        assert_eq!(response.status(), StatusCode::METHOD_NOT_ALLOWED);
    }

    #[tokio::test]
    async fn self_metrics_follow_the_format() {
        let dir = tempfile::tempdir().unwrap();
        let app = app(state(dir.path().to_path_buf(), true));
        let (_, _, body) = get_response(app.clone(), "/metrics").await;
        let text = String::from_utf8(body).unwrap();
        assert!(
            text.starts_with("# HELP multiproc_exporter_build_info "),
            "{text}"
        );
        assert!(!text.contains("# EOF"));
        // The exporter's own process values, named apart from the writers'.
        assert!(text.contains("# TYPE multiproc_exporter_process_cpu_seconds_total counter\n"));
        assert!(!text.contains("# TYPE process_"));
        let response = app
            .clone()
            .oneshot(
                Request::get("/metrics?name[]=multiproc_exporter_scrape_files_read")
                    .header(header::ACCEPT, "application/openmetrics-text")
                    .body(Body::empty())
                    .unwrap(),
            )
            .await
            .unwrap();
        let body = axum::body::to_bytes(response.into_body(), usize::MAX)
            .await
            .unwrap();
        assert_eq!(
            std::str::from_utf8(&body).unwrap(),
            "# HELP multiproc_exporter_scrape_files_read Metric files merged by the last scrape.\n\
             # TYPE multiproc_exporter_scrape_files_read gauge\n\
             multiproc_exporter_scrape_files_read 0.0\n# EOF\n"
        );
    }

    #[test]
    fn gzip_is_deterministic_and_round_trips() {
        use std::io::Read as _;
        let data = b"# HELP a b\n".repeat(100);
        let mut gzipper = crate::expose::memo::Gzipper::default();
        let a = gzipper.gzip(&data).unwrap();
        assert_eq!(a, gzipper.gzip(&data).unwrap());
        let mut out = Vec::new();
        flate2::read::GzDecoder::new(&a[..])
            .read_to_end(&mut out)
            .unwrap();
        assert_eq!(out, data);
    }

    #[tokio::test]
    async fn views_are_served_listed_and_an_unknown_one_names_them() {
        let dir = tempfile::tempdir().unwrap();
        let mut writer = crate::format::writer::ProcessWriter::new(dir.path(), 1);
        let mode = crate::format::file_name::GaugeMode::MostRecent;
        let gauge = writer
            .gauge("vllm:num_requests_waiting", "W.", &[], mode)
            .unwrap();
        gauge.set(&mut writer, 2.0).unwrap();
        let counter = writer.counter("vllm:prompt_tokens", "T.", &[]).unwrap();
        counter.inc(&mut writer, 1.0).unwrap();
        let app = app(state(dir.path().to_path_buf(), true));
        let (status, headers, body) = get_response(app.clone(), "/metrics/endpoint-picker").await;
        assert_eq!(status, StatusCode::OK);
        assert!(headers.get(header::CONTENT_ENCODING).is_none());
        assert_eq!(
            std::str::from_utf8(&body).unwrap(),
            "# HELP vllm:num_requests_waiting W.\n# TYPE vllm:num_requests_waiting gauge\n\
             vllm:num_requests_waiting 2.0\n",
            "no own metrics, no other family"
        );
        let (status, _, body) = get_response(app.clone(), "/metrics/nope").await;
        assert_eq!(status, StatusCode::NOT_FOUND);
        assert!(String::from_utf8(body)
            .unwrap()
            .contains("/metrics/endpoint-picker\n"));
        let (_, _, page) = get_response(app, "/").await;
        assert!(String::from_utf8(page)
            .unwrap()
            .contains(r#"href="/metrics/endpoint-picker""#));
    }
}
