//! The flags validated, once, into the typed settings the rest of the crate
//! takes: directories (with `$PROMETHEUS_MULTIPROC_DIR` as the default), the
//! subdirectory label, the link policy, the configuration file, and the
//! server's settings. Every message names the flag that is wrong.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use axum::http::Uri;

use super::flags::{
    ConfigFlags, DirectoryFlags, DiscoverFlags, LivenessArg, NegotiationArg, PushFlags, ServeFlags,
    WebFlags,
};
use crate::expose::negotiate::Negotiation;
use crate::pipeline::discovered::{DiscoverCaps, DiscoverLabels, DiscoverOptions};
use crate::server::{ServeSettings, Settings, DEFAULT_LISTEN_ADDRESS};
use crate::sink::push::PushSettings;
use crate::sink::Authorization;
use crate::source::budget::{default_budget, process_memory_limit};
use crate::source::link_policy::LinkPolicy;
use crate::source::writers::{LivenessMode, WriterPolicy};
use crate::source::MemoryBudget;
use crate::transform::config::{label_name_problem, Config, ConfigError};

/// The multiprocess directory named by the environment, as prometheus_client
/// finds it (the lower-case name is its deprecated spelling).
pub fn multiproc_dir_from_env() -> Option<PathBuf> {
    ["PROMETHEUS_MULTIPROC_DIR", "prometheus_multiproc_dir"]
        .iter()
        .find_map(|name| std::env::var_os(name).filter(|v| !v.is_empty()))
        .map(PathBuf::from)
}

/// The given paths, or the environment's directory when none is given (an
/// empty path, like an empty `PROMETHEUS_MULTIPROC_DIR`, counts as none).
pub(crate) fn paths_or_env(given: &[PathBuf]) -> Result<Vec<PathBuf>, String> {
    let given: Vec<PathBuf> = given
        .iter()
        .filter(|d| !d.as_os_str().is_empty())
        .cloned()
        .collect();
    if !given.is_empty() {
        return Ok(given);
    }
    multiproc_dir_from_env()
        .map(|dir| vec![dir])
        .ok_or_else(|| {
            "No metrics directory: pass --dir DIR or set PROMETHEUS_MULTIPROC_DIR.".to_owned()
        })
}

/// How the directories are read, validated.
#[derive(Debug, Clone)]
pub(crate) struct DirectorySettings {
    /// With a label name: the directories are parents of one directory each.
    pub(crate) subdirectories_label: Option<Arc<str>>,
    /// Which symbolic links are followed.
    pub(crate) link_policy: LinkPolicy,
    /// The memory budget of the records read, if any.
    pub(crate) memory_budget: Option<Arc<MemoryBudget>>,
    /// What is done about the writer processes.
    pub(crate) writer_policy: WriterPolicy,
}

impl DirectoryFlags {
    /// Checks the label name.
    pub(crate) fn validate(&self) -> Result<DirectorySettings, String> {
        if let Some(problem) = self
            .subdirectories_label
            .as_deref()
            .and_then(label_name_problem)
        {
            return Err(format!(
                "Invalid --dir.subdirectories-label {:?}: {problem}.",
                self.subdirectories_label.as_deref().unwrap_or_default()
            ));
        }
        if self.compact_dead_writers && self.writers_liveness == LivenessArg::Off {
            return Err("--dir.compact-dead-writers needs to know which writers exited: it cannot be combined with --writers.liveness=off.".to_owned());
        }
        if self.remove_stale_subdirectories && self.ignore_temporary_subdirectories {
            return Err("--dir.remove-stale-subdirectories removes the temporary subdirectories left by earlier runs: it cannot be combined with --dir.ignore-temporary-subdirectories.".to_owned());
        }
        if self.remove_stale_subdirectories && self.subdirectories_label.is_some() {
            return Err("--dir.remove-stale-subdirectories applies to one application's directory: it cannot be combined with --dir.subdirectories-label.".to_owned());
        }
        Ok(DirectorySettings {
            subdirectories_label: self.subdirectories_label.as_deref().map(Arc::from),
            link_policy: if self.follow_links_outside {
                LinkPolicy::Anywhere
            } else {
                LinkPolicy::InsideDirectory
            },
            memory_budget: memory_budget(&self.memory_budget)?
                .map(|limit| Arc::new(MemoryBudget::new(limit))),
            writer_policy: WriterPolicy {
                liveness: match self.writers_liveness {
                    LivenessArg::Auto => LivenessMode::Auto,
                    LivenessArg::Proc => LivenessMode::Proc,
                    LivenessArg::Off => LivenessMode::Off,
                },
                keep_dead_live_gauges: self.keep_dead_live_gauges,
                drop_dead_gauges: self.drop_dead_gauges,
                process_metrics: !self.disable_process_metrics,
                pending_grace: self.pending_grace,
                fold_dead: !self.exact_sums,
                compact_dead: self.compact_dead_writers,
                temporary_runs: !self.ignore_temporary_subdirectories,
                remove_stale_runs: self.remove_stale_subdirectories,
                // The binary writes no metric file (see
                // `crate::source::writers`).
                collector_writes: false,
            },
        })
    }
}

/// The budget `--memory.budget` asks for: `auto` derives it from the
/// process's memory limit, `0` is none.
fn memory_budget(flag: &str) -> Result<Option<usize>, String> {
    // Empty: flags made in code (`DirectoryFlags::default()`, the demo's).
    if flag.trim().is_empty() || flag.trim().eq_ignore_ascii_case("auto") {
        return Ok(default_budget(process_memory_limit()));
    }
    let bytes = parse_size(flag).ok_or_else(|| {
        format!(
            "Invalid --memory.budget {flag:?}: expected a size such as 256MiB, 1GiB or 500MB, auto, or 0 for none."
        )
    })?;
    Ok((bytes > 0).then(|| usize::try_from(bytes).unwrap_or(usize::MAX)))
}

/// `--push.queue-max-bytes`'s default.
const DEFAULT_PUSH_QUEUE_MAX_BYTES: usize = 4 << 20;

/// A size with an optional unit: `B`, decimal `kB`/`KB`, `MB`, `GB`, `TB`
/// or binary `KiB`, `MiB`, `GiB`, `TiB` (hand-written: one flag does not
/// justify a dependency).
fn parse_size(text: &str) -> Option<u64> {
    let text = text.trim();
    let split = text
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(text.len());
    let (number, unit) = text.split_at(split);
    let number: f64 = number.parse().ok()?;
    let multiplier: u64 = match unit.trim() {
        "" | "B" => 1,
        "kB" | "KB" | "K" | "k" => 1_000,
        "MB" | "M" => 1_000_000,
        "GB" | "G" => 1_000_000_000,
        "TB" | "T" => 1_000_000_000_000,
        "KiB" | "Ki" => 1 << 10,
        "MiB" | "Mi" => 1 << 20,
        "GiB" | "Gi" => 1 << 30,
        "TiB" | "Ti" => 1 << 40,
        _ => return None,
    };
    let bytes = number * multiplier as f64;
    (bytes.is_finite() && bytes >= 0.0 && bytes < u64::MAX as f64).then_some(bytes as u64)
}

/// The configuration file, loaded.
#[derive(Debug, Clone, Default)]
pub(crate) struct LoadedConfig {
    /// Its absolute path, if one was given.
    pub(crate) path: Option<PathBuf>,
    /// The configuration in force.
    pub(crate) config: Config,
    /// The bytes it was read from.
    pub(crate) bytes: Option<Vec<u8>>,
}

impl ConfigFlags {
    /// Reads and validates the configuration file (the default configuration
    /// without one).
    pub(crate) fn load(&self) -> Result<LoadedConfig, String> {
        let Some(path) = self.config.as_deref().map(absolute) else {
            return Ok(LoadedConfig::default());
        };
        let bytes = std::fs::read(&path).map_err(|e| {
            let error = ConfigError::Read {
                path: path.clone(),
                error: e.to_string(),
            };
            format!("Invalid configuration file: {error}")
        })?;
        let config = Config::from_bytes(&bytes)
            .map_err(|e| format!("Invalid configuration file {}: {e}", path.display()))?;
        Ok(LoadedConfig {
            path: Some(path),
            config,
            bytes: Some(bytes),
        })
    }
}

impl ServeFlags {
    /// The server's settings for `dirs` (already defaulted from the
    /// environment), or what is wrong with the flags.
    pub(crate) fn validate(&self) -> Result<ServeSettings, String> {
        let discovery = self.discover.validate(self)?;
        let dirs: Vec<PathBuf> = match discovery {
            Some(_) => Vec::new(),
            None => paths_or_env(&self.dirs)?
                .iter()
                .map(|d| absolute(d))
                .collect(),
        };
        let mut settings = serve_settings(
            dirs,
            &self.directories,
            &self.config,
            &self.web,
            DEFAULT_LISTEN_ADDRESS,
        )?;
        // 0 turns the warnings off: an interval too long to ever end.
        settings.app.dead_files_warning = self.dead_files_warning;
        settings.app.directory_warn_interval =
            timeout(self.warn_interval).unwrap_or(Duration::from_secs(u64::from(u32::MAX)));
        settings.push = self.push.validate()?;
        settings.app.discovery = discovery;
        Ok(settings)
    }
}

impl DiscoverFlags {
    /// The discovery options with `--discover.processes` (`None` without),
    /// checked against the other flags of `serve`.
    pub(crate) fn validate(&self, serve: &ServeFlags) -> Result<Option<DiscoverOptions>, String> {
        let given_dirs = serve.dirs.iter().any(|d| !d.as_os_str().is_empty());
        self.validate_with(given_dirs, &serve.directories)
    }

    /// [`Self::validate`] for a command given directories or not (`dump`'s
    /// PATHs) and reading them as `directories` says.
    pub(crate) fn validate_with(
        &self,
        given_dirs: bool,
        directories: &DirectoryFlags,
    ) -> Result<Option<DiscoverOptions>, String> {
        if !self.discover_processes {
            return Ok(None);
        }
        if given_dirs {
            return Err("--discover.processes finds the metrics directories itself: drop --dir (and unset PROMETHEUS_MULTIPROC_DIR in its environment).".to_owned());
        }
        if directories.subdirectories_label.is_some() {
            return Err("--discover.processes labels each directory with its pod: it cannot be combined with --dir.subdirectories-label.".to_owned());
        }
        if directories.remove_stale_subdirectories {
            return Err("--discover.processes never writes into the directories it finds: it cannot be combined with --dir.remove-stale-subdirectories.".to_owned());
        }
        if directories.compact_dead_writers {
            return Err("--discover.processes never writes into the directories it finds: it cannot be combined with --dir.compact-dead-writers.".to_owned());
        }
        if self.discover_interval.is_zero() {
            return Err("--discover.interval must be more than 0.".to_owned());
        }
        if self.web_scrape_timeout.is_zero() {
            return Err("--web.scrape-timeout must be more than 0.".to_owned());
        }
        // 0: no cap.
        let cap = |n: usize| (n > 0).then_some(n);
        let mut names: Vec<(&str, String)> = Vec::new();
        let mut label = |flag: &'static str, value: &str| -> Result<Option<Arc<str>>, String> {
            if value.is_empty() {
                return Ok(None);
            }
            if let Some(problem) = label_name_problem(value) {
                return Err(format!("Invalid --discover.{flag} {value:?}: {problem}."));
            }
            if let Some((other, _)) = names.iter().find(|(_, v)| *v == value) {
                return Err(format!(
                    "--discover.{flag} and --discover.{other} are both {value:?}: each label needs its own name."
                ));
            }
            names.push((flag, value.to_owned()));
            Ok(Some(Arc::from(value)))
        };
        let labels = DiscoverLabels {
            namespace: label("namespace-label", &self.discover_namespace_label)?,
            pod: label("pod-label", &self.discover_pod_label)?,
            container: label("container-label", &self.discover_container_label)?,
            pod_uid: label(
                "pod-uid-label",
                self.discover_pod_uid_label.as_deref().unwrap_or(""),
            )?,
        };
        Ok(Some(DiscoverOptions {
            pod_log_dir: (!self.discover_pod_log_dir.as_os_str().is_empty())
                .then(|| absolute(&self.discover_pod_log_dir)),
            interval: self.discover_interval,
            linger: self.discover_linger,
            labels,
            caps: DiscoverCaps {
                max_directories: cap(self.discover_max_directories_per_pod),
                max_files: cap(self.discover_max_files_per_pod),
                max_series: cap(self.discover_max_series_per_pod),
                reserved_descriptors: self.discover_reserved_descriptors,
            },
            scrape_timeout: self.web_scrape_timeout,
            late_max_age: self
                .discover_late_max_age
                .unwrap_or(self.web_scrape_timeout * 3),
        }))
    }
}

/// The server's settings for `dirs` read as `directories` says, listening on
/// `default_listen` unless the flags name addresses.
pub(crate) fn serve_settings(
    dirs: Vec<PathBuf>,
    directories: &DirectoryFlags,
    config: &ConfigFlags,
    web: &WebFlags,
    default_listen: &str,
) -> Result<ServeSettings, String> {
    validate_telemetry_path(&web.telemetry_path)?;
    let directories = directories.validate()?;
    let loaded = config.load()?;
    if let Some(clash) = crate::server::view_clash(&web.telemetry_path, &loaded.config) {
        return Err(format!("Invalid configuration: {clash}."));
    }
    if directories.writer_policy.compact_dead {
        if let Some(conflict) = loaded.config.compaction_conflict() {
            return Err(format!("Invalid configuration: {conflict}."));
        }
    }
    Ok(ServeSettings {
        app: Settings {
            dirs,
            subdirectories_label: directories.subdirectories_label,
            link_policy: directories.link_policy,
            memory_budget: directories.memory_budget,
            writer_policy: directories.writer_policy,
            dead_files_warning: 1000,
            telemetry_path: web.telemetry_path.clone(),
            exporter_metrics: !web.disable_exporter_metrics,
            openmetrics: !web.disable_openmetrics,
            directory_warn_interval: Duration::from_secs(60),
            negotiation: match web.negotiation {
                NegotiationArg::Safe => Negotiation::Safe,
                NegotiationArg::PrometheusClient => Negotiation::PrometheusClient,
            },
            config_path: loaded.path,
            config: loaded.config,
            discovery: None,
        },
        config_bytes: loaded.bytes,
        listen_addresses: if web.listen_addresses.is_empty() {
            vec![default_listen.to_owned()]
        } else {
            web.listen_addresses.clone()
        },
        web_config_file: web.web_config_file.as_deref().map(absolute),
        max_requests: web.max_requests,
        max_connections: web.max_connections,
        read_header_timeout: timeout(web.read_header_timeout),
        idle_timeout: timeout(web.idle_timeout),
        write_timeout: timeout(web.write_timeout),
        push: None,
    })
}

impl PushFlags {
    /// The push settings, `None` without `--push.remote-write-url` and
    /// `--push.otlp-url`.
    pub(crate) fn validate(&self) -> Result<Option<PushSettings>, String> {
        let url = |flag: &str, url: &Option<String>| -> Result<Option<Uri>, String> {
            let Some(url) = url.as_deref().filter(|u| !u.is_empty()) else {
                return Ok(None);
            };
            let bad = |why: &str| format!("Invalid {flag} {url:?}: {why}.");
            let uri: Uri = url.parse().map_err(|e| bad(&format!("{e}")))?;
            if !matches!(uri.scheme_str(), Some("http" | "https")) {
                return Err(bad("the scheme must be http or https"));
            }
            let Some(authority) = uri.authority() else {
                return Err(bad("no host"));
            };
            if authority.as_str().contains('@') {
                return Err(bad(
                    "credentials go in --push.basic-auth.* or --push.bearer-token-file, not in the URL",
                ));
            }
            Ok(Some(uri))
        };
        let remote_write_url = url("--push.remote-write-url", &self.remote_write_url)?;
        let otlp_url = url("--push.otlp-url", &self.otlp_url)?;
        if remote_write_url.is_none() && otlp_url.is_none() {
            return Ok(None);
        }
        let mut headers: Vec<(String, String)> = Vec::new();
        for header in &self.headers {
            let Some((name, value)) = header.split_once('=') else {
                return Err(format!(
                    "Invalid --push.header {header:?}: write NAME=VALUE."
                ));
            };
            let (name, value) = (name.trim(), value.trim());
            if axum::http::HeaderName::from_bytes(name.as_bytes()).is_err()
                || axum::http::HeaderValue::from_str(value).is_err()
            {
                return Err(format!(
                    "Invalid --push.header {header:?}: not an HTTP header name and value."
                ));
            }
            const RESERVED: [&str; 12] = [
                "authorization",
                "connection",
                "content-encoding",
                "content-length",
                "content-type",
                "host",
                "keep-alive",
                "te",
                "transfer-encoding",
                "upgrade",
                "user-agent",
                "x-prometheus-remote-write-version",
            ];
            if RESERVED.contains(&name.to_ascii_lowercase().as_str()) {
                return Err(format!(
                    "Invalid --push.header {header:?}: the exporter sets {name} itself."
                ));
            }
            if headers.iter().any(|(n, _)| n.eq_ignore_ascii_case(name)) {
                return Err(format!("--push.header {name:?} is given twice."));
            }
            headers.push((name.to_owned(), value.to_owned()));
        }
        if self.interval.is_zero() {
            return Err("--push.interval must be more than 0.".to_owned());
        }
        if self.timeout.is_zero() {
            return Err("--push.timeout must be more than 0.".to_owned());
        }
        if self.queue_capacity == 0 {
            return Err("--push.queue-capacity must be at least 1.".to_owned());
        }
        let queue_max_bytes = match self.queue_max_bytes.trim() {
            "" => DEFAULT_PUSH_QUEUE_MAX_BYTES,
            text => parse_size(text)
                .map(|b| usize::try_from(b).unwrap_or(usize::MAX))
                .ok_or_else(|| {
                    format!(
                        "Invalid --push.queue-max-bytes {text:?}: write a size such as 4MiB or 512KiB."
                    )
                })?,
        };
        let mut labels: Vec<(String, String)> = Vec::new();
        for label in &self.labels {
            let Some((name, value)) = label.split_once('=') else {
                return Err(format!("Invalid --push.label {label:?}: write NAME=VALUE."));
            };
            if let Some(problem) = label_name_problem(name) {
                return Err(format!("Invalid --push.label {label:?}: {problem}."));
            }
            if name.starts_with("__") {
                return Err(format!(
                    "Invalid --push.label {label:?}: names starting with __ are reserved."
                ));
            }
            if labels.iter().any(|(n, _)| n == name) {
                return Err(format!("--push.label {name:?} is given twice."));
            }
            labels.push((name.to_owned(), value.to_owned()));
        }
        let authorization =
            match (
                &self.basic_auth_username,
                &self.basic_auth_password_file,
                &self.bearer_token_file,
            ) {
                (None, None, None) => None,
                (Some(username), Some(password_file), None) => Some(Authorization::Basic {
                    username: username.clone(),
                    password_file: absolute(password_file),
                }),
                (None, None, Some(token)) => Some(Authorization::BearerTokenFile(absolute(token))),
                (_, _, Some(_)) => {
                    return Err(
                        "Give either --push.basic-auth.* or --push.bearer-token-file, not both."
                            .to_owned(),
                    )
                }
                _ => return Err(
                    "--push.basic-auth.username and --push.basic-auth.password-file go together."
                        .to_owned(),
                ),
            };
        Ok(Some(PushSettings {
            remote_write_url,
            otlp_url,
            headers,
            interval: self.interval,
            timeout: self.timeout,
            queue_capacity: self.queue_capacity,
            queue_max_bytes,
            min_backoff: self.min_backoff,
            max_backoff: self.max_backoff,
            max_retry_after: self.max_retry_after,
            otlp_temporality: if self.otlp_temporality == "delta" {
                crate::expose::otlp::Temporality::Delta
            } else {
                crate::expose::otlp::Temporality::Cumulative
            },
            flush_deadline: self.flush_deadline,
            labels,
            authorization,
            ca_file: self.ca_file.as_deref().map(absolute),
        }))
    }
}

/// A timeout flag's value: zero means none.
fn timeout(duration: Duration) -> Option<Duration> {
    (!duration.is_zero()).then_some(duration)
}

fn absolute(path: &Path) -> PathBuf {
    std::path::absolute(path).unwrap_or_else(|_| path.to_path_buf())
}

fn validate_telemetry_path(path: &str) -> Result<(), String> {
    if !path.starts_with('/') {
        return Err(format!(
            "--web.telemetry-path must start with '/', got {path:?}."
        ));
    }
    if path == "/-/healthy" || path == "/-/ready" {
        return Err(format!(
            "--web.telemetry-path {path:?} is taken by the health endpoints."
        ));
    }
    if path
        .parse::<Uri>()
        .map(|u| u.path() != path)
        .unwrap_or(true)
    {
        return Err(format!(
            "--web.telemetry-path {path:?} is not a valid URL path (no query, fragment or spaces)."
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn duration_flags() {
        assert_eq!(
            super::super::flags::parse_duration("10s"),
            Ok(Duration::from_secs(10))
        );
        assert_eq!(
            super::super::flags::parse_duration("1m30s"),
            Ok(Duration::from_secs(90))
        );
        assert_eq!(
            super::super::flags::parse_duration("500ms"),
            Ok(Duration::from_millis(500))
        );
        assert_eq!(super::super::flags::parse_duration("0"), Ok(Duration::ZERO));
        assert!(super::super::flags::parse_duration("10").is_err());
        assert!(super::super::flags::parse_duration("soon").is_err());
        assert_eq!(timeout(Duration::ZERO), None);
    }

    #[test]
    fn memory_budget_sizes() {
        assert_eq!(parse_size("256MiB"), Some(256 << 20));
        assert_eq!(parse_size("1GiB"), Some(1 << 30));
        assert_eq!(parse_size("500MB"), Some(500_000_000));
        assert_eq!(parse_size("1.5Gi"), Some(3 << 29));
        assert_eq!(parse_size("4096"), Some(4096));
        assert_eq!(parse_size("lots"), None);
        assert_eq!(parse_size("-1MiB"), None);
        assert_eq!(memory_budget("0"), Ok(None));
        assert_eq!(memory_budget("64MiB"), Ok(Some(64 << 20)));
        assert_eq!(
            memory_budget("auto"),
            Ok(default_budget(process_memory_limit()))
        );
        assert!(memory_budget("64 parsecs")
            .unwrap_err()
            .contains("--memory.budget"));
    }

    #[test]
    fn compaction_needs_writer_liveness() {
        let flags = DirectoryFlags {
            compact_dead_writers: true,
            ..DirectoryFlags::default()
        };
        assert!(flags.validate().unwrap().writer_policy.compact_dead);
        let off = DirectoryFlags {
            writers_liveness: LivenessArg::Off,
            ..flags
        };
        assert!(off
            .validate()
            .unwrap_err()
            .contains("--dir.compact-dead-writers"));
    }

    #[test]
    fn push_flags() {
        let flags = PushFlags {
            remote_write_url: Some("http://prometheus:9090/api/v1/write".into()),
            interval: Duration::from_secs(15),
            timeout: Duration::from_secs(10),
            queue_capacity: 4,
            labels: vec!["pod=p-1".into(), "cluster=".into()],
            bearer_token_file: Some("/token".into()),
            ..PushFlags::default()
        };
        let push = flags.validate().unwrap().unwrap();
        assert_eq!(
            push.labels,
            [
                ("pod".into(), "p-1".into()),
                ("cluster".into(), String::new())
            ]
        );
        assert_eq!(
            push.authorization,
            Some(Authorization::BearerTokenFile("/token".into()))
        );
        assert!(PushFlags::default().validate().unwrap().is_none());
        let wrong = |change: fn(&mut PushFlags)| {
            let mut f = flags.clone();
            change(&mut f);
            f.validate().unwrap_err()
        };
        assert!(wrong(|f| f.remote_write_url = Some("ftp://x/".into())).contains("scheme"));
        assert!(wrong(|f| f.otlp_url = Some("ftp://x/".into())).contains("--push.otlp-url"));
        assert!(wrong(|f| f.headers = vec!["X-A".into()]).contains("NAME=VALUE"));
        assert!(wrong(|f| f.headers = vec!["Content-Encoding=br".into()]).contains("itself"));
        assert!(wrong(|f| f.headers = vec!["a b=1".into()]).contains("header name"));
        assert!(wrong(|f| f.headers = vec!["X-A=1".into(), "x-a=2".into()]).contains("twice"));
        let otlp_only = PushFlags {
            remote_write_url: None,
            otlp_url: Some("https://collector:4318/v1/metrics".into()),
            headers: vec!["X-Scope-OrgID=t-1".into()],
            ..flags.clone()
        }
        .validate()
        .unwrap()
        .unwrap();
        assert!(otlp_only.remote_write_url.is_none());
        assert_eq!(
            otlp_only.otlp_url.unwrap().to_string(),
            "https://collector:4318/v1/metrics"
        );
        assert_eq!(otlp_only.headers, [("X-Scope-OrgID".into(), "t-1".into())]);
        assert!(
            wrong(|f| f.remote_write_url = Some("https://u:p@x/".into())).contains("basic-auth")
        );
        assert!(wrong(|f| f.labels = vec!["x".into()]).contains("NAME=VALUE"));
        assert!(wrong(|f| f.labels = vec!["__x=1".into()]).contains("reserved"));
        assert!(wrong(|f| f.labels = vec!["a-b=1".into()]).contains("--push.label"));
        assert!(wrong(|f| f.queue_capacity = 0).contains("--push.queue-capacity"));
        assert!(wrong(|f| f.queue_max_bytes = "lots".into()).contains("--push.queue-max-bytes"));
        assert!(wrong(|f| f.interval = Duration::ZERO).contains("--push.interval"));
        assert!(wrong(|f| f.basic_auth_username = Some("u".into())).contains("not both"));
        assert!(wrong(|f| {
            f.bearer_token_file = None;
            f.basic_auth_username = Some("u".into());
        })
        .contains("go together"));
    }

    #[test]
    fn discovery_flags() {
        use clap::Parser as _;
        let flags = |args: &[&str]| {
            let mut all = vec!["multiproc-exporter"];
            all.extend_from_slice(args);
            crate::cli::Cli::try_parse_from(all).unwrap().serve
        };
        let discover = |args: &[&str]| {
            let serve = flags(args);
            serve.discover.validate(&serve)
        };
        assert_eq!(discover(&[]), Ok(None));
        let wrong = |args: &[&str], needle: &str| {
            let error = discover(args).unwrap_err();
            assert!(error.contains(needle), "{args:?}: {error}");
        };
        wrong(&["--discover.processes", "--dir", "/x"], "drop --dir");
        let dirs_from_env = flags(&[]).dirs.iter().any(|d| !d.as_os_str().is_empty());
        if dirs_from_env {
            return; // PROMETHEUS_MULTIPROC_DIR is set here: every case is refused.
        }
        let options = discover(&[
            "--discover.processes",
            "--discover.pod-uid-label",
            "pod_uid",
            "--discover.namespace-label",
            "",
            "--discover.interval",
            "30s",
        ])
        .unwrap()
        .unwrap();
        assert_eq!(options.labels.namespace, None);
        assert_eq!(options.labels.pod.as_deref(), Some("pod"));
        assert_eq!(options.labels.pod_uid.as_deref(), Some("pod_uid"));
        assert_eq!(options.interval, Duration::from_secs(30));
        assert_eq!(options.linger, Duration::from_secs(300));
        assert_eq!(
            options.pod_log_dir.as_deref(),
            Some(Path::new("/var/log/pods"))
        );
        let none = discover(&["--discover.processes", "--discover.pod-log-dir", ""]);
        assert_eq!(none.unwrap().unwrap().pod_log_dir, None);
        wrong(
            &["--discover.processes", "--dir.subdirectories-label", "pod"],
            "--dir.subdirectories-label",
        );
        wrong(
            &["--discover.processes", "--dir.compact-dead-writers"],
            "--dir.compact-dead-writers",
        );
        wrong(
            &["--discover.processes", "--discover.interval", "0"],
            "--discover.interval",
        );
        wrong(
            &["--discover.processes", "--discover.pod-label", "container"],
            "each label needs its own name",
        );
        wrong(
            &["--discover.processes", "--discover.container-label", "a-b"],
            "--discover.container-label",
        );
        // What one pod may cost: defaults, a cap turned off, the timeout.
        let options = discover(&["--discover.processes"]).unwrap().unwrap();
        assert_eq!(options.caps, DiscoverCaps::default());
        assert_eq!(options.scrape_timeout, Duration::from_secs(10));
        let options = discover(&[
            "--discover.processes",
            "--discover.max-directories-per-pod",
            "0",
            "--discover.max-series-per-pod",
            "7",
            "--discover.reserved-descriptors",
            "64",
            "--web.scrape-timeout",
            "3s",
        ])
        .unwrap()
        .unwrap();
        assert_eq!(
            options.caps,
            DiscoverCaps {
                max_directories: None,
                max_files: Some(DiscoverCaps::MAX_FILES),
                max_series: Some(7),
                reserved_descriptors: 64,
            }
        );
        assert_eq!(options.scrape_timeout, Duration::from_secs(3));
        wrong(
            &["--discover.processes", "--web.scrape-timeout", "0"],
            "--web.scrape-timeout",
        );
    }

    #[test]
    fn telemetry_path_validation() {
        assert!(validate_telemetry_path("/metrics").is_ok());
        assert!(validate_telemetry_path("/").is_ok());
        assert!(validate_telemetry_path("metrics").is_err());
        assert!(validate_telemetry_path("/-/ready").is_err());
        assert!(validate_telemetry_path("/m?x=1").is_err());
        assert!(validate_telemetry_path("/m x").is_err());
    }
}
