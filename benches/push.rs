//! Criterion benchmarks of the push cost per collection (issue 54): the
//! remote-write request, the OTLP request with cumulative temporality, and
//! with delta temporality (the collector's mapping and compression into
//! the queue, then the sender's conversion against what the receiver
//! accepted and its compression), on a vLLM-like collection of 520 points
//! (about the demo directory's 521: 304 counter series and 216 histogram
//! series of 13 buckets, 8 label sets; 3,544 text samples) whose values
//! rise between collections.
//!
//! ```text
//! cargo bench --bench push
//! ```
//!
//! The bytes of each request (and of a delta collection waiting in the
//! queue) are printed before the timings.

use std::hint::black_box;
use std::sync::Arc;

use criterion::{BatchSize, Criterion};
use multiproc_exporter::expose::otlp::{self, Deltas, StartTimes, Temporality};
use multiproc_exporter::expose::remote_write;
use multiproc_exporter::model::{Labels, MetricFamily, MetricType, Sample};

const BOUNDS: [&str; 13] = [
    "0.01", "0.025", "0.05", "0.1", "0.25", "0.5", "1.0", "2.5", "5.0", "10.0", "25.0", "50.0",
    "+Inf",
];

fn sample(name: &str, labels: &[(&str, String)], value: f64) -> Sample {
    Sample {
        name: name.into(),
        labels: Labels::new(
            labels
                .iter()
                .map(|(n, v)| (Arc::from(*n), Arc::from(v.as_str()))),
        ),
        value,
    }
}

/// The collection number `n` (values rise with it).
fn families(n: u64) -> Vec<MetricFamily> {
    let mut out = Vec::new();
    let label_sets: Vec<Vec<(&str, String)>> = (0..8)
        .map(|i| {
            vec![
                ("engine", (i % 2).to_string()),
                ("model_name", "meta-llama/Llama-3.1-8B-Instruct".to_owned()),
                ("finished_reason", format!("reason{}", i / 2)),
            ]
        })
        .collect();
    for c in 0..38 {
        let name = format!("vllm:counter_{c}");
        out.push(MetricFamily {
            name: name.clone().into(),
            help: "A counter.".into(),
            metric_type: MetricType::Counter,
            samples: label_sets
                .iter()
                .enumerate()
                .map(|(i, l)| sample(&format!("{name}_total"), l, (n * (i as u64 + 1) * 7) as f64))
                .collect(),
        });
    }
    for h in 0..27 {
        let name = format!("vllm:histogram_{h}_seconds");
        let mut samples = Vec::new();
        for (i, l) in label_sets.iter().enumerate() {
            let count = n * (i as u64 + 1) * 3;
            for (b, le) in BOUNDS.iter().enumerate() {
                let mut labels = l.clone();
                labels.push(("le", le.to_string()));
                let below = count * (b as u64 + 1) / BOUNDS.len() as u64;
                samples.push(sample(&format!("{name}_bucket"), &labels, below as f64));
            }
            samples.push(sample(&format!("{name}_count"), l, count as f64));
            samples.push(sample(&format!("{name}_sum"), l, count as f64 * 0.37));
        }
        out.push(MetricFamily {
            name: name.into(),
            help: "A histogram.".into(),
            metric_type: MetricType::Histogram,
            samples,
        });
    }
    out
}

const T0: u64 = 1_700_000_000_000_000_000;
const INTERVAL: u64 = 15_000_000_000;

fn main() {
    let mut c = Criterion::default().configure_from_args();
    let collections: Vec<Vec<MetricFamily>> = (1..=2).map(families).collect();
    let points = otlp::data_points(&otlp::export_request(
        &collections[0],
        T0,
        &[],
        &mut StartTimes::new(T0, Temporality::Cumulative),
    ));
    let rw = remote_write::encode(&remote_write::write_request(&collections[0], 1, &[]));
    let mut starts = StartTimes::new(T0, Temporality::Cumulative);
    let cumulative = otlp::encode(&otlp::export_request(&collections[0], T0, &[], &mut starts));
    let mut starts = StartTimes::new(T0, Temporality::Delta);
    let mut deltas = Deltas::default();
    let mut delta_bytes = (0, 0);
    for (i, families) in collections.iter().take(2).enumerate() {
        let collected = otlp::collect(families, T0 + i as u64 * INTERVAL, &[], &mut starts);
        let stored = collected.store();
        let converted = deltas.convert(&stored.load().unwrap());
        delta_bytes = (
            stored.body_bytes() + stored.runs_bytes().0,
            otlp::encode(converted.request()).len(),
        );
        deltas.accept(converted);
    }
    eprintln!(
        "push per collection: {points} OTLP points; remote write {} B; OTLP cumulative {} B; OTLP delta {} B sent, {} B queued",
        rw.len(),
        cumulative.len(),
        delta_bytes.1,
        delta_bytes.0
    );

    let mut group = c.benchmark_group("push");
    // Each iteration gets the next collection (made outside the timing).
    let next = |n: &mut u64| {
        *n += 1;
        (*n, families(*n))
    };
    let mut n = 0;
    group.bench_function("remote_write", |b| {
        b.iter_batched(
            || next(&mut n),
            |(n, families)| {
                black_box(remote_write::encode(&remote_write::write_request(
                    &families,
                    n as i64,
                    &[],
                )))
            },
            BatchSize::SmallInput,
        )
    });
    let mut starts = StartTimes::new(T0, Temporality::Cumulative);
    let mut n = 0;
    group.bench_function("otlp_cumulative", |b| {
        b.iter_batched(
            || next(&mut n),
            |(n, families)| {
                let request = otlp::export_request(&families, T0 + n * INTERVAL, &[], &mut starts);
                black_box(otlp::encode(&request))
            },
            BatchSize::SmallInput,
        )
    });
    let mut starts = StartTimes::new(T0, Temporality::Delta);
    let mut deltas = Deltas::default();
    let mut n = 0;
    group.bench_function("otlp_delta", |b| {
        b.iter_batched(
            || next(&mut n),
            |(n, families)| {
                // The collector: mapped, compressed into the queue.
                let stored = otlp::collect(&families, T0 + n * INTERVAL, &[], &mut starts).store();
                // The sender: converted against what was accepted, compressed.
                let converted = deltas.convert(&stored.load().unwrap());
                let body = otlp::encode(converted.request());
                deltas.accept(converted);
                black_box(body)
            },
            BatchSize::SmallInput,
        )
    });
    group.finish();
    c.final_summary();
}
