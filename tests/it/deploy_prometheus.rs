//! `deploy/prometheus.yml` with a real Prometheus (Debian's `prometheus`)
//! scraping the real exporter run as the DaemonSet runs it. Debian's
//! Prometheus has no Kubernetes discovery, so the job's
//! `kubernetes_sd_configs` is replaced by static targets carrying the meta
//! labels pod discovery gives: the exporter pod's `metrics` port, and vLLM's
//! port 8000 (which the job must drop). Everything else — the job's
//! relabelling, its metric relabelling of `vllm_pod` into `namespace` and
//! `pod` — runs exactly as written in the file.

use std::collections::BTreeSet;
use std::time::Duration;

use crate::support::monitoring::{eventually, free_port, Prometheus};
use crate::support::{python, repo_root, run_python, tool, Exporter};

/// vLLM's API server writing a counter and a `mostrecent` gauge.
const WRITER: &str = r#"
import sys
from prometheus_client import Counter, Gauge
n = int(sys.argv[1])
Counter('vllm:prompt_tokens', 'Number of prefill tokens processed.', ['model_name']).labels('m').inc(10 * n)
Gauge('vllm:kv_cache_usage_perc', 'KV-cache usage. 1 means 100 percent usage.', ['model_name'], multiprocess_mode='mostrecent').labels('m').set(0.25 * n)
"#;

/// A static target with the meta labels Kubernetes pod discovery would give
/// a container port of a pod annotated like the DaemonSet's pods.
fn pod_target(address: &str, port_name: &str, container: &str, pod: &str) -> serde_yaml::Value {
    let labels: serde_yaml::Mapping = [
        ("__meta_kubernetes_namespace", "monitoring"),
        ("__meta_kubernetes_pod_name", pod),
        ("__meta_kubernetes_pod_container_name", container),
        ("__meta_kubernetes_pod_container_port_name", port_name),
        ("__meta_kubernetes_pod_node_name", "gpu-node-1"),
        (
            "__meta_kubernetes_pod_annotation_prometheus_io_scrape",
            "true",
        ),
        (
            "__meta_kubernetes_pod_annotation_prometheus_io_port",
            "9089",
        ),
        (
            "__meta_kubernetes_pod_annotation_prometheus_io_path",
            "/metrics",
        ),
    ]
    .into_iter()
    .map(|(k, v)| (k.into(), v.into()))
    .collect();
    serde_yaml::to_value(serde_yaml::Mapping::from_iter([
        ("targets".into(), serde_yaml::to_value([address]).unwrap()),
        ("labels".into(), serde_yaml::Value::Mapping(labels)),
    ]))
    .unwrap()
}

/// deploy/prometheus.yml, scraping every second, its discovery replaced by `targets`.
fn config_with_static_targets(targets: Vec<serde_yaml::Value>) -> String {
    let text = std::fs::read_to_string(repo_root().join("deploy/prometheus.yml")).unwrap();
    let mut config: serde_yaml::Value = serde_yaml::from_str(&text).unwrap();
    config["global"]["scrape_interval"] = "1s".into();
    config["global"]["scrape_timeout"] = "900ms".into();
    let job = &mut config["scrape_configs"][0];
    assert_eq!(job["job_name"], "multiproc-exporter");
    let job = job.as_mapping_mut().unwrap();
    assert!(job.remove("kubernetes_sd_configs").is_some());
    job.insert(
        "static_configs".into(),
        serde_yaml::Value::Sequence(targets),
    );
    serde_yaml::to_string(&config).unwrap()
}

/// Polls `promql` until it returns `want` series (Prometheus starts scraping
/// a few seconds after start-up).
fn wait_for_series(
    prometheus: &Prometheus,
    promql: &str,
    want: usize,
) -> Vec<(serde_json::Value, f64)> {
    eventually(promql, Duration::from_secs(60), || {
        let results = prometheus.query_ok(promql);
        if results.len() == want {
            Ok(results)
        } else {
            Err(format!("want {want} series, have {results:?}"))
        }
    })
}

#[test]
fn prometheus_yml_scrapes_the_daemonset_with_the_vllm_pods_namespace_and_pod() {
    let Some(python) = python() else { return };
    let Some(prometheus) = tool("prometheus") else {
        return;
    };
    let tmp = tempfile::tempdir().unwrap();
    let parent = tmp.path().join("vllm-metrics");
    for (pod, n) in [("inference_vllm-a", "1"), ("research_vllm-b", "3")] {
        let dir = parent.join(pod);
        std::fs::create_dir_all(&dir).unwrap();
        run_python(
            &python,
            WRITER,
            &[n],
            &[("PROMETHEUS_MULTIPROC_DIR", dir.to_str().unwrap())],
        );
    }
    // The DaemonSet's arguments (deploy/kubernetes/daemonset).
    let exporter = Exporter::start(&[
        "--dir",
        parent.to_str().unwrap(),
        "--dir.subdirectories-label=vllm_pod",
        "--web.disable-openmetrics",
    ]);
    let exporter_address = exporter.base.trim_start_matches("http://").to_owned();
    let closed = format!("127.0.0.1:{}", free_port());
    let config = config_with_static_targets(vec![
        pod_target(
            &exporter_address,
            "metrics",
            "multiproc-exporter",
            "multiproc-exporter-x7k2p",
        ),
        // A vLLM pod's API port: not the exporter's, must not become a target.
        pod_target(&closed, "http", "vllm", "vllm-a"),
    ]);
    let work = tmp.path().join("prometheus");
    std::fs::create_dir(&work).unwrap();
    let prom = Prometheus::start(&prometheus, &work, &config);

    // Only the exporter's port is a target, and it is up.
    let up = wait_for_series(&prom, "up", 1);
    assert_eq!(up[0].1, 1.0, "{up:?}");
    assert_eq!(up[0].0["job"], "multiproc-exporter");
    assert_eq!(up[0].0["pod"], "multiproc-exporter-x7k2p");
    assert_eq!(up[0].0["node"], "gpu-node-1");
    assert_eq!(up[0].0["instance"], exporter_address.as_str());

    // Each vLLM pod's series carry that pod's namespace and name, no vllm_pod.
    let tokens = wait_for_series(&prom, "vllm:prompt_tokens_total", 2);
    let seen: BTreeSet<(String, String, String)> = tokens
        .iter()
        .map(|(labels, value)| {
            assert!(labels.get("vllm_pod").is_none(), "{labels}");
            assert_eq!(labels["container"], "multiproc-exporter");
            (
                labels["namespace"].as_str().unwrap().to_owned(),
                labels["pod"].as_str().unwrap().to_owned(),
                value.to_string(),
            )
        })
        .collect();
    let expected: BTreeSet<(String, String, String)> =
        [("inference", "vllm-a", "10"), ("research", "vllm-b", "30")]
            .iter()
            .map(|(a, b, c)| ((*a).to_owned(), (*b).to_owned(), (*c).to_owned()))
            .collect();
    assert_eq!(seen, expected);
    let usage = prom.query_ok("vllm:kv_cache_usage_perc{namespace=\"research\",pod=\"vllm-b\"}");
    assert_eq!(usage.len(), 1, "{usage:?}");
    assert_eq!(usage[0].1, 0.75);
    // The exporter's own metrics keep the exporter pod's labels.
    let own = prom.query_ok("multiproc_exporter_scrape_subdirectories");
    assert_eq!(own.len(), 1, "{own:?}");
    assert_eq!(own[0].1, 2.0);
    assert_eq!(own[0].0["namespace"], "monitoring");
    assert_eq!(own[0].0["pod"], "multiproc-exporter-x7k2p");
    // By now every target has been scraped a few times: still one target.
    assert_eq!(prom.query_ok("up").len(), 1);
}
