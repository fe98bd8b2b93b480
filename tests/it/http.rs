//! The HTTP server, tested through the real binary on an ephemeral port with a
//! real HTTP client: content negotiation, gzip, `name[]`, self-metrics, health
//! and readiness, directories and files coming and going, logging of bad
//! files, graceful shutdown.

use crate::support;

use std::io::Read as _;
use std::path::Path;

use crate::support::{
    copy_dir, dump, python, repo_root, run_python, wait_for, write_counter, Exporter,
};

const PROMETHEUS_2: &str = "application/openmetrics-text;version=1.0.0,application/openmetrics-text;version=0.0.1;q=0.75,text/plain;version=0.0.4;q=0.5,*/*;q=0.1";
const PROMETHEUS_3: &str = "application/openmetrics-text;version=1.0.0;escaping=allow-utf-8;q=0.5,application/openmetrics-text;version=0.0.1;q=0.4,text/plain;version=1.0.0;escaping=allow-utf-8;q=0.3,text/plain;version=0.0.4;q=0.2,*/*;q=0.1";

/// Two fixture directories with `vllm:`-style colon names and non-legacy
/// names, so that every escaping choice shows in the bytes.
fn fixture_dirs(root: &Path) -> (String, String) {
    let fixtures = repo_root().join("tests/fixtures");
    let a = root.join("colon");
    let b = root.join("escaping");
    copy_dir(&fixtures.join("colon_names/files"), &a);
    copy_dir(&fixtures.join("escaping/files"), &b);
    (a.display().to_string(), b.display().to_string())
}

/// (Accept header, Content-Type, dump --format, dump --escaping).
const TABLE: &[(Option<&str>, &str, &str, &str)] = &[
    (
        None,
        "text/plain; version=0.0.4; charset=utf-8",
        "text",
        "underscores",
    ),
    (
        Some(PROMETHEUS_2),
        "application/openmetrics-text; version=1.0.0; charset=utf-8; escaping=underscores",
        "openmetrics",
        "underscores",
    ),
    (
        Some(PROMETHEUS_3),
        "application/openmetrics-text; version=1.0.0; charset=utf-8; escaping=allow-utf-8",
        "openmetrics",
        "allow-utf-8",
    ),
    (
        Some("application/openmetrics-text"),
        "application/openmetrics-text; version=1.0.0; charset=utf-8",
        "openmetrics",
        "underscores",
    ),
    (
        Some("application/openmetrics-text;version=0.0.1"),
        "text/plain; version=0.0.4; charset=utf-8",
        "text",
        "underscores",
    ),
    (
        Some("text/plain;version=1.0.0;escaping=allow-utf-8"),
        "text/plain; version=1.0.0; charset=utf-8; escaping=allow-utf-8",
        "text",
        "allow-utf-8",
    ),
    (
        Some("text/plain;version=1.0.0"),
        "text/plain; version=1.0.0; charset=utf-8; escaping=underscores",
        "text",
        "underscores",
    ),
    (
        Some("text/plain;version=0.0.4"),
        "text/plain; version=0.0.4; charset=utf-8",
        "text",
        "underscores",
    ),
    // Deliberate difference: dots/values are served with underscores, and the
    // Content-Type says so.
    (
        Some("application/openmetrics-text;version=1.0.0;escaping=dots"),
        "application/openmetrics-text; version=1.0.0; charset=utf-8; escaping=underscores",
        "openmetrics",
        "underscores",
    ),
    (
        Some("text/plain;version=1.0.0;escaping=values"),
        "text/plain; version=1.0.0; charset=utf-8; escaping=underscores",
        "text",
        "underscores",
    ),
];

#[test]
fn negotiation_gives_the_exact_content_type_and_the_dump_bytes() {
    let tmp = tempfile::tempdir().unwrap();
    let (a, b) = fixture_dirs(tmp.path());
    let exporter = Exporter::start(&["--dir", &a, "--dir", &b, "--web.disable-exporter-metrics"]);
    for (accept, content_type, format, escaping) in TABLE {
        let headers: Vec<(&str, &str)> = accept.iter().map(|a| ("Accept", *a)).collect();
        let reply = exporter.get_with("/metrics", &headers);
        assert_eq!(reply.status, 200, "{accept:?}");
        assert_eq!(
            reply.header("content-type"),
            Some(*content_type),
            "{accept:?}"
        );
        assert_eq!(reply.header("content-encoding"), None);
        let expected = dump(&["--format", format, "--escaping", escaping, &a, &b]);
        assert!(!expected.is_empty());
        assert_eq!(
            reply.text(),
            String::from_utf8(expected).unwrap(),
            "body for {accept:?}"
        );
    }
}

#[test]
fn several_accept_headers_are_joined() {
    let tmp = tempfile::tempdir().unwrap();
    let (a, _) = fixture_dirs(tmp.path());
    let exporter = Exporter::start(&["--dir", &a, "--web.disable-exporter-metrics"]);
    let reply = exporter.get_with(
        "/metrics",
        &[
            ("Accept", "text/html"),
            ("Accept", "application/openmetrics-text;version=1.0.0"),
        ],
    );
    assert_eq!(
        reply.header("content-type"),
        Some("application/openmetrics-text; version=1.0.0; charset=utf-8; escaping=underscores")
    );
    assert!(reply.text().ends_with("# EOF\n"));
}

fn gunzip(bytes: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    flate2::read::GzDecoder::new(bytes)
        .read_to_end(&mut out)
        .expect("valid gzip");
    out
}

#[test]
fn gzip_when_accept_encoding_allows_it() {
    let tmp = tempfile::tempdir().unwrap();
    let (a, b) = fixture_dirs(tmp.path());
    let exporter = Exporter::start(&["--dir", &a, "--dir", &b, "--web.disable-exporter-metrics"]);
    let plain = exporter.get("/metrics");
    assert_eq!(plain.header("content-encoding"), None);
    for encoding in ["gzip", "deflate, gzip;q=0.5", "br, GZIP"] {
        let reply = exporter.get_with(
            "/metrics",
            &[("Accept", PROMETHEUS_3), ("Accept-Encoding", encoding)],
        );
        assert_eq!(reply.header("content-encoding"), Some("gzip"), "{encoding}");
        assert_eq!(
            reply.header("content-type"),
            Some(
                "application/openmetrics-text; version=1.0.0; charset=utf-8; escaping=allow-utf-8"
            )
        );
        let expected = dump(&[
            "--format",
            "openmetrics",
            "--escaping",
            "allow-utf-8",
            &a,
            &b,
        ]);
        assert_eq!(gunzip(&reply.body), expected);
    }
    let reply = exporter.get_with("/metrics", &[("Accept-Encoding", "identity, x-gzip")]);
    assert_eq!(reply.header("content-encoding"), None);
    assert_eq!(reply.body, plain.body);
}

#[test]
fn name_parameters_restrict_families() {
    let tmp = tempfile::tempdir().unwrap();
    let (a, _) = fixture_dirs(tmp.path());
    let exporter = Exporter::start(&["--dir", &a]);
    let reply = exporter.get(
        "/metrics?name[]=vllm:prompt_tokens_total&name[]=&name%5B%5D=multiproc_exporter_scrape_files_read",
    );
    assert_eq!(
        reply.text(),
        "# HELP vllm:prompt_tokens_total Number of prefill tokens processed.\n\
         # TYPE vllm:prompt_tokens_total counter\n\
         vllm:prompt_tokens_total{model_name=\"m\"} 30.0\n\
         # HELP multiproc_exporter_scrape_files_read Metric files merged by the last scrape.\n\
         # TYPE multiproc_exporter_scrape_files_read gauge\n\
         multiproc_exporter_scrape_files_read 10.0\n"
    );
    // A family restricted to some of its samples keeps only those.
    let reply = exporter.get_with(
        "/metrics?name[]=vllm:e2e_request_latency_seconds_count",
        &[("Accept", "application/openmetrics-text")],
    );
    assert_eq!(
        reply.text(),
        "# HELP vllm:e2e_request_latency_seconds E2E latency.\n\
         # TYPE vllm:e2e_request_latency_seconds histogram\n\
         vllm_e2e_request_latency_seconds_count{model_name=\"m\"} 2.0\n# EOF\n"
    );
    // Only blank values: no restriction at all.
    let all = exporter.get("/metrics?name[]=").text();
    assert!(all.contains("# TYPE vllm:gpu_cache_usage_perc gauge\n"));
    // Nothing matches: an empty exposition.
    assert_eq!(exporter.get("/metrics?name[]=nope").text(), "");
}

#[test]
fn self_metrics_are_appended_and_valid_in_every_format() {
    let tmp = tempfile::tempdir().unwrap();
    let (a, _) = fixture_dirs(tmp.path());
    let exporter = Exporter::start(&["--dir", &a]);
    for (accept, _, format, escaping) in TABLE {
        let headers: Vec<(&str, &str)> = accept.iter().map(|a| ("Accept", *a)).collect();
        let body = exporter.get_with("/metrics", &headers).text();
        let merged =
            String::from_utf8(dump(&["--format", format, "--escaping", escaping, &a])).unwrap();
        // The merged families come first, byte for byte, then the self-metrics.
        let merged_part = merged.strip_suffix("# EOF\n").unwrap_or(&merged);
        assert!(body.starts_with(merged_part), "{accept:?}");
        let own = &body[merged_part.len()..];
        assert!(
            own.starts_with("# HELP multiproc_exporter_build_info "),
            "{own}"
        );
        assert!(own.contains("multiproc_exporter_scrape_files_read 10.0\n"));
        assert!(own.contains("multiproc_exporter_scrape_families 5.0\n"));
        assert!(own.contains("# TYPE multiproc_exporter_process_cpu_seconds"));
        if *format == "openmetrics" {
            assert_eq!(body.matches("# EOF").count(), 1);
            assert!(body.ends_with("\n# EOF\n"));
            assert!(own.contains(
                "# TYPE multiproc_exporter_config_reloads counter\n\
                 multiproc_exporter_config_reloads_total{result=\"failure\"} 0.0\n"
            ));
        } else {
            assert!(!body.contains("# EOF"));
            assert!(own.contains(
                "# TYPE multiproc_exporter_config_reloads_total counter\n\
                 multiproc_exporter_config_reloads_total{result=\"failure\"} 0.0\n"
            ));
        }
    }
    let disabled = Exporter::start(&["--dir", &a, "--web.disable-exporter-metrics"]);
    assert!(!disabled.metrics().contains("multiproc_exporter_"));
    assert!(!disabled.metrics().contains("process_"));
}

/// prometheus_client's own parsers accept everything the server writes, in
/// every negotiated format.
#[test]
fn python_parsers_accept_every_format() {
    let Some(python) = python() else { return };
    let tmp = tempfile::tempdir().unwrap();
    // Only the colon-name fixture: the other one has an empty label name,
    // which prometheus_client writes but its own parser rejects.
    let (a, _) = fixture_dirs(tmp.path());
    let exporter = Exporter::start(&["--dir", &a]);
    let script = r#"
import sys
from prometheus_client.parser import text_string_to_metric_families as text_parse
from prometheus_client.openmetrics.parser import text_string_to_metric_families as om_parse
kind, path = sys.argv[1], sys.argv[2]
text = open(path, encoding='utf-8').read()
families = list((om_parse if kind == 'openmetrics' else text_parse)(text))
names = {f.name for f in families}
assert 'multiproc_exporter_build_info' in names or 'multiproc_exporter_build' in names, names
print(len(families), sum(len(f.samples) for f in families))
"#;
    for (i, (accept, _, format, _)) in TABLE.iter().enumerate() {
        let headers: Vec<(&str, &str)> = accept.iter().map(|a| ("Accept", *a)).collect();
        let body = exporter.get_with("/metrics", &headers).body;
        let path = tmp.path().join(format!("body{i}"));
        std::fs::write(&path, &body).unwrap();
        run_python(&python, script, &[format, path.to_str().unwrap()], &[]);
    }
}

/// Files written by prometheus_client in two processes, served and compared
/// with what prometheus_client's own HTTP code (`_bake_output`) answers for
/// the same request: Content-Type, gzip, `name[]` and bytes.
#[test]
fn same_answers_as_prometheus_client_exposition() {
    let Some(python) = python() else { return };
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("multiproc");
    std::fs::create_dir(&dir).unwrap();
    let writer = r#"
import sys
from prometheus_client import Counter, Gauge, Histogram
n = int(sys.argv[1])
c = Counter('vllm:prompt_tokens', 'Number of prefill tokens processed.', ['model_name', 'engine'])
c.labels('m', '0').inc(10 * n)
g = Gauge('vllm:kv_cache_usage_perc', 'KV-cache usage. 1 means 100 percent usage.', ['model_name', 'engine'], multiprocess_mode='mostrecent')
g.labels('m', '0').set(0.1 * n)
r = Gauge('vllm:num_requests_running', 'Number of requests in model execution batches.', ['model_name', 'engine'], multiprocess_mode='livesum')
r.labels('m', '0').set(n)
h = Histogram('vllm:e2e_request_latency_seconds', 'Histogram of e2e request latency in seconds.', ['model_name'], buckets=[0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0])
for v in (0.2 * n, 0.9, 3.0):
    h.labels('m').observe(v)
lm = Counter('lmcache:num_hit_tokens', 'Number of hit tokens', ['model_name', 'worker_id'])
lm.labels('m', str(n)).inc(5)
hr = Counter('http_requests', 'Total number of requests by method, status and handler.', ['method', 'status', 'handler'])
hr.labels('GET', '2xx', '/v1/models').inc()
u = Gauge('my.metric', 'A UTF-8 name', ['label.x'], multiprocess_mode='all')
u.labels('v').set(n)
"#;
    let dir_s = dir.to_str().unwrap();
    for n in ["1", "2"] {
        run_python(
            &python,
            writer,
            &[n],
            &[("PROMETHEUS_MULTIPROC_DIR", dir_s)],
        );
    }
    let reference = r#"
import gzip, json, sys
from urllib.parse import parse_qs
from prometheus_client import CollectorRegistry
from prometheus_client.exposition import _bake_output
from prometheus_client.multiprocess import MultiProcessCollector
directory, out = sys.argv[1], sys.argv[2]
cases = json.loads(sys.argv[3])
registry = CollectorRegistry(support_collectors_without_names=True)
MultiProcessCollector(registry, path=directory)
for i, (accept, query, encoding) in enumerate(cases):
    status, headers, body = _bake_output(registry, accept, encoding, parse_qs(query), False)
    headers = dict(headers)
    if headers.get('Content-Encoding') == 'gzip':
        body = gzip.decompress(body)
    open(f'{out}/{i}.json', 'w').write(json.dumps(headers))
    open(f'{out}/{i}.body', 'wb').write(body)
"#;
    let cases: Vec<(Option<&str>, &str, Option<&str>)> = vec![
        (None, "", None),
        (Some(PROMETHEUS_2), "", None),
        (Some(PROMETHEUS_3), "", None),
        (Some("application/openmetrics-text"), "", None),
        (Some("application/openmetrics-text;version=0.0.1"), "", None),
        (Some("text/plain;version=1.0.0;escaping=allow-utf-8"), "", None),
        (Some("text/plain;version=1.0.0"), "", None),
        (Some("text/plain;version=1.0.0;escaping=underscores"), "", None),
        (None, "", Some("gzip")),
        (Some(PROMETHEUS_3), "", Some("deflate, gzip")),
        (
            Some(PROMETHEUS_3),
            "name[]=vllm:prompt_tokens_total&name[]=vllm:e2e_request_latency_seconds_bucket&name[]=",
            None,
        ),
        (None, "name[]=my.metric&name[]=http_requests_total", Some("gzip")),
        (None, "name[]=", None),
    ];
    let out = tmp.path().join("reference");
    std::fs::create_dir(&out).unwrap();
    let json = serde_json::to_string(&cases).unwrap();
    run_python(
        &python,
        reference,
        &[dir_s, out.to_str().unwrap(), &json],
        &[],
    );
    let exporter = Exporter::start(&["--dir", dir_s, "--web.disable-exporter-metrics"]);
    for (i, (accept, query, encoding)) in cases.iter().enumerate() {
        let mut headers = Vec::new();
        if let Some(a) = accept {
            headers.push(("Accept", *a));
        }
        if let Some(e) = encoding {
            headers.push(("Accept-Encoding", *e));
        }
        let path = if query.is_empty() {
            "/metrics".to_owned()
        } else {
            format!("/metrics?{query}")
        };
        let reply = exporter.get_with(&path, &headers);
        let expected_headers: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(out.join(format!("{i}.json"))).unwrap())
                .unwrap();
        assert_eq!(
            reply.header("content-type"),
            expected_headers["Content-Type"].as_str(),
            "case {i}"
        );
        // A small `name[]` answer is sent uncompressed (issue 34,
        // docs/differences.md); prometheus_client gzips it.
        let small = !query.is_empty() && reply.body.len() < 4096;
        let expected_encoding = expected_headers["Content-Encoding"].as_str();
        if small && expected_encoding == Some("gzip") {
            assert_eq!(reply.header("content-encoding"), None, "case {i}");
        } else {
            assert_eq!(
                reply.header("content-encoding"),
                expected_encoding,
                "case {i}"
            );
        }
        let body = if reply.header("content-encoding") == Some("gzip") {
            gunzip(&reply.body)
        } else {
            reply.body.clone()
        };
        let expected = std::fs::read(out.join(format!("{i}.body"))).unwrap();
        assert_eq!(
            String::from_utf8_lossy(&body),
            String::from_utf8_lossy(&expected),
            "case {i}: {accept:?} {query:?}"
        );
    }
}

#[test]
fn health_readiness_and_a_directory_created_after_start() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("later/multiproc");
    let dir_s = dir.to_str().unwrap();
    let exporter = Exporter::start(&["--dir", dir_s]);
    assert_eq!(exporter.get("/-/healthy").status, 200);
    let ready = exporter.get("/-/ready");
    assert_eq!(ready.status, 503);
    assert!(ready.text().starts_with("Not ready"));
    // Serving starts at once: only the self-metrics, with the directory missing.
    let body = exporter.metrics();
    assert!(
        body.starts_with("# HELP multiproc_exporter_build_info "),
        "{body}"
    );
    assert!(body.contains("multiproc_exporter_scrape_directories{state=\"missing\"} 1.0\n"));

    std::fs::create_dir_all(&dir).unwrap();
    wait_for("readiness", || {
        (exporter.get("/-/ready").status == 200).then_some(())
    });
    assert_eq!(exporter.get("/-/healthy").status, 200);
    wait_for("the appearance to be logged", || {
        exporter.find_log("Metrics directory appeared.")
    });

    write_counter(&dir, "1", 7.0);
    let body = wait_for("the new file to be served", || {
        let body = exporter.metrics();
        body.contains("vllm:prompt_tokens_total{model_name=\"m\"} 7.0\n")
            .then_some(body)
    });
    assert!(body.contains("multiproc_exporter_scrape_directories{state=\"present\"} 1.0\n"));

    // The directory disappears: not ready again, and nothing merged is served.
    std::fs::remove_dir_all(&dir).unwrap();
    wait_for("unreadiness", || {
        (exporter.get("/-/ready").status == 503).then_some(())
    });
    assert!(!exporter.metrics().contains("vllm:"));
    // ... and comes back (a new inode, watched again).
    std::fs::create_dir_all(&dir).unwrap();
    write_counter(&dir, "2", 3.0);
    wait_for("the recreated directory to be served", || {
        exporter
            .metrics()
            .contains("vllm:prompt_tokens_total{model_name=\"m\"} 3.0\n")
            .then_some(())
    });
    wait_for("readiness again", || {
        (exporter.get("/-/ready").status == 200).then_some(())
    });
}

#[test]
fn files_added_changed_and_removed_between_scrapes() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let (first, offset) = write_counter(dir, "100", 1.0);
    let exporter = Exporter::start(&[
        "--dir",
        dir.to_str().unwrap(),
        "--web.disable-exporter-metrics",
    ]);
    let line = |v: &str| format!("vllm:prompt_tokens_total{{model_name=\"m\"}} {v}\n");
    assert!(exporter.metrics().contains(&line("1.0")));

    // A value written in place (as through Python's mmap: no file event) is
    // seen by the next scrape.
    support::set_value(&first, offset, 41.0);
    assert!(exporter.metrics().contains(&line("41.0")));

    // Another process's file is added: counters add up.
    let (second, _) = write_counter(dir, "200", 1.5);
    assert!(exporter.metrics().contains(&line("42.5")));
    wait_for("the addition to be logged", || {
        exporter
            .logs_with("Metric file added.")
            .into_iter()
            .find(|l| l["file"].as_str() == Some("counter_200.db"))
    });

    // It is removed again.
    std::fs::remove_file(&second).unwrap();
    assert!(exporter.metrics().contains(&line("41.0")));
    wait_for("the removal to be logged", || {
        exporter
            .logs_with("Metric file removed.")
            .into_iter()
            .find(|l| l["file"].as_str() == Some("counter_200.db"))
    });

    // Every file gone: an empty exposition.
    std::fs::remove_file(&first).unwrap();
    assert_eq!(exporter.metrics(), "");
}

#[test]
fn scrapes_of_an_unchanged_directory_serve_the_last_merge_until_a_value_changes() {
    // Regression guard for the skipped merge: after several scrapes that
    // found nothing changed (and served the last families, and without
    // self-metrics the last body), a value written in place is served by
    // the very next scrape, with and without the self-metrics.
    for own_metrics in [true, false] {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path();
        let (file, offset) = write_counter(dir, "100", 1.0);
        let mut args = vec!["--dir", dir.to_str().unwrap()];
        if !own_metrics {
            args.push("--web.disable-exporter-metrics");
        }
        let exporter = Exporter::start(&args);
        let line = |v: &str| format!("vllm:prompt_tokens_total{{model_name=\"m\"}} {v}\n");
        let first = exporter.metrics();
        for _ in 0..5 {
            let body = exporter.metrics();
            assert!(body.contains(&line("1.0")), "{body}");
            if own_metrics {
                assert!(
                    body.contains("multiproc_exporter_scrape_files_read 1.0\n"),
                    "{body}"
                );
                assert!(
                    body.contains("multiproc_exporter_scrape_records 1.0\n"),
                    "{body}"
                );
            } else {
                assert_eq!(body, first);
            }
        }
        support::set_value(&file, offset, 2.0);
        let body = exporter.metrics();
        assert!(
            body.contains(&line("2.0")),
            "own metrics {own_metrics}: {body}"
        );
        support::set_value(&file, offset, 1.0);
        let body = exporter.metrics();
        assert!(
            body.contains(&line("1.0")),
            "own metrics {own_metrics}: {body}"
        );
        if !own_metrics {
            assert_eq!(body, first);
        }
    }
}

#[test]
fn a_file_shrunk_in_place_is_noticed_through_its_file_event() {
    // Regression test: values are loaded from a long-lived map without any
    // system call, and a file shrunk in place within its first page keeps
    // that page mapped (the bytes past the new end read as zeros, no SIGBUS).
    // The truncation's inotify event must make the next scrapes check it.
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    write_counter(dir, "1", 5.0);
    let (shrunk, _) = write_counter(dir, "2", 7.0);
    let exporter = Exporter::start(&["--dir", dir.to_str().unwrap()]);
    assert!(exporter
        .metrics()
        .contains("vllm:prompt_tokens_total{model_name=\"m\"} 12.0\n"));
    std::fs::OpenOptions::new()
        .write(true)
        .open(&shrunk)
        .unwrap()
        .set_len(12)
        .unwrap();
    let body = wait_for("the shrunk file to be reported", || {
        let body = exporter.metrics();
        body.contains("multiproc_exporter_scrape_files_skipped{reason=\"bad_header\"} 1.0\n")
            .then_some(body)
    });
    assert!(
        body.contains("vllm:prompt_tokens_total{model_name=\"m\"} 5.0\n"),
        "{body}"
    );
}

#[test]
fn a_bad_file_is_skipped_counted_and_logged_once() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    write_counter(dir, "1", 5.0);
    // `used` points past the end of the file.
    let bad = dir.join("counter_2.db");
    std::fs::write(&bad, [0xff, 0xff, 0, 0, 0, 0, 0, 0]).unwrap();
    let exporter = Exporter::start(&["--dir", dir.to_str().unwrap()]);
    for _ in 0..3 {
        let body = exporter.metrics();
        assert!(body.contains("vllm:prompt_tokens_total{model_name=\"m\"} 5.0\n"));
        assert!(
            body.contains("multiproc_exporter_scrape_files_skipped{reason=\"bad_header\"} 1.0\n")
        );
        assert!(body.contains("multiproc_exporter_scrape_files_read 1.0\n"));
    }
    let skipped = |exporter: &Exporter| {
        exporter
            .logs_with("Skipping file.")
            .into_iter()
            .filter(|l| l["path"].as_str() == Some(bad.to_str().unwrap()))
            .collect::<Vec<_>>()
    };
    exporter.sync_logs();
    let logged = skipped(&exporter);
    assert_eq!(logged.len(), 1, "{logged:#?}");
    assert_eq!(logged[0]["level"], "WARN");
    assert_eq!(logged[0]["reason_label"], "bad_header");

    // A different problem with the same file is logged again, once.
    std::fs::write(&bad, [16, 0, 0, 0, 0, 0, 0, 0, 200, 0, 0, 0, 0, 0, 0, 0]).unwrap();
    for _ in 0..2 {
        assert!(exporter
            .metrics()
            .contains("multiproc_exporter_scrape_files_skipped{reason=\"bad_record\"} 1.0\n"));
    }
    exporter.sync_logs();
    assert_eq!(skipped(&exporter).len(), 2);

    // Repaired: merged again, and the skip gauge drops to 0.
    write_counter(dir, "2", 1.0);
    let body = exporter.metrics();
    assert!(body.contains("vllm:prompt_tokens_total{model_name=\"m\"} 6.0\n"));
    assert!(body.contains("multiproc_exporter_scrape_files_skipped{reason=\"bad_record\"} 0.0\n"));
    exporter.sync_logs();
    assert!(exporter.find_log("File is readable again.").is_some());
}

#[test]
fn landing_page_custom_path_and_not_found() {
    let tmp = tempfile::tempdir().unwrap();
    let exporter = Exporter::start(&[
        "--dir",
        tmp.path().to_str().unwrap(),
        "--web.telemetry-path",
        "/custom/metrics",
    ]);
    let page = exporter.get("/");
    assert_eq!(page.status, 200);
    assert_eq!(
        page.header("content-type"),
        Some("text/html; charset=UTF-8")
    );
    assert!(page.text().contains("<a href=\"/custom/metrics\">"));
    assert_eq!(exporter.get("/custom/metrics").status, 200);
    assert_eq!(exporter.get("/metrics").status, 404);
    assert_eq!(exporter.get("/custom/metrics/").status, 404);
}

#[test]
fn several_listen_addresses_and_environment_variables() {
    let tmp = tempfile::tempdir().unwrap();
    write_counter(tmp.path(), "1", 2.0);
    let dir = tmp.path().to_str().unwrap();
    // The directory comes from PROMETHEUS_MULTIPROC_DIR, a second address
    // from the environment, exporter metrics are disabled from the environment.
    let exporter = Exporter::start_with_env(
        &[],
        &[
            ("PROMETHEUS_MULTIPROC_DIR", dir),
            ("MULTIPROC_EXPORTER_WEB_DISABLE_EXPORTER_METRICS", "true"),
        ],
    );
    assert!(exporter
        .metrics()
        .starts_with("# HELP vllm:prompt_tokens_total"));
    assert!(!exporter.metrics().contains("multiproc_exporter_"));

    let two = Exporter::start(&["--dir", dir, "--web.listen-address", "127.0.0.1:0"]);
    let addresses: Vec<String> = two
        .logs_with("Listening.")
        .iter()
        .map(|l| l["address"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(addresses.len(), 2, "{addresses:?}");
    for address in addresses {
        let reply = support::get(&format!("http://{address}/-/healthy"), &[]);
        assert_eq!(reply.status, 200);
    }
}

#[test]
fn graceful_shutdown_on_sigterm_and_sigint() {
    for signal in ["TERM", "INT"] {
        let tmp = tempfile::tempdir().unwrap();
        let mut exporter = Exporter::start(&["--dir", tmp.path().to_str().unwrap()]);
        assert_eq!(exporter.get("/-/healthy").status, 200);
        exporter.signal(signal);
        let status = exporter.wait_exit();
        assert!(status.success(), "SIG{signal}: {status}");
        wait_for("the stop to be logged", || exporter.find_log("Stopped."));
    }
}

#[test]
fn no_directory_is_a_usage_error() {
    let (code, _, stderr) =
        support::run_exporter(&["serve", "--web.listen-address", "127.0.0.1:0"]);
    assert_eq!(code, 2);
    assert!(stderr.contains("PROMETHEUS_MULTIPROC_DIR"), "{stderr}");
    let tmp = tempfile::tempdir().unwrap();
    let (code, _, stderr) = support::run_exporter(&[
        "--dir",
        tmp.path().to_str().unwrap(),
        "--web.listen-address",
        "127.0.0.1:0",
        "--web.telemetry-path",
        "metrics",
    ]);
    assert_eq!(code, 2);
    assert!(stderr.contains("must start with '/'"), "{stderr}");
}

#[test]
fn concurrent_scrapes_share_one_collection() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    // Enough files that a collection takes a while.
    for pid in 0..1500 {
        write_counter(dir, &pid.to_string(), 1.0);
    }
    let exporter = Exporter::start(&[
        "--dir",
        dir.to_str().unwrap(),
        "--web.disable-exporter-metrics",
    ]);
    let expected = "vllm:prompt_tokens_total{model_name=\"m\"} 1500.0\n";
    assert!(exporter.metrics().contains(expected));
    let url = format!("{}/metrics", exporter.base);
    let mut rounds = 0;
    while exporter
        .logs_with("Joined a collection in flight.")
        .is_empty()
    {
        rounds += 1;
        assert!(
            rounds <= 10,
            "8 simultaneous scrapes never shared a collection"
        );
        let barrier = std::sync::Arc::new(std::sync::Barrier::new(8));
        let handles: Vec<_> = (0..8)
            .map(|_| {
                let (url, barrier) = (url.clone(), barrier.clone());
                std::thread::spawn(move || {
                    barrier.wait();
                    support::get(&url, &[])
                })
            })
            .collect();
        for handle in handles {
            let reply = handle.join().unwrap();
            assert_eq!(reply.status, 200);
            assert!(
                reply.text().contains(expected),
                "every scrape gets the full result"
            );
        }
    }
}
