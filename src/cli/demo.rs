//! `multiproc-exporter demo`: a vLLM-like simulation writes a metrics
//! directory ([`crate::demo`]) while the server serves it, on
//! `127.0.0.1:9089` unless `--web.listen-address` says otherwise. The demo
//! starts from an empty directory unless `--demo.continue` is given.

use std::process::ExitCode;

use super::flags::{DemoFlags, DirectoryFlags};
use super::settings::serve_settings;
use crate::server;

/// Where the demo listens by default: this host only.
const DEMO_LISTEN_ADDRESS: &str = "127.0.0.1:9089";

/// Removes the `*.db` files directly in `dir` (what an earlier demo left);
/// returns how many.
fn remove_metric_files(dir: &std::path::Path) -> std::io::Result<usize> {
    let mut removed = 0;
    for entry in std::fs::read_dir(dir)? {
        let entry = entry?;
        let is_metric_file =
            crate::format::file_name::is_listed_name(entry.file_name().as_encoded_bytes());
        if is_metric_file && entry.file_type()?.is_file() {
            std::fs::remove_file(entry.path())?;
            removed += 1;
        }
    }
    Ok(removed)
}

/// Runs the demo until SIGTERM or SIGINT.
pub(crate) fn run(flags: DemoFlags) -> ExitCode {
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::Arc;

    server::init_logging(flags.log.log_format, flags.log.log_level);
    let (dir, temporary) = match flags.dir {
        Some(dir) => (dir, false),
        None => (
            std::env::temp_dir().join(format!("multiproc-exporter-demo-{}", std::process::id())),
            true,
        ),
    };
    if let Err(e) = std::fs::create_dir_all(&dir) {
        eprintln!("multiproc-exporter: cannot create {}: {e}", dir.display());
        return ExitCode::from(1);
    }
    if !flags.continue_ {
        match remove_metric_files(&dir) {
            Ok(0) => {}
            Ok(n) => eprintln!(
                "multiproc-exporter: removed {n} metric files left in {} by an earlier run (--demo.continue keeps them)",
                dir.display()
            ),
            Err(e) => {
                eprintln!("multiproc-exporter: cannot empty {}: {e}", dir.display());
                return ExitCode::from(1);
            }
        }
    }
    let sglang = flags.engine == super::flags::DemoEngine::Sglang;
    eprintln!(
        "multiproc-exporter: demo writing {}-like metrics to {}",
        if sglang { "SGLang" } else { "vLLM" },
        dir.display()
    );
    let listen = if flags.web.listen_addresses.is_empty() {
        vec![DEMO_LISTEN_ADDRESS.to_owned()]
    } else {
        flags.web.listen_addresses.clone()
    };
    for address in &listen {
        let host_port = match address.strip_prefix(':') {
            Some(port) => format!("localhost:{port}"),
            None => address.clone(),
        };
        eprintln!("multiproc-exporter: demo serving http://{host_port}/metrics (Ctrl-C stops it)");
        eprintln!(
            "multiproc-exporter: the endpoint picker's view: http://{host_port}/metrics/endpoint-picker"
        );
    }
    let mut config = crate::demo::DemoConfig::new(&dir);
    config.api_servers = flags.api_servers;
    config.workers = flags.workers;
    config.tick = std::time::Duration::from_millis(flags.tick_ms.max(1));
    config.seed = flags.seed;
    let stop = Arc::new(AtomicBool::new(false));
    let simulation = {
        let stop = stop.clone();
        if sglang {
            let (dir, tick, seed) = (config.dir, config.tick, config.seed);
            std::thread::spawn(move || {
                crate::demo::sglang::run_sglang_demo(dir, 2, tick, seed, &stop)
            })
        } else {
            std::thread::spawn(move || crate::demo::run_demo(config, &stop))
        }
    };
    // The simulated writers are not processes: nothing to look for in /proc.
    let directories = DirectoryFlags {
        writers_liveness: super::flags::LivenessArg::Off,
        ..DirectoryFlags::default()
    };
    let code = match serve_settings(
        vec![dir.clone()],
        &directories,
        &flags.config,
        &flags.web,
        DEMO_LISTEN_ADDRESS,
    )
    .and_then(|mut settings| {
        settings.push = flags.push.validate()?;
        Ok(settings)
    }) {
        Ok(settings) => server::run(settings),
        Err(e) => {
            tracing::error!("{e}");
            ExitCode::from(2)
        }
    };
    stop.store(true, Ordering::Relaxed);
    match simulation.join() {
        Ok(Ok(())) => {}
        Ok(Err(e)) => eprintln!("multiproc-exporter: the demo simulation failed: {e}"),
        Err(_) => eprintln!("multiproc-exporter: the demo simulation panicked"),
    }
    if temporary {
        let _ = std::fs::remove_dir_all(&dir);
    }
    code
}
