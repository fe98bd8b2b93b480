//! The memory budget checked by a state machine against a model (issue 53,
//! `proptest-state-machine`): parts of very unequal size added, grown,
//! shrunk and removed under a budget of any size, read by the real part
//! readers ([`PartReaders`], one after the other as with
//! `--dir.subdirectories-label`); or one directory read by `/metrics`'s
//! source, configured views and new `?name[]=` sets ([`ViewSources`]) in
//! any order. Files are written by the crate's own writer
//! (`format::writer`), each a writer's counters; the model is
//! prometheus_client's merge of counters (a sum per series over the files)
//! over the files that should be served.
//!
//! After every step:
//! - memory charged stays within the budget;
//! - the output equals the model's over the files read, the files left out
//!   being exactly those reported `over_memory_budget` (how
//!   `docs/reliability.md` says a cut part is reported), and no other
//!   problem;
//! - a part that needs less than its floor (an equal share) is whole; from
//!   the [`SETTLE`]th scrape after the last change of files on, a part is
//!   cut only if it could not be read whole in what the budget leaves it:
//!   its need is over its fair level (max-min fair shares, water-filling
//!   over the parts' needs: [`crate::source::budget::allowances`]) and
//!   over what it holds plus the budget's unused room ("needs": what it
//!   holds read alone, with the reader's margin, [`fits`]);
//! - `/metrics` is whole when it fits in the share the views cannot take,
//!   and the views never hold more than theirs.
//!
//! Half the sequences start from the issue's shape (defect 3): one big
//! part of several writers of the same series and small parts, under a
//! budget about the size of the data, and small parts then grow by a few
//! hundred to a thousand and a half series.
//!
//! A fixed number of cases (96, `PROPTEST_CASES` for more) from a fixed
//! seed ([`SEED`], `PROPTEST_RNG_SEED` for another); the seed is printed
//! and a failure shrinks to a short sequence that replays from it:
//! `PROPTEST_RNG_SEED=<seed> PROPTEST_CASES=<cases> cargo test --lib
//! budget_model`.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use proptest::prelude::*;
use proptest::test_runner::{Config as ProptestConfig, RngSeed};
use proptest_state_machine::{prop_state_machine, ReferenceStateMachine, StateMachineTest};

use crate::expose::encode::{encode, Escaping, Format};
use crate::model::MetricFamily;
use crate::pipeline::coalesce::InFlight;
use crate::pipeline::parts::{PartReaders, PartSpec};
use crate::pipeline::views::{ViewSources, VIEWS_BUDGET_PERCENT};
use crate::pipeline::Source;
use crate::source::link_policy::LinkPolicy;
use crate::source::writers::WriterPolicy;
use crate::source::{Input, MemoryBudget, Problem, SkipReason};
use crate::transform::config::Config;
use crate::transform::views::View;

/// Families the files hold (`f<n>_total`).
const FAMILIES: u8 = 3;
/// Parts at most.
const PARTS: u8 = 4;
/// The scrapes after the last change of files by which a part is cut only
/// if it could not be read whole in what the budget leaves it (a cut
/// part's need is estimated from its skipped files' bytes, then learnt).
const SETTLE: u32 = 3;
/// Writers (files) per part or directory at most.
const WRITERS: u32 = 4;

/// Whether a reader needing `need` bytes read alone is sure to be read
/// whole within `room`: the reader reserves, while it reads, what the merge
/// to come and the next key may add, the window it reads and what its
/// tables take when they double (half its need and 64 KiB cover it for
/// these files).
fn fits(need: usize, room: usize) -> bool {
    with_margin(need) <= room
}

/// `need` with the reader's margin ([`fits`]).
fn with_margin(need: usize) -> usize {
    need + need / 2 + (64 << 10)
}

/// One writer's file: series `i="0"`..`i="<series - 1>"` of family
/// `f<family>_total`, each `value`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) struct FileModel {
    family: u8,
    series: u32,
    value: u32,
}

/// The two shapes the budget is shared in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Shape {
    /// Subdirectories, one part each.
    Parts,
    /// One directory, `/metrics` beside views and name sets.
    Views,
}

/// The model: the files of each part (one part, `0`, in the views shape),
/// and the budget, in thousandths of what the first files need together
/// (read alone): budgets of any size, about the size of the data.
#[derive(Debug, Clone)]
pub(crate) struct Model {
    shape: Shape,
    budget_permille: usize,
    parts: BTreeMap<u8, BTreeMap<u32, FileModel>>,
}

/// One event.
#[derive(Debug, Clone)]
pub(crate) enum Step {
    /// A writer of `part` writes its file anew (a new part if none).
    Write { part: u8, pid: u32, file: FileModel },
    /// A writer's file goes.
    Remove { part: u8, pid: u32 },
    /// A part (subdirectory) goes.
    RemovePart { part: u8 },
    /// Prometheus scrapes `/metrics`.
    Scrape,
    /// A configured view is polled.
    PollView { view: u8 },
    /// A `?name[]=` set is polled.
    PollNames { names: u8 },
}

fn file() -> impl Strategy<Value = FileModel> {
    // Very unequal sizes: a series to thousands.
    let series = prop_oneof![1u32..8, 8u32..200, 200u32..3000];
    (0..FAMILIES, series, 1u32..5).prop_map(|(family, series, value)| FileModel {
        family,
        series,
        value,
    })
}

/// One big part (`p0`, several writers of the same series, as a server's
/// workers write) and one to three small ones, under a budget of half to
/// one and a half times what they need together.
fn issue_shape() -> impl Strategy<Value = Model> {
    let big_file = (300u32..3000, 1u32..5).prop_map(|(series, value)| FileModel {
        family: 0,
        series,
        value,
    });
    let small_file =
        (0..FAMILIES, 1u32..8, 1u32..5).prop_map(|(family, series, value)| FileModel {
            family,
            series,
            value,
        });
    let big = proptest::collection::vec(big_file, 2..=WRITERS as usize);
    let smalls = proptest::collection::vec(
        proptest::collection::btree_map(0..WRITERS, small_file, 1..=2),
        1..usize::from(PARTS),
    );
    (big, smalls, 500usize..1500).prop_map(|(big, smalls, budget_permille)| {
        let mut parts = BTreeMap::new();
        // The big part's writers write the same series.
        let series = big[0].series;
        parts.insert(
            0,
            (0u32..)
                .zip(big)
                .map(|(pid, file)| (pid, FileModel { series, ..file }))
                .collect(),
        );
        for (part, files) in (1u8..).zip(smalls) {
            parts.insert(part, files);
        }
        Model {
            shape: Shape::Parts,
            budget_permille,
            parts,
        }
    })
}

impl ReferenceStateMachine for Model {
    type State = Model;
    type Transition = Step;

    fn init_state() -> BoxedStrategy<Model> {
        // From a tenth of what the first files need to five times that.
        let permille = prop_oneof![100usize..1000, 1000usize..5000];
        let any = (
            prop_oneof![Just(Shape::Parts), Just(Shape::Views)],
            permille,
        )
            .prop_flat_map(|(shape, budget_permille)| {
                let parts = if shape == Shape::Parts { PARTS } else { 1 };
                let files = proptest::collection::btree_map(0..WRITERS, file(), 1..=3);
                proptest::collection::btree_map(0..parts, files, 1..=usize::from(parts)).prop_map(
                    move |parts| Model {
                        shape,
                        budget_permille,
                        parts,
                    },
                )
            });
        prop_oneof![
            2 => any,
            // The issue's shape (defect 3): one big part of several
            // writers, small parts (that then grow: [`Step::Write`]'s
            // weights), under a budget about the size of the data.
            2 => issue_shape(),
        ]
        .boxed()
    }

    fn transitions(state: &Model) -> BoxedStrategy<Step> {
        let parts = if state.shape == Shape::Parts {
            PARTS
        } else {
            1
        };
        let write = (0..parts, 0..WRITERS, file()).prop_map(|(part, pid, file)| Step::Write {
            part,
            pid,
            file,
        });
        let remove = (0..parts, 0..WRITERS).prop_map(|(part, pid)| Step::Remove { part, pid });
        match state.shape {
            Shape::Parts => {
                // A small part grows (the issue's defect 3: by a few hundred to a
                // thousand and a half series, far under its floor).
                let grow = (1..parts, 0..WRITERS, 0..FAMILIES, 100u32..1500, 1u32..5).prop_map(
                    |(part, pid, family, series, value)| Step::Write {
                        part,
                        pid,
                        file: FileModel {
                            family,
                            series,
                            value,
                        },
                    },
                );
                prop_oneof![
                    3 => write,
                    2 => grow,
                    1 => remove,
                    1 => (0..parts).prop_map(|part| Step::RemovePart { part }),
                    5 => Just(Step::Scrape),
                ]
                .boxed()
            }
            Shape::Views => prop_oneof![
                4 => write,
                1 => remove,
                2 => Just(Step::Scrape),
                4 => (0u8..4).prop_map(|view| Step::PollView { view }),
                2 => (0u8..4).prop_map(|names| Step::PollNames { names }),
            ]
            .boxed(),
        }
    }

    /// Views have sources of their own over one directory only (with
    /// subdirectories they are cut from `/metrics`): no view in the parts'
    /// shape, one part in the views' (also once shrunk).
    fn preconditions(state: &Model, step: &Step) -> bool {
        match *step {
            Step::PollView { .. } | Step::PollNames { .. } => state.shape == Shape::Views,
            Step::Write { part, .. } | Step::Remove { part, .. } | Step::RemovePart { part } => {
                state.shape == Shape::Parts || part == 0
            }
            Step::Scrape => true,
        }
    }

    fn apply(mut state: Model, step: &Step) -> Model {
        match *step {
            Step::Write { part, pid, file } => {
                state.parts.entry(part).or_default().insert(pid, file);
            }
            Step::Remove { part, pid } => {
                if let Some(files) = state.parts.get_mut(&part) {
                    files.remove(&pid);
                }
            }
            Step::RemovePart { part } => {
                state.parts.remove(&part);
            }
            Step::Scrape | Step::PollView { .. } | Step::PollNames { .. } => {}
        }
        state
    }
}

/// A shared collection of `/metrics` with none in flight.
struct Idle;

impl InFlight for Idle {
    fn in_flight(&self) -> bool {
        false
    }
}

/// The real pipeline.
pub(crate) struct Real {
    tmp: tempfile::TempDir,
    budget: Arc<MemoryBudget>,
    parts: PartReaders<String>,
    main: Source,
    views: ViewSources,
    config: Arc<Config>,
    /// The budget's limit.
    limit: usize,
    /// Scrapes since files last changed.
    settled: u32,
    /// Each part's need read alone, by its files (the model's).
    needs: Mutex<Needs>,
}

/// A part's need read alone (in the views' shape or as a part), by its
/// files.
type Needs = BTreeMap<(bool, Vec<(u32, FileModel)>), usize>;

fn part_dir(root: &Path, part: u8) -> PathBuf {
    root.join(format!("p{part}"))
}

fn file_path(root: &Path, part: u8, pid: u32) -> PathBuf {
    part_dir(root, part).join(format!("counter_{pid}.db"))
}

/// Writes `file` at `path` (a new inode: a file of another writer).
fn write_file(path: &Path, file: FileModel) {
    let family = format!("f{}", file.family);
    let keys: Vec<String> = (0..file.series)
        .map(|i| {
            crate::format::writer::encode_key(
                &family,
                &format!("{family}_total"),
                &[("i", &i.to_string())],
                "F.",
            )
        })
        .collect();
    let records: Vec<(&str, f64, f64)> = keys
        .iter()
        .map(|k| (k.as_str(), f64::from(file.value), 0.0))
        .collect();
    let staged = path.with_extension("tmp");
    std::fs::write(&staged, crate::format::writer::file_bytes(&records)).unwrap();
    std::fs::rename(&staged, path).unwrap();
}

fn spec(root: &Path, part: u8) -> PartSpec<String> {
    let dir = part_dir(root, part);
    PartSpec {
        key: format!("p{part}"),
        name: format!("p{part}").into(),
        labels: vec![("part".into(), format!("p{part}").into())],
        inputs: vec![Input::Directory(dir)],
        shown_as: Vec::new(),
        pins: Vec::new(),
    }
}

/// Samples served: (family, part, i) -> value.
type Samples = BTreeMap<(String, String, String), f64>;

fn samples_of(families: &[MetricFamily]) -> Samples {
    let text = String::from_utf8(encode(families, Format::Text, Escaping::Underscores)).unwrap();
    let mut out = Samples::new();
    for line in text.lines().filter(|l| !l.starts_with('#')) {
        let (series, value) = line.rsplit_once(' ').unwrap();
        let (name, labels) = series.split_once('{').unwrap();
        let label = |key: &str| {
            labels
                .split(',')
                .find_map(|l| l.strip_prefix(&format!("{key}=\"")))
                .map(|v| v.trim_end_matches('}').trim_end_matches('"').to_owned())
                .unwrap_or_default()
        };
        out.insert(
            (name.to_owned(), label("part"), label("i")),
            value.parse().unwrap(),
        );
    }
    out
}

/// The model's samples of `part` (named `label`) over the files not in
/// `skipped`, of the families `keep` keeps.
fn model_samples(
    root: &Path,
    part: u8,
    files: &BTreeMap<u32, FileModel>,
    label: &str,
    skipped: &[PathBuf],
    keep: &dyn Fn(u8) -> bool,
) -> Samples {
    let mut out = Samples::new();
    for (&pid, file) in files {
        if skipped.contains(&file_path(root, part, pid)) || !keep(file.family) {
            continue;
        }
        for i in 0..file.series {
            *out.entry((
                format!("f{}_total", file.family),
                label.to_owned(),
                i.to_string(),
            ))
            .or_default() += f64::from(file.value);
        }
    }
    out
}

/// The files skipped for the budget; panics on any other problem.
fn skipped_files(problems: &[Problem]) -> Vec<PathBuf> {
    for problem in problems {
        assert!(
            matches!(problem.reason, SkipReason::OverMemoryBudget { .. }),
            "{problem:?}"
        );
    }
    problems.iter().map(|p| p.path.clone()).collect()
}

impl Real {
    /// What `part`'s files need of the budget read alone (cached).
    fn need(&self, part: u8, files: &BTreeMap<u32, FileModel>, views: bool) -> usize {
        let key = (views, files.iter().map(|(&p, &f)| (p, f)).collect());
        if let Some(&need) = self.needs.lock().unwrap().get(&key) {
            return need;
        }
        let unlimited = Arc::new(MemoryBudget::new(usize::MAX / 2));
        // Read twice, measured while the reader lives (it gives its charge
        // back when dropped).
        let need = if views {
            let mut source = Source::new(
                vec![Input::Directory(part_dir(self.tmp.path(), part))],
                None,
                LinkPolicy::default(),
            )
            .with_memory_budget(Some(unlimited.clone()))
            .with_writer_policy(WriterPolicy::exact());
            source.collect_since(None);
            source.collect_since(None);
            unlimited.held()
        } else {
            let mut readers = PartReaders::new(LinkPolicy::NoLinks);
            readers.set_memory_budget(Some(unlimited.clone()));
            readers.collect(vec![spec(self.tmp.path(), part)]);
            readers.collect(vec![spec(self.tmp.path(), part)]);
            unlimited.held()
        };
        self.needs.lock().unwrap().insert(key, need);
        need
    }

    fn scrape_parts(&mut self, model: &Model) {
        self.settled += 1;
        let root = self.tmp.path().to_path_buf();
        let specs: Vec<_> = model.parts.keys().map(|&p| spec(&root, p)).collect();
        let out = self.parts.collect(specs);
        let skipped = skipped_files(&out.collection.problems);
        let served = samples_of(&out.collection.families);
        let mut expected = Samples::new();
        for (&part, files) in &model.parts {
            let label = format!("p{part}");
            expected.extend(model_samples(&root, part, files, &label, &skipped, &|_| {
                true
            }));
        }
        assert_eq!(served, expected, "served != model over the files read");
        let floor = self.limit / model.parts.len().max(1);
        let needs: Vec<(u8, usize)> = model
            .parts
            .iter()
            .map(|(&p, files)| (p, self.need(p, files, false)))
            .collect();
        // What each part needs with the reader's margin, and the level the
        // budget fills to over them (max-min fair shares).
        let margins: Vec<usize> = needs.iter().map(|&(_, n)| with_margin(n)).collect();
        let levels = crate::source::budget::allowances(self.limit, &margins);
        let held = self.budget.held();
        for (k, &(part, need)) in needs.iter().enumerate() {
            let cut = skipped.iter().any(|p| p.starts_with(part_dir(&root, part)));
            if !cut {
                continue;
            }
            assert!(
                !fits(need, floor),
                "part p{part} needs {need}, under its floor {floor}, and was cut: {skipped:?}"
            );
            // The needs of parts cut are estimates: learnt within a few
            // scrapes after the last change.
            if self.settled < SETTLE {
                continue;
            }
            assert!(
                margins[k] > levels[k],
                "part p{part} needs {need} ({} with the reader's margin), within its fair \
                 level {} of the budget {} (over the parts' needs {margins:?}), and is cut \
                 {} scrapes after the last change: {skipped:?}",
                margins[k],
                levels[k],
                self.limit,
                self.settled
            );
            let own = self.parts.held_by(&format!("p{part}")).unwrap_or(0);
            let room = self.limit - (held - own);
            assert!(
                margins[k] > room,
                "part p{part} needs {need} ({} with the reader's margin), holds {own}, and \
                 is cut {} scrapes after the last change though the budget's unused room \
                 would hold it ({room} with what it holds; {held} of {} held): {skipped:?}",
                margins[k],
                self.settled,
                self.limit
            );
        }
    }

    fn scrape_main(&mut self, model: &Model) {
        let root = self.tmp.path().to_path_buf();
        let gathered = self.main.collect_since(None);
        let skipped = skipped_files(&gathered.collection.problems);
        let served = samples_of(&gathered.collection.families);
        let files = model.parts.get(&0).cloned().unwrap_or_default();
        let expected = model_samples(&root, 0, &files, "", &skipped, &|_| true);
        assert_eq!(served, expected, "/metrics != model over the files read");
        let need = self.need(0, &files, true);
        let share = self.limit - self.limit / 100 * VIEWS_BUDGET_PERCENT;
        assert!(
            skipped.is_empty() || !fits(need, share),
            "/metrics needs {need}, within its share {share}, and was cut: {skipped:?}"
        );
    }

    fn poll(&mut self, model: &Model, view: &View) {
        let Some(entry) = self.views.entry(view, &self.config, &Idle) else {
            return;
        };
        let Some(families) = self.views.families(&entry, &Idle) else {
            return;
        };
        // A view's source may be cut within the views' share: each sample
        // it serves is the model's over a part of the files.
        let files = model.parts.get(&0).cloned().unwrap_or_default();
        let whole = model_samples(self.tmp.path(), 0, &files, "", &[], &|_| true);
        for (series, value) in samples_of(&families.families) {
            let most = whole.get(&series).copied().unwrap_or(0.0);
            assert!(value <= most, "{view:?}: {series:?} {value} > {most}");
        }
    }
}

impl Real {
    /// The pipeline over `tmp`'s files, within `budget`.
    fn new(tmp: tempfile::TempDir, budget: Arc<MemoryBudget>, needs: Mutex<Needs>) -> Real {
        let mut parts = PartReaders::new(LinkPolicy::NoLinks);
        parts.set_memory_budget(Some(budget.clone()));
        let main = Source::new(
            vec![Input::Directory(part_dir(tmp.path(), 0))],
            None,
            LinkPolicy::default(),
        )
        .with_memory_budget(Some(budget.clone()))
        .with_writer_policy(WriterPolicy::exact());
        let views = ViewSources::new(main.view_base());
        let config = Arc::new(
            Config::from_yaml(
                "views:\n  v0: [f0_total]\n  v1: [f0_total, f1_total]\n  \
                 v2: [f0_total, f1_total, f2_total]\n  v3: [f2_total, f1_total, f0_total]\n",
            )
            .unwrap(),
        );
        Real {
            tmp,
            limit: budget.limit(),
            settled: 0,
            budget,
            parts,
            main,
            views,
            config,
            needs,
        }
    }
}

impl StateMachineTest for Real {
    type SystemUnderTest = Real;
    type Reference = Model;

    fn init_test(model: &Model) -> Real {
        let tmp = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(part_dir(tmp.path(), 0)).unwrap();
        for (&part, files) in &model.parts {
            std::fs::create_dir_all(part_dir(tmp.path(), part)).unwrap();
            for (&pid, &file) in files {
                write_file(&file_path(tmp.path(), part, pid), file);
            }
        }
        let needs = Mutex::default();
        let budget = Arc::new(MemoryBudget::new(0));
        let real = Real::new(tmp, budget, needs);
        let views = model.shape == Shape::Views;
        let total: usize = model
            .parts
            .iter()
            .map(|(&part, files)| real.need(part, files, views))
            .sum();
        let limit = (total / 1000 * model.budget_permille).max(1);
        let Real { tmp, needs, .. } = real;
        let needs = needs.into_inner().unwrap();
        Real::new(tmp, Arc::new(MemoryBudget::new(limit)), Mutex::new(needs))
    }

    fn apply(mut real: Real, model: &Model, step: Step) -> Real {
        let root = real.tmp.path().to_path_buf();
        if matches!(
            step,
            Step::Write { .. } | Step::Remove { .. } | Step::RemovePart { .. }
        ) {
            real.settled = 0;
        }
        match step {
            Step::Write { part, pid, file } => {
                std::fs::create_dir_all(part_dir(&root, part)).unwrap();
                write_file(&file_path(&root, part, pid), file);
            }
            Step::Remove { part, pid } => {
                let _ = std::fs::remove_file(file_path(&root, part, pid));
            }
            Step::RemovePart { part } => {
                let _ = std::fs::remove_dir_all(part_dir(&root, part));
            }
            Step::Scrape => match model.shape {
                Shape::Parts => real.scrape_parts(model),
                Shape::Views => real.scrape_main(model),
            },
            Step::PollView { view } => {
                let name = format!("v{view}");
                let view = real
                    .config
                    .views
                    .iter()
                    .find(|v| *v.name == *name)
                    .unwrap()
                    .clone();
                real.poll(model, &view);
            }
            Step::PollNames { names } => {
                let names: Vec<String> = (0..FAMILIES)
                    .filter(|f| names & (1 << f) != 0 || *f == names % FAMILIES)
                    .map(|f| format!("f{f}_total"))
                    .collect();
                real.poll(model, &View::of_sample_names(&names));
            }
        }
        real
    }

    fn check_invariants(real: &Real, model: &Model) {
        let held = real.budget.held();
        assert!(held <= real.limit, "charged {held} > budget {}", real.limit);
        if model.shape == Shape::Views {
            // `/metrics`'s share is never taken: the views (every charge
            // but `/metrics`'s) hold at most theirs.
            let views = held - real.main.charged();
            let share = real.limit / 100 * VIEWS_BUDGET_PERCENT;
            assert!(
                views <= share,
                "the views hold {views}, over their share {share}"
            );
        }
    }
}

/// The seed of the cases run by default: fixed, so that a run passes or
/// fails the same everywhere; `PROPTEST_RNG_SEED` runs (and replays)
/// another.
const SEED: u64 = 53;

/// The cases run, and the seed (printed once).
fn config() -> ProptestConfig {
    static SEED_USED: std::sync::OnceLock<u64> = std::sync::OnceLock::new();
    let seed = *SEED_USED.get_or_init(|| {
        let seed = std::env::var("PROPTEST_RNG_SEED")
            .ok()
            .and_then(|s| s.parse().ok())
            .unwrap_or(SEED);
        eprintln!(
            "budget model: seed {seed} (replay: PROPTEST_RNG_SEED={seed} cargo test --lib budget_model)"
        );
        seed
    });
    ProptestConfig {
        cases: std::env::var("PROPTEST_CASES")
            .ok()
            .and_then(|c| c.parse().ok())
            .unwrap_or(96),
        rng_seed: RngSeed::Fixed(seed),
        failure_persistence: None,
        max_shrink_iters: 1024,
        max_shrink_time: 90_000,
        ..ProptestConfig::default()
    }
}

prop_state_machine! {
    #![proptest_config(config())]

    /// The memory budget against its model, in any order of events.
    #[test]
    fn budget_model(sequential 1..24 => Real);
}

/// Applies `steps` to `model` and the real pipeline made for it, checking
/// after each, as the generator does: a sequence it found, pinned.
fn replay(mut model: Model, steps: &[Step]) {
    let mut real = <Real as StateMachineTest>::init_test(&model);
    <Real as StateMachineTest>::check_invariants(&real, &model);
    for step in steps {
        assert!(
            <Model as ReferenceStateMachine>::preconditions(&model, step),
            "{step:?}"
        );
        model = <Model as ReferenceStateMachine>::apply(model, step);
        real = <Real as StateMachineTest>::apply(real, &model, step.clone());
        <Real as StateMachineTest>::check_invariants(&real, &model);
    }
}

/// A writer's file of `series` series of family `f<family>_total`, each
/// `value`.
fn file_of(family: u8, series: u32, value: u32) -> FileModel {
    FileModel {
        family,
        series,
        value,
    }
}

/// Found by the generator (issue 53, seed 5396398237144411387 of 400
/// cases): `/metrics` cut at its first read kept the keys of the file it
/// had read in part (interned before the budget ran out); when that file
/// was written anew, smaller, and `/metrics` fitted in its share, those
/// keys still charged to it left it cut.
#[test]
#[rustfmt::skip]
fn a_cut_metrics_keeps_the_keys_of_a_file_read_in_part_and_stays_cut() {
    use Step::*;
    let model = Model {
        shape: Shape::Views,
        budget_permille: 937,
        parts: BTreeMap::from([(0, BTreeMap::from([
            (0, file_of(0, 6, 1)),
            (1, file_of(0, 2482, 1)),
        ]))]),
    };
    replay(model, &[
        Scrape,
        PollNames { names: 0 },
        Remove { part: 0, pid: 2 },
        Write { part: 0, pid: 1, file: file_of(0, 658, 1) },
        PollView { view: 0 },
        Write { part: 0, pid: 0, file: file_of(0, 1, 1) },
        Scrape,
    ]);
}

/// Found by the generator (issue 53, seed 53 once it checked the unused
/// room): three parts of one file each, every file larger than an equal
/// share, were all cut to their level at every scrape, each holding
/// nothing, most of the budget unused though the smallest fitted in it.
#[test]
#[rustfmt::skip]
fn parts_cut_at_their_level_leave_the_budget_unused() {
    use Step::*;
    let model = Model {
        shape: Shape::Parts,
        budget_permille: 247,
        parts: BTreeMap::from([
            (0, BTreeMap::from([(1, file_of(0, 513, 1))])),
            (1, BTreeMap::from([(0, file_of(0, 219, 1))])),
            (2, BTreeMap::from([(2, file_of(0, 1631, 1))])),
        ]),
    };
    replay(model, &[Scrape, Scrape, Scrape]);
}

/// Found by the generator (issue 53, seed 101 of 2,000 cases): a big part
/// of three writers (one of which then wrote one series) and a small one
/// that grew to about half its floor. The small part, read first, was cut:
/// the big one held all but a third of the budget. Counted at what it held
/// plus four times its skipped file's bytes, less than what reading it
/// reserves, it left the big one its charge, and stayed cut below its
/// floor.
#[test]
#[rustfmt::skip]
fn a_small_part_grown_while_the_big_one_shrank_is_cut_below_its_floor() {
    use Step::*;
    let big = file_of(0, 2382, 1);
    let model = Model {
        shape: Shape::Parts,
        budget_permille: 1223,
        parts: BTreeMap::from([
            (0, BTreeMap::from([(0, big), (1, big), (2, big)])),
            (1, BTreeMap::from([(0, file_of(0, 1, 1))])),
        ]),
    };
    replay(model, &[
        Write { part: 0, pid: 0, file: file_of(0, 1, 1) },
        Scrape,
        Write { part: 1, pid: 0, file: file_of(0, 1020, 1) },
        Scrape,
        Scrape,
        Scrape,
    ]);
}

/// Found by the generator (issue 53, seed 303 of 2,000 cases): four parts
/// changed at once; reading one after the other, the part cut first (`p1`,
/// grown) was let go of when the room was made for a part cut after it
/// (`p2`, under its floor), and neither was read again in that collection:
/// both cut below their floor for a scrape, and the room they were made
/// unused.
#[test]
#[rustfmt::skip]
fn small_parts_let_go_of_for_another_cut_part_are_left_cut_below_their_floor() {
    use Step::*;
    let big = file_of(0, 2620, 1);
    let model = Model {
        shape: Shape::Parts,
        budget_permille: 947,
        parts: BTreeMap::from([
            (0, BTreeMap::from([(0, big), (1, big)])),
            (1, BTreeMap::from([(0, file_of(0, 2, 1))])),
            (2, BTreeMap::from([(0, file_of(1, 5, 1)), (3, file_of(1, 7, 2))])),
            (3, BTreeMap::from([(1, file_of(0, 1, 3)), (2, file_of(0, 6, 1))])),
        ]),
    };
    replay(model, &[
        Write { part: 2, pid: 3, file: file_of(0, 1528, 1) },
        Write { part: 0, pid: 2, file: file_of(1, 1121, 1) },
        Scrape,
        Remove { part: 0, pid: 0 },
        Write { part: 0, pid: 0, file: file_of(0, 1, 1) },
        Write { part: 3, pid: 1, file: file_of(0, 1025, 1) },
        Scrape,
        Write { part: 2, pid: 3, file: file_of(2, 237, 1) },
        Remove { part: 3, pid: 1 },
        Scrape,
        Write { part: 2, pid: 0, file: file_of(2, 286, 1) },
        Write { part: 0, pid: 0, file: file_of(0, 1, 1) },
        Write { part: 1, pid: 0, file: file_of(0, 643, 1) },
        Scrape,
    ]);
}
