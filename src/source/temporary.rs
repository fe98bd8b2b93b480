//! Temporary subdirectories of a metrics directory: the runs of a server
//! that writes its files in a `tempfile.TemporaryDirectory` under the
//! directory it was given (or under `TMPDIR`), and which of them is the
//! server's current run.
//!
//! SGLang's and TensorRT-LLM's `set_prometheus_multiproc_dir()`, and vLLM's
//! `setup_multiprocess_prometheus()` when `PROMETHEUS_MULTIPROC_DIR` is
//! unset, create a `TemporaryDirectory` and write there: a directory named
//! by Python's `tempfile` (`tmp` and eight of `a-z0-9_`), new after every
//! restart, removed by a clean exit and left behind by a killed server.
//!
//! A subdirectory is a *run* when its name is such a name and it holds at
//! least one file named as prometheus_client names them (`<kind>_<pid>.db`)
//! and laid out as it writes them ([`Layout::Written`]): another program's
//! `tempfile.mkdtemp()` with a SQLite `cache.db` is not a run, and an empty
//! subdirectory has nothing to serve or to sum (SGLang and TensorRT-LLM,
//! given `PROMETHEUS_MULTIPROC_DIR`, leave one empty while their files go to
//! the directory itself). Which runs are current is asked of
//! [`super::writers`], the one owner of liveness ([`RunState`]):
//!
//! * where the writers' pids can be seen (a shared process namespace, a
//!   node agent), **current** are the runs with a live writer;
//! * where they cannot be (a sidecar in a pid namespace of its own), current
//!   are the runs whose content is seen moving (values or `used` change
//!   between looks), and the run created last;
//! * when no run has a live writer (the server down or just restarted), the
//!   run created last (its birth time; its modification time where the file
//!   system keeps none; then its name) is current, so the values of a
//!   stopped server stay served until its next run writes its first file;
//! * a run once left out while a newer run stood beside it is *superseded*:
//!   it never becomes current again because the newer one went away (a clean
//!   exit removes its `TemporaryDirectory`), only by being seen live or
//!   changing again. With no run current, none is served (issue 53: a crash
//!   from long ago came back);
//! * **stale** are the others: left by an earlier run (or idle and unseen).
//!   They are not read, and are reported ([`StaleRun`]). Only those whose
//!   writers are all seen to have exited ([`RunState::Dead`]) may be removed.
//!
//! The evidence of each run (its content's hash, whether it was superseded)
//! is kept once, in one [`Runs`] shared by every directory and every source
//! ([`SharedRuns`]: `/metrics`, views, `?name[]=` sets). A run first seen
//! where pids cannot be seen, that would be left out, is looked at a second
//! time after [`SECOND_LOOK`], so a source with no history (`dump`, the
//! first scrape after a start) does not leave out a run being written.
//!
//! Every current run is read with its directory, as prometheus_client's
//! collector would read their files together.

use std::os::unix::ffi::OsStrExt as _;
use std::os::unix::fs::MetadataExt as _;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use rustc_hash::{FxHashMap, FxHashSet};

use super::discover::scan::is_multiprocess_file_name;
use super::writers::activity::{layout_of, Layout};
use super::writers::evidence::{ContentLimits, Evidence};
use super::writers::{RunState, WriterPolicy, Writers, WrittenFile};
use crate::format::file_name::{is_archive_name, is_listed_name, writer_pid};

/// The characters of Python's `tempfile` random names
/// (`tempfile._RandomNameSequence.characters`).
const RANDOM_CHARACTERS: &[u8] = b"abcdefghijklmnopqrstuvwxyz0123456789_";

/// Whether `name` is one that `tempfile.TemporaryDirectory()` (or `mkdtemp`)
/// gives with its default prefix and suffix: `tmp` and eight random
/// characters.
pub fn is_temporary_name(name: &[u8]) -> bool {
    name.len() == 11
        && name.starts_with(b"tmp")
        && name[3..].iter().all(|c| RANDOM_CHARACTERS.contains(c))
}

/// A run left by an earlier start of the server: not read, reported.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StaleRun {
    /// The subdirectory.
    pub path: PathBuf,
    /// Its `*.db` files.
    pub files: usize,
    /// Whether every writer of its files is known to have exited (their
    /// processes can be seen); `false` where they cannot be. Only such a run
    /// may be removed.
    pub writers_dead: bool,
    /// Left out once while a newer run stood beside it, and neither live nor
    /// changing since: never current again because the newer one went away.
    pub superseded: bool,
    /// When anything in it last changed (the newest modification time of the
    /// subdirectory and its files).
    pub last_change: SystemTime,
}

/// What [`Runs::survey`] found in one directory.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Survey {
    /// The current runs, in name order: read with the directory.
    pub current: Vec<PathBuf>,
    /// The stale runs, in name order.
    pub stale: Vec<StaleRun>,
    /// Whether the writers' pids can be seen (else no run is known dead,
    /// and none may be removed).
    pub pids_visible: bool,
}

/// A subdirectory as last listed: its files named as prometheus_client
/// names them, while its identity and times stay the same (a new or removed
/// entry changes them) and the listing was made [`SETTLE`] after its last
/// change (an entry created within the same timestamp tick as the listing
/// does not change them).
#[derive(Debug)]
struct Listed {
    identity: Identity,
    settled: bool,
    files: Vec<(PathBuf, WrittenFile, Layout)>,
}

/// Tells the current runs of directories from the stale ones, across
/// collections (the writers' verdicts and the runs' listings are kept).
#[derive(Debug)]
pub struct Runs {
    writers: Writers,
    listed: FxHashMap<PathBuf, Listed>,
    /// Each surveyed directory's identity and times, with its
    /// temporary-named subdirectories, while it is unchanged.
    parents: FxHashMap<PathBuf, (Identity, Vec<PathBuf>)>,
    /// The runs superseded by a newer one (see the module's documentation).
    superseded: FxHashSet<PathBuf>,
}

/// The one [`Runs`] of a server, shared by every source that reads its
/// directories (`/metrics`, views, `?name[]=` sets): the evidence of each
/// run is kept once.
pub type SharedRuns = Arc<Mutex<Runs>>;

/// How long after the first look at a run, where pids cannot be seen, a
/// second look tells whether it is being written.
pub const SECOND_LOOK: Duration = Duration::from_secs(1);

/// A directory's device, inode, and modification and change times.
type Identity = (u64, u64, [i64; 4]);

/// How long a directory must have been unchanged before its listing of
/// subdirectories is reused (as the reader's listings).
const SETTLE: std::time::Duration = std::time::Duration::from_secs(2);

/// A run found by [`Runs::survey`] before the decision.
struct Found {
    path: PathBuf,
    /// When it was created, in wall-clock seconds.
    created: f64,
    paths: Vec<PathBuf>,
    files: Vec<WrittenFile>,
    last_change: SystemTime,
}

impl Runs {
    /// Runs whose writers' liveness is decided as `policy` says (its
    /// `liveness` only).
    pub fn new(policy: WriterPolicy) -> Self {
        Self::with_evidence(policy, super::writers::evidence::system())
    }

    /// [`Self::new`], deciding from `evidence`.
    pub fn with_evidence(policy: WriterPolicy, evidence: Arc<dyn Evidence>) -> Self {
        let policy = WriterPolicy {
            process_metrics: false,
            compact_dead: false,
            ..policy
        };
        Self {
            writers: Writers::with_evidence(policy, evidence),
            listed: FxHashMap::default(),
            parents: FxHashMap::default(),
            superseded: FxHashSet::default(),
        }
    }

    /// The liveness policy its writers are decided by.
    pub fn policy(&self) -> WriterPolicy {
        self.writers.policy()
    }

    /// Reads at most `limits` of a run's files to tell their content moved.
    pub fn set_content_limits(&mut self, limits: ContentLimits) {
        self.writers.set_content_limits(limits);
    }

    /// Lists the runs in `dir` and tells the current ones from the stale.
    /// A directory without any (the usual case) costs one `readdir`.
    pub fn survey(&mut self, dir: &Path) -> Survey {
        let Some(names) = self.subdirectories(dir) else {
            return Survey::default();
        };
        self.listed
            .retain(|path, _| path.parent() != Some(dir) || names.contains(path));
        let mut found = Vec::new();
        for path in names {
            let Ok(meta) = std::fs::symlink_metadata(&path) else {
                continue;
            };
            let identity = identity_of(&meta);
            let fresh = self
                .listed
                .get(&path)
                .is_none_or(|l| l.identity != identity || !l.settled);
            if fresh {
                let listed_at = SystemTime::now();
                let files = list_files(&path);
                let settled = meta
                    .modified()
                    .is_ok_and(|modified| modified + SETTLE <= listed_at);
                self.listed.insert(
                    path.clone(),
                    Listed {
                        identity,
                        settled,
                        files,
                    },
                );
            }
            let listed = self.listed.get_mut(&path).expect("listed above");
            // A file being created is looked at again until it is laid out.
            for (file, _, layout) in &mut listed.files {
                if *layout == Layout::Pending {
                    *layout = layout_of(file);
                }
            }
            let files: Vec<&(PathBuf, WrittenFile, Layout)> = listed
                .files
                .iter()
                .filter(|(_, _, layout)| *layout == Layout::Written)
                .collect();
            if files.is_empty() {
                continue;
            }
            let modified = meta.modified().unwrap_or(SystemTime::UNIX_EPOCH);
            let last_change = files
                .iter()
                .filter_map(|(file, _, _)| std::fs::metadata(file).ok()?.modified().ok())
                .fold(modified, SystemTime::max);
            let created = meta.created().unwrap_or(modified);
            let created = self.writers.evidence().birth(
                (meta.dev(), meta.ino()),
                created
                    .duration_since(SystemTime::UNIX_EPOCH)
                    .map_or(0.0, |d| d.as_secs_f64()),
            );
            found.push(Found {
                created,
                paths: files.iter().map(|(p, _, _)| p.clone()).collect(),
                files: files.iter().map(|(_, w, _)| *w).collect(),
                last_change,
                path,
            });
        }
        self.decide(dir, found)
    }

    /// The temporary-named subdirectories of `dir`, in name order: read
    /// again only when the directory changed (an entry created, removed or
    /// renamed changes its modification time) or its last listing was made
    /// within [`SETTLE`] of that change (timestamps advance in ticks).
    fn subdirectories(&mut self, dir: &Path) -> Option<Vec<PathBuf>> {
        let meta = std::fs::metadata(dir).ok().filter(|m| m.is_dir())?;
        let identity = identity_of(&meta);
        if let Some((known, names)) = self.parents.get(dir) {
            if *known == identity {
                return Some(names.clone());
            }
        }
        let listed_at = SystemTime::now();
        let entries = std::fs::read_dir(dir).ok()?;
        let mut names: Vec<PathBuf> = entries
            .flatten()
            .filter(|e| is_temporary_name(e.file_name().as_bytes()))
            .filter(|e| e.file_type().is_ok_and(|t| t.is_dir()))
            .map(|e| e.path())
            .collect();
        names.sort();
        let settled = meta
            .modified()
            .is_ok_and(|modified| modified + SETTLE <= listed_at);
        if settled {
            self.parents
                .insert(dir.to_path_buf(), (identity, names.clone()));
        } else {
            self.parents.remove(dir);
        }
        Some(names)
    }

    fn decide(&mut self, dir: &Path, found: Vec<Found>) -> Survey {
        let seen = self.writers.pids_visible();
        let mut states: Vec<_> = found
            .iter()
            .map(|run| self.writers.census(&run.files).states)
            .collect();
        if !seen && self.writers.pids_visible() {
            // A later run's live writer confirmed that writers can be seen:
            // the earlier runs' writers are decided again, now from `/proc`.
            states = found
                .iter()
                .map(|run| self.writers.census(&run.files).states)
                .collect();
        }
        // Forget this directory's runs that are gone (not another
        // directory's: issue 53, each directory wiped the other's).
        let gone = |run: &Path| run.parent() == Some(dir) && !found.iter().any(|f| f.path == run);
        self.writers.retain_runs(|run| !gone(run));
        self.superseded.retain(|run| !gone(run));
        let first_looks: Vec<bool> = found
            .iter()
            .map(|run| !self.writers.looked_at(&run.path))
            .collect();
        let mut runs = self.run_states(&found, &states);
        let newest = |runs: &[RunState], superseded: &FxHashSet<PathBuf>| {
            let any_live = runs.contains(&RunState::Live);
            let newest = found
                .iter()
                .enumerate()
                .filter(|(i, run)| {
                    matches!(runs[*i], RunState::Live | RunState::Changing)
                        || !superseded.contains(&run.path)
                })
                .max_by(|(_, a), (_, b)| {
                    a.created
                        .total_cmp(&b.created)
                        .then_with(|| a.path.cmp(&b.path))
                })
                .map(|(i, _)| i);
            (any_live, newest)
        };
        let (any_live, newest_run) = newest(&runs, &self.superseded);
        let second_look = !self.writers.pids_visible()
            && (0..found.len()).any(|i| {
                first_looks[i]
                    && runs[i] == RunState::Unknown
                    && (any_live || Some(i) != newest_run)
            });
        if second_look {
            // Nothing known of a run that would be left out: look again
            // shortly (a source with no history, `dump`, a first scrape).
            self.writers.evidence().pause(SECOND_LOOK);
            for (run, first) in found.iter().zip(&first_looks) {
                if *first {
                    let paths: Vec<&Path> = run.paths.iter().map(PathBuf::as_path).collect();
                    self.writers.look_again(&run.path, &paths);
                }
            }
            runs = self.run_states(&found, &states);
        }
        let (any_live, newest) = newest(&runs, &self.superseded);
        let newest_key = newest.map(|i| (found[i].created, found[i].path.clone()));
        let newer = |run: &Found| {
            newest_key.as_ref().is_some_and(|(created, path)| {
                created
                    .total_cmp(&run.created)
                    .then_with(|| path.cmp(&run.path))
                    .is_gt()
            })
        };
        let mut survey = Survey {
            pids_visible: self.writers.pids_visible(),
            ..Survey::default()
        };
        for (i, (run, state)) in found.into_iter().zip(runs).enumerate() {
            let current = match state {
                RunState::Live | RunState::Changing => {
                    self.superseded.remove(&run.path);
                    true
                }
                RunState::Dead | RunState::Unknown => !any_live && Some(i) == newest,
            };
            if !current && matches!(state, RunState::Dead | RunState::Unknown) && newer(&run) {
                // Left out beside a newer run.
                self.superseded.insert(run.path.clone());
            }
            if current {
                survey.current.push(run.path);
            } else {
                // Removal needs more than a verdict: no process has any of
                // its writers' pids (a later process given one of them is
                // told apart by clocks only, which a step can fool).
                let writers_dead = state == RunState::Dead
                    && run
                        .files
                        .iter()
                        .all(|f| f.pid.is_none_or(|pid| !self.writers.pid_in_use(pid)));
                survey.stale.push(StaleRun {
                    files: run.files.len(),
                    writers_dead,
                    superseded: self.superseded.contains(&run.path),
                    last_change: run.last_change,
                    path: run.path,
                });
            }
        }
        survey
    }

    /// Each run's [`RunState`] from its files' writer `states`.
    fn run_states(
        &mut self,
        found: &[Found],
        states: &[Vec<super::writers::WriterState>],
    ) -> Vec<RunState> {
        found
            .iter()
            .zip(states)
            .map(|(run, states)| {
                let paths: Vec<&Path> = run.paths.iter().map(PathBuf::as_path).collect();
                self.writers.run_state(&run.path, &paths, states)
            })
            .collect()
    }
}

/// A directory's [`Identity`].
fn identity_of(meta: &std::fs::Metadata) -> Identity {
    (
        meta.dev(),
        meta.ino(),
        [
            meta.mtime(),
            meta.mtime_nsec(),
            meta.ctime(),
            meta.ctime_nsec(),
        ],
    )
}

/// The files of a subdirectory named as prometheus_client names them
/// (`<kind>_<id>.db` with one of its kinds, or the exporter's archives), with what the writer
/// check needs of each and their layout.
fn list_files(dir: &Path) -> Vec<(PathBuf, WrittenFile, Layout)> {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    let mut files = Vec::new();
    for entry in entries.flatten() {
        let name = entry.file_name();
        if !is_listed_name(name.as_bytes()) {
            continue;
        }
        let Ok(meta) = entry.metadata() else { continue };
        if !meta.is_file() {
            continue;
        }
        let Some(born) = meta
            .created()
            .or_else(|_| meta.modified())
            .ok()
            .and_then(|t| t.duration_since(SystemTime::UNIX_EPOCH).ok())
        else {
            continue;
        };
        let name = name.to_string_lossy();
        let (pid, archive) = (writer_pid(&name), is_archive_name(&name));
        if !archive && !is_multiprocess_file_name(&name) {
            continue;
        }
        let path = entry.path();
        let layout = layout_of(&path);
        files.push((
            path,
            WrittenFile {
                pid,
                identity: (meta.dev(), meta.ino()),
                born: born.as_secs_f64(),
                archive,
            },
            layout,
        ));
    }
    files
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_pythons_temporary_names_are_runs() {
        assert!(is_temporary_name(b"tmpk3j9x_ab"));
        assert!(is_temporary_name(b"tmp________"));
        for name in [
            "tmpk3j9x_a",
            "tmpk3j9x_abc",
            "tmpK3J9X_AB",
            "lost+found",
            "default_vllm-7d9f-abcde",
            "tmp.k3j9xab",
        ] {
            assert!(!is_temporary_name(name.as_bytes()), "{name}");
        }
    }

    /// A file as prometheus_client writes one.
    fn written() -> Vec<u8> {
        crate::format::layout::file_bytes(&[("[\"c\", \"c_total\", [], []]", 1.0, 0.0)])
    }

    fn run(dir: &Path, name: &str, pids: &[u32]) -> PathBuf {
        let path = dir.join(name);
        std::fs::create_dir(&path).unwrap();
        for pid in pids {
            std::fs::write(path.join(format!("counter_{pid}.db")), written()).unwrap();
        }
        path
    }

    #[test]
    fn without_visible_writers_the_run_created_last_is_current() {
        let dir = tempfile::tempdir().unwrap();
        let old = run(dir.path(), "tmpzzzzzzzz", &[4_000_001]);
        std::thread::sleep(std::time::Duration::from_millis(20));
        let new = run(dir.path(), "tmpaaaaaaaa", &[4_000_002]);
        run(dir.path(), "tmpempty___", &[]);
        std::fs::create_dir(dir.path().join("lost+found")).unwrap();
        let mut runs = Runs::new(WriterPolicy::exact());
        let survey = runs.survey(dir.path());
        assert_eq!(survey.current, vec![new]);
        assert_eq!(survey.stale.len(), 1);
        assert_eq!(survey.stale[0].path, old);
        assert_eq!(survey.stale[0].files, 1);
        assert!(!survey.stale[0].writers_dead, "liveness off: not known");
    }

    #[test]
    fn a_run_with_a_live_writer_is_current_whatever_its_age() {
        let dir = tempfile::tempdir().unwrap();
        let live = dir.path().join("tmplive____");
        std::fs::create_dir(&live).unwrap();
        // A writer holding its file open, as prometheus_client does: the
        // shell's pid names the file and is `sleep`'s after `exec`.
        let template = dir.path().join("template");
        std::fs::write(&template, written()).unwrap();
        let mut writer = std::process::Command::new("sh")
            .args([
                "-c",
                "cat \"$1\" > \"$0/counter_$$.db\"; exec 3<>\"$0/counter_$$.db\"; exec sleep 60",
            ])
            .arg(&live)
            .arg(&template)
            .spawn()
            .unwrap();
        let file = live.join(format!("counter_{}.db", writer.id()));
        for _ in 0..500 {
            let cmdline = std::fs::read(format!("/proc/{}/cmdline", writer.id())).unwrap();
            if file.exists() && cmdline.starts_with(b"sleep") {
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
        let dead = run(dir.path(), "tmpdead____", &[4_000_003]);
        let policy = WriterPolicy {
            liveness: crate::source::writers::LivenessMode::Proc,
            ..WriterPolicy::default()
        };
        let mut runs = Runs::new(policy);
        let survey = runs.survey(dir.path());
        assert_eq!(survey.current, vec![live]);
        assert_eq!(survey.stale.len(), 1);
        assert_eq!(survey.stale[0].path, dead);
        assert!(survey.stale[0].writers_dead);
        writer.kill().unwrap();
        writer.wait().unwrap();
    }

    /// Issue 47: another program's `tempfile.mkdtemp()` holding a SQLite
    /// `cache.db` became the "current run", and the application's run was
    /// left out: no application series at all.
    #[test]
    fn a_temporary_directory_with_a_sqlite_cache_db_is_not_a_run() {
        let dir = tempfile::tempdir().unwrap();
        let app = run(dir.path(), "tmpapp_____", &[4_000_011]);
        std::thread::sleep(std::time::Duration::from_millis(20));
        let other = dir.path().join("tmpcache___");
        std::fs::create_dir(&other).unwrap();
        let mut sqlite = b"SQLite format 3\0".to_vec();
        sqlite.resize(8192, 0);
        std::fs::write(other.join("cache.db"), &sqlite).unwrap();
        // Named as prometheus_client names files, laid out otherwise.
        std::fs::write(other.join("counter_4000012.db"), &sqlite).unwrap();
        let mut runs = Runs::new(WriterPolicy::default());
        let survey = runs.survey(dir.path());
        assert_eq!(survey.current, vec![app]);
        assert!(survey.stale.is_empty(), "{:?}", survey.stale);
    }

    /// Issue 47: in a pid namespace of its own the exporter served only the
    /// newest of two live runs (vLLM and SGLang sharing a `TMPDIR`).
    #[test]
    fn without_visible_pids_an_older_run_whose_files_change_is_current_too() {
        let dir = tempfile::tempdir().unwrap();
        let older = run(dir.path(), "tmpolder___", &[4_000_021]);
        std::thread::sleep(std::time::Duration::from_millis(20));
        let newer = run(dir.path(), "tmpnewer___", &[4_000_022]);
        let mut runs = Runs::new(WriterPolicy::default());
        let survey = runs.survey(dir.path());
        assert_eq!(survey.current, vec![newer.clone()]);
        assert!(!survey.pids_visible);
        // The older run's writer moves a value in place (as through mmap).
        let file = older.join("counter_4000021.db");
        let moved =
            crate::format::layout::file_bytes(&[("[\"c\", \"c_total\", [], []]", 2.0, 0.0)]);
        std::fs::write(&file, moved).unwrap();
        std::thread::sleep(super::super::writers::activity::CHECK_INTERVAL);
        let survey = runs.survey(dir.path());
        assert_eq!(survey.current, vec![newer, older]);
        assert!(survey.stale.is_empty());
    }
}

#[cfg(test)]
#[path = "temporary_tests.rs"]
mod seam_tests;
