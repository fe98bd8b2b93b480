//! The live writers' standard `process_*` values, sampled on their own
//! cadence: read from `/proc` at most once every [`PROCESS_SAMPLE_INTERVAL`]
//! and shared by every scrape in between (the inference gateway's endpoint
//! picker polls every 50 ms; reading `stat`, `status`, `limits` and `fd` of
//! every writer on each poll cost more than the whole merge). A change in
//! the set of live writers is read at once: a new writer's values appear in
//! the next scrape, a dead one's go.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::procfs::{self, ProcessStats};
use crate::model::{Labels, MetricFamily};

/// How long one reading of the writers' `process_*` values is served.
pub const PROCESS_SAMPLE_INTERVAL: Duration = Duration::from_secs(1);

/// The last reading of the live writers' process values.
#[derive(Debug, Default)]
pub(crate) struct ProcessSampler {
    /// When it was read, and for which writers (pid from the file names,
    /// pid as the exporter sees it).
    read: Option<(Instant, Vec<(u32, u32)>)>,
    families: Vec<MetricFamily>,
    version: u64,
}

/// A version never given before in this process, so that two samplers'
/// readings are never taken for one another.
fn next_version() -> u64 {
    static LAST: AtomicU64 = AtomicU64::new(0);
    LAST.fetch_add(1, Ordering::Relaxed) + 1
}

impl ProcessSampler {
    /// The `process_*` families of the `live` writers (sorted, one entry per
    /// pid), read again when the last reading is older than
    /// [`PROCESS_SAMPLE_INTERVAL`] or was of other writers, and the
    /// reading's version (equal versions, equal families).
    pub(crate) fn families(&mut self, live: &[(u32, u32)], now: Instant) -> (&[MetricFamily], u64) {
        let fresh = self.read.as_ref().is_some_and(|(at, writers)| {
            writers == live && now.duration_since(*at) < PROCESS_SAMPLE_INTERVAL
        });
        if !fresh {
            let processes: Vec<(Labels, ProcessStats)> = live
                .iter()
                .map(|&(pid, host)| {
                    (
                        Labels::new([(Arc::from("pid"), Arc::from(pid.to_string()))]),
                        ProcessStats::read(&procfs::process_dir(host)),
                    )
                })
                .collect();
            self.families = ProcessStats::families("process_", &processes);
            self.version = next_version();
            self.read = Some((now, live.to_vec()));
        }
        (&self.families, self.version)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_reading_is_shared_for_a_second_and_redone_when_the_writers_change() {
        let me = std::process::id();
        if !procfs::process_dir(me).join("stat").exists() {
            return;
        }
        let mut sampler = ProcessSampler::default();
        let start = Instant::now();
        let (families, first) = sampler.families(&[(7, me)], start);
        assert!(families.iter().any(|f| &*f.name == "process_cpu_seconds"));
        let first_families = families.to_vec();
        // Within the interval: the same reading.
        let (families, again) = sampler.families(&[(7, me)], start + Duration::from_millis(900));
        assert_eq!(again, first);
        assert_eq!(families, &first_families[..]);
        // Another set of writers: read at once.
        let (families, other) = sampler.families(&[(8, me)], start + Duration::from_millis(950));
        assert_ne!(other, first);
        assert!(families[0].samples[0]
            .labels
            .iter()
            .any(|(_, v)| &**v == "8"));
        // Past the interval: read again.
        let (_, later) = sampler.families(&[(8, me)], start + PROCESS_SAMPLE_INTERVAL * 2);
        assert_ne!(later, other);
        // No writers: no families.
        let (families, _) = sampler.families(&[], start + PROCESS_SAMPLE_INTERVAL * 2);
        assert!(families.is_empty());
    }
}
