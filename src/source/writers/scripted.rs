//! A scripted [`Evidence`] for tests: a process table, descriptors, clocks
//! and birth times the test sets, so liveness is driven with no real
//! process and no sleep (the unit tests of `source::writers`,
//! `source::temporary` and the state-machine test
//! `pipeline::liveness_model`). Files themselves stay real (their content
//! is hashed by the production code); what each look at a run's content
//! reads of them, and holds at once, is recorded ([`ContentLook`]).

use std::collections::BTreeMap;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use rustc_hash::FxHashMap;

use super::evidence::{Births, ContentFile, ContentLimits, Evidence, ProcessHandle};
use super::procfs::OpenFile;

/// One process of the scripted table.
#[derive(Debug, Clone)]
struct Process {
    /// Seconds since boot.
    start: f64,
    /// Its open files; `None`: its descriptors cannot be read.
    open: Option<Vec<OpenFile>>,
    /// Its pid in its innermost namespace, where it differs.
    innermost: Option<u32>,
    /// Tells it from a later process given the same pid.
    generation: u64,
    /// Its parent's pid (0: outside the namespace).
    parent: u32,
}

/// One look at a run's content ([`Evidence::content`]), as recorded.
#[derive(Debug, Clone)]
pub(crate) struct ContentLook {
    /// The limits it was given.
    pub(crate) limits: ContentLimits,
    /// Each file it opened, in order.
    pub(crate) files: Vec<FileRead>,
}

/// What a look read of one file.
#[derive(Debug, Clone)]
pub(crate) struct FileRead {
    pub(crate) path: PathBuf,
    /// Its `used` header and length when opened (read apart, not counted).
    pub(crate) used: u64,
    pub(crate) len: u64,
    /// Bytes read.
    pub(crate) read: u64,
    /// The largest read asked at once (bytes held at once, at least).
    pub(crate) largest: usize,
}

#[derive(Debug)]
struct State {
    own_pid: u32,
    /// The exporter's other threads (`/proc/<tid>` resolves for each).
    own_threads: Vec<u32>,
    own_start: f64,
    /// What the exporter's threads hold open (read-only).
    own_open: Vec<OpenFile>,
    processes: BTreeMap<u32, Process>,
    generations: u64,
    base: Instant,
    elapsed: Duration,
    /// Seconds since boot at `base`.
    boot_at_base: f64,
    /// The wall clock less the boot clock (moves when the wall clock steps).
    wall_minus_boot: f64,
    births: FxHashMap<(u64, u64), f64>,
    /// The exporter's parent (0: outside its namespace).
    own_parent: u32,
    /// The looks at runs' content since last taken.
    looks: Vec<ContentLook>,
}

type PauseHook = Box<dyn FnMut(Duration) + Send>;

/// The scripted evidence; clones share one table and one clock.
#[derive(Clone)]
pub(crate) struct Scripted {
    state: Arc<Mutex<State>>,
    on_pause: Arc<Mutex<Option<PauseHook>>>,
    births: Arc<Births>,
}

impl std::fmt::Debug for Scripted {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Scripted").finish_non_exhaustive()
    }
}

#[derive(Debug)]
struct Handle {
    state: Arc<Mutex<State>>,
    host: u32,
    generation: u64,
    start: f64,
}

impl ProcessHandle for Handle {
    fn start_time(&self) -> Option<f64> {
        let state = lock(&self.state);
        let same = state
            .processes
            .get(&self.host)
            .is_some_and(|p| p.generation == self.generation);
        same.then_some(self.start)
    }
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

impl Scripted {
    /// An exporter of pid `own_pid` with threads `own_threads`, started at
    /// boot time 100 s, wall clock 1,700,000,000 s then.
    pub(crate) fn new(own_pid: u32, own_threads: Vec<u32>) -> Self {
        Self {
            state: Arc::new(Mutex::new(State {
                own_pid,
                own_threads,
                own_start: 100.0,
                own_open: Vec::new(),
                processes: BTreeMap::new(),
                generations: 0,
                base: Instant::now(),
                elapsed: Duration::ZERO,
                boot_at_base: 100.0,
                wall_minus_boot: 1_700_000_000.0 - 100.0,
                births: FxHashMap::default(),
                own_parent: 0,
                looks: Vec::new(),
            })),
            on_pause: Arc::new(Mutex::new(None)),
            births: Arc::default(),
        }
    }

    /// Another exporter process on the same machine (`dump`): the same
    /// processes and clocks, files first seen afresh.
    pub(crate) fn other_process(&self) -> Self {
        Self {
            births: Arc::default(),
            ..self.clone()
        }
    }

    /// Seconds since boot now.
    pub(crate) fn boot(&self) -> f64 {
        let s = lock(&self.state);
        s.boot_at_base + s.elapsed.as_secs_f64()
    }

    /// The wall clock now.
    pub(crate) fn wall(&self) -> f64 {
        let s = lock(&self.state);
        s.boot_at_base + s.elapsed.as_secs_f64() + s.wall_minus_boot
    }

    /// Starts process `host` now, holding `open` (`None`: unreadable).
    pub(crate) fn spawn(&self, host: u32, open: Option<Vec<OpenFile>>, innermost: Option<u32>) {
        self.spawn_under(host, 0, open, innermost);
    }

    /// Starts process `host` now as a child of `parent`.
    pub(crate) fn spawn_under(
        &self,
        host: u32,
        parent: u32,
        open: Option<Vec<OpenFile>>,
        innermost: Option<u32>,
    ) {
        let start = self.boot();
        let mut s = lock(&self.state);
        s.generations += 1;
        let generation = s.generations;
        s.processes.insert(
            host,
            Process {
                start,
                open,
                innermost,
                generation,
                parent,
            },
        );
    }

    /// The exporter's parent is `parent` (0: outside its namespace).
    pub(crate) fn set_own_parent(&self, parent: u32) {
        lock(&self.state).own_parent = parent;
    }

    /// The looks at runs' content since the last call.
    pub(crate) fn take_content_looks(&self) -> Vec<ContentLook> {
        std::mem::take(&mut lock(&self.state).looks)
    }

    /// Process `host` exits.
    pub(crate) fn exit(&self, host: u32) {
        lock(&self.state).processes.remove(&host);
    }

    /// The exporter's threads now hold `open` (read-only).
    pub(crate) fn own_hold(&self, open: Vec<OpenFile>) {
        lock(&self.state).own_open = open;
    }

    /// Time passes (both clocks).
    pub(crate) fn advance(&self, by: Duration) {
        lock(&self.state).elapsed += by;
    }

    /// The wall clock steps by `by` seconds (either way).
    pub(crate) fn step_wall(&self, by: f64) {
        lock(&self.state).wall_minus_boot += by;
    }

    /// File or directory `identity` is born now (wall clock).
    pub(crate) fn born_now(&self, identity: (u64, u64)) {
        let wall = self.wall();
        lock(&self.state).births.insert(identity, wall);
    }

    /// Has `hook` run at each [`Evidence::pause`] (after time passed): what
    /// the world does meanwhile.
    pub(crate) fn on_pause(&self, hook: impl FnMut(Duration) + Send + 'static) {
        *lock(&self.on_pause) = Some(Box::new(hook));
    }
}

impl Evidence for Scripted {
    fn own_pid(&self) -> u32 {
        lock(&self.state).own_pid
    }

    fn own_task(&self, host: u32) -> bool {
        let s = lock(&self.state);
        host == s.own_pid || s.own_threads.contains(&host)
    }

    fn processes(&self) -> Vec<u32> {
        let s = lock(&self.state);
        std::iter::once(s.own_pid)
            .chain(s.processes.keys().copied())
            .collect()
    }

    fn parent_pid(&self, host: u32) -> Option<u32> {
        let s = lock(&self.state);
        if host == s.own_pid || s.own_threads.contains(&host) {
            return Some(s.own_parent);
        }
        s.processes.get(&host).map(|p| p.parent)
    }

    fn start_time(&self, host: u32) -> Option<f64> {
        let s = lock(&self.state);
        if host == s.own_pid || s.own_threads.contains(&host) {
            return Some(s.own_start);
        }
        s.processes.get(&host).map(|p| p.start)
    }

    fn open_files(&self, host: u32) -> Option<Vec<OpenFile>> {
        let s = lock(&self.state);
        if host == s.own_pid || s.own_threads.contains(&host) {
            return Some(s.own_open.clone());
        }
        s.processes.get(&host).and_then(|p| p.open.clone())
    }

    fn innermost_pid(&self, host: u32) -> Option<u32> {
        let s = lock(&self.state);
        if host == s.own_pid || s.own_threads.contains(&host) {
            return Some(host);
        }
        s.processes.get(&host).map(|p| p.innermost.unwrap_or(host))
    }

    fn handle(&self, host: u32) -> Option<Box<dyn ProcessHandle>> {
        let s = lock(&self.state);
        let (start, generation) = if host == s.own_pid || s.own_threads.contains(&host) {
            (s.own_start, 0)
        } else {
            let p = s.processes.get(&host)?;
            (p.start, p.generation)
        };
        Some(Box::new(Handle {
            state: self.state.clone(),
            host,
            generation,
            start,
        }))
    }

    fn now(&self) -> Instant {
        let s = lock(&self.state);
        s.base + s.elapsed
    }

    fn clocks(&self) -> Option<(f64, f64)> {
        Some((self.boot(), self.wall()))
    }

    fn births(&self) -> &Births {
        &self.births
    }

    fn birth(&self, identity: (u64, u64), recorded: f64) -> f64 {
        lock(&self.state)
            .births
            .get(&identity)
            .copied()
            .unwrap_or(recorded)
    }

    fn open_content(&self, path: &Path) -> Option<Box<dyn ContentFile>> {
        let file = std::fs::File::open(path).ok()?;
        let len = file.metadata().map_or(0, |m| m.len());
        let mut header = [0u8; 4];
        let used = std::os::unix::fs::FileExt::read_exact_at(&file, &mut header, 0)
            .map_or(0, |()| u64::from(u32::from_ne_bytes(header)));
        let mut s = lock(&self.state);
        let Some(look_index) = s.looks.len().checked_sub(1) else {
            return Some(Box::new(file));
        };
        let look = &mut s.looks[look_index];
        let limit = look.limits.max_file_bytes;
        look.files.push(FileRead {
            path: path.to_path_buf(),
            used,
            len,
            read: 0,
            largest: 0,
        });
        let at = (look_index, look.files.len() - 1);
        Some(Box::new(Recorded {
            file,
            state: self.state.clone(),
            at,
            limit,
        }))
    }

    fn content(&self, files: &[&Path], limits: ContentLimits) -> u64 {
        lock(&self.state).looks.push(ContentLook {
            limits,
            files: Vec::new(),
        });
        super::evidence::signature_and_cost(&|path: &Path| self.open_content(path), files, limits).0
    }

    fn pause(&self, duration: Duration) {
        self.advance(duration);
        if let Some(hook) = lock(&self.on_pause).as_mut() {
            hook(duration);
        }
    }
}

/// A file opened by a look, its reads recorded. A read of more than the
/// look's limits at once is refused (as a machine without that memory
/// would), after it is recorded.
struct Recorded {
    file: std::fs::File,
    state: Arc<Mutex<State>>,
    /// The look and the file in it.
    at: (usize, usize),
    limit: u64,
}

impl ContentFile for Recorded {
    fn size(&self) -> u64 {
        self.file.size()
    }

    fn read_at(&mut self, buf: &mut [u8], at: u64) -> io::Result<usize> {
        let refused = buf.len() as u64 > self.limit;
        let result = if refused {
            Err(io::Error::other("a read over the look's limits"))
        } else {
            ContentFile::read_at(&mut self.file, buf, at)
        };
        let mut s = lock(&self.state);
        if let Some(read) = s
            .looks
            .get_mut(self.at.0)
            .and_then(|l| l.files.get_mut(self.at.1))
        {
            read.largest = read.largest.max(buf.len());
            read.read += result.as_ref().map_or(0, |n| *n as u64);
            if refused {
                read.read += buf.len() as u64;
            }
        }
        result
    }
}
