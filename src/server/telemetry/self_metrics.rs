//! The exporter's own metrics (`multiproc_exporter_*` and `process_*`).
//!
//! They are kept in a `prometheus-client` [`Registry`]. That crate writes only
//! OpenMetrics text, with its own conventions, so its output is never sent as
//! is: [`SelfMetrics::families`] encodes the registry with the crate and
//! parses that text back into this crate's [`MetricFamily`] model, and the
//! server then encodes the merged families and these together with
//! [`crate::expose::encode`]. That way the self-metrics are written in whichever
//! format and escaping was negotiated (text 0.0.4, text 1.0.0 or OpenMetrics,
//! with a single `# EOF` at the very end), with prometheus_client's exact
//! conventions, and `?name[]=` restricts them like everything else.
//!
//! Every metric is documented in `docs/metrics.md`.

use std::sync::atomic::AtomicU64;
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;

use crate::model::{Labels, MetricFamily, MetricType, Sample};
use crate::pipeline::CollectStats;
use crate::source::{Problem, SkipReason};

use crate::server::telemetry::process::ProcessCollector;
use crate::server::telemetry::web_metrics::WebMetrics;

/// Label set of the labelled self-metrics: one `(name, value)` pair.
type OneLabel = Vec<(&'static str, String)>;
type F64Gauge = Gauge<f64, AtomicU64>;

/// Handles to every self-metric, and the registry that encodes them.
#[derive(Debug)]
pub(crate) struct SelfMetrics {
    registry: Registry,
    scrape_duration: F64Gauge,
    files_read: Gauge,
    files_skipped: Family<OneLabel, Gauge>,
    directories: Family<OneLabel, Gauge>,
    records: Gauge,
    bytes_read: Gauge,
    families: Gauge,
    reload_successful: Gauge,
    reload_success_time: F64Gauge,
    reloads: Family<OneLabel, Counter>,
    watch_rescans: Counter,
    subdirectories: Gauge,
    subdirectory_conflicts: Family<OneLabel, Gauge>,
    /// The HTTP side's metrics (connections, refused requests, web
    /// configuration reloads).
    pub(crate) web: WebMetrics,
}

/// Every `reason` label value of `multiproc_exporter_scrape_files_skipped`
/// (so that a reason that goes away drops to 0 instead of disappearing): the
/// file skip reasons, and `panic` for a scrape that hit a bug.
fn skip_reasons() -> impl Iterator<Item = &'static str> {
    SkipReason::FILE_LABELS.iter().copied().chain(["panic"])
}

/// Every `reason` label value of
/// `multiproc_exporter_scrape_subdirectory_conflicts`.
const SUBDIRECTORY_CONFLICT_REASONS: &[&str] = &[
    "type_mismatch",
    "help_mismatch",
    crate::server::telemetry::events::DUPLICATE_NAME,
];

impl SelfMetrics {
    /// Registers every self-metric; `process_*` only when `process` is set.
    pub(crate) fn new(process: bool) -> Self {
        let mut registry = Registry::default();
        let m = Self {
            registry: Registry::default(),
            scrape_duration: F64Gauge::default(),
            files_read: Gauge::default(),
            files_skipped: Family::default(),
            directories: Family::default(),
            records: Gauge::default(),
            bytes_read: Gauge::default(),
            families: Gauge::default(),
            reload_successful: Gauge::default(),
            reload_success_time: F64Gauge::default(),
            reloads: Family::default(),
            watch_rescans: Counter::default(),
            subdirectories: Gauge::default(),
            subdirectory_conflicts: Family::default(),
            web: WebMetrics::default(),
        };
        let build_info: Family<OneLabel, Gauge> = Family::default();
        build_info
            .get_or_create(
                &crate::build_info::labels()
                    .iter()
                    .map(|&(name, value)| (name, value.to_owned()))
                    .collect(),
            )
            .set(1);
        for reason in skip_reasons() {
            m.files_skipped
                .get_or_create(&vec![("reason", reason.to_owned())])
                .set(0);
        }
        for state in ["present", "missing", "unreadable"] {
            m.directories
                .get_or_create(&vec![("state", state.to_owned())])
                .set(0);
        }
        for result in ["success", "failure"] {
            m.reloads
                .get_or_create(&vec![("result", result.to_owned())])
                .inc_by(0);
        }
        let p = "multiproc_exporter_";
        registry.register(
            format!("{p}build_info"),
            "A metric with a constant '1' value labeled by version, revision, branch, build_date, rustc_version, os and arch from which multiproc-exporter was built",
            build_info,
        );
        registry.register(
            format!("{p}scrape_duration_seconds"),
            "Time the last scrape took to list, read, merge and transform the metric files, in seconds",
            m.scrape_duration.clone(),
        );
        registry.register(
            format!("{p}scrape_files_read"),
            "Metric files merged by the last scrape",
            m.files_read.clone(),
        );
        registry.register(
            format!("{p}scrape_files_skipped"),
            "Metric files left out of the last scrape, by reason",
            m.files_skipped.clone(),
        );
        registry.register(
            format!("{p}scrape_directories"),
            "Configured metric directories at the last scrape, by state (present, missing or unreadable)",
            m.directories.clone(),
        );
        registry.register(
            format!("{p}scrape_records"),
            "Records (series values) merged by the last scrape",
            m.records.clone(),
        );
        registry.register(
            format!("{p}scrape_bytes_read"),
            "Bytes read from metric files by the last scrape",
            m.bytes_read.clone(),
        );
        registry.register(
            format!("{p}scrape_families"),
            "Metric families served by the last scrape, after filtering, excluding these self-metrics",
            m.families.clone(),
        );
        registry.register(
            format!("{p}config_last_reload_successful"),
            "Whether the last configuration load or reload succeeded (1) or failed (0)",
            m.reload_successful.clone(),
        );
        registry.register(
            format!("{p}config_last_reload_success_timestamp_seconds"),
            "Time of the last successful configuration load, in seconds since the Unix epoch",
            m.reload_success_time.clone(),
        );
        registry.register(
            format!("{p}config_reloads"),
            "Configuration reload attempts, by result",
            m.reloads.clone(),
        );
        registry.register(
            format!("{p}watch_rescans"),
            "Full rescans of the metric directories forced by a file-watch queue overflow or error",
            m.watch_rescans.clone(),
        );
        let web = WebMetrics::register(&mut registry);
        if process {
            registry.register_collector(Box::new(ProcessCollector));
        }
        Self { registry, web, ..m }
    }

    /// Records the outcome of one scrape (`panicked`: the reader hit a bug
    /// and the scrape served no merged metrics).
    pub(crate) fn observe_scrape(
        &self,
        stats: &CollectStats,
        problems: &[Problem],
        families: usize,
        duration: Duration,
        panicked: bool,
    ) {
        self.scrape_duration.set(duration.as_secs_f64());
        self.files_read.set(count(stats.files_merged));
        self.records.set(count(stats.records));
        self.bytes_read
            .set(i64::try_from(stats.bytes_read).unwrap_or(i64::MAX));
        self.families.set(count(families));
        self.directories
            .get_or_create(&vec![("state", "present".to_owned())])
            .set(count(stats.directories_present));
        self.directories
            .get_or_create(&vec![("state", "missing".to_owned())])
            .set(count(stats.directories_missing));
        self.directories
            .get_or_create(&vec![("state", "unreadable".to_owned())])
            .set(count(stats.directories_unreadable));
        for reason in skip_reasons() {
            let n = if reason == "panic" {
                usize::from(panicked)
            } else {
                problems
                    .iter()
                    .filter(|p| !p.reason.is_directory_reason() && p.reason.label() == reason)
                    .count()
            };
            self.files_skipped
                .get_or_create(&vec![("reason", reason.to_owned())])
                .set(count(n));
        }
    }

    /// Records a configuration load or reload.
    pub(crate) fn observe_reload(&self, success: bool) {
        let result = if success { "success" } else { "failure" };
        self.reloads
            .get_or_create(&vec![("result", result.to_owned())])
            .inc();
        self.reload_successful.set(i64::from(success));
        if success {
            let now = SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .map_or(0.0, |d| d.as_secs_f64());
            self.reload_success_time.set(now);
        }
    }

    /// Records the initial configuration load (not counted as a reload).
    pub(crate) fn observe_initial_config(&self) {
        self.reload_successful.set(1);
        let now = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0.0, |d| d.as_secs_f64());
        self.reload_success_time.set(now);
    }

    /// Registers the metrics of `--dir.subdirectories-label` (only exporters
    /// that read subdirectories have them).
    pub(crate) fn register_subdirectory_metrics(&mut self) {
        for reason in SUBDIRECTORY_CONFLICT_REASONS {
            self.subdirectory_conflicts
                .get_or_create(&vec![("reason", (*reason).to_owned())])
                .set(0);
        }
        self.registry.register(
            "multiproc_exporter_scrape_subdirectories",
            "Subdirectories read, each as its own metrics directory, by the last scrape (--dir.subdirectories-label)",
            self.subdirectories.clone(),
        );
        self.registry.register(
            "multiproc_exporter_scrape_subdirectory_conflicts",
            "Metric families and subdirectories that did not combine cleanly at the last scrape, by reason (--dir.subdirectories-label)",
            self.subdirectory_conflicts.clone(),
        );
    }

    /// Records what the last scrape read with `--dir.subdirectories-label`:
    /// how many subdirectories, and the reason of each conflict.
    pub(crate) fn observe_subdirectories(&self, subdirectories: usize, conflicts: &[&str]) {
        self.subdirectories.set(count(subdirectories));
        for reason in SUBDIRECTORY_CONFLICT_REASONS {
            let n = conflicts.iter().filter(|c| *c == reason).count();
            self.subdirectory_conflicts
                .get_or_create(&vec![("reason", (*reason).to_owned())])
                .set(count(n));
        }
    }

    /// Records a forced rescan of the watched directories.
    pub(crate) fn observe_rescan(&self) {
        self.watch_rescans.inc();
    }

    /// The self-metrics as families, in registration order.
    pub(crate) fn families(&self) -> Vec<MetricFamily> {
        let mut text = String::new();
        if let Err(e) = prometheus_client::encoding::text::encode(&mut text, &self.registry) {
            tracing::error!(error = %e, "Cannot encode the exporter's own metrics.");
            return Vec::new();
        }
        let mut families = parse_openmetrics(&text);
        // A `Family` keeps its series in a hash map: sort them by labels so
        // that the output order is stable.
        for family in &mut families {
            family
                .samples
                .sort_by(|a, b| a.labels.as_slice().cmp(b.labels.as_slice()));
        }
        families
    }
}

fn count(n: usize) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
}

/// Parses the OpenMetrics text that `prometheus-client` writes (HELP before
/// TYPE, optional UNIT, samples without timestamps or exemplars) into
/// families. Lines it does not understand are skipped.
pub(crate) fn parse_openmetrics(text: &str) -> Vec<MetricFamily> {
    let mut families: Vec<MetricFamily> = Vec::new();
    for line in text.lines() {
        if line == "# EOF" {
            break;
        }
        if let Some(rest) = line.strip_prefix("# HELP ") {
            let (name, help) = rest.split_once(' ').unwrap_or((rest, ""));
            families.push(MetricFamily {
                name: name.into(),
                help: unescape(help).into(),
                metric_type: MetricType::Unknown,
                samples: Vec::new(),
            });
        } else if let Some(rest) = line.strip_prefix("# TYPE ") {
            let (name, type_name) = rest.split_once(' ').unwrap_or((rest, "unknown"));
            let metric_type =
                MetricType::from_file_prefix(type_name).unwrap_or(MetricType::Unknown);
            match families.last_mut() {
                Some(f) if &*f.name == name => f.metric_type = metric_type,
                _ => families.push(MetricFamily {
                    name: name.into(),
                    help: "".into(),
                    metric_type,
                    samples: Vec::new(),
                }),
            }
        } else if line.starts_with('#') || line.is_empty() {
            continue;
        } else if let (Some(sample), Some(family)) = (parse_sample(line), families.last_mut()) {
            family.samples.push(sample);
        }
    }
    families
}

/// `name{a="b",...} value`.
fn parse_sample(line: &str) -> Option<Sample> {
    let name_end = line.find(['{', ' '])?;
    let name = &line[..name_end];
    let mut rest = &line[name_end..];
    let mut labels = Vec::new();
    if let Some(mut inner) = rest.strip_prefix('{') {
        loop {
            if let Some(after) = inner.strip_prefix('}') {
                rest = after;
                break;
            }
            inner = inner.strip_prefix(',').unwrap_or(inner);
            let (key, after_key) = inner.split_once("=\"")?;
            let (value, after_value) = read_quoted(after_key)?;
            labels.push((Arc::from(key), Arc::from(value)));
            inner = after_value;
        }
    }
    let value = rest.split_whitespace().next()?;
    Some(Sample {
        name: name.into(),
        labels: Labels::new(labels),
        value: parse_value(value)?,
    })
}

/// Reads an escaped label value up to its closing quote; returns it and the rest.
fn read_quoted(s: &str) -> Option<(String, &str)> {
    let mut out = String::new();
    let mut chars = s.char_indices();
    while let Some((i, c)) = chars.next() {
        match c {
            '"' => return Some((out, &s[i + 1..])),
            '\\' => match chars.next()?.1 {
                'n' => out.push('\n'),
                other => out.push(other),
            },
            c => out.push(c),
        }
    }
    None
}

fn unescape(s: &str) -> String {
    if !s.contains('\\') {
        return s.to_owned();
    }
    let mut out = String::with_capacity(s.len());
    let mut chars = s.chars();
    while let Some(c) = chars.next() {
        match (c, chars.clone().next()) {
            ('\\', Some('n')) => {
                out.push('\n');
                chars.next();
            }
            ('\\', Some(other @ ('\\' | '"'))) => {
                out.push(other);
                chars.next();
            }
            (c, _) => out.push(c),
        }
    }
    out
}

fn parse_value(s: &str) -> Option<f64> {
    match s {
        "+Inf" | "inf" | "+inf" => Some(f64::INFINITY),
        "-Inf" | "-inf" => Some(f64::NEG_INFINITY),
        "NaN" | "nan" => Some(f64::NAN),
        _ => s.parse().ok(),
    }
}

/// Leaves out self-metric families whose name a merged family already has
/// (the exposition may declare a name only once); returns the kept families
/// and the names left out.
pub(crate) fn without_clashes(
    own: Vec<MetricFamily>,
    merged: &[MetricFamily],
) -> (Vec<MetricFamily>, Vec<Arc<str>>) {
    let mut clashes = Vec::new();
    let kept = own
        .into_iter()
        .filter(|f| {
            let clash = merged.iter().any(|m| m.name == f.name);
            if clash {
                clashes.push(f.name.clone());
            }
            !clash
        })
        .collect();
    (kept, clashes)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::expose::encode::{encode, Escaping, Format};

    #[test]
    fn parses_what_the_crate_writes() {
        let m = SelfMetrics::new(false);
        m.observe_scrape(
            &CollectStats {
                files_merged: 3,
                records: 10,
                directories_present: 1,
                ..CollectStats::default()
            },
            &[Problem {
                path: "/x/counter_1.db".into(),
                reason: SkipReason::PermissionDenied,
            }],
            4,
            Duration::from_micros(1500),
            false,
        );
        m.observe_reload(true);
        m.observe_reload(false);
        let families = m.families();
        let names: Vec<&str> = families.iter().map(|f| &*f.name).collect();
        assert_eq!(
            names,
            [
                "multiproc_exporter_build_info",
                "multiproc_exporter_scrape_duration_seconds",
                "multiproc_exporter_scrape_files_read",
                "multiproc_exporter_scrape_files_skipped",
                "multiproc_exporter_scrape_directories",
                "multiproc_exporter_scrape_records",
                "multiproc_exporter_scrape_bytes_read",
                "multiproc_exporter_scrape_families",
                "multiproc_exporter_config_last_reload_successful",
                "multiproc_exporter_config_last_reload_success_timestamp_seconds",
                "multiproc_exporter_config_reloads",
                "multiproc_exporter_watch_rescans",
                "multiproc_exporter_http_connections_open",
                "multiproc_exporter_http_connections_closed",
                "multiproc_exporter_http_requests_rejected",
                "multiproc_exporter_http_scrapes_in_flight",
                "multiproc_exporter_http_bcrypt_checks",
                "multiproc_exporter_web_config_last_reload_successful",
                "multiproc_exporter_web_config_last_reload_success_timestamp_seconds",
                "multiproc_exporter_web_config_reloads",
            ]
        );
        let text =
            String::from_utf8(encode(&families, Format::Text, Escaping::Underscores)).unwrap();
        // Labels come out sorted by name, as the Go exporters write them.
        let mut build_labels: Vec<String> = crate::build_info::labels()
            .iter()
            .map(|(name, value)| format!("{name}=\"{value}\""))
            .collect();
        build_labels.sort();
        let build_line = format!(
            "multiproc_exporter_build_info{{{}}} 1.0\n",
            build_labels.join(",")
        );
        assert!(text.contains(&build_line), "{build_line} not in {text}");
        assert!(build_line.contains(&format!(",version=\"{}\"}}", env!("CARGO_PKG_VERSION"))));
        assert!(text.contains("multiproc_exporter_scrape_duration_seconds 0.0015\n"));
        assert!(text.contains(
            "multiproc_exporter_scrape_files_skipped{reason=\"permission_denied\"} 1.0\n"
        ));
        assert!(text.contains("multiproc_exporter_scrape_files_skipped{reason=\"vanished\"} 0.0\n"));
        assert!(text.contains(
            "# HELP multiproc_exporter_config_reloads_total Configuration reload attempts, by result.\n\
             # TYPE multiproc_exporter_config_reloads_total counter\n"
        ));
        assert!(text.contains("multiproc_exporter_config_reloads_total{result=\"failure\"} 1.0\n"));
        assert!(text.contains("multiproc_exporter_config_last_reload_successful 0.0\n"));
        let om = String::from_utf8(encode(
            &families,
            Format::OpenMetrics,
            Escaping::Underscores,
        ))
        .unwrap();
        assert!(om.contains(
            "# TYPE multiproc_exporter_config_reloads counter\n\
             multiproc_exporter_config_reloads_total{result=\"failure\"} 1.0\n"
        ));
        assert!(om.contains("multiproc_exporter_watch_rescans_total 0.0\n"));
        assert!(om.ends_with(
            "multiproc_exporter_web_config_reloads_total{result=\"success\"} 0.0\n# EOF\n"
        ));
    }

    #[test]
    fn subdirectory_conflict_reasons_cover_every_combine_reason() {
        for reason in crate::transform::combine::ConflictReason::ALL {
            assert!(SUBDIRECTORY_CONFLICT_REASONS.contains(&reason.label()));
        }
        let mut m = SelfMetrics::new(false);
        assert!(!m.families().iter().any(|f| f.name.contains("subdirector")));
        m.register_subdirectory_metrics();
        m.observe_subdirectories(3, &["help_mismatch", "help_mismatch"]);
        let text =
            String::from_utf8(encode(&m.families(), Format::Text, Escaping::Underscores)).unwrap();
        assert!(
            text.contains("multiproc_exporter_scrape_subdirectories 3.0\n"),
            "{text}"
        );
        assert!(text.contains(
            "multiproc_exporter_scrape_subdirectory_conflicts{reason=\"help_mismatch\"} 2.0\n"
        ));
        assert!(text.contains(
            "multiproc_exporter_scrape_subdirectory_conflicts{reason=\"duplicate_name\"} 0.0\n"
        ));
    }

    #[test]
    fn parser_handles_escapes_and_specials() {
        let families = parse_openmetrics(
            "# HELP a h\\nx\n# TYPE a gauge\n# UNIT a seconds\na{k=\"v\\\"\\\\\\n\",l=\"\"} NaN\n\
             a inf\n# HELP b_x y\n# TYPE b_x info\nb_x_info{version=\"1\"} 1\n# EOF\nc 1\n",
        );
        assert_eq!(families.len(), 2);
        assert_eq!(&*families[0].help, "h\nx");
        assert_eq!(families[0].samples[0].labels.get("k"), Some("v\"\\\n"));
        assert_eq!(families[0].samples[0].labels.get("l"), Some(""));
        assert!(families[0].samples[0].value.is_nan());
        assert_eq!(families[0].samples[1].value, f64::INFINITY);
        assert_eq!(families[1].metric_type, MetricType::Info);
        assert_eq!(&*families[1].samples[0].name, "b_x_info");
    }
}
