//! The default negotiation cannot silently rename vLLM's series: a real
//! Prometheus 2.x (Debian's `prometheus`, whose `Accept` prefers OpenMetrics
//! 1.0.0 without an `escaping` parameter) scraping an exporter started with
//! default flags stores `vllm:num_requests_running` under that name. The same
//! Prometheus scraping an exporter with prometheus_client's exact negotiation
//! (`--web.negotiation=prometheus-client`) stores `vllm_num_requests_running`:
//! the control that shows the test can fail.

use std::time::Duration;

use crate::support::monitoring::{eventually, Prometheus};
use crate::support::{get, key, tool, write_db, Exporter, Launch};

#[test]
fn prometheus_2_keeps_vllm_names_with_default_flags() {
    let Some(prometheus_bin) = tool("prometheus") else {
        return;
    };
    let work = tempfile::tempdir().expect("tempdir");
    let metrics = work.path().join("metrics");
    std::fs::create_dir(&metrics).unwrap();
    write_db(
        &metrics.join("gauge_livesum_7.db"),
        &[(
            key(
                "vllm:num_requests_running",
                "vllm:num_requests_running",
                &[("model_name", "m")],
                "Number of requests in model execution batches.",
            ),
            3.0,
        )],
    );
    let dir = metrics.to_str().unwrap();
    let default_flags = Exporter::launch(
        &["--dir", dir],
        &Launch {
            exact_negotiation: false,
            ..Launch::default()
        },
    );
    let exact = Exporter::start(&["--dir", dir, "--web.negotiation", "prometheus-client"]);

    // What each answers to no Accept header: vLLM's own route says text 1.0.0.
    let reply = get(&format!("{}/metrics", default_flags.base), &[]);
    assert_eq!(
        reply.header("content-type"),
        Some("text/plain; version=1.0.0; charset=utf-8")
    );

    let mut config =
        String::from("global:\n  scrape_interval: 1s\n  scrape_timeout: 900ms\nscrape_configs:\n");
    for (job, exporter) in [("default", &default_flags), ("exact", &exact)] {
        config.push_str(&format!(
            "  - job_name: {job}\n    static_configs:\n      - targets: ['{}']\n",
            exporter.base.trim_start_matches("http://")
        ));
    }
    let prometheus = Prometheus::start(&prometheus_bin, work.path(), &config);
    let series = |query: &str| -> Vec<String> {
        prometheus
            .query_ok(query)
            .into_iter()
            .map(|(labels, _)| labels["job"].as_str().unwrap_or_default().to_owned())
            .collect()
    };
    eventually("both targets scraped", Duration::from_secs(60), || {
        let up = series("up == 1");
        (up.len() == 2).then_some(()).ok_or(format!("up: {up:?}"))
    });
    eventually("the names each job stored", Duration::from_secs(30), || {
        let colon = series("vllm:num_requests_running");
        let underscore = series("vllm_num_requests_running");
        if colon == ["default"] && underscore == ["exact"] {
            Ok(())
        } else {
            Err(format!("vllm:* from {colon:?}, vllm_* from {underscore:?}"))
        }
    });
    assert_eq!(
        prometheus.query_one("vllm:num_requests_running{job=\"default\",model_name=\"m\"}"),
        Some(3.0)
    );
}
