//! `serve --discover.processes` end to end, as root, on the fake pods of
//! [`super::harness`] (real prometheus_client writers in their own mount and
//! pid namespaces, a private `tmpfs` each at the same path, kubelet-named
//! cgroups, a `/var/log/pods`-like tree):
//!
//! * each pod's series, selected by its labels, are prometheus_client's
//!   output for its directory, labelled with its namespace, pod and container;
//! * two pods whose writers have the same pod-local pid stay apart, in
//!   liveness and `process_*` too; a scrape that finds a writer gone scans
//!   again at once;
//! * a writer started later in a pod is live at once;
//! * a pod whose writers exit keeps its counters while its log directory
//!   exists, and leaves the output (no stale series) when it goes;
//! * a directory the exporter may not read is logged and counted, and the
//!   others are served;
//! * the configuration (naming, `per_writer`, constant labels, filter)
//!   applies to each discovered directory.
//!
//! Each test names its pods in a namespace of its own: the exporters of
//! concurrent tests discover every test's pods.

use std::collections::BTreeMap;
use std::fs::File;
use std::os::fd::AsRawFd as _;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

use multiproc_exporter::source::writers::procfs;

use super::harness::*;
use crate::support::{
    self, python, python_exposition, sample_value, wait_for, write_counter, Exporter, Launch,
};

/// Labels sorted by name, and the value as written.
type SampleLine = (String, Vec<(String, String)>, String);

/// One family of a text exposition: its `# HELP` and `# TYPE` lines and its
/// samples.
#[derive(Debug, Clone, PartialEq)]
struct Family {
    head: Vec<String>,
    samples: Vec<SampleLine>,
}

/// A sample line's name, labels and value.
fn parse_sample(line: &str) -> SampleLine {
    let (series, value) = line.rsplit_once(' ').expect("a value");
    let Some((name, rest)) = series.split_once('{') else {
        return (series.to_owned(), Vec::new(), value.to_owned());
    };
    let mut labels = Vec::new();
    let mut rest = rest.strip_suffix('}').expect("closing brace");
    while !rest.is_empty() {
        let (label, after) = rest.split_once("=\"").expect("label=\"");
        let mut end = 0;
        let bytes = after.as_bytes();
        while bytes[end] != b'"' {
            end += if bytes[end] == b'\\' { 2 } else { 1 };
        }
        labels.push((label.to_owned(), after[..end].to_owned()));
        rest = after[end + 1..].trim_start_matches(',');
    }
    labels.sort();
    (name.to_owned(), labels, value.to_owned())
}

/// The families of a text exposition whose samples carry every label of
/// `select`, with only those samples and without those labels; families
/// left empty, and the writers' `process_*` (which prometheus_client does not
/// serve), left out.
fn selected(text: &str, select: &[(&str, &str)]) -> BTreeMap<String, Family> {
    let mut out: BTreeMap<String, Family> = BTreeMap::new();
    let mut current = String::new();
    for line in text.lines() {
        if let Some(rest) = line.strip_prefix("# HELP ") {
            current = rest.split(' ').next().unwrap_or_default().to_owned();
            out.entry(current.clone()).or_insert(Family {
                head: Vec::new(),
                samples: Vec::new(),
            });
        }
        if line.starts_with('#') {
            if let Some(family) = out.get_mut(&current) {
                family.head.push(line.to_owned());
            }
            continue;
        }
        let (name, mut labels, value) = parse_sample(line);
        let wanted = select
            .iter()
            .all(|(n, v)| labels.iter().any(|(ln, lv)| ln == n && lv == v));
        if !wanted {
            continue;
        }
        labels.retain(|(n, _)| !select.iter().any(|(s, _)| s == n));
        if let Some(family) = out.get_mut(&current) {
            family.samples.push((name, labels, value));
        }
    }
    out.retain(|name, family| !family.samples.is_empty() && !name.starts_with("process_"));
    out
}

/// The directory of a running pod, held open by this test so that Python can
/// read it (`/proc/<this pid>/fd/<n>`) after the pod's namespace is gone.
pub(super) struct HeldDir(File);

impl HeldDir {
    pub(super) fn of(pod: &Pod, metrics: &Path) -> HeldDir {
        let pid = pod.pids()[0];
        let relative = metrics.strip_prefix("/").unwrap();
        HeldDir(File::open(Path::new(&format!("/proc/{pid}/root")).join(relative)).unwrap())
    }

    fn path(&self) -> PathBuf {
        PathBuf::from(format!(
            "/proc/{}/fd/{}",
            std::process::id(),
            self.0.as_raw_fd()
        ))
    }

    /// prometheus_client's text for the directory, as it lists it now.
    fn python_text(&self, python: &Path) -> String {
        let dir = self.path();
        let files = support::listing_order(&dir)
            .into_iter()
            .map(|name| dir.join(name))
            .collect();
        python_exposition(python, files).text
    }
}

/// A pod's labels as the exporter adds them by default.
fn labels_of(pod: &Pod) -> [(&'static str, &'static str); 3] {
    [
        ("namespace", pod.namespace),
        ("pod", pod.name),
        ("container", pod.container),
    ]
}

/// Asserts that the pod's series in `text` are prometheus_client's for its
/// directory, and that every sample of the pod has its container.
#[track_caller]
pub(super) fn assert_pod_served(text: &str, pod: &Pod, dir: &HeldDir, python: &Path) {
    let expected = selected(&dir.python_text(python), &[]);
    let actual = selected(text, &labels_of(pod));
    assert!(!expected.is_empty());
    assert_eq!(actual, expected, "pod {}:\n{text}", pod.name);
    let everything = selected(text, &[("namespace", pod.namespace), ("pod", pod.name)]);
    for family in everything.values() {
        for (_, labels, _) in &family.samples {
            assert!(
                labels
                    .iter()
                    .any(|(n, v)| n == "container" && v == pod.container),
                "{labels:?}"
            );
        }
    }
}

/// The value of `series` (`name{labels}` with the labels sorted) for a pod.
pub(super) fn pod_value(
    text: &str,
    name: &str,
    pod: &Pod,
    extra: &[(&str, &str)],
) -> Option<String> {
    let mut select: Vec<(&str, &str)> = labels_of(pod).to_vec();
    select.extend_from_slice(extra);
    text.lines()
        .filter(|l| !l.starts_with('#'))
        .map(parse_sample)
        .find(|(n, labels, _)| {
            n == name
                && labels.len() == select.len()
                && select
                    .iter()
                    .all(|(k, v)| labels.iter().any(|(ln, lv)| ln == k && lv == v))
        })
        .map(|(_, _, value)| value)
}

/// The `pid` labels of a pod's `process_start_time_seconds`, with values.
fn process_starts(text: &str, pod: &Pod) -> BTreeMap<String, f64> {
    text.lines()
        .filter(|l| l.starts_with("process_start_time_seconds{"))
        .map(parse_sample)
        .filter(|(_, labels, _)| {
            labels_of(pod)
                .iter()
                .all(|(k, v)| labels.iter().any(|(ln, lv)| ln == k && lv == v))
        })
        .map(|(_, labels, value)| {
            let pid = labels.iter().find(|(n, _)| n == "pid").unwrap().1.clone();
            (pid, value.parse().unwrap())
        })
        .collect()
}

/// A pod's host pid of pod-local pid `ns_pid`.
fn host_pid(pod: &Pod, ns_pid: u32) -> u32 {
    pod.writers
        .iter()
        .map(|w| w.pid)
        .find(|&pid| procfs::innermost_pid(&procfs::process_dir(pid)) == Some(ns_pid))
        .expect("a writer with that pid")
}

/// A work directory with `metrics` (the pods' directory path) and a log tree.
pub(super) struct Work {
    _tmp: tempfile::TempDir,
    pub(super) metrics: PathBuf,
    pub(super) logs: PathBuf,
    /// `logs/pods`, as text.
    pods: String,
}

impl Work {
    pub(super) fn new() -> Work {
        let tmp = tempfile::tempdir().unwrap();
        let metrics = tmp.path().join("metrics");
        let logs = tmp.path().join("logs");
        std::fs::create_dir_all(&metrics).unwrap();
        std::fs::create_dir_all(logs.join("pods")).unwrap();
        let pods = logs.join("pods").to_str().unwrap().to_owned();
        Work {
            _tmp: tmp,
            metrics,
            logs,
            pods,
        }
    }

    /// `--discover.processes` over this log tree, with `extra` flags.
    pub(super) fn args<'a>(&'a self, extra: &[&'a str]) -> Vec<&'a str> {
        let mut args = vec!["--discover.processes", "--discover.pod-log-dir", &self.pods];
        args.extend_from_slice(extra);
        args
    }

    pub(super) fn pod(&self, python: &Path, spec: PodSpec) -> Option<Pod> {
        or_skip(Pod::start(python, &self.logs, &self.metrics, spec))
    }
}

/// A pod spec in namespace `namespace`.
pub(super) fn spec(
    driver: Driver,
    names: (&'static str, &'static str, &'static str),
    containers: &'static [&'static str],
    writers: usize,
) -> PodSpec {
    PodSpec {
        driver,
        names,
        containers,
        writers,
        tmpfs: Some("mode=0755"),
    }
}

#[test]
fn each_pod_is_served_as_prometheus_client_merges_it_and_same_pids_stay_apart() {
    if !privileged() {
        return;
    }
    let _beside = super::beside_others();
    let Some(python) = python() else { return };
    let work = Work::new();
    let ns = "disc-apart";
    let Some(mut a) = work.pod(
        &python,
        spec(
            Driver::Cgroupfs,
            (ns, "vllm-a", "vllm"),
            &["proxy", "vllm"],
            2,
        ),
    ) else {
        return;
    };
    let Some(b) = work.pod(
        &python,
        spec(Driver::Systemd, (ns, "vllm-b", "server"), &["server"], 1),
    ) else {
        return;
    };
    assert_eq!(a.ns_pids()[0], b.ns_pids()[0]);
    let (dir_a, dir_b) = (
        HeldDir::of(&a, &work.metrics),
        HeldDir::of(&b, &work.metrics),
    );
    // Scans only at start and when a writer is found gone.
    let exporter = Exporter::start(&work.args(&["--discover.interval", "1h"]));
    let text = exporter.metrics();
    assert_pod_served(&text, &a, &dir_a, &python);
    assert_pod_served(&text, &b, &dir_b, &python);
    assert_eq!(
        pod_value(&text, "app_requests_total", &a, &[]).as_deref(),
        Some("6.0")
    );
    assert_eq!(
        pod_value(&text, "app_in_flight", &a, &[]).as_deref(),
        Some("2.0")
    );
    // Each pod's pid 2 is its own process: its process_* values are read
    // from that process, not the other pod's.
    let (starts_a, starts_b) = (process_starts(&text, &a), process_starts(&text, &b));
    let pid_texts =
        |pod: &Pod| -> Vec<String> { pod.ns_pids().iter().map(u32::to_string).collect() };
    assert_eq!(starts_a.keys().cloned().collect::<Vec<_>>(), pid_texts(&a));
    assert_eq!(starts_b.keys().cloned().collect::<Vec<_>>(), pid_texts(&b));
    let shared = b.ns_pids()[0];
    let shared_text = shared.to_string();
    let start = |pod: &Pod, ns_pid| {
        procfs::start_time(&procfs::process_dir(host_pid(pod, ns_pid))).unwrap()
    };
    let (real_a, real_b) = (start(&a, shared), start(&b, shared));
    assert!((real_b - real_a).abs() > 0.05, "{real_a} {real_b}");
    let served = starts_b[&shared_text] - starts_a[&shared_text];
    assert!(
        (served - (real_b - real_a)).abs() < 0.05,
        "{served} vs {}",
        real_b - real_a
    );
    for pod in [&a, &b] {
        let found = exporter.logs_with("Found a multiprocess directory; serving it.");
        let part = format!("{}/{}/{}", pod.namespace, pod.name, pod.container);
        assert!(
            found.iter().any(|l| l["part"].as_str() == Some(&part)),
            "{found:#?}"
        );
    }
    let scans = |text: &str| sample_value(text, "multiproc_exporter_discovery_scans_total");
    assert!(scans(&exporter.metrics()) >= Some(1.0));

    // Pod A's writer with that pid exits; pod B's lives on. The next scrape
    // finds the holder gone and scans again at once.
    let index = a
        .writers
        .iter()
        .position(|w| procfs::innermost_pid(&procfs::process_dir(w.pid)) == Some(shared))
        .unwrap();
    let other = a.ns_pids().into_iter().find(|p| *p != shared).unwrap();
    a.writers.remove(index).exit();
    let text = wait_for("pod A's writer to be found dead", || {
        let text = exporter.metrics();
        (pod_value(&text, "app_in_flight", &a, &[]).as_deref() == Some("1.0")).then_some(text)
    });
    // (Other tests' writers exiting may have caused scans too.)
    wait_for("a scan for the writer gone", || {
        (scans(&exporter.metrics()) >= Some(2.0)).then_some(())
    });
    exporter.sync_logs();
    assert!(exporter
        .logs_with("Scanned /proc for multiprocess directories.")
        .iter()
        .any(|l| l["cause"] == "holder_gone"));
    assert_eq!(
        pod_value(&text, "app_in_flight", &b, &[]).as_deref(),
        Some("1.0")
    );
    // Its counter stays, as prometheus_client keeps it.
    assert_eq!(
        pod_value(&text, "app_requests_total", &a, &[]).as_deref(),
        Some("6.0")
    );
    let other_text = other.to_string();
    assert_eq!(
        process_starts(&text, &a).keys().collect::<Vec<_>>(),
        [&other_text]
    );
    assert_eq!(
        process_starts(&text, &b).keys().collect::<Vec<_>>(),
        [&shared_text]
    );
    // A dead writer's `all` gauge stays, as prometheus_client keeps it.
    let python_text = dir_a.python_text(&python);
    let expected = python_text
        .lines()
        .find(|l| l.starts_with(&format!("app_workers{{pid=\"{shared}\"}} ")))
        .map(|l| l.rsplit(' ').next().unwrap().to_owned());
    assert!(expected.is_some(), "{python_text}");
    assert_eq!(
        pod_value(&text, "app_workers", &a, &[("pid", &shared_text)]),
        expected
    );
}

#[test]
fn a_writer_started_later_in_a_pod_is_live_at_once() {
    if !privileged() {
        return;
    }
    let _beside = super::beside_others();
    let Some(python) = python() else { return };
    let work = Work::new();
    let Some(mut pod) = work.pod(
        &python,
        spec(
            Driver::Cgroupfs,
            ("disc-later", "vllm", "vllm"),
            &["vllm"],
            1,
        ),
    ) else {
        return;
    };
    let exporter = Exporter::start(&work.args(&[]));
    let text = exporter.metrics();
    assert_eq!(
        pod_value(&text, "app_in_flight", &pod, &[]).as_deref(),
        Some("1.0")
    );
    // The exporter has looked at the pod's pids; a new process starts.
    pod.add_writer(&python, &work.metrics);
    let text = wait_for("the new writer's files", || {
        let text = exporter.metrics();
        (pod_value(&text, "app_requests_total", &pod, &[]).as_deref() == Some("6.0"))
            .then_some(text)
    });
    assert_eq!(
        pod_value(&text, "app_in_flight", &pod, &[]).as_deref(),
        Some("2.0"),
        "the new writer is taken for dead:\n{text}"
    );
    assert_eq!(process_starts(&text, &pod).len(), 2, "{text}");
    let dir = HeldDir::of(&pod, &work.metrics);
    assert_pod_served(&text, &pod, &dir, &python);
}

#[test]
fn a_pod_whose_writers_exit_stays_until_its_log_directory_goes() {
    if !privileged() {
        return;
    }
    let _beside = super::beside_others();
    let Some(python) = python() else { return };
    let work = Work::new();
    let ns = "disc-gone";
    let Some(mut a) = work.pod(
        &python,
        spec(Driver::Cgroupfs, (ns, "vllm-a", "vllm"), &["vllm"], 2),
    ) else {
        return;
    };
    let Some(b) = work.pod(
        &python,
        spec(Driver::Systemd, (ns, "vllm-b", "vllm"), &["vllm"], 1),
    ) else {
        return;
    };
    let dir_a = HeldDir::of(&a, &work.metrics);
    let exporter = Exporter::start(&work.args(&["--discover.interval", "1s"]));
    let before = exporter.metrics();
    assert_pod_served(&before, &a, &dir_a, &python);

    // Every writer of pod A exits, and its sandbox: its mount namespace is
    // gone. Its counters and sum gauges stay, its live gauges and process_*
    // go, while its log directory exists.
    let ns_a = a.sandbox.as_ref().unwrap().mount_ns();
    for writer in a.writers.drain(..) {
        writer.exit();
    }
    a.sandbox = None;
    wait_for("pod A's mount namespace to go", || {
        (!namespace_alive(ns_a)).then_some(())
    });
    let text = wait_for("pod A's writers to be found dead", || {
        let text = exporter.metrics();
        pod_value(&text, "app_in_flight", &a, &[])
            .is_none()
            .then_some(text)
    });
    for family in ["app_requests_total", "app_cache_objects"] {
        assert_eq!(
            pod_value(&text, family, &a, &[]),
            pod_value(&before, family, &a, &[]),
            "{family}"
        );
    }
    assert!(process_starts(&text, &a).is_empty(), "{text}");
    wait_for("pod A's target to be kept without holders", || {
        let text = exporter.metrics();
        (sample_value(
            &text,
            "multiproc_exporter_discovery_targets{state=\"pod_exists\"}",
        ) >= Some(1.0))
        .then_some(())
    });

    // Its pod is deleted: its series leave the output; pod B stays.
    std::fs::remove_dir_all(a.log_dir(&work.logs)).unwrap();
    let text = wait_for("pod A to leave the output", || {
        let text = exporter.metrics();
        (!text.contains("pod=\"vllm-a\"")).then_some(text)
    });
    assert_eq!(
        pod_value(&text, "app_requests_total", &b, &[]).as_deref(),
        Some("3.0")
    );
    assert!(
        sample_value(
            &text,
            "multiproc_exporter_discovery_targets_dropped_total{reason=\"pod_gone\"}"
        ) >= Some(1.0),
        "{text}"
    );
    exporter.sync_logs();
    let dropped =
        exporter.logs_with("Dropped a discovered directory; its series are no longer served.");
    assert!(
        dropped
            .iter()
            .any(|l| l["part"].as_str() == Some("disc-gone/vllm-a/vllm")
                && l["reason_label"].as_str() == Some("pod_gone")),
        "{dropped:#?}"
    );
}

#[test]
fn a_directory_the_exporter_may_not_read_is_reported_and_the_others_served() {
    if !privileged() || support::tool("setpriv").is_none() {
        return;
    }
    let _beside = super::beside_others();
    let Some(python) = python() else { return };
    let work = Work::new();
    let ns = "disc-denied";
    let Some(open) = work.pod(
        &python,
        spec(Driver::Cgroupfs, (ns, "open", "vllm"), &["vllm"], 1),
    ) else {
        return;
    };
    // Root writers in a directory of another user that only that user may
    // enter: the exporter, root with CAP_SYS_PTRACE alone, finds them but
    // cannot read their files.
    let Some(closed) = work.pod(
        &python,
        PodSpec {
            tmpfs: Some("mode=0700,uid=4321"),
            ..spec(Driver::Cgroupfs, (ns, "closed", "vllm"), &["vllm"], 1)
        },
    ) else {
        return;
    };
    let dir = HeldDir::of(&open, &work.metrics);
    let launch = Launch {
        wrapper: ["setpriv", "--bounding-set=-all,+sys_ptrace", "--"]
            .map(std::ffi::OsString::from)
            .to_vec(),
        ..Launch::default()
    };
    let exporter = Exporter::launch(&work.args(&[]), &launch);
    let text = exporter.metrics();
    assert_pod_served(&text, &open, &dir, &python);
    assert!(!text.contains("pod=\"closed\""), "{text}");
    assert!(
        sample_value(
            &text,
            "multiproc_exporter_discovery_problems{reason=\"directory_unreadable\"}"
        ) >= Some(1.0),
        "{text}"
    );
    assert!(
        sample_value(
            &text,
            "multiproc_exporter_discovery_targets{state=\"unreadable\"}"
        ) >= Some(1.0),
        "{text}"
    );
    let closed_ns = closed.sandbox.as_ref().unwrap().mount_ns().to_string();
    exporter.metrics();
    exporter.sync_logs();
    let lines: Vec<_> = exporter
        .logs_with("Discovery cannot use a directory it found; the others are served.")
        .into_iter()
        .filter(|l| {
            l["error"]
                .as_str()
                .is_some_and(|e| e.contains(&closed_ns) && e.contains("ermission denied"))
        })
        .collect();
    assert_eq!(lines.len(), 1, "logged once: {:#?}", exporter.logs());
    assert_eq!(lines[0]["reason_label"], "directory_unreadable");
    let missing = exporter.logs_with(
        "Missing privileges for --discover.processes: without CAP_SYS_PTRACE and CAP_DAC_READ_SEARCH in the effective set, other users' processes cannot be scanned nor their directories read; only what this user may read is served (see multiproc_exporter_discovery_processes_unreadable and docs/configuration.md).",
    );
    assert_eq!(missing.len(), 1, "{:#?}", exporter.logs());
    assert_eq!(missing[0]["missing"], "CAP_DAC_READ_SEARCH");
}

/// Discovery without pod names, every file's writer taken as live (the
/// tests' files name pids that are not theirs).
pub(super) const OUTSIDE_KUBERNETES: [&str; 5] = [
    "--discover.processes",
    "--discover.pod-log-dir",
    "",
    "--writers.liveness",
    "off",
];

/// A process running `bin` (a copy of `sleep`, named as the caller wants
/// its command) holding `files` open read-write.
fn holder(bin: &Path, files: &[&Path]) -> Child {
    let opens: String = (0..files.len())
        .map(|i| format!("{}<>\"${}\" ", i + 3, i + 1))
        .collect();
    Command::new("sh")
        .arg("-c")
        .arg(format!("exec {opens}; exec \"$0\" 600"))
        .arg(bin)
        .args(files)
        .stdin(Stdio::null())
        .spawn()
        .unwrap()
}

/// A copy of `sleep` in `dir` with a command name of its own.
pub(super) fn named_sleep(dir: &Path) -> (PathBuf, String) {
    let name = format!("mpe{}", &hex(9));
    let bin = dir.join(&name);
    std::fs::copy("/bin/sleep", &bin).unwrap();
    (bin, name)
}

/// Kills and reaps `children`.
pub(super) fn stop_all(children: &mut [Child]) {
    for child in children {
        let _ = child.kill();
        let _ = child.wait();
    }
}

#[test]
fn the_configuration_applies_to_each_discovered_directory() {
    if !privileged() {
        return;
    }
    let _beside = super::beside_others();
    let tmp = tempfile::tempdir().unwrap();
    let (bin, name) = named_sleep(tmp.path());
    let dir = tmp.path().join("metrics");
    std::fs::create_dir_all(&dir).unwrap();
    let (seven, _) = write_counter(&dir, "7", 2.0);
    let (eight, _) = write_counter(&dir, "8", 5.0);
    let mut holders = vec![holder(&bin, &[&seven, &eight])];
    let config = tmp.path().join("config.yaml");
    std::fs::write(
        &config,
        "naming: ray\nper_writer: {}\nlabels: {cluster: c1}\nfilter:\n  include_prefixes: [\"vllm:\"]\n",
    )
    .unwrap();
    let exporter = Exporter::start(
        &[
            &OUTSIDE_KUBERNETES[..],
            &[
                "--config",
                config.to_str().unwrap(),
                "--web.disable-exporter-metrics",
            ],
        ]
        .concat(),
    );
    let series = |writer: &str| {
        format!(
            "ray_vllm_prompt_tokens_total{{WorkerId=\"{writer}\",cluster=\"c1\",directory=\"{}\",model_name=\"m\",process=\"{name}\"}}",
            dir.display()
        )
    };
    let text = wait_for("the directory, configured", || {
        let text = exporter.metrics();
        (sample_value(&text, &series("8")) == Some(5.0)).then_some(text)
    });
    assert_eq!(sample_value(&text, &series("7")), Some(2.0), "{text}");
    // Only what the filter lets through: every family is the directory's.
    for line in text.lines().filter(|l| !l.starts_with('#')) {
        assert!(line.starts_with("ray_vllm_"), "{line}");
    }
    stop_all(&mut holders);
}
