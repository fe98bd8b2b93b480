//! What the shared collection of `/metrics` ([`super::shared`]) and each
//! view's source ([`super::views`]) both need around a collection: the
//! coalescing of concurrent calls into one run ([`Coalescer`]), the files
//! the watcher saw modified since the last run ([`Rechecks`]), and whether
//! `/metrics`'s collection is in flight, which the views ask ([`InFlight`]).

use std::collections::HashSet;
use std::path::PathBuf;
use std::sync::{Condvar, Mutex, MutexGuard};

use super::Source;

/// Files the watcher saw modified since the last collection: their maps are
/// checked with `stat` before being trusted again
/// (see [`crate::source::Reader::recheck`]).
#[derive(Debug, Default)]
pub struct Rechecks(Mutex<Pending>);

#[derive(Debug, Default)]
struct Pending {
    all: bool,
    paths: HashSet<PathBuf>,
}

/// Beyond this many pending paths, every file is rechecked instead.
const MAX_PENDING_RECHECKS: usize = 4096;

impl Rechecks {
    fn lock(&self) -> MutexGuard<'_, Pending> {
        self.0.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Has the next collection check these files.
    pub fn add(&self, paths: impl IntoIterator<Item = PathBuf>) {
        let mut pending = self.lock();
        if !pending.all {
            pending.paths.extend(paths);
            if pending.paths.len() > MAX_PENDING_RECHECKS {
                pending.all = true;
                pending.paths.clear();
            }
        }
    }

    /// Has the next collection check every file.
    pub fn add_all(&self) {
        let mut pending = self.lock();
        pending.all = true;
        pending.paths.clear();
    }

    /// Hands what is pending to `source` (for the collection about to run)
    /// and starts again from nothing.
    pub fn apply_to(&self, source: &mut Source) {
        let pending = std::mem::take(&mut *self.lock());
        if pending.all {
            source.recheck_all();
        } else {
            for path in &pending.paths {
                source.recheck(path);
            }
        }
    }
}

/// Whether a collection is in flight now: what a view's poll asks of the
/// shared collection of `/metrics` ([`super::views::ViewSources::entry`]).
pub trait InFlight {
    /// Whether a collection is in flight now.
    fn in_flight(&self) -> bool;
}

/// Coalesces concurrent calls: a call that arrives while another runs
/// waits for it and shares its result (like client_golang's
/// `CoalesceGather`), so several polls cost one collection.
#[derive(Debug)]
pub struct Coalescer<T> {
    flight: Mutex<Flight<T>>,
    finished: Condvar,
}

#[derive(Debug)]
struct Flight<T> {
    running: bool,
    /// Incremented each time a run ends.
    generation: u64,
    /// The last run's result (`None` after a panic).
    last: Option<T>,
}

impl<T> Default for Coalescer<T> {
    fn default() -> Self {
        Self {
            flight: Mutex::new(Flight {
                running: false,
                generation: 0,
                last: None,
            }),
            finished: Condvar::new(),
        }
    }
}

/// Ends a run on every path, a panic too (by `Drop`): the waiters wake up.
struct Running<'a, T> {
    coalescer: &'a Coalescer<T>,
    result: Option<T>,
}

impl<T> Drop for Running<'_, T> {
    fn drop(&mut self) {
        let mut flight = self.coalescer.lock();
        flight.running = false;
        flight.generation += 1;
        flight.last = self.result.take();
        drop(flight);
        self.coalescer.finished.notify_all();
    }
}

impl<T> Coalescer<T> {
    fn lock(&self) -> MutexGuard<'_, Flight<T>> {
        self.flight.lock().unwrap_or_else(|e| e.into_inner())
    }
}

impl<T: Clone> Coalescer<T> {
    /// Whether a run is in flight.
    pub fn running(&self) -> bool {
        self.lock().running
    }

    /// Runs `run`, or, while another run is in flight, waits for it and
    /// returns its result (runs again if it panicked).
    pub fn run(&self, run: impl FnOnce() -> T) -> T {
        let mut flight = self.lock();
        while flight.running {
            let joined = flight.generation;
            while flight.generation == joined {
                flight = self
                    .finished
                    .wait(flight)
                    .unwrap_or_else(|e| e.into_inner());
            }
            if let Some(last) = &flight.last {
                tracing::debug!("Joined a collection in flight.");
                return last.clone();
            }
        }
        flight.running = true;
        drop(flight);
        self.finish(run)
    }

    /// Runs `run` unless another run is in flight (then `None`): never
    /// waits.
    pub fn try_run(&self, run: impl FnOnce() -> T) -> Option<T> {
        let mut flight = self.lock();
        if flight.running {
            return None;
        }
        flight.running = true;
        drop(flight);
        Some(self.finish(run))
    }

    fn finish(&self, run: impl FnOnce() -> T) -> T {
        let mut running = Running {
            coalescer: self,
            result: None,
        };
        let result = run();
        running.result = Some(result.clone());
        result
    }
}

#[cfg(test)]
mod tests {
    use std::panic::{catch_unwind, AssertUnwindSafe};
    use std::sync::Arc;
    use std::time::Duration;

    use super::*;

    #[test]
    fn a_panic_wakes_the_coalesced_waiters_and_the_next_call_runs_again() {
        let coalescer = Arc::new(Coalescer::<u32>::default());
        let started = Arc::new(std::sync::Barrier::new(2));
        let runner = {
            let (coalescer, started) = (coalescer.clone(), started.clone());
            std::thread::spawn(move || {
                catch_unwind(AssertUnwindSafe(|| {
                    coalescer.run(|| {
                        started.wait();
                        std::thread::sleep(Duration::from_millis(50));
                        panic!("a bug")
                    })
                }))
                .is_err()
            })
        };
        started.wait();
        assert_eq!(coalescer.try_run(|| 1), None, "never waits");
        // Joins the run that panics, then runs itself.
        assert_eq!(coalescer.run(|| 2), 2);
        assert!(runner.join().unwrap());
        assert!(!coalescer.running());
    }
}
