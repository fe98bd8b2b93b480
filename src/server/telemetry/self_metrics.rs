//! The exporter's own metrics (`multiproc_exporter_*` and `process_*`).
//!
//! Their values live in `prometheus-client`'s thread-safe metric types
//! (counters, gauges, labelled families), updated as things happen. At a
//! scrape, [`SelfMetrics::families`] reads them straight into this crate's
//! [`MetricFamily`] model ([`crate::model::family_list::FamilyList`]; nothing is
//! encoded and parsed back), and the server encodes the merged families and
//! these together with [`crate::expose::encode`]: the self-metrics are
//! written in whichever format and escaping was negotiated (text 0.0.4, text
//! 1.0.0 or OpenMetrics, with a single `# EOF` at the very end), with
//! prometheus_client's exact conventions, and `?name[]=` restricts them like
//! everything else.
//!
//! Every metric is documented in `docs/metrics.md`.

use std::sync::atomic::AtomicU64;
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;

use crate::model::{Labels, MetricFamily, MetricType};
use crate::pipeline::CollectStats;
use crate::source::{Problem, SkipReason};

use crate::model::family_list::FamilyList;
use crate::pipeline::lifecycle::WriterReport;
use crate::server::telemetry::discovery::DiscoveryMetrics;
use crate::server::telemetry::web_metrics::WebMetrics;
use crate::server::telemetry::writer_metrics::WriterMetrics;
use crate::sink::metrics::PushMetrics;
use crate::source::writers::procfs::{ProcessStats, PROC};
use crate::source::writers::PROCESS_SAMPLE_INTERVAL;

/// Label set of the labelled self-metrics: one `(name, value)` pair.
type OneLabel = Vec<(&'static str, String)>;
type F64Gauge = Gauge<f64, AtomicU64>;

/// Handles to every self-metric, and the registry that encodes them.
#[derive(Debug)]
pub(crate) struct SelfMetrics {
    /// Whether `process_*` are exported.
    process: bool,
    /// Whether the subdirectory metrics are exported.
    subdirectory_metrics: bool,
    build_labels: Vec<(&'static str, String)>,
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
    stale_subdirectories: Gauge,
    subdirectory_conflicts: Family<OneLabel, Gauge>,
    /// The HTTP side's metrics (connections, refused requests, web
    /// configuration reloads).
    pub(crate) web: WebMetrics,
    /// The writer processes (the directory hygiene report).
    writers: WriterMetrics,
    /// Pushing (`--push.*`; present only when it is on).
    pub(crate) push: PushMetrics,
    /// Discovery (`--discover.processes`; present only when it is on).
    pub(crate) discovery: DiscoveryMetrics,
    /// The exporter's own process values and when they were read: read
    /// again at most once every [`PROCESS_SAMPLE_INTERVAL`], as the
    /// writers' are (the endpoint picker's 20 Hz polls would otherwise read
    /// `/proc/self` four files deep on each).
    own_process: std::sync::Mutex<Option<(std::time::Instant, ProcessStats)>>,
}

/// Every `reason` label value of `multiproc_exporter_scrape_files_skipped`
/// (so that a reason that goes away drops to 0 instead of disappearing): the
/// file skip reasons, and `panic` for a scrape that hit a bug.
fn skip_reasons() -> impl Iterator<Item = &'static str> {
    SkipReason::FILE_LABELS.iter().copied().chain(["panic"])
}

/// `reason` label of a subdirectory left out because an earlier directory has
/// one of the same name.
pub(crate) const DUPLICATE_NAME: &str = "duplicate_name";

/// Every `reason` label value of
/// `multiproc_exporter_scrape_subdirectory_conflicts`.
const SUBDIRECTORY_CONFLICT_REASONS: &[&str] = &["type_mismatch", "help_mismatch", DUPLICATE_NAME];

impl SelfMetrics {
    /// Every self-metric at its initial value; `process_*` only when
    /// `process` is set.
    pub(crate) fn new(process: bool) -> Self {
        let m = Self {
            process,
            subdirectory_metrics: false,
            build_labels: crate::build_info::labels()
                .iter()
                .map(|&(name, value)| (name, value.to_owned()))
                .collect(),
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
            stale_subdirectories: Gauge::default(),
            subdirectory_conflicts: Family::default(),
            web: WebMetrics::new(),
            writers: WriterMetrics::default(),
            push: PushMetrics::default(),
            discovery: DiscoveryMetrics::default(),
            own_process: std::sync::Mutex::default(),
        };
        for reason in skip_reasons() {
            m.files_skipped
                .get_or_create(&vec![("reason", reason.to_owned())])
                .set(0);
        }
        for state in DIRECTORY_STATES {
            m.directories
                .get_or_create(&vec![("state", state.to_owned())])
                .set(0);
        }
        for result in RELOAD_RESULTS {
            m.reloads
                .get_or_create(&vec![("result", result.to_owned())])
                .inc_by(0);
        }
        m
    }

    /// Records the outcome of one scrape (`panicked`: the reader hit a bug
    /// and the scrape served no merged metrics).
    pub(crate) fn observe_scrape(
        &self,
        stats: &CollectStats,
        writers: &WriterReport,
        problems: &[Problem],
        families: usize,
        duration: Duration,
        panicked: bool,
    ) {
        self.scrape_duration.set(duration.as_secs_f64());
        self.writers.observe(writers);
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
    pub(super) fn observe_reload(&self, success: bool) {
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
        self.subdirectory_metrics = true;
    }

    /// Records how many temporary subdirectories the last scrape left out as
    /// stale runs (see `crate::source::temporary`).
    pub(crate) fn observe_stale_subdirectories(&self, stale: usize) {
        self.stale_subdirectories.set(count(stale));
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
    pub(super) fn observe_rescan(&self) {
        self.watch_rescans.inc();
    }

    /// The self-metrics as families, with their current values, in a fixed
    /// order (samples of a labelled family sorted by label value).
    pub(crate) fn families(&self) -> Vec<MetricFamily> {
        let p = "multiproc_exporter_";
        let mut out = FamilyList::default();
        let build_labels: Vec<(&str, &str)> = self
            .build_labels
            .iter()
            .map(|(name, value)| (*name, value.as_str()))
            .collect();
        out.gauge_with_labels(
            &format!("{p}build_info"),
            "A metric with a constant '1' value labeled by version, revision, branch, build_date, rustc_version, os and arch from which multiproc-exporter was built.",
            &build_labels,
            1.0,
        );
        out.gauge(
            &format!("{p}scrape_duration_seconds"),
            "Time the last scrape took to list, read, merge and transform the metric files, in seconds.",
            self.scrape_duration.get(),
        );
        out.gauge(
            &format!("{p}scrape_files_read"),
            "Metric files merged by the last scrape.",
            self.files_read.get() as f64,
        );
        out.by_label(
            &format!("{p}scrape_files_skipped"),
            "Metric files left out of the last scrape, by reason.",
            MetricType::Gauge,
            "reason",
            skip_reasons().map(|r| (r, labelled(&self.files_skipped, "reason", r) as f64)),
        );
        out.by_label(
            &format!("{p}scrape_directories"),
            "Configured metric directories at the last scrape, by state (present, missing or unreadable).",
            MetricType::Gauge,
            "state",
            DIRECTORY_STATES.map(|s| (s, labelled(&self.directories, "state", s) as f64)),
        );
        out.gauge(
            &format!("{p}scrape_records"),
            "Records (series values) merged by the last scrape.",
            self.records.get() as f64,
        );
        out.gauge(
            &format!("{p}scrape_bytes_read"),
            "Bytes read from metric files by the last scrape.",
            self.bytes_read.get() as f64,
        );
        out.gauge(
            &format!("{p}scrape_families"),
            "Metric families served by the last scrape, after filtering, excluding these self-metrics.",
            self.families.get() as f64,
        );
        out.gauge(
            &format!("{p}config_last_reload_successful"),
            "Whether the last configuration load or reload succeeded (1) or failed (0).",
            self.reload_successful.get() as f64,
        );
        out.gauge(
            &format!("{p}config_last_reload_success_timestamp_seconds"),
            "Time of the last successful configuration load, in seconds since the Unix epoch.",
            self.reload_success_time.get(),
        );
        out.by_label(
            &format!("{p}config_reloads"),
            "Configuration reload attempts, by result.",
            MetricType::Counter,
            "result",
            RELOAD_RESULTS.map(|r| {
                let n = self
                    .reloads
                    .get_or_create(&vec![("result", r.to_owned())])
                    .get();
                (r, n as f64)
            }),
        );
        out.counter(
            &format!("{p}watch_rescans"),
            "Full rescans of the metric directories forced by a file-watch queue overflow or error.",
            self.watch_rescans.get() as f64,
        );
        out.gauge(
            &format!("{p}scrape_stale_temporary_directories"),
            "Temporary subdirectories left by earlier runs of the server, left out of the last scrape (not summed with the current run; --dir.remove-stale-subdirectories removes them).",
            self.stale_subdirectories.get() as f64,
        );
        self.web.add_families(&mut out);
        self.writers.add_families(p, &mut out);
        self.push.add_families(p, &mut out);
        if self.subdirectory_metrics {
            out.gauge(
                &format!("{p}scrape_subdirectories"),
                "Subdirectories read, each as its own metrics directory, by the last scrape (--dir.subdirectories-label).",
                self.subdirectories.get() as f64,
            );
            out.by_label(
                &format!("{p}scrape_subdirectory_conflicts"),
                "Metric families and subdirectories that did not combine cleanly at the last scrape, by reason (--dir.subdirectories-label).",
                MetricType::Gauge,
                "reason",
                SUBDIRECTORY_CONFLICT_REASONS
                    .iter()
                    .map(|&r| (r, labelled(&self.subdirectory_conflicts, "reason", r) as f64)),
            );
        }
        if self.process {
            // Named apart from the writers' `process_*` series, so that no
            // query mixes the exporter with the processes it reads.
            let own = self.own_process_stats();
            out.extend(ProcessStats::families(
                &format!("{p}process_"),
                &[(Labels::default(), own)],
            ));
        }
        self.discovery.add_families(p, &mut out);
        out.into_families()
    }

    /// The exporter's own process values, read at most once every
    /// [`PROCESS_SAMPLE_INTERVAL`].
    fn own_process_stats(&self) -> ProcessStats {
        let now = std::time::Instant::now();
        let mut last = self.own_process.lock().unwrap_or_else(|e| e.into_inner());
        match *last {
            Some((at, stats)) if now.duration_since(at) < PROCESS_SAMPLE_INTERVAL => stats,
            _ => {
                let stats = ProcessStats::read(&std::path::Path::new(PROC).join("self"));
                *last = Some((now, stats));
                stats
            }
        }
    }
}

/// The value of the series `{label="value"}` of a labelled gauge.
fn labelled(family: &Family<OneLabel, Gauge>, label: &'static str, value: &str) -> i64 {
    family.get_or_create(&vec![(label, value.to_owned())]).get()
}

/// The `state` label values of `multiproc_exporter_scrape_directories`.
const DIRECTORY_STATES: [&str; 3] = ["present", "missing", "unreadable"];

/// The `result` label values of `multiproc_exporter_config_reloads`.
const RELOAD_RESULTS: [&str; 2] = ["success", "failure"];

fn count(n: usize) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
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
    fn families_carry_the_observed_values() {
        let m = SelfMetrics::new(false);
        m.observe_scrape(
            &CollectStats {
                files_merged: 3,
                records: 10,
                directories_present: 1,
                ..CollectStats::default()
            },
            &WriterReport {
                writers: [2, 1, 0],
                files: [6, 2, 0],
                pending: 1,
                dead_gauge_files: vec![(crate::format::file_name::GaugeMode::LiveSum, false, 1)],
                compaction: crate::pipeline::compaction::CompactionReport {
                    rounds: 1,
                    archives: 2,
                    files_removed: 5,
                    recovered: 0,
                    errors: vec![("/y".into(), "read-only file system".into())],
                },
                ..WriterReport::default()
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
                "multiproc_exporter_scrape_stale_temporary_directories",
                "multiproc_exporter_http_connections_open",
                "multiproc_exporter_http_connections_closed",
                "multiproc_exporter_http_requests_rejected",
                "multiproc_exporter_http_scrapes_in_flight",
                "multiproc_exporter_http_bcrypt_checks",
                "multiproc_exporter_web_config_last_reload_successful",
                "multiproc_exporter_web_config_last_reload_success_timestamp_seconds",
                "multiproc_exporter_web_config_reloads",
                "multiproc_exporter_writers_visible",
                "multiproc_exporter_writers",
                "multiproc_exporter_writer_files",
                "multiproc_exporter_writer_file_bytes",
                "multiproc_exporter_writer_records",
                "multiproc_exporter_scrape_files_pending",
                "multiproc_exporter_compactions",
                "multiproc_exporter_compacted_files",
                "multiproc_exporter_dead_writer_gauge_files",
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
        for line in [
            "multiproc_exporter_compactions_total{result=\"ok\"} 1.0\n",
            "multiproc_exporter_compactions_total{result=\"error\"} 1.0\n",
            "multiproc_exporter_compacted_files_total 5.0\n",
        ] {
            assert!(text.contains(line), "{line} not in {text}");
        }
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
        assert!(
            om.contains("multiproc_exporter_web_config_reloads_total{result=\"success\"} 0.0\n")
        );
        assert!(text.contains("multiproc_exporter_writers{state=\"dead\"} 1.0\n"));
        assert!(text.contains("multiproc_exporter_writer_files{state=\"live\"} 6.0\n"));
        assert!(text.contains("multiproc_exporter_scrape_files_pending 1.0\n"));
        assert!(text.contains(
            "multiproc_exporter_dead_writer_gauge_files{mode=\"livesum\",served=\"false\"} 1.0\n"
        ));
        assert!(om.ends_with(
            "multiproc_exporter_dead_writer_gauge_files{mode=\"livemostrecent\",served=\"true\"} 0.0\n# EOF\n"
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
}
