//! The binary layout of one prometheus_client multiprocess `.db` file.
//!
//! ```text
//! offset 0   i32 used    (native byte order; bytes in use, header included)
//! offset 4   4 bytes     (padding, ignored)
//! offset 8   records, back to back, up to `used`:
//!            i32 len | len bytes UTF-8 JSON key | 1..=8 spaces | f64 value | f64 timestamp
//! ```
//!
//! The padding after a key is `8 - (len + 4) % 8` bytes, never zero, so every
//! value is 8-byte aligned. This module is pure: it looks at bytes already in
//! memory and never reads past `used` or past the end of the slice it is given.
//! Incremental reading is supported by scanning from the offset where the
//! previous scan stopped.

use thiserror::Error;

/// Size of the file header (the `used` field plus 4 bytes of padding).
pub const HEADER_LEN: usize = 8;

/// Bytes after the key padding: a value and a timestamp, both `f64`.
pub const VALUE_LEN: usize = 16;

/// Size of a new file: prometheus_client creates every file at 64 KiB and
/// doubles it when a record does not fit.
pub const INITIAL_FILE_LEN: usize = 1 << 16;

/// Length of a key plus its padding: `len + 8 - (len + 4) % 8`, so that the
/// value after the 4-byte length field and the key is 8-byte aligned (the
/// padding is never zero).
pub const fn padded_key_len(key_len: usize) -> usize {
    key_len + (8 - (key_len + 4) % 8)
}

/// The bytes of one record: `i32 len | key | spaces | value | timestamp`,
/// as prometheus_client writes it.
pub fn encode_record(key: &[u8], value: f64, timestamp: f64) -> Vec<u8> {
    let padded = padded_key_len(key.len());
    let mut record = Vec::with_capacity(4 + padded + VALUE_LEN);
    // Key lengths are bounded by the writers (far below `i32::MAX`).
    record.extend_from_slice(&(key.len() as i32).to_ne_bytes());
    record.extend_from_slice(key);
    record.resize(4 + padded, b' ');
    record.extend_from_slice(&value.to_ne_bytes());
    record.extend_from_slice(&timestamp.to_ne_bytes());
    record
}

/// The bytes of a whole new file holding `records` (key, value, timestamp),
/// as prometheus_client leaves it: the header with `used`, the records, and
/// zero bytes up to [`INITIAL_FILE_LEN`] (or the next doubling).
pub fn file_bytes(records: &[(&str, f64, f64)]) -> Vec<u8> {
    let mut data = vec![0u8; HEADER_LEN];
    for (key, value, timestamp) in records {
        data.extend_from_slice(&encode_record(key.as_bytes(), *value, *timestamp));
    }
    let used = data.len() as i32;
    data[..4].copy_from_slice(&used.to_ne_bytes());
    let mut capacity = INITIAL_FILE_LEN;
    while capacity < data.len() {
        capacity *= 2;
    }
    data.resize(capacity, 0);
    data
}

/// Why a file's bytes do not follow the layout.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum LayoutError {
    /// The file is shorter than its 8-byte header (a 0-byte file is left by a
    /// writer killed between creating and sizing it).
    #[error("file is {len} bytes, shorter than the 8-byte header")]
    ShorterThanHeader {
        /// File length in bytes.
        len: usize,
    },
    /// The header's `used` field is negative or smaller than the header
    /// (but not 0, which a writer leaves for an instant while creating a file).
    #[error("header says {used} bytes are used, less than the 8-byte header")]
    UsedBelowHeader {
        /// The `used` field.
        used: i32,
    },
    /// The header's `used` field points past the end of the file.
    #[error("header says {used} bytes are used but the file has {len}")]
    UsedBeyondFile {
        /// The `used` field.
        used: usize,
        /// File length in bytes.
        len: usize,
    },
    /// A record's key length is negative.
    #[error("record at offset {offset} has a negative key length {len}")]
    NegativeKeyLength {
        /// Offset of the record's length field.
        offset: usize,
        /// The length field.
        len: i32,
    },
    /// A record (key, padding, value and timestamp) runs past `used`.
    #[error("record at offset {offset} with a {len}-byte key runs past used={used}")]
    RecordPastUsed {
        /// Offset of the record's length field.
        offset: usize,
        /// The key length field.
        len: i32,
        /// The `used` field.
        used: usize,
    },
}

/// Where one record lives in its file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RecordLocation {
    /// Offset of the first key byte.
    pub key_offset: usize,
    /// Length of the key in bytes.
    pub key_len: usize,
    /// Offset of the 16-byte value and timestamp pair (always 8-byte aligned).
    pub value_offset: usize,
}

impl RecordLocation {
    /// The key bytes of this record within `data`.
    pub fn key<'a>(&self, data: &'a [u8]) -> &'a [u8] {
        &data[self.key_offset..self.key_offset + self.key_len]
    }

    /// Offset just past this record (where the next record starts).
    pub fn end(&self) -> usize {
        self.value_offset + VALUE_LEN
    }
}

/// Reads the header of a file whose first bytes are `data` (`file_len` is the
/// full file length) and returns how many bytes are in use.
///
/// `Ok(None)` means the header still says 0: a writer is creating the file and
/// has sized it but not yet written the header, so the file holds no records.
pub fn read_used(data: &[u8], file_len: usize) -> Result<Option<usize>, LayoutError> {
    if data.len() < HEADER_LEN || file_len < HEADER_LEN {
        return Err(LayoutError::ShorterThanHeader {
            len: file_len.min(data.len()),
        });
    }
    let used = read_i32(data, 0);
    if used == 0 {
        return Ok(None);
    }
    if used < HEADER_LEN as i32 {
        return Err(LayoutError::UsedBelowHeader { used });
    }
    let used = used as usize;
    if used > file_len {
        return Err(LayoutError::UsedBeyondFile {
            used,
            len: file_len,
        });
    }
    Ok(Some(used))
}

/// Scans the records between `from` (a record boundary, at least
/// [`HEADER_LEN`]) and `used`, appending their locations to `out`.
///
/// `data` must hold at least `used` bytes of the file. Returns the offset where
/// scanning stopped (equal to `used` for a well-formed file). On error nothing
/// after the bad record is appended, but records before it are.
pub fn scan_records(
    data: &[u8],
    from: usize,
    used: usize,
    out: &mut Vec<RecordLocation>,
) -> Result<usize, LayoutError> {
    let used = used.min(data.len());
    scan_window(data, 0, from, used, out)
}

/// [`scan_records`] over a window of the file: `window` holds the file's
/// bytes from offset `base` on, and the file's records end at `used` (which
/// may lie past the window). Scans from `from` (a record boundary inside or
/// at the end of the window) and stops at `used` or before the first record
/// that does not lie wholly inside the window; returns where it stopped, so
/// that a file can be scanned in bounded pieces. Offsets in `out` are
/// offsets in the file. A record that runs past `used` is an error even when
/// it also runs past the window.
pub fn scan_window(
    window: &[u8],
    base: usize,
    from: usize,
    used: usize,
    out: &mut Vec<RecordLocation>,
) -> Result<usize, LayoutError> {
    let end = base.saturating_add(window.len()).min(used);
    let mut pos = from.max(HEADER_LEN).max(base);
    while pos < used {
        if pos + 4 > used {
            return Err(LayoutError::RecordPastUsed {
                offset: pos,
                len: 0,
                used,
            });
        }
        if pos + 4 > end {
            break;
        }
        let len = read_i32(window, pos - base);
        if len < 0 {
            return Err(LayoutError::NegativeKeyLength { offset: pos, len });
        }
        let key_len = len as usize;
        let value_offset = pos + 4 + padded_key_len(key_len);
        if value_offset + VALUE_LEN > used {
            return Err(LayoutError::RecordPastUsed {
                offset: pos,
                len,
                used,
            });
        }
        if value_offset + VALUE_LEN > end {
            break;
        }
        out.push(RecordLocation {
            key_offset: pos + 4,
            key_len,
            value_offset,
        });
        pos = value_offset + VALUE_LEN;
    }
    Ok(pos)
}

/// The length of the record starting at `offset` (length field, key,
/// padding, value and timestamp), given its 4-byte length field; `None` for
/// a negative length.
pub fn record_len(length_field: [u8; 4]) -> Option<usize> {
    let len = usize::try_from(i32::from_ne_bytes(length_field)).ok()?;
    Some(4 + padded_key_len(len) + VALUE_LEN)
}

/// Reads the value and timestamp stored at `value_offset`.
///
/// # Panics
/// Panics if `data` is shorter than `value_offset + 16`; callers pass offsets
/// from [`scan_records`] over the same bytes.
pub fn read_value(data: &[u8], value_offset: usize) -> (f64, f64) {
    (
        read_f64(data, value_offset),
        read_f64(data, value_offset + 8),
    )
}

fn read_i32(data: &[u8], at: usize) -> i32 {
    let mut raw = [0u8; 4];
    raw.copy_from_slice(&data[at..at + 4]);
    i32::from_ne_bytes(raw)
}

fn read_f64(data: &[u8], at: usize) -> f64 {
    let mut raw = [0u8; 8];
    raw.copy_from_slice(&data[at..at + 8]);
    f64::from_ne_bytes(raw)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn file_with(records: &[(&str, f64, f64)]) -> Vec<u8> {
        file_bytes(records)
    }

    #[test]
    fn annotated_counter_dump_from_research_note() {
        let key = r#"["c", "c_total", {"l": "x"}, "help"]"#;
        let data = file_with(&[(key, 2.0, 0.0)]);
        assert_eq!(read_used(&data, data.len()), Ok(Some(72)));
        let mut out = Vec::new();
        assert_eq!(scan_records(&data, HEADER_LEN, 72, &mut out), Ok(72));
        assert_eq!(out.len(), 1);
        assert_eq!(out[0].key(&data), key.as_bytes());
        assert_eq!(out[0].value_offset, 56);
        assert_eq!(read_value(&data, 56), (2.0, 0.0));
    }

    #[test]
    fn padding_is_never_zero() {
        // len + 4 == 8 → a full 8 bytes of padding.
        let data = file_with(&[("abcd", 1.0, 5.0), ("x", 2.0, 0.0)]);
        let mut out = Vec::new();
        let used = read_used(&data, data.len()).unwrap().unwrap();
        scan_records(&data, HEADER_LEN, used, &mut out).unwrap();
        assert_eq!(out[0].value_offset, 8 + 4 + 4 + 8);
        assert_eq!(read_value(&data, out[1].value_offset), (2.0, 0.0));
    }

    #[test]
    fn incremental_scan_continues_where_it_stopped() {
        let data = file_with(&[("a", 1.0, 0.0), ("bb", 2.0, 0.0), ("ccc", 3.0, 0.0)]);
        let used = read_used(&data, data.len()).unwrap().unwrap();
        let mut out = Vec::new();
        let first_end = 8 + 4 + 1 + 3 + 16;
        scan_records(&data, HEADER_LEN, first_end, &mut out).unwrap();
        assert_eq!(out.len(), 1);
        assert_eq!(scan_records(&data, first_end, used, &mut out), Ok(used));
        assert_eq!(out.len(), 3);
    }

    #[test]
    fn header_errors() {
        assert_eq!(
            read_used(&[], 0),
            Err(LayoutError::ShorterThanHeader { len: 0 })
        );
        let mut data = vec![0u8; 64];
        assert_eq!(read_used(&data, 64), Ok(None));
        data[..4].copy_from_slice(&(-5i32).to_ne_bytes());
        assert_eq!(
            read_used(&data, 64),
            Err(LayoutError::UsedBelowHeader { used: -5 })
        );
        data[..4].copy_from_slice(&100i32.to_ne_bytes());
        assert_eq!(
            read_used(&data, 64),
            Err(LayoutError::UsedBeyondFile { used: 100, len: 64 })
        );
        data[..4].copy_from_slice(&8i32.to_ne_bytes());
        assert_eq!(read_used(&data, 64), Ok(Some(8)));
    }

    #[test]
    fn record_errors() {
        let mut data = file_with(&[("abc", 1.0, 0.0)]);
        let used = read_used(&data, data.len()).unwrap().unwrap();
        data[8..12].copy_from_slice(&(-1i32).to_ne_bytes());
        assert!(matches!(
            scan_records(&data, HEADER_LEN, used, &mut Vec::new()),
            Err(LayoutError::NegativeKeyLength { .. })
        ));
        data[8..12].copy_from_slice(&1000i32.to_ne_bytes());
        assert!(matches!(
            scan_records(&data, HEADER_LEN, used, &mut Vec::new()),
            Err(LayoutError::RecordPastUsed { .. })
        ));
        // `b"somejunk"` over the length field, as client_python's corruption test.
        data[8..16].copy_from_slice(b"somejunk");
        assert!(scan_records(&data, HEADER_LEN, used, &mut Vec::new()).is_err());
    }

    #[test]
    fn never_reads_past_the_slice() {
        let data = file_with(&[("abc", 1.0, 0.0)]);
        // Claim more bytes are used than the slice holds.
        let mut out = Vec::new();
        let _ = scan_records(&data[..20], HEADER_LEN, 4096, &mut out);
        assert!(out.is_empty());
    }
}
