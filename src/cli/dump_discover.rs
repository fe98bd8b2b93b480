//! `multiproc-exporter dump --discover.processes`: what the node agent would
//! serve, printed once (issue 36). One scan of `/proc`, then every directory
//! found is read and labelled as `serve --discover.processes` reads and
//! labels it; standard error says what was found: each pod (or directory)
//! with its labels, directories, mount namespaces and holders, then what the
//! scan could not do. `kubectl exec` on the agent can run only the binary
//! (the image has no shell), so this is the way to ask on the node.

use crate::pipeline::discovered::{DiscoveryReport, TargetState};
use crate::pipeline::Gathered;

/// Prints to standard error what discovery found; `false` when nothing at
/// all could be read (no directory found, or none readable), which `dump`
/// answers with exit status 1 as it does for inputs it cannot read.
pub(crate) fn summarize(gathered: &Gathered) -> bool {
    let Some(report) = &gathered.discovery else {
        return true;
    };
    for line in summary_lines(report) {
        eprintln!("multiproc-exporter: {line}");
    }
    let readable = report
        .targets
        .iter()
        .filter(|t| t.state != TargetState::Unreadable)
        .count();
    if report.targets.is_empty() {
        eprintln!("multiproc-exporter: nothing to read: no process on this node holds prometheus_client multiprocess files open (is this the host's pid namespace, with CAP_SYS_PTRACE?)");
        return false;
    }
    if readable == 0 {
        eprintln!(
            "multiproc-exporter: nothing to read: none of the directories found could be read"
        );
        return false;
    }
    true
}

/// The lines of the summary, without the program's name.
fn summary_lines(report: &DiscoveryReport) -> Vec<String> {
    let mut lines = Vec::new();
    let (processes, descriptors) = report
        .refreshes
        .last()
        .map_or((0, 0), |r| (r.processes, r.descriptors));
    let parts: std::collections::BTreeSet<&str> = report.targets.iter().map(|t| &*t.part).collect();
    lines.push(format!(
        "found {} directories ({} label sets) among {processes} processes ({descriptors} descriptors)",
        report.targets.len(),
        parts.len(),
    ));
    for target in &report.targets {
        let labels: Vec<String> = target
            .labels
            .iter()
            .map(|(n, v)| format!("{n}={v:?}"))
            .collect();
        let holders: Vec<String> = target.holders.iter().map(u32::to_string).collect();
        lines.push(format!(
            "  {{{}}} {} (mount namespace {}, holders {}, {})",
            labels.join(","),
            target.dir.display(),
            target
                .mount_ns
                .map_or_else(|| "unknown".to_owned(), |ns| ns.to_string()),
            if holders.is_empty() {
                "none".to_owned()
            } else {
                holders.join(" ")
            },
            target.state.label(),
        ));
    }
    if report.processes_unreadable > 0 {
        lines.push(format!(
            "{} processes' descriptors could not be read (CAP_SYS_PTRACE missing?)",
            report.processes_unreadable
        ));
    }
    for problem in &report.problems {
        if problem.not_found {
            lines.push(format!(
                "{} (not a Kubernetes node? pods are not named)",
                problem.message
            ));
        } else {
            lines.push(problem.message.clone());
        }
    }
    lines
}
