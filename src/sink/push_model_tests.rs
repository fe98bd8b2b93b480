//! A state-machine test of the push path (issue 54), against a model of
//! what prometheus_client serves and of what a receiver stores.
//!
//! The generator makes sequences of writer increments, writer exits, file
//! removals, collections with files that fail to read, an upstream that
//! fails and a late pod, and receiver answers (200, partial success, 429
//! and 503 with and without `Retry-After`, 400, 413, a request stored but
//! answered after the timeout, connection refused, a restart). Three
//! destinations take the same collections and answers ([`Rig`]: no I/O,
//! no clock, no sleep): OTLP delta, OTLP cumulative, remote write. The
//! receivers decode what they store with the official OTLP schema
//! (`opentelemetry-proto`) and remote write's messages, and key it by
//! series and timestamp, as Prometheus's OTLP receiver and Mimir do.
//!
//! After every step: per series and life, the distinct delta points add up
//! exactly to the change prometheus_client served over their window (a
//! series a writer's removal touched: never more than was counted);
//! cumulative start times move only on a true reset (a writer's files
//! removed) or a series' end; a point, once formed, never changes; remote
//! write samples come in timestamp order; the queue stays within
//! `--push.queue-max-bytes` (the newest and the attempted aside).
//!
//! 256 cases from a fixed seed ([`SEED`]), so that CI passes or fails the
//! same on every machine; proptest's own variables run others, as for every
//! generated test of the crate (`PROPTEST_CASES`, `PROPTEST_RNG_SEED`; the
//! seed is printed at every run, a failure prints the shrunk sequence):
//! `PROPTEST_RNG_SEED=<seed> cargo test --lib push_model` replays it.

use std::collections::{BTreeMap, HashMap};
use std::time::Duration;

use axum::body::Bytes;
use proptest::prelude::*;
use proptest::test_runner::{Config, RngSeed, TestRunner};
use proptest_state_machine::{ReferenceStateMachine, StateMachineTest};

use super::protocol::Protocol;
use super::rig::{counter, histogram, points, refused, status, timeout, Rig};
use crate::expose::otlp::Temporality;
use crate::expose::remote_write;

const WRITERS: usize = 3;
const T0: f64 = 1_700_000_000.0;
/// Small, so that the bound is reached (before the capacity, mostly).
const MAX_BYTES: usize = 2 << 10;
const CAPACITY: usize = 12;
/// The upstream's series start high (issue 54's blip: a series at
/// 1,000,000 pushed again whole).
const UPSTREAM_START: u64 = 1_000_000;

#[derive(Clone, Debug)]
enum Answer {
    Ok,
    PartialSuccess,
    TooManyRequests(Option<u8>),
    Unavailable(Option<u8>),
    BadRequest,
    TooLarge,
    StoredAnsweredAfterTimeout,
    ConnectionRefused,
    Restart,
}

#[derive(Clone, Debug)]
enum Event {
    /// A writer counts (its counter, and as many observations).
    Increment { writer: usize, amount: u8 },
    /// The upstream counts.
    UpstreamIncrement { amount: u8 },
    /// A writer exits (its files stay).
    Exit { writer: usize },
    /// A dead writer's files are removed; a new writer takes its slot.
    Remove { writer: usize },
    /// A collection: the writers in `failed` fail to read (a read error, or
    /// a late pod left out), the upstream fails or not.
    Collect { failed: u8, upstream_fails: bool },
    /// Every destination sends its next request; the receiver answers.
    Send(Answer),
}

#[derive(Clone, Debug, Default)]
struct Writer {
    value: u64,
    /// Its file exists (created by its first increment).
    file: bool,
    dead: bool,
}

/// The world: what prometheus_client serves, and what was counted.
#[derive(Clone, Debug)]
struct World {
    writers: [Writer; WRITERS],
    upstream: u64,
    /// Everything the merged series counted, removed writers included.
    counted: u64,
    /// Removals of a writer's files that took a value away (true resets).
    resets: u64,
}

impl World {
    fn merged(&self, failed: u8) -> Option<u64> {
        let present: Vec<u64> = self
            .writers
            .iter()
            .enumerate()
            .filter(|(i, w)| w.file && failed & (1 << i) == 0)
            .map(|(_, w)| w.value)
            .collect();
        (!present.is_empty()).then(|| present.iter().sum())
    }
}

struct Model;

impl ReferenceStateMachine for Model {
    type State = World;
    type Transition = Event;

    fn init_state() -> BoxedStrategy<World> {
        Just(World {
            writers: Default::default(),
            upstream: UPSTREAM_START,
            counted: 0,
            resets: 0,
        })
        .boxed()
    }

    fn transitions(_: &World) -> BoxedStrategy<Event> {
        let writer = 0..WRITERS;
        let retry_after = prop::option::of(0u8..3);
        let answer = prop_oneof![
            6 => Just(Answer::Ok),
            1 => Just(Answer::PartialSuccess),
            1 => retry_after.clone().prop_map(Answer::TooManyRequests),
            1 => retry_after.prop_map(Answer::Unavailable),
            1 => Just(Answer::BadRequest),
            1 => Just(Answer::TooLarge),
            2 => Just(Answer::StoredAnsweredAfterTimeout),
            1 => Just(Answer::ConnectionRefused),
            1 => Just(Answer::Restart),
        ];
        prop_oneof![
            4 => (writer.clone(), 1u8..20).prop_map(|(writer, amount)| Event::Increment { writer, amount }),
            2 => (1u8..20).prop_map(|amount| Event::UpstreamIncrement { amount }),
            1 => writer.clone().prop_map(|writer| Event::Exit { writer }),
            1 => writer.prop_map(|writer| Event::Remove { writer }),
            5 => (prop_oneof![4 => Just(0u8), 1 => 0u8..8], prop::bool::weighted(0.2))
                .prop_map(|(failed, upstream_fails)| Event::Collect { failed, upstream_fails }),
            5 => answer.prop_map(Event::Send),
        ]
        .boxed()
    }

    fn preconditions(world: &World, event: &Event) -> bool {
        match event {
            Event::Increment { writer, .. } | Event::Exit { writer } => {
                !world.writers[*writer].dead
            }
            Event::Remove { writer } => world.writers[*writer].dead,
            _ => true,
        }
    }

    fn apply(mut world: World, event: &Event) -> World {
        match *event {
            Event::Increment { writer, amount } => {
                let w = &mut world.writers[writer];
                w.value += u64::from(amount);
                w.file = true;
                world.counted += u64::from(amount);
            }
            Event::UpstreamIncrement { amount } => world.upstream += u64::from(amount),
            Event::Exit { writer } => world.writers[writer].dead = true,
            Event::Remove { writer } => {
                world.resets += u64::from(world.writers[writer].value > 0);
                world.writers[writer] = Writer::default();
            }
            Event::Collect { .. } | Event::Send(_) => {}
        }
        world
    }
}

/// The series of the test: (metric, route).
const SERIES: [(&str, &str); 4] = [
    ("c_total", "/m"),
    ("h", "/m"),
    ("c_total", "/u"),
    ("h", "/u"),
];

/// A series' life as the model sees it: from the collection it was first
/// served in to the complete collection it was absent from.
#[derive(Debug, Clone)]
struct Life {
    /// Its first collection's time (ns).
    first: u64,
    /// The first complete collection it was absent from (ns).
    end: Option<u64>,
    /// What its deltas start from: its first served value, or 0 when it
    /// was born after a complete collection (sent whole).
    base: f64,
    /// What was counted at the last complete collection it was absent
    /// from (0: none).
    counted_before: f64,
    /// A writer's files were removed during it (a true reset).
    reset: bool,
}

/// One series' history.
#[derive(Debug, Clone, Default)]
struct History {
    /// Served value and counted total at each collection (ns).
    served: BTreeMap<u64, (Option<f64>, f64)>,
    lives: Vec<Life>,
    /// Times (ns) of the world's resets (a contributor's files removed),
    /// as the next collection's time.
    resets: Vec<u64>,
    /// What was counted at the last complete collection it was absent from.
    counted_when_absent: f64,
}

/// What a receiver stored, keyed as a store keyed by series and timestamp.
#[derive(Debug, Default)]
struct Store {
    /// OTLP: (series, start, time) → (value, sum, delta); flagged points
    /// kept apart.
    points: HashMap<(String, u64, u64), (f64, f64, bool)>,
    /// Remote write: series → timestamp → value.
    samples: HashMap<String, BTreeMap<i64, f64>>,
}

impl Store {
    fn otlp(&mut self, body: &[u8]) {
        for p in points(body) {
            if p.flagged {
                // A vanished series' point carries its stream's start.
                assert!(
                    p.start > 0 && p.start < p.time,
                    "a NO_RECORDED_VALUE point without a start: {p:?}"
                );
                continue;
            }
            let key = (p.series.clone(), p.start, p.time);
            let value = (p.value, p.sum, p.delta);
            if let Some(before) = self.points.insert(key.clone(), value) {
                assert_eq!(
                    before, value,
                    "a point changed after it was formed: {key:?}"
                );
            }
        }
    }

    fn remote_write(&mut self, body: &[u8]) {
        let request = remote_write::decode(body).expect("a WriteRequest");
        for series in request.timeseries {
            let name: Vec<String> = series
                .labels
                .iter()
                .map(|l| format!("{}={}", l.name, l.value))
                .collect();
            let stored = self.samples.entry(name.join(",")).or_default();
            for s in series.samples {
                match stored.get(&s.timestamp) {
                    Some(&v) => assert_eq!(v.to_bits(), s.value.to_bits(), "a sample changed"),
                    None => {
                        let last = stored.keys().next_back().copied().unwrap_or(i64::MIN);
                        assert!(
                            s.timestamp > last,
                            "out of order: {} after {last}",
                            s.timestamp
                        );
                        stored.insert(s.timestamp, s.value);
                    }
                }
            }
        }
    }
}

struct System {
    rigs: Vec<Rig>,
    stores: Vec<Store>,
    history: HashMap<&'static str, History>,
    collections: u64,
    /// A removal that took a value away since the last collection.
    removed: bool,
    /// The world's resets seen.
    resets: u64,
    any_complete: bool,
}

fn key(metric: &str, route: &str) -> String {
    format!(
        "{metric} route={:?}",
        Some(opentelemetry_proto::tonic::common::v1::AnyValue {
            value: Some(
                opentelemetry_proto::tonic::common::v1::any_value::Value::StringValue(
                    route.to_owned()
                )
            ),
        })
    )
}

impl System {
    fn now(&self) -> f64 {
        T0 + self.collections as f64
    }

    fn collect(&mut self, world: &World, failed: u8, upstream_fails: bool) {
        self.collections += 1;
        let now = self.now();
        let time = (now * 1e9) as u64;
        let complete = failed == 0 && !upstream_fails;
        let merged = world.merged(failed);
        let upstream = (!upstream_fails).then_some(world.upstream);
        let mut counters = Vec::new();
        let mut histograms = Vec::new();
        if let Some(m) = merged {
            counters.push(("/m", m as f64));
            histograms.push(("/m", m as f64, m as f64, m as f64 / 2.0));
        }
        if let Some(u) = upstream {
            counters.push(("/u", u as f64));
            histograms.push(("/u", u as f64, u as f64, u as f64 / 2.0));
        }
        let families = [counter(&counters), histogram(&histograms)];
        for rig in &mut self.rigs {
            rig.collect(&families, now, complete);
        }
        let removed = std::mem::take(&mut self.removed);
        for (metric, route) in SERIES {
            let (served, counted) = match route {
                "/m" => (merged.map(|v| v as f64), world.counted as f64),
                _ => (upstream.map(|v| v as f64), world.upstream as f64),
            };
            let h = self.history.entry(series_name(metric, route)).or_default();
            h.served.insert(time, (served, counted));
            if route == "/m" && removed {
                h.resets.push(time);
                if let Some(life) = h.lives.last_mut().filter(|l| l.end.is_none()) {
                    life.reset = true;
                }
            }
            if served.is_none() && complete {
                h.counted_when_absent = counted;
            }
            let alive = h.lives.last().is_some_and(|l| l.end.is_none());
            match served {
                Some(v) if !alive => h.lives.push(Life {
                    first: time,
                    end: None,
                    base: if self.any_complete { 0.0 } else { v },
                    counted_before: h.counted_when_absent,
                    reset: false,
                }),
                None if alive && complete => {
                    if let Some(life) = h.lives.last_mut() {
                        life.end = Some(time);
                    }
                }
                _ => {}
            }
        }
        self.any_complete |= complete;
    }

    fn send(&mut self, answer: &Answer) {
        let now = self.now();
        for (rig, store) in self.rigs.iter_mut().zip(&mut self.stores) {
            let Some(body) = rig.request() else {
                continue;
            };
            let keep = |store: &mut Store| match rig.protocol {
                Protocol::Otlp => store.otlp(&body),
                Protocol::RemoteWrite => store.remote_write(&body),
            };
            let s = |code: u16, ra: Option<u8>| {
                Err(status(
                    rig.protocol,
                    code,
                    ra.map(|s| Duration::from_secs(s.into())),
                ))
            };
            let result = match answer {
                Answer::Ok => {
                    keep(store);
                    Ok(Bytes::new())
                }
                Answer::PartialSuccess => {
                    keep(store);
                    Ok(Bytes::from(partial_success()))
                }
                Answer::TooManyRequests(ra) => s(429, *ra),
                Answer::Unavailable(ra) => s(503, *ra),
                Answer::BadRequest => s(400, None),
                Answer::TooLarge => s(413, None),
                Answer::StoredAnsweredAfterTimeout => {
                    keep(store);
                    Err(timeout())
                }
                Answer::ConnectionRefused | Answer::Restart => Err(refused()),
            };
            rig.answer(result, now);
        }
    }

    /// The invariants, after every step.
    fn check(&self) {
        for rig in &self.rigs {
            let items = rig.queue.lock();
            let most = items.largest();
            assert!(
                items.bytes() <= MAX_BYTES + 2 * most,
                "{:?}: {} bytes queued, bound {MAX_BYTES} (+2 × {most})",
                rig.protocol,
                items.bytes()
            );
        }
        for (rig, store) in self.rigs.iter().zip(&self.stores) {
            if rig.protocol != Protocol::Otlp {
                continue;
            }
            for (metric, route) in SERIES {
                let name = series_name(metric, route);
                let Some(history) = self.history.get(name) else {
                    continue;
                };
                let series = key(metric, route);
                let mut mine: Vec<(u64, u64, f64, bool)> = store
                    .points
                    .iter()
                    .filter(|((s, _, _), _)| *s == series)
                    .map(|((_, start, time), (value, _, delta))| (*start, *time, *value, *delta))
                    .collect();
                mine.sort_by_key(|p| (p.1, p.0));
                if mine.first().is_some_and(|p| p.3) {
                    check_deltas(name, history, &mine);
                } else {
                    check_cumulative(name, history, &mine);
                }
            }
        }
    }
}

fn series_name(metric: &str, route: &str) -> &'static str {
    match (metric, route) {
        ("c_total", "/m") => "c_total /m",
        ("h", "/m") => "h /m",
        ("c_total", _) => "c_total /u",
        _ => "h /u",
    }
}

/// Per life: the distinct delta points add up to what was served at the
/// last one minus the life's base (exactly; with a reset, never more than
/// was counted).
fn check_deltas(name: &str, history: &History, points: &[(u64, u64, f64, bool)]) {
    for life in &history.lives {
        let within: Vec<&(u64, u64, f64, bool)> = points
            .iter()
            .filter(|p| p.1 >= life.first && life.end.is_none_or(|end| p.1 < end))
            .collect();
        let Some(last) = within.iter().map(|p| p.1).max() else {
            continue;
        };
        let sum: f64 = within.iter().map(|p| p.2).sum();
        let (served, counted) = history.served[&last];
        let served = served.expect("a point of a series served");
        if life.reset {
            // Sent whole: what was counted since it was last absent; else
            // what was counted since its base (a part missing from its
            // first collection is counted after it).
            let most = if life.base == 0.0 {
                counted - life.counted_before
            } else {
                counted - life.base
            };
            assert!(
                sum <= most,
                "{name}: deltas add up to {sum}, more than the {most} counted ({life:?}, {points:?})"
            );
        } else {
            assert_eq!(
                sum,
                served - life.base,
                "{name}: deltas add up to {sum}, not {} − {} ({life:?}, {points:?})",
                served,
                life.base
            );
        }
    }
}

/// A cumulative series' start moves only at a reset or a new life; its
/// values never go down under one start.
fn check_cumulative(name: &str, history: &History, points: &[(u64, u64, f64, bool)]) {
    for pair in points.windows(2) {
        let (a, b) = (pair[0], pair[1]);
        if a.0 == b.0 {
            assert!(b.2 >= a.2, "{name}: went down under one start: {points:?}");
            continue;
        }
        let reset = history.resets.iter().any(|&t| t > a.1 && t <= b.1);
        let new_life = history
            .lives
            .iter()
            .any(|l| l.first > a.1 && l.first <= b.1);
        assert!(
            reset || new_life,
            "{name}: the start moved from {} to {} without a reset: {points:?} ({:?})",
            a.0,
            b.0,
            history.lives
        );
    }
}

/// An `ExportMetricsServiceResponse` with a partial success.
fn partial_success() -> Vec<u8> {
    use opentelemetry_proto::tonic::collector::metrics::v1::{
        ExportMetricsPartialSuccess, ExportMetricsServiceResponse,
    };
    prost::Message::encode_to_vec(&ExportMetricsServiceResponse {
        partial_success: Some(ExportMetricsPartialSuccess {
            rejected_data_points: 1,
            error_message: "one point rejected".into(),
        }),
    })
}

struct PushPath;

impl StateMachineTest for PushPath {
    type SystemUnderTest = System;
    type Reference = Model;

    fn init_test(_: &World) -> System {
        let rig = |protocol, temporality| {
            Rig::new(
                protocol,
                temporality,
                T0,
                CAPACITY,
                MAX_BYTES,
                Duration::from_secs(600),
            )
        };
        System {
            rigs: vec![
                rig(Protocol::Otlp, Temporality::Delta),
                rig(Protocol::Otlp, Temporality::Cumulative),
                rig(Protocol::RemoteWrite, Temporality::Cumulative),
            ],
            stores: (0..3).map(|_| Store::default()).collect(),
            history: HashMap::new(),
            collections: 0,
            removed: false,
            resets: 0,
            any_complete: false,
        }
    }

    fn apply(mut system: System, world: &World, event: Event) -> System {
        match event {
            Event::Collect {
                failed,
                upstream_fails,
            } => system.collect(world, failed, upstream_fails),
            Event::Send(answer) => system.send(&answer),
            Event::Remove { .. } => {
                system.removed |= world.resets > system.resets;
                system.resets = world.resets;
            }
            Event::Increment { .. } | Event::UpstreamIncrement { .. } | Event::Exit { .. } => {}
        }
        system
    }

    fn check_invariants(system: &System, _: &World) {
        system.check();
    }
}

/// The seed of the cases CI runs.
const SEED: u64 = 54;

#[test]
fn push_model() {
    // proptest reads `PROPTEST_CASES` and `PROPTEST_RNG_SEED`.
    let mut config = Config {
        failure_persistence: None,
        ..Config::default()
    };
    if std::env::var_os("PROPTEST_CASES").is_none() {
        config.cases = 256;
    }
    if config.rng_seed == RngSeed::Random {
        config.rng_seed = RngSeed::Fixed(SEED);
    }
    let (cases, seed) = (config.cases, config.rng_seed);
    eprintln!(
        "push_model: seed {seed}, {cases} cases (replay: PROPTEST_RNG_SEED={seed} cargo test --lib push_model)"
    );
    let mut runner = TestRunner::new(config.clone());
    let result = runner.run(
        &Model::sequential_strategy(1..60),
        |(world, events, seen)| {
            PushPath::test_sequential(config.clone(), world, events, seen);
            Ok(())
        },
    );
    if let Err(e) = result {
        panic!("push_model failed (seed {seed}): {e}");
    }
}
