//! `multiproc-exporter dump`: the merged exposition of directories and files,
//! printed once to standard output, through the same [`crate::pipeline`] as
//! `serve`; what was left out goes to standard error.

use std::io::Write as _;
use std::process::ExitCode;

use super::flags::{DumpFlags, EscapingArg, FormatArg};
use super::settings::multiproc_dir_from_env;
use crate::expose::encode::{Escaping, Format};
use crate::pipeline::{self, Event, Source};
use crate::source::Input;

pub(crate) fn run(args: DumpFlags) -> ExitCode {
    let usage = |message: String| {
        eprintln!("multiproc-exporter: {message}");
        ExitCode::from(2)
    };
    let config = match args.config.load() {
        Ok(loaded) => loaded.config,
        Err(e) => return usage(e),
    };
    let directories = match args.directories.validate() {
        Ok(d) => d,
        Err(e) => return usage(e),
    };
    let given: Vec<_> = args.dirs.into_iter().chain(args.paths).collect();
    let discovery = match args
        .discover
        .validate_with(!given.is_empty(), &args.directories)
    {
        Ok(d) => d,
        Err(e) => return usage(e),
    };
    let paths = if discovery.is_some() {
        Vec::new()
    } else if given.is_empty() {
        match multiproc_dir_from_env() {
            Some(dir) => vec![dir],
            None => {
                return usage("no PATH given and PROMETHEUS_MULTIPROC_DIR is not set".to_owned())
            }
        }
    } else {
        given
    };
    // A PATH that is a file is merged as given; with subdirectories, every
    // PATH is a parent directory.
    let inputs: Vec<Input> = match directories.subdirectories_label {
        None => paths.into_iter().map(Input::detect).collect(),
        Some(_) => paths.into_iter().map(Input::Directory).collect(),
    };
    let view = match &args.view {
        None => None,
        Some(name) => match config.views.iter().find(|v| *v.name == **name) {
            Some(view) => Some(view.clone()),
            None => {
                let names: Vec<&str> = config.views.iter().map(|v| &*v.name).collect();
                return usage(format!(
                    "no view {name:?}; the views are: {}",
                    names.join(", ")
                ));
            }
        },
    };
    let source = match discovery {
        Some(options) => Source::discovered(options),
        None => Source::new(
            inputs.clone(),
            directories.subdirectories_label,
            directories.link_policy,
        ),
    };
    let mut source = source
        .with_memory_budget(directories.memory_budget)
        .with_writer_policy(directories.writer_policy);
    if let Some(view) = &view {
        // Only the view's records are read (where the source allows it).
        if let Some(restricted) = source.view(view.source_filter(&config), view.wants_own()) {
            source = restricted;
        }
    }
    source.set_per_writer(config.per_writer.as_ref());
    let gathered = source.collect();
    let discovering = gathered.discovery.is_some();
    let kind = if discovering {
        "directory"
    } else {
        "subdirectory"
    };
    for event in &gathered.events {
        match event {
            Event::DuplicateSubdirectory(path) => eprintln!(
                "multiproc-exporter: skipped {}: an earlier directory has a subdirectory of the same name",
                path.display()
            ),
            Event::FamilyConflict(c) | Event::DiscoveredConflict(c) => eprintln!(
                "multiproc-exporter: family {} of {kind} {} disagrees with {kind} {} ({}); kept the first one's type and help",
                c.family,
                c.part,
                c.kept_from,
                c.reason.label()
            ),
            Event::RayLogsUnreadable { path, error } => eprintln!(
                "multiproc-exporter: cannot read Ray's log directory {} ({error}); writers keep their pids",
                path.display()
            ),
            Event::WriterConflict(c) => eprintln!(
                "multiproc-exporter: family {} of writer {} has another type than writer {}'s; left out",
                c.family, c.part, c.kept_from
            ),
            Event::StaleRun(run) => eprintln!(
                "multiproc-exporter: left out {}: a temporary subdirectory of an earlier run ({} files); --dir.remove-stale-subdirectories removes such subdirectories",
                run.path.display(),
                run.files
            ),
            Event::StaleRunRemoved(path) => eprintln!(
                "multiproc-exporter: removed {}: a temporary subdirectory of an earlier run",
                path.display()
            ),
            Event::StaleRunNotRemoved { path, error } => eprintln!(
                "multiproc-exporter: cannot remove {} ({error})",
                path.display()
            ),
            Event::StaleRunsUnremovable(dir) => eprintln!(
                "multiproc-exporter: not removing stale temporary subdirectories of {}: their writers' processes cannot be seen",
                dir.display()
            ),
            Event::SubdirectoryAppeared(_) | Event::SubdirectoryGone(_) => {}
        }
    }
    if !super::dump_discover::summarize(&gathered) {
        return ExitCode::from(1);
    }
    let collection = gathered.collection;
    // Exit 1 when nothing could be read at all: every input failed (missing,
    // unreadable), or there were files and none of them could be merged.
    let mut failed_inputs = 0;
    for problem in &collection.problems {
        if inputs.iter().any(|i| i.path() == problem.path) {
            failed_inputs += 1;
        }
        eprintln!(
            "multiproc-exporter: skipped {}: {}",
            problem.path.display(),
            problem.reason
        );
    }
    if failed_inputs == inputs.len() && !discovering {
        eprintln!("multiproc-exporter: nothing to read: no input could be read");
        return ExitCode::from(1);
    }
    let file_problems = collection
        .problems
        .iter()
        .filter(|p| !p.reason.is_directory_reason())
        .count();
    if collection.stats.files_listed > 0 && file_problems >= collection.stats.files_listed {
        eprintln!(
            "multiproc-exporter: nothing to read: none of the {} metric files could be read",
            collection.stats.files_listed
        );
        return ExitCode::from(1);
    }
    let format = match args.format {
        FormatArg::Text | FormatArg::Json => Format::Text,
        FormatArg::Openmetrics => Format::OpenMetrics,
    };
    let escaping = match args.escaping {
        EscapingArg::Underscores => Escaping::Underscores,
        EscapingArg::AllowUtf8 => Escaping::AllowUtf8,
    };
    let (mut families, collisions) = pipeline::transform(&config, collection.families);
    if let Some(view) = &view {
        families = view.families_of(&families);
    }
    for c in &collisions {
        eprintln!(
            "multiproc-exporter: dropped family {}: its new name {} is already used",
            c.original, c.renamed
        );
    }
    let body = if args.format == FormatArg::Json {
        let mut json = crate::expose::json::snapshot(&families)
            .to_string()
            .into_bytes();
        json.push(b'\n');
        json
    } else {
        pipeline::render(&families, None, format, escaping)
    };
    let mut stdout = std::io::stdout().lock();
    match stdout.write_all(&body).and_then(|()| stdout.flush()) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("multiproc-exporter: cannot write output: {e}");
            ExitCode::from(1)
        }
    }
}
