//! The node agent in the model (`pipeline::discovered`): when it scans,
//! which pods are its targets, how long a target no writer holds is kept,
//! and what each target's collector makes of its writers.

use std::collections::{BTreeMap, BTreeSet};

use super::{Asker, Expected, Model, Seen, Shape, EPSILON};

/// How often the node agent scans (`--discover.interval`'s default), and
/// how early it may (a tenth of it, a second at most).
const SCAN_INTERVAL: f64 = 10.0;
const SCAN_SLACK: f64 = 1.0;
/// How often the node agent checks whether a holder of its last scan
/// exited, at most (`discovered::HOLDER_CHECK_INTERVAL`).
const HOLDER_CHECK: f64 = 1.0;
/// How long the node agent keeps a directory no process holds when its pod
/// is not known (`--discover.linger`'s default).
const LINGER: f64 = 300.0;

/// What the node agent keeps (`pipeline::discovered`): its scans'
/// schedule, its targets and each target's collector.
#[derive(Clone, Debug, Default)]
pub(super) struct Agent {
    /// When it last scanned (boot clock).
    last_scan: Option<f64>,
    /// When it last checked its holders.
    last_check: f64,
    /// Its targets (pods), each with the writers that held its files at
    /// the last scan.
    targets: BTreeMap<usize, Vec<usize>>,
    /// When a scan last saw each target held.
    last_held: BTreeMap<usize, f64>,
    /// What each target's collector knows (kept while the target is).
    seen: BTreeMap<usize, Seen>,
}

impl Model {
    /// Whether the node agent scans at this collection, by its schedule: at
    /// its first, once its interval passed, or when a holder of its last
    /// scan exited (checked at most once a second).
    fn scan_due(&mut self) -> bool {
        let now = self.boot;
        let Some(last) = self.agent.last_scan else {
            return true;
        };
        if now - last + SCAN_SLACK >= SCAN_INTERVAL - EPSILON {
            return true;
        }
        if now - self.agent.last_check >= HOLDER_CHECK - EPSILON {
            self.agent.last_check = now;
            return self
                .agent
                .targets
                .values()
                .flatten()
                .any(|&w| !self.writers[w].alive);
        }
        false
    }

    /// The node agent asks (`pipeline::discovered`): it scans when due
    /// ([`Self::scan_due`]): a pod some live writer holds files of is a
    /// target (named from the kubelet's log tree in Kubernetes), held by
    /// those writers; a target no writer holds is kept while its pod exists
    /// and dropped once it is gone in Kubernetes, kept for the linger after
    /// a scan last saw it held outside it. Then each target is read by a
    /// collector of its own, kept while the
    /// target is, leaving out the live gauges of the writers it finds dead
    /// by a directory's rules as a collector that sees every pid and
    /// descriptor makes them (a pod removed since the scan is read through
    /// its kept descriptor: nothing is left in it). It runs on the host
    /// (`hostPID`, `CAP_SYS_PTRACE`), whatever the shape of the sidecar
    /// exporter beside it: it sees every pod's writers.
    pub(super) fn ask_discovered(&mut self) {
        if self.scan_due() {
            self.agent.last_scan = Some(self.boot);
            self.agent.last_check = self.boot;
            for pod in 0..self.pods.len() {
                let holders: Vec<usize> = self.pods[pod]
                    .writers
                    .iter()
                    .copied()
                    .filter(|&w| self.writers[w].alive)
                    .collect();
                let since_held = self
                    .agent
                    .last_held
                    .get(&pod)
                    .map_or(f64::INFINITY, |&at| self.boot - at);
                let gone = if self.kubernetes {
                    self.pods[pod].removed
                } else {
                    since_held >= LINGER - EPSILON
                };
                if !holders.is_empty() {
                    self.agent.targets.insert(pod, holders);
                    self.agent.last_held.insert(pod, self.boot);
                } else if gone {
                    self.agent.targets.remove(&pod);
                    self.agent.seen.remove(&pod);
                    self.agent.last_held.remove(&pod);
                } else if let Some(held) = self.agent.targets.get_mut(&pod) {
                    held.clear();
                }
            }
        }
        let mut first = BTreeMap::new();
        let read: Vec<usize> = self.agent.targets.keys().copied().collect();
        for &pod in &read {
            for &w in &self.pods[pod].writers {
                let writer = &mut self.writers[w];
                first.insert(w, *writer.first_offset.get_or_insert(self.wall_offset));
            }
        }
        let mut dropped_gauges = BTreeSet::new();
        for &pod in &read {
            let mut seen = self.agent.seen.remove(&pod).unwrap_or_default();
            let writers = self.pods[pod].writers.clone();
            let agent_view = Shape::SharedAuto;
            dropped_gauges.extend(self.collector_verdicts(agent_view, &writers, &first, &mut seen));
            self.agent.seen.insert(pod, seen);
        }
        self.expected = Some(Expected {
            asker: Asker::Discovered,
            runs: Vec::new(),
            dropped_gauges,
            pods: read,
        });
    }
}
