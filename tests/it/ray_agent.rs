//! The exporter's Ray profile against Ray itself: a real Ray 2.60.0 head.
//!
//! `tests/python/ray_agent.py` starts a local Ray head and two actors (two Ray
//! worker processes, two vLLM engines); each records every vLLM 0.33.0
//! counter, gauge and histogram through `ray.util.metrics` exactly as vLLM's
//! `RayPrometheusStatLogger` wrappers do, and the same values through
//! prometheus_client 0.26.0 in multiprocess mode (files named after its pid).
//! Ray's metrics agent exports the first; the exporter serves the second in
//! the Ray profile exactly as docs/ray.md gives it, with `per_writer.ray_logs`
//! pointing at the session's log directory and Ray's remaining labels taken
//! from the environment, as a sidecar would take them from the downward API.
//!
//! Checked, family by family: the same names, types and help texts; the same
//! label names (`Component`, `NodeAddress`, `ReplicaId`, `SessionName`,
//! `Version`, `WorkerId`, `otel_scope_*` and vLLM's own); the same series,
//! down to the `WorkerId` values and the `le` bounds; the same values, except
//! histogram sums, which Ray rebuilds from bucket midpoints and the exporter
//! keeps exact.

use std::collections::{BTreeMap, BTreeSet};
use std::io::{BufRead as _, BufReader};
use std::process::{Command, Stdio};

use serde_json::Value as Json;

use crate::support::exposition::Exposition;
use crate::support::{exporter_bin, ray_python, repo_root};

/// The Ray profile as docs/ray.md gives it (its first YAML block): what is
/// tested is what is documented.
fn documented_profile() -> String {
    let doc = std::fs::read_to_string(repo_root().join("docs/ray.md")).unwrap();
    let start = doc.find("```yaml\n").expect("a YAML block in docs/ray.md") + "```yaml\n".len();
    let block = &doc[start..];
    let profile = &block[..block.find("```").unwrap()];
    assert!(
        profile.contains("per_writer:") && profile.contains("ray_logs"),
        "{profile}"
    );
    profile.to_owned()
}

/// A series: sample name and labels.
type Series = (String, BTreeMap<String, String>);

fn series(exposition: &Exposition) -> BTreeMap<Series, f64> {
    exposition
        .samples
        .iter()
        .filter(|s| s.name.starts_with("ray_vllm_"))
        .map(|s| ((s.name.clone(), s.labels.clone()), s.value))
        .collect()
}

#[test]
fn the_ray_profile_labels_series_as_ray_does() {
    let Some(ray_python) = ray_python() else {
        return;
    };
    let out = tempfile::tempdir().unwrap();
    let mut ray = Command::new(&ray_python)
        .arg(repo_root().join("tests/python/ray_agent.py"))
        .arg(out.path())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("start ray_agent.py");
    let stdin = ray.stdin.take();
    let mut line = String::new();
    BufReader::new(ray.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    let info: Json = serde_json::from_str(&line)
        .unwrap_or_else(|e| panic!("ray_agent.py failed ({e}): {line:?}"));

    // The exporter, while the actors are alive.
    let config = out.path().join("ray.yml");
    std::fs::write(&config, documented_profile()).unwrap();
    let output = Command::new(exporter_bin())
        .args(["dump", "--config", config.to_str().unwrap()])
        .arg(out.path().join("multiproc"))
        .env("RAY_LOGS", info["logs"].as_str().unwrap())
        .env("NODE_IP", info["node_address"].as_str().unwrap())
        .env("RAY_SESSION_NAME", info["session_name"].as_str().unwrap())
        .output()
        .unwrap();
    drop(stdin);
    let _ = ray.wait();
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let ours = Exposition::parse(&String::from_utf8(output.stdout).unwrap());
    let theirs =
        Exposition::parse(&std::fs::read_to_string(out.path().join("ray_metrics.txt")).unwrap());

    // Families: names, types, help texts, label names.
    let vllm = |e: &Exposition| -> BTreeSet<String> {
        e.family_names()
            .into_iter()
            .filter(|n| n.starts_with("ray_vllm_"))
            .collect()
    };
    assert_eq!(vllm(&ours), vllm(&theirs), "family names");
    assert!(vllm(&ours).len() >= 80, "{} families", vllm(&ours).len());
    for family in vllm(&theirs) {
        assert_eq!(
            ours.types[&family], theirs.types[&family],
            "type of {family}"
        );
        assert_eq!(
            ours.helps[&family], theirs.helps[&family],
            "help of {family}"
        );
        let base = family.strip_suffix("_total").unwrap_or(&family);
        let names = |e: &Exposition| {
            let mut names = e.label_names(&family);
            names.extend(e.label_names(base));
            names
        };
        assert_eq!(names(&ours), names(&theirs), "label names of {family}");
    }
    let expected: BTreeSet<&str> = [
        "Component",
        "NodeAddress",
        "ReplicaId",
        "SessionName",
        "Version",
        "WorkerId",
        "engine",
        "model_name",
        "otel_scope_name",
        "otel_scope_schema_url",
        "otel_scope_version",
    ]
    .into();
    let names = theirs.label_names("ray_vllm_time_to_first_token_seconds");
    assert_eq!(
        names.iter().map(String::as_str).collect::<BTreeSet<_>>(),
        expected
    );

    // Series and values: every one the same but Ray's midpoint sums.
    let (ours, theirs) = (series(&ours), series(&theirs));
    let only_ours: Vec<_> = ours.keys().filter(|k| !theirs.contains_key(*k)).collect();
    let only_theirs: Vec<_> = theirs.keys().filter(|k| !ours.contains_key(*k)).collect();
    assert!(
        only_ours.is_empty() && only_theirs.is_empty(),
        "series differ (label values, WorkerIds and le bounds included): {} only ours, first {:?}; {} only Ray's, first {:?}",
        only_ours.len(),
        only_ours.first(),
        only_theirs.len(),
        only_theirs.first()
    );
    let workers: BTreeSet<String> = ours
        .keys()
        .map(|(_, labels)| labels["WorkerId"].clone())
        .collect();
    let expected_workers: BTreeSet<String> = info["workers"]
        .as_array()
        .unwrap()
        .iter()
        .map(|w| w["worker_id"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(workers, expected_workers, "WorkerIds are Ray's worker ids");
    let mut sums_differing = 0;
    for (key, value) in &ours {
        let theirs = theirs[key];
        if key.0.ends_with("_sum") {
            sums_differing += usize::from(theirs != *value);
        } else {
            assert_eq!(*value, theirs, "{key:?}");
        }
    }
    // Ray's sums are bucket midpoints: it says so, and it shows.
    assert!(sums_differing > 0, "no histogram sum differs from Ray's");
}
