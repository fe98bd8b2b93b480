//! `--dir.subdirectories-label` (a DaemonSet serving a node's pods): files
//! written by the real prometheus_client in several subdirectories, served by
//! the real exporter binary, compared byte for byte with what
//! prometheus_client's own `MultiProcessCollector` gives for each subdirectory,
//! combined by a few lines of Python and encoded by `generate_latest`.

use std::path::Path;

use crate::support::{dump, python, run_exporter, run_python, wait_for, Exporter};

/// One application process: vLLM-like metrics of every merge rule. `argv[1]`
/// scales the values so that processes and pods differ.
const WRITER: &str = r#"
import sys
from prometheus_client import Counter, Gauge, Histogram
n = int(sys.argv[1])
c = Counter('vllm:prompt_tokens', 'Number of prefill tokens processed.', ['model_name'])
c.labels('m').inc(10 * n)
g = Gauge('vllm:kv_cache_usage_perc', 'KV-cache usage. 1 means 100 percent usage.', ['model_name'], multiprocess_mode='mostrecent')
g.labels('m').set(0.01 * n)
r = Gauge('vllm:num_requests_running', 'Number of requests in model execution batches.', ['model_name'], multiprocess_mode='livesum')
r.labels('m').set(n)
a = Gauge('per_process', 'One series per process.', ['pod'], multiprocess_mode='all')
a.labels('inner').set(n)
h = Histogram('vllm:e2e_request_latency_seconds', 'Histogram of e2e request latency in seconds.', ['model_name'], buckets=[0.5, 1.0, 5.0])
for v in (0.1 * n, 0.9, 3.0):
    h.labels('m').observe(v)
"#;

/// What prometheus_client serves for each subdirectory of `argv[1]` on its
/// own, combined: subdirectories in sorted order, label `argv[2]` added to
/// every sample (an existing label of that name kept as `exported_<name>`),
/// same-named families joined at their first position.
const REFERENCE: &str = r#"
import os, sys
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.metrics_core import Metric
from prometheus_client.multiprocess import MultiProcessCollector
parent, label = sys.argv[1], sys.argv[2]
combined, order = {}, []
for name in sorted(os.listdir(parent)):
    registry = CollectorRegistry()
    MultiProcessCollector(registry, path=os.path.join(parent, name))
    for m in registry.collect():
        if m.name not in combined:
            combined[m.name] = Metric(m.name, m.documentation, m.type)
            order.append(m.name)
        for s in m.samples:
            labels = dict(s.labels)
            if label in labels:
                labels['exported_' + label] = labels.pop(label)
            labels[label] = name
            combined[m.name].samples.append(s._replace(labels=labels))
class Combined:
    def collect(self):
        return [combined[n] for n in order]
registry = CollectorRegistry()
registry.register(Combined())
sys.stdout.write(generate_latest(registry).decode())
"#;

fn write_pod(python: &Path, dir: &Path, scales: &[&str]) {
    std::fs::create_dir_all(dir).unwrap();
    for n in scales {
        run_python(
            python,
            WRITER,
            &[n],
            &[("PROMETHEUS_MULTIPROC_DIR", dir.to_str().unwrap())],
        );
    }
}

fn reference(python: &Path, parent: &Path, label: &str) -> String {
    run_python(python, REFERENCE, &[parent.to_str().unwrap(), label], &[])
}

/// The value of the first sample line starting with `prefix`.
fn sample(text: &str, prefix: &str) -> Option<f64> {
    text.lines()
        .find(|l| l.starts_with(prefix))
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|v| v.parse().ok())
}

#[test]
fn each_pod_is_merged_on_its_own_and_labelled() {
    let Some(python) = python() else { return };
    let tmp = tempfile::tempdir().unwrap();
    let parent = tmp.path().join("vllm-metrics");
    write_pod(&python, &parent.join("default_vllm-a"), &["1", "2"]);
    write_pod(&python, &parent.join("default_vllm-b"), &["5"]);
    // Neither hidden entries nor files directly in the parent are read.
    write_pod(&python, &parent.join(".hidden"), &["100"]);
    std::fs::write(parent.join("counter_1.db"), b"not read").unwrap();

    let expected = {
        let visible = tmp.path().join("visible");
        std::fs::create_dir(&visible).unwrap();
        for pod in ["default_vllm-a", "default_vllm-b"] {
            std::os::unix::fs::symlink(parent.join(pod), visible.join(pod)).unwrap();
        }
        reference(&python, &visible, "pod")
    };
    // The pods differ, and each pod's two processes were merged: pod a's
    // counter is 10 + 20, its mostrecent gauge the later write.
    assert!(
        expected
            .contains("vllm:prompt_tokens_total{model_name=\"m\",pod=\"default_vllm-a\"} 30.0\n"),
        "{expected}"
    );
    assert!(expected
        .contains("vllm:kv_cache_usage_perc{model_name=\"m\",pod=\"default_vllm-a\"} 0.02\n"));
    assert!(expected.contains("per_process{exported_pod=\"inner\",pid=\""));

    let parent_s = parent.to_str().unwrap();
    let exporter = Exporter::start(&[
        "--dir",
        parent_s,
        "--dir.subdirectories-label",
        "pod",
        "--web.disable-exporter-metrics",
    ]);
    assert_eq!(exporter.metrics(), expected);
    // `dump` combines the same way.
    let dumped = dump(&["--subdirectories-label", "pod", parent_s]);
    assert_eq!(String::from_utf8(dumped).unwrap(), expected);
}

#[test]
fn pods_come_and_go_between_scrapes() {
    let Some(python) = python() else { return };
    let tmp = tempfile::tempdir().unwrap();
    let parent = tmp.path().join("vllm-metrics");
    let parent_s = parent.to_str().unwrap();
    let exporter = Exporter::start_with_env(
        &["--dir", parent_s],
        &[(
            "MULTIPROC_EXPORTER_DIR_SUBDIRECTORIES_LABEL",
            "kubernetes_pod",
        )],
    );
    // Readiness means the parent exists; pods may not have written anything yet.
    assert_eq!(exporter.get("/-/ready").status, 503);
    std::fs::create_dir(&parent).unwrap();
    wait_for("readiness", || {
        (exporter.get("/-/ready").status == 200).then_some(())
    });
    let empty = exporter.metrics();
    assert_eq!(
        sample(&empty, "multiproc_exporter_scrape_subdirectories "),
        Some(0.0)
    );
    assert!(!empty.contains("vllm:"), "{empty}");

    write_pod(&python, &parent.join("ns_first"), &["1"]);
    let one = exporter.metrics();
    assert_eq!(
        sample(&one, "multiproc_exporter_scrape_subdirectories "),
        Some(1.0)
    );
    assert_eq!(
        sample(
            &one,
            "vllm:prompt_tokens_total{kubernetes_pod=\"ns_first\",model_name=\"m\"}"
        ),
        Some(10.0)
    );

    write_pod(&python, &parent.join("ns_second"), &["3"]);
    std::fs::remove_dir_all(parent.join("ns_first")).unwrap();
    let swapped = exporter.metrics();
    assert_eq!(
        sample(&swapped, "multiproc_exporter_scrape_subdirectories "),
        Some(1.0)
    );
    assert!(!swapped.contains("ns_first"), "{swapped}");
    assert_eq!(
        sample(
            &swapped,
            "vllm:prompt_tokens_total{kubernetes_pod=\"ns_second\",model_name=\"m\"}"
        ),
        Some(30.0)
    );
    // The lines are logged before the scrape answers, but read from the
    // exporter's standard error by another thread: wait until it caught up.
    exporter.sync_logs();
    assert!(exporter.find_log("Reading a new subdirectory.").is_some());
    assert!(exporter
        .find_log("Subdirectory is gone; its series are no longer served.")
        .is_some());
}

#[test]
fn a_family_whose_type_differs_between_pods_is_left_out_and_counted() {
    let Some(python) = python() else { return };
    let tmp = tempfile::tempdir().unwrap();
    let parent = tmp.path().join("p");
    write_pod(&python, &parent.join("a"), &["1"]);
    let b = parent.join("b");
    std::fs::create_dir_all(&b).unwrap();
    run_python(
        &python,
        "from prometheus_client import Counter, Gauge\n\
         Counter('vllm:kv_cache_usage_perc', 'A counter now.').inc(7)\n\
         Gauge('vllm:num_requests_running', 'Different help.', ['model_name'], multiprocess_mode='livesum').labels('m').set(4)\n",
        &[],
        &[("PROMETHEUS_MULTIPROC_DIR", b.to_str().unwrap())],
    );
    let exporter = Exporter::start(&[
        "--dir",
        parent.to_str().unwrap(),
        "--dir.subdirectories-label",
        "pod",
    ]);
    let text = exporter.metrics();
    // The first pod's gauge is served; the second pod's counter of the same name is not.
    assert!(
        text.contains("# TYPE vllm:kv_cache_usage_perc gauge\n"),
        "{text}"
    );
    assert!(!text.contains("vllm:kv_cache_usage_perc_total"), "{text}");
    // A help mismatch keeps the samples under the first help.
    assert!(text.contains(
        "# HELP vllm:num_requests_running Number of requests in model execution batches.\n"
    ));
    assert_eq!(
        sample(
            &text,
            "vllm:num_requests_running{model_name=\"m\",pod=\"b\"}"
        ),
        Some(4.0)
    );
    assert_eq!(
        sample(
            &text,
            "multiproc_exporter_scrape_subdirectory_conflicts{reason=\"type_mismatch\"}"
        ),
        Some(1.0)
    );
    assert_eq!(
        sample(
            &text,
            "multiproc_exporter_scrape_subdirectory_conflicts{reason=\"help_mismatch\"}"
        ),
        Some(1.0)
    );
    assert_eq!(
        sample(
            &text,
            "multiproc_exporter_scrape_subdirectory_conflicts{reason=\"duplicate_name\"}"
        ),
        Some(0.0)
    );
    // Logged once, not at every scrape.
    exporter.metrics();
    let warnings = exporter.logs_with(
        "Subdirectories disagree about a metric family; keeping the first one's type and help.",
    );
    // The order of the two follows the directory listing of `b`.
    let mut reported: Vec<(String, String, String)> = warnings
        .iter()
        .map(|w| {
            let field = |k: &str| w[k].as_str().unwrap_or_default().to_owned();
            (
                field("family"),
                field("subdirectory"),
                field("reason_label"),
            )
        })
        .collect();
    reported.sort();
    let expected = [
        ("vllm:kv_cache_usage_perc", "b", "type_mismatch"),
        ("vllm:num_requests_running", "b", "help_mismatch"),
    ]
    .map(|(f, s, r)| (f.to_owned(), s.to_owned(), r.to_owned()));
    assert_eq!(reported, expected, "{warnings:#?}");
}

#[test]
fn the_same_subdirectory_name_under_two_parents_is_served_once() {
    let Some(python) = python() else { return };
    let tmp = tempfile::tempdir().unwrap();
    let first = tmp.path().join("one");
    let second = tmp.path().join("two");
    write_pod(&python, &first.join("pod"), &["1"]);
    write_pod(&python, &second.join("pod"), &["2"]);
    write_pod(&python, &second.join("other"), &["3"]);
    let (code, stdout, stderr) = run_exporter(&[
        "dump",
        "--subdirectories-label",
        "pod",
        first.to_str().unwrap(),
        second.to_str().unwrap(),
    ]);
    assert_eq!(code, 0, "{stderr}");
    let text = String::from_utf8(stdout).unwrap();
    assert_eq!(
        sample(
            &text,
            "vllm:prompt_tokens_total{model_name=\"m\",pod=\"pod\"}"
        ),
        Some(10.0)
    );
    assert_eq!(
        sample(
            &text,
            "vllm:prompt_tokens_total{model_name=\"m\",pod=\"other\"}"
        ),
        Some(30.0)
    );
    assert!(
        stderr.contains("an earlier directory has a subdirectory of the same name"),
        "{stderr}"
    );
}

#[test]
fn an_invalid_label_name_is_refused_at_start() {
    for bad in ["le", "__name", "1pod", "kubernetes-pod"] {
        let (code, _, stderr) = run_exporter(&[
            "serve",
            "--dir",
            "/nonexistent",
            "--dir.subdirectories-label",
            bad,
        ]);
        assert_eq!(code, 2, "{bad}: {stderr}");
        assert!(stderr.contains("--dir.subdirectories-label"), "{stderr}");
        let (code, _, stderr) =
            run_exporter(&["dump", "--subdirectories-label", bad, "/nonexistent"]);
        assert_eq!(code, 2, "{bad}: {stderr}");
    }
}

/// One process writing `argv[1]` series of counter `argv[2]`, each once.
const MANY_SERIES: &str = r#"
import sys
from prometheus_client import Counter
c = Counter(sys.argv[2], 'Requests.', ['path'])
for i in range(int(sys.argv[1])):
    c.labels('/p/%d' % i).inc()
"#;

/// `writers` processes writing `series` series of `<pod>_requests` each in
/// `parent/<pod>`.
fn write_many(python: &Path, parent: &Path, pod: &str, writers: usize, series: &str) {
    let dir = parent.join(pod);
    std::fs::create_dir_all(&dir).unwrap();
    let name = format!("{pod}_requests");
    for _ in 0..writers {
        run_python(
            python,
            MANY_SERIES,
            &[series, &name],
            &[("PROMETHEUS_MULTIPROC_DIR", dir.to_str().unwrap())],
        );
    }
}

/// Issue 47: `p/big` (4 writers x 5,000 series) beside four tiny pods,
/// under `--memory.budget 8MiB`: its equal share (a fifth) was a cap, so two
/// of its files were skipped (`big_requests_total{app="big",path="/p/0"}
/// 2.0` where prometheus_client gives 4.0) although the budget had room.
#[test]
fn a_pod_bigger_than_its_share_is_read_whole_while_the_budget_has_room() {
    let Some(python) = python() else { return };
    let tmp = tempfile::tempdir().unwrap();
    let parent = tmp.path().join("p");
    for (pod, writers, series) in [
        ("big", 4, "5000"),
        ("t1", 1, "1"),
        ("t2", 1, "1"),
        ("t3", 1, "1"),
        ("t4", 1, "1"),
    ] {
        write_many(&python, &parent, pod, writers, series);
    }
    let expected = reference(&python, &parent, "app");
    assert!(expected.contains("big_requests_total{app=\"big\",path=\"/p/0\"} 4.0\n"));
    let exporter = Exporter::start(&[
        "--dir",
        parent.to_str().unwrap(),
        "--dir.subdirectories-label",
        "app",
        "--memory.budget",
        "8MiB",
    ]);
    for _ in 0..2 {
        let served = exporter.metrics();
        assert!(
            served.contains("big_requests_total{app=\"big\",path=\"/p/0\"} 4.0\n"),
            "{}",
            served.lines().find(|l| l.contains("/p/0\"")).unwrap_or("")
        );
        assert_eq!(
            sample(
                &served,
                "multiproc_exporter_scrape_files_skipped{reason=\"over_memory_budget\"}"
            )
            .unwrap_or(0.0),
            0.0
        );
        let merged: String = served
            .lines()
            .filter(|l| !l.contains("multiproc_exporter_") && !l.contains("process_"))
            .map(|l| format!("{l}\n"))
            .collect();
        assert_eq!(merged, expected);
    }
}

/// Issue 53: four pods under `--memory.budget 2560KiB` (a floor of 640 KiB
/// each): `big` (4 writers x 5,000 series) and three tiny pods; then `s1`
/// grows by 3,000 series. `s1` was read while `big` still held its old
/// charge and cut, its skipped file was remembered and never retried, and
/// its need, taken as unbounded, dragged `big`'s allowance down: from then
/// on every scrape served `s1_requests_total{app="s1",path="/p/0"} 1.0` for
/// 3.0 and `big` 1.0 for 4.0, with about 0.9 MB of the budget unused.
///
/// What the pods hold is now charged after the merge too (the reader used
/// to charge it only at the next read, about 40 % later): `big` needs
/// about 2.8 MB, `s1` grown about 1.2 MB, so under 2560 KiB `big` is the
/// part cut (furthest over its floor) and `s1` is served whole at every
/// scrape; under 3.5 MiB (`s1` fits under the level only once `big` lets
/// go of its old charge) the same, `big` cut by one file at most; under
/// 5 MiB (room for all) every value is prometheus_client's from the first
/// scrape on.
#[test]
fn a_small_pod_is_cut_below_its_floor_and_stays_cut() {
    let Some(python) = python() else { return };
    let tmp = tempfile::tempdir().unwrap();
    let parent = tmp.path().join("p");
    let write = |pod: &str, writers: usize, series: &str| {
        write_many(&python, &parent, pod, writers, series);
    };
    write("big", 4, "5000");
    for pod in ["s2", "s3"] {
        write(pod, 2, "1");
    }
    for (budget, big_skipped_at_most) in [("2560KiB", 4.0), ("3584KiB", 1.0), ("5MiB", 0.0)] {
        let _ = std::fs::remove_dir_all(parent.join("s1"));
        write("s1", 2, "1");
        let exporter = Exporter::start(&[
            "--dir",
            parent.to_str().unwrap(),
            "--dir.subdirectories-label",
            "app",
            "--memory.budget",
            budget,
        ]);
        // Every line of the small pods as prometheus_client serves it;
        // each of `big`'s series counted once per file of it read (every
        // file holds each series once), every skipped file one of `big`'s.
        let check = |expected: &str, when: &str| {
            let served = exporter.metrics();
            let skipped = sample(
                &served,
                "multiproc_exporter_scrape_files_skipped{reason=\"over_memory_budget\"}",
            )
            .unwrap_or(0.0);
            assert!(
                skipped <= big_skipped_at_most,
                "{budget} {when}: {skipped} skipped"
            );
            let small = |text: &str| -> Vec<String> {
                text.lines()
                    .filter(|l| !l.contains("multiproc_exporter_") && !l.contains("process_"))
                    .filter(|l| !l.contains("big_requests"))
                    .map(str::to_owned)
                    .collect()
            };
            assert_eq!(small(&served), small(expected), "{budget} {when}");
            let big: Vec<&str> = served
                .lines()
                .filter(|l| l.starts_with("big_requests_total{"))
                .collect();
            let read = 4.0 - skipped;
            assert_eq!(
                big.len(),
                if read > 0.0 { 5000 } else { 0 },
                "{budget} {when}"
            );
            for line in big {
                assert!(
                    line.ends_with(&format!(" {read:.1}")),
                    "{budget} {when}: {line}"
                );
            }
        };
        let expected = reference(&python, &parent, "app");
        for scrape in 0..2 {
            check(&expected, &format!("scrape {scrape} before s1 grew"));
        }
        write("s1", 1, "3000");
        let expected = reference(&python, &parent, "app");
        assert!(expected.contains("s1_requests_total{app=\"s1\",path=\"/p/0\"} 3.0\n"));
        for scrape in 0..3 {
            check(&expected, &format!("scrape {scrape} after s1 grew"));
        }
    }
}
