//! End to end with a real Prometheus server: Python processes using
//! prometheus_client 0.26.0 in multiprocess mode write vLLM-named metrics, two
//! exporters serve the directory with Ray naming (one answering OpenMetrics,
//! one the text format), Prometheus (Debian's `prometheus` package) scrapes
//! both, and queries through Prometheus's HTTP API return the exact numbers the
//! writers produced, including the p95 of a histogram via `histogram_quantile`.

use std::process::Command;
use std::time::Duration;

use crate::support::monitoring::{eventually, Prometheus};
use crate::support::{get, python, repo_root, tool, Exporter};

/// prometheus.yml scraping each `(job, exporter base URL)` every second.
fn scrape_config(targets: &[(&str, &str)]) -> String {
    let mut config = String::from(
        "global:\n  scrape_interval: 1s\n  scrape_timeout: 900ms\n  evaluation_interval: 1s\nscrape_configs:\n",
    );
    for (job, base) in targets {
        let target = base.trim_start_matches("http://");
        config.push_str(&format!(
            "  - job_name: {job}\n    static_configs:\n      - targets: ['{target}']\n"
        ));
    }
    config
}

/// The value for `job`, waiting until Prometheus has scraped `want`.
fn wait_for_value(prometheus: &Prometheus, promql: &str, job: &str, want: f64) {
    eventually(
        &format!("{promql} for job {job}"),
        Duration::from_secs(60),
        || {
            let results = prometheus.query_ok(promql);
            let got = results
                .iter()
                .find(|(labels, _)| labels["job"] == job)
                .map(|(_, v)| *v);
            if got == Some(want) {
                Ok(())
            } else {
                Err(format!("want {want}, have {results:?}"))
            }
        },
    );
}

#[test]
fn prometheus_scrapes_ray_named_vllm_metrics_in_both_formats() {
    let Some(python) = python() else { return };
    let Some(prometheus_bin) = tool("prometheus") else {
        return;
    };
    let work = tempfile::tempdir().expect("tempdir");
    let metrics_dir = work.path().join("multiproc");
    std::fs::create_dir(&metrics_dir).expect("mkdir");
    let config = work.path().join("exporter.yml");
    std::fs::write(&config, "naming: ray\n").expect("write config");
    let dir = metrics_dir.to_str().expect("utf-8 path");
    let config = config.to_str().expect("utf-8 path");

    let openmetrics = Exporter::start(&["--dir", dir, "--config", config]);
    let text = Exporter::start(&[
        "--dir",
        dir,
        "--config",
        config,
        "--web.disable-openmetrics",
    ]);
    let prom = Prometheus::start(
        &prometheus_bin,
        work.path(),
        &scrape_config(&[("openmetrics", &openmetrics.base), ("text", &text.base)]),
    );

    // Prometheus starts scrape loops a few seconds after start-up: wait for
    // both targets, then two real processes write for about four seconds while
    // Prometheus scrapes every second.
    for job in ["openmetrics", "text"] {
        wait_for_value(&prom, "up", job, 1.0);
    }
    let (processes, ticks) = (2u32, 40u32);
    let writer = Command::new(&python)
        .arg(repo_root().join("tests/python/vllm_load.py"))
        .arg(&metrics_dir)
        .args([
            "--processes",
            &processes.to_string(),
            "--ticks",
            &ticks.to_string(),
            "--interval",
            "0.1",
        ])
        .output()
        .expect("run the writers");
    assert!(
        writer.status.success(),
        "{}",
        String::from_utf8_lossy(&writer.stderr)
    );
    let expected: serde_json::Value =
        serde_json::from_slice(&writer.stdout).expect("writer summary");

    for job in ["openmetrics", "text"] {
        wait_for_value(
            &prom,
            "sum by (job) (ray_vllm_prompt_tokens_total)",
            job,
            expected["prompt_tokens_total"].as_f64().expect("number"),
        );
        wait_for_value(
            &prom,
            "sum by (job) (ray_vllm_kv_block_lifetime_seconds_count)",
            job,
            expected["kv_block_lifetime_count"]
                .as_f64()
                .expect("number"),
        );
        wait_for_value(
            &prom,
            "ray_vllm_num_requests_running",
            job,
            expected["num_requests_running"].as_f64().expect("number"),
        );
        wait_for_value(
            &prom,
            "sum by (job) (ray_lmcache_num_hit_tokens_total)",
            job,
            expected["lmcache_hits_total"].as_f64().expect("number"),
        );
        wait_for_value(&prom, "up", job, 1.0);
        // The colon names are gone: Ray naming renamed every vLLM family.
        assert!(prom
            .query_ok(&format!("{{__name__=~\"vllm:.*\",job=\"{job}\"}}"))
            .is_empty());
    }

    // Every observation was 0.3 s, inside the (0.2, 0.5] bucket of vLLM's
    // kv_cache_residency buckets, so the p95 interpolates to 0.2 + 0.3 * 0.95.
    let p95 = prom.query_ok(
        "histogram_quantile(0.95, sum by (le) (rate(ray_vllm_kv_block_lifetime_seconds_bucket[5m])))",
    );
    assert_eq!(
        p95.len(),
        1,
        "{p95:?}; buckets: {:?}",
        prom.query_ok("count_over_time(ray_vllm_kv_block_lifetime_seconds_bucket{le=\"0.5\"}[5m])")
    );
    assert!((p95[0].1 - 0.485).abs() < 1e-9, "p95 = {}", p95[0].1);

    // Both targets are healthy with no scrape error.
    let reply = get(&format!("{}/api/v1/targets", prom.base), &[]);
    let targets: serde_json::Value = serde_json::from_slice(&reply.body).expect("JSON");
    let active = targets["data"]["activeTargets"]
        .as_array()
        .expect("targets");
    assert_eq!(active.len(), 2);
    for target in active {
        assert_eq!(target["health"], "up", "{target}");
        assert_eq!(target["lastError"], "", "{target}");
    }
    // And each exporter really answered in its format.
    let accept = "application/openmetrics-text;version=1.0.0,application/openmetrics-text;version=0.0.1;q=0.75,text/plain;version=0.0.4;q=0.5,*/*;q=0.1";
    let om_reply = openmetrics.get_with("/metrics", &[("Accept", accept)]);
    assert!(om_reply
        .header("content-type")
        .is_some_and(|c| c.starts_with("application/openmetrics-text")));
    let text_reply = text.get_with("/metrics", &[("Accept", accept)]);
    assert_eq!(
        text_reply.header("content-type"),
        Some("text/plain; version=0.0.4; charset=utf-8")
    );
}
