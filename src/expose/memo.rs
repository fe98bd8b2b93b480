//! Encoding that reuses the previous body's work: a family whose content did
//! not change since the last encoding is copied, not encoded again; one whose
//! values alone changed keeps its lines' names and labels; and the gzip of an
//! unchanged leading part of the body is reused.
//!
//! A scrape of a quiet directory, or of a large one where only some families
//! moved, then costs a comparison per family and a copy, instead of
//! formatting every float again; a scrape of live writers, whose values move
//! in every family, formats only the values that moved. The bytes are
//! exactly those of [`super::encode::encode`]: each family's text depends
//! only on the family (and the format and escaping, fixed per memo), and the
//! memo compares everything the encoder reads: name, help, type, and every
//! sample's name, labels and value bits (so `-0.0` is not `0.0`). Names and
//! label sets are shared between collections, so most comparisons are of
//! pointers.
//!
//! What is kept touches little memory, because a polled pod's scrape costs
//! mostly the caches it misses: the last body's text in one buffer (each
//! family's entry is a range of it, and the next body is built in a second
//! buffer kept for that), and the families of the last shared prefix by the
//! list itself (an `Arc`), not a copy of every family.
//!
//! The gzip side ([`EncodeMemo::gzip`]) compresses a body in two deflate
//! runs: the leading part (the merged families, whose bytes rarely change
//! between two scrapes) ends with a sync flush, so its compressed bytes stand
//! alone and are kept; the rest (the exporter's own metrics, which change
//! every scrape) is compressed anew and appended. One gzip member, its CRC-32
//! combined from both parts: any gzip reader reads it.
//!
//! Memory: the memo keeps the last body's text, a buffer as large for the
//! next one, and the compressed prefix. Past `max_bytes` of text it keeps
//! nothing and every body is encoded in full, as without a memo.

use std::io;
use std::sync::Arc;

use flate2::{Compress, Compression, FlushCompress, Status};
use rustc_hash::FxHashMap;

use super::encode::{encode_end, encode_family, Escaping, Format};
use crate::model::float::write_go_float;
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
    /// The last body's text (the entries' ranges point into it).
    text: String,
    /// Where the next body is built (its capacity kept between bodies).
    spare: String,
    /// The shared prefix of the last body: entries of its families name
    /// their place in it.
    prefix_list: Option<Arc<Vec<MetricFamily>>>,
    /// Bytes of `text` that the prefix takes.
    prefix_len: usize,
    /// Changes whenever the prefix's bytes may have.
    prefix_version: u64,
    /// The prefix's family names at the last full encoding, in order.
    prefix_names: Vec<Arc<str>>,
    prefix: Option<DeflatedPrefix>,
    /// The last body was larger than `max_bytes`: nothing is kept.
    bypass: bool,
    /// Reused between bodies: a fresh one allocates (and zeroes) its
    /// tables, which costs more than compressing a small body.
    compressor: Option<Compress>,
}

/// A family of the last body: what it was encoded from and where its text
/// lies in [`EncodeMemo::text`].
#[derive(Debug)]
struct Entry {
    source: Source,
    start: usize,
    end: usize,
    round: u64,
}

/// What an [`Entry`]'s text was encoded from.
#[derive(Debug)]
enum Source {
    /// The family at this place of [`EncodeMemo::prefix_list`].
    Prefix(usize),
    /// A copy (the exporter's own families: few and small).
    Own(MetricFamily),
}

/// The compressed prefix of the last gzipped body.
#[derive(Debug)]
struct DeflatedPrefix {
    version: u64,
    len: usize,
    /// Raw deflate blocks ending with a sync flush (not final).
    deflated: Vec<u8>,
    crc: crc32fast::Hasher,
}

/// What [`EncodeMemo::encode_shared`] made; the body itself, the bytes of
/// [`super::encode::encode`], is [`EncodeMemo::body`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Encoded {
    /// Length of the leading part: the shared prefix's families.
    pub prefix_len: usize,
    /// Changes whenever that part's bytes may have (equal versions: equal
    /// bytes).
    pub prefix_version: u64,
    /// Families encoded anew (the rest were copied, values rewritten
    /// included).
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
            text: String::new(),
            spare: String::new(),
            prefix_list: None,
            prefix_len: 0,
            prefix_version: 0,
            prefix_names: Vec::new(),
            prefix: None,
            bypass: false,
            compressor: None,
        }
    }

    /// The format and escaping this memo encodes.
    pub fn encodes(&self) -> (Format, Escaping) {
        (self.format, self.escaping)
    }

    /// The last body encoded (until [`Self::release_unkept`] lets go of one
    /// too large to keep).
    pub fn body(&self) -> &[u8] {
        self.text.as_bytes()
    }

    /// Bytes of text and compressed prefix held.
    pub fn held_bytes(&self) -> usize {
        self.text.capacity()
            + self.spare.capacity()
            + self.prefix.as_ref().map_or(0, |p| p.deflated.capacity())
    }

    /// Encodes `families`, copying the text of every family unchanged since
    /// the last call; the first `prefix_families` families form
    /// [`Encoded::prefix_len`].
    pub fn encode(&mut self, families: &[MetricFamily], prefix_families: usize) -> Encoded {
        let split = prefix_families.min(families.len());
        let prefix = Arc::new(families[..split].to_vec());
        self.encode_shared(&prefix, &families[split..])
    }

    /// Encodes `prefix` followed by `rest`, copying the text of every family
    /// unchanged since the last call. When `prefix` is the very list encoded
    /// as the last call's prefix (the same `Arc`, which the caller does not
    /// change while it shares it), its text stands whole, without comparing
    /// a family, and keeps its version, so that [`Self::gzip`] reuses its
    /// compressed bytes too. The merged families of an unchanged directory
    /// are served this way while the exporter's own metrics, appended,
    /// change at every scrape.
    pub fn encode_shared(
        &mut self,
        prefix: &Arc<Vec<MetricFamily>>,
        rest: &[MetricFamily],
    ) -> Encoded {
        let same_prefix = !self.bypass
            && self
                .prefix_list
                .as_ref()
                .is_some_and(|kept| Arc::ptr_eq(kept, prefix));
        if same_prefix {
            self.encode_rest(rest)
        } else {
            self.encode_all(prefix, rest)
        }
    }

    /// The body of the last prefix followed by `rest` encoded anew (its
    /// families compared with the last body's).
    fn encode_rest(&mut self, rest: &[MetricFamily]) -> Encoded {
        self.round += 1;
        let round = self.round;
        let mut out = std::mem::take(&mut self.spare);
        out.clear();
        let mut encoded_families = 0;
        // The exporter's own families: most of them (the writers' census,
        // the skipped files by reason) stand still between two scrapes.
        for family in rest {
            encoded_families += usize::from(self.encode_family(&mut out, family, round, None));
        }
        encode_end(&mut out, self.format);
        // Only the tail's ranges move: from the spare buffer to after the
        // prefix.
        let shift = self.prefix_len;
        for entry in self.families.values_mut() {
            if entry.round == round && matches!(entry.source, Source::Own(_)) {
                entry.start += shift;
                entry.end += shift;
            }
        }
        self.text.truncate(self.prefix_len);
        self.text.push_str(&out);
        self.spare = out;
        self.finish(round, encoded_families)
    }

    /// The whole body encoded anew (each family compared with the last
    /// body's).
    fn encode_all(&mut self, prefix: &Arc<Vec<MetricFamily>>, rest: &[MetricFamily]) -> Encoded {
        self.round += 1;
        let round = self.round;
        let families = || prefix.iter().chain(rest);
        let samples: usize = families().map(|f| f.samples.len()).sum();
        if samples > self.max_bytes / MIN_SAMPLE_BYTES {
            // Certainly too large to keep: do not even start.
            self.forget();
            self.bypass = true;
        }
        let mut out = std::mem::take(&mut self.spare);
        out.clear();
        if self.bypass {
            // Exactly what encoding without a memo does.
            out.reserve(families().map(|f| 64 + f.samples.len() * 64).sum());
            for family in families() {
                encode_family(&mut out, family, self.format, self.escaping);
            }
            let prefix_len = if rest.is_empty() { out.len() } else { 0 };
            encode_end(&mut out, self.format);
            self.bypass = out.len() > self.max_bytes || samples > self.max_bytes / MIN_SAMPLE_BYTES;
            self.text = out;
            self.prefix_len = prefix_len.min(self.text.len());
            self.prefix_list = None;
            self.prefix_version += 1;
            return Encoded {
                prefix_len: self.prefix_len,
                prefix_version: self.prefix_version,
                encoded_families: prefix.len() + rest.len(),
            };
        }
        out.reserve(self.text.len().max(4096));
        let mut prefix_changed = false;
        let mut encoded_families = 0;
        for (i, family) in prefix.iter().enumerate() {
            let encoded = self.encode_family(&mut out, family, round, Some(i));
            prefix_changed |= encoded;
            encoded_families += usize::from(encoded);
        }
        let prefix_len = out.len();
        for family in rest {
            encoded_families += usize::from(self.encode_family(&mut out, family, round, None));
        }
        encode_end(&mut out, self.format);
        prefix_changed |= prefix.len() != self.prefix_names.len()
            || prefix
                .iter()
                .zip(&self.prefix_names)
                .any(|(f, n)| f.name != *n);
        if prefix_changed {
            self.prefix_names = prefix.iter().map(|f| f.name.clone()).collect();
            self.prefix_version += 1;
        }
        self.spare = std::mem::replace(&mut self.text, out);
        self.prefix_len = prefix_len;
        self.prefix_list = Some(prefix.clone());
        self.finish(round, encoded_families)
    }

    /// Drops the entries the body of `round` did not use (the shared
    /// prefix's stand while the prefix does), checks the bound and hands out
    /// the body.
    fn finish(&mut self, round: u64, encoded_families: usize) -> Encoded {
        self.families
            .retain(|_, entry| entry.round == round || matches!(entry.source, Source::Prefix(_)));
        if self.text.len() > self.max_bytes {
            // Too large to keep: the next bodies are encoded in full, until
            // one fits again.
            self.bypass = true;
            self.families = FxHashMap::default();
            self.prefix_list = None;
            self.prefix = None;
            self.prefix_version += 1;
        }
        if self.spare.capacity() > self.max_bytes.min(SPARE_MAX_BYTES) {
            self.spare = String::new();
        }
        Encoded {
            prefix_len: self.prefix_len,
            prefix_version: self.prefix_version,
            encoded_families,
        }
    }

    /// Appends `family`'s text to `out` (the body being built for `round`):
    /// copied from the last body if unchanged, values rewritten if only
    /// they changed, else encoded; `place` is its place in the shared
    /// prefix (else it is one of the rest, kept as a copy). Whether it was
    /// encoded anew.
    fn encode_family(
        &mut self,
        out: &mut String,
        family: &MetricFamily,
        round: u64,
        place: Option<usize>,
    ) -> bool {
        let start = out.len();
        let mut encoded = true;
        let last = self
            .families
            .get(&family.name)
            // Written by this body already (a repeated name): its range is
            // in `out`, not in the last body.
            .filter(|entry| entry.round != round);
        let old = last.and_then(|entry| {
            let old = match &entry.source {
                Source::Prefix(i) => self.prefix_list.as_ref()?.get(*i)?,
                Source::Own(family) => family,
            };
            Some((old, self.text.get(entry.start..entry.end)?))
        });
        match old {
            Some((old, text)) if same(old, family) => {
                out.push_str(text);
                encoded = false;
            }
            Some((old, text)) if rewrite_values(out, old, text, family) => {}
            _ => encode_family(out, family, self.format, self.escaping),
        }
        let source = match place {
            Some(i) => Source::Prefix(i),
            None => Source::Own(family.clone()),
        };
        self.families.insert(
            family.name.clone(),
            Entry {
                source,
                start,
                end: out.len(),
                round,
            },
        );
        encoded
    }

    /// Drops what the memo keeps.
    fn forget(&mut self) {
        self.families = FxHashMap::default();
        self.text = String::new();
        self.spare = String::new();
        self.prefix_list = None;
        self.prefix_len = 0;
        self.prefix = None;
        self.prefix_version += 1;
    }

    /// Gzips the last body (level "fast"), reusing the compressed prefix of
    /// the last call when the prefix's bytes are unchanged.
    pub fn gzip(&mut self) -> io::Result<Vec<u8>> {
        let (head, tail) = self.text.as_bytes().split_at(self.prefix_len);
        let version = self.prefix_version;
        let compressor = self
            .compressor
            .get_or_insert_with(|| Compress::new(Compression::fast(), false));
        if self.bypass {
            // Too large to keep: one pass, nothing kept.
            let mut out = Vec::with_capacity(self.text.len() / 4 + 64);
            out.extend_from_slice(&GZIP_HEADER);
            compressor.reset();
            let mut crc = crc32fast::Hasher::new();
            crc.update(head);
            crc.update(tail);
            deflate(compressor, head, &mut out, FlushCompress::None)?;
            deflate(compressor, tail, &mut out, FlushCompress::Finish)?;
            out.extend_from_slice(&crc.finalize().to_le_bytes());
            out.extend_from_slice(&(self.text.len() as u32).to_le_bytes());
            return Ok(out);
        }
        if let Some(prefix) = &self.prefix {
            if prefix.version == version && prefix.len == head.len() {
                return assemble(compressor, prefix, tail, false);
            }
        }
        let prefix = deflate_prefix(compressor, head, version)?;
        // The compressor stands right after the prefix: the tail goes on in
        // the same stream, with no second reset of its tables.
        let out = assemble(compressor, &prefix, tail, true);
        self.prefix =
            (self.text.len() + prefix.deflated.capacity() <= self.max_bytes).then_some(prefix);
        out
    }

    /// Lets go of the last body if it is not kept (it was larger than
    /// `max_bytes`): call once done with it.
    pub fn release_unkept(&mut self) {
        if self.bypass {
            self.text = String::new();
            self.prefix_len = 0;
        }
    }
}

/// Gzips whole bodies with one compressor kept between them: a fresh one
/// allocates and zeroes a few hundred kilobytes of tables, more than a
/// small body (a `?name[]=` answer) costs to compress.
#[derive(Default)]
pub struct Gzipper(Option<Compress>);

impl std::fmt::Debug for Gzipper {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Gzipper")
    }
}

impl Gzipper {
    /// One gzip member of `data` (level "fast"; no name, mtime 0).
    pub fn gzip(&mut self, data: &[u8]) -> io::Result<Vec<u8>> {
        let compressor = self
            .0
            .get_or_insert_with(|| Compress::new(Compression::fast(), false));
        compressor.reset();
        let mut out = Vec::with_capacity(GZIP_HEADER.len() + data.len() / 4 + 64);
        out.extend_from_slice(&GZIP_HEADER);
        deflate(compressor, data, &mut out, FlushCompress::Finish)?;
        out.extend_from_slice(&crc32fast::hash(data).to_le_bytes());
        // ISIZE: the length modulo 2^32.
        out.extend_from_slice(&(data.len() as u32).to_le_bytes());
        Ok(out)
    }
}

/// The spare buffer's capacity kept between bodies: larger bodies are built
/// in a new one each time, so that a huge directory's memo holds one body.
const SPARE_MAX_BYTES: usize = 4 << 20;

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

/// The gzip member of a compressed prefix followed by `tail`; `continues`:
/// the compressor has just compressed that prefix (its stream goes on),
/// else it is reset first.
fn assemble(
    compressor: &mut Compress,
    prefix: &DeflatedPrefix,
    tail: &[u8],
    continues: bool,
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
        if !continues {
            compressor.reset();
        }
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
/// (`None`: nothing more; `Sync`: to a byte boundary; `Finish`: with the
/// final block).
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
            FlushCompress::None => input.is_empty(),
            // Flushed once the compressor left room in the output.
            _ => input.is_empty() && out.len() < out.capacity(),
        };
        if done {
            return Ok(());
        }
    }
}

/// Appends `family`'s text made from `entry`'s when only values differ
/// (the same help, type and series in the same order, one line per sample
/// after the two header lines): lines whose value kept its bits are copied,
/// the others keep everything up to their last space (the series) and get
/// the new value. Both formats end a sample line with ` <value>\n`, the
/// value written by [`write_go_float`], and escape every newline inside a
/// line. `false` (nothing appended) when the shapes differ, such as a text
/// family whose `_created` samples move to a family of their own.
///
/// Live writers move a few values of every family between two scrapes:
/// this spares formatting the names and labels of every line again.
fn rewrite_values(out: &mut String, old: &MetricFamily, text: &str, family: &MetricFamily) -> bool {
    if old.help != family.help
        || old.metric_type != family.metric_type
        || old.samples.len() != family.samples.len()
        || !old
            .samples
            .iter()
            .zip(&family.samples)
            .all(|(a, b)| a.name == b.name && a.labels == b.labels)
    {
        return false;
    }
    let mut ends = memchr::memchr_iter(b'\n', text.as_bytes());
    let (Some(_), Some(header_end)) = (ends.next(), ends.next()) else {
        return false;
    };
    let start = out.len();
    let mut line_start = header_end + 1;
    out.push_str(&text[..line_start]);
    for (old_sample, sample) in old.samples.iter().zip(&family.samples) {
        let Some(end) = ends.next() else {
            out.truncate(start);
            return false;
        };
        let line = &text[line_start..=end];
        if old_sample.value.to_bits() == sample.value.to_bits() {
            out.push_str(line);
        } else {
            let Some(space) = line.rfind(' ') else {
                out.truncate(start);
                return false;
            };
            out.push_str(&line[..=space]);
            write_go_float(out, sample.value);
            out.push('\n');
        }
        line_start = end + 1;
    }
    if line_start != text.len() {
        out.truncate(start);
        return false;
    }
    true
}

/// Whether `a` encodes to the same bytes as `b`: everything the encoder
/// reads is equal, values by their bits (`-0.0` is not `0.0`). The Python
/// package tells by it which families' Python objects it may reuse.
pub fn same(a: &MetricFamily, b: &MetricFamily) -> bool {
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
        for (round, own) in [[4.0], [5.0], [6.0], [6.0]].iter().enumerate() {
            // One own family changes, one stands still (copied from its
            // place in the last body, which moved).
            let rest = vec![family("own", own), family("still", &[8.0, 9.0])];
            let encoded = memo.encode_shared(&merged, &rest);
            let mut all = merged.to_vec();
            all.extend(rest.iter().cloned());
            let plain = encode(&all, Format::Text, Escaping::Underscores);
            assert_eq!(memo.body().to_vec(), plain, "round {round}");
            assert_eq!(gunzip(&memo.gzip().unwrap()), plain, "round {round}");
            // Only the first round encodes the shared families.
            let expected = match round {
                0 => 4,
                3 => 0,
                _ => 1,
            };
            assert_eq!(encoded.encoded_families, expected, "round {round}");
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
        assert_eq!(memo.body().to_vec(), plain);
        assert_eq!(gunzip(&memo.gzip().unwrap()), plain);
        assert_ne!(encoded.prefix_version, versions[0]);
        // A plain encoding in between forgets the shared prefix.
        let _ = memo.encode(&all, 1);
        memo.encode_shared(&renewed, &rest);
        assert_eq!(memo.body().to_vec(), plain);
        assert_eq!(gunzip(&memo.gzip().unwrap()), plain);
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
                    memo.body().to_vec(),
                    encode(families, format, Escaping::Underscores)
                );
                copied += families.len() - encoded.encoded_families;
                assert_eq!(gunzip(&memo.gzip().unwrap()), memo.body().to_vec());
            }
            assert_eq!(copied, 6, "{format:?}: families copied, not encoded");
        }
    }

    /// Families whose lines carry spaces, quotes, newlines and UTF-8 in
    /// names and label values, and a counter whose `_created` sample moves
    /// to a family of its own in the text format.
    fn awkward_families(values: &[f64]) -> Vec<MetricFamily> {
        let sample = |name: &str, labels: &[(&str, &str)], value: f64| Sample {
            name: name.into(),
            labels: Labels::new(labels.iter().map(|(k, v)| ((*k).into(), (*v).into()))),
            value,
        };
        let mut v = values.iter().copied().cycle();
        let mut next = move || v.next().unwrap_or(0.0);
        vec![
            MetricFamily {
                name: "vllm:e2e latency".into(),
                help: "A help with \\ and\nnewline.".into(),
                metric_type: MetricType::Histogram,
                samples: vec![
                    sample(
                        "vllm:e2e latency_bucket",
                        &[("le", "0.5"), ("model name", "a b \"c\"")],
                        next(),
                    ),
                    sample(
                        "vllm:e2e latency_bucket",
                        &[("le", "+Inf"), ("model name", "a b \"c\"")],
                        next(),
                    ),
                    sample(
                        "vllm:e2e latency_count",
                        &[("model name", "a b \"c\"")],
                        next(),
                    ),
                    sample(
                        "vllm:e2e latency_sum",
                        &[("model name", "a b \"c\"")],
                        next(),
                    ),
                ],
            },
            MetricFamily {
                name: "requests".into(),
                help: "Requests.".into(),
                metric_type: MetricType::Counter,
                samples: vec![
                    sample("requests_total", &[("path", "/x y\nz")], next()),
                    sample("requests_created", &[("path", "/x y\nz")], next()),
                ],
            },
            MetricFamily {
                name: "température".into(),
                help: "UTF-8.".into(),
                metric_type: MetricType::Gauge,
                samples: vec![sample(
                    "température",
                    &[("pièce", "salle à manger")],
                    next(),
                )],
            },
        ]
    }

    #[test]
    fn values_rewritten_in_place_equal_the_encoders_in_every_format() {
        let pool = [
            0.0,
            -0.0,
            1.0,
            2.5,
            1e21,
            1e-7,
            123456789.0,
            f64::NAN,
            f64::INFINITY,
            f64::NEG_INFINITY,
            0.1 + 0.2,
            3.0,
        ];
        let mut state = 7u64;
        for format in [Format::Text, Format::OpenMetrics] {
            for escaping in [Escaping::Underscores, Escaping::AllowUtf8] {
                let mut memo = EncodeMemo::new(format, escaping, 1 << 20);
                for round in 0..40 {
                    let values: Vec<f64> = (0..8)
                        .map(|_| {
                            state = state.wrapping_mul(6364136223846793005).wrapping_add(1);
                            pool[(state >> 33) as usize % pool.len()]
                        })
                        .collect();
                    let families = awkward_families(&values);
                    memo.encode(&families, families.len());
                    assert_eq!(
                        String::from_utf8(memo.body().to_vec()).unwrap(),
                        String::from_utf8(encode(&families, format, escaping)).unwrap(),
                        "{format:?} {escaping:?} round {round}"
                    );
                    assert_eq!(gunzip(&memo.gzip().unwrap()), memo.body().to_vec());
                }
            }
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
        assert!(String::from_utf8(memo.body().to_vec())
            .unwrap()
            .contains("i=\"other\""));
        // -0.0 and 0.0 print differently: values are compared by their bits.
        families[0].samples[0].value = 0.0;
        memo.encode(&families, 1);
        families[0].samples[0].value = -0.0;
        memo.encode(&families, 1);
        assert_eq!(
            memo.body().to_vec(),
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
            assert!(encoded.prefix_len > 0 && encoded.prefix_len < memo.body().len());
            let gzipped = memo.gzip().unwrap();
            assert_eq!(gunzip(&gzipped), memo.body().to_vec());
            // Python's and Go's readers agree on one member: check the trailer.
            let n = gzipped.len();
            let isize = u32::from_le_bytes(gzipped[n - 4..].try_into().unwrap());
            assert_eq!(isize as usize, memo.body().len());
            let crc = u32::from_le_bytes(gzipped[n - 8..n - 4].try_into().unwrap());
            assert_eq!(crc, crc32fast::hash(memo.body()));
        }
    }

    #[test]
    fn a_kept_gzipper_gives_one_valid_member_each_time() {
        let mut gzipper = Gzipper::default();
        for body in [&b""[..], b"a", &[b'x'; 100_000][..], b"# EOF\n"] {
            let gzipped = gzipper.gzip(body).unwrap();
            assert_eq!(gunzip(&gzipped), body);
        }
    }

    #[test]
    fn past_its_bound_the_memo_keeps_nothing() {
        let mut memo = EncodeMemo::new(Format::Text, Escaping::Underscores, 256);
        let big = vec![family("big", &[1.0; 20])];
        for _ in 0..2 {
            let encoded = memo.encode(&big, 1);
            assert_eq!(encoded.encoded_families, 1);
            let body = memo.body().to_vec();
            assert_eq!(body, encode(&big, Format::Text, Escaping::Underscores));
            assert_eq!(gunzip(&memo.gzip().unwrap()), body);
            // Held while the caller uses it, not after.
            memo.release_unkept();
            assert_eq!(memo.held_bytes(), 0);
        }
        // Small again: kept again from the body after.
        let small = vec![family("small", &[1.0])];
        for encoded_families in [1, 1, 0] {
            let encoded = memo.encode(&small, 1);
            assert_eq!(encoded.encoded_families, encoded_families);
            assert_eq!(
                memo.body().to_vec(),
                encode(&small, Format::Text, Escaping::Underscores)
            );
            assert_eq!(gunzip(&memo.gzip().unwrap()), memo.body().to_vec());
        }
    }
}
