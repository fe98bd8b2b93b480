//! The reader's system calls and their errors: windows and values read with
//! `pread` (an allocation that fails leaves the file out), files opened
//! read-only without following links where the policy says so, birth times.

use std::ffi::OsStr;
use std::fs::{File, OpenOptions};
use std::io;
use std::os::unix::fs::{FileExt, MetadataExt, OpenOptionsExt};
use std::path::Path;

use crate::format::file_name::FileName;
use crate::format::layout::{read_value, LayoutError, VALUE_LEN};
use crate::source::SkipReason;

/// Bytes read at a time from a file that does not fit in one read.
pub(super) const READ_CHUNK: usize = 1 << 20;

/// Reads `len` bytes of `file` from `offset` into `buffer` (replacing its
/// contents, reusing its allocation); returns how many bytes the file had.
/// An allocation that fails leaves the file out instead of aborting.
pub(super) fn read_window(
    file: &File,
    buffer: &mut Vec<u8>,
    offset: usize,
    len: usize,
) -> Result<usize, SkipReason> {
    buffer.clear();
    // Exactly: the budget counts the window, not an amortized doubling.
    buffer
        .try_reserve_exact(len)
        .map_err(|_| SkipReason::OutOfMemory { bytes: len })?;
    buffer.resize(len, 0);
    let got = read_fully_at(file, buffer, offset as u64).map_err(io_reason)?;
    buffer.truncate(got);
    Ok(got)
}

/// Reads the values at `offsets` (ascending) a window at a time.
pub(super) fn read_values(
    file: &File,
    buffer: &mut Vec<u8>,
    offsets: &[u32],
    out: &mut Vec<(f64, f64)>,
) -> Result<(), SkipReason> {
    let mut i = 0;
    while let Some(&first) = offsets.get(i) {
        let start = first as usize;
        let got = read_window(file, buffer, start, READ_CHUNK)?;
        let before = i;
        while let Some(&offset) = offsets.get(i) {
            let at = offset as usize - start;
            if at + VALUE_LEN > got {
                break;
            }
            out.push(read_value(buffer, at));
            i += 1;
        }
        if i == before {
            // Truncated since it was scanned.
            return Err(SkipReason::Layout(LayoutError::UsedBeyondFile {
                used: start + VALUE_LEN,
                len: start + got,
            }));
        }
    }
    Ok(())
}

pub(super) fn is_live_gauge_path(path: &Path) -> bool {
    path.file_name()
        .and_then(OsStr::to_str)
        .is_some_and(|name| FileName::parse(name).is_live_gauge())
}

/// A file's birth time (`statx`), or its change time on file systems that
/// keep none.
pub(super) fn birth(meta: &std::fs::Metadata) -> (i64, i64) {
    match meta
        .created()
        .ok()
        .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
    {
        Some(d) => (
            i64::try_from(d.as_secs()).unwrap_or(i64::MAX),
            i64::from(d.subsec_nanos()),
        ),
        None => (meta.ctime(), meta.ctime_nsec()),
    }
}

/// Opens `path` for reading; with `no_follow`, a link is refused
/// (`O_NOFOLLOW`: `ELOOP`), as `LinkPolicy::NoLinks` asks.
pub(super) fn open_read_only(path: &Path, no_follow: bool) -> Result<File, SkipReason> {
    let follow = if no_follow { libc::O_NOFOLLOW } else { 0 };
    OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK | libc::O_NOCTTY | follow)
        .open(path)
        .map_err(|e| match io_reason(e) {
            SkipReason::LinkLoop if no_follow => SkipReason::LinkOutsideDirectory,
            reason => reason,
        })
}

pub(super) fn io_reason(e: io::Error) -> SkipReason {
    match e.kind() {
        io::ErrorKind::NotFound => SkipReason::Vanished,
        io::ErrorKind::PermissionDenied => SkipReason::PermissionDenied,
        _ if e.raw_os_error() == Some(libc::EISDIR) => SkipReason::NotRegularFile,
        _ if e.raw_os_error() == Some(libc::ELOOP) => SkipReason::LinkLoop,
        _ => SkipReason::Io(e.to_string()),
    }
}

/// Reads until `buf` is full or the file ends; returns the bytes read.
pub(super) fn read_fully_at(file: &File, buf: &mut [u8], offset: u64) -> io::Result<usize> {
    let mut done = 0;
    while done < buf.len() {
        match file.read_at(&mut buf[done..], offset + done as u64) {
            Ok(0) => break,
            Ok(n) => done += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(done)
}
