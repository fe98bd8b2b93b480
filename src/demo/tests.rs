//! Tests of the simulation: prometheus_client reads its files, and they move.

use super::*;
use crate::format::writer::{read_records, GaugeMode};
use std::collections::BTreeMap;
use std::path::Path;

fn cfg(dir: &Path) -> DemoConfig {
    let mut c = DemoConfig::new(dir);
    c.seed = 42;
    c.start_time = Some(1_750_000_000.0);
    c
}

/// Every record of every file: file name → key → (value, timestamp).
fn snapshot(dir: &Path) -> BTreeMap<String, BTreeMap<String, (f64, f64)>> {
    let mut out = BTreeMap::new();
    for entry in std::fs::read_dir(dir).unwrap() {
        let entry = entry.unwrap();
        let name = entry.file_name().to_string_lossy().into_owned();
        let recs = read_records(&entry.path()).unwrap();
        out.insert(
            name,
            recs.into_iter()
                .map(|r| (r.key, (r.value, r.timestamp)))
                .collect(),
        );
    }
    out
}

/// Sum over all files of the records whose key starts with `prefix`.
fn total(snap: &BTreeMap<String, BTreeMap<String, (f64, f64)>>, prefix: &str) -> f64 {
    snap.values()
        .flat_map(|f| f.iter())
        .filter(|(k, _)| k.starts_with(prefix))
        .map(|(_, v)| v.0)
        .sum()
}

#[test]
fn demo_is_send() {
    fn assert_send<T: Send + 'static>() {}
    assert_send::<Demo>();
    assert_send::<DemoConfig>();
}

#[test]
fn build_1_2_5() {
    assert_eq!(
        build_1_2_5_buckets(100),
        [1.0, 2.0, 5.0, 10.0, 20.0, 50.0, 100.0]
    );
    // The extraction ran with max_model_len 8192: the formula gives vLLM's bounds.
    assert_eq!(
        build_1_2_5_buckets(8192),
        buckets("vllm:request_prompt_tokens")
    );
}

/// The catalogue data parses, holds every family of both libraries, and is
/// internally consistent: a histogram has bounds and nothing else has, a
/// gauge names a known multiprocess mode, a family written at start-up is
/// written after traffic too, and a family written only after traffic has
/// values for every label (the simulation draws its children from them).
#[test]
fn the_catalogue_data_is_whole_and_consistent() {
    assert_eq!(vllm().families().len(), 88);
    assert_eq!(lmcache().families().len(), 94);
    for def in vllm().families().iter().chain(lmcache().families()) {
        let name = &def.name;
        assert_eq!(
            def.kind == FamilyType::Histogram,
            !def.buckets.is_empty(),
            "{name}"
        );
        assert!(def.buckets.windows(2).all(|w| w[0] < w[1]), "{name}");
        assert_eq!(def.kind == FamilyType::Gauge, def.mode.is_some(), "{name}");
        if let Some(mode) = &def.mode {
            assert!(GaugeMode::from_name(mode).is_some(), "{name}: {mode}");
        }
        assert!(!def.written || def.after_traffic, "{name}");
        if def.after_traffic && !def.written {
            for label in &def.labels {
                assert!(!def.values_of(label).is_empty(), "{name}: {label}");
            }
        }
        assert!(std::ptr::eq(family(name), def), "{name}");
    }
    assert_eq!(
        family("vllm:tool_call_parser_invocations_total").name,
        "vllm:tool_call_parser_invocations"
    );
}

#[test]
fn files_names_and_monotonic_counters() {
    let dir = tempfile::tempdir().unwrap();
    let mut c = cfg(dir.path());
    c.worker_restart_ticks = 8;
    let mut demo = Demo::new(c).unwrap();
    let initial_pids = demo.pids();
    assert_eq!(initial_pids.len(), 4);

    let mut prev = snapshot(dir.path());
    for _ in 0..40 {
        demo.step().unwrap();
        let snap = snapshot(dir.path());
        for (file, recs) in &snap {
            let counterish = file.starts_with("counter_")
                || file.starts_with("histogram_")
                || file.starts_with("summary_");
            if !counterish {
                continue;
            }
            let before = prev.get(file);
            for (key, (v, ts)) in recs {
                assert_eq!(*ts, 0.0, "{file} {key}");
                assert!(v.is_finite() && *v >= 0.0, "{file} {key} {v}");
                if let Some((old, _)) = before.and_then(|b| b.get(key)) {
                    assert!(v >= old, "{file} {key}: {old} -> {v}");
                }
            }
            // Files never lose records.
            if let Some(b) = before {
                assert!(
                    b.keys().all(|k| recs.contains_key(k)),
                    "{file} lost records"
                );
            }
        }
        for (file, recs) in &snap {
            for (key, (v, _)) in recs {
                if key.starts_with(r#"["vllm:kv_cache_usage_perc""#) {
                    assert!((0.0..=1.0).contains(v), "{file} {key} {v}");
                }
            }
        }
        prev = snap;
    }

    let snap = prev;
    let pids = demo.pids();
    for pid in &pids[..2] {
        for f in [
            "counter",
            "histogram",
            "summary",
            "gauge_mostrecent",
            "gauge_livesum",
        ] {
            assert!(
                snap.contains_key(&format!("{f}_{pid}.db")),
                "missing {f}_{pid}.db in {:?}",
                snap.keys()
            );
        }
    }
    for pid in &pids[2..] {
        for f in ["counter", "histogram", "gauge_livemostrecent", "gauge_sum"] {
            assert!(
                snap.contains_key(&format!("{f}_{pid}.db")),
                "missing {f}_{pid}.db"
            );
        }
    }
    // Workers restarted: the old pids' live gauge files are gone, the rest stays.
    let dead: Vec<&String> = initial_pids[2..]
        .iter()
        .filter(|p| !pids.contains(p))
        .collect();
    assert!(
        !dead.is_empty(),
        "expected a restart with worker_restart_ticks = 8 over 40 steps"
    );
    for pid in dead {
        assert!(!snap.contains_key(&format!("gauge_livemostrecent_{pid}.db")));
        assert!(snap.contains_key(&format!("counter_{pid}.db")));
        assert!(snap.contains_key(&format!("gauge_sum_{pid}.db")));
    }
    // Every file name is one prometheus_client would produce.
    for name in snap.keys() {
        let stem = name.strip_suffix(".db").unwrap();
        let parts: Vec<&str> = stem.split('_').collect();
        match parts.as_slice() {
            ["counter" | "histogram" | "summary", pid] => assert!(pid.parse::<u64>().is_ok()),
            ["gauge", mode, pid] => {
                assert!(GaugeMode::from_name(mode).is_some());
                assert!(pid.parse::<u64>().is_ok());
            }
            _ => panic!("unexpected file {name}"),
        }
    }

    // Cross-metric consistency, summed over processes.
    let requests = total(
        &snap,
        r#"["vllm:request_success", "vllm:request_success_total""#,
    );
    assert!(requests > 20.0, "only {requests} requests finished");
    let prompt_buckets = total(
        &snap,
        r#"["vllm:request_prompt_tokens", "vllm:request_prompt_tokens_bucket""#,
    );
    assert_eq!(requests, prompt_buckets);
    let e2e_buckets = total(
        &snap,
        r#"["vllm:e2e_request_latency_seconds", "vllm:e2e_request_latency_seconds_bucket""#,
    );
    assert_eq!(requests, e2e_buckets);
    let prompt_total = total(
        &snap,
        r#"["vllm:prompt_tokens", "vllm:prompt_tokens_total""#,
    );
    let prompt_sum = total(
        &snap,
        r#"["vllm:request_prompt_tokens", "vllm:request_prompt_tokens_sum""#,
    );
    assert_eq!(prompt_total, prompt_sum);
    let gen_total = total(
        &snap,
        r#"["vllm:generation_tokens", "vllm:generation_tokens_total""#,
    );
    let gen_sum = total(
        &snap,
        r#"["vllm:request_generation_tokens", "vllm:request_generation_tokens_sum""#,
    );
    assert_eq!(gen_total, gen_sum);
    let http_posts: f64 = snap
        .values()
        .flat_map(|f| f.iter())
        .filter(|(k, _)| {
            k.starts_with(r#"["http_requests", "http_requests_total""#)
                && k.contains(r#""method": "POST""#)
        })
        .filter(|(k, _)| !k.contains(r#""status": "4xx""#))
        .map(|(_, v)| v.0)
        .sum();
    assert_eq!(http_posts, requests);
}

#[test]
fn deterministic_for_a_seed() {
    let a = tempfile::tempdir().unwrap();
    let b = tempfile::tempdir().unwrap();
    for d in [a.path(), b.path()] {
        let mut c = cfg(d);
        c.worker_restart_ticks = 5;
        let mut demo = Demo::new(c).unwrap();
        for _ in 0..15 {
            demo.step().unwrap();
        }
    }
    let names = |d: &Path| {
        let mut v: Vec<String> = std::fs::read_dir(d)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        v.sort();
        v
    };
    assert_eq!(names(a.path()), names(b.path()));
    for n in names(a.path()) {
        assert_eq!(
            std::fs::read(a.path().join(&n)).unwrap(),
            std::fs::read(b.path().join(&n)).unwrap(),
            "{n}"
        );
    }
}

#[test]
fn run_demo_stops() {
    let dir = tempfile::tempdir().unwrap();
    let mut c = DemoConfig::new(dir.path());
    c.tick = Duration::from_millis(10);
    let stop = AtomicBool::new(false);
    std::thread::scope(|s| {
        let h = s.spawn(|| run_demo(c, &stop));
        std::thread::sleep(Duration::from_millis(100));
        stop.store(true, Ordering::Relaxed);
        h.join().unwrap().unwrap();
    });
    assert!(std::fs::read_dir(dir.path()).unwrap().count() >= 10);
}
