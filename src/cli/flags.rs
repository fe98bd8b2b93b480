//! The command-line flags, each defined once in the group it belongs to and
//! shared by the subcommands that take it (node_exporter-style names: a
//! dotted prefix per area, an environment variable per flag). Validation into
//! typed settings is [`super::settings`]'s.

use std::path::PathBuf;
use std::time::Duration;

use clap::builder::TypedValueParser as _;
use clap::{Args, ValueEnum};

use crate::server::{LogFormat, LogLevel};

/// The configuration file (`serve`, `dump`, `demo`).
#[derive(Debug, Clone, Default, Args)]
pub struct ConfigFlags {
    /// YAML configuration file (filtering, naming, constant labels; see
    /// docs/configuration.md). Reloaded when it changes and on SIGHUP; a bad
    /// new version is logged and the previous one stays in force.
    #[arg(
        long = "config",
        env = "MULTIPROC_EXPORTER_CONFIG",
        value_name = "FILE"
    )]
    pub config: Option<PathBuf>,
}

/// How the metrics directories are read (`serve`, `dump`).
#[derive(Debug, Clone, Default, Args)]
pub struct DirectoryFlags {
    /// Serve several applications' directories side by side (a DaemonSet
    /// serving a node's pods): every `--dir` is then a parent whose immediate
    /// subdirectories (one per pod) are each merged on their own, and every
    /// sample gets this label with the subdirectory's name as its value.
    /// Families of the same name from different subdirectories are served as
    /// one family. Subdirectories appearing and disappearing are seen at the
    /// next scrape.
    #[arg(
        long = "dir.subdirectories-label",
        env = "MULTIPROC_EXPORTER_DIR_SUBDIRECTORIES_LABEL",
        value_name = "NAME",
        alias = "subdirectories-label"
    )]
    pub subdirectories_label: Option<String>,
    /// Follow symbolic links in a metrics directory wherever they point, as
    /// prometheus_client does. By default a link is followed only when its
    /// target lies inside the metrics directory; any other link is skipped
    /// (reason `link_outside_directory`).
    #[arg(
        long = "dir.follow-links-outside",
        env = "MULTIPROC_EXPORTER_DIR_FOLLOW_LINKS_OUTSIDE",
        action = clap::ArgAction::SetTrue,
        value_parser = clap::builder::BoolishValueParser::new()
    )]
    pub follow_links_outside: bool,
    /// Memory the records read from the metrics directories may hold
    /// (decoded keys, values and merge plans, estimated). A file whose
    /// reading would take it past the budget is skipped (reason
    /// `over_memory_budget`, logged and counted) instead of the exporter
    /// running out of memory; the other files are served. A size such as
    /// `256MiB`, `1GiB` or `500MB`; `auto` is 60% of the process's memory
    /// limit (its cgroup's, or `ulimit -v`), no budget without a limit; `0`
    /// turns the budget off.
    #[arg(
        long = "memory.budget",
        env = "MULTIPROC_EXPORTER_MEMORY_BUDGET",
        value_name = "SIZE",
        default_value = "auto"
    )]
    pub memory_budget: String,
    /// How to tell whether the process that wrote a file (the pid in its
    /// name) is alive: `auto` looks in /proc and trusts it once a writer is
    /// seen holding its file open (the same host, a sidecar sharing the
    /// pod's pid namespace, a DaemonSet with hostPID); `proc` trusts /proc
    /// without that evidence (a sidecar sharing the pid namespace but running
    /// as another user); `off` never looks (prometheus_client's semantics).
    /// A dead writer's live gauges are then left out, short files of live
    /// writers are pending rather than bad, and live writers' process_*
    /// metrics are served.
    #[arg(
        long = "writers.liveness",
        env = "MULTIPROC_EXPORTER_WRITERS_LIVENESS",
        value_enum,
        default_value = "auto"
    )]
    pub writers_liveness: LivenessArg,
    /// Serve the `live*` gauges of writers that have exited, as
    /// prometheus_client does when nobody calls `mark_process_dead`.
    #[arg(
        long = "writers.keep-dead-live-gauges",
        env = "MULTIPROC_EXPORTER_WRITERS_KEEP_DEAD_LIVE_GAUGES",
        action = clap::ArgAction::SetTrue,
        value_parser = clap::builder::BoolishValueParser::new()
    )]
    pub keep_dead_live_gauges: bool,
    /// Leave out the `sum`, `min` and `max` gauges of writers that have
    /// exited (prometheus_client keeps them forever, so a crashed process's
    /// value stays in the total).
    #[arg(
        long = "writers.drop-dead-gauges",
        env = "MULTIPROC_EXPORTER_WRITERS_DROP_DEAD_GAUGES",
        action = clap::ArgAction::SetTrue,
        value_parser = clap::builder::BoolishValueParser::new()
    )]
    pub drop_dead_gauges: bool,
    /// Do not serve the standard `process_*` metrics of the live writers.
    #[arg(
        long = "writers.disable-process-metrics",
        env = "MULTIPROC_EXPORTER_WRITERS_DISABLE_PROCESS_METRICS",
        action = clap::ArgAction::SetTrue,
        value_parser = clap::builder::BoolishValueParser::new()
    )]
    pub disable_process_metrics: bool,
    /// How long a file shorter than its 8-byte header is taken for one a
    /// writer is creating (pending: not read, not reported) when the
    /// writer's liveness is unknown; older, it is reported as `short_file`.
    /// A live writer's short file is always pending, a dead one's always
    /// reported. 0 reports every short file at once.
    #[arg(
        long = "writers.pending-grace",
        env = "MULTIPROC_EXPORTER_WRITERS_PENDING_GRACE",
        value_name = "DURATION",
        value_parser = parse_duration,
        default_value = "10s"
    )]
    pub pending_grace: Duration,
    /// Add dead writers' values in file order at every scrape, exactly as
    /// prometheus_client does. By default they are folded once into a cached
    /// base (a dead writer's files cannot change), so that they cost a scrape
    /// nothing; non-integer sums may then differ in their last bits.
    #[arg(
        long = "writers.exact-sums",
        env = "MULTIPROC_EXPORTER_WRITERS_EXACT_SUMS",
        action = clap::ArgAction::SetTrue,
        value_parser = clap::builder::BoolishValueParser::new()
    )]
    pub exact_sums: bool,
    /// Fold the files of writers that exited (counters, histograms,
    /// summaries, and gauges in sum, min, max and mostrecent modes) into one
    /// archive file per kind (`counter_archive.db`, ...) in
    /// prometheus_client's format, and remove them, so that the directory
    /// stops growing. The only mode that writes to the metrics directory: it
    /// needs write access, writer liveness (not `--writers.liveness=off`) and
    /// one exporter compacting per directory. At most once a minute, `serve`
    /// only; crash-safe (docs/semantics.md).
    #[arg(
        long = "dir.compact-dead-writers",
        env = "MULTIPROC_EXPORTER_DIR_COMPACT_DEAD_WRITERS",
        action = clap::ArgAction::SetTrue,
        value_parser = clap::builder::BoolishValueParser::new()
    )]
    pub compact_dead_writers: bool,
    /// Do not read temporary subdirectories. By default a subdirectory named
    /// as Python's `tempfile.TemporaryDirectory` names them (`tmp` and eight
    /// of `a-z0-9_`) holding metric files is a run of a server that writes
    /// there (SGLang, TensorRT-LLM, vLLM without PROMETHEUS_MULTIPROC_DIR
    /// under a shared TMPDIR): the current run's files are served with the
    /// directory's, as one set; runs left by earlier starts are left out and
    /// reported (docs/sglang.md).
    #[arg(
        long = "dir.ignore-temporary-subdirectories",
        env = "MULTIPROC_EXPORTER_DIR_IGNORE_TEMPORARY_SUBDIRECTORIES",
        action = clap::ArgAction::SetTrue,
        value_parser = clap::builder::BoolishValueParser::new()
    )]
    pub ignore_temporary_subdirectories: bool,
    /// Remove the temporary subdirectories left by earlier runs (stale: not
    /// served) once their writers are known to have exited, or, where the
    /// writers' processes cannot be seen, once nothing in them has changed
    /// for 10 minutes. Needs write access to the directory and one exporter
    /// removing per directory; crash-safe (renamed to a hidden name first).
    #[arg(
        long = "dir.remove-stale-subdirectories",
        env = "MULTIPROC_EXPORTER_DIR_REMOVE_STALE_SUBDIRECTORIES",
        action = clap::ArgAction::SetTrue,
        value_parser = clap::builder::BoolishValueParser::new()
    )]
    pub remove_stale_subdirectories: bool,
}

/// `--demo.engine`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, ValueEnum)]
pub enum DemoEngine {
    /// vLLM 0.33.0 with LMCache 0.5.6.
    #[default]
    Vllm,
    /// SGLang 0.5.23.
    Sglang,
}

/// `--writers.liveness`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, ValueEnum)]
pub enum LivenessArg {
    /// /proc, trusted once a writer is seen holding its file.
    #[default]
    Auto,
    /// /proc, trusted without evidence.
    Proc,
    /// Never (prometheus_client's semantics).
    Off,
}

/// The HTTP server (`serve`, `demo`).
#[derive(Debug, Clone, Args)]
pub struct WebFlags {
    /// Address to listen on, as `host:port`, `[ipv6]:port` or `:port` (all
    /// interfaces). Repeat the flag (or separate addresses with commas in the
    /// environment variable) to listen on several. Default: `:9089` for
    /// `serve`, `127.0.0.1:9089` for `demo` (not reachable from other hosts).
    #[arg(
        long = "web.listen-address",
        env = "MULTIPROC_EXPORTER_WEB_LISTEN_ADDRESS",
        value_name = "ADDRESS",
        value_delimiter = ','
    )]
    pub listen_addresses: Vec<String>,

    /// Path under which the metrics are served.
    #[arg(
        long = "web.telemetry-path",
        env = "MULTIPROC_EXPORTER_WEB_TELEMETRY_PATH",
        value_name = "PATH",
        default_value = "/metrics"
    )]
    pub telemetry_path: String,

    /// Leave out the exporter's own metrics (`multiproc_exporter_*` and
    /// `process_*`).
    #[arg(
        long = "web.disable-exporter-metrics",
        env = "MULTIPROC_EXPORTER_WEB_DISABLE_EXPORTER_METRICS",
        action = clap::ArgAction::SetTrue,
        value_parser = clap::builder::BoolishValueParser::new()
    )]
    pub disable_exporter_metrics: bool,

    /// Never answer in the OpenMetrics format, even when the scraper prefers
    /// it: negotiate among the Prometheus text formats only (like
    /// client_golang's `EnableOpenMetrics: false`). An escape hatch for
    /// scrapers whose OpenMetrics parser disagrees with the output.
    #[arg(
        long = "web.disable-openmetrics",
        env = "MULTIPROC_EXPORTER_WEB_DISABLE_OPENMETRICS",
        action = clap::ArgAction::SetTrue,
        value_parser = clap::builder::BoolishValueParser::new()
    )]
    pub disable_openmetrics: bool,

    /// How the format is chosen from the scraper's `Accept` header. `safe`
    /// (the default) answers OpenMetrics only to scrapers that keep UTF-8
    /// names (`escaping=allow-utf-8`, Prometheus 3.x) and a Prometheus text
    /// format otherwise, so that Prometheus 2.x stores `vllm:*` names as they
    /// are; a request without `Accept` gets what vLLM's own route sends.
    /// `prometheus-client` is prometheus_client 0.26.0's negotiation exactly
    /// (Prometheus 2.x then gets OpenMetrics with `vllm:` written `vllm_`).
    #[arg(
        long = "web.negotiation",
        env = "MULTIPROC_EXPORTER_WEB_NEGOTIATION",
        value_enum,
        default_value = "safe"
    )]
    pub negotiation: NegotiationArg,

    /// Web configuration file in the format of Prometheus's exporter-toolkit
    /// (`tls_server_config`, `http_server_config`, `basic_auth_users`; see
    /// docs/configuration.md). Checked for changes every second: new
    /// certificates and passwords apply without a restart; a bad new version
    /// is logged and the previous one stays in force.
    #[arg(
        long = "web.config.file",
        env = "MULTIPROC_EXPORTER_WEB_CONFIG_FILE",
        value_name = "FILE"
    )]
    pub web_config_file: Option<PathBuf>,

    /// Maximum number of scrapes of the metrics path served at once; more are
    /// answered at once with 503. 0 means no limit.
    #[arg(
        long = "web.max-requests",
        env = "MULTIPROC_EXPORTER_WEB_MAX_REQUESTS",
        value_name = "N",
        default_value_t = 40
    )]
    pub max_requests: usize,

    /// Maximum number of open connections. When reached, the connection
    /// that has waited longest without a request in progress is closed to
    /// make room; when all are busy, new ones are refused. 0 means no limit.
    #[arg(
        long = "web.max-connections",
        env = "MULTIPROC_EXPORTER_WEB_MAX_CONNECTIONS",
        value_name = "N",
        default_value_t = 512
    )]
    pub max_connections: usize,

    /// Time allowed for the TLS handshake and the request headers (from the
    /// connection's start, or from the first byte of a later request on a
    /// kept-alive connection). 0 disables.
    #[arg(
        long = "web.read-header-timeout",
        env = "MULTIPROC_EXPORTER_WEB_READ_HEADER_TIMEOUT",
        value_name = "DURATION",
        value_parser = parse_duration,
        default_value = "10s"
    )]
    pub read_header_timeout: Duration,

    /// How long a kept-alive connection may wait for its next request.
    /// 0 disables.
    #[arg(
        long = "web.idle-timeout",
        env = "MULTIPROC_EXPORTER_WEB_IDLE_TIMEOUT",
        value_name = "DURATION",
        value_parser = parse_duration,
        default_value = "5m"
    )]
    pub idle_timeout: Duration,

    /// Time allowed from a request's headers having been read to the last
    /// byte of its response being written (the scrape included). 0 disables.
    #[arg(
        long = "web.write-timeout",
        env = "MULTIPROC_EXPORTER_WEB_WRITE_TIMEOUT",
        value_name = "DURATION",
        value_parser = parse_duration,
        default_value = "2m"
    )]
    pub write_timeout: Duration,
}

/// Logging (`serve`, `demo`).
#[derive(Debug, Clone, Args)]
pub struct LogFlags {
    /// Log format.
    #[arg(
        long = "log.format",
        env = "MULTIPROC_EXPORTER_LOG_FORMAT",
        value_enum,
        default_value = "logfmt"
    )]
    pub log_format: LogFormat,

    /// Minimum level of log messages.
    #[arg(
        long = "log.level",
        env = "MULTIPROC_EXPORTER_LOG_LEVEL",
        value_enum,
        default_value = "info"
    )]
    pub log_level: LogLevel,
}

/// Pushing with Prometheus remote write or OTLP (`serve`), for clusters
/// where nothing can reach the pod to scrape it (docs/sources.md).
#[derive(Debug, Clone, Default, Args)]
pub struct PushFlags {
    /// Push what the metrics path serves, every --push.interval, to this
    /// Prometheus remote-write 1.0 receiver (e.g.
    /// `http://prometheus:9090/api/v1/write` of a Prometheus started with
    /// `--web.enable-remote-write-receiver`, or Mimir, Thanos, VictoriaMetrics).
    /// Off when not given.
    #[arg(
        long = "push.remote-write-url",
        env = "MULTIPROC_EXPORTER_PUSH_REMOTE_WRITE_URL",
        value_name = "URL"
    )]
    pub remote_write_url: Option<String>,
    /// Push what the metrics path serves, every --push.interval, to this
    /// OTLP/HTTP receiver (protobuf, gzip), e.g.
    /// `http://otel-collector:4318/v1/metrics`, mapped as the OpenTelemetry
    /// Collector's Prometheus receiver maps a scrape (docs/sources.md).
    /// Beside or instead of --push.remote-write-url; the other --push.*
    /// flags apply to both. Off when not given.
    #[arg(
        long = "push.otlp-url",
        env = "MULTIPROC_EXPORTER_PUSH_OTLP_URL",
        value_name = "URL"
    )]
    pub otlp_url: Option<String>,
    /// A header sent with every push request, as `NAME=VALUE` (a tenant,
    /// an API key). Repeatable; comma-separated in the environment variable.
    /// Headers the protocols set themselves (Content-Type,
    /// Content-Encoding, Authorization, ...) cannot be given.
    #[arg(
        long = "push.header",
        env = "MULTIPROC_EXPORTER_PUSH_HEADER",
        value_name = "NAME=VALUE",
        value_delimiter = ','
    )]
    pub headers: Vec<String>,
    /// Time between two collections pushed.
    #[arg(
        long = "push.interval",
        env = "MULTIPROC_EXPORTER_PUSH_INTERVAL",
        value_name = "DURATION",
        value_parser = parse_duration,
        default_value = "15s"
    )]
    pub interval: Duration,
    /// Time allowed for one push request.
    #[arg(
        long = "push.timeout",
        env = "MULTIPROC_EXPORTER_PUSH_TIMEOUT",
        value_name = "DURATION",
        value_parser = parse_duration,
        default_value = "10s"
    )]
    pub timeout: Duration,
    /// Collections kept while the receiver cannot take them (down, slow,
    /// answering 429 or 5xx); when full, the oldest is dropped and counted
    /// (multiproc_exporter_push_collections_dropped_total). The default
    /// keeps an hour at the default interval.
    #[arg(
        long = "push.queue-capacity",
        env = "MULTIPROC_EXPORTER_PUSH_QUEUE_CAPACITY",
        value_name = "N",
        default_value_t = 240
    )]
    pub queue_capacity: usize,
    /// The most memory a destination's waiting collections may take (their
    /// compressed requests; with --push.otlp-temporality=delta, with the
    /// state their deltas start from), however long the outage: past it
    /// the oldest are dropped and counted
    /// (multiproc_exporter_push_collections_dropped_total{reason="memory_limit"});
    /// with delta temporality the next request sent still carries their
    /// change. A size such as `4MiB` or `512KiB`; the newest collection is
    /// always kept.
    #[arg(
        long = "push.queue-max-bytes",
        env = "MULTIPROC_EXPORTER_PUSH_QUEUE_MAX_BYTES",
        value_name = "SIZE",
        default_value = "4MiB"
    )]
    pub queue_max_bytes: String,
    /// The first wait before retrying a failed request; it doubles, with
    /// jitter, up to --push.max-backoff (Prometheus's remote-write
    /// min_backoff default).
    #[arg(
        long = "push.min-backoff",
        env = "MULTIPROC_EXPORTER_PUSH_MIN_BACKOFF",
        value_name = "DURATION",
        value_parser = parse_duration,
        default_value = "30ms"
    )]
    pub min_backoff: Duration,
    /// How OTLP sends counters and histograms: `cumulative` (their totals,
    /// as the Collector's Prometheus receiver maps them) or `delta` (the
    /// change since the previous push, as the Collector's cumulativetodelta
    /// processor converts them; for backends that accept only deltas).
    #[arg(
        long = "push.otlp-temporality",
        env = "MULTIPROC_EXPORTER_PUSH_OTLP_TEMPORALITY",
        value_name = "TEMPORALITY",
        value_parser = ["cumulative", "delta"],
        default_value = "cumulative"
    )]
    pub otlp_temporality: String,
    /// The longest wait between two retries of a failed request (the wait
    /// starts at --push.min-backoff and doubles); a receiver's Retry-After
    /// waits longer (up to --push.max-retry-after).
    #[arg(
        long = "push.max-backoff",
        env = "MULTIPROC_EXPORTER_PUSH_MAX_BACKOFF",
        value_name = "DURATION",
        value_parser = parse_duration,
        default_value = "5s"
    )]
    pub max_backoff: Duration,
    /// The longest Retry-After honoured: a receiver answering 429 or 503
    /// with Retry-After gets the next request after the larger of the
    /// backoff and its Retry-After, capped by this (0: Retry-After ignored).
    #[arg(
        long = "push.max-retry-after",
        env = "MULTIPROC_EXPORTER_PUSH_MAX_RETRY_AFTER",
        value_name = "DURATION",
        value_parser = parse_duration,
        default_value = "10m"
    )]
    pub max_retry_after: Duration,
    /// At shutdown, time allowed to push a last collection and what is
    /// still queued.
    #[arg(
        long = "push.flush-deadline",
        env = "MULTIPROC_EXPORTER_PUSH_FLUSH_DEADLINE",
        value_name = "DURATION",
        value_parser = parse_duration,
        default_value = "5s"
    )]
    pub flush_deadline: Duration,
    /// A label added to every pushed series that lacks it, as `NAME=VALUE`
    /// (like Prometheus's `external_labels`; a scrape's `job` and
    /// `instance` do not exist when pushing, so name the pod here). With
    /// OTLP, a resource attribute (`job` → `service.name`, `instance` →
    /// `service.instance.id`, as the Collector names them).
    /// Repeatable; comma-separated in the environment variable.
    #[arg(
        long = "push.label",
        env = "MULTIPROC_EXPORTER_PUSH_LABEL",
        value_name = "NAME=VALUE",
        value_delimiter = ','
    )]
    pub labels: Vec<String>,
    /// User name for HTTP basic authentication (with
    /// --push.basic-auth.password-file).
    #[arg(
        long = "push.basic-auth.username",
        env = "MULTIPROC_EXPORTER_PUSH_BASIC_AUTH_USERNAME",
        value_name = "NAME"
    )]
    pub basic_auth_username: Option<String>,
    /// File holding the basic authentication password (read at every
    /// request, so a rotated secret applies).
    #[arg(
        long = "push.basic-auth.password-file",
        env = "MULTIPROC_EXPORTER_PUSH_BASIC_AUTH_PASSWORD_FILE",
        value_name = "FILE"
    )]
    pub basic_auth_password_file: Option<PathBuf>,
    /// File holding a bearer token sent as `Authorization: Bearer` (read at
    /// every request).
    #[arg(
        long = "push.bearer-token-file",
        env = "MULTIPROC_EXPORTER_PUSH_BEARER_TOKEN_FILE",
        value_name = "FILE"
    )]
    pub bearer_token_file: Option<PathBuf>,
    /// PEM file of certificate authorities trusted for an `https://`
    /// receiver, besides the Mozilla roots built in.
    #[arg(
        long = "push.tls.ca-file",
        env = "MULTIPROC_EXPORTER_PUSH_TLS_CA_FILE",
        value_name = "FILE"
    )]
    pub ca_file: Option<PathBuf>,
}

/// Finding the metrics directories through `/proc` (`serve`): the node agent
/// (docs/configuration.md, "Discovering the directories").
#[derive(Debug, Clone, Args)]
pub struct DiscoverFlags {
    /// Find every prometheus_client multiprocess directory on the node
    /// through /proc (the files each process holds open) instead of being
    /// told (--dir): each is read through its writers' mount namespace,
    /// merged on its own and labelled with its pod's namespace, name and
    /// container, kept while its pod exists after its writers exit, and
    /// dropped with its pod. Needs the host's pid namespace (hostPID) and
    /// CAP_SYS_PTRACE and CAP_DAC_READ_SEARCH. Not with --dir or
    /// --dir.subdirectories-label.
    #[arg(
        long = "discover.processes",
        env = "MULTIPROC_EXPORTER_DISCOVER_PROCESSES",
        action = clap::ArgAction::SetTrue,
        value_parser = clap::builder::BoolishValueParser::new()
    )]
    pub discover_processes: bool,
    /// The kubelet's pod log directory (mounted read-only), which names each
    /// pod UID's namespace, pod and containers and tells whether the pod
    /// still exists; the kubelet's container links are read from its sibling
    /// `containers` when there. Empty: no pod names (outside Kubernetes).
    #[arg(
        long = "discover.pod-log-dir",
        env = "MULTIPROC_EXPORTER_DISCOVER_POD_LOG_DIR",
        value_name = "DIR",
        default_value = "/var/log/pods",
        value_parser = clap::builder::OsStringValueParser::new().map(PathBuf::from)
    )]
    pub discover_pod_log_dir: PathBuf,
    /// How often /proc is scanned for directories; a scrape that finds one
    /// of the last scan's writers gone scans at once.
    #[arg(
        long = "discover.interval",
        env = "MULTIPROC_EXPORTER_DISCOVER_INTERVAL",
        value_name = "DURATION",
        value_parser = parse_duration,
        default_value = "10s"
    )]
    pub discover_interval: Duration,
    /// The label naming a discovered directory's pod namespace (empty: none).
    #[arg(
        long = "discover.namespace-label",
        env = "MULTIPROC_EXPORTER_DISCOVER_NAMESPACE_LABEL",
        value_name = "NAME",
        default_value = "namespace"
    )]
    pub discover_namespace_label: String,
    /// The label naming a discovered directory's pod (empty: none).
    #[arg(
        long = "discover.pod-label",
        env = "MULTIPROC_EXPORTER_DISCOVER_POD_LABEL",
        value_name = "NAME",
        default_value = "pod"
    )]
    pub discover_pod_label: String,
    /// The label naming a discovered directory's container: its name in a
    /// pod, else the container's ID (empty: none).
    #[arg(
        long = "discover.container-label",
        env = "MULTIPROC_EXPORTER_DISCOVER_CONTAINER_LABEL",
        value_name = "NAME",
        default_value = "container"
    )]
    pub discover_container_label: String,
    /// A label with the pod's UID (not added by default).
    #[arg(
        long = "discover.pod-uid-label",
        env = "MULTIPROC_EXPORTER_DISCOVER_POD_UID_LABEL",
        value_name = "NAME"
    )]
    pub discover_pod_uid_label: Option<String>,
    /// How long a directory whose writers all exited is kept when its pod is
    /// not known (outside Kubernetes): long enough for a restarted
    /// application to come back and for the last values to be scraped.
    #[arg(
        long = "discover.linger",
        env = "MULTIPROC_EXPORTER_DISCOVER_LINGER",
        value_name = "DURATION",
        value_parser = parse_duration,
        default_value = "5m"
    )]
    pub discover_linger: Duration,
    /// The most multiprocess directories read for one pod (one container,
    /// or one process outside Kubernetes): the oldest are read, newer ones
    /// left out and not kept open, reported for that pod. 0: no cap.
    #[arg(
        long = "discover.max-directories-per-pod",
        env = "MULTIPROC_EXPORTER_DISCOVER_MAX_DIRECTORIES_PER_POD",
        value_name = "N",
        default_value_t = crate::pipeline::discovered::DiscoverCaps::MAX_DIRECTORIES
    )]
    pub discover_max_directories_per_pod: usize,
    /// The most metric files one pod may have: past it, that pod's series
    /// are left out, reported for it. 0: no cap.
    #[arg(
        long = "discover.max-files-per-pod",
        env = "MULTIPROC_EXPORTER_DISCOVER_MAX_FILES_PER_POD",
        value_name = "N",
        default_value_t = crate::pipeline::discovered::DiscoverCaps::MAX_FILES
    )]
    pub discover_max_files_per_pod: usize,
    /// The most series (samples) one pod may serve: past it, that pod's
    /// series are left out, reported for it. 0: no cap.
    #[arg(
        long = "discover.max-series-per-pod",
        env = "MULTIPROC_EXPORTER_DISCOVER_MAX_SERIES_PER_POD",
        value_name = "N",
        default_value_t = crate::pipeline::discovered::DiscoverCaps::MAX_SERIES
    )]
    pub discover_max_series_per_pod: usize,
    /// File descriptors kept free for serving (connections, the scan of
    /// /proc, reading files) that the directories kept open never take:
    /// beyond the limit less this reserve, new directories are read while
    /// their writers live and not kept.
    #[arg(
        long = "discover.reserved-descriptors",
        env = "MULTIPROC_EXPORTER_DISCOVER_RESERVED_DESCRIPTORS",
        value_name = "N",
        default_value_t = crate::pipeline::discovered::DiscoverCaps::RESERVED_DESCRIPTORS
    )]
    pub discover_reserved_descriptors: usize,
    /// With --discover.processes, the longest a scrape of /metrics takes
    /// (Prometheus's X-Prometheus-Scrape-Timeout-Seconds when shorter): each
    /// pod's files are read side by side within half of it, and a pod not
    /// done by then is served from its last collection.
    #[arg(
        long = "web.scrape-timeout",
        env = "MULTIPROC_EXPORTER_WEB_SCRAPE_TIMEOUT",
        value_name = "DURATION",
        value_parser = parse_duration,
        default_value = "10s"
    )]
    pub web_scrape_timeout: Duration,
    /// With --discover.processes, the oldest a late pod's last collection
    /// may be to be served in its place: past it, the pod is left out (a
    /// gap in its series rather than frozen values) until its read ends.
    /// Default: three times --web.scrape-timeout.
    #[arg(
        long = "discover.late-max-age",
        env = "MULTIPROC_EXPORTER_DISCOVER_LATE_MAX_AGE",
        value_name = "DURATION",
        value_parser = parse_duration
    )]
    pub discover_late_max_age: Option<Duration>,
}

/// Flags of `serve` (and of the command line without a subcommand).
#[derive(Debug, Clone, Args)]
pub struct ServeFlags {
    /// Metrics directory written by prometheus_client in multiprocess mode.
    /// Repeat to merge several (files are merged in the order given, then in
    /// directory order). Defaults to `$PROMETHEUS_MULTIPROC_DIR` (or its old
    /// spelling `$prometheus_multiproc_dir`). It need not exist yet.
    #[arg(
        long = "dir",
        env = "PROMETHEUS_MULTIPROC_DIR",
        value_name = "DIR",
        value_parser = clap::builder::OsStringValueParser::new().map(PathBuf::from)
    )]
    pub dirs: Vec<PathBuf>,

    /// How often to warn while a directory gives nothing to serve (missing,
    /// unreadable, empty, or only subdirectories without
    /// --dir.subdirectories-label); the first warning comes after one
    /// interval, since an application just starting has not written yet.
    /// 0 turns the warnings off.
    #[arg(
        long = "dir.warn-interval",
        env = "MULTIPROC_EXPORTER_DIR_WARN_INTERVAL",
        value_name = "DURATION",
        value_parser = parse_duration,
        default_value = "1m"
    )]
    pub warn_interval: Duration,

    /// Log a warning when the files of writers that have exited number at
    /// least this many (they slow every scrape and fill the disk; see
    /// docs/troubleshooting.md). 0 turns the warning off.
    #[arg(
        long = "writers.dead-files-warning",
        env = "MULTIPROC_EXPORTER_WRITERS_DEAD_FILES_WARNING",
        value_name = "N",
        default_value_t = 1000
    )]
    pub dead_files_warning: usize,

    /// How the directories are read.
    #[command(flatten)]
    pub directories: DirectoryFlags,

    /// Finding the directories through /proc.
    #[command(flatten)]
    pub discover: Box<DiscoverFlags>,

    /// The configuration file.
    #[command(flatten)]
    pub config: ConfigFlags,

    /// The HTTP server.
    #[command(flatten)]
    pub web: WebFlags,

    /// Logging.
    #[command(flatten)]
    pub log: LogFlags,

    /// Pushing with remote write.
    #[command(flatten)]
    pub push: Box<PushFlags>,
}

/// A duration flag: `10s`, `500ms`, `2m`, `1h30m`; `0` disables.
pub(crate) fn parse_duration(text: &str) -> Result<Duration, String> {
    let text = text.trim();
    if text == "0" {
        return Ok(Duration::ZERO);
    }
    humantime::parse_duration(text).map_err(|e| format!("{e} (write e.g. 10s, 500ms, 2m or 0)"))
}

/// `--web.negotiation`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum NegotiationArg {
    /// Never answer OpenMetrics with names rewritten (the default).
    Safe,
    /// prometheus_client 0.26.0's `choose_encoder`, exactly.
    PrometheusClient,
}

/// Exposition format for `dump`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum FormatArg {
    /// Prometheus text format (what prometheus_client's `generate_latest` writes).
    Text,
    /// OpenMetrics 1.0.0 text format.
    Openmetrics,
    /// The typed JSON of `/api/v1/snapshot` (docs/api.md).
    Json,
}

/// Name escaping for `dump`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum EscapingArg {
    /// Replace characters outside the legacy name character set with `_`.
    Underscores,
    /// Keep UTF-8 names, quoting those outside the legacy character set.
    #[value(name = "allow-utf-8")]
    AllowUtf8,
}

/// Flags of `dump`.
#[derive(Debug, Args)]
pub struct DumpFlags {
    /// Output format.
    #[arg(
        long,
        env = "MULTIPROC_EXPORTER_DUMP_FORMAT",
        value_enum,
        default_value = "text"
    )]
    pub format: FormatArg,
    /// How metric and label names outside the legacy character set are written.
    #[arg(
        long,
        env = "MULTIPROC_EXPORTER_DUMP_ESCAPING",
        value_enum,
        default_value = "underscores"
    )]
    pub escaping: EscapingArg,
    /// The configuration file, applied as `serve` applies it.
    #[command(flatten)]
    pub config: ConfigFlags,
    /// How the directories are read, as by `serve`.
    #[command(flatten)]
    pub directories: DirectoryFlags,
    /// A metrics directory, as `serve --dir` names it (the same as giving it
    /// as a PATH; repeatable, read before the PATHs).
    #[arg(long = "dir", value_name = "DIR")]
    pub dirs: Vec<PathBuf>,
    /// Print only this view's families (`endpoint-picker`, or one of the
    /// configuration's `views`), read as `serve` reads them for the view's
    /// path: only the view's records are loaded and merged.
    #[arg(long = "view", value_name = "NAME")]
    pub view: Option<String>,
    /// Metric directories (their `*.db` entries are read in directory order)
    /// and files (merged in the order given). Defaults to
    /// `$PROMETHEUS_MULTIPROC_DIR`.
    pub paths: Vec<PathBuf>,
    /// Finding the directories through /proc, as `serve --discover.processes`
    /// (once: --discover.interval and --discover.linger do not apply).
    #[command(flatten)]
    pub discover: Box<DiscoverFlags>,
}

/// Flags of `demo`.
#[derive(Debug, Args)]
pub struct DemoFlags {
    /// Where to write the simulated processes' files (default: a new directory
    /// under the system temporary directory, removed on exit).
    #[arg(
        long = "demo.dir",
        env = "MULTIPROC_EXPORTER_DEMO_DIR",
        value_name = "DIR"
    )]
    pub dir: Option<PathBuf>,
    /// Simulated vLLM API-server processes.
    #[arg(
        long = "demo.api-servers",
        env = "MULTIPROC_EXPORTER_DEMO_API_SERVERS",
        default_value_t = 2
    )]
    pub api_servers: usize,
    /// Simulated worker processes (they write the `lmcache:` metrics).
    #[arg(
        long = "demo.workers",
        env = "MULTIPROC_EXPORTER_DEMO_WORKERS",
        default_value_t = 2
    )]
    pub workers: usize,
    /// Milliseconds between simulation steps.
    #[arg(
        long = "demo.tick-ms",
        env = "MULTIPROC_EXPORTER_DEMO_TICK_MS",
        default_value_t = 1000
    )]
    pub tick_ms: u64,
    /// Keep the files already in `--demo.dir` and continue their counters
    /// (by default the demo removes the `*.db` files there and starts
    /// afresh).
    #[arg(
        long = "demo.continue",
        env = "MULTIPROC_EXPORTER_DEMO_CONTINUE",
        action = clap::ArgAction::SetTrue,
        value_parser = clap::builder::BoolishValueParser::new()
    )]
    pub continue_: bool,
    /// The server simulated: `vllm` (API servers, engines, LMCache workers)
    /// or `sglang` (SGLang 0.5.23's families: two scheduler ranks and the
    /// tokenizer manager; docs/sglang.md).
    #[arg(
        long = "demo.engine",
        env = "MULTIPROC_EXPORTER_DEMO_ENGINE",
        value_enum,
        default_value = "vllm"
    )]
    pub engine: DemoEngine,
    /// Seed of the simulation (the same seed gives the same values).
    #[arg(
        long = "demo.seed",
        env = "MULTIPROC_EXPORTER_DEMO_SEED",
        default_value_t = 0
    )]
    pub seed: u64,
    /// The configuration file.
    #[command(flatten)]
    pub config: ConfigFlags,
    /// The HTTP server.
    #[command(flatten)]
    pub web: WebFlags,
    /// Logging.
    #[command(flatten)]
    pub log: LogFlags,
    /// Pushing the demo's metrics (remote write, OTLP).
    #[command(flatten)]
    pub push: Box<PushFlags>,
}
