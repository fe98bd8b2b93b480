//! Regression tests of issue 53 for the runs and their writers, driven
//! through the liveness seam ([`Scripted`] evidence: no real process, no
//! sleep); files are real, written by the crate's own writer.

use std::os::unix::fs::MetadataExt as _;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use super::*;
use crate::format::writer::ProcessWriter;
use crate::source::writers::procfs::OpenFile;
use crate::source::writers::scripted::Scripted;
use crate::source::writers::{LivenessMode, WriterState};

fn identity(path: &Path) -> (u64, u64) {
    let meta = std::fs::metadata(path).unwrap();
    (meta.dev(), meta.ino())
}

/// A run `name` in `dir` born now, with a counter file of each pid (value
/// `value`), each born now; the files' identities.
fn run(evidence: &Scripted, dir: &Path, name: &str, pids: &[u32], value: f64) -> Vec<OpenFile> {
    let path = dir.join(name);
    std::fs::create_dir(&path).unwrap();
    evidence.born_now(identity(&path));
    pids.iter()
        .map(|pid| {
            write(&path, *pid, value);
            let id = identity(&path.join(format!("counter_{pid}.db")));
            evidence.born_now(id);
            OpenFile {
                identity: id,
                writable: true,
            }
        })
        .collect()
}

/// Writes `requests_total` of `pid` in `run` (adding `by`).
fn write(run: &Path, pid: u32, by: f64) {
    let mut writer = ProcessWriter::new(run, pid);
    let counter = writer.counter("requests", "Requests.", &[]).unwrap();
    counter.inc(&mut writer, by).unwrap();
}

fn names(paths: &[PathBuf]) -> Vec<String> {
    paths
        .iter()
        .map(|p| p.file_name().unwrap().to_string_lossy().into_owned())
        .collect()
}

/// Issue 53 (defect 1): the exporter left out only its own pid, but
/// `/proc/<tid>` resolves for each of its threads; a writer whose pid in
/// the application's namespace equals one of those tids, held open by that
/// thread, was "seen holding its file": visibility flipped to confirmed and
/// every other writer was judged dead.
#[test]
fn the_exporters_own_threads_are_never_taken_for_writers() {
    let dir = tempfile::tempdir().unwrap();
    // A sidecar in a pid namespace of its own: the exporter is pid 1, its
    // threads 2 to 5; the application's pids are not seen.
    let evidence = Scripted::new(1, vec![2, 3, 4, 5]);
    let old = run(&evidence, dir.path(), "tmpold_____", &[5000], 37.0);
    evidence.advance(Duration::from_secs(60));
    let new = run(&evidence, dir.path(), "tmpnew_____", &[2], 2.0);
    evidence.own_hold(
        old.iter()
            .chain(&new)
            .map(|f| OpenFile {
                writable: false,
                ..*f
            })
            .collect(),
    );
    let mut runs = Runs::with_evidence(WriterPolicy::default(), Arc::new(evidence.clone()));
    let survey = runs.survey(dir.path());
    assert!(!survey.pids_visible, "no writer of its own is evidence");
    assert_eq!(names(&survey.current), ["tmpnew_____"]);
    assert!(
        !survey.stale[0].writers_dead,
        "the older run is not known dead"
    );
    // The Writers alone: the file named with a thread's id is unknown.
    let file = WrittenFile {
        pid: Some(2),
        identity: new[0].identity,
        born: 0.0,
        archive: false,
    };
    let mut writers = Writers::with_evidence(WriterPolicy::default(), Arc::new(evidence));
    assert_eq!(writers.census(&[file]).states, [WriterState::Unknown]);
    assert!(!writers.pids_visible());
}

/// Issue 53 (defect 4): run O was left by a SIGKILL long ago, run N is
/// current; N stops cleanly and `TemporaryDirectory` removes it: O was
/// served again ("created last") until the next start wrote its first file.
#[test]
fn a_clean_exit_never_brings_back_a_crash_from_long_ago() {
    for shared_namespace in [true, false] {
        let dir = tempfile::tempdir().unwrap();
        let evidence = Scripted::new(900, vec![901, 902]);
        run(&evidence, dir.path(), "tmpcrashed_", &[7], 1000.0);
        evidence.advance(Duration::from_secs(3600));
        let files = run(&evidence, dir.path(), "tmpcurrent_", &[8], 5.0);
        if shared_namespace {
            evidence.spawn(8, Some(files), None);
        }
        let mut runs = Runs::with_evidence(WriterPolicy::default(), Arc::new(evidence.clone()));
        let survey = runs.survey(dir.path());
        assert_eq!(names(&survey.current), ["tmpcurrent_"]);
        assert!(survey.stale[0].superseded);
        // A clean stop: the writer exits, its run is removed.
        evidence.exit(8);
        std::fs::remove_dir_all(dir.path().join("tmpcurrent_")).unwrap();
        evidence.advance(Duration::from_secs(5));
        let survey = runs.survey(dir.path());
        assert!(
            survey.current.is_empty(),
            "{shared_namespace}: {:?}",
            survey.current
        );
        assert_eq!(names(&[survey.stale[0].path.clone()]), ["tmpcrashed_"]);
        assert!(survey.stale[0].superseded, "the status page says why");
    }
}

/// Issue 53 (defect 5): with two `--dir`s each directory's survey wiped the
/// other's content hashes, so every look was a first look and an older run
/// being written was never served.
#[test]
fn with_two_directories_an_older_run_being_written_is_served() {
    let (m1, m2) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let evidence = Scripted::new(1, vec![2, 3]);
    run(&evidence, m1.path(), "tmpolder___", &[7], 1.0);
    evidence.advance(Duration::from_secs(10));
    run(&evidence, m1.path(), "tmpnewer___", &[8], 1.0);
    run(&evidence, m2.path(), "tmpother___", &[9], 1.0);
    let mut runs = Runs::with_evidence(WriterPolicy::default(), Arc::new(evidence.clone()));
    // The first survey looks twice (the older run is unknown): it does not
    // move meanwhile.
    runs.survey(m1.path());
    runs.survey(m2.path());
    for _ in 0..3 {
        write(&m1.path().join("tmpolder___"), 7, 1.0);
        evidence.advance(Duration::from_millis(2500));
        let survey = runs.survey(m1.path());
        runs.survey(m2.path());
        assert_eq!(names(&survey.current), ["tmpnewer___", "tmpolder___"]);
    }
}

/// Issue 53 (defect 6, `dump` and the first scrape after a start): a source
/// with no history left out an older run that was being written. A run
/// first seen that would be left out is looked at again after a short
/// pause.
#[test]
fn a_source_with_no_history_looks_twice_at_a_run_it_would_leave_out() {
    let dir = tempfile::tempdir().unwrap();
    let evidence = Scripted::new(1, vec![2, 3]);
    run(&evidence, dir.path(), "tmpolder___", &[7], 1.0);
    evidence.advance(Duration::from_secs(10));
    run(&evidence, dir.path(), "tmpnewer___", &[8], 1.0);
    let older = dir.path().join("tmpolder___");
    evidence.on_pause(move |_| write(&older, 7, 1.0));
    let mut runs = Runs::with_evidence(WriterPolicy::default(), Arc::new(evidence.clone()));
    let before = evidence.boot();
    let survey = runs.survey(dir.path());
    assert_eq!(names(&survey.current), ["tmpnewer___", "tmpolder___"]);
    assert_eq!(evidence.boot() - before, SECOND_LOOK.as_secs_f64());
    // Known runs are not looked at twice.
    let before = evidence.boot();
    runs.survey(dir.path());
    assert_eq!(evidence.boot(), before);
}

/// Issue 53 (defect 9): the boot time was cached at start, so a wall clock
/// stepped backward made live writers' start times look later than their
/// files' birth: with `--writers.liveness=proc` and descriptors unreadable
/// (the shipped sidecar manifest), live writers were judged dead.
#[test]
fn liveness_is_immune_to_wall_clock_steps() {
    for step in [-3600.0, 3600.0] {
        let dir = tempfile::tempdir().unwrap();
        let evidence = Scripted::new(900, vec![901]);
        let policy = WriterPolicy {
            liveness: LivenessMode::Proc,
            ..WriterPolicy::default()
        };
        let mut runs = Runs::with_evidence(policy, Arc::new(evidence.clone()));
        let first = run(&evidence, dir.path(), "tmpfirst___", &[7], 1.0);
        evidence.spawn(7, None, None);
        assert_eq!(names(&runs.survey(dir.path()).current), ["tmpfirst___"]);
        // The wall clock steps (NTP); then a writer starts and writes.
        evidence.step_wall(step);
        evidence.advance(Duration::from_secs(1));
        evidence.spawn(8, None, None);
        let second = run(&evidence, dir.path(), "tmpsecond__", &[8], 1.0);
        evidence.advance(Duration::from_secs(1));
        let survey = runs.survey(dir.path());
        assert_eq!(
            names(&survey.current),
            ["tmpfirst___", "tmpsecond__"],
            "step {step}"
        );
        drop((first, second));
    }
}
