//! The configuration's `upstreams`: HTTP endpoints fetched on every
//! collection and merged with the directory's families (issue 17).
//!
//! ```text
//!  SharedCollection::collect ─► Upstreams::start (fetches run on tokio, concurrently,
//!        │                               while the directory is read)
//!        ├─► read and merge the directory
//!        └─► Upstreams::finish ─► parse (crate::expose::parse) ─► merge_sources ─► transform …
//! ```
//!
//! The fetches belong to a collection, so the scraper's coalescing makes
//! concurrent scrapes share one fetch of each upstream. Each fetch has a
//! deadline: the upstream's `timeout`, capped by Prometheus's
//! `X-Prometheus-Scrape-Timeout-Seconds` minus a tenth (at most 0.5 s).
//!
//! Nothing here fails a scrape: an upstream that is down, slow, answers an
//! error status or a body that does not parse is left out of that scrape,
//! reported in its self-metrics (`multiproc_exporter_upstream_*`, see
//! `docs/metrics.md`) and logged once per change of state (down with a
//! reason, another reason, up again); families that conflict with an
//! earlier source's are left out by the rule of
//! [`crate::transform::sources`], logged once per change of the set, and so
//! are an upstream's families named `multiproc_exporter_*` (another
//! exporter's self-metrics would hide this one's).

mod fetch;

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use crate::expose::parse::{parse, ExpositionFormat};
use crate::model::{Labels, MetricFamily, MetricType, Sample};
use crate::transform::config::Upstream;
use crate::transform::sources::{
    merge_sources, SourceConflict, SourceConflictReason, SourceFamilies,
};
use fetch::{Answer, FailReason, Failure, HttpClient};

/// The name of the directory's side in conflicts and log lines.
pub(crate) const DIRECTORY_SOURCE: &str = "directory";

/// The exporter's side in conflicts: an upstream's family in the exporter's
/// own namespace ([`SELF_METRICS_PREFIX`]) is left out.
pub(crate) const EXPORTER_SOURCE: &str = "exporter";

/// The prefix of the exporter's self-metrics.
pub(crate) const SELF_METRICS_PREFIX: &str = "multiproc_exporter_";

/// The upstreams' client and what each did last; one per server.
#[derive(Debug, Default)]
pub(crate) struct Upstreams {
    /// The client trusting Mozilla's roots.
    client: OnceLock<HttpClient>,
    /// Clients trusting a `ca_file`, by its path and bytes.
    ca_clients: Mutex<Vec<(PathBuf, Vec<u8>, HttpClient)>>,
    states: Mutex<HashMap<Arc<str>, State>>,
}

/// What one upstream did last, for its self-metrics and the log.
#[derive(Debug, Default)]
struct State {
    /// The last fetch's outcome: `None` before the first.
    last: Option<Result<(), FailReason>>,
    duration_seconds: f64,
    samples: usize,
    failures: HashMap<FailReason, u64>,
    /// The last collection's conflicts of this upstream's families.
    conflicts: Vec<SourceConflict>,
}

/// Fetches in flight for one collection.
#[derive(Debug)]
pub(crate) struct Pending {
    upstreams: Vec<Upstream>,
    /// Each fetch's position in `upstreams` and result, as they end.
    results: std::sync::mpsc::Receiver<(usize, Fetched)>,
    /// The longest any fetch may take.
    longest: Duration,
}

type Fetched = (Result<Answer, Failure>, Duration);

/// The deadline for an upstream with `timeout` when Prometheus gave
/// `scrape_timeout`: the timeout, capped by the scrape timeout minus a tenth
/// (at most 0.5 s) so that the answer reaches Prometheus in time.
pub(crate) fn deadline(timeout: Duration, scrape_timeout: Option<Duration>) -> Duration {
    match scrape_timeout {
        None => timeout,
        Some(scrape) => {
            let margin = (scrape / 10).min(Duration::from_millis(500));
            timeout
                .min(scrape.saturating_sub(margin))
                .max(Duration::from_millis(1))
        }
    }
}

impl Upstreams {
    /// Starts fetching every upstream on the current tokio runtime; `None`
    /// when there is none to fetch (or no runtime: then they are left out).
    pub(crate) fn start(
        &self,
        upstreams: &[Upstream],
        scrape_timeout: Option<Duration>,
    ) -> Option<Pending> {
        if upstreams.is_empty() {
            return None;
        }
        let Ok(handle) = tokio::runtime::Handle::try_current() else {
            tracing::error!(
                "No async runtime to fetch the upstreams with (a bug); leaving them out."
            );
            return None;
        };
        let jobs: Vec<(Upstream, Duration)> = upstreams
            .iter()
            .map(|u| (u.clone(), deadline(u.timeout, scrape_timeout)))
            .collect();
        let longest = jobs.iter().map(|(_, d)| *d).max().unwrap_or_default();
        let (send, results) = std::sync::mpsc::channel();
        for (i, (upstream, deadline)) in jobs.into_iter().enumerate() {
            let client = match self.client_for(&upstream) {
                Ok(client) => client,
                Err(detail) => {
                    let failure = Failure {
                        reason: FailReason::Connect,
                        detail,
                    };
                    let _ = send.send((i, (Err(failure), Duration::ZERO)));
                    continue;
                }
            };
            let send = send.clone();
            handle.spawn(async move {
                let fetched = fetch::fetch(&client, &upstream, deadline).await;
                // The collection may have stopped waiting (a bug): nothing to do.
                let _ = send.send((i, fetched));
            });
        }
        Some(Pending {
            upstreams: upstreams.to_vec(),
            results,
            longest,
        })
    }

    /// The client for `upstream`: the shared one, or one trusting its
    /// `ca_file` (read now, so that a renewed file is used).
    fn client_for(&self, upstream: &Upstream) -> Result<HttpClient, String> {
        let Some(path) = &upstream.ca_file else {
            if let Some(client) = self.client.get() {
                return Ok(client.clone());
            }
            let client = fetch::client(None)?;
            return Ok(self.client.get_or_init(|| client).clone());
        };
        let pem = std::fs::read(path)
            .map_err(|e| format!("cannot read ca_file {}: {e}", path.display()))?;
        let mut clients = self.ca_clients.lock().unwrap_or_else(|e| e.into_inner());
        if let Some((_, _, client)) = clients.iter().find(|(p, b, _)| p == path && *b == pem) {
            return Ok(client.clone());
        }
        let client = fetch::client(Some(&pem))?;
        clients.retain(|(p, _, _)| p != path);
        clients.push((path.clone(), pem, client.clone()));
        Ok(client)
    }

    /// Waits for the fetches, parses their answers and merges them after the
    /// directory's families; records each upstream's outcome and logs its
    /// changes. With the merge, whether every upstream answered (a failed
    /// one's series are missing from the collection, not gone).
    pub(crate) fn finish(
        &self,
        pending: Option<Pending>,
        directory: Vec<MetricFamily>,
    ) -> (Vec<MetricFamily>, bool) {
        let Some(pending) = pending else {
            // No upstream (any more): none to report.
            self.states
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .clear();
            return (directory, true);
        };
        // The fetches end by their deadlines; a second more is a safety net.
        let give_up = Instant::now() + pending.longest + Duration::from_secs(1);
        let mut fetched: Vec<Option<Fetched>> = pending.upstreams.iter().map(|_| None).collect();
        for _ in 0..fetched.len() {
            let wait = give_up.saturating_duration_since(Instant::now());
            match pending.results.recv_timeout(wait) {
                Ok((i, result)) => fetched[i] = Some(result),
                Err(_) => break,
            }
        }
        let mut sources = Vec::with_capacity(pending.upstreams.len());
        let mut reserved = Vec::new();
        let mut outcomes = Vec::with_capacity(pending.upstreams.len());
        for (i, upstream) in pending.upstreams.iter().enumerate() {
            let (result, duration) = match fetched.get(i).and_then(Option::as_ref) {
                Some((Ok(answer), duration)) => {
                    let format = ExpositionFormat::of_content_type(answer.content_type.as_deref());
                    let parsed = parse(&answer.body, format).map_err(|e| Failure {
                        reason: FailReason::Parse,
                        detail: format!("{format:?} body: {e}"),
                    });
                    (parsed, *duration)
                }
                Some((Err(failure), duration)) => (Err(failure.clone()), *duration),
                None => (
                    Err(Failure {
                        reason: FailReason::Timeout,
                        detail: "the fetch did not finish (a bug)".to_owned(),
                    }),
                    pending.longest,
                ),
            };
            let samples = result
                .as_ref()
                .map_or(0, |f| f.iter().map(|f| f.samples.len()).sum());
            outcomes.push((
                upstream,
                result.as_ref().map(|_| ()).map_err(Failure::clone),
                duration,
                samples,
            ));
            if let Ok(mut families) = result {
                // The exporter's own namespace: another exporter's
                // self-metrics would hide this one's.
                families.retain(|f| {
                    let own = f.name.starts_with(SELF_METRICS_PREFIX);
                    if own {
                        reserved.push(SourceConflict {
                            family: f.name.clone(),
                            source: upstream.name.clone(),
                            kept_from: Arc::from(EXPORTER_SOURCE),
                            reason: SourceConflictReason::NameClash,
                        });
                    }
                    !own
                });
                sources.push(SourceFamilies {
                    name: upstream.name.clone(),
                    families,
                });
            }
        }
        let answered = outcomes.iter().all(|(_, result, ..)| result.is_ok());
        let (merged, mut conflicts) =
            merge_sources(&Arc::from(DIRECTORY_SOURCE), directory, sources);
        conflicts.extend(reserved);
        self.record(outcomes, conflicts);
        (merged, answered)
    }

    /// Updates the states (dropping upstreams no longer configured) and logs
    /// what changed.
    fn record(
        &self,
        outcomes: Vec<(&Upstream, Result<(), Failure>, Duration, usize)>,
        conflicts: Vec<SourceConflict>,
    ) {
        let mut states = self.states.lock().unwrap_or_else(|e| e.into_inner());
        states.retain(|name, _| outcomes.iter().any(|(u, ..)| u.name == *name));
        for (upstream, result, duration, samples) in outcomes {
            let state = states.entry(upstream.name.clone()).or_default();
            let now = result.as_ref().map_err(|f| f.reason).copied();
            if state.last != Some(now) {
                match &result {
                    Ok(()) => tracing::info!(
                        upstream = %upstream.name,
                        url = %upstream.url,
                        samples,
                        "Upstream is up: its families are merged."
                    ),
                    Err(failure) => tracing::warn!(
                        upstream = %upstream.name,
                        url = %upstream.url,
                        reason = failure.reason.label(),
                        error = %failure.detail,
                        "Upstream left out of the scrape until it answers again."
                    ),
                }
            }
            state.last = Some(now);
            state.duration_seconds = duration.as_secs_f64();
            state.samples = samples;
            if let Err(reason) = now {
                *state.failures.entry(reason).or_default() += 1;
            }
            let mine: Vec<SourceConflict> = conflicts
                .iter()
                .filter(|c| c.source == upstream.name)
                .cloned()
                .collect();
            let changed = mine.len() != state.conflicts.len()
                || mine.iter().any(|c| !state.conflicts.contains(c));
            if changed && !mine.is_empty() {
                const SHOWN: usize = 10;
                let mut families: Vec<String> = mine
                    .iter()
                    .take(SHOWN)
                    .map(|c| {
                        format!(
                            "{} ({}, kept from {})",
                            c.family,
                            c.reason.label(),
                            c.kept_from
                        )
                    })
                    .collect();
                if mine.len() > SHOWN {
                    families.push(format!("and {} more", mine.len() - SHOWN));
                }
                tracing::warn!(
                    upstream = %upstream.name,
                    conflicts = mine.len(),
                    left_out = mine.iter().filter(|c| c.reason.left_out()).count(),
                    families = %families.join(", "),
                    "Families of the upstream conflict with an earlier source's; all but help_mismatch are left out (see docs/sources.md)."
                );
            }
            state.conflicts = mine;
        }
    }

    /// The upstreams' self-metrics (see `docs/metrics.md`), nothing when
    /// none has been fetched.
    pub(crate) fn families(&self) -> Vec<MetricFamily> {
        let states = self.states.lock().unwrap_or_else(|e| e.into_inner());
        if states.is_empty() {
            return Vec::new();
        }
        let mut names: Vec<&Arc<str>> = states.keys().collect();
        names.sort();
        let label = |name: &Arc<str>| (Arc::from("upstream"), name.clone());
        let one = |name: &Arc<str>| Labels::new([label(name)]);
        let two = |name: &Arc<str>, reason: &str| {
            Labels::new([label(name), (Arc::from("reason"), Arc::from(reason))])
        };
        let mut up = Vec::new();
        let mut duration = Vec::new();
        let mut samples = Vec::new();
        let mut last_error = Vec::new();
        let mut failures = Vec::new();
        let mut conflicts = Vec::new();
        for name in names {
            let state = &states[name];
            let is_up = matches!(state.last, Some(Ok(())));
            up.push((one(name), f64::from(u8::from(is_up))));
            duration.push((one(name), state.duration_seconds));
            samples.push((one(name), state.samples as f64));
            for reason in FailReason::ALL {
                let current = state.last == Some(Err(reason));
                last_error.push((two(name, reason.label()), f64::from(u8::from(current))));
                let count = state.failures.get(&reason).copied().unwrap_or(0);
                failures.push((two(name, reason.label()), count as f64));
            }
            for reason in SourceConflictReason::ALL {
                let count = state
                    .conflicts
                    .iter()
                    .filter(|c| c.reason == reason)
                    .count();
                conflicts.push((two(name, reason.label()), count as f64));
            }
        }
        vec![
            family(
                "multiproc_exporter_upstream_up",
                "Whether the upstream's last fetch succeeded and parsed (1) or it was left out of the scrape (0).",
                MetricType::Gauge,
                up,
            ),
            family(
                "multiproc_exporter_upstream_scrape_duration_seconds",
                "How long the upstream's last fetch took.",
                MetricType::Gauge,
                duration,
            ),
            family(
                "multiproc_exporter_upstream_samples",
                "Samples the upstream's last answer held (0 when it was left out).",
                MetricType::Gauge,
                samples,
            ),
            family(
                "multiproc_exporter_upstream_last_error",
                "1 for the reason the upstream's last fetch failed, 0 for the other reasons (all 0 when it succeeded).",
                MetricType::Gauge,
                last_error,
            ),
            family(
                "multiproc_exporter_upstream_failures",
                "Fetches of the upstream that failed, by reason.",
                MetricType::Counter,
                failures,
            ),
            family(
                "multiproc_exporter_upstream_conflicts",
                "The upstream's families that conflicted with an earlier source's in the last scrape, by reason (all but help_mismatch were left out).",
                MetricType::Gauge,
                conflicts,
            ),
        ]
    }
}

fn family(
    name: &str,
    help: &str,
    metric_type: MetricType,
    series: Vec<(Labels, f64)>,
) -> MetricFamily {
    let sample_name: Arc<str> = match metric_type {
        MetricType::Counter => format!("{name}_total").into(),
        _ => name.into(),
    };
    MetricFamily {
        name: name.into(),
        help: help.into(),
        metric_type,
        samples: series
            .into_iter()
            .map(|(labels, value)| Sample {
                name: sample_name.clone(),
                labels,
                value,
            })
            .collect(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn upstream(name: &str) -> Upstream {
        Upstream {
            name: name.into(),
            url: "http://127.0.0.1:1/metrics".into(),
            timeout: Duration::from_secs(1),
            max_body_bytes: 1,
            ca_file: None,
        }
    }

    #[test]
    fn self_metrics_follow_each_upstream_and_go_with_it() {
        let upstreams = Upstreams::default();
        assert!(upstreams.families().is_empty());
        let (a, b) = (upstream("a"), upstream("b"));
        let failure = Failure {
            reason: FailReason::Parse,
            detail: "x".to_owned(),
        };
        for _ in 0..2 {
            upstreams.record(
                vec![
                    (&a, Ok(()), Duration::from_millis(250), 3),
                    (&b, Err(failure.clone()), Duration::from_millis(5), 0),
                ],
                vec![SourceConflict {
                    family: "f".into(),
                    source: "a".into(),
                    kept_from: DIRECTORY_SOURCE.into(),
                    reason: SourceConflictReason::DuplicateSeries,
                }],
            );
        }
        let families = upstreams.families();
        let value = |family: &str, labels: &[(&str, &str)]| {
            let family = families.iter().find(|f| &*f.name == family).unwrap();
            family
                .samples
                .iter()
                .find(|s| labels.iter().all(|(n, v)| s.labels.get(n) == Some(*v)))
                .map(|s| s.value)
        };
        assert_eq!(
            value("multiproc_exporter_upstream_up", &[("upstream", "a")]),
            Some(1.0)
        );
        assert_eq!(
            value("multiproc_exporter_upstream_up", &[("upstream", "b")]),
            Some(0.0)
        );
        assert_eq!(
            value(
                "multiproc_exporter_upstream_scrape_duration_seconds",
                &[("upstream", "a")]
            ),
            Some(0.25)
        );
        let b_parse = [("upstream", "b"), ("reason", "parse")];
        assert_eq!(
            value("multiproc_exporter_upstream_last_error", &b_parse),
            Some(1.0)
        );
        assert_eq!(
            value("multiproc_exporter_upstream_failures", &b_parse),
            Some(2.0)
        );
        assert_eq!(
            value(
                "multiproc_exporter_upstream_conflicts",
                &[("upstream", "a"), ("reason", "duplicate_series")]
            ),
            Some(1.0)
        );
        // Every reason is present for every upstream.
        let errors = families
            .iter()
            .find(|f| &*f.name == "multiproc_exporter_upstream_last_error")
            .unwrap();
        assert_eq!(errors.samples.len(), 2 * FailReason::ALL.len());
        // An upstream removed from the configuration goes; so do all when
        // none is left.
        upstreams.record(vec![(&a, Ok(()), Duration::ZERO, 3)], vec![]);
        assert_eq!(upstreams.states.lock().unwrap().len(), 1);
        let (kept, answered) = upstreams.finish(None, Vec::new());
        assert!(kept.is_empty() && answered);
        assert!(upstreams.families().is_empty());
    }

    #[test]
    fn deadlines_leave_prometheus_time_to_receive_the_answer() {
        let s = Duration::from_secs;
        assert_eq!(deadline(s(5), None), s(5));
        assert_eq!(deadline(s(5), Some(s(10))), s(5));
        assert_eq!(deadline(s(5), Some(s(2))), Duration::from_millis(1800));
        assert_eq!(deadline(s(30), Some(s(10))), Duration::from_millis(9500));
        assert_eq!(
            deadline(s(5), Some(Duration::ZERO)),
            Duration::from_millis(1)
        );
    }
}
