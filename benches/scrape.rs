//! Criterion benchmarks of one scrape (read + merge + encode) on generated vLLM-like
//! directories: 1, 16, 256, 1,024 and 4,096 live processes of ~386 series each, high-churn
//! directories (16 live processes plus the counter and histogram files of 1,024 or 10,000
//! dead ones), and one writer with 500,000 series (`cardinality`).
//!
//! ```text
//! cargo bench --bench scrape                 # everything (a few minutes on 2 cores)
//! cargo bench --bench scrape -- steady       # only the steady-state group
//! MPE_BENCH_DIR=/dev/shm cargo bench --bench scrape   # where fixtures are written
//! ```
//!
//! Groups:
//! * `steady`: a warm [`Reader`] (what a running exporter has); before each timed scrape a
//!   few values change in up to 32 processes' counter files, outside the timing;
//! * `unchanged`: a warm reader on an unchanged directory; after every timed scrape (outside
//!   the timing) it asserts that no key was decoded and the merge was not re-planned;
//! * `cold`: the first scrape of a new reader (every key decoded, merge planned);
//! * `dead_writers`: 16 live writers (real processes) alone, and with the files of 10,000
//!   dead ones (`MPE_BENCH_DEAD`), liveness from /proc, in a directory unchanged for a few
//!   seconds: dead writers' files are folded once, then not even looked up (`_folded`), or
//!   merged in file order at every scrape (`_exact`, `--writers.exact-sums`);
//! * `churn`: 1,024 writers' files, 16 of them live (real processes); before each timed scrape
//!   the oldest live writer exits and a new one starts (every scrape plans again and folds the
//!   writer that exited two scrapes before): the default and `--writers.exact-sums` (issue 54);
//! * `cardinality`: one writer with 500,000 counter series (per-request label values), a
//!   warm reader's scrape and the encoding alone;
//! * `gzip`: gzipping an answer of 0.5 to 64 kB of vLLM-like text as the server does (level
//!   "fast"), which decides below which size an answer is sent uncompressed (issue 34).
//!
//! Fixtures come from `benches/support/fixture.rs`, the generator `scripts/compare.py` uses
//! through `examples/gen_fixture.rs`.

// The catalogue accessors of the shared generator are used by examples/gen_fixture.rs only.
#[allow(dead_code)]
#[path = "support/fixture.rs"]
mod fixture;

use std::cell::RefCell;
use std::collections::BTreeMap;
use std::hint::black_box;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use criterion::{BenchmarkId, Criterion, SamplingMode, Throughput};
use multiproc_exporter::expose::encode::{encode, Escaping, Format};
use multiproc_exporter::format::writer::{encode_key, file_bytes, FileKind, MetricsFile};
use multiproc_exporter::pipeline::{Collection, Collector};
use multiproc_exporter::source::writers::{LivenessMode, WriterPolicy};
use multiproc_exporter::source::Input;

/// The benchmarked directories: (label, live processes, dead processes).
const CASES: [(&str, usize, usize); 7] = [
    ("1", 1, 0),
    ("16", 16, 0),
    ("256", 256, 0),
    ("1024", 1024, 0),
    ("4096", 4096, 0),
    ("churn_16+1024dead", 16, 1024),
    ("churn_16+10000dead", 16, 10_000),
];

/// Series of the one-writer high-cardinality case (`cardinality` group).
const CARDINALITY_SERIES: usize = 500_000;

/// A generated directory with a warm reader and writers to change values.
struct Case {
    _dir: tempfile::TempDir,
    inputs: Vec<Input>,
    reader: Collector,
    touch: Vec<MetricsFile>,
    round: u64,
}

/// A new directory for a fixture, under `MPE_BENCH_DIR` (default: the
/// system temporary directory).
fn fixture_dir() -> tempfile::TempDir {
    let base = std::env::var_os("MPE_BENCH_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(std::env::temp_dir);
    tempfile::Builder::new()
        .prefix("mpe-bench-")
        .tempdir_in(base)
        .expect("create a fixture directory")
}

impl Case {
    fn new(processes: usize, dead: usize) -> Case {
        let dir = fixture_dir();
        let summary = fixture::generate(dir.path(), processes, dead, 1).expect("write the fixture");
        let inputs = vec![Input::Directory(dir.path().to_path_buf())];
        let mut reader = Collector::new();
        let first = reader.collect(&inputs);
        assert!(first.problems.is_empty(), "{:?}", first.problems);
        assert_eq!(first.stats.files_merged, summary.files);
        assert_eq!(summary.records, fixture::expected_records(processes, dead));
        let touch = (0..processes.min(32))
            .map(|i| {
                let pid = fixture::LIVE_PID_BASE + i as u64;
                MetricsFile::open(dir.path().join(FileKind::Counter.file_name(pid)))
                    .expect("open a counter file")
            })
            .collect();
        Case {
            _dir: dir,
            inputs,
            reader,
            touch,
            round: 0,
        }
    }

    /// Writes new values into a few records of each touched file (like running writers).
    fn touch(&mut self) {
        self.round += 1;
        for file in &mut self.touch {
            for idx in [0, 3, 7, 11] {
                let value = file.value_at(idx).map_or(0.0, |(v, _)| v) + 1.0;
                file.write_index(idx, value, 0.0).expect("write a value");
            }
        }
    }
}

/// One scrape: collect and encode as `generate_latest` would.
fn scrape(reader: &mut Collector, inputs: &[Input]) -> (Collection, Vec<u8>) {
    let collection = reader.collect(inputs);
    let body = encode(&collection.families, Format::Text, Escaping::Underscores);
    (collection, body)
}

/// Fixtures are generated the first time a (not filtered out) bench needs them.
#[derive(Default)]
struct Fixtures(RefCell<BTreeMap<&'static str, Case>>);

impl Fixtures {
    fn with<R>(
        &self,
        label: &'static str,
        processes: usize,
        dead: usize,
        f: impl FnOnce(&mut Case) -> R,
    ) -> R {
        let mut cases = self.0.borrow_mut();
        let case = cases
            .entry(label)
            .or_insert_with(|| Case::new(processes, dead));
        f(case)
    }
}

fn configure(
    group: &mut criterion::BenchmarkGroup<'_, criterion::measurement::WallTime>,
    processes: usize,
    dead: usize,
) {
    group.sample_size(10);
    group.warm_up_time(Duration::from_millis(500));
    group.measurement_time(Duration::from_secs(3));
    if processes + dead >= 256 {
        group.sampling_mode(SamplingMode::Flat);
    }
}

fn bench_steady(c: &mut Criterion, fixtures: &Fixtures) {
    let mut group = c.benchmark_group("steady");
    for (label, processes, dead) in CASES {
        configure(&mut group, processes, dead);
        let records = fixture::expected_records(processes, dead);
        group.throughput(Throughput::Elements(records as u64));
        group.bench_function(BenchmarkId::from_parameter(label), |b| {
            fixtures.with(label, processes, dead, |case| {
                b.iter_custom(|iters| {
                    let mut timed = Duration::ZERO;
                    for _ in 0..iters {
                        case.touch();
                        let start = Instant::now();
                        let out = scrape(&mut case.reader, &case.inputs);
                        timed += start.elapsed();
                        black_box(out);
                    }
                    timed
                });
            });
        });
    }
    group.finish();
}

fn bench_unchanged(c: &mut Criterion, fixtures: &Fixtures) {
    let mut group = c.benchmark_group("unchanged");
    for (label, processes, dead) in [CASES[1], CASES[3]] {
        configure(&mut group, processes, dead);
        let records = fixture::expected_records(processes, dead);
        group.throughput(Throughput::Elements(records as u64));
        group.bench_function(BenchmarkId::from_parameter(label), |b| {
            fixtures.with(label, processes, dead, |case| {
                // Bring the reader up to date with whatever `steady` wrote.
                black_box(scrape(&mut case.reader, &case.inputs));
                b.iter_custom(|iters| {
                    let mut timed = Duration::ZERO;
                    for _ in 0..iters {
                        let start = Instant::now();
                        let (collection, body) = scrape(&mut case.reader, &case.inputs);
                        timed += start.elapsed();
                        assert_eq!(
                            collection.stats.keys_decoded, 0,
                            "JSON parsed on an unchanged directory"
                        );
                        assert!(
                            !collection.stats.replanned,
                            "merge re-planned on an unchanged directory"
                        );
                        black_box(body);
                    }
                    timed
                });
            });
        });
    }
    group.finish();
}

fn bench_cold(c: &mut Criterion, fixtures: &Fixtures) {
    let mut group = c.benchmark_group("cold");
    for (label, processes, dead) in CASES {
        configure(&mut group, processes, dead);
        let records = fixture::expected_records(processes, dead);
        group.throughput(Throughput::Elements(records as u64));
        group.bench_function(BenchmarkId::from_parameter(label), |b| {
            fixtures.with(label, processes, dead, |case| {
                b.iter_custom(|iters| {
                    let mut timed = Duration::ZERO;
                    for _ in 0..iters {
                        let mut reader = Collector::new();
                        let start = Instant::now();
                        let out = scrape(&mut reader, &case.inputs);
                        timed += start.elapsed();
                        assert!(out.0.stats.replanned);
                        // Dropping the reader and the output is not part of a scrape.
                        black_box((reader, out));
                    }
                    timed
                });
            });
        });
    }
    group.finish();
}

/// A collector that sees the writers (liveness from /proc), folding dead
/// writers' values (the default) or not (`--writers.exact-sums`).
fn proc_collector(fold_dead: bool) -> Collector {
    let mut reader = Collector::new();
    reader.set_writer_policy(WriterPolicy {
        liveness: LivenessMode::Proc,
        fold_dead,
        ..WriterPolicy::default()
    });
    reader
}

/// 16 live writers (real processes holding their files) alone, and with
/// the files of 10,000 dead writers (`MPE_BENCH_DEAD`), read with liveness
/// from /proc: folded once into a cached base (the default), and added in
/// file order at every scrape (`--writers.exact-sums`).
fn bench_dead_writers(c: &mut Criterion) {
    let mut group = c.benchmark_group("dead_writers");
    let dead = std::env::var("MPE_BENCH_DEAD")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(10_000);
    for (label, dead, fold_dead) in [
        ("16", 0, true),
        ("16+dead_folded", dead, true),
        ("16+dead_exact", dead, false),
    ] {
        configure(&mut group, 16, dead);
        let dir = fixture_dir();
        fixture::generate(dir.path(), 0, dead, 1).expect("write the dead writers");
        let holders = fixture::live_holders(dir.path(), 16, 1).expect("start the live writers");
        let inputs = vec![Input::Directory(dir.path().to_path_buf())];
        let mut reader = proc_collector(fold_dead);
        // Between two changes of the writers, the directory is unchanged for
        // longer than the listing takes to settle (2 s): measure that state.
        std::thread::sleep(Duration::from_millis(2500));
        let first = reader.collect(&inputs);
        assert!(first.problems.is_empty(), "{:?}", first.problems);
        assert_eq!(first.writers.writers, [16, dead, 0]);
        let mut touch: Vec<MetricsFile> = holders
            .pids()
            .into_iter()
            .map(|pid| {
                MetricsFile::open(dir.path().join(FileKind::Counter.file_name(pid)))
                    .expect("open a counter file")
            })
            .collect();
        let mut round = 0.0;
        group.bench_function(BenchmarkId::from_parameter(label), |b| {
            b.iter_custom(|iters| {
                let mut timed = Duration::ZERO;
                for _ in 0..iters {
                    round += 1.0;
                    for file in &mut touch {
                        file.write_index(0, round, 0.0).expect("write a value");
                    }
                    let start = Instant::now();
                    let out = scrape(&mut reader, &inputs);
                    timed += start.elapsed();
                    black_box(out);
                }
                timed
            });
        });
        drop(holders);
    }
    group.finish();
}

/// Writers at a time in the `churn` group (issue 54): live ones, the rest dead.
const CHURN_WRITERS: usize = 1024;

/// Live writers among them.
const CHURN_LIVE: usize = 16;

/// 1,024 writers' files (16 live writers, real processes holding their
/// files, and the counter and histogram files of 1,008 dead ones), read
/// with liveness from /proc; before each timed scrape (outside the timing)
/// the oldest live writer exits and a new one starts, so that every scrape
/// plans again (four files added) and finds the writer that exited two
/// scrapes before final (the files folded change): the default, and
/// `--writers.exact-sums` (nothing folded).
fn bench_churn(c: &mut Criterion) {
    let mut group = c.benchmark_group("churn");
    configure(&mut group, CHURN_LIVE, CHURN_WRITERS - CHURN_LIVE);
    group.measurement_time(Duration::from_secs(5));
    for (label, fold_dead) in [("1024_default", true), ("1024_exact_sums", false)] {
        let dir = fixture_dir();
        fixture::generate(dir.path(), 0, CHURN_WRITERS - CHURN_LIVE, 1)
            .expect("write the dead writers");
        let mut seed = 1;
        let mut start = || {
            seed += 1;
            fixture::live_holders(dir.path(), 1, seed).expect("start a live writer")
        };
        let mut live: std::collections::VecDeque<_> = (0..CHURN_LIVE).map(|_| start()).collect();
        let inputs = vec![Input::Directory(dir.path().to_path_buf())];
        let mut reader = proc_collector(fold_dead);
        for _ in 0..3 {
            let out = reader.collect(&inputs);
            assert!(out.problems.is_empty(), "{:?}", out.problems);
        }
        group.bench_function(BenchmarkId::from_parameter(label), |b| {
            b.iter_custom(|iters| {
                let mut timed = Duration::ZERO;
                for _ in 0..iters {
                    // Killed on drop: its files stay, a dead writer's.
                    live.pop_front();
                    live.push_back(start());
                    let begin = Instant::now();
                    let out = scrape(&mut reader, &inputs);
                    timed += begin.elapsed();
                    black_box(out);
                }
                timed
            });
        });
    }
    group.finish();
}

/// One writer with [`CARDINALITY_SERIES`] counter series (per-request label
/// values): a warm reader's scrape of the unchanged file, and the encoding of
/// its body alone.
fn bench_cardinality(c: &mut Criterion) {
    let mut group = c.benchmark_group("cardinality");
    configure(&mut group, 1024, 0);
    group.throughput(Throughput::Elements(CARDINALITY_SERIES as u64));
    let dir = fixture_dir();
    let records: Vec<(String, f64)> = (0..CARDINALITY_SERIES)
        .map(|i| {
            let user = format!("user-{i}");
            let route = format!("/api/v1/items/{}", i % 97);
            let key = encode_key(
                "hc_requests",
                "hc_requests_total",
                &[("user", &user), ("route", &route)],
                "High-cardinality requests.",
            );
            (key, (i % 13 + 1) as f64)
        })
        .collect();
    let bytes = file_bytes(
        &records
            .iter()
            .map(|(key, value)| (key.as_str(), *value, 0.0))
            .collect::<Vec<_>>(),
    );
    std::fs::write(dir.path().join(FileKind::Counter.file_name(1)), bytes)
        .expect("write the fixture");
    let inputs = vec![Input::Directory(dir.path().to_path_buf())];
    let mut reader = Collector::new();
    let first = reader.collect(&inputs);
    assert_eq!(first.stats.records, CARDINALITY_SERIES);
    group.bench_function("500k_series_scrape", |b| {
        b.iter(|| black_box(scrape(&mut reader, &inputs).1.len()))
    });
    let families = reader.collect(&inputs).families;
    group.bench_function("500k_series_encode", |b| {
        b.iter(|| black_box(encode(&families, Format::Text, Escaping::Underscores).len()))
    });
    group.finish();
}

/// vLLM-like exposition text of about `bytes` bytes: gauge lines of two models and two engines.
fn vllm_text(bytes: usize) -> Vec<u8> {
    let mut text = String::new();
    let mut i = 0u32;
    while text.len() < bytes {
        let family = [
            "num_requests_waiting",
            "num_requests_running",
            "kv_cache_usage_perc",
        ][i as usize % 3];
        if i % 4 == 0 {
            text.push_str(&format!(
                "# HELP vllm:{family} Number of requests.\n# TYPE vllm:{family} gauge\n"
            ));
        }
        let model = ["meta-llama/Llama-3.1-8B-Instruct", "Qwen/Qwen3-8B"][i as usize % 2];
        text.push_str(&format!(
            "vllm:{family}{{engine=\"{}\",model_name=\"{model}\"}} {}.0\n",
            i % 2,
            i.wrapping_mul(2_654_435_761) % 97
        ));
        i += 1;
    }
    text.truncate(bytes);
    text.into_bytes()
}

fn bench_gzip(c: &mut Criterion) {
    let mut group = c.benchmark_group("gzip");
    let mut gzipper = multiproc_exporter::expose::memo::Gzipper::default();
    for bytes in [512usize, 1536, 4096, 16_384, 65_536] {
        let text = vllm_text(bytes);
        let gzipped = gzipper.gzip(&text).expect("gzip").len();
        eprintln!("gzip: {bytes} bytes of text -> {gzipped} bytes");
        group.throughput(Throughput::Bytes(bytes as u64));
        group.bench_function(BenchmarkId::from_parameter(bytes), |b| {
            b.iter(|| black_box(gzipper.gzip(black_box(&text)).expect("gzip").len()))
        });
    }
    group.finish();
}

fn benches(c: &mut Criterion) {
    let fixtures = Fixtures::default();
    bench_steady(c, &fixtures);
    bench_unchanged(c, &fixtures);
    bench_cold(c, &fixtures);
    bench_dead_writers(c);
    bench_churn(c);
    bench_cardinality(c);
    bench_gzip(c);
}

fn main() {
    // What `criterion_group!`/`criterion_main!` expand to, without their undocumented `pub fn`.
    let mut criterion = Criterion::default().configure_from_args();
    benches(&mut criterion);
    criterion.final_summary();
}
