//! The configuration file, tested through the real binary: filtering, Ray
//! naming and constant labels over HTTP and in `dump --config`, errors at
//! start-up, and reloading (on change and on SIGHUP; a bad file keeps the
//! previous configuration).

use std::path::Path;

use crate::support::{copy_dir, dump, repo_root, run_exporter, wait_for, Exporter};

/// A directory with vLLM-style families (counter, gauges, histogram).
fn vllm_dir(root: &Path) -> String {
    let dir = root.join("multiproc");
    copy_dir(&repo_root().join("tests/fixtures/colon_names/files"), &dir);
    dir.display().to_string()
}

fn write_config(path: &Path, text: &str) {
    // Replace atomically, as editors and ConfigMap updates do.
    let tmp = path.with_extension("tmp");
    std::fs::write(&tmp, text).unwrap();
    std::fs::rename(&tmp, path).unwrap();
}

const RAY_DYNAMO: &str = "filter:\n  include_prefixes: [\"vllm:\", \"lmcache:\"]\n  exclude_prefixes: [\"vllm:num_requests\"]\nnaming: ray\nlabels: {ReplicaId: \"\"}\n";

#[test]
fn filter_ray_naming_and_labels_over_http_match_dump() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = vllm_dir(tmp.path());
    let config = tmp.path().join("config.yaml");
    write_config(&config, RAY_DYNAMO);
    let config_s = config.to_str().unwrap();
    let exporter = Exporter::start(&[
        "--dir",
        &dir,
        "--config",
        config_s,
        "--web.disable-exporter-metrics",
    ]);
    let text = exporter.metrics();
    assert_eq!(
        text.as_bytes(),
        dump(&["--config", config_s, &dir]),
        "serve and dump --config agree"
    );
    assert_eq!(
        text,
        "# HELP ray_vllm_gpu_cache_usage_perc GPU KV-cache usage.\n\
         # TYPE ray_vllm_gpu_cache_usage_perc gauge\n\
         ray_vllm_gpu_cache_usage_perc{ReplicaId=\"\",model_name=\"m\"} 0.5\n\
         # HELP ray_vllm_e2e_request_latency_seconds E2E latency.\n\
         # TYPE ray_vllm_e2e_request_latency_seconds histogram\n\
         ray_vllm_e2e_request_latency_seconds_sum{ReplicaId=\"\",model_name=\"m\"} 2.0999999999999996\n\
         ray_vllm_e2e_request_latency_seconds_bucket{ReplicaId=\"\",le=\"0.3\",model_name=\"m\"} 0.0\n\
         ray_vllm_e2e_request_latency_seconds_bucket{ReplicaId=\"\",le=\"1.0\",model_name=\"m\"} 1.0\n\
         ray_vllm_e2e_request_latency_seconds_bucket{ReplicaId=\"\",le=\"2.5\",model_name=\"m\"} 2.0\n\
         ray_vllm_e2e_request_latency_seconds_bucket{ReplicaId=\"\",le=\"+Inf\",model_name=\"m\"} 2.0\n\
         ray_vllm_e2e_request_latency_seconds_count{ReplicaId=\"\",model_name=\"m\"} 2.0\n\
         # HELP ray_vllm_prompt_tokens_total Number of prefill tokens processed.\n\
         # TYPE ray_vllm_prompt_tokens_total counter\n\
         ray_vllm_prompt_tokens_total{ReplicaId=\"\",model_name=\"m\"} 30.0\n"
    );
    // OpenMetrics: the counter family is declared without `_total`, names are
    // legacy-valid, so both escapings give the same bytes.
    for accept in [
        "application/openmetrics-text;version=1.0.0",
        "application/openmetrics-text;version=1.0.0;escaping=allow-utf-8",
    ] {
        let om = exporter.get_with("/metrics", &[("Accept", accept)]).text();
        assert_eq!(
            om.as_bytes(),
            dump(&["--config", config_s, "--format", "openmetrics", &dir])
        );
        assert!(om.contains(
            "# TYPE ray_vllm_prompt_tokens counter\n\
             ray_vllm_prompt_tokens_total{ReplicaId=\"\",model_name=\"m\"} 30.0\n# EOF\n"
        ));
    }
    // name[] selects by the served (renamed) names.
    assert_eq!(
        exporter
            .get("/metrics?name[]=ray_vllm_prompt_tokens_total")
            .text(),
        "# HELP ray_vllm_prompt_tokens_total Number of prefill tokens processed.\n\
         # TYPE ray_vllm_prompt_tokens_total counter\n\
         ray_vllm_prompt_tokens_total{ReplicaId=\"\",model_name=\"m\"} 30.0\n"
    );
}

#[test]
fn constant_labels_keep_a_clashing_label_as_exported() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = vllm_dir(tmp.path());
    let config = tmp.path().join("config.yaml");
    write_config(
        &config,
        "filter: {include_prefixes: [\"vllm:num_requests_running\"]}\nlabels: {pid: sidecar, model_name: served}\n",
    );
    let out = String::from_utf8(dump(&["--config", config.to_str().unwrap(), &dir])).unwrap();
    assert_eq!(
        out,
        "# HELP vllm:num_requests_running running\n\
         # TYPE vllm:num_requests_running gauge\n\
         vllm:num_requests_running{exported_model_name=\"m\",exported_pid=\"2\",model_name=\"served\",pid=\"sidecar\"} 2.0\n\
         vllm:num_requests_running{exported_model_name=\"m\",exported_pid=\"1\",model_name=\"served\",pid=\"sidecar\"} 1.0\n"
    );
}

#[test]
fn invalid_configuration_at_start_is_an_error_naming_the_problem() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = vllm_dir(tmp.path());
    let config = tmp.path().join("config.yaml");
    let cases = [
        (
            "filter:\n  include_prefix: [\"vllm:\"]\n",
            "unknown field `include_prefix`",
        ),
        ("namig: ray\n", "unknown field `namig`"),
        ("naming: otel\n", "unknown variant `otel`"),
        (
            "labels: {\"bad-name\": x}\n",
            "invalid label name \"bad-name\"",
        ),
        ("labels: {__name__: x}\n", "invalid label name \"__name__\""),
        ("labels: [a]\n", "invalid configuration"),
    ];
    for (text, message) in cases {
        write_config(&config, text);
        let c = config.to_str().unwrap();
        let (code, _, stderr) = run_exporter(&["dump", "--config", c, &dir]);
        assert_eq!(code, 2, "{text}");
        assert!(stderr.contains(message), "dump {text:?}: {stderr}");
        let (code, _, stderr) = run_exporter(&[
            "serve",
            "--dir",
            &dir,
            "--config",
            c,
            "--web.listen-address",
            "127.0.0.1:0",
        ]);
        assert_eq!(code, 2, "{text}");
        let stderr = crate::support::logfmt_unescaped(&stderr);
        assert!(stderr.contains(message), "serve {text:?}: {stderr}");
    }
    let (code, _, stderr) = run_exporter(&["dump", "--config", "/nonexistent.yaml", &dir]);
    assert_eq!(code, 2);
    assert!(stderr.contains("cannot read /nonexistent.yaml"), "{stderr}");
}

fn reloads(exporter: &Exporter, result: &str) -> String {
    let needle = format!("multiproc_exporter_config_reloads_total{{result=\"{result}\"}} ");
    let body = exporter.metrics();
    body.lines()
        .find_map(|l| l.strip_prefix(needle.as_str()))
        .map(str::to_owned)
        .unwrap_or_default()
}

#[test]
fn reload_on_change_keeps_the_old_configuration_when_the_new_one_is_bad() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = vllm_dir(tmp.path());
    let config = tmp.path().join("conf/config.yaml");
    std::fs::create_dir(tmp.path().join("conf")).unwrap();
    write_config(&config, "naming: prometheus\n");
    let exporter = Exporter::start(&["--dir", &dir, "--config", config.to_str().unwrap()]);
    assert!(exporter
        .metrics()
        .contains("vllm:prompt_tokens_total{model_name=\"m\"} 30.0\n"));
    assert_eq!(reloads(&exporter, "success"), "0.0");
    assert!(exporter
        .metrics()
        .contains("multiproc_exporter_config_last_reload_successful 1.0\n"));

    // A good change is picked up without a signal.
    write_config(&config, "naming: ray\nlabels: {ReplicaId: \"\"}\n");
    wait_for("the new configuration", || {
        exporter
            .metrics()
            .contains("ray_vllm_prompt_tokens_total{ReplicaId=\"\",model_name=\"m\"} 30.0\n")
            .then_some(())
    });
    assert_eq!(reloads(&exporter, "success"), "1.0");

    // A bad change is logged and counted; the previous configuration stays.
    write_config(&config, "naming: ray\nlables: {}\n");
    wait_for("the failed reload", || {
        (reloads(&exporter, "failure") == "1.0").then_some(())
    });
    let body = exporter.metrics();
    assert!(body.contains("ray_vllm_prompt_tokens_total{ReplicaId=\"\",model_name=\"m\"} 30.0\n"));
    assert!(body.contains("multiproc_exporter_config_last_reload_successful 0.0\n"));
    let failed = exporter
        .find_log("Configuration reload failed; keeping the previous configuration.")
        .expect("logged");
    assert_eq!(failed["level"], "ERROR");
    assert!(failed["error"]
        .as_str()
        .unwrap()
        .contains("unknown field `lables`"));

    // A deleted file is a failed reload too; the configuration stays.
    std::fs::remove_file(&config).unwrap();
    wait_for("the failed reload of a missing file", || {
        (reloads(&exporter, "failure") == "2.0").then_some(())
    });
    assert!(exporter.metrics().contains("ray_vllm_prompt_tokens_total{"));

    // Fixed again.
    write_config(&config, "filter: {include_prefixes: [\"vllm:prompt\"]}\n");
    wait_for("the fixed configuration", || {
        let body = exporter.metrics();
        (body.contains("vllm:prompt_tokens_total{model_name=\"m\"} 30.0\n")
            && !body.contains("vllm:gpu_cache_usage_perc"))
        .then_some(())
    });
    let body = exporter.metrics();
    assert!(body.contains("multiproc_exporter_config_last_reload_successful 1.0\n"));
    assert_eq!(reloads(&exporter, "success"), "2.0");
}

#[test]
fn reload_on_sighup() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = vllm_dir(tmp.path());
    let config = tmp.path().join("config.yaml");
    write_config(&config, "naming: ray\n");
    let exporter = Exporter::start(&["--dir", &dir, "--config", config.to_str().unwrap()]);
    // SIGHUP reloads even an unchanged file (and counts it).
    exporter.signal("HUP");
    wait_for("the SIGHUP reload", || {
        (reloads(&exporter, "success") == "1.0").then_some(())
    });
    assert!(exporter
        .find_log("SIGHUP received; reloading the configuration.")
        .is_some());
    // A bad file on SIGHUP keeps the configuration.
    std::fs::write(&config, "naming: [ray\n").unwrap();
    exporter.signal("HUP");
    // (The file watcher may count this change too, before the signal does.)
    wait_for("the failed SIGHUP reload", || {
        (reloads(&exporter, "failure").parse::<f64>().unwrap_or(0.0) >= 1.0).then_some(())
    });
    assert!(exporter
        .metrics()
        .contains("ray_vllm_prompt_tokens_total{model_name=\"m\"} 30.0\n"));
}

/// Issue 34: views come and go with the configuration; a view whose path
/// the server already serves is refused at start and on reload, and a bad
/// view keeps the views in force.
#[test]
fn views_are_reloaded_with_the_configuration_and_validated() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = vllm_dir(tmp.path());
    let config = tmp.path().join("conf/config.yaml");
    std::fs::create_dir(tmp.path().join("conf")).unwrap();
    write_config(&config, "views: {tokens: [\"vllm:prompt_tokens_total\"]}\n");
    let c = config.to_str().unwrap();
    let exporter = Exporter::start(&["--dir", &dir, "--config", c]);
    let tokens = exporter.get("/metrics/tokens");
    assert_eq!(tokens.status, 200);
    assert_eq!(
        tokens.text(),
        "# HELP vllm:prompt_tokens_total Number of prefill tokens processed.\n\
         # TYPE vllm:prompt_tokens_total counter\n\
         vllm:prompt_tokens_total{model_name=\"m\"} 30.0\n"
    );
    assert_eq!(exporter.get("/metrics/endpoint-picker").status, 200);
    // Renamed: the old path is gone, and its 404 names the views.
    write_config(
        &config,
        "views: {prompt: [\"vllm:prompt_tokens\"], endpoint-picker: []}\n",
    );
    wait_for("the new view", || {
        (exporter.get("/metrics/prompt").status == 200).then_some(())
    });
    let gone = exporter.get("/metrics/tokens");
    assert_eq!(gone.status, 404);
    assert_eq!(
        gone.text(),
        "404 page not found: no such view. The views are:\n/metrics/prompt\n"
    );
    // An invalid view keeps the views in force.
    write_config(&config, "views: {\"-x\": [\"vllm:prompt_tokens\"]}\n");
    wait_for("the failed reload", || {
        (reloads(&exporter, "failure") == "1.0").then_some(())
    });
    assert_eq!(exporter.get("/metrics/prompt").status, 200);
    // At start, a view under a path the server serves is refused.
    write_config(&config, "views: {status: [\"vllm:prompt_tokens\"]}\n");
    let (code, _, stderr) = run_exporter(&[
        "serve",
        "--dir",
        &dir,
        "--config",
        c,
        "--web.telemetry-path",
        "/api/v1",
        "--web.listen-address",
        "127.0.0.1:0",
    ]);
    assert_eq!(code, 2);
    let stderr = crate::support::logfmt_unescaped(&stderr);
    assert!(
        stderr.contains(
            "in `views.status`: its path /api/v1/status is one the server already serves"
        ),
        "{stderr}"
    );
}

/// The signals the exporter handles (SIGHUP, SIGTERM, SIGINT) as the
/// kernel sees them caught (`SigCgt` of `/proc/<pid>/status`).
fn caught_signals(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let mask = status
        .lines()
        .find_map(|l| l.strip_prefix("SigCgt:"))
        .expect("SigCgt in /proc/<pid>/status");
    u64::from_str_radix(mask.trim(), 16).unwrap()
}

/// A SIGHUP sent as soon as the exporter said "Listening." ended it: SIGHUP
/// was handled only once the watcher's first rescan of the directories
/// was done (seen as a timed-out `sync_logs` in a loaded CI run). Every
/// signal it handles is handled before it says it listens; the directory of
/// many entries makes that first rescan long.
#[test]
fn a_sighup_sent_on_listening_does_not_end_the_exporter() {
    // On tmpfs where there is one: the entries are made faster.
    let tmp = tempfile::tempdir_in("/dev/shm").unwrap_or_else(|_| tempfile::tempdir().unwrap());
    let dir = vllm_dir(tmp.path());
    for i in 0..60_000 {
        std::fs::File::create(Path::new(&dir).join(format!("other_{i}.txt"))).unwrap();
    }
    let mut exporter = Exporter::start(&["--dir", &dir]);
    let caught = caught_signals(exporter.pid());
    // SIGHUP 1, SIGINT 2, SIGTERM 15: bits 0, 1 and 14.
    let wanted: u64 = (1 << 0) | (1 << 1) | (1 << 14);
    assert_eq!(
        caught & wanted,
        wanted,
        "SigCgt {caught:x} on \"Listening.\""
    );
    exporter.sync_logs();
    assert!(exporter.is_running());
}
