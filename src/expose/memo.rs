//! Encoding that reuses the previous body's work: a family whose content did
//! not change since the last encoding is copied, not encoded again, and the
//! gzip of an unchanged leading part of the body is reused.
//!
//! A scrape of a quiet directory, or of a large one where only some families
//! moved, then costs a comparison per family and a copy, instead of
//! formatting every float again. The bytes are exactly those of
//! [`super::encode::encode`]: each family's text depends only on the family (and the format
//! and escaping, fixed per memo), and the memo keeps the family it encoded
//! and compares everything the encoder reads: name, help, type, and every
//! sample's name, labels and value bits (so `-0.0` is not `0.0`). Names and
//! label sets are shared between collections, so most comparisons are of
//! pointers.
//!
//! The gzip side ([`EncodeMemo::gzip`]) compresses a body in two deflate
//! runs: the leading part named by [`Encoded::prefix_len`] (the merged
//! families, whose bytes rarely change between two scrapes) ends with a sync
//! flush, so its compressed bytes stand alone and are kept; the rest (the
//! exporter's own metrics, which change every scrape) is compressed anew and
//! appended. One gzip member, its CRC-32 combined from both parts: any gzip
//! reader reads it.
//!
//! Memory: the memo keeps one encoded copy of the body (and one compressed
//! copy of its prefix). Past `max_bytes` of text it keeps nothing and every
//! body is encoded in full, as without a memo.

use std::io;
use std::sync::Arc;

use flate2::{Compress, Compression, FlushCompress, Status};
use rustc_hash::FxHashMap;

use super::encode::{encode_end, encode_family, Escaping, Format};
use crate::model::MetricFamily;

/// The memo of one format and escaping.
#[derive(Debug)]
pub struct EncodeMemo {
    format: Format,
    escaping: Escaping,
    max_bytes: usize,
    families: FxHashMap<Arc<str>, Entry>,
    /// Counts encodings; entries not used by the last one are dropped.
    round: u64,
    /// Bytes of text held.
    held: usize,
    prefix: Option<DeflatedPrefix>,
    /// The last body was larger than `max_bytes`: nothing is kept.
    bypass: bool,
    /// The last body's length.
    last_len: usize,
    /// Reused between bodies: a fresh one allocates (and zeroes) its
    /// tables, which costs more than compressing a small body.
    compressor: Option<Compress>,
    /// The prefix's families, in order, at the last encoding.
    prefix_names: Vec<Arc<str>>,
    /// Changes whenever the prefix's bytes may have.
    prefix_version: u64,
    /// The families of the last [`EncodeMemo::encode_shared`] prefix, their
    /// text and its version.
    prefix_text: Option<SharedPrefix>,
}

#[derive(Debug)]
struct Entry {
    family: MetricFamily,
    text: Box<str>,
    round: u64,
}

/// The families of a shared prefix ([`EncodeMemo::encode_shared`]), their
/// text and its version.
type SharedPrefix = (Arc<Vec<MetricFamily>>, Box<[u8]>, u64);

/// The compressed prefix of the last gzipped body.
#[derive(Debug)]
struct DeflatedPrefix {
    version: u64,
    len: usize,
    /// Raw deflate blocks ending with a sync flush (not final).
    deflated: Vec<u8>,
    crc: crc32fast::Hasher,
}

/// A body from [`EncodeMemo::encode`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Encoded {
    /// The bytes, equal to [`super::encode::encode`]'s.
    pub body: Vec<u8>,
    /// Length of the leading part holding the first `prefix_families`
    /// families.
    pub prefix_len: usize,
    /// Changes whenever that part's bytes may have (equal versions: equal
    /// bytes).
    pub prefix_version: u64,
    /// Families encoded anew (the rest were copied).
    pub encoded_families: usize,
}

/// The gzip member header: no name, no mtime (equal bodies give equal bytes,
/// as Python's `gzip.compress(data, mtime=0)`), OS unknown.
const GZIP_HEADER: [u8; 10] = [0x1f, 0x8b, 8, 0, 0, 0, 0, 0, 0, 0xff];

/// Fewer bytes than an encoded sample with labels takes (50 or more): more
/// samples than `max_bytes` over this make a body too large to keep.
const MIN_SAMPLE_BYTES: usize = 48;

/// Tails up to this long are stored, not compressed.
const STORED_TAIL_MAX: usize = 256;

/// A final deflate block with nothing in it (fixed Huffman codes, only the
/// end-of-block code): what ends a body whose tail is empty.
const EMPTY_FINAL_BLOCK: [u8; 2] = [0x03, 0x00];

impl EncodeMemo {
    /// An empty memo for `format` and `escaping` that holds at most
    /// `max_bytes` of encoded text.
    pub fn new(format: Format, escaping: Escaping, max_bytes: usize) -> Self {
        Self {
            format,
            escaping,
            max_bytes,
            families: FxHashMap::default(),
            round: 0,
            held: 0,
            prefix: None,
            bypass: false,
            last_len: 0,
            compressor: None,
            prefix_names: Vec::new(),
            prefix_version: 0,
            prefix_text: None,
        }
    }

    /// The format and escaping this memo encodes.
    pub fn encodes(&self) -> (Format, Escaping) {
        (self.format, self.escaping)
    }

    /// Bytes of text and compressed prefix held.
    pub fn held_bytes(&self) -> usize {
        self.held
            + self.prefix.as_ref().map_or(0, |p| p.deflated.capacity())
            + self
                .prefix_text
                .as_ref()
                .map_or(0, |(_, text, _)| text.len())
    }

    /// Encodes `families`, copying the text of every family unchanged since
    /// the last call. The first `prefix_families` families form
    /// [`Encoded::prefix_len`].
    pub fn encode(&mut self, families: &[MetricFamily], prefix_families: usize) -> Encoded {
        let split = prefix_families.min(families.len());
        self.prefix_text = None;
        self.encode_parts(&families[..split], &families[split..])
    }

    /// [`Self::encode`] of `prefix` followed by `rest` when `prefix` is the
    /// very list encoded as the last call's prefix (the same `Arc`, which
    /// the caller does not change while it shares it): its text is copied
    /// whole, without comparing a family, and keeps its version, so that
    /// [`Self::gzip`] reuses its compressed bytes too. The merged families of
    /// an unchanged directory are served this way while the exporter's own
    /// metrics, appended, change at every scrape.
    pub fn encode_shared(
        &mut self,
        prefix: &Arc<Vec<MetricFamily>>,
        rest: &[MetricFamily],
    ) -> Encoded {
        let same_prefix = !self.bypass
            && self
                .prefix_text
                .as_ref()
                .is_some_and(|(kept, _, _)| Arc::ptr_eq(kept, prefix));
        if !same_prefix {
            let encoded = self.encode_parts(prefix, rest);
            // Kept only while the memo keeps anything (the same bound).
            let text = &encoded.body[..encoded.prefix_len];
            self.prefix_text =
                (!self.bypass && self.held + text.len() <= self.max_bytes).then(|| {
                    (
                        prefix.clone(),
                        text.to_vec().into_boxed_slice(),
                        encoded.prefix_version,
                    )
                });
            return encoded;
        }
        let Some((_, text, prefix_version)) = &self.prefix_text else {
            return self.encode_parts(prefix, rest);
        };
        let prefix_version = *prefix_version;
        let mut out = String::with_capacity(self.last_len.max(text.len() + 4096));
        // The kept text was encoded from these very families.
        out.push_str(std::str::from_utf8(text).unwrap_or_default());
        let prefix_len = out.len();
        let mut encoded_families = 0;
        for family in rest {
            encoded_families += 1;
            encode_family(&mut out, family, self.format, self.escaping);
        }
        encode_end(&mut out, self.format);
        self.last_len = out.len();
        Encoded {
            body: out.into_bytes(),
            prefix_len,
            prefix_version,
            encoded_families,
        }
    }

    /// Encodes `prefix` then `rest`, copying the text of every family
    /// unchanged since the last call; `prefix` forms
    /// [`Encoded::prefix_len`].
    fn encode_parts(&mut self, prefix: &[MetricFamily], rest: &[MetricFamily]) -> Encoded {
        self.round += 1;
        let round = self.round;
        let prefix_families = prefix.len();
        let families = || prefix.iter().chain(rest);
        let samples: usize = families().map(|f| f.samples.len()).sum();
        if samples > self.max_bytes / MIN_SAMPLE_BYTES && !self.bypass {
            // Certainly too large to keep: do not even start.
            self.forget();
            self.bypass = true;
        }
        if self.bypass {
            // Exactly what encoding without a memo does.
            let mut out =
                String::with_capacity(families().map(|f| 64 + f.samples.len() * 64).sum());
            for family in families() {
                encode_family(&mut out, family, self.format, self.escaping);
            }
            encode_end(&mut out, self.format);
            let body = out.into_bytes();
            self.last_len = body.len();
            self.bypass =
                body.len() > self.max_bytes || samples > self.max_bytes / MIN_SAMPLE_BYTES;
            return Encoded {
                body,
                prefix_len: 0,
                prefix_version: self.next_prefix_version(),
                encoded_families: prefix.len() + rest.len(),
            };
        }
        let mut out = String::with_capacity(self.last_len.max(4096));
        let mut prefix_len = 0;
        let mut prefix_changed = false;
        let mut encoded_families = 0;
        for (i, family) in families().enumerate() {
            if i == prefix_families {
                prefix_len = out.len();
            }
            if self.bypass {
                // Found too large to keep half-way.
                encoded_families += 1;
                encode_family(&mut out, family, self.format, self.escaping);
                continue;
            }
            match self.families.get_mut(&family.name) {
                Some(entry) if same(&entry.family, family) => {
                    entry.round = round;
                    out.push_str(&entry.text);
                }
                _ => {
                    encoded_families += 1;
                    prefix_changed |= i < prefix_families;
                    let start = out.len();
                    encode_family(&mut out, family, self.format, self.escaping);
                    let text = &out[start..];
                    if self.held + text.len() > self.max_bytes {
                        // Too large to keep: this body and the next ones are
                        // encoded in full, until one fits again.
                        self.forget();
                        self.bypass = true;
                        continue;
                    }
                    self.held += text.len();
                    let entry = Entry {
                        family: family.clone(),
                        text: text.into(),
                        round,
                    };
                    if let Some(old) = self.families.insert(family.name.clone(), entry) {
                        self.held -= old.text.len();
                    }
                }
            }
        }
        if rest.is_empty() {
            prefix_len = out.len();
        }
        encode_end(&mut out, self.format);
        let held = &mut self.held;
        self.families.retain(|_, entry| {
            let keep = entry.round == round;
            if !keep {
                *held -= entry.text.len();
            }
            keep
        });
        prefix_changed |= self.bypass
            || prefix.len() != self.prefix_names.len()
            || prefix
                .iter()
                .zip(&self.prefix_names)
                .any(|(f, n)| f.name != *n);
        let prefix_version = if prefix_changed {
            self.prefix_names = prefix.iter().map(|f| f.name.clone()).collect();
            self.next_prefix_version()
        } else {
            self.prefix_version
        };
        self.last_len = out.len();
        self.bypass = out.len() > self.max_bytes || samples > self.max_bytes / MIN_SAMPLE_BYTES;
        Encoded {
            body: out.into_bytes(),
            prefix_len,
            prefix_version,
            encoded_families,
        }
    }

    /// A new prefix version.
    fn next_prefix_version(&mut self) -> u64 {
        self.prefix_version += 1;
        self.prefix_version
    }

    /// Drops what the memo keeps.
    fn forget(&mut self) {
        self.families = FxHashMap::default();
        self.held = 0;
        self.prefix = None;
        self.prefix_text = None;
    }

    /// Gzips `encoded` (level "fast"), reusing the compressed prefix of the
    /// last call when the prefix's families are unchanged.
    pub fn gzip(&mut self, encoded: &Encoded) -> io::Result<Vec<u8>> {
        let (head, tail) = encoded.body.split_at(encoded.prefix_len);
        let compressor = self
            .compressor
            .get_or_insert_with(|| Compress::new(Compression::fast(), false));
        if self.bypass {
            // Too large to keep: one pass, nothing kept.
            let mut out = Vec::with_capacity(encoded.body.len() / 4 + 64);
            out.extend_from_slice(&GZIP_HEADER);
            compressor.reset();
            deflate(compressor, &encoded.body, &mut out, FlushCompress::Finish)?;
            out.extend_from_slice(&crc32fast::hash(&encoded.body).to_le_bytes());
            out.extend_from_slice(&(encoded.body.len() as u32).to_le_bytes());
            return Ok(out);
        }
        if let Some(prefix) = &self.prefix {
            if prefix.version == encoded.prefix_version && prefix.len == head.len() {
                return assemble(compressor, prefix, tail);
            }
        }
        let prefix = deflate_prefix(compressor, head, encoded.prefix_version)?;
        let out = assemble(compressor, &prefix, tail);
        self.prefix = (self.held + prefix.deflated.capacity() <= self.max_bytes).then_some(prefix);
        out
    }
}

/// Compresses a body's prefix into raw deflate blocks that end with a sync
/// flush: on a byte boundary, no final block, so other blocks can follow.
fn deflate_prefix(
    compressor: &mut Compress,
    head: &[u8],
    version: u64,
) -> io::Result<DeflatedPrefix> {
    let mut deflated = Vec::with_capacity(head.len() / 4 + 64);
    compressor.reset();
    deflate(compressor, head, &mut deflated, FlushCompress::Sync)?;
    let mut crc = crc32fast::Hasher::new();
    crc.update(head);
    Ok(DeflatedPrefix {
        version,
        len: head.len(),
        deflated,
        crc,
    })
}

/// The gzip member of a compressed prefix followed by `tail`.
fn assemble(
    compressor: &mut Compress,
    prefix: &DeflatedPrefix,
    tail: &[u8],
) -> io::Result<Vec<u8>> {
    let mut out =
        Vec::with_capacity(GZIP_HEADER.len() + prefix.deflated.len() + tail.len() / 4 + 32);
    out.extend_from_slice(&GZIP_HEADER);
    out.extend_from_slice(&prefix.deflated);
    if tail.is_empty() {
        out.extend_from_slice(&EMPTY_FINAL_BLOCK);
    } else if tail.len() <= STORED_TAIL_MAX {
        // A final stored block (the prefix ended on a byte boundary): no
        // compressor to reset for OpenMetrics' `# EOF` alone.
        let len = tail.len() as u16;
        out.push(0x01);
        out.extend_from_slice(&len.to_le_bytes());
        out.extend_from_slice(&(!len).to_le_bytes());
        out.extend_from_slice(tail);
    } else {
        compressor.reset();
        deflate(compressor, tail, &mut out, FlushCompress::Finish)?;
    }
    let mut crc = prefix.crc.clone();
    let mut tail_crc = crc32fast::Hasher::new();
    tail_crc.update(tail);
    crc.combine(&tail_crc);
    out.extend_from_slice(&crc.finalize().to_le_bytes());
    // ISIZE: the length modulo 2^32.
    out.extend_from_slice(&((prefix.len + tail.len()) as u32).to_le_bytes());
    Ok(out)
}

/// Compresses all of `input` onto `out`, then flushes as `flush` says
/// (`Sync`: to a byte boundary; `Finish`: with the final block).
fn deflate(
    compressor: &mut Compress,
    mut input: &[u8],
    out: &mut Vec<u8>,
    flush: FlushCompress,
) -> io::Result<()> {
    loop {
        if out.capacity() - out.len() < 64 {
            out.reserve(out.capacity().max(256));
        }
        let before = compressor.total_in();
        let status = compressor
            .compress_vec(input, out, flush)
            .map_err(io::Error::other)?;
        let consumed = usize::try_from(compressor.total_in() - before).unwrap_or(input.len());
        input = &input[consumed.min(input.len())..];
        let done = match flush {
            FlushCompress::Finish => status == Status::StreamEnd,
            // Flushed once the compressor left room in the output.
            _ => input.is_empty() && out.len() < out.capacity(),
        };
        if done {
            return Ok(());
        }
    }
}

/// Whether `a` encodes to the same bytes as `b`: everything the encoder
/// reads is equal, values by their bits.
fn same(a: &MetricFamily, b: &MetricFamily) -> bool {
    a.name == b.name
        && a.help == b.help
        && a.metric_type == b.metric_type
        && a.samples.len() == b.samples.len()
        && a.samples.iter().zip(&b.samples).all(|(x, y)| {
            x.value.to_bits() == y.value.to_bits() && x.name == y.name && x.labels == y.labels
        })
}

#[cfg(test)]
mod tests {
    use std::io::Read as _;

    use super::*;
    use crate::expose::encode::encode;
    use crate::model::{Labels, MetricType, Sample};

    #[test]
    fn a_shared_prefix_is_copied_whole_and_its_gzip_reused_while_the_rest_changes() {
        let merged = Arc::new(vec![family("a", &[1.0, 2.0]), family("b", &[3.0])]);
        let mut memo = EncodeMemo::new(Format::Text, Escaping::Underscores, 1 << 20);
        let mut versions = Vec::new();
        for (round, own) in [[4.0], [5.0], [6.0]].iter().enumerate() {
            let rest = vec![family("own", own)];
            let encoded = memo.encode_shared(&merged, &rest);
            let mut all = merged.to_vec();
            all.extend(rest.iter().cloned());
            let plain = encode(&all, Format::Text, Escaping::Underscores);
            assert_eq!(encoded.body, plain, "round {round}");
            assert_eq!(
                gunzip(&memo.gzip(&encoded).unwrap()),
                plain,
                "round {round}"
            );
            // Only the first round encodes the shared families.
            assert_eq!(encoded.encoded_families, if round == 0 { 3 } else { 1 });
            versions.push(encoded.prefix_version);
        }
        assert!(versions.windows(2).all(|w| w[0] == w[1]), "{versions:?}");
        // Another list (a new merge), even with equal families: compared,
        // not taken by identity.
        let renewed = Arc::new(vec![family("a", &[1.0, 2.5]), family("b", &[3.0])]);
        let rest = vec![family("own", &[7.0])];
        let encoded = memo.encode_shared(&renewed, &rest);
        let mut all = renewed.to_vec();
        all.extend(rest.iter().cloned());
        let plain = encode(&all, Format::Text, Escaping::Underscores);
        assert_eq!(encoded.body, plain);
        assert_eq!(gunzip(&memo.gzip(&encoded).unwrap()), plain);
        assert_ne!(encoded.prefix_version, versions[0]);
        // A plain encoding in between forgets the shared prefix.
        let _ = memo.encode(&all, 1);
        let encoded = memo.encode_shared(&renewed, &rest);
        assert_eq!(encoded.body, plain);
        assert_eq!(gunzip(&memo.gzip(&encoded).unwrap()), plain);
    }

    fn family(name: &str, values: &[f64]) -> MetricFamily {
        MetricFamily {
            name: name.into(),
            help: format!("Help of {name}.").into(),
            metric_type: MetricType::Gauge,
            samples: values
                .iter()
                .enumerate()
                .map(|(i, v)| Sample {
                    name: name.into(),
                    labels: Labels::new([("i".into(), i.to_string().into())]),
                    value: *v,
                })
                .collect(),
        }
    }

    fn gunzip(bytes: &[u8]) -> Vec<u8> {
        let mut out = Vec::new();
        flate2::read::GzDecoder::new(bytes)
            .read_to_end(&mut out)
            .unwrap();
        out
    }

    #[test]
    fn bodies_equal_the_encoders_whatever_changed() {
        for format in [Format::Text, Format::OpenMetrics] {
            let mut memo = EncodeMemo::new(format, Escaping::Underscores, 1 << 20);
            let rounds: Vec<Vec<MetricFamily>> = vec![
                vec![family("a", &[1.0, 2.0]), family("b", &[3.0])],
                vec![family("a", &[1.0, 2.0]), family("b", &[3.0])],
                vec![family("a", &[1.0, 2.5]), family("b", &[3.0])],
                vec![family("b", &[3.0]), family("a", &[1.0, 2.5])],
                vec![family("b", &[3.0]), family("c", &[f64::NAN, -0.0])],
                vec![],
            ];
            let mut copied = 0;
            for families in &rounds {
                let encoded = memo.encode(families, families.len());
                assert_eq!(
                    encoded.body,
                    encode(families, format, Escaping::Underscores)
                );
                copied += families.len() - encoded.encoded_families;
                assert_eq!(gunzip(&memo.gzip(&encoded).unwrap()), encoded.body);
            }
            assert_eq!(copied, 6, "{format:?}: families copied, not encoded");
        }
    }

    #[test]
    fn a_changed_value_or_label_is_encoded_again() {
        let mut memo = EncodeMemo::new(Format::Text, Escaping::Underscores, 1 << 20);
        let mut families = vec![family("a", &[1.0])];
        memo.encode(&families, 1);
        families[0].samples[0].labels = Labels::new([("i".into(), "other".into())]);
        let encoded = memo.encode(&families, 1);
        assert_eq!(encoded.encoded_families, 1);
        assert!(String::from_utf8(encoded.body)
            .unwrap()
            .contains("i=\"other\""));
        // -0.0 and 0.0 print differently: values are compared by their bits.
        families[0].samples[0].value = 0.0;
        memo.encode(&families, 1);
        families[0].samples[0].value = -0.0;
        let encoded = memo.encode(&families, 1);
        assert_eq!(
            encoded.body,
            encode(&families, Format::Text, Escaping::Underscores)
        );
    }

    #[test]
    fn gzip_reuses_the_prefix_and_stays_one_valid_member() {
        let mut memo = EncodeMemo::new(Format::OpenMetrics, Escaping::Underscores, 1 << 20);
        let merged: Vec<f64> = (0..500).map(f64::from).collect();
        for own in [1.0, 2.0, 3.0] {
            // A short tail is stored, a long one compressed.
            let own: Vec<f64> = vec![own; if own == 2.0 { 50 } else { 1 }];
            let families = vec![family("merged", &merged), family("own", &own)];
            let encoded = memo.encode(&families, 1);
            assert!(encoded.prefix_len > 0 && encoded.prefix_len < encoded.body.len());
            let gzipped = memo.gzip(&encoded).unwrap();
            assert_eq!(gunzip(&gzipped), encoded.body);
            // Python's and Go's readers agree on one member: check the trailer.
            let n = gzipped.len();
            let isize = u32::from_le_bytes(gzipped[n - 4..].try_into().unwrap());
            assert_eq!(isize as usize, encoded.body.len());
            let crc = u32::from_le_bytes(gzipped[n - 8..n - 4].try_into().unwrap());
            assert_eq!(crc, crc32fast::hash(&encoded.body));
        }
    }

    #[test]
    fn past_its_bound_the_memo_keeps_nothing() {
        let mut memo = EncodeMemo::new(Format::Text, Escaping::Underscores, 256);
        let big = vec![family("big", &[1.0; 20])];
        for _ in 0..2 {
            let encoded = memo.encode(&big, 1);
            assert_eq!(encoded.encoded_families, 1);
            assert_eq!(memo.held_bytes(), 0);
            assert_eq!(gunzip(&memo.gzip(&encoded).unwrap()), encoded.body);
            assert_eq!(memo.held_bytes(), 0);
        }
        // Small again: kept again from the body after.
        let small = vec![family("small", &[1.0])];
        for encoded_families in [1, 1, 0] {
            let encoded = memo.encode(&small, 1);
            assert_eq!(encoded.encoded_families, encoded_families);
            assert_eq!(
                encoded.body,
                encode(&small, Format::Text, Escaping::Underscores)
            );
            assert_eq!(gunzip(&memo.gzip(&encoded).unwrap()), encoded.body);
        }
    }
}
