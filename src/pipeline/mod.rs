//! The pipeline shared by `dump` and `serve`: collect (a set of directories
//! and files, a parent's subdirectories as one pod each, or every directory
//! discovered through `/proc` as one pod and container each), transform,
//! encode.
//!
//! ```text
//!  Source::collect ──► Gathered { families, problems, events } ──► render(config, …) ──► bytes
//!  (source + merge)                                                 (transform + expose)
//! ```
//!
//! What went wrong along the way comes back as data (problems and
//! [`Event`]s), never as a failure: `dump` prints it, `serve` logs it once
//! and counts it (`crate::server`'s telemetry).

pub mod coalesce;
mod collector;
pub mod compaction;
pub mod discovered;
pub mod discovered_labels;
mod fair;
pub mod lifecycle;
#[cfg(test)]
mod liveness_model;
pub mod part_status;
pub mod parts;
pub mod per_writer;
pub mod rendered;
pub mod shared;
pub mod subdirectories;
pub mod views;

use std::path::{Path, PathBuf};
use std::sync::Arc;

pub use collector::{CollectStats, Collection, Collector};

use crate::expose::encode::{encode, Escaping, Format};
use crate::model::MetricFamily;
use crate::source::link_policy::LinkPolicy;
use crate::source::temporary::{Runs, SharedRuns, StaleRun};
use crate::source::writers::evidence::{self, ContentLimits, Evidence};
use crate::source::writers::WriterPolicy;
use crate::source::{Input, MemoryBudget};
use crate::transform::combine::Conflict;
use crate::transform::config::Config;
use crate::transform::views::SourceFilter;
use crate::transform::{self, Collision};
use discovered::{DiscoverOptions, DiscoveredReader, DiscoveryReport};
use subdirectories::SubdirectoryReader;

/// Where the pipeline reads from.
#[derive(Debug)]
pub struct Source {
    inputs: Vec<Input>,
    link_policy: LinkPolicy,
    memory_budget: Option<Arc<MemoryBudget>>,
    writer_policy: WriterPolicy,
    /// The temporary subdirectories' runs of the inputs (plain inputs with
    /// `temporary_runs` only; see [`crate::source::temporary`]).
    runs: Option<Box<TemporaryRuns>>,
    /// Where liveness evidence comes from (see
    /// [`crate::source::writers::evidence`]).
    evidence: Arc<dyn Evidence>,
    kind: Kind,
}

/// The runs of the input directories' temporary subdirectories, and the
/// stale ones already reported.
#[derive(Debug)]
struct TemporaryRuns {
    /// The policy `runs` was made with.
    policy: WriterPolicy,
    /// Shared with the views cut from this source (see [`SharedRuns`]).
    runs: SharedRuns,
    reported: std::collections::BTreeSet<PathBuf>,
    /// Whether [`Event::StaleRunsUnremovable`] was sent (once per process).
    unremovable_reported: bool,
}

#[derive(Debug)]
enum Kind {
    /// The inputs themselves.
    Inputs(Box<Collector>),
    /// Every subdirectory of the inputs (parents), labelled.
    Subdirectories(Box<SubdirectoryReader>),
    /// Every directory discovered through `/proc`, labelled with its pod.
    Discovered(Box<DiscoveredReader>),
}

/// Something operators should hear about that is not a bad file (bad files
/// are the collection's problems).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Event {
    /// A subdirectory is read for the first time.
    SubdirectoryAppeared(PathBuf),
    /// A subdirectory read last time is gone.
    SubdirectoryGone(PathBuf),
    /// A subdirectory left out: an earlier parent has one of the same name.
    DuplicateSubdirectory(PathBuf),
    /// Subdirectories disagree about a family's type or help.
    FamilyConflict(Conflict),
    /// With `per_writer.ray_logs`: Ray's log directory cannot be read, so
    /// writers are labelled with their pids.
    RayLogsUnreadable {
        /// The directory.
        path: PathBuf,
        /// Why.
        error: String,
    },
    /// With `per_writer`: a writer's family has another type than an earlier
    /// writer's of the same name, and is left out ([`Conflict::part`] is the
    /// writer).
    WriterConflict(Conflict),
    /// Discovered directories disagree about a family's type or help
    /// ([`Conflict::part`] names the part: `namespace/pod/container`).
    DiscoveredConflict(Conflict),
    /// A temporary subdirectory is left out from now on: a run left by an
    /// earlier start (see [`crate::source::temporary`]).
    StaleRun(StaleRun),
    /// With `--dir.remove-stale-subdirectories`: a stale run was removed.
    StaleRunRemoved(PathBuf),
    /// With `--dir.remove-stale-subdirectories`: a stale run (or the hidden
    /// leftover of an interrupted removal) could not be removed.
    StaleRunNotRemoved {
        /// The subdirectory.
        path: PathBuf,
        /// Why.
        error: String,
    },
    /// With `--dir.remove-stale-subdirectories`: stale runs are kept
    /// because their writers' pids cannot be seen (the exporter in a pid
    /// namespace of its own), so nothing shows that their writers exited.
    /// Sent once.
    StaleRunsUnremovable(PathBuf),
}

/// What a collection found in the temporary subdirectories.
#[derive(Debug, Clone, Default)]
pub struct RunsReport {
    /// The current runs, read with their directory.
    pub current: Vec<PathBuf>,
    /// The runs left by earlier starts, left out.
    pub stale: Vec<StaleRun>,
}

/// The result of one [`Source::collect`].
#[derive(Debug, Clone, Default)]
pub struct Gathered {
    /// The merged (and, for subdirectories, combined) families, their
    /// problems and statistics.
    pub collection: Collection,
    /// What else happened.
    pub events: Vec<Event>,
    /// With subdirectories: how many were read.
    pub subdirectories: Option<usize>,
    /// With `--discover.processes`: what discovery did and found.
    pub discovery: Option<DiscoveryReport>,
    /// The current runs of the directories' temporary subdirectories (read
    /// with them) and the stale ones (left out); see
    /// [`crate::source::temporary`].
    pub runs: RunsReport,
    /// With subdirectories or `--discover.processes`: each part's labels,
    /// directories, files and writers.
    pub parts: Vec<part_status::PartStatus>,
}

impl Gathered {
    /// Whether the directories answered in full: no file failed to read
    /// ([`crate::source::SkipReason::is_transient`]), no part's read
    /// panicked, and no discovered part was capped or late.
    pub fn complete(&self) -> bool {
        self.collection
            .problems
            .iter()
            .all(|p| !p.reason.is_transient())
            && self.collection.stats.parts_panicked == 0
            && self.discovery.as_ref().is_none_or(|d| {
                d.parts
                    .iter()
                    .all(|c| c.capped.is_none() && c.late.is_none())
            })
    }
}

impl Source {
    /// A source reading `inputs` (directories in `readdir` order, files as
    /// given); with `subdirectories_label`, reading every subdirectory of
    /// the input directories as its own metrics directory, labelled with its
    /// name.
    pub fn new(
        inputs: Vec<Input>,
        subdirectories_label: Option<Arc<str>>,
        link_policy: LinkPolicy,
    ) -> Self {
        let kind = match subdirectories_label {
            None => Kind::Inputs(Box::new(Collector::with_link_policy(link_policy))),
            Some(label) => Kind::Subdirectories(Box::new(SubdirectoryReader::new(
                inputs.iter().map(|i| i.path().to_path_buf()).collect(),
                label,
                link_policy,
            ))),
        };
        Self {
            inputs,
            link_policy,
            memory_budget: None,
            writer_policy: WriterPolicy::exact(),
            runs: None,
            evidence: evidence::system(),
            kind,
        }
    }

    /// A source reading every directory discovered through `/proc` (see
    /// [`discovered`]), following no symbolic link in them.
    pub fn discovered(options: DiscoverOptions) -> Self {
        Self {
            inputs: Vec::new(),
            link_policy: LinkPolicy::NoLinks,
            memory_budget: None,
            writer_policy: WriterPolicy::exact(),
            runs: None,
            evidence: evidence::system(),
            kind: Kind::Discovered(Box::new(DiscoveredReader::new(options))),
        }
    }

    /// Decides the writers' and runs' liveness from `evidence` (the running
    /// system's until then; a test drives it with its own), in every part
    /// of subdirectories or discovered directories too, those to come
    /// included.
    pub fn with_evidence(mut self, evidence: Arc<dyn Evidence>) -> Self {
        self.evidence = evidence;
        self.runs = None;
        self.apply_budget();
        self
    }

    /// With `--discover.processes`: discovery learns of the processes from
    /// `processes` ([`DiscoveredReader::set_processes`]; `/proc` until then,
    /// a test drives it with its own). Nothing for other sources.
    pub fn with_processes(
        mut self,
        processes: Arc<dyn crate::source::discover::Processes>,
    ) -> Self {
        if let Kind::Discovered(reader) = &mut self.kind {
            reader.set_processes(processes);
        }
        self
    }

    /// Applies `policy` to the writers (see [`crate::source::writers`]);
    /// until then they are treated as prometheus_client does
    /// ([`WriterPolicy::exact`]).
    pub fn with_writer_policy(mut self, policy: WriterPolicy) -> Self {
        self.writer_policy = policy;
        self.apply_budget();
        self
    }

    /// Shares `budget` with every reader of this source (see
    /// [`crate::source::MemoryBudget`]).
    pub fn with_memory_budget(mut self, budget: Option<Arc<MemoryBudget>>) -> Self {
        self.memory_budget = budget;
        self.apply_budget();
        self
    }

    /// Applies the memory budget and the writer policy to the readers.
    fn apply_budget(&mut self) {
        let budget = self.memory_budget.clone();
        let reads_runs = matches!(self.kind, Kind::Inputs(_)) && self.writer_policy.temporary_runs;
        if !reads_runs {
            self.runs = None;
        } else if self
            .runs
            .as_ref()
            .is_none_or(|r| r.policy != self.writer_policy)
        {
            self.runs = Some(Box::new(TemporaryRuns {
                policy: self.writer_policy,
                runs: Arc::new(std::sync::Mutex::new(Runs::with_evidence(
                    self.writer_policy,
                    self.evidence.clone(),
                ))),
                reported: std::collections::BTreeSet::new(),
                unremovable_reported: false,
            }));
        }
        if let (Some(runs), Some(budget)) = (&self.runs, &budget) {
            // A run's content is read no further than a collection reads.
            lock(&runs.runs).set_content_limits(ContentLimits {
                max_file_bytes: budget.limit() as u64,
            });
        }
        let evidence = self.evidence.clone();
        match &mut self.kind {
            Kind::Inputs(collector) => {
                collector.set_memory_budget(budget);
                collector.set_evidence(evidence);
                collector.set_writer_policy(self.writer_policy);
            }
            Kind::Subdirectories(reader) => {
                reader.set_memory_budget(budget);
                reader.set_evidence(evidence);
                reader.set_writer_policy(self.writer_policy);
            }
            Kind::Discovered(reader) => {
                reader.parts().set_memory_budget(budget);
                reader.parts().set_evidence(evidence);
                reader.parts().set_writer_policy(self.writer_policy);
            }
        }
    }

    /// Serves each writer's series apart as `config` says, or merged
    /// (`None`); see [`per_writer`]. Takes effect at the next collection.
    pub fn set_per_writer(&mut self, config: Option<&crate::transform::config::PerWriter>) {
        match &mut self.kind {
            Kind::Inputs(collector) => collector.set_per_writer(config),
            Kind::Subdirectories(reader) => reader.set_per_writer(config),
            Kind::Discovered(reader) => reader.set_per_writer(config),
        }
    }

    /// A source for a view: the same inputs, links, memory budget and
    /// writers' liveness, reading only the records of the families `filter`
    /// keeps (values loaded, merged and served only for them), with the
    /// writers' `process_*` families only if `process_metrics` (and the
    /// policy) says so, and never compacting (the source the view is cut
    /// from does). `None` for subdirectories and discovered directories
    /// (a view is then cut from a whole collection).
    pub fn view(&self, filter: SourceFilter, process_metrics: bool) -> Option<Self> {
        self.view_base()
            .map(|base| base.source(filter, process_metrics))
    }

    /// What [`Self::view`] makes a view's source from (kept by
    /// [`views::ViewSources`], which makes its sources without this one);
    /// `None` for subdirectories and discovered directories.
    pub fn view_base(&self) -> Option<views::ViewBase> {
        matches!(self.kind, Kind::Inputs(_)).then(|| views::ViewBase {
            inputs: self.inputs.clone(),
            link_policy: self.link_policy,
            memory_budget: self.memory_budget.clone(),
            writer_policy: self.writer_policy,
            runs: self.runs.as_ref().map(|r| r.runs.clone()),
            evidence: self.evidence.clone(),
        })
    }

    /// A view's source made from `base` (see [`Self::view`]).
    fn of_view(base: &views::ViewBase, filter: SourceFilter, process_metrics: bool) -> Self {
        let mut collector = Collector::with_link_policy(base.link_policy);
        collector.set_key_filter(Some(filter));
        let writer_policy = WriterPolicy {
            process_metrics: base.writer_policy.process_metrics && process_metrics,
            compact_dead: false,
            remove_stale_runs: false,
            ..base.writer_policy
        };
        let source = Self {
            inputs: base.inputs.clone(),
            link_policy: base.link_policy,
            memory_budget: None,
            writer_policy: WriterPolicy::exact(),
            runs: None,
            evidence: evidence::system(),
            kind: Kind::Inputs(Box::new(collector)),
        };
        let mut source = source
            .with_evidence(base.evidence.clone())
            .with_memory_budget(base.memory_budget.clone())
            .with_writer_policy(writer_policy);
        // The runs' evidence is the main source's: kept once (issue 53).
        if let (Some(runs), Some(shared)) = (&mut source.runs, &base.runs) {
            runs.runs = shared.clone();
        }
        source
    }

    /// Bytes this source's readers charge to the memory budget now (0
    /// without a budget; plain inputs only).
    pub fn charged(&self) -> usize {
        match &self.kind {
            Kind::Inputs(collector) => collector.charged(),
            _ => 0,
        }
    }

    /// The inputs.
    pub fn inputs(&self) -> &[Input] {
        &self.inputs
    }

    /// Whether subdirectories are read (`--dir.subdirectories-label`).
    pub fn reads_subdirectories(&self) -> bool {
        matches!(self.kind, Kind::Subdirectories(_))
    }

    /// The names of the labels that tell the parts apart (the subdirectories'
    /// label; the discovered parts' labels); none for plain inputs.
    pub fn part_label_names(&self) -> Vec<Arc<str>> {
        match &self.kind {
            Kind::Inputs(_) => Vec::new(),
            Kind::Subdirectories(reader) => vec![reader.label()],
            Kind::Discovered(reader) => reader.options().labels.names(),
        }
    }

    /// Whether the directories are discovered (`--discover.processes`).
    pub fn discovers(&self) -> bool {
        matches!(self.kind, Kind::Discovered(_))
    }

    /// The next collection's scrape asks for an answer within `timeout`
    /// (discovered directories only: their parts get a share of it, see
    /// [`DiscoveredReader::set_request_timeout`]).
    pub fn set_request_timeout(&mut self, timeout: Option<std::time::Duration>) {
        if let Kind::Discovered(reader) = &mut self.kind {
            reader.set_request_timeout(timeout);
        }
    }

    /// Has the next collection check this file with `stat` before trusting
    /// its map (see [`crate::source::Reader::recheck`]).
    pub fn recheck(&mut self, path: &Path) {
        match &mut self.kind {
            Kind::Inputs(collector) => collector.recheck(path),
            Kind::Subdirectories(reader) => reader.recheck(path),
            Kind::Discovered(reader) => reader.parts().recheck(path),
        }
    }

    /// [`Self::recheck`] for every file.
    pub fn recheck_all(&mut self) {
        match &mut self.kind {
            Kind::Inputs(collector) => collector.recheck_all(),
            Kind::Subdirectories(reader) => reader.recheck_all(),
            Kind::Discovered(reader) => reader.parts().recheck_all(),
        }
    }

    /// Forgets everything cached (after a bug made a collection panic).
    /// Discovered directories stay open (their writers may be gone).
    pub fn reset(&mut self) {
        if let Kind::Discovered(reader) = &mut self.kind {
            reader.reset(self.memory_budget.clone(), self.writer_policy);
            return;
        }
        if let Kind::Inputs(collector) = &mut self.kind {
            collector.release_budget();
        }
        if let Kind::Subdirectories(reader) = &mut self.kind {
            reader.release_budget();
        }
        self.kind = match &self.kind {
            Kind::Inputs(_) => {
                Kind::Inputs(Box::new(Collector::with_link_policy(self.link_policy)))
            }
            Kind::Subdirectories(reader) => {
                Kind::Subdirectories(Box::new(SubdirectoryReader::new(
                    reader.parents().to_vec(),
                    reader.label(),
                    self.link_policy,
                )))
            }
            Kind::Discovered(_) => return,
        };
        self.apply_budget();
    }

    /// Lists, reads and merges the inputs.
    pub fn collect(&mut self) -> Gathered {
        self.collect_since(None)
    }

    /// [`Self::collect`], for a caller that holds the families of merge
    /// `held`: see [`Collector::collect_since`]. Subdirectories are always
    /// merged anew.
    pub fn collect_since(&mut self, held: Option<u64>) -> Gathered {
        match &mut self.kind {
            Kind::Inputs(collector) => {
                let mut events = Vec::new();
                let (inputs, runs) = match self.runs.as_deref_mut() {
                    Some(runs) => runs.expand(&self.inputs, self.writer_policy, &mut events),
                    None => (
                        std::borrow::Cow::Borrowed(&self.inputs[..]),
                        RunsReport::default(),
                    ),
                };
                let mut collection = collector.collect_since(&inputs, held);
                events.extend(
                    std::mem::take(&mut collection.conflicts)
                        .into_iter()
                        .map(Event::WriterConflict)
                        .chain(ray_logs_event(&mut collection)),
                );
                Gathered {
                    collection,
                    events,
                    subdirectories: None,
                    discovery: None,
                    runs,
                    parts: Vec::new(),
                }
            }
            Kind::Subdirectories(reader) => {
                let mut result = reader.collect();
                let events = (result.appeared.into_iter().map(Event::SubdirectoryAppeared))
                    .chain(result.disappeared.into_iter().map(Event::SubdirectoryGone))
                    .chain(
                        result
                            .duplicates
                            .into_iter()
                            .map(Event::DuplicateSubdirectory),
                    )
                    .chain(result.conflicts.into_iter().map(Event::FamilyConflict))
                    .chain(
                        result
                            .writer_conflicts
                            .into_iter()
                            .map(Event::WriterConflict),
                    )
                    .chain(ray_logs_event(&mut result.collection))
                    .collect();
                Gathered {
                    collection: result.collection,
                    events,
                    subdirectories: Some(result.subdirectories),
                    discovery: None,
                    runs: RunsReport::default(),
                    parts: result.statuses,
                }
            }
            Kind::Discovered(reader) => {
                let result = reader.collect();
                let mut parts = result.parts;
                let statuses = std::mem::take(&mut parts.statuses);
                let events = (parts.conflicts.into_iter().map(Event::DiscoveredConflict))
                    .chain(
                        parts
                            .writer_conflicts
                            .into_iter()
                            .map(Event::WriterConflict),
                    )
                    .chain(ray_logs_event(&mut parts.collection))
                    .collect();
                Gathered {
                    collection: parts.collection,
                    events,
                    subdirectories: None,
                    discovery: Some(result.report),
                    runs: RunsReport::default(),
                    parts: statuses,
                }
            }
        }
    }
}

impl TemporaryRuns {
    /// The inputs with each directory's current runs after it, what was
    /// found, and (in `events`) the runs newly stale and, when `policy`
    /// says so, those removed.
    fn expand<'a>(
        &mut self,
        inputs: &'a [Input],
        policy: WriterPolicy,
        events: &mut Vec<Event>,
    ) -> (std::borrow::Cow<'a, [Input]>, RunsReport) {
        let mut report = RunsReport::default();
        let mut expanded: Option<Vec<Input>> = None;
        for (i, input) in inputs.iter().enumerate() {
            let Input::Directory(dir) = input else {
                if let Some(expanded) = &mut expanded {
                    expanded.push(input.clone());
                }
                continue;
            };
            let survey = lock(&self.runs).survey(dir);
            if !survey.current.is_empty() {
                let expanded = expanded.get_or_insert_with(|| inputs[..i].to_vec());
                expanded.push(input.clone());
                expanded.extend(survey.current.iter().cloned().map(Input::Directory));
            } else if let Some(expanded) = &mut expanded {
                expanded.push(input.clone());
            }
            report.current.extend(survey.current);
            if policy.remove_stale_runs {
                if !survey.pids_visible && !survey.stale.is_empty() && !self.unremovable_reported {
                    self.unremovable_reported = true;
                    events.push(Event::StaleRunsUnremovable(dir.clone()));
                }
                let removal = compaction::stale_runs::remove(dir, &survey.stale);
                events.extend(removal.removed.iter().cloned().map(Event::StaleRunRemoved));
                events.extend(removal.failed.into_iter().map(|(path, error)| {
                    Event::StaleRunNotRemoved {
                        path,
                        error: error.to_string(),
                    }
                }));
                report.stale.extend(
                    survey
                        .stale
                        .into_iter()
                        .filter(|run| !removal.removed.contains(&run.path)),
                );
            } else {
                report.stale.extend(survey.stale);
            }
        }
        let now: std::collections::BTreeSet<PathBuf> =
            report.stale.iter().map(|run| run.path.clone()).collect();
        events.extend(
            report
                .stale
                .iter()
                .filter(|run| !self.reported.contains(&run.path))
                .cloned()
                .map(Event::StaleRun),
        );
        self.reported = now;
        let inputs = match expanded {
            Some(expanded) => std::borrow::Cow::Owned(expanded),
            None => std::borrow::Cow::Borrowed(inputs),
        };
        (inputs, report)
    }
}

/// The runs, even if a collection panicked while holding them.
fn lock(runs: &SharedRuns) -> std::sync::MutexGuard<'_, Runs> {
    runs.lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// The [`Event::RayLogsUnreadable`] of a collection, if any.
fn ray_logs_event(collection: &mut Collection) -> Option<Event> {
    collection
        .ray_logs_unreadable
        .take()
        .map(|(path, error)| Event::RayLogsUnreadable { path, error })
}

/// The families after the configuration's filtering, renaming and labels,
/// with the families dropped because their new name was taken.
pub fn transform(
    config: &Config,
    families: Vec<MetricFamily>,
) -> (Vec<MetricFamily>, Vec<Collision>) {
    let transformed = transform::apply(config, families);
    (transformed.families, transformed.collisions)
}

/// The exposition of `families` in `format`, restricted to `names` (the
/// `name[]` query parameters) when given.
pub fn render(
    families: &[MetricFamily],
    names: Option<&[String]>,
    format: Format,
    escaping: Escaping,
) -> Vec<u8> {
    match names {
        Some(names) => encode(&transform::restrict(families, names), format, escaping),
        None => encode(families, format, escaping),
    }
}

#[cfg(test)]
mod budget_model_tests;
#[cfg(test)]
mod tests {
    use super::*;
    use crate::format::file_name::GaugeMode;
    use crate::format::writer::ProcessWriter;
    use crate::transform::views::View;

    #[test]
    fn a_views_source_reads_and_merges_only_the_views_records() {
        let dir = tempfile::tempdir().unwrap();
        for pid in [1, 2] {
            let mut writer = ProcessWriter::new(dir.path(), pid);
            let waiting = writer
                .gauge(
                    "vllm:num_requests_waiting",
                    "W.",
                    &[],
                    GaugeMode::MostRecent,
                )
                .unwrap();
            waiting.set(&mut writer, f64::from(pid)).unwrap();
            for i in 0..10 {
                let tokens = writer
                    .counter("vllm:prompt_tokens", "T.", &[("i", &i.to_string())])
                    .unwrap();
                tokens.inc(&mut writer, 1.0).unwrap();
            }
        }
        let inputs = vec![Input::Directory(dir.path().to_path_buf())];
        let mut whole = Source::new(inputs, None, LinkPolicy::default());
        let config = Config::default();
        let view = View::endpoint_picker(config.naming);
        let mut restricted = whole.view(view.source_filter(&config), false).unwrap();
        let all = whole.collect().collection;
        let only = restricted.collect().collection;
        assert_eq!(all.stats.records, 22);
        assert_eq!(only.stats.records, 2, "the counters' records are not read");
        assert_eq!(only.stats.files_merged, all.stats.files_merged);
        // What it merged is the view's families cut from the whole merge.
        let cut = view.cut(&all.families);
        assert_eq!(only.families, cut);
        // Unchanged: the merge is skipped, as for the whole source.
        let again = restricted.collect_since(Some(only.merged_id)).collection;
        assert!(again.unchanged);
    }
}
