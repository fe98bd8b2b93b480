//! `multiproc-exporter demo`: a vLLM-like simulation writes a metrics
//! directory ([`crate::demo`]) while the server serves it.

use std::process::ExitCode;

use super::flags::{DemoFlags, DirectoryFlags};
use super::settings::serve_settings;
use crate::server;

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
    eprintln!(
        "multiproc-exporter: demo writing vLLM-like metrics to {}",
        dir.display()
    );
    let mut config = crate::demo::DemoConfig::new(&dir);
    config.api_servers = flags.api_servers;
    config.workers = flags.workers;
    config.tick = std::time::Duration::from_millis(flags.tick_ms.max(1));
    config.seed = flags.seed;
    let stop = Arc::new(AtomicBool::new(false));
    let simulation = {
        let stop = stop.clone();
        std::thread::spawn(move || crate::demo::run_demo(config, &stop))
    };
    let code = match serve_settings(
        vec![dir.clone()],
        &DirectoryFlags::default(),
        &flags.config,
        &flags.web,
    ) {
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
