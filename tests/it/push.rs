//! Pushing with remote write (`--push.*`) to a real Prometheus (Debian's
//! `prometheus`, started with `--web.enable-remote-write-receiver`): the
//! series written by real prometheus_client processes arrive with exactly
//! the values and labels `/metrics` serves; while the receiver is down the
//! collections wait in the queue and all arrive once it is back (each
//! pushed timestamp and value checked), and with a small queue the
//! collections beyond its bound are dropped and counted. Over TLS with basic
//! authentication (Prometheus's `--web.config.file`), the right credentials
//! and CA push, a wrong password is refused (401, dropped, logged once) and
//! an untrusted certificate fails as a connection error.

use std::collections::BTreeMap;
use std::path::Path;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use crate::support::exposition::Exposition;
use crate::support::monitoring::{eventually, free_port, Prometheus};
use crate::support::web::{bcrypt_hash, Pki};
use crate::support::{merged_part, python, run_vllm_load, sample_value, set_value, tool};
use crate::support::{wait_for, write_counter, Exporter};

/// Prometheus only receives: no scrape configuration.
const CONFIG: &str = "global:\n  scrape_interval: 1m\n";

fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .expect("clock")
        .as_millis() as i64
}

fn start_prometheus(binary: &Path, work: &Path, port: u16) -> Prometheus {
    Prometheus::start_with(
        binary,
        work,
        CONFIG,
        port,
        &["--web.enable-remote-write-receiver"],
    )
}

fn pushing_exporter(dir: &str, url: &str, name: &str, queue_capacity: &str) -> Exporter {
    Exporter::start(&[
        "--dir",
        dir,
        "--writers.liveness",
        "off",
        "--push.remote-write-url",
        url,
        "--push.interval",
        "500ms",
        "--push.max-backoff",
        "200ms",
        "--push.queue-capacity",
        queue_capacity,
        "--push.label",
        &format!("exporter={name}"),
    ])
}

/// A self-metric's value on the exporter's `/metrics`.
fn self_metric(exporter: &Exporter, series: &str) -> f64 {
    let body = exporter.metrics();
    sample_value(&body, series).unwrap_or_else(|| panic!("no {series} in\n{body}"))
}

/// A PromQL selector for one sample of the exposition, with `exporter`.
fn selector(name: &str, labels: &BTreeMap<String, String>, exporter: &str) -> String {
    let mut selector = format!("{{__name__=\"{name}\",exporter=\"{exporter}\"");
    for (n, v) in labels {
        selector.push_str(&format!(
            ",{n}=\"{}\"",
            v.replace('\\', "\\\\").replace('"', "\\\"")
        ));
    }
    selector.push('}');
    selector
}

#[test]
fn prometheus_receives_the_pushed_series_and_the_queue_outlives_an_outage() {
    let Some(python) = python() else { return };
    let Some(prometheus_bin) = tool("prometheus") else {
        return;
    };
    let work = tempfile::tempdir().expect("tempdir");
    let metrics_dir = work.path().join("multiproc");
    std::fs::create_dir(&metrics_dir).expect("mkdir");
    run_vllm_load(&python, &metrics_dir);
    // A counter whose value the test changes while the receiver is down.
    let (counter, offset) = write_counter(&metrics_dir, "100", 0.0);
    let changing = "vllm:prompt_tokens_total{model_name=\"m\"";

    let prometheus_work = work.path().join("prometheus");
    std::fs::create_dir(&prometheus_work).expect("mkdir");
    let port = free_port();
    let prometheus = start_prometheus(&prometheus_bin, &prometheus_work, port);
    let url = format!("http://127.0.0.1:{port}/api/v1/write");
    let dir = metrics_dir.to_str().expect("utf-8 path");
    let roomy = pushing_exporter(dir, &url, "a", "100");
    let small = pushing_exporter(dir, &url, "b", "2");

    // Every merged sample arrives with its labels and exact value.
    let served = Exposition::parse(merged_part(&roomy.metrics()));
    assert!(served.samples.len() > 20, "{served:?}");
    for exporter in ["a", "b"] {
        eventually(
            &format!("the series of exporter {exporter}"),
            Duration::from_secs(30),
            || {
                for sample in &served.samples {
                    let selector = selector(&sample.name, &sample.labels, exporter);
                    let found = prometheus.query(&selector)?;
                    let [(labels, value)] = found.as_slice() else {
                        return Err(format!("{selector}: {found:?}"));
                    };
                    let mut want: BTreeMap<String, String> = sample.labels.clone();
                    want.insert("__name__".into(), sample.name.clone());
                    want.insert("exporter".into(), exporter.into());
                    let got: BTreeMap<String, String> =
                        serde_json::from_value(labels.clone()).expect("labels");
                    assert_eq!(got, want, "{selector}");
                    if value.to_bits() != sample.value.to_bits() {
                        return Err(format!("{selector}: {value} != {}", sample.value));
                    }
                }
                Ok(())
            },
        );
    }
    // The self-metrics are pushed too.
    assert_eq!(
        prometheus.query_one("multiproc_exporter_push_queue_capacity{exporter=\"b\"}"),
        Some(2.0)
    );

    // The receiver goes away for about five seconds while the counter
    // changes every 1.2 s (about ten collections at 500ms).
    let start = now_ms();
    drop(prometheus);
    let killed = now_ms();
    for value in 1..=4 {
        set_value(&counter, offset, f64::from(value));
        std::thread::sleep(Duration::from_millis(1200));
    }
    let restarted = now_ms();
    let prometheus = start_prometheus(&prometheus_bin, &prometheus_work, port);
    // Both exporters' queues empty and their newest samples, made after the
    // restart, arrived: what follows compares the two up to the older newest
    // sample (b's sender may still be in its backoff when a's queue is
    // empty; CI failed when it was).
    eventually("the queues to empty", Duration::from_secs(30), || {
        for (exporter, name) in [(&roomy, "a"), (&small, "b")] {
            let queued = self_metric(
                exporter,
                "multiproc_exporter_push_queue_length{protocol=\"remote_write\"}",
            );
            let newest = prometheus.raw_samples(&format!("{changing},exporter=\"{name}\"}}[1m]"));
            match newest.last() {
                Some(&(t, 4.0)) if queued == 0.0 && t > restarted => {}
                last => return Err(format!("{name}: queue {queued}, newest {last:?}")),
            }
        }
        Ok(())
    });
    assert_eq!(
        self_metric(
            &roomy,
            "multiproc_exporter_push_collections_dropped_total{protocol=\"remote_write\",reason=\"queue_full\"}"
        ),
        0.0
    );
    let dropped = self_metric(
        &small,
        "multiproc_exporter_push_collections_dropped_total{protocol=\"remote_write\",reason=\"queue_full\"}",
    );
    assert!(
        self_metric(
            &small,
            "multiproc_exporter_push_samples_dropped_total{protocol=\"remote_write\",reason=\"queue_full\"}"
        ) > 20.0 * dropped
    );
    // Nothing dropped after the outage: the counts hold from here on.
    let a = prometheus.raw_samples(&format!("{changing},exporter=\"a\"}}[2m]"));
    let b = prometheus.raw_samples(&format!("{changing},exporter=\"b\"}}[2m]"));
    let end = a.last().expect("a").0.min(b.last().expect("b").0);

    // Exporter a lost nothing: a sample every interval through the outage,
    // in order, with every value the counter had.
    let window: Vec<(i64, f64)> = a
        .iter()
        .copied()
        .filter(|&(t, _)| t >= start - 1000 && t <= end)
        .collect();
    for pair in window.windows(2) {
        let gap = pair[1].0 - pair[0].0;
        assert!(
            gap > 0 && gap < 2500,
            "a gap of {gap} ms in exporter a's samples {window:?}"
        );
    }
    let during: Vec<(i64, f64)> = window
        .iter()
        .copied()
        .filter(|&(t, _)| t > killed && t < restarted)
        .collect();
    assert!(during.len() >= 4, "{during:?}");
    for value in 1..=4 {
        assert!(
            during.iter().any(|&(_, v)| v == f64::from(value)),
            "value {value} pushed during the outage is missing: {during:?}"
        );
    }
    // Exporter b kept only what its queue holds (its newest collections,
    // some perhaps made while Prometheus was starting again); the rest is
    // counted.
    let b_during = b
        .iter()
        .filter(|&&(t, _)| t > killed && t < restarted)
        .count();
    assert!(b_during <= 3, "{b:?}");
    assert!(dropped >= 3.0, "dropped {dropped}");
    let made_a = a.iter().filter(|&&(t, _)| t > killed && t <= end).count() as f64;
    let arrived_b = b.iter().filter(|&&(t, _)| t > killed && t <= end).count() as f64;
    eprintln!(
        "outage {} ms: a pushed {during:?}; b kept {b_during}, dropped {dropped}; \
         since: a made {made_a}, b arrived {arrived_b}",
        restarted - killed
    );
    assert!(
        (arrived_b + dropped - made_a).abs() <= 3.0,
        "b: {arrived_b} arrived + {dropped} dropped, a: {made_a} made"
    );

    // At SIGTERM the last collection is pushed before the exporter exits.
    let mut roomy = roomy;
    roomy.signal("TERM");
    assert!(roomy.wait_exit().success());
    assert!(
        roomy.find_log("Pushed the last collection.").is_some(),
        "{:#?}",
        roomy.logs()
    );
}

#[test]
fn pushes_over_tls_with_basic_auth_and_counts_refusals() {
    let Some(prometheus_bin) = tool("prometheus") else {
        return;
    };
    if tool("openssl").is_none() {
        return;
    }
    let work = tempfile::tempdir().expect("tempdir");
    let pki = Pki::new(&work.path().join("pki"));
    let web_config = pki.path("web.yml");
    std::fs::write(
        &web_config,
        format!(
            "tls_server_config:\n  cert_file: server.pem\n  key_file: server.key\n\
             basic_auth_users:\n  push: {}\n",
            bcrypt_hash("push-secret")
        ),
    )
    .expect("web.yml");
    let prometheus_work = work.path().join("prometheus");
    std::fs::create_dir(&prometheus_work).expect("mkdir");
    let port = free_port();
    let web_config_flag = format!("--web.config.file={}", web_config.display());
    let _prometheus = Prometheus::start_with(
        &prometheus_bin,
        &prometheus_work,
        CONFIG,
        port,
        &["--web.enable-remote-write-receiver", &web_config_flag],
    );
    let dir = work.path().join("metrics");
    std::fs::create_dir(&dir).expect("mkdir");
    write_counter(&dir, "1", 5.0);
    let password = work.path().join("password");
    std::fs::write(&password, "push-secret\n").expect("password");
    let wrong = work.path().join("wrong");
    std::fs::write(&wrong, "guess\n").expect("password");
    let url = format!("https://127.0.0.1:{port}/api/v1/write");
    let ca = pki.arg("ca.pem");
    let push = |password: &Path, ca: Option<&str>| {
        let mut args = vec![
            "--dir",
            dir.to_str().expect("utf-8"),
            "--push.remote-write-url",
            &url,
            "--push.interval",
            "200ms",
            "--push.max-backoff",
            "200ms",
            "--push.basic-auth.username",
            "push",
            "--push.basic-auth.password-file",
            password.to_str().expect("utf-8"),
        ];
        if let Some(ca) = ca {
            args.extend(["--push.tls.ca-file", ca]);
        }
        Exporter::start(&args)
    };
    let good = push(&password, Some(&ca));
    let refused = push(&wrong, Some(&ca));
    let untrusted = push(&password, None);
    let value = |exporter: &Exporter, series: &str| {
        sample_value(&exporter.metrics(), series).unwrap_or_default()
    };
    wait_for("pushes to be accepted over TLS", || {
        (value(
            &good,
            "multiproc_exporter_push_requests_sent_total{protocol=\"remote_write\"}",
        ) >= 2.0)
            .then_some(())
    });
    wait_for("a wrong password to be refused", || {
        (value(
            &refused,
            "multiproc_exporter_push_collections_dropped_total{protocol=\"remote_write\",reason=\"rejected\"}",
        ) >= 2.0)
            .then_some(())
    });
    wait_for("an untrusted certificate to fail", || {
        (value(
            &untrusted,
            "multiproc_exporter_push_failures_total{protocol=\"remote_write\",reason=\"connection\"}",
        ) >= 2.0)
            .then_some(())
    });
    let body = good.metrics();
    for series in [
        "multiproc_exporter_push_failures_total{protocol=\"remote_write\",reason=\"connection\"}",
        "multiproc_exporter_push_failures_total{protocol=\"remote_write\",reason=\"http_4xx\"}",
    ] {
        assert_eq!(sample_value(&body, series), Some(0.0), "{series}");
    }
    assert_eq!(
        value(
            &refused,
            "multiproc_exporter_push_requests_sent_total{protocol=\"remote_write\"}"
        ),
        0.0
    );
    assert_eq!(
        value(
            &untrusted,
            "multiproc_exporter_push_requests_sent_total{protocol=\"remote_write\"}"
        ),
        0.0
    );
    // One log line for the failing state, however many attempts failed.
    let failing = "Pushing fails: the remote-write receiver did not accept a request.";
    let logged = refused.logs_with(failing);
    assert_eq!(logged.len(), 1, "{:#?}", refused.logs());
    assert!(
        logged[0]["error"]
            .as_str()
            .unwrap_or_default()
            .contains("401"),
        "{logged:?}"
    );
    assert_eq!(untrusted.logs_with(failing).len(), 1);
}

/// A receiver that answers every request with `status` and counts them
/// (a thread; `Connection: close` after each answer).
fn answering(status: u16) -> (String, std::sync::Arc<std::sync::atomic::AtomicUsize>) {
    answering_with(status, "")
}

/// [`answering`] with `headers` (whole lines, `\r\n` ended) in each answer.
fn answering_with(
    status: u16,
    headers: &'static str,
) -> (String, std::sync::Arc<std::sync::atomic::AtomicUsize>) {
    use std::io::{BufRead, BufReader, Read, Write};
    use std::sync::atomic::{AtomicUsize, Ordering};
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let url = format!("http://{}/api/v1/write", listener.local_addr().unwrap());
    let count = std::sync::Arc::new(AtomicUsize::new(0));
    let counted = count.clone();
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut stream) = stream else { continue };
            let mut reader = BufReader::new(stream.try_clone().expect("clone"));
            let mut length = 0usize;
            loop {
                let mut line = String::new();
                if reader.read_line(&mut line).unwrap_or(0) == 0 || line == "\r\n" {
                    break;
                }
                if let Some(v) = line.to_ascii_lowercase().strip_prefix("content-length:") {
                    length = v.trim().parse().unwrap_or(0);
                }
            }
            let mut body = vec![0; length];
            let _ = reader.read_exact(&mut body);
            counted.fetch_add(1, Ordering::SeqCst);
            let _ = write!(
                stream,
                "HTTP/1.1 {status} Test\r\n{headers}Content-Length: 4\r\nConnection: close\r\n\r\nfail"
            );
        }
    });
    (url, count)
}

/// Issue 41: remote write retries a `500`, as Prometheus does (OTLP does
/// not: `otlp::a_500_is_not_retried_for_otlp_…`), with backoff from 30 ms.
#[test]
fn a_500_is_retried_for_remote_write() {
    use std::sync::atomic::Ordering;
    let tmp = tempfile::tempdir().unwrap();
    write_counter(tmp.path(), "100", 1.0);
    let (url, count) = answering(500);
    // One collection in the test's time: every request after the first is
    // a retry of it.
    let exporter = Exporter::start(&[
        "--dir",
        tmp.path().to_str().unwrap(),
        "--push.remote-write-url",
        &url,
        "--push.interval",
        "1h",
    ]);
    wait_for("retries", || {
        (count.load(Ordering::SeqCst) >= 4).then_some(())
    });
    let body = exporter.metrics();
    let rejected: Vec<&str> = body
        .lines()
        .filter(|l| {
            l.starts_with("multiproc_exporter_push_collections_dropped_total{")
                && l.contains("reason=\"rejected\"")
        })
        .collect();
    assert!(!rejected.is_empty(), "{body}");
    assert!(rejected.iter().all(|l| l.ends_with(" 0.0")), "{rejected:?}");
}

/// An exporter of `dir` pushing every second to both receivers (the OTLP
/// one's URL given as [`answering`] makes it).
fn pushing_to_both(dir: &Path, remote_write: &str, otlp: &str) -> Exporter {
    let otlp = otlp.replace("/api/v1/write", "/v1/metrics");
    Exporter::start(&[
        "--dir",
        dir.to_str().expect("utf-8"),
        "--push.remote-write-url",
        remote_write,
        "--push.otlp-url",
        &otlp,
        "--push.interval",
        "1s",
    ])
}

/// Issue 48: a receiver answering `429` with `Retry-After: 60` got requests
/// at 0.2, 5.2, 10.2 and 15.2 s (`--push.max-backoff` cut the wait), twelve
/// times what it asked. Now the wait is at least the `Retry-After`: at most
/// two requests in 15 s, over remote write and OTLP alike (one exporter
/// pushing to both, at 1 s).
#[test]
fn a_429_with_retry_after_60_gets_at_most_2_requests_in_15_s() {
    use std::sync::atomic::Ordering;
    let tmp = tempfile::tempdir().unwrap();
    write_counter(tmp.path(), "100", 1.0);
    let (remote_write, rw_count) = answering_with(429, "Retry-After: 60\r\n");
    let (otlp, otlp_count) = answering_with(429, "Retry-After: 60\r\n");
    let exporter = pushing_to_both(tmp.path(), &remote_write, &otlp);
    wait_for("a first request to each", || {
        (rw_count.load(Ordering::SeqCst) >= 1 && otlp_count.load(Ordering::SeqCst) >= 1)
            .then_some(())
    });
    std::thread::sleep(Duration::from_secs(15));
    for (protocol, count) in [("remote_write", &rw_count), ("otlp", &otlp_count)] {
        let requests = count.load(Ordering::SeqCst);
        assert!(requests <= 2, "{protocol}: {requests} requests in 15 s");
        // The queue does not grow while the receiver asks to wait.
        let body = exporter.metrics();
        let queued = sample_value(
            &body,
            &format!("multiproc_exporter_push_queue_length{{protocol=\"{protocol}\"}}"),
        );
        assert!(queued.is_some_and(|q| q <= 1.0), "{protocol}: {queued:?}");
        let superseded = sample_value(
            &body,
            &format!("multiproc_exporter_push_collections_dropped_total{{protocol=\"{protocol}\",reason=\"superseded\"}}"),
        );
        assert!(
            superseded.is_some_and(|n| n >= 5.0),
            "{protocol}: {superseded:?}"
        );
    }
    assert_eq!(exporter.get("/-/healthy").status, 200);
}

/// Issue 48: after SIGTERM the sender woke every 20 ms until the flush
/// deadline: 38 requests in 0.8 s, 225 in another run, to a receiver
/// answering `429`. Now it makes one last attempt within the grace period
/// that respects the wait in force, and logs once what it could not send.
#[test]
fn sigterm_while_the_receiver_answers_429_makes_at_most_3_requests() {
    use std::sync::atomic::Ordering;
    let tmp = tempfile::tempdir().unwrap();
    write_counter(tmp.path(), "100", 1.0);
    let (remote_write, rw_count) = answering_with(429, "Retry-After: 1\r\n");
    let (otlp, otlp_count) = answering(429);
    let mut exporter = pushing_to_both(tmp.path(), &remote_write, &otlp);
    wait_for("failed requests to each", || {
        (rw_count.load(Ordering::SeqCst) >= 1 && otlp_count.load(Ordering::SeqCst) >= 3)
            .then_some(())
    });
    let before = [
        rw_count.load(Ordering::SeqCst),
        otlp_count.load(Ordering::SeqCst),
    ];
    exporter.signal("TERM");
    assert!(exporter.wait_exit().success());
    for (protocol, count, before) in [
        ("remote_write", &rw_count, before[0]),
        ("otlp", &otlp_count, before[1]),
    ] {
        let after = count.load(Ordering::SeqCst) - before;
        assert!(after <= 3, "{protocol}: {after} requests after SIGTERM");
    }
    let logged = exporter.logs_with(
        "Shutting down with collections not pushed (the receiver did not take them within --push.flush-deadline).",
    );
    assert_eq!(logged.len(), 2, "{:#?}", exporter.logs());
}

/// Issue 54: an upstream taking 12 s to answer, `--push.flush-deadline 5s`:
/// the exporter exited 22 s after SIGTERM (it finished the collection in
/// progress, then collected once more after the deadline, and never sent
/// it). The collection is now raced against the deadline, and the process
/// does not wait for it on the way out.
#[test]
fn sigterm_behind_a_slow_upstream_exits_within_the_flush_deadline() {
    use std::io::{BufRead, BufReader, Write};
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::Arc;
    let tmp = tempfile::tempdir().unwrap();
    // An upstream answering at once until `slow`, then after 12 s.
    let slow = Arc::new(AtomicBool::new(false));
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let upstream = format!("http://{}/metrics", listener.local_addr().unwrap());
    let slowed = slow.clone();
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut stream) = stream else { continue };
            let slow = slowed.load(Ordering::SeqCst);
            std::thread::spawn(move || {
                let mut reader = BufReader::new(stream.try_clone().expect("clone"));
                loop {
                    let mut line = String::new();
                    if reader.read_line(&mut line).unwrap_or(0) == 0 || line == "\r\n" {
                        break;
                    }
                }
                if slow {
                    std::thread::sleep(Duration::from_secs(12));
                }
                let body = "# TYPE upstream_requests counter\nupstream_requests_total 1.0\n";
                let _ = write!(
                    stream,
                    "HTTP/1.1 200 OK\r\nContent-Type: text/plain; version=0.0.4\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                    body.len()
                );
            });
        }
    });
    let config = tmp.path().join("config.yaml");
    std::fs::write(
        &config,
        format!("upstreams:\n  - name: slow\n    url: {upstream}\n    timeout: 12s\n"),
    )
    .unwrap();
    let dir = tmp.path().join("metrics");
    std::fs::create_dir(&dir).unwrap();
    write_counter(&dir, "100", 1.0);
    let (otlp, count) = answering(200);
    let otlp = otlp.replace("/api/v1/write", "/v1/metrics");
    let mut exporter = Exporter::start(&[
        "--dir",
        dir.to_str().unwrap(),
        "--config",
        config.to_str().unwrap(),
        "--push.otlp-url",
        &otlp,
        "--push.interval",
        "1s",
        "--push.flush-deadline",
        "2s",
    ]);
    wait_for("a first push", || {
        (count.load(std::sync::atomic::Ordering::SeqCst) >= 1).then_some(())
    });
    slow.store(true, Ordering::SeqCst);
    // The next collection is waiting for the upstream.
    std::thread::sleep(Duration::from_millis(2500));
    let signal = std::time::Instant::now();
    exporter.signal("TERM");
    assert!(exporter.wait_exit().success());
    let took = signal.elapsed();
    // 2 s and a margin (it was the upstream's 12 s and more).
    assert!(
        took < Duration::from_secs(6),
        "exited {took:?} after SIGTERM"
    );
}
