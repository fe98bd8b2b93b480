//! Load: many concurrent scrapers against a vLLM-like directory of 256
//! processes, for a bounded time, on loopback. Every answer must be a 200
//! with a body, and the exporter's resident memory must not keep growing
//! (its peak in the second half of the run stays within a bound of its peak
//! in the first half). The figures (throughput, latency percentiles, peak
//! RSS) are printed as one JSON line.
//!
//! CI runs the short variant (debug build, 10 s). The full run of
//! `docs/reliability.md` is:
//!
//! ```sh
//! MPE_LOAD_SECONDS=60 cargo test --release --test load -- --nocapture
//! ```
//!
//! `MPE_LOAD_SCRAPERS` (default 64) and `MPE_LOAD_PROCESSES` (default 256)
//! change the shape. The exporter runs with `--web.max-requests` equal to the
//! number of scrapers, so that none is refused by design (the default limit,
//! 40, would answer the excess with 503).

use crate::support;

use crate::support::fixture;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use std::io::BufRead as _;
use std::process::{Child, Command, Stdio};

/// The exporter at its default log level (the test support starts it at
/// `debug`, which would log every coalesced scrape); killed on drop.
struct Server {
    child: Child,
    base: String,
}

impl Server {
    fn start(args: &[&str]) -> Self {
        let mut child = Command::new(support::exporter_bin())
            .arg("serve")
            .args(args)
            .args([
                "--web.listen-address",
                "127.0.0.1:0",
                "--log.format",
                "json",
            ])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("start the exporter");
        let mut lines = std::io::BufReader::new(child.stderr.take().unwrap()).lines();
        let base = loop {
            let line = lines.next().expect("the exporter to log").unwrap();
            let log: serde_json::Value = serde_json::from_str(&line).unwrap_or_default();
            if log["message"] == "Listening." {
                break format!("http://{}", log["address"].as_str().unwrap());
            }
        };
        std::thread::spawn(move || lines.for_each(drop));
        Self { child, base }
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn env_or<T: std::str::FromStr>(name: &str, default: T) -> T {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// A `VmRSS`/`VmHWM` line of `/proc/PID/status`, in bytes.
fn proc_status_bytes(pid: u32, field: &str) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let line = status.lines().find(|l| l.starts_with(field))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib * 1024)
}

/// What Prometheus 3 sends.
const ACCEPT: &str = "application/openmetrics-text;version=1.0.0;escaping=allow-utf-8;q=0.5,application/openmetrics-text;version=0.0.1;q=0.4,text/plain;version=1.0.0;escaping=allow-utf-8;q=0.3,text/plain;version=0.0.4;q=0.2,*/*;q=0.1";

#[test]
fn concurrent_scrapers_get_answers_and_memory_stays_bounded() {
    let seconds: f64 = env_or("MPE_LOAD_SECONDS", 10.0);
    let scrapers: usize = env_or("MPE_LOAD_SCRAPERS", 64);
    let processes: usize = env_or("MPE_LOAD_PROCESSES", 256);
    let tmp = tempfile::tempdir().unwrap();
    fixture::generate(tmp.path(), processes, 0, 1).unwrap();
    let exporter = Server::start(&[
        "--dir",
        tmp.path().to_str().unwrap(),
        "--web.max-requests",
        &scrapers.to_string(),
    ]);
    let pid = exporter.child.id();
    let url = format!("{}/metrics", exporter.base);

    let stop = AtomicBool::new(false);
    let rss: Mutex<Vec<(f64, u64)>> = Mutex::default();
    let latencies: Mutex<Vec<f64>> = Mutex::default();
    let errors: Mutex<Vec<String>> = Mutex::default();
    let bytes = Arc::new(std::sync::atomic::AtomicU64::new(0));
    let begin = Instant::now();
    let deadline = Duration::from_secs_f64(seconds);
    std::thread::scope(|scope| {
        scope.spawn(|| {
            while !stop.load(Ordering::Relaxed) {
                if let Some(b) = proc_status_bytes(pid, "VmRSS:") {
                    rss.lock().unwrap().push((begin.elapsed().as_secs_f64(), b));
                }
                std::thread::sleep(Duration::from_millis(100));
            }
        });
        let workers: Vec<_> = (0..scrapers)
            .map(|_| {
                let (url, latencies, errors, bytes) = (&url, &latencies, &errors, bytes.clone());
                scope.spawn(move || {
                    let agent: ureq::Agent = ureq::Agent::config_builder()
                        .http_status_as_error(false)
                        .timeout_global(Some(Duration::from_secs(60)))
                        .build()
                        .into();
                    let mut local = Vec::new();
                    while begin.elapsed() < deadline {
                        let t = Instant::now();
                        let result = agent
                            .get(url)
                            .header("Accept", ACCEPT)
                            .header("Accept-Encoding", "gzip")
                            .header("X-Prometheus-Scrape-Timeout-Seconds", "10")
                            .call()
                            .and_then(support::read_reply)
                            .map_err(|e| e.to_string())
                            .and_then(|reply| {
                                if reply.status == 200 && !reply.body.is_empty() {
                                    Ok(reply.body.len())
                                } else {
                                    Err(format!(
                                        "status {}, {} bytes",
                                        reply.status,
                                        reply.body.len()
                                    ))
                                }
                            });
                        match result {
                            Ok(n) => {
                                local.push(t.elapsed().as_secs_f64() * 1e3);
                                bytes.fetch_add(n as u64, Ordering::Relaxed);
                            }
                            Err(e) => errors.lock().unwrap().push(e),
                        }
                    }
                    latencies.lock().unwrap().extend(local);
                })
            })
            .collect();
        for worker in workers {
            worker.join().unwrap();
        }
        stop.store(true, Ordering::Relaxed);
    });
    let elapsed = begin.elapsed().as_secs_f64();
    // The kernel updates VmHWM lazily: take the larger of it and the samples.
    let sampled_peak = rss.lock().unwrap().iter().map(|(_, b)| *b).max();
    let peak = proc_status_bytes(pid, "VmHWM:")
        .unwrap_or(0)
        .max(sampled_peak.unwrap_or(0));
    let rss_anon = proc_status_bytes(pid, "RssAnon:");
    let rss_file = proc_status_bytes(pid, "RssFile:");
    let cpu_seconds = support::get(
        &format!("{}/metrics?name[]=process_cpu_seconds_total", exporter.base),
        &[],
    )
    .text()
    .lines()
    .find_map(|l| {
        l.strip_prefix("process_cpu_seconds_total ")?
            .parse::<f64>()
            .ok()
    });
    drop(exporter);

    let mut ms = latencies.into_inner().unwrap();
    ms.sort_by(f64::total_cmp);
    let at = |q: f64| ms[((ms.len() - 1) as f64 * q).round() as usize];
    let rss = rss.into_inner().unwrap();
    let half = elapsed / 2.0;
    let first_half = rss.iter().filter(|(t, _)| *t < half).map(|(_, b)| *b).max();
    let second_half = rss
        .iter()
        .filter(|(t, _)| *t >= half)
        .map(|(_, b)| *b)
        .max();
    let by_quarter: Vec<Option<u64>> = (0..4)
        .map(|q| {
            let (from, to) = (elapsed * q as f64 / 4.0, elapsed * (q + 1) as f64 / 4.0);
            rss.iter()
                .filter(|(t, _)| *t >= from && *t < to)
                .map(|(_, b)| *b)
                .max()
        })
        .collect();
    let errors = errors.into_inner().unwrap();
    let mib = |b: u64| b as f64 / (1024.0 * 1024.0);
    eprintln!(
        "{}",
        serde_json::json!({
            "build": if cfg!(debug_assertions) { "debug" } else { "release" },
            "processes": processes,
            "scrapers": scrapers,
            "seconds": elapsed,
            "requests": ms.len(),
            "errors": errors.len(),
            "requests_per_second": ms.len() as f64 / elapsed,
            "exporter_cpu_seconds": cpu_seconds,
            "mean_body_bytes": bytes.load(Ordering::Relaxed) / (ms.len().max(1) as u64),
            "latency_ms": {"p50": at(0.5), "p90": at(0.9), "p99": at(0.99), "max": at(1.0)},
            "rss_mib": {
                "peak": mib(peak),
                "first_half_max": first_half.map(mib),
                "second_half_max": second_half.map(mib),
                "max_by_quarter": by_quarter.iter().map(|b| b.map(mib)).collect::<Vec<_>>(),
                // At the end: heap and stacks, and mapped metric files.
                "anon_at_end": rss_anon.map(mib),
                "file_at_end": rss_file.map(mib),
            },
        })
    );
    assert!(
        errors.is_empty(),
        "{} errors, first: {:?}",
        errors.len(),
        &errors[..errors.len().min(5)]
    );
    assert!(ms.len() >= scrapers, "only {} requests", ms.len());
    let (Some(first_half), Some(second_half)) = (first_half, second_half) else {
        panic!("no RSS samples: {rss:?}");
    };
    // Allocator noise and thread stacks aside, a leak of even a few bytes
    // per request (thousands of requests) would show here.
    let bound = first_half + first_half / 4 + 16 * 1024 * 1024;
    assert!(
        second_half <= bound,
        "RSS grew from {:.1} MiB to {:.1} MiB",
        mib(first_half),
        mib(second_half)
    );
}
