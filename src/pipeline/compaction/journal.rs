//! Crash-safe replacement of dead writers' files by archives.
//!
//! A round ([`commit`]):
//!
//! 1. each archive is written to a hidden temporary file (`.NAME.compacting`,
//!    which no `*.db` glob lists) and synced;
//! 2. the journal (`.multiproc-exporter-compaction`: each archive's name,
//!    temporary file and inode, and the files it replaces with their device
//!    and inode) is written to a temporary file, synced, renamed into place,
//!    and the directory synced: from here on the round is decided;
//! 3. each temporary file is renamed over its archive (directory synced), and
//!    the files folded into that archive are removed;
//! 4. once the directory is synced, the journal is removed.
//!
//! [`recover`] finishes a decided round (renames what is left, removes the
//! replaced files that are still there, by identity) and throws away an
//! undecided one (temporary files), so that after it no value is lost or
//! counted twice whichever step a crash interrupted. Between an archive's
//! rename and the removal of its files, a reader that does not recover (prometheus_client, or an exporter without
//! compaction) would count the replaced files twice; normally for
//! microseconds, after a crash there until the exporter starts again.

use std::fs::{self, File, OpenOptions};
use std::io::{self, Write};
use std::os::unix::fs::MetadataExt;
use std::path::Path;

use super::Archive;
use crate::format::writer::file_bytes;

/// The journal's file name (hidden, not `*.db`).
pub const JOURNAL: &str = ".multiproc-exporter-compaction";

/// The first line of a journal.
const JOURNAL_HEADER: &str = "multiproc-exporter compaction journal 1";

/// The suffix of an archive's temporary file (`.counter_archive.db.compacting`).
const TEMPORARY_SUFFIX: &str = ".compacting";

/// A point of a round; [`commit`]'s hook is called after each.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Step {
    /// The temporary file of archive `n` was written and synced.
    ArchiveWritten(usize),
    /// The journal is in place: the round is decided.
    JournalWritten,
    /// Archive `n` took its place.
    ArchiveRenamed(usize),
    /// Replaced file `n` (counting across archives) was removed.
    SourceRemoved(usize),
    /// The round is over.
    JournalRemoved,
}

/// What [`recover`] found.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Recovered {
    /// A decided round was finished.
    pub finished: bool,
    /// Temporary files of an undecided round removed.
    pub discarded: usize,
}

fn temporary_name(archive: &str) -> String {
    format!(".{archive}{TEMPORARY_SUFFIX}")
}

/// Syncs the directory itself (its entries: renames and removals).
fn sync_directory(dir: &Path) -> io::Result<()> {
    File::open(dir)?.sync_all()
}

/// Writes `bytes` to a new file at `path` and syncs it; returns its inode.
fn write_synced(path: &Path, bytes: &[u8]) -> io::Result<u64> {
    let mut file = OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .open(path)?;
    file.write_all(bytes)?;
    file.sync_all()?;
    Ok(file.metadata()?.ino())
}

/// Runs one round for `archives` in `dir` (see the module's steps).
pub fn commit(dir: &Path, archives: &[Archive], hook: &mut dyn FnMut(Step)) -> io::Result<()> {
    let mut journal = format!("{JOURNAL_HEADER}\n");
    for (n, archive) in archives.iter().enumerate() {
        let records: Vec<(&str, f64, f64)> = archive
            .records
            .iter()
            .map(|(key, value, timestamp)| (key.as_str(), *value, *timestamp))
            .collect();
        let temporary = temporary_name(&archive.name);
        let inode = write_synced(&dir.join(&temporary), &file_bytes(&records))?;
        hook(Step::ArchiveWritten(n));
        journal.push_str(&format!("archive {} {temporary} {inode}\n", archive.name));
        for (name, (device, inode)) in &archive.sources {
            journal.push_str(&format!(
                "source {} {name} {device} {inode}\n",
                archive.name
            ));
        }
    }
    let journal_temporary = dir.join(format!("{JOURNAL}.tmp"));
    write_synced(&journal_temporary, journal.as_bytes())?;
    fs::rename(&journal_temporary, dir.join(JOURNAL))?;
    sync_directory(dir)?;
    hook(Step::JournalWritten);
    finish(dir, &parse(&journal)?, hook)
}

/// A parsed journal: archives (name, temporary name, inode) and the files
/// they replace (archive name, file name, device, inode).
#[derive(Debug, Default)]
struct Journal {
    archives: Vec<(String, String, u64)>,
    sources: Vec<(String, String, u64, u64)>,
}

fn parse(text: &str) -> io::Result<Journal> {
    let bad = || io::Error::new(io::ErrorKind::InvalidData, "malformed compaction journal");
    let mut lines = text.lines();
    if lines.next() != Some(JOURNAL_HEADER) {
        return Err(bad());
    }
    let mut journal = Journal::default();
    for line in lines {
        let fields: Vec<&str> = line.split(' ').collect();
        match fields.as_slice() {
            ["archive", name, temporary, inode] => journal.archives.push((
                (*name).to_owned(),
                (*temporary).to_owned(),
                inode.parse().map_err(|_| bad())?,
            )),
            ["source", archive, name, device, inode] => journal.sources.push((
                (*archive).to_owned(),
                (*name).to_owned(),
                device.parse().map_err(|_| bad())?,
                inode.parse().map_err(|_| bad())?,
            )),
            _ => return Err(bad()),
        }
    }
    Ok(journal)
}

/// Steps 3 and 4 of a decided round, each only where it is not done yet: an
/// archive whose temporary file is there is renamed; the files of an archive
/// that is in place (by inode) are removed if they are still the files
/// folded in; an archive found neither way keeps its files.
fn finish(dir: &Path, journal: &Journal, hook: &mut dyn FnMut(Step)) -> io::Result<()> {
    let mut removed = 0;
    // Archive by archive, so that an error stops with every archive in
    // place having its files removed, or none of its files replaced.
    for (n, (name, temporary, inode)) in journal.archives.iter().enumerate() {
        let temporary = dir.join(temporary);
        if fs::metadata(&temporary).is_ok_and(|m| m.ino() == *inode) {
            fs::rename(&temporary, dir.join(name))?;
            sync_directory(dir)?;
            hook(Step::ArchiveRenamed(n));
        }
        if !fs::metadata(dir.join(name)).is_ok_and(|m| m.ino() == *inode) {
            continue;
        }
        for (archive, source, device, source_inode) in &journal.sources {
            if archive != name || source == name {
                continue;
            }
            let path = dir.join(source);
            if fs::metadata(&path).is_ok_and(|m| (m.dev(), m.ino()) == (*device, *source_inode)) {
                match fs::remove_file(&path) {
                    Ok(()) => {}
                    Err(e) if e.kind() == io::ErrorKind::NotFound => {}
                    Err(e) => return Err(e),
                }
                hook(Step::SourceRemoved(removed));
                removed += 1;
            }
        }
    }
    // The removals are durable before the journal goes (until then a
    // recovery would do them again).
    sync_directory(dir)?;
    fs::remove_file(dir.join(JOURNAL))?;
    sync_directory(dir)?;
    hook(Step::JournalRemoved);
    Ok(())
}

/// Finishes the round a crash interrupted in `dir`, if it was decided, and
/// throws away the temporary files of one that was not. Does nothing (and
/// writes nothing) in a directory without either.
pub fn recover(dir: &Path) -> io::Result<Recovered> {
    let mut recovered = Recovered::default();
    match fs::read_to_string(dir.join(JOURNAL)) {
        Ok(text) => {
            finish(dir, &parse(&text)?, &mut |_| {})?;
            recovered.finished = true;
        }
        Err(e) if e.kind() == io::ErrorKind::NotFound => {}
        Err(e) => return Err(e),
    }
    // An undecided round: its temporary files (and journal's).
    let mut leftovers = Vec::new();
    for entry in fs::read_dir(dir)?.flatten() {
        let name = entry.file_name();
        let Some(name) = name.to_str() else { continue };
        let ours = (name.starts_with('.') && name.ends_with(&format!(".db{TEMPORARY_SUFFIX}")))
            || name == format!("{JOURNAL}.tmp");
        if ours {
            leftovers.push(entry.path());
        }
    }
    for path in &leftovers {
        match fs::remove_file(path) {
            Ok(()) => recovered.discarded += 1,
            Err(e) if e.kind() == io::ErrorKind::NotFound => {}
            Err(e) => return Err(e),
        }
    }
    if !leftovers.is_empty() {
        sync_directory(dir)?;
    }
    Ok(recovered)
}
