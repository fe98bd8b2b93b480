//! What the node agent says about a part (a pod's container, a container, a
//! process) that costs more than it may (issue 35): one log line per part
//! when it first goes past a cap or its share of a scrape (again only after
//! it came back within them), and the `multiproc_exporter_discovery_part_*`
//! gauges, labelled with the part's own labels, for the parts that do now.
//! Directories found or dropped together in one part are logged as one line
//! with their count.

use std::collections::{BTreeMap, HashSet};
use std::sync::Arc;

use crate::model::family_list::FamilyList;
use crate::model::Label;
use crate::pipeline::discovered::{PartCost, RefreshReport, TargetReport};
use crate::pipeline::parts::{Capped, LateServed};

/// How many directories one line shows before it only counts them.
const SHOWN: usize = 3;

/// What has been logged about each part, so that it is logged once.
#[derive(Debug, Default)]
pub(crate) struct PartCostLog {
    logged: HashSet<(Arc<str>, &'static str)>,
}

impl PartCostLog {
    /// Logs what is new among `parts` (the parts that cost more than they
    /// may at this collection).
    pub(crate) fn observe(&mut self, parts: &[PartCost]) {
        let mut now = HashSet::new();
        for part in parts {
            let labels = labels_text(&part.labels);
            let mut note = |kind: &'static str| {
                let key = (part.part.clone(), kind);
                let new = !self.logged.contains(&key);
                now.insert(key);
                new
            };
            if part.directories_left_out > 0 && note("directories") {
                tracing::warn!(
                    part = %part.part,
                    labels = %labels,
                    directories_left_out = part.directories_left_out,
                    "A pod holds more multiprocess directories than --discover.max-directories-per-pod: its newest are left out (multiproc_exporter_discovery_part_directories_left_out)."
                );
            }
            if part.directories_not_kept > 0 && note("not_kept") {
                tracing::warn!(
                    part = %part.part,
                    labels = %labels,
                    directories = part.directories_not_kept,
                    "Directories of a pod are read but not kept open (the descriptors left after --discover.reserved-descriptors are taken): their series go with their writers (multiproc_exporter_discovery_part_directories_not_kept)."
                );
            }
            match part.capped {
                Some(Capped::Files(files)) if note("files") => tracing::warn!(
                    part = %part.part,
                    labels = %labels,
                    files,
                    "A pod has more metric files than --discover.max-files-per-pod: its series are left out; the other pods are served (multiproc_exporter_discovery_part_capped)."
                ),
                Some(Capped::Series(series)) if note("series") => tracing::warn!(
                    part = %part.part,
                    labels = %labels,
                    series,
                    "A pod has more series than --discover.max-series-per-pod: its series are left out; the other pods are served (multiproc_exporter_discovery_part_capped)."
                ),
                _ => {}
            }
            match part.late {
                Some(LateServed::Expired) if note("expired") => tracing::warn!(
                    part = %part.part,
                    labels = %labels,
                    "No read of a pod's metric files has finished within --discover.late-max-age (its read is still running, its last collection was served already): it is left out until a read ends (a gap, not frozen values); the other pods are served (multiproc_exporter_discovery_part_late{{served=\"expired\"}})."
                ),
                Some(served) if note("late") => tracing::warn!(
                    part = %part.part,
                    labels = %labels,
                    served = served.label(),
                    "A pod's metric files were not read within its share of the scrape timeout: its last collection is served (or none), the other pods are not held up (multiproc_exporter_discovery_part_late)."
                ),
                _ => {}
            }
        }
        self.logged = now;
    }
}

/// Logs a scan's found and dropped directories, one line per part (and
/// reason), with their count.
pub(crate) fn log_found_and_dropped(refresh: &RefreshReport) {
    let mut found: BTreeMap<&Arc<str>, Vec<&TargetReport>> = BTreeMap::new();
    for target in &refresh.added {
        found.entry(&target.part).or_default().push(target);
    }
    for targets in found.values() {
        let first = targets[0];
        if targets.len() == 1 {
            tracing::info!(
                part = %first.part,
                labels = %labels_text(&first.labels),
                dir = %first.dir.display(),
                mount_namespace = first.mount_ns.unwrap_or_default(),
                holders = %pids_text(&first.holders),
                "Found a multiprocess directory; serving it."
            );
        } else {
            tracing::info!(
                part = %first.part,
                labels = %labels_text(&first.labels),
                directories = targets.len(),
                dirs = %dirs_text(targets),
                "Found multiprocess directories of one pod; serving them."
            );
        }
    }
    let mut dropped: BTreeMap<(&Arc<str>, &str), Vec<&TargetReport>> = BTreeMap::new();
    for (target, reason) in &refresh.dropped {
        dropped
            .entry((&target.part, reason))
            .or_default()
            .push(target);
    }
    for ((_, reason), targets) in &dropped {
        let first = targets[0];
        if targets.len() == 1 {
            tracing::info!(
                part = %first.part,
                labels = %labels_text(&first.labels),
                dir = %first.dir.display(),
                reason_label = *reason,
                "Dropped a discovered directory; its series are no longer served."
            );
        } else {
            tracing::info!(
                part = %first.part,
                labels = %labels_text(&first.labels),
                directories = targets.len(),
                dirs = %dirs_text(targets),
                reason_label = *reason,
                "Dropped discovered directories of one pod; their series are no longer served."
            );
        }
    }
}

/// One gauge's sample of a part: an extra label, if any, and the value.
type PartSample = Option<(Option<(&'static str, &'static str)>, f64)>;

/// The per-part gauges of `parts`.
pub(crate) fn add_families(p: &str, parts: &[PartCost], out: &mut FamilyList) {
    let series = |value: &dyn Fn(&PartCost) -> PartSample| {
        parts
            .iter()
            .filter_map(|part| {
                let (extra, v) = value(part)?;
                let mut labels: Vec<(&str, &str)> =
                    part.labels.iter().map(|(n, v)| (&**n, &**v)).collect();
                labels.extend(extra);
                Some((labels, v))
            })
            .collect::<Vec<_>>()
    };
    out.gauge_series(
        &format!("{p}discovery_part_directories_left_out"),
        "Directories of a discovered pod (or container, or process) left out at the last scrape because it has --discover.max-directories-per-pod older ones; only pods with some.",
        series(&|c| (c.directories_left_out > 0).then_some((None, c.directories_left_out as f64))),
    );
    out.gauge_series(
        &format!("{p}discovery_part_directories_not_kept"),
        "Directories of a discovered pod read at the last scrape but not kept open (the descriptors left after --discover.reserved-descriptors were taken, or opening failed): their series go when their writers exit; only pods with some.",
        series(&|c| (c.directories_not_kept > 0).then_some((None, c.directories_not_kept as f64))),
    );
    out.gauge_series(
        &format!("{p}discovery_part_capped"),
        "A discovered pod left out at the last scrape by --discover.max-files-per-pod (cap=\"files\") or --discover.max-series-per-pod (cap=\"series\"), with the files or series it has; only pods left out.",
        series(&|c| match c.capped? {
            Capped::Files(n) => Some((Some(("cap", "files")), n as f64)),
            Capped::Series(n) => Some((Some(("cap", "series")), n as f64)),
        }),
    );
    out.gauge_series(
        &format!("{p}discovery_part_late"),
        "1 for a discovered pod whose files were not read within its share of the scrape timeout at the last scrape: served=\"last\" its last collection was served, served=\"expired\" its last collection was older than --discover.late-max-age and it was left out, served=\"none\" it had none and was left out; only late pods.",
        series(&|c| Some((Some(("served", c.late?.label())), 1.0))),
    );
}

/// `name=value,…`.
fn labels_text(labels: &[Label]) -> String {
    labels
        .iter()
        .map(|(n, v)| format!("{n}={v}"))
        .collect::<Vec<_>>()
        .join(",")
}

/// `1,2,3`.
pub(crate) fn pids_text(pids: &[u32]) -> String {
    pids.iter()
        .map(u32::to_string)
        .collect::<Vec<_>>()
        .join(",")
}

/// The first few directories' paths, then how many more.
fn dirs_text(targets: &[&TargetReport]) -> String {
    let mut text: Vec<String> = targets
        .iter()
        .take(SHOWN)
        .map(|t| t.dir.display().to_string())
        .collect();
    if targets.len() > SHOWN {
        text.push(format!("… {} more", targets.len() - SHOWN));
    }
    text.join(",")
}
