//! Delta temporality (`--push.otlp-temporality=delta`) end to end: real
//! prometheus_client writers, some series born before pushing started and
//! most after, a receiver built on the official schemas
//! (`tests/python/otlp_receiver.py`) that answers `503` for a while. The
//! deltas it accepted add up exactly to prometheus_client's own merge of
//! the files, less the values at the first collection; every point is
//! delta (temporality 1) and starts where the series' previous accepted
//! point ended.

use std::collections::BTreeMap;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

use serde_json::Value;

use crate::otlp::{
    attributes, float, metrics, prometheus_client_merge, pushing_exporter, Receiver,
};
use crate::support::{eventually, python, run_python, wait_for};

/// A writer: counts requests by code and route and observes latencies
/// (multiples of 1/8: exact sums) for `seconds`; each writer adds a route of
/// its own after its 40th request (a series born later still).
const WRITER: &str = r#"import sys, time
from prometheus_client import Counter, Histogram
requests = Counter('od_requests', 'Requests.', ['code', 'route'])
latency = Histogram('od_latency_seconds', 'Latency.', ['route'], buckets=(0.25, 1.0))
n, seconds = sys.argv[1], float(sys.argv[2])
end = time.time() + seconds
i = 0
while time.time() < end:
    route = ['/a', '/b', '/c'][i % 3] if i < 40 else ['/a', '/late-' + n][i % 2]
    code = '500' if i % 7 == 0 else '200'
    requests.labels(code, route).inc(1.5 if i % 2 else 1)
    latency.labels(route).observe((i % 10) / 8)
    i += 1
    time.sleep(0.04)
"#;

/// prometheus_client's merge of `dir`: each counter series' value, each
/// histogram series' `_count` and `_sum`, keyed as [`pushed`] keys them.
fn merged(python: &Path, dir: &Path) -> BTreeMap<String, f64> {
    let exposition = prometheus_client_merge(python, dir);
    let mut out = BTreeMap::new();
    for s in exposition.named("od_requests_total") {
        out.insert(format!("od_requests_total{:?}", s.labels), s.value);
    }
    for suffix in ["_count", "_sum"] {
        for s in exposition.named(&format!("od_latency_seconds{suffix}")) {
            out.insert(format!("od_latency_seconds{:?}{suffix}", s.labels), s.value);
        }
    }
    out
}

/// One delta point as the test follows it: its series key(s) and values.
fn pushed(metric: &Value, point: &Value) -> Vec<(String, f64)> {
    let series = format!(
        "{}{:?}",
        metric["name"].as_str().unwrap_or(""),
        attributes(point)
    );
    match metric["type"].as_str() {
        Some("histogram") => vec![
            (
                format!("{series}_count"),
                point["count"].as_f64().unwrap_or(f64::NAN),
            ),
            (format!("{series}_sum"), float(&point["sum"])),
        ],
        _ => vec![(series, float(&point["value"]))],
    }
}

/// Issue 48: with delta temporality, a series first seen after the first
/// push (every series of a vLLM pod whose exporter starts first) lost its
/// first interval: four writers started after the first push, counting
/// for 6 s, pushed deltas adding up to 115.5 for a counter that
/// prometheus_client had at 130.5. And a push the receiver did not accept
/// lost its interval's change. Now the deltas accepted add up exactly.
#[test]
fn deltas_add_up_for_series_born_before_and_after_pushing_started_and_across_a_503() {
    let Some(python) = python() else { return };
    let work = tempfile::tempdir().expect("tempdir");
    let dir = work.path().join("multiproc");
    std::fs::create_dir(&dir).expect("mkdir");
    let env = [("PROMETHEUS_MULTIPROC_DIR", dir.to_str().expect("utf-8"))];
    // Born before pushing started: the first collection's values are the
    // base the deltas start from.
    run_python(
        &python,
        &format!(
            "{WRITER}\nrequests.labels('200', '/a').inc(5)\nlatency.labels('/a').observe(0.25)\n"
        ),
        &["0", "0"],
        &env,
    );
    let base = merged(&python, &dir);
    assert_eq!(base.len(), 3, "{base:?}");
    let status = work.path().join("status");
    let receiver = Receiver::start_with(
        &python,
        &work.path().join("otlp.jsonl"),
        0,
        &["--status-file", status.to_str().expect("utf-8")],
    );
    let exporter = pushing_exporter(&dir, &receiver.url(), &["--push.otlp-temporality", "delta"]);
    wait_for("the first push", || {
        (!receiver.requests().is_empty()).then_some(())
    });

    // Four writers, started after the first push, for 4 s; the receiver
    // answers 503 in the middle (three requests or more, over about
    // two seconds).
    let writers: Vec<_> = (1..=4)
        .map(|n| {
            Command::new(&python)
                .arg("-c")
                .arg(WRITER)
                .args([&n.to_string(), "4"])
                .envs(env)
                .stdin(Stdio::null())
                .spawn()
                .expect("start a writer")
        })
        .collect();
    std::thread::sleep(Duration::from_secs(1));
    std::fs::write(&status, "503").expect("write the status");
    let answered = |code: u64| {
        receiver
            .requests()
            .iter()
            .filter(|r| r["status"] == code)
            .count()
    };
    wait_for("three requests answered 503", || {
        (answered(503) >= 3).then_some(())
    });
    // A few collections more (queued behind the failing one).
    std::thread::sleep(Duration::from_millis(1500));
    std::fs::remove_file(&status).expect("remove the status");
    for mut writer in writers {
        assert!(writer.wait().expect("wait").success());
    }
    let last = merged(&python, &dir);
    assert!(last.len() > base.len() + 4, "{last:?}");

    // Until the values after the writers stopped were accepted: every
    // series' accepted deltas add up to its change since the first
    // collection (its whole value if it was born later).
    let sums = eventually(
        "the deltas to add up to prometheus_client's values",
        Duration::from_secs(30),
        || {
            let mut sums: BTreeMap<String, f64> = BTreeMap::new();
            for request in receiver.requests().iter().filter(|r| r["status"] == 200) {
                for m in metrics(request) {
                    if !m["name"].as_str().unwrap_or("").starts_with("od_") {
                        continue;
                    }
                    for p in m["points"].as_array().expect("points") {
                        for (key, value) in pushed(m, p) {
                            *sums.entry(key).or_default() += value;
                        }
                    }
                }
            }
            let expected: BTreeMap<String, f64> = last
                .iter()
                .map(|(k, v)| (k.clone(), v - base.get(k).copied().unwrap_or(0.0)))
                .collect();
            if sums == expected {
                Ok(sums)
            } else {
                Err(format!("expected {expected:#?}\npushed {sums:#?}"))
            }
        },
    );
    assert!(sums.keys().any(|k| k.contains("late-")), "{sums:?}");
    assert!(answered(503) >= 3);

    // Temporality 1, and each accepted point starts where the series'
    // previous accepted point ended.
    let mut ended: BTreeMap<String, u64> = BTreeMap::new();
    let mut chained = 0;
    for request in receiver.requests().iter().filter(|r| r["status"] == 200) {
        for m in metrics(request) {
            let name = m["name"].as_str().unwrap_or("");
            if !name.starts_with("od_") {
                continue;
            }
            assert_eq!(m["temporality"], 1, "{m}");
            for p in m["points"].as_array().expect("points") {
                let series = format!("{name}{:?}", attributes(p));
                let (start, time) = (p["start"].as_u64().unwrap(), p["time"].as_u64().unwrap());
                assert!(start < time, "{series}: {p}");
                if let Some(&previous) = ended.get(&series) {
                    assert_eq!(start, previous, "{series}: {p}");
                    chained += 1;
                }
                ended.insert(series, time);
            }
        }
    }
    assert!(chained > 10, "{chained}");
    drop(exporter);
}
