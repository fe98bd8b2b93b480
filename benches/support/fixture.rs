//! Generator of vLLM-like `PROMETHEUS_MULTIPROC_DIR` fixtures for the benchmarks.
//!
//! Shared (through `#[path]`) by `benches/scrape.rs` and `examples/gen_fixture.rs`, so the
//! criterion benches and `scripts/compare.py` measure the same directories.
//!
//! Every live process writes the same ~386 series that a vLLM 0.33 API server writes
//! (`vllm/v1/metrics/loggers.py`, bucket sets from `vllm/v1/metrics/buckets.py` with
//! `max_model_len` 8192) plus prometheus-fastapi-instrumentator's HTTP metrics, in four files:
//! `counter_<pid>.db`, `histogram_<pid>.db`, `gauge_mostrecent_<pid>.db` and
//! `summary_<pid>.db`. A dead process (the high-churn case: gunicorn-style worker recycling)
//! leaves only its `counter_<pid>.db` and `histogram_<pid>.db` behind.
//!
//! Files are written whole with [`file_bytes`], the exact image prometheus_client leaves
//! (records in creation order, `_sum` before the buckets, zero padding to 64 KiB or the next
//! doubling), so generating 1,024 processes takes well under a second. Values are
//! pseudo-random but deterministic for a seed; `mostrecent` timestamps differ per process so
//! the "most recent" choice is never a tie.

use std::fs::{self, File};
use std::io::{self, Write};
use std::path::Path;

use multiproc_exporter::format::writer::{encode_key, file_bytes, FileKind, GaugeMode};
use multiproc_exporter::model::float::go_float_string;

/// `model_name` label value.
pub(crate) const MODEL: &str = "meta-llama/Llama-3.1-8B-Instruct";
/// First pid of the live processes.
pub(crate) const LIVE_PID_BASE: u64 = 10_000;
/// First pid of the dead processes.
pub(crate) const DEAD_PID_BASE: u64 = 100_000;

use multiproc_exporter::demo::{family, FamilyDef, FamilyType};

/// The families every live process writes, in creation order: vLLM 0.33.0's
/// `PrometheusStatLogger` for one engine without speculative decoding, KV
/// connectors or LoRA, then prometheus-fastapi-instrumentator's HTTP
/// families. Their definitions (type, help, label names, bounds) come from
/// the demo's catalogue, extracted from vLLM's own code.
const FAMILIES: [&str; 42] = [
    "vllm:request_prompt_tokens",
    "vllm:request_generation_tokens",
    "vllm:iteration_tokens_total",
    "vllm:request_max_num_generation_tokens",
    "vllm:request_params_n",
    "vllm:request_params_max_tokens",
    "vllm:time_to_first_token_seconds",
    "vllm:inter_token_latency_seconds",
    "vllm:request_time_per_output_token_seconds",
    "vllm:e2e_request_latency_seconds",
    "vllm:request_queue_time_seconds",
    "vllm:request_inference_time_seconds",
    "vllm:request_prefill_time_seconds",
    "vllm:request_decode_time_seconds",
    "vllm:request_num_preemptions",
    "vllm:request_prefill_kv_computed_tokens",
    "vllm:prefix_cache_queries",
    "vllm:prefix_cache_hits",
    "vllm:external_prefix_cache_queries",
    "vllm:external_prefix_cache_hits",
    "vllm:mm_cache_queries",
    "vllm:mm_cache_hits",
    "vllm:num_preemptions",
    "vllm:prompt_tokens",
    "vllm:generation_tokens",
    "vllm:prompt_tokens_cached",
    "vllm:prompt_tokens_by_source",
    "vllm:prompt_tokens_cached_by_source",
    "vllm:request_success",
    "vllm:admission_rejections",
    "vllm:num_requests_running",
    "vllm:num_requests_waiting",
    "vllm:num_requests_waiting_by_reason",
    "vllm:num_requests_kv_fetch_by_stage",
    "vllm:engine_sleep_state",
    "vllm:kv_cache_usage_perc",
    "vllm:cache_config_info",
    "http_requests",
    "http_request_size_bytes",
    "http_response_size_bytes",
    "http_request_duration_highr_seconds",
    "http_request_duration_seconds",
];

/// The instrumentator's `handler` values.
const HANDLERS: [&str; 4] = [
    "/v1/chat/completions",
    "/v1/completions",
    "/v1/models",
    "/tokenize",
];

/// The values of `label` in the fixture's children: one model, one engine,
/// four handlers, POST answered 2xx or 4xx, and the catalogue's values for
/// the rest (finish reasons, sources, cache configuration, ...).
fn label_values(def: &'static FamilyDef, label: &'static str) -> Vec<&'static str> {
    match label {
        "model_name" => vec![MODEL],
        "engine" => vec!["0"],
        "handler" => HANDLERS.to_vec(),
        "method" => vec!["POST"],
        "status" => vec!["2xx", "4xx"],
        _ => def.values_of(label),
    }
}

/// The kind of a catalogue entry (which file its records go to).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Kind {
    /// A counter (`counter_<pid>.db`); `name` is the family name without `_total`.
    Counter,
    /// A `mostrecent` gauge (`gauge_mostrecent_<pid>.db`).
    Gauge,
    /// A histogram (`histogram_<pid>.db`).
    Histogram,
    /// A summary (`summary_<pid>.db`).
    Summary,
}

impl Kind {
    /// Python's type name.
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Kind::Counter => "counter",
            Kind::Gauge => "gauge",
            Kind::Histogram => "histogram",
            Kind::Summary => "summary",
        }
    }

    fn file_kind(self) -> FileKind {
        match self {
            Kind::Counter => FileKind::Counter,
            Kind::Gauge => FileKind::Gauge(GaugeMode::MostRecent),
            Kind::Histogram => FileKind::Histogram,
            Kind::Summary => FileKind::Summary,
        }
    }
}

/// One metric of the catalogue and its children (label value sets).
#[derive(Clone, Debug)]
pub(crate) struct MetricDef {
    /// Which file its records go to.
    pub(crate) kind: Kind,
    /// Family name (counters: without `_total`).
    pub(crate) name: &'static str,
    /// Help text.
    pub(crate) help: &'static str,
    /// Label names, in declaration order.
    pub(crate) label_names: Vec<&'static str>,
    /// One entry per child: its label values, in `label_names` order.
    pub(crate) children: Vec<Vec<String>>,
    /// Histogram upper bounds (without `+Inf`); empty otherwise.
    pub(crate) buckets: &'static [f64],
}

/// The per-process metric catalogue: [`FAMILIES`] with every combination of
/// their [`label_values`] as children.
pub(crate) fn catalogue() -> Vec<MetricDef> {
    FAMILIES
        .iter()
        .map(|name| {
            let def = family(name);
            let label_names: Vec<&'static str> = def.labels.iter().map(String::as_str).collect();
            let mut children: Vec<Vec<String>> = vec![Vec::new()];
            for label in &label_names {
                let values = label_values(def, label);
                children = children
                    .into_iter()
                    .flat_map(|child| {
                        values.iter().map(move |v| {
                            let mut next = child.clone();
                            next.push((*v).to_owned());
                            next
                        })
                    })
                    .collect();
            }
            MetricDef {
                kind: match def.kind {
                    FamilyType::Counter => Kind::Counter,
                    FamilyType::Gauge => Kind::Gauge,
                    FamilyType::Histogram => Kind::Histogram,
                    FamilyType::Summary => Kind::Summary,
                },
                name: &def.name,
                help: &def.help,
                label_names,
                children,
                buckets: &def.buckets,
            }
        })
        .collect()
}

/// How a record's value is generated.
#[derive(Clone, Copy, Debug)]
enum Role {
    Counter,
    Gauge,
    HistogramSum,
    Bucket,
    SummaryCount,
    SummarySum,
}

/// A record key with the role of its value.
#[derive(Debug)]
struct Slot {
    key: String,
    role: Role,
}

/// All records of one process, grouped by file, in prometheus_client's creation order.
#[derive(Debug)]
struct Layout {
    files: Vec<(Kind, Vec<Slot>)>,
}

fn layout() -> Layout {
    let order = [Kind::Counter, Kind::Histogram, Kind::Gauge, Kind::Summary];
    let mut files: Vec<(Kind, Vec<Slot>)> = order.iter().map(|k| (*k, Vec::new())).collect();
    for def in catalogue() {
        let slots = &mut files
            .iter_mut()
            .find(|(k, _)| *k == def.kind)
            .expect("every kind has a file")
            .1;
        for child in &def.children {
            let labels: Vec<(&str, &str)> = def
                .label_names
                .iter()
                .zip(child)
                .map(|(n, v)| (*n, v.as_str()))
                .collect();
            let name = def.name;
            match def.kind {
                Kind::Counter => slots.push(Slot {
                    key: encode_key(name, &format!("{name}_total"), &labels, def.help),
                    role: Role::Counter,
                }),
                Kind::Gauge => slots.push(Slot {
                    key: encode_key(name, name, &labels, def.help),
                    role: Role::Gauge,
                }),
                Kind::Summary => {
                    slots.push(Slot {
                        key: encode_key(name, &format!("{name}_count"), &labels, def.help),
                        role: Role::SummaryCount,
                    });
                    slots.push(Slot {
                        key: encode_key(name, &format!("{name}_sum"), &labels, def.help),
                        role: Role::SummarySum,
                    });
                }
                Kind::Histogram => {
                    slots.push(Slot {
                        key: encode_key(name, &format!("{name}_sum"), &labels, def.help),
                        role: Role::HistogramSum,
                    });
                    let sample = format!("{name}_bucket");
                    let bounds = def.buckets.iter().copied().chain([f64::INFINITY]);
                    for bound in bounds {
                        let le = go_float_string(bound);
                        let mut with_le = labels.clone();
                        with_le.push(("le", le.as_str()));
                        slots.push(Slot {
                            key: encode_key(name, &sample, &with_le, def.help),
                            role: Role::Bucket,
                        });
                    }
                }
            }
        }
    }
    Layout { files }
}

/// Number of series (records) one live process writes.
pub(crate) fn series_per_process() -> usize {
    layout().files.iter().map(|(_, s)| s.len()).sum()
}

/// Number of records [`generate`] writes for `processes` live and `dead` dead processes.
pub(crate) fn expected_records(processes: usize, dead: usize) -> usize {
    let files = layout().files;
    let all: usize = files.iter().map(|(_, s)| s.len()).sum();
    let kept: usize = files
        .iter()
        .filter(|(k, _)| matches!(k, Kind::Counter | Kind::Histogram))
        .map(|(_, s)| s.len())
        .sum();
    processes * all + dead * kept
}

/// What [`generate`] wrote.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Summary {
    /// Live processes.
    pub(crate) processes: usize,
    /// Dead processes (counter and histogram files only).
    pub(crate) dead: usize,
    /// Files written.
    pub(crate) files: usize,
    /// Records (series) written over all files.
    pub(crate) records: usize,
    /// Sum of the files' `used` (header included).
    pub(crate) used_bytes: u64,
    /// Sum of the file sizes.
    pub(crate) file_bytes: u64,
}

use multiproc_exporter::demo::Rng;

/// Writes a fresh fixture into `dir` (created if missing; existing `*.db` files of the same
/// names are overwritten, others are left alone): `processes` live processes with every file
/// and `dead` dead processes with their counter and histogram files only.
pub(crate) fn generate(
    dir: &Path,
    processes: usize,
    dead: usize,
    seed: u64,
) -> io::Result<Summary> {
    fs::create_dir_all(dir)?;
    let layout = layout();
    let mut summary = Summary {
        processes,
        dead,
        ..Summary::default()
    };
    let live = (0..processes).map(|i| (LIVE_PID_BASE + i as u64, true));
    let gone = (0..dead).map(|i| (DEAD_PID_BASE + i as u64, false));
    let mut records: Vec<(&str, f64, f64)> = Vec::new();
    for (index, (pid, alive)) in live.chain(gone).enumerate() {
        let mut rng = Rng(seed ^ pid.wrapping_mul(0x2545_f491_4f6c_dd1d));
        for (kind, slots) in &layout.files {
            if !alive && !matches!(kind, Kind::Counter | Kind::Histogram) {
                continue;
            }
            records.clear();
            for slot in slots {
                let (value, timestamp) = match slot.role {
                    Role::Counter => ((rng.below(1_000_000)) as f64, 0.0),
                    // Distinct per process, so the most recent write is never a tie.
                    Role::Gauge => (
                        (rng.below(100)) as f64 * 0.01,
                        1_700_000_000.0 + index as f64 + rng.unit() * 0.5,
                    ),
                    Role::HistogramSum => (rng.unit() * 10_000.0, 0.0),
                    Role::Bucket => ((rng.below(50)) as f64, 0.0),
                    Role::SummaryCount => ((rng.below(10_000)) as f64, 0.0),
                    Role::SummarySum => (rng.unit() * 1e7, 0.0),
                };
                records.push((slot.key.as_str(), value, timestamp));
            }
            let image = file_bytes(&records);
            let used = i32::from_ne_bytes([image[0], image[1], image[2], image[3]]);
            let used = usize::try_from(used)
                .unwrap_or(image.len())
                .min(image.len());
            summary.files += 1;
            summary.records += records.len();
            summary.used_bytes += used as u64;
            summary.file_bytes += image.len() as u64;
            // Like Python (ftruncate, then stores into the mapping): the tail is a hole.
            let path = dir.join(kind.file_kind().file_name(pid));
            let mut file = File::create(&path)?;
            file.write_all(&image[..used])?;
            file.set_len(image.len() as u64)?;
        }
    }
    Ok(summary)
}

/// Real processes standing in for live writers, for liveness: each holds its
/// four files open (as prometheus_client does) and sleeps; killed on drop.
/// (Used by `benches/scrape.rs`; the other users of this file need none.)
#[allow(dead_code)]
pub(crate) struct LiveHolders {
    children: Vec<std::process::Child>,
}

#[allow(dead_code)]
impl LiveHolders {
    /// The holders' pids (the pids their files are named after).
    pub(crate) fn pids(&self) -> Vec<u64> {
        self.children.iter().map(|c| u64::from(c.id())).collect()
    }
}

impl Drop for LiveHolders {
    fn drop(&mut self) {
        for child in &mut self.children {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// Starts `processes` holder processes and writes their files into `dir`
/// (created after the processes started, as a writer's are, and named with
/// their pids), then waits until every holder has them open.
#[allow(dead_code)]
pub(crate) fn live_holders(dir: &Path, processes: usize, seed: u64) -> io::Result<LiveHolders> {
    let gate = dir.join("holders-go");
    let script = r#"d=$0; while [ ! -e "$1" ]; do sleep 0.01; done
exec 3<"$d/counter_$$.db" 4<"$d/histogram_$$.db" 5<"$d/gauge_mostrecent_$$.db" 6<"$d/summary_$$.db"
exec sleep 100000"#;
    let mut holders = LiveHolders {
        children: Vec::new(),
    };
    for _ in 0..processes {
        holders.children.push(
            std::process::Command::new("sh")
                .arg("-c")
                .arg(script)
                .arg(dir)
                .arg(&gate)
                .spawn()?,
        );
    }
    let scratch = tempfile::tempdir_in(dir)?;
    generate(scratch.path(), processes, 0, seed)?;
    for (i, pid) in holders.pids().into_iter().enumerate() {
        let from = LIVE_PID_BASE + i as u64;
        for kind in [
            FileKind::Counter,
            FileKind::Histogram,
            FileKind::Gauge(GaugeMode::MostRecent),
            FileKind::Summary,
        ] {
            fs::rename(
                scratch.path().join(kind.file_name(from)),
                dir.join(kind.file_name(pid)),
            )?;
        }
    }
    File::create(&gate)?;
    for pid in holders.pids() {
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        while !fs::read(format!("/proc/{pid}/cmdline"))?.starts_with(b"sleep") {
            if std::time::Instant::now() > deadline {
                return Err(io::Error::other("a holder did not start"));
            }
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
    }
    fs::remove_file(&gate)?;
    Ok(holders)
}
