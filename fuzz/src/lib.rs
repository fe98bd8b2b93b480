//! Fuzz harnesses for multiproc-exporter: one function per `cargo fuzz`
//! target, each taking the fuzzer's raw bytes.
//!
//! `fuzz_targets/<name>.rs` is a one-line call into this file, and the main
//! crate's `tests/fuzz_corpus.rs` includes this file and runs every file of
//! `fuzz/corpus/<name>/` through the same function, so a plain `cargo test`
//! replays the committed corpus (every crash the fuzzers ever found included)
//! without cargo-fuzz.
//!
//! The library must never panic on any input; a harness panics only when a
//! property it checks is violated (each is stated in the function's doc).
//! Multi-file inputs ([`dir_reader`]) use the text container of
//! [`split_files`]/[`join_files`], so seeds are real directories.

use std::collections::BTreeMap;
use std::path::Path;

use arbitrary::{Arbitrary, Unstructured};
use multiproc_exporter::expose::encode::encode;
use multiproc_exporter::expose::encode::{Escaping, Format};
use multiproc_exporter::expose::negotiate::without_openmetrics;
use multiproc_exporter::expose::negotiate::{choose_encoder, gzip_accepted, name_params};
use multiproc_exporter::format::file_name::{is_listed_name, FileName};
use multiproc_exporter::format::key::{decode_key, MetricKey};
use multiproc_exporter::format::layout::{
    read_used, read_value, scan_records, LayoutError, HEADER_LEN,
};
use multiproc_exporter::merge::{merge_records, plan, KeyId, KeyStore, PlanInput, RawRecord};
use multiproc_exporter::model::names::{is_legacy_label_name, is_legacy_metric_name};
use multiproc_exporter::model::{MetricFamily, MetricType};
use multiproc_exporter::pipeline::Collector;
use multiproc_exporter::source::Input;
use multiproc_exporter::transform::combine::{combine, ConflictReason, Part};
use multiproc_exporter::transform::config::{
    Config, ConfigFile, FilterSection, Naming, RaySection,
};
use multiproc_exporter::{format::writer, transform};

/// The four exposition variants every merged result is encoded in.
const VARIANTS: [(Format, Escaping); 4] = [
    (Format::Text, Escaping::Underscores),
    (Format::Text, Escaping::AllowUtf8),
    (Format::OpenMetrics, Escaping::Underscores),
    (Format::OpenMetrics, Escaping::AllowUtf8),
];

/// Names a single file is merged under by [`file_parser`]: every type
/// prefix, every gauge mode class, a gauge name without a pid and a prefix
/// prometheus_client rejects.
pub const FILE_NAMES: [&str; 15] = [
    "counter_1.db",
    "gauge_all_2.db",
    "gauge_min_3.db",
    "gauge_livemax_4.db",
    "gauge_livesum_5.db",
    "gauge_livemostrecent_6.db",
    "gauge_7.db",
    "histogram_8.db",
    "summary_9.db",
    "gaugehistogram_10.db",
    "info_11.db",
    "stateset_12.db",
    "untyped_13.db",
    "unknown_14.db",
    "foo_15.db",
];

// ---------------------------------------------------------------------------
// The pure read path
// ---------------------------------------------------------------------------

/// Parses one file's bytes exactly as `source::Reader` does after reading
/// them (header, then records up to `used`), without I/O: the records as
/// `(raw key, value, timestamp)`, or the layout error that leaves the file out.
pub fn parse_file(data: &[u8]) -> Result<Vec<RawRecord>, LayoutError> {
    let used = read_used(data, data.len())?.unwrap_or(HEADER_LEN);
    let mut locations = Vec::new();
    let end = scan_records(data, HEADER_LEN, used, &mut locations)?;
    assert_eq!(end, used, "a successful scan stops at `used`");
    Ok(locations
        .iter()
        .map(|location| {
            assert!(
                location.end() <= used,
                "record {location:?} past used={used}"
            );
            let (value, timestamp) = read_value(data, location.value_offset);
            (location.key(data).to_vec(), value, timestamp)
        })
        .collect())
}

/// Merges files given as `(base name, bytes)` in order, the way `dump` does
/// without I/O. Returns the families and, in order, the indices of the files
/// left out (bad layout, bad key or not mergeable).
pub fn merge_files(files: &[(String, Vec<u8>)]) -> (Vec<MetricFamily>, Vec<usize>) {
    let mut parsed = Vec::new();
    let mut positions = Vec::new();
    let mut left_out = Vec::new();
    for (index, (name, data)) in files.iter().enumerate() {
        let name = FileName::parse(name);
        // The reader rules out an unknown type by name, before parsing.
        if name.metric_type.is_none() {
            left_out.push(index);
            continue;
        }
        match parse_file(data) {
            Ok(records) => {
                parsed.push((name, records));
                positions.push(index);
            }
            Err(_) => left_out.push(index),
        }
    }
    let (families, problems) = merge_records(&parsed, true);
    left_out.extend(problems.iter().map(|(i, _)| positions[*i]));
    left_out.sort_unstable();
    (families, left_out)
}

/// Encodes `families` in every format and escaping; returns the text format
/// with UTF-8 names (the variant that loses nothing, used for comparisons).
fn encode_all(families: &[MetricFamily]) -> Vec<u8> {
    let mut lossless = Vec::new();
    for (format, escaping) in VARIANTS {
        let body = encode(families, format, escaping);
        if format == Format::OpenMetrics {
            assert!(
                body.ends_with(b"# EOF\n"),
                "OpenMetrics output ends with # EOF"
            );
        }
        if (format, escaping) == (Format::Text, Escaping::AllowUtf8) {
            lossless = body;
        }
    }
    lossless
}

// ---------------------------------------------------------------------------
// file_parser
// ---------------------------------------------------------------------------

/// Target `file_parser`: the bytes are one `.db` file. It is parsed as the
/// reader parses it (also in two scans split at a record boundary, as an
/// incremental read does), its keys decoded once into a [`KeyStore`], its
/// records planned and evaluated under every name of [`FILE_NAMES`] (and
/// as a histogram without accumulation), transformed with a non-trivial configuration
/// and encoded in all four variants.
///
/// Properties: nothing panics; no record lies outside the file's `used`
/// bytes; an incremental scan finds the same records as a full one; a file
/// with records that merges without problems yields at least one family.
pub fn file_parser(data: &[u8]) {
    let records = parse_file(data);
    check_incremental_scan(data);
    let Ok(records) = records else { return };

    // Keys decoded once into one store, as the reader keeps them; the
    // records then planned and evaluated under every file name.
    let mut store = KeyStore::new();
    let keys: Result<Vec<KeyId>, _> = records.iter().map(|(key, ..)| store.intern(key)).collect();
    let Ok(keys) = keys else { return };
    let values: Vec<(f64, f64)> = records.iter().map(|&(_, v, t)| (v, t)).collect();
    let mut all = Vec::new();
    for name in FILE_NAMES {
        let name = FileName::parse(name);
        let planned = plan(
            &mut store,
            &[PlanInput {
                name: &name,
                keys: &keys,
            }],
            true,
        );
        let families = planned
            .plan
            .evaluate(|_| values.as_slice())
            .expect("values match the plan");
        if planned.excluded.is_empty() && !keys.is_empty() {
            assert!(
                !families.is_empty(),
                "records of {name:?} merged into nothing"
            );
        }
        all.extend(families);
    }
    // Without accumulation (a library mode `dump` does not use): raw buckets.
    let name = FileName::parse("histogram_1.db");
    let planned = plan(
        &mut store,
        &[PlanInput {
            name: &name,
            keys: &keys,
        }],
        false,
    );
    let _ = planned.plan.evaluate(|_| values.as_slice());
    encode_all(&all);
    let config = sample_config();
    let transformed = transform::apply(&config, all);
    check_transformed(&config, &transformed.families);
    encode_all(&transformed.families);
}

/// Scans `data` in two steps split at the first record boundary past the
/// middle, as the reader does when a file grows, and compares with one scan.
fn check_incremental_scan(data: &[u8]) {
    let Ok(Some(used)) = read_used(data, data.len()) else {
        return;
    };
    let mut full = Vec::new();
    let full_end = scan_records(data, HEADER_LEN, used, &mut full);
    let Some(split) = full.iter().map(|l| l.end()).find(|&end| end >= used / 2) else {
        return;
    };
    let mut parts = Vec::new();
    assert_eq!(scan_records(data, HEADER_LEN, split, &mut parts), Ok(split));
    let rest_end = scan_records(data, split, used, &mut parts);
    assert_eq!(rest_end, full_end, "incremental scan ends like a full scan");
    assert_eq!(parts, full, "incremental scan finds the same records");
}

// ---------------------------------------------------------------------------
// merge_structured
// ---------------------------------------------------------------------------

/// Words the structured inputs draw names, labels and help texts from: the
/// names, suffixes, label names and bucket bounds the merge treats specially.
const WORDS: [&str; 40] = [
    "",
    "a",
    "b",
    "h",
    "vllm:x",
    "vllm:num_requests_running",
    "lmcache:hits",
    "le",
    "pid",
    "quantile",
    "model_name",
    "exported_pid",
    "__name__",
    "+Inf",
    "-Inf",
    "inf",
    "Infinity",
    "1.0",
    "0.5",
    "1e3",
    "-0.0",
    "0",
    "NaN",
    "1_0",
    "\u{661}\u{662}",
    " 2 ",
    "_total",
    "_bucket",
    "_sum",
    "_count",
    "_created",
    "a_total",
    "ray_a",
    "help text",
    "\n",
    "\"",
    "\\",
    "é",
    "😀",
    "a\u{0}b",
];

/// Sample-name suffixes that change how a sample is merged or encoded.
const SUFFIXES: [&str; 9] = [
    "", "_total", "_bucket", "_sum", "_count", "_created", "_gsum", "_gcount", "_info",
];

/// Type prefixes of file names besides `counter`/`gauge`/`histogram`/`summary`.
const OTHER_PREFIXES: [&str; 7] = [
    "gaugehistogram",
    "info",
    "stateset",
    "untyped",
    "unknown",
    "foo",
    "",
];

/// A string: a word from [`WORDS`] or anything.
#[derive(Debug, Arbitrary)]
enum Text {
    Word(u8),
    Any(String),
}

impl Text {
    fn get(&self) -> &str {
        match self {
            Self::Word(i) => WORDS[*i as usize % WORDS.len()],
            Self::Any(s) => s,
        }
    }
}

/// A value or timestamp: a special value, a small integer or any bits.
#[derive(Debug, Arbitrary)]
enum Number {
    Special(u8),
    Small(i8),
    Bits(u64),
}

impl Number {
    fn get(&self) -> f64 {
        const SPECIAL: [f64; 10] = [
            0.0,
            -0.0,
            1.0,
            0.1,
            f64::NAN,
            f64::INFINITY,
            f64::NEG_INFINITY,
            f64::MAX,
            f64::MIN_POSITIVE,
            5e-324,
        ];
        match self {
            Self::Special(i) => SPECIAL[*i as usize % SPECIAL.len()],
            Self::Small(n) => f64::from(*n),
            Self::Bits(bits) => f64::from_bits(*bits),
        }
    }
}

#[derive(Debug, Arbitrary)]
enum SampleName {
    /// Family name plus a suffix of [`SUFFIXES`].
    Suffixed(u8),
    Other(Text),
}

#[derive(Debug, Arbitrary)]
struct StructuredRecord {
    family: Text,
    sample: SampleName,
    labels: Vec<(Text, Text)>,
    help: Text,
    value: Number,
    timestamp: Number,
}

#[derive(Debug, Arbitrary)]
enum StructuredName {
    Counter(u8),
    Gauge { mode: u8, pid: u8 },
    Histogram(u8),
    Summary(u8),
    Other { prefix: u8, pid: u8 },
    Any(String),
}

impl StructuredName {
    fn get(&self) -> String {
        use writer::{FileKind, GaugeMode};
        match self {
            Self::Counter(pid) => FileKind::Counter.file_name(pid),
            Self::Gauge { mode, pid } => {
                let mode = GaugeMode::ALL_MODES[*mode as usize % GaugeMode::ALL_MODES.len()];
                FileKind::Gauge(mode).file_name(pid)
            }
            Self::Histogram(pid) => FileKind::Histogram.file_name(pid),
            Self::Summary(pid) => FileKind::Summary.file_name(pid),
            Self::Other { prefix, pid } => {
                let prefix = OTHER_PREFIXES[*prefix as usize % OTHER_PREFIXES.len()];
                format!("{prefix}_{pid}.db")
            }
            Self::Any(name) => name.clone(),
        }
    }
}

#[derive(Debug, Arbitrary)]
struct StructuredFile {
    name: StructuredName,
    records: Vec<StructuredRecord>,
}

#[derive(Debug, Arbitrary)]
struct StructuredConfig {
    ray: bool,
    include: Vec<Text>,
    exclude: Vec<Text>,
    labels: Vec<(Text, Text)>,
}

/// What [`merge_structured`] decodes its bytes into (with `arbitrary`).
#[derive(Debug, Arbitrary)]
struct StructuredInput {
    files: Vec<StructuredFile>,
    config: StructuredConfig,
    restrict_to: Option<Vec<Text>>,
}

/// Target `merge_structured`: the bytes are decoded (with `arbitrary`) into
/// files with chosen type-prefixed names (`counter_1.db`,
/// `gauge_livesum_2.db`, `histogram_3.db`, ...) holding records whose keys
/// are built from chosen words or any strings, written with the writer's
/// encoder ([`writer::encode_key`], [`writer::file_bytes`]), so every input
/// gets past the layout and JSON checks and exercises the merge, the
/// configuration transform, `name[]` restriction, the combination of
/// subdirectories ([`check_combined`]) and the encoders.
///
/// Properties: nothing panics; every key the writer encodes decodes to the
/// same family, sample, labels (sorted, last value of a repeated name) and
/// help; every file parses back to exactly the records written, bit for bit;
/// with `naming: ray` every served name is a legacy Prometheus name; every
/// constant label is on every sample; a restriction keeps only the named
/// samples.
pub fn merge_structured(data: &[u8]) {
    let Ok(input) = StructuredInput::arbitrary_take_rest(Unstructured::new(data)) else {
        return;
    };
    let mut files = Vec::new();
    for file in &input.files {
        let keys: Vec<(String, f64, f64)> = file
            .records
            .iter()
            .map(|record| {
                let family = record.family.get();
                let sample = match &record.sample {
                    SampleName::Suffixed(i) => {
                        format!("{family}{}", SUFFIXES[*i as usize % SUFFIXES.len()])
                    }
                    SampleName::Other(text) => text.get().to_owned(),
                };
                let labels: Vec<(&str, &str)> = record
                    .labels
                    .iter()
                    .map(|(n, v)| (n.get(), v.get()))
                    .collect();
                let help = record.help.get();
                let key = writer::encode_key(family, &sample, &labels, help);
                check_key_round_trip(&key, family, &sample, &labels, help);
                (key, record.value.get(), record.timestamp.get())
            })
            .collect();
        let borrowed: Vec<(&str, f64, f64)> =
            keys.iter().map(|(k, v, t)| (k.as_str(), *v, *t)).collect();
        let mut bytes = writer::file_bytes(&borrowed);
        // Cut to `used`, as most committed fixtures are (keeps inputs small).
        let used = read_used(&bytes, bytes.len())
            .expect("writer header")
            .unwrap_or(HEADER_LEN);
        bytes.truncate(used);
        let parsed = parse_file(&bytes).expect("writer output parses");
        assert_eq!(parsed.len(), keys.len());
        for ((raw, value, ts), (key, v, t)) in parsed.iter().zip(&keys) {
            assert_eq!(raw.as_slice(), key.as_bytes());
            assert_eq!(value.to_bits(), v.to_bits());
            assert_eq!(ts.to_bits(), t.to_bits());
        }
        files.push((file.name.get(), bytes));
    }

    let (families, _left_out) = merge_files(&files);
    encode_all(&families);
    check_combined(&files);

    let config = structured_config(&input.config);
    let transformed = transform::apply(&config, families);
    check_transformed(&config, &transformed.families);
    encode_all(&transformed.families);
    check_fold(&transformed.families);

    if let Some(names) = &input.restrict_to {
        let names: Vec<String> = names.iter().map(|n| n.get().to_owned()).collect();
        let restricted = transform::restrict(&transformed.families, &names);
        for family in &restricted {
            assert!(
                !family.samples.is_empty(),
                "restriction keeps no empty family"
            );
            for sample in &family.samples {
                assert!(names.iter().any(|n| **n == *sample.name));
            }
        }
        encode_all(&restricted);
    }
}

/// A view's fold (`transform::fold`) over every family: the first label of
/// each family's first sample folded away, the functions in turn (the
/// weights and ranks read from the next family). The folded families keep
/// their order, lose the folded labels, never gain samples, and encode.
fn check_fold(families: &[MetricFamily]) {
    use multiproc_exporter::transform::fold::{Fold, FoldFunction, FoldRule};
    use std::sync::Arc;
    let mut labels: Vec<Arc<str>> = families
        .iter()
        .filter_map(|f| {
            f.samples
                .first()?
                .labels
                .iter()
                .next()
                .map(|(n, _)| n.clone())
        })
        .take(2)
        .collect();
    labels.sort_unstable();
    labels.dedup();
    let other_label = |f: &MetricFamily| -> Arc<str> {
        f.samples
            .iter()
            .flat_map(|s| s.labels.iter().map(|(n, _)| n.clone()))
            .find(|n| !labels.contains(n))
            .unwrap_or_else(|| Arc::from("fuzz_merged"))
    };
    let rules: Vec<FoldRule> = families
        .iter()
        .enumerate()
        .map(|(i, family)| {
            let next: Arc<str> = families[(i + 1) % families.len()].name.clone();
            let function = match i % 7 {
                0 => FoldFunction::Sum,
                1 => FoldFunction::Max,
                2 => FoldFunction::Min,
                3 => FoldFunction::Mean,
                4 => FoldFunction::WeightedMean {
                    family: next,
                    label: Some(other_label(family)),
                },
                5 => FoldFunction::SumLabels {
                    labels: vec![other_label(family)],
                },
                _ => FoldFunction::NewestUnion {
                    labels: vec![other_label(family)],
                    ranks: Some(next),
                },
            };
            FoldRule {
                family: family.name.clone(),
                function,
            }
        })
        .collect();
    let fold = Fold { labels, rules };
    let folded = fold.apply(families.to_vec(), families);
    assert_eq!(folded.len(), families.len());
    for (before, after) in families.iter().zip(&folded) {
        assert_eq!(before.name, after.name);
        assert!(after.samples.len() <= before.samples.len());
        assert_eq!(after.samples.is_empty(), before.samples.is_empty());
        for sample in &after.samples {
            for label in &fold.labels {
                assert!(sample.labels.get(label).is_none(), "{label} folded away");
            }
        }
    }
    encode_all(&folded);
}

/// The DaemonSet path (`--dir.subdirectories-label`): the files split into
/// two subdirectories (alternately), each merged on its own, then combined
/// with `pod="a"`/`pod="b"`. Every sample carries its part's label, and no
/// sample is lost except those of a family whose type disagrees with an
/// earlier part's (each such family reported as a conflict).
fn check_combined(files: &[(String, Vec<u8>)]) {
    let label: std::sync::Arc<str> = "pod".into();
    let mut parts = Vec::new();
    let mut expected_samples = 0;
    for (index, value) in ["a", "b"].into_iter().enumerate() {
        let part_files: Vec<(String, Vec<u8>)> =
            files.iter().skip(index).step_by(2).cloned().collect();
        let (families, _) = merge_files(&part_files);
        expected_samples += families.iter().map(|f| f.samples.len()).sum::<usize>();
        parts.push(Part {
            value: value.into(),
            families,
        });
    }
    let first_types: BTreeMap<String, MetricType> = parts[0]
        .families
        .iter()
        .map(|f| (f.name.to_string(), f.metric_type))
        .collect();
    let mismatched: Vec<usize> = parts[1]
        .families
        .iter()
        .filter(|f| {
            first_types
                .get(&*f.name)
                .is_some_and(|t| *t != f.metric_type)
        })
        .map(|f| f.samples.len())
        .collect();
    let combined = combine(&label, parts);
    let mut samples = 0;
    for family in &combined.families {
        for sample in &family.samples {
            let value = sample.labels.get("pod");
            assert!(matches!(value, Some("a" | "b")), "pod label {value:?}");
            samples += 1;
        }
    }
    let type_conflicts = combined
        .conflicts
        .iter()
        .filter(|c| c.reason == ConflictReason::TypeMismatch)
        .count();
    let lost: usize = mismatched.iter().sum();
    assert_eq!(samples, expected_samples - lost, "samples kept");
    assert_eq!(type_conflicts, mismatched.len(), "type conflicts reported");
    encode_all(&combined.families);
}

/// `decode_key(encode_key(parts))` gives back the parts (labels sorted by
/// name, a repeated name keeping its last value, as Python's dict does).
fn check_key_round_trip(
    key: &str,
    family: &str,
    sample: &str,
    labels: &[(&str, &str)],
    help: &str,
) {
    let decoded = decode_key(key.as_bytes());
    if family.is_empty() {
        assert!(decoded.is_err(), "an empty family name is rejected");
        return;
    }
    let decoded = decoded.unwrap_or_else(|e| panic!("writer key {key:?} does not decode: {e}"));
    let mut expected: BTreeMap<&str, &str> = BTreeMap::new();
    for (name, value) in labels {
        expected.insert(name, value);
    }
    let expected = MetricKey {
        family: family.to_owned(),
        sample: sample.to_owned(),
        labels: expected
            .into_iter()
            .map(|(n, v)| (n.to_owned(), v.to_owned()))
            .collect(),
        help: help.to_owned(),
    };
    assert_eq!(decoded, expected, "round trip of {key:?}");
}

/// The configuration a structured input chooses; an invalid one (which the
/// loader would reject) falls back to the default configuration.
fn structured_config(choice: &StructuredConfig) -> Config {
    let texts = |list: &[Text]| list.iter().map(|t| t.get().to_owned()).collect();
    let file = ConfigFile {
        filter: FilterSection {
            include_prefixes: texts(&choice.include),
            exclude_prefixes: texts(&choice.exclude),
        },
        naming: if choice.ray {
            Naming::Ray
        } else {
            Naming::Prometheus
        },
        per_writer: None,
        aliases: Default::default(),
        upstreams: Vec::new(),
        views: Default::default(),
        endpoint_picker: Default::default(),
        vllm_aliases: choice.ray,
        // With Ray names, vLLM families get `ReplicaId` too.
        ray: RaySection {
            replica_id: choice.ray.then(String::new),
        },
        labels: choice
            .labels
            .iter()
            .map(|(n, v)| (n.get().to_owned(), v.get().to_owned()))
            .collect(),
    };
    Config::validate(file).unwrap_or_default()
}

/// A fixed non-trivial configuration: Ray names and a constant label.
fn sample_config() -> Config {
    Config::from_yaml("naming: ray\nlabels: {ReplicaId: \"r\", pid: \"p\"}\n")
        .expect("sample configuration is valid")
}

/// What the transform promises: Ray names are legacy-valid and unique per
/// family, and every constant label is on every sample.
fn check_transformed(config: &Config, families: &[MetricFamily]) {
    if config.naming == Naming::Ray {
        let mut names = std::collections::HashSet::new();
        for family in families {
            assert!(
                is_legacy_metric_name(&family.name),
                "ray name {:?}",
                family.name
            );
            assert!(
                names.insert(family.name.clone()),
                "duplicate {:?}",
                family.name
            );
            for sample in &family.samples {
                assert!(
                    is_legacy_metric_name(&sample.name),
                    "ray name {:?}",
                    sample.name
                );
            }
        }
    }
    for family in families {
        for sample in &family.samples {
            for (name, value) in &config.labels {
                assert_eq!(
                    sample.labels.get(name),
                    Some(&**value),
                    "constant label {name}"
                );
            }
        }
    }
}

// ---------------------------------------------------------------------------
// dir_reader
// ---------------------------------------------------------------------------

/// Starts a file section in a multi-file input: `==> NAME\n` then the bytes.
const FILE_MARKER: &[u8] = b"==> ";

/// Splits a multi-file input into `(name, bytes)` sections.
///
/// The format is that of `head` over several files: each section starts
/// with `==> NAME` and a newline at the start of the input or after a
/// newline, and runs until the newline before the next section (that
/// newline is not part of the file). Bytes before the first section are
/// ignored. Names are read as lossy UTF-8.
pub fn split_files(data: &[u8]) -> Vec<(String, &[u8])> {
    let mut starts: Vec<usize> = Vec::new();
    if data.starts_with(FILE_MARKER) {
        starts.push(0);
    }
    starts.extend(memchr::memmem::find_iter(data, b"\n==> ").map(|at| at + 1));
    let mut sections = Vec::with_capacity(starts.len());
    for (i, &start) in starts.iter().enumerate() {
        let end = match starts.get(i + 1) {
            Some(&next) => next - 1,
            None => data.len(),
        };
        let section = &data[start + FILE_MARKER.len()..end];
        let (name, bytes) = match memchr::memchr(b'\n', section) {
            Some(newline) => (&section[..newline], &section[newline + 1..]),
            None => (section, &section[section.len()..]),
        };
        sections.push((String::from_utf8_lossy(name).into_owned(), bytes));
    }
    sections
}

/// The inverse of [`split_files`] (for seeds): `==> NAME\n` + bytes per file,
/// sections separated by a newline.
pub fn join_files(files: &[(&str, &[u8])]) -> Vec<u8> {
    let mut out = Vec::new();
    for (i, (name, bytes)) in files.iter().enumerate() {
        if i > 0 {
            out.push(b'\n');
        }
        out.extend_from_slice(FILE_MARKER);
        out.extend_from_slice(name.as_bytes());
        out.push(b'\n');
        out.extend_from_slice(bytes);
    }
    out
}

/// At most this many sections are used (more are ignored).
const MAX_SECTIONS: usize = 32;

/// Target `dir_reader`: the bytes are a multi-file input ([`split_files`];
/// a section named `NAME SIZE` cuts or zero-pads the file to `SIZE` bytes)
/// written into a real directory and read by the real [`Reader`], as `serve`
/// does, in rounds: a section whose name was already written in the current
/// round starts a new round, in which it overwrites the file in place (same
/// inode, as a growing prometheus_client file; shrinking it too), `==> -NAME`
/// deletes `NAME`, and a new name creates a file; every file touched is
/// rechecked, as `serve` does on inotify events. The same `Reader` collects
/// after every round, so its incremental reading, file maps, plan reuse and
/// failure cache are fuzzed; it collects as `serve` does, holding the last
/// merge's families ([`Collector::collect_since`]), so a round it finds
/// unchanged is checked with those.
///
/// Properties: nothing panics; after every round, the reader's families (as
/// text) and the set of files it leaves out equal those of a fresh pure merge
/// ([`merge_files`]) of the directory's current bytes in `readdir` order, as
/// long as no round rewrote a record key that an earlier round had already
/// read (prometheus_client never does: keys are written once, before `used`
/// covers them, and only values change in place).
pub fn dir_reader(data: &[u8]) {
    let sections = split_files(data);
    if sections.is_empty() {
        return;
    }
    let base = if Path::new("/dev/shm").is_dir() {
        Path::new("/dev/shm").to_path_buf()
    } else {
        std::env::temp_dir()
    };
    let dir = tempfile::Builder::new()
        .prefix("mpe-fuzz-")
        .tempdir_in(base)
        .expect("temporary directory");
    let mut reader = Collector::new();
    let inputs = [Input::Directory(dir.path().to_path_buf())];
    // The last merge's id and families, as `serve` holds them.
    let mut held: Option<(u64, Vec<MetricFamily>)> = None;
    // Bytes of every file as of the last collection (what the reader may have cached).
    let mut previous: BTreeMap<String, Vec<u8>> = BTreeMap::new();
    let mut current = previous.clone();
    let mut in_round: Vec<String> = Vec::new();
    let mut comparable = true;
    let mut sections = sections.into_iter().take(MAX_SECTIONS).peekable();
    while sections.peek().is_some() {
        // One round: sections up to the first name seen twice.
        while let Some((name, _)) = sections.peek() {
            let (delete, name) = match name.strip_prefix('-') {
                Some(rest) => (true, rest),
                None => (false, name.as_str()),
            };
            let (name, size) = file_name_and_size(name);
            if in_round.contains(&name) {
                break;
            }
            let Some((_, bytes)) = sections.next() else {
                break;
            };
            let path = dir.path().join(&name);
            if delete {
                let _ = std::fs::remove_file(&path);
                current.remove(&name);
            } else {
                let mut bytes = bytes.to_vec();
                if let Some(size) = size {
                    bytes.resize(size, 0);
                }
                overwrite_in_place(&path, &bytes);
                current.insert(name.clone(), bytes);
            }
            // As `serve` does on the inotify event of a modified file.
            reader.recheck(&path);
            in_round.push(name);
        }
        in_round.clear();
        for (name, bytes) in &current {
            if let Some(old) = previous.get(name) {
                comparable &= keys_kept(old, bytes);
            }
        }
        let mut collection = reader.collect_since(&inputs, held.as_ref().map(|(id, _)| *id));
        match &held {
            Some((id, families)) if collection.unchanged => {
                assert_eq!(collection.merged_id, *id, "an unchanged merge keeps its id");
                assert!(
                    collection.families.is_empty(),
                    "an unchanged merge gives no families"
                );
                collection.families = families.clone();
            }
            _ => {
                assert!(
                    !collection.unchanged,
                    "unchanged since a merge the caller does not hold"
                );
                held = Some((collection.merged_id, collection.families.clone()));
            }
        }
        if comparable {
            compare_with_pure_merge(dir.path(), &collection, &current);
        }
        encode_all(&collection.families);
        previous = current.clone();
    }
}

/// Largest size a section may give its file (prometheus_client's files are
/// 64 KiB, doubled as needed).
const MAX_FILE_SIZE: usize = 1 << 20;

/// Splits a section name `NAME [SIZE]` into a name that can be created
/// ([`safe_file_name`]) and the size the file is cut or zero-padded to, if
/// given (a prometheus_client file is 64 KiB of which only `used` bytes
/// matter; seeds keep the bytes up to `used` and say `65536`).
fn file_name_and_size(section_name: &str) -> (String, Option<usize>) {
    if let Some((name, size)) = section_name.rsplit_once(' ') {
        if let Ok(size) = size.parse::<usize>() {
            return (safe_file_name(name), Some(size.min(MAX_FILE_SIZE)));
        }
    }
    (safe_file_name(section_name), None)
}

/// A name that can be created in a directory: no `/` or NUL, not `.`/`..`,
/// at most 200 bytes.
fn safe_file_name(name: &str) -> String {
    let mut safe: String = name
        .chars()
        .map(|c| if c == '/' || c == '\0' { '_' } else { c })
        .collect();
    while safe.len() > 200 {
        safe.pop();
    }
    if safe.is_empty() || safe == "." || safe == ".." {
        safe = "x".to_owned();
    }
    safe
}

/// Writes `bytes` over the file at `path` keeping its inode (creating it if
/// needed) and cuts it to `bytes.len()`.
fn overwrite_in_place(path: &Path, bytes: &[u8]) {
    use std::io::Write;
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(false)
        .open(path)
        .expect("open fuzz file");
    file.write_all(bytes).expect("write fuzz file");
    file.set_len(bytes.len() as u64).expect("resize fuzz file");
}

/// Whether the reader, having read `old` at its last collection, must find
/// in `new` what a fresh parse finds: the record keys and lengths below the
/// smaller of the two `used` are unchanged (values may change: they are
/// re-read every time; keys never do in prometheus_client's files). What the
/// reader keeps of a file is a parsed prefix of an earlier version, and it
/// parses afresh when `used` falls below that prefix, so checking each pair
/// of consecutive versions up to the smaller `used` covers every key it
/// keeps (and is stricter than needed otherwise).
fn keys_kept(old: &[u8], new: &[u8]) -> bool {
    let (Ok(Some(old_used)), Ok(Some(new_used))) =
        (read_used(old, old.len()), read_used(new, new.len()))
    else {
        return true; // nothing cached from `old`, or `new` is parsed afresh
    };
    let upto = old_used.min(new_used);
    let mut locations = Vec::new();
    let _ = scan_records(old, HEADER_LEN, old_used, &mut locations);
    let mut kept = old[HEADER_LEN..upto].to_vec();
    let mut renewed = new[HEADER_LEN..upto].to_vec();
    for location in &locations {
        let slot =
            location.value_offset.min(upto) - HEADER_LEN..location.end().min(upto) - HEADER_LEN;
        kept[slot.clone()].fill(0);
        renewed[slot].fill(0);
    }
    kept == renewed
}

/// The reader's result must equal a pure merge of the same bytes in the
/// order the reader listed them.
fn compare_with_pure_merge(
    dir: &Path,
    collection: &multiproc_exporter::pipeline::Collection,
    current: &BTreeMap<String, Vec<u8>>,
) {
    let listed: Vec<String> = std::fs::read_dir(dir)
        .expect("list fuzz directory")
        .flatten()
        .filter_map(|entry| entry.file_name().into_string().ok())
        .filter(|name| is_listed_name(name.as_bytes()))
        .collect();
    let files: Vec<(String, Vec<u8>)> = listed
        .iter()
        .map(|name| (name.clone(), current[name].clone()))
        .collect();
    let (families, left_out) = merge_files(&files);
    let pure_left_out: Vec<&str> = left_out.iter().map(|&i| listed[i].as_str()).collect();
    let reader_left_out: Vec<String> = collection
        .problems
        .iter()
        .filter_map(|p| p.path.file_name()?.to_str().map(str::to_owned))
        .collect();
    assert_eq!(reader_left_out, pure_left_out, "files left out");
    assert_eq!(
        String::from_utf8_lossy(&encode(
            &collection.families,
            Format::Text,
            Escaping::AllowUtf8
        )),
        String::from_utf8_lossy(&encode(&families, Format::Text, Escaping::AllowUtf8)),
        "reader and pure merge disagree"
    );
}

// ---------------------------------------------------------------------------
// key_decoder
// ---------------------------------------------------------------------------

/// Target `key_decoder`: the bytes are one record key.
///
/// Properties: nothing panics; when `serde_json` reads the bytes as
/// `[string, string, {string: string}, string]`, the decoder agrees exactly
/// (an empty family name aside, which prometheus_client rejects); when the
/// decoder accepts what `serde_json` rejects, the key holds a `\u` escape of
/// a surrogate (lone surrogates, which Python keeps and the decoder turns
/// into U+FFFD); and whatever the decoder accepts, re-encoded with
/// [`writer::encode_key`], decodes to the same key.
pub fn key_decoder(data: &[u8]) {
    let ours = decode_key(data);
    type Shape = (String, String, BTreeMap<String, String>, String);
    match (serde_json::from_slice::<Shape>(data), &ours) {
        (Ok((family, ..)), Err(e)) if family.is_empty() => {
            assert_eq!(*e, multiproc_exporter::format::key::KeyError::EmptyFamily);
        }
        (Ok((family, sample, labels, help)), ours) => {
            let expected = MetricKey {
                family,
                sample,
                labels: labels.into_iter().collect(),
                help,
            };
            assert_eq!(
                ours.as_ref(),
                Ok(&expected),
                "decoder disagrees with serde_json"
            );
        }
        (Err(_), Ok(_)) => {
            assert!(
                has_surrogate_escape(data),
                "decoder accepts what serde_json rejects"
            );
        }
        (Err(_), Err(_)) => {}
    }
    if let Ok(key) = ours {
        let labels: Vec<(&str, &str)> = key
            .labels
            .iter()
            .map(|(n, v)| (n.as_str(), v.as_str()))
            .collect();
        let again = writer::encode_key(&key.family, &key.sample, &labels, &key.help);
        assert_eq!(
            decode_key(again.as_bytes()),
            Ok(key),
            "re-encoded key round trip"
        );
    }
}

/// Whether `data` contains `\uD800`..`\uDFFF` (any case).
fn has_surrogate_escape(data: &[u8]) -> bool {
    data.windows(4).any(|w| {
        w[0] == b'\\' && w[1] == b'u' && matches!(w[2], b'd' | b'D') && {
            matches!(w[3], b'8' | b'9' | b'a'..=b'f' | b'A'..=b'F')
        }
    })
}

// ---------------------------------------------------------------------------
// config_loader
// ---------------------------------------------------------------------------

/// Target `config_loader`: the bytes are the YAML configuration file.
///
/// Properties: nothing panics; an accepted configuration has no empty
/// prefix and only allowed constant label names; applying it to a
/// vLLM-like set of families keeps the promises checked for every transform
/// (legacy Ray names, constant labels on every sample), keeps the families
/// in order and encodes in all variants.
pub fn config_loader(data: &[u8]) {
    let Ok(config) = Config::from_bytes(data) else {
        return;
    };
    assert!(config.include_prefixes.iter().all(|p| !p.is_empty()));
    assert!(config.exclude_prefixes.iter().all(|p| !p.is_empty()));
    for (name, _) in &config.labels {
        assert!(
            is_legacy_label_name(name) && !name.starts_with("__"),
            "label {name:?}"
        );
        assert!(!["le", "quantile"].contains(&&**name), "label {name:?}");
    }
    let families = sample_families();
    let transformed = transform::apply(&config, families.clone());
    check_transformed(&config, &transformed.families);
    let kept = families
        .iter()
        .filter(|f| transform::keep(&config, f))
        .count();
    assert_eq!(
        transformed.families.len() + transformed.collisions.len(),
        kept,
        "every kept family is served or reported as a collision"
    );
    encode_all(&transformed.families);
}

/// vLLM-like families of every type, merged from writer-encoded records.
fn sample_families() -> Vec<MetricFamily> {
    static FAMILIES: std::sync::OnceLock<Vec<MetricFamily>> = std::sync::OnceLock::new();
    FAMILIES
        .get_or_init(|| {
            let key = |family: &str, sample: &str, labels: &[(&str, &str)]| {
                writer::encode_key(family, sample, labels, "help").into_bytes()
            };
            let m = [("model_name", "m")];
            let bucket = |le| [("le", le), ("model_name", "m")];
            let files = vec![
                (
                    FileName::parse("counter_1.db"),
                    vec![
                        (
                            key("vllm:prompt_tokens", "vllm:prompt_tokens_total", &m),
                            3.0,
                            0.0,
                        ),
                        (key("lmcache:hits", "lmcache:hits_total", &[]), 1.0, 0.0),
                        (
                            key(
                                "vllm_prompt_tokens",
                                "vllm_prompt_tokens_total",
                                &[("pid", "x")],
                            ),
                            1.0,
                            0.0,
                        ),
                    ],
                ),
                (
                    FileName::parse("gauge_livemostrecent_1.db"),
                    vec![(
                        key("vllm:num_requests_running", "vllm:num_requests_running", &m),
                        2.0,
                        5.0,
                    )],
                ),
                (
                    FileName::parse("gauge_all_1.db"),
                    vec![(
                        key("vllm:cache_config_info", "vllm:cache_config_info", &m),
                        1.0,
                        0.0,
                    )],
                ),
                (
                    FileName::parse("histogram_1.db"),
                    vec![
                        (
                            key(
                                "vllm:e2e_request_latency_seconds",
                                "vllm:e2e_request_latency_seconds_sum",
                                &m,
                            ),
                            0.5,
                            0.0,
                        ),
                        (
                            key(
                                "vllm:e2e_request_latency_seconds",
                                "vllm:e2e_request_latency_seconds_bucket",
                                &bucket("0.3"),
                            ),
                            1.0,
                            0.0,
                        ),
                        (
                            key(
                                "vllm:e2e_request_latency_seconds",
                                "vllm:e2e_request_latency_seconds_bucket",
                                &bucket("+Inf"),
                            ),
                            0.0,
                            0.0,
                        ),
                    ],
                ),
                (
                    FileName::parse("summary_1.db"),
                    vec![
                        (key("s", "s_count", &[]), 1.0, 0.0),
                        (key("s", "s_sum", &[]), 2.0, 0.0),
                    ],
                ),
                (
                    FileName::parse("info_1.db"),
                    vec![(key("build", "build_info", &[("version", "1")]), 1.0, 0.0)],
                ),
            ];
            let (families, problems) = merge_records(&files, true);
            assert!(problems.is_empty(), "sample families merge: {problems:?}");
            families
        })
        .clone()
}

// ---------------------------------------------------------------------------
// accept_header
// ---------------------------------------------------------------------------

/// Target `accept_header`: the bytes (lossy UTF-8) are three lines: an
/// `Accept` header, an `Accept-Encoding` header and a query string.
///
/// Properties: nothing panics; the Content-Type names the format chosen
/// (`application/openmetrics-text; version=` or `text/plain; version=`),
/// says `escaping=allow-utf-8` exactly when UTF-8 names are served (or no
/// escaping for the 0.0.4 and version-less OpenMetrics answers), and is a
/// valid header value whenever the `Accept` header was one; without its
/// OpenMetrics clauses, no header negotiates OpenMetrics; every `name[]`
/// value is non-empty.
pub fn accept_header(data: &[u8]) {
    let text = String::from_utf8_lossy(data);
    let mut lines = text.splitn(3, '\n');
    let accept = lines.next();
    let accept_encoding = lines.next();
    let query = lines.next();

    let negotiated = choose_encoder(accept);
    let content_type = negotiated.content_type.as_str();
    match negotiated.format {
        Format::OpenMetrics => {
            assert!(content_type.starts_with("application/openmetrics-text; version="))
        }
        Format::Text => assert!(content_type.starts_with("text/plain; version=")),
    }
    let utf8 = content_type.ends_with("; escaping=allow-utf-8");
    assert_eq!(
        utf8,
        negotiated.escaping == Escaping::AllowUtf8,
        "{content_type}"
    );
    if !utf8 && content_type.contains("escaping=") {
        assert!(
            content_type.ends_with("; escaping=underscores"),
            "{content_type}"
        );
    }
    let header_value = |s: &str| s.bytes().all(|b| b == b'\t' || (b' '..=b'~').contains(&b));
    if accept.is_some_and(header_value) {
        assert!(
            header_value(content_type),
            "invalid Content-Type {content_type:?}"
        );
    }

    let without = without_openmetrics(accept);
    assert_eq!(choose_encoder(without.as_deref()).format, Format::Text);

    let _ = gzip_accepted(accept_encoding);
    if let Some(names) = name_params(query) {
        assert!(names.iter().all(|n| !n.is_empty()), "blank name[] kept");
    }
}

// ---------------------------------------------------------------------------
// exposition_parser
// ---------------------------------------------------------------------------

/// Target `exposition_parser`: the first byte picks the format (even: the
/// Prometheus text format, odd: OpenMetrics), the rest is the body an
/// upstream answered.
///
/// Properties: nothing panics; a body that parses encodes (in the same
/// format, UTF-8 names allowed, since the parser only accepts legacy names)
/// to a body that parses again into families that encode to the same bytes
/// (the parser reads back exactly what the encoders write); every family
/// name is unique and every name is a legacy name.
pub fn exposition_parser(data: &[u8]) {
    use multiproc_exporter::expose::parse::{parse, ExpositionFormat};
    let Some((&first, body)) = data.split_first() else {
        return;
    };
    let (format, encoding) = if first % 2 == 0 {
        (ExpositionFormat::Text, Format::Text)
    } else {
        (ExpositionFormat::OpenMetrics, Format::OpenMetrics)
    };
    let Ok(families) = parse(body, format) else {
        return;
    };
    let mut names = std::collections::HashSet::new();
    for family in &families {
        assert!(names.insert(family.name.clone()), "{} twice", family.name);
        assert!(is_legacy_metric_name(&family.name), "{}", family.name);
        for sample in &family.samples {
            assert!(is_legacy_metric_name(&sample.name), "{}", sample.name);
            for (name, _) in sample.labels.iter() {
                assert!(
                    is_legacy_label_name(name) || name.starts_with("__"),
                    "{name}"
                );
            }
        }
    }
    let encoded = encode(&families, encoding, Escaping::AllowUtf8);
    let again = parse(&encoded, format).unwrap_or_else(|e| {
        panic!(
            "the encoding does not parse ({e}):\n{}",
            String::from_utf8_lossy(&encoded)
        )
    });
    let twice = encode(&again, encoding, Escaping::AllowUtf8);
    assert_eq!(
        String::from_utf8_lossy(&encoded),
        String::from_utf8_lossy(&twice)
    );
}

/// `push_answer`: what push parses from a receiver. The first line is a
/// `Retry-After` value, the rest an OTLP answer body. Properties: neither
/// parser panics; a `Retry-After` of delay-seconds is that many seconds
/// (saturating), an HTTP date in the past waits nothing; a partial success
/// is only reported with rejected points or a message.
pub fn push_answer(data: &[u8]) {
    let (header, body) = match data.iter().position(|&b| b == b'\n') {
        Some(at) => (&data[..at], &data[at + 1..]),
        None => (data, &[][..]),
    };
    let now = std::time::SystemTime::UNIX_EPOCH + std::time::Duration::from_secs(1_700_000_000);
    if let Some(wait) = multiproc_exporter::sink::parse_retry_after(header, now) {
        let text = String::from_utf8_lossy(header);
        let text = text.trim();
        if !text.is_empty() && text.bytes().all(|b| b.is_ascii_digit()) {
            let seconds = text.parse::<u64>().unwrap_or(u64::MAX);
            assert_eq!(wait, std::time::Duration::from_secs(seconds), "{text}");
        }
    }
    if let Some((rejected, message)) = multiproc_exporter::expose::otlp::partial_success(body) {
        assert!(rejected != 0 || !message.is_empty());
    }
}
