//! The self-metrics about the writer processes: how many are live, dead or
//! unknown, their files, bytes and records (the share of each scrape's work),
//! files being created, and the gauges dead writers leave behind (the
//! directory hygiene report, see docs/troubleshooting.md).

use std::sync::Mutex;

use crate::format::file_name::GaugeMode;
use crate::model::family_list::FamilyList;
use crate::model::MetricType;
use crate::pipeline::lifecycle::WriterReport;
use crate::source::writers::{Visibility, WriterState};

/// The last scrape's writer report, and compaction's totals.
#[derive(Debug, Default)]
pub(crate) struct WriterMetrics {
    last: Mutex<WriterReport>,
    compaction: Mutex<CompactionTotals>,
}

/// Compaction rounds that wrote archives, failed, and files folded in.
#[derive(Debug, Default, Clone, Copy)]
struct CompactionTotals {
    ok: u64,
    error: u64,
    files: u64,
}

impl WriterMetrics {
    /// Records one scrape's report.
    pub(crate) fn observe(&self, report: &WriterReport) {
        let mut last = self.last.lock().unwrap_or_else(|e| e.into_inner());
        *last = WriterReport {
            process_families: Vec::new(),
            ..report.clone()
        };
        let mut totals = self.compaction.lock().unwrap_or_else(|e| e.into_inner());
        totals.ok += report.compaction.rounds as u64;
        totals.error += report.compaction.errors.len() as u64;
        totals.files += report.compaction.files_removed as u64;
    }

    /// Adds the families (`p` is the self-metrics' prefix).
    pub(crate) fn add_families(&self, p: &str, out: &mut FamilyList) {
        let last = self.last.lock().unwrap_or_else(|e| e.into_inner());
        let by_state = |values: [f64; 3]| {
            WriterState::ALL
                .iter()
                .zip(values)
                .map(|(s, v)| (s.label(), v))
                .collect::<Vec<_>>()
        };
        out.gauge(
            &format!("{p}writers_visible"),
            "Whether the writer processes are visible in /proc and their liveness is decided from it (1), or not (0: prometheus_client's semantics, see --writers.liveness).",
            f64::from(u8::from(matches!(
                last.visibility,
                Some(Visibility::Confirmed | Visibility::Assumed)
            ))),
        );
        out.by_label(
            &format!("{p}writers"),
            "Processes whose files the last scrape read, by state: live, dead (exited) or unknown (not visible, or no pid in the file name).",
            MetricType::Gauge,
            "state",
            by_state(last.writers.map(|n| n as f64)),
        );
        out.by_label(
            &format!("{p}writer_files"),
            "Metric files the last scrape read, by the state of their writer (a dead writer's files left out included).",
            MetricType::Gauge,
            "state",
            by_state(last.files.map(|n| n as f64)),
        );
        out.by_label(
            &format!("{p}writer_file_bytes"),
            "Used bytes of the metric files the last scrape read, by the state of their writer.",
            MetricType::Gauge,
            "state",
            by_state(last.bytes.map(|n| n as f64)),
        );
        out.by_label(
            &format!("{p}writer_records"),
            "Records in the metric files the last scrape read, by the state of their writer: each state's share of the scrape's work.",
            MetricType::Gauge,
            "state",
            by_state(last.records.map(|n| n as f64)),
        );
        out.gauge(
            &format!("{p}scrape_files_pending"),
            "Metric files being created at the last scrape (shorter than their header while their writer is alive, or only seconds old): not read yet, and not counted as skipped.",
            last.pending as f64,
        );
        let mut series: Vec<(Vec<(&str, &str)>, f64)> = Vec::new();
        for mode in GaugeMode::ALL_MODES {
            for served in [false, true] {
                let n = last
                    .dead_gauge_files
                    .iter()
                    .find(|(m, s, _)| *m == mode && *s == served)
                    .map_or(0, |(_, _, n)| *n);
                series.push((
                    vec![
                        ("mode", mode.as_str()),
                        ("served", if served { "true" } else { "false" }),
                    ],
                    n as f64,
                ));
            }
        }
        let totals = *self.compaction.lock().unwrap_or_else(|e| e.into_inner());
        out.by_label(
            &format!("{p}compactions"),
            "Compaction rounds of dead writers' files (--dir.compact-dead-writers), by result: ok (archives written, files removed) or error (a directory left as it was; logged).",
            MetricType::Counter,
            "result",
            [("ok", totals.ok as f64), ("error", totals.error as f64)],
        );
        out.counter(
            &format!("{p}compacted_files"),
            "Dead writers' files folded into archive files and removed by compaction (--dir.compact-dead-writers).",
            totals.files as f64,
        );
        out.gauge_series(
            &format!("{p}dead_writer_gauge_files"),
            "Gauge files of dead writers at the last scrape, by multiprocess mode and whether they are served (live modes are not, unless --writers.keep-dead-live-gauges; sum, min and max are, unless --writers.drop-dead-gauges).",
            series,
        );
    }
}
