//! The YAML configuration file: what to serve and how to name it.
//!
//! Loading is two-phase (as in ripgrep's flag handling): the file is parsed
//! into [`ConfigFile`], which mirrors the YAML exactly and rejects unknown
//! keys, and is then validated once into the typed [`Config`] that the rest
//! of the program uses. The doc comments of [`ConfigFile`] and its parts are
//! the reference for the file format (`docs/configuration.md` repeats them).
//!
//! ```yaml
//! filter:
//!   include_prefixes: ["vllm:", "lmcache:"]
//!   exclude_prefixes: []
//! naming: ray
//! per_writer: {label: WorkerId}
//! ray: {replica_id: ""}
//! labels: {Component: core_worker, NodeAddress: "${NODE_IP}"}
//! ```
//!
//! Label values (and `ray.replica_id`) may name environment variables, read
//! once when the file is loaded: `${NAME}` (an error when `NAME` is not
//! set), `${NAME:-default}` (`default` when it is unset or empty), `$$` for
//! a literal `$`. This is how a Kubernetes pod's downward API values
//! (`status.podIP`, `spec.nodeName`) reach the labels.

use std::collections::BTreeMap;
use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use serde::Deserialize;

use crate::model::names::is_legacy_metric_name;
pub(crate) use crate::model::names::label_name_problem;
use crate::transform::aliases::VLLM_ALIASES;
use crate::transform::fold_config::{
    validate_fold, EndpointPickerSection, FoldedViewSection, ViewSection,
};
use crate::transform::ray_name;
use crate::transform::view::{view_name_problem, View, ENDPOINT_PICKER};

/// The configuration file as written: every key is optional, unknown keys are
/// errors.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ConfigFile {
    /// Which metric families to serve. Filters apply to whole families, by
    /// their original name (before `naming`), so a histogram's `_bucket`,
    /// `_sum` and `_count` samples always stay together.
    #[serde(default)]
    pub filter: FilterSection,
    /// How metric names are written: `prometheus` (unchanged, the default)
    /// or `ray` (the names Ray's metrics agent exposes for vLLM:
    /// `vllm:kv_cache_usage_perc` becomes `ray_vllm_kv_cache_usage_perc`).
    #[serde(default)]
    pub naming: Naming,
    /// Serve each writer's series apart instead of merged: every writer (the
    /// process a file's name names, `1234` in `counter_1234.db`) is merged
    /// on its own and its samples get the label `label` with the writer as
    /// value, as Ray's metrics agent labels every series with `WorkerId`.
    /// Summing the writers' series over the label gives the merged values
    /// (counters, histograms, summaries, `sum` gauges). Absent: merged, as
    /// prometheus_client serves them.
    #[serde(default)]
    pub per_writer: Option<PerWriterSection>,
    /// What vLLM's Ray metric wrappers add.
    #[serde(default)]
    pub ray: RaySection,
    /// Families served a second time under an old name, as
    /// `old_name: new_name` (original names, before `naming`): a copy of the
    /// family `new_name` named `old_name`, right after it, unless the
    /// directory has a family `old_name` itself. See
    /// [`crate::transform::aliases`].
    #[serde(default)]
    pub aliases: BTreeMap<String, String>,
    /// Add vLLM's renames that consumers still query to `aliases`
    /// ([`crate::transform::aliases::VLLM_ALIASES`]:
    /// `vllm:gpu_cache_usage_perc` for `vllm:kv_cache_usage_perc`, ...).
    #[serde(default)]
    pub vllm_aliases: bool,
    /// Constant labels added to every served sample, as `name: value`.
    /// Names must be legacy Prometheus label names (`[a-zA-Z_][a-zA-Z0-9_]*`),
    /// must not start with `__` (reserved), and must not be `le` or
    /// `quantile` (they would corrupt histograms and summaries). When a
    /// sample already has a label of the same name, the constant label wins
    /// and the sample's own label is kept as `exported_<name>`, as Prometheus
    /// does for target labels (`honor_labels: false`).
    #[serde(default)]
    pub labels: BTreeMap<String, String>,
    /// HTTP endpoints scraped on every collection and merged with the
    /// directory's families (`serve` only), for example vLLM's Rust
    /// frontend (`http://localhost:8000/metrics`) or LMCache's metrics port.
    /// Their answers (Prometheus text or OpenMetrics) go through the same
    /// filter, naming, aliases and labels, and are served in whichever
    /// format the scraper negotiated. A family of the same name as an
    /// earlier source's (the directory first, then the upstreams in this
    /// order) joins it only when its type matches and none of its series is
    /// already there; otherwise it is left out and reported
    /// (`docs/sources.md`). An upstream that is down, slow or answers
    /// garbage is left out of that scrape, never failing it.
    #[serde(default)]
    pub upstreams: Vec<UpstreamSection>,
    /// Views: named sets of families, each served on its own path
    /// `<telemetry path>/<name>` (`serve` only), as `name: [family, ...]`,
    /// families named as `/metrics` names them (after `naming` and
    /// `aliases`). A view's answer is those families of `/metrics`, and a
    /// poll of it reads, merges and encodes only them. The built-in view
    /// `endpoint-picker` (what the inference gateway's endpoint picker reads)
    /// is served without configuration; a view of that name replaces it, and
    /// `endpoint-picker: []` turns it off. A name is one path segment
    /// (letters, digits, `-`, `_`, `.`). See [`crate::transform::views`].
    /// A view is a list of families, or `{families: [...], fold: {...}}`
    /// to fold labels away ([`crate::transform::fold_config::FoldSection`]).
    #[serde(default)]
    pub views: BTreeMap<String, ViewSection>,
    /// The built-in view `endpoint-picker`'s settings.
    #[serde(default)]
    pub endpoint_picker: EndpointPickerSection,
}

/// One entry of `upstreams`.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct UpstreamSection {
    /// The URL to scrape: `http://HOST[:PORT]/PATH` or `https://…`.
    /// Environment variables are expanded as in `labels`
    /// (`http://${POD_IP}:8000/metrics`).
    pub url: String,
    /// The value of the `upstream` label of its self-metrics and log
    /// lines; unique among the upstreams. Default: the URL's `HOST:PORT`.
    #[serde(default)]
    pub name: Option<String>,
    /// The longest a fetch may take (default `5s`), connection included:
    /// a slower upstream is left out of that scrape. When Prometheus sends
    /// `X-Prometheus-Scrape-Timeout-Seconds`, the deadline is at most that
    /// minus a tenth (at most 0.5 s), so the scrape answers in time.
    #[serde(default)]
    pub timeout: Option<String>,
    /// The largest body accepted, in bytes, after gzip decoding (default
    /// 67108864, 64 MiB); a larger answer is left out.
    #[serde(default)]
    pub max_body_bytes: Option<u64>,
    /// With an `https://` URL: a PEM file of the CA certificates to trust
    /// instead of Mozilla's roots (a cluster's own CA). Read at every
    /// collection, so a renewed file takes effect without a reload.
    #[serde(default)]
    pub ca_file: Option<String>,
}

/// The `per_writer` section.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PerWriterSection {
    /// The label naming the writer (default `WorkerId`, Ray's). A legacy
    /// label name, not one of `labels`.
    #[serde(default = "default_writer_label")]
    pub label: String,
    /// A Ray session's log directory (`/tmp/ray/session_latest/logs` on a
    /// Ray node, shared with the exporter): a writer named by a pid is
    /// labelled with Ray's worker id of that process instead (the id Ray's
    /// agent puts in `WorkerId`), which the names of Ray's worker log files
    /// give. A pid no log file names keeps its pid. Environment variables
    /// are expanded as in `labels`.
    #[serde(default)]
    pub ray_logs: Option<String>,
}

fn default_writer_label() -> String {
    "WorkerId".to_owned()
}

/// The `ray` section.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RaySection {
    /// The value of the `ReplicaId` label that vLLM's Ray wrappers
    /// (`vllm/v1/metrics/ray_wrappers.py`) put on every `vllm:` family: the
    /// Ray Serve replica's id, `""` outside Ray Serve. Absent: no
    /// `ReplicaId`. Added to the families whose name starts with `vllm:`.
    #[serde(default)]
    pub replica_id: Option<String>,
}

/// The `filter` section.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FilterSection {
    /// Serve only families whose name starts with one of these prefixes
    /// (NVIDIA Dynamo passes through `["vllm:", "lmcache:"]`). Empty or
    /// absent serves every family. A prefix is matched against the family
    /// name as prometheus_client names it (`vllm:prompt_tokens`) and against
    /// the name the text format declares for it (`vllm:prompt_tokens_total`
    /// for a counter, `<name>_info` for an info metric).
    #[serde(default)]
    pub include_prefixes: Vec<String>,
    /// Drop families whose name starts with one of these prefixes (matched
    /// like `include_prefixes`), applied after `include_prefixes`.
    #[serde(default)]
    pub exclude_prefixes: Vec<String>,
}

/// How metric names are written.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Naming {
    /// Names exactly as prometheus_client writes them (the default).
    #[default]
    Prometheus,
    /// Ray's metrics-agent naming: every character outside `[a-zA-Z0-9_]`
    /// becomes `_`, then `ray_` is prefixed, for family and sample names
    /// alike (counters keep `_total`, histograms `_bucket`/`_sum`/`_count`).
    Ray,
}

impl Naming {
    /// The name used in the configuration file.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Prometheus => "prometheus",
            Self::Ray => "ray",
        }
    }
}

/// A validated configuration, ready to apply with [`crate::transform`].
/// The default serves everything as prometheus_client does, with the
/// built-in view.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Config {
    /// Family name prefixes to keep (empty keeps all).
    pub include_prefixes: Vec<String>,
    /// Family name prefixes to drop.
    pub exclude_prefixes: Vec<String>,
    /// Naming convention.
    pub naming: Naming,
    /// How writers are served apart (`per_writer`), if they are.
    pub per_writer: Option<PerWriter>,
    /// The `ReplicaId` value added to `vllm:` families (`ray.replica_id`).
    pub replica_id: Option<Arc<str>>,
    /// Constant labels, sorted by name, environment variables expanded.
    pub labels: Vec<(Arc<str>, Arc<str>)>,
    /// Aliases as `(old, new)` pairs, vLLM's first when enabled.
    pub aliases: Vec<(Arc<str>, Arc<str>)>,
    /// HTTP endpoints merged with the directory (`upstreams`), in order.
    pub upstreams: Vec<Upstream>,
    /// The views served (the built-in one first, unless replaced or off),
    /// their families as `/metrics` names them.
    pub views: Vec<View>,
}

impl Default for Config {
    fn default() -> Self {
        Self {
            include_prefixes: Vec::new(),
            exclude_prefixes: Vec::new(),
            naming: Naming::default(),
            per_writer: None,
            replica_id: None,
            labels: Vec::new(),
            aliases: Vec::new(),
            upstreams: Vec::new(),
            views: vec![builtin_view(Naming::default(), true)],
        }
    }
}

/// A validated entry of `upstreams`.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Upstream {
    /// Its name (the `upstream` label).
    pub name: Arc<str>,
    /// The URL, environment variables expanded, `http://` or `https://`
    /// with a host.
    pub url: Arc<str>,
    /// The longest a fetch may take.
    pub timeout: std::time::Duration,
    /// The largest body accepted, in bytes.
    pub max_body_bytes: u64,
    /// The CA certificates to trust for an `https://` URL, if not Mozilla's
    /// roots.
    pub ca_file: Option<PathBuf>,
}

/// An upstream's `timeout` when none is given.
pub const DEFAULT_UPSTREAM_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(5);

/// An upstream's `max_body_bytes` when none is given (64 MiB).
pub const DEFAULT_UPSTREAM_MAX_BODY_BYTES: u64 = 64 << 20;

/// The validated `per_writer` section.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct PerWriter {
    /// The label naming the writer.
    pub label: Arc<str>,
    /// Ray's log directory, to label writers with Ray's worker ids.
    pub ray_logs: Option<PathBuf>,
}

/// The label vLLM's Ray wrappers add to every `vllm:` family.
pub const REPLICA_ID_LABEL: &str = "ReplicaId";

/// The families vLLM's Ray wrappers label with `ReplicaId`.
pub const VLLM_PREFIX: &str = "vllm:";

/// Why a configuration cannot be used.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ConfigError {
    /// The file cannot be read.
    Read {
        /// The file.
        path: PathBuf,
        /// The I/O error.
        error: String,
    },
    /// The YAML does not parse or does not fit the schema (unknown keys are
    /// reported here, by name).
    Syntax(String),
    /// A constant label name is not allowed.
    InvalidLabelName {
        /// The name.
        name: String,
        /// Why it is not allowed.
        reason: &'static str,
    },
    /// A filter prefix is empty.
    EmptyPrefix {
        /// `include_prefixes` or `exclude_prefixes`.
        key: &'static str,
    },
    /// A value names an environment variable that is not set, or is
    /// malformed.
    Variable {
        /// Where (`labels.NAME`, `ray.replica_id`).
        key: String,
        /// What is wrong.
        error: String,
    },
    /// An alias is not a legacy metric name, or names itself.
    InvalidAlias {
        /// The old name.
        old: String,
        /// The new name.
        new: String,
    },
    /// Two parts of the configuration add the same label.
    DuplicateLabel {
        /// The label name.
        name: String,
    },
    /// An entry of `views` cannot be used.
    InvalidView {
        /// The view's name.
        name: String,
        /// What is wrong.
        error: String,
    },
    /// An entry of `upstreams` cannot be used.
    InvalidUpstream {
        /// Its position in the list (0-based).
        index: usize,
        /// What is wrong.
        error: String,
    },
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Read { path, error } => write!(f, "cannot read {}: {error}", path.display()),
            Self::Syntax(e) => write!(f, "invalid configuration: {e}"),
            Self::InvalidLabelName { name, reason } => {
                write!(f, "invalid label name {name:?} in `labels`: {reason}")
            }
            Self::EmptyPrefix { key } => write!(
                f,
                "empty prefix in `filter.{key}` (it would match every family)"
            ),
            Self::Variable { key, error } => write!(f, "in `{key}`: {error}"),
            Self::InvalidAlias { old, new } => write!(
                f,
                "invalid alias {old:?}: {new:?} (both must be metric names matching [a-zA-Z_:][a-zA-Z0-9_:]*, and differ)"
            ),
            Self::DuplicateLabel { name } => write!(
                f,
                "label {name:?} is added twice (by `labels` and by `per_writer.label` or `ray.replica_id`)"
            ),
            Self::InvalidUpstream { index, error } => write!(f, "in `upstreams[{index}]`: {error}"),
            Self::InvalidView { name, error } => write!(f, "in `views.{name}`: {error}"),
        }
    }
}

impl std::error::Error for ConfigError {}

impl Config {
    /// Parses and validates YAML text. An empty document is the default
    /// configuration.
    pub fn from_yaml(text: &str) -> Result<Self, ConfigError> {
        let file: Option<ConfigFile> =
            serde_yaml::from_str(text).map_err(|e| ConfigError::Syntax(e.to_string()))?;
        Self::validate(file.unwrap_or_default())
    }

    /// Reads, parses and validates a configuration file.
    pub fn load(path: &Path) -> Result<Self, ConfigError> {
        let bytes = std::fs::read(path).map_err(|e| ConfigError::Read {
            path: path.to_path_buf(),
            error: e.to_string(),
        })?;
        Self::from_bytes(&bytes)
    }

    /// Parses and validates the bytes of a configuration file.
    pub fn from_bytes(bytes: &[u8]) -> Result<Self, ConfigError> {
        let text = std::str::from_utf8(bytes)
            .map_err(|e| ConfigError::Syntax(format!("not UTF-8: {e}")))?;
        Self::from_yaml(text)
    }

    /// Validates a parsed file, expanding environment variables.
    pub fn validate(file: ConfigFile) -> Result<Self, ConfigError> {
        Self::validate_with(file, &|name| std::env::var(name).ok())
    }

    /// [`Self::validate`] with the environment variables `env` gives.
    pub fn validate_with(
        file: ConfigFile,
        env: &dyn Fn(&str) -> Option<String>,
    ) -> Result<Self, ConfigError> {
        for (key, prefixes) in [
            ("include_prefixes", &file.filter.include_prefixes),
            ("exclude_prefixes", &file.filter.exclude_prefixes),
        ] {
            if prefixes.iter().any(String::is_empty) {
                return Err(ConfigError::EmptyPrefix { key });
            }
        }
        for name in file.labels.keys() {
            if let Some(reason) = label_name_problem(name) {
                return Err(ConfigError::InvalidLabelName {
                    name: name.clone(),
                    reason,
                });
            }
        }
        let per_writer = match file.per_writer {
            None => None,
            Some(section) => {
                if let Some(reason) = label_name_problem(&section.label) {
                    return Err(ConfigError::InvalidLabelName {
                        name: section.label,
                        reason,
                    });
                }
                let ray_logs = section
                    .ray_logs
                    .as_deref()
                    .map(|path| {
                        expand_env(path, env).map_err(|error| ConfigError::Variable {
                            key: "per_writer.ray_logs".to_owned(),
                            error,
                        })
                    })
                    .transpose()?;
                Some(PerWriter {
                    label: Arc::from(section.label),
                    ray_logs: ray_logs.map(PathBuf::from),
                })
            }
        };
        let replica_id = file
            .ray
            .replica_id
            .map(|value| {
                expand_env(&value, env).map_err(|error| ConfigError::Variable {
                    key: "ray.replica_id".to_owned(),
                    error,
                })
            })
            .transpose()?;
        let added = per_writer
            .iter()
            .map(|section| &*section.label)
            .chain(replica_id.as_ref().map(|_| REPLICA_ID_LABEL));
        let mut seen: Vec<&str> = Vec::new();
        for name in added.chain(file.labels.keys().map(String::as_str)) {
            if seen.contains(&name) {
                return Err(ConfigError::DuplicateLabel {
                    name: name.to_owned(),
                });
            }
            seen.push(name);
        }
        let mut aliases: Vec<(Arc<str>, Arc<str>)> = Vec::new();
        if file.vllm_aliases {
            aliases.extend(
                VLLM_ALIASES
                    .iter()
                    .filter(|(old, _, _)| !file.aliases.contains_key(*old))
                    .map(|(old, new, _)| (Arc::from(*old), Arc::from(*new))),
            );
        }
        for (old, new) in &file.aliases {
            if old == new || !is_legacy_metric_name(old) || !is_legacy_metric_name(new) {
                return Err(ConfigError::InvalidAlias {
                    old: old.clone(),
                    new: new.clone(),
                });
            }
            aliases.push((Arc::from(old.as_str()), Arc::from(new.as_str())));
        }
        let mut labels = Vec::with_capacity(file.labels.len());
        for (name, value) in &file.labels {
            let value = expand_env(value, env).map_err(|error| ConfigError::Variable {
                key: format!("labels.{name}"),
                error,
            })?;
            labels.push((Arc::from(name.as_str()), Arc::from(value)));
        }
        let upstreams = validate_upstreams(&file.upstreams, env)?;
        let views = validate_views(&file.views, file.naming, file.endpoint_picker.fold)?;
        Ok(Self {
            views,
            upstreams,
            include_prefixes: file.filter.include_prefixes,
            exclude_prefixes: file.filter.exclude_prefixes,
            naming: file.naming,
            per_writer,
            replica_id: replica_id.map(Arc::from),
            labels,
            aliases,
        })
    }

    /// Why this configuration cannot be used with
    /// `--dir.compact-dead-writers`, if it cannot: compaction replaces dead
    /// writers' files by archives, so with `per_writer` their series would
    /// vanish and an `archive` writer's jump by their sum, which `rate()`
    /// takes for an increase.
    pub fn compaction_conflict(&self) -> Option<&'static str> {
        self.per_writer.is_some().then_some(
            "`per_writer` cannot be combined with --dir.compact-dead-writers: compaction would move dead writers' series into one archive series, which rate() would take for an increase",
        )
    }

    /// Whether this configuration changes nothing.
    pub fn is_identity(&self) -> bool {
        self.include_prefixes.is_empty()
            && self.exclude_prefixes.is_empty()
            && self.naming == Naming::Prometheus
            && self.replica_id.is_none()
            && self.labels.is_empty()
            && self.aliases.is_empty()
    }
}

/// `text` with `${NAME}`, `${NAME:-default}` and `$$` expanded from `env`
/// (hand-written: three forms do not justify a dependency). A `$` that
/// starts none of them stays as it is.
pub fn expand_env(text: &str, env: &dyn Fn(&str) -> Option<String>) -> Result<String, String> {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(at) = rest.find('$') {
        out.push_str(&rest[..at]);
        let after = &rest[at + 1..];
        if let Some(after) = after.strip_prefix('$') {
            out.push('$');
            rest = after;
        } else if let Some(inner) = after.strip_prefix('{') {
            let end = inner
                .find('}')
                .ok_or_else(|| format!("`${{` without a closing `}}` in {text:?}"))?;
            let (name, default) = match inner[..end].split_once(":-") {
                Some((name, default)) => (name, Some(default)),
                None => (&inner[..end], None),
            };
            let valid = !name.is_empty()
                && !name.starts_with(|c: char| c.is_ascii_digit())
                && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
            if !valid {
                return Err(format!(
                    "{name:?} is not an environment variable name (in {text:?})"
                ));
            }
            match (env(name).filter(|v| !(v.is_empty() && default.is_some())), default) {
                (Some(value), _) => out.push_str(&value),
                (None, Some(default)) => out.push_str(default),
                (None, None) => {
                    return Err(format!(
                        "environment variable {name} is not set (write ${{{name}:-}} for an empty default)"
                    ))
                }
            }
            rest = &inner[end + 1..];
        } else {
            out.push('$');
            rest = after;
        }
    }
    out.push_str(rest);
    Ok(out)
}

/// The built-in view, named as `naming` names its families, folding
/// `engine` away if `fold`.
pub(crate) fn builtin_view(naming: Naming, fold: bool) -> View {
    crate::transform::view::endpoint_picker(
        |f| match naming {
            Naming::Prometheus => Arc::from(f),
            Naming::Ray => Arc::from(ray_name(f)),
        },
        fold,
    )
}

/// The validated `views`, the built-in one first unless replaced or off.
fn validate_views(
    sections: &BTreeMap<String, ViewSection>,
    naming: Naming,
    builtin_fold: bool,
) -> Result<Vec<View>, ConfigError> {
    let mut views = Vec::with_capacity(sections.len() + 1);
    if !sections.contains_key(ENDPOINT_PICKER) {
        views.push(builtin_view(naming, builtin_fold));
    }
    for (name, section) in sections {
        let families = section.families();
        let invalid = |error: String| ConfigError::InvalidView {
            name: name.clone(),
            error,
        };
        if let Some(problem) = view_name_problem(name) {
            return Err(invalid(format!("invalid view name: {problem}")));
        }
        if families.is_empty() {
            if name == ENDPOINT_PICKER {
                continue;
            }
            return Err(invalid(
                "a view lists at least one family (only the built-in `endpoint-picker: []` turns a view off)".to_owned(),
            ));
        }
        if let Some(bad) = families.iter().find(|f| !is_legacy_metric_name(f)) {
            return Err(invalid(format!(
                "{bad:?} is not a metric name matching [a-zA-Z_:][a-zA-Z0-9_:]*"
            )));
        }
        let fold = match section {
            ViewSection::Folded(FoldedViewSection {
                fold: Some(fold), ..
            }) => Some(validate_fold(fold, families).map_err(invalid)?),
            _ => None,
        };
        views.push(View {
            name: Arc::from(name.as_str()),
            families: families.iter().map(|f| Arc::from(f.as_str())).collect(),
            builtin: false,
            matching: Default::default(),
            fold,
        });
    }
    Ok(views)
}

/// The validated `upstreams`.
fn validate_upstreams(
    sections: &[UpstreamSection],
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<Vec<Upstream>, ConfigError> {
    let mut upstreams: Vec<Upstream> = Vec::with_capacity(sections.len());
    for (index, section) in sections.iter().enumerate() {
        let invalid = |error: String| ConfigError::InvalidUpstream { index, error };
        let url = expand_env(&section.url, env).map_err(invalid)?;
        let https = url.starts_with("https://");
        let authority = url
            .strip_prefix("http://")
            .or_else(|| url.strip_prefix("https://"))
            .map(|rest| rest.split(['/', '?']).next().unwrap_or(""))
            .filter(|authority| !authority.is_empty() && !authority.contains('@'))
            .ok_or_else(|| {
                invalid(format!(
                    "url {url:?} is not http(s)://HOST[:PORT]/PATH (credentials are not supported)"
                ))
            })?;
        let ca_file = match &section.ca_file {
            Some(_) if !https => return Err(invalid("`ca_file` is for https:// URLs".to_owned())),
            Some(path) => Some(PathBuf::from(expand_env(path, env).map_err(invalid)?)),
            None => None,
        };
        if url.parse::<hyper::Uri>().is_err() {
            return Err(invalid(format!("url {url:?} is not a valid URL")));
        }
        let name = section.name.clone().unwrap_or_else(|| authority.to_owned());
        if name.is_empty() {
            return Err(invalid("empty `name`".to_owned()));
        }
        if upstreams.iter().any(|u| *u.name == *name) {
            return Err(invalid(format!(
                "name {name:?} is taken by an earlier upstream (give each a `name`)"
            )));
        }
        let timeout = match &section.timeout {
            None => DEFAULT_UPSTREAM_TIMEOUT,
            Some(text) => humantime::parse_duration(text)
                .ok()
                .filter(|t| !t.is_zero())
                .ok_or_else(|| {
                    invalid(format!(
                        "timeout {text:?} is not a duration like 5s or 500ms"
                    ))
                })?,
        };
        let max_body_bytes = section
            .max_body_bytes
            .unwrap_or(DEFAULT_UPSTREAM_MAX_BODY_BYTES);
        if max_body_bytes == 0 {
            return Err(invalid("`max_body_bytes` is 0".to_owned()));
        }
        upstreams.push(Upstream {
            name: name.into(),
            url: url.into(),
            timeout,
            max_body_bytes,
            ca_file,
        });
    }
    Ok(upstreams)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn upstreams_parse_with_defaults_and_are_checked() {
        let env = |name: &str| (name == "POD_IP").then(|| "10.0.0.7".to_owned());
        let file: ConfigFile = serde_yaml::from_str(
            "upstreams:\n- url: http://${POD_IP}:8000/metrics\n- {url: \"http://localhost:9000/\", name: lmcache, timeout: 500ms, max_body_bytes: 1000}\n",
        )
        .unwrap();
        let config = Config::validate_with(file, &env).unwrap();
        assert_eq!(
            config.upstreams,
            [
                Upstream {
                    name: "10.0.0.7:8000".into(),
                    url: "http://10.0.0.7:8000/metrics".into(),
                    timeout: DEFAULT_UPSTREAM_TIMEOUT,
                    max_body_bytes: DEFAULT_UPSTREAM_MAX_BODY_BYTES,
                    ca_file: None,
                },
                Upstream {
                    name: "lmcache".into(),
                    url: "http://localhost:9000/".into(),
                    timeout: std::time::Duration::from_millis(500),
                    max_body_bytes: 1000,
                    ca_file: None,
                }
            ]
        );
        for bad in [
            "upstreams: [{url: \"http://x/metrics\", ca_file: ca.pem}]",
            "upstreams: [{url: \"ftp://x/\"}]",
            "upstreams: [{url: \"http:///metrics\"}]",
            "upstreams: [{url: \"http://u:p@x/\"}]",
            "upstreams: [{url: \"http://x/\"}, {url: \"http://x/other\"}]",
            "upstreams: [{url: \"http://x/\", timeout: 0s}]",
            "upstreams: [{url: \"http://x/\", timeout: soon}]",
            "upstreams: [{url: \"http://x/\", max_body_bytes: 0}]",
            "upstreams: [{url: \"http://x/\", headers: {}}]",
        ] {
            assert!(Config::from_yaml(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn full_example_parses() {
        let config = Config::from_yaml(
            "filter:\n  include_prefixes: [\"vllm:\", \"lmcache:\"]\n  exclude_prefixes: []\n\
             naming: ray\nlabels: {ReplicaId: \"\"}\n",
        )
        .unwrap();
        assert_eq!(config.include_prefixes, ["vllm:", "lmcache:"]);
        assert!(config.exclude_prefixes.is_empty());
        assert_eq!(config.naming, Naming::Ray);
        assert_eq!(config.labels, [("ReplicaId".into(), "".into())]);
    }

    #[test]
    fn ray_profile_parses() {
        let env = |name: &str| match name {
            "NODE_IP" => Some("10.0.0.7".to_owned()),
            "EMPTY" => Some(String::new()),
            _ => None,
        };
        let file: ConfigFile = serde_yaml::from_str(
            "naming: ray\nper_writer: {}\nray: {replica_id: \"${REPLICA:-}\"}\n\
             labels: {Component: core_worker, NodeAddress: \"${NODE_IP}\", \
             SessionName: \"${EMPTY:-session_x}\", Cost: \"$$5 $x\"}\n",
        )
        .unwrap();
        let config = Config::validate_with(file, &env).unwrap();
        let per_writer = config.per_writer.as_ref().unwrap();
        assert_eq!(&*per_writer.label, "WorkerId");
        assert_eq!(per_writer.ray_logs, None);
        assert_eq!(config.replica_id.as_deref(), Some(""));
        assert_eq!(
            config.labels,
            [
                ("Component".into(), "core_worker".into()),
                ("Cost".into(), "$5 $x".into()),
                ("NodeAddress".into(), "10.0.0.7".into()),
                ("SessionName".into(), "session_x".into()),
            ]
        );
        assert!(!config.is_identity());
        let config = Config::from_yaml(
            "per_writer: {label: pid_of_writer, ray_logs: /tmp/ray/session_latest/logs}\n",
        )
        .unwrap();
        let per_writer = config.per_writer.unwrap();
        assert_eq!(&*per_writer.label, "pid_of_writer");
        assert_eq!(
            per_writer.ray_logs.as_deref(),
            Some(Path::new("/tmp/ray/session_latest/logs"))
        );
    }

    #[test]
    fn unset_variables_and_duplicate_labels_are_errors() {
        let e =
            Config::from_yaml("labels: {a: \"${MPE_TEST_SURELY_UNSET_VARIABLE}\"}\n").unwrap_err();
        assert!(
            e.to_string().contains("labels.a")
                && e.to_string()
                    .contains("MPE_TEST_SURELY_UNSET_VARIABLE is not set"),
            "{e}"
        );
        for bad in ["${}", "${1A}", "${A-B}", "${A"] {
            let yaml = format!("ray: {{replica_id: \"{bad}\"}}\n");
            let e = Config::from_yaml(&yaml).unwrap_err();
            assert!(matches!(e, ConfigError::Variable { .. }), "{bad}: {e}");
        }
        for yaml in [
            "per_writer: {}\nlabels: {WorkerId: x}\n",
            "ray: {replica_id: \"\"}\nlabels: {ReplicaId: x}\n",
            "per_writer: {label: ReplicaId}\nray: {replica_id: \"\"}\n",
        ] {
            let e = Config::from_yaml(yaml).unwrap_err();
            assert!(
                matches!(e, ConfigError::DuplicateLabel { .. }),
                "{yaml}: {e}"
            );
        }
        let e = Config::from_yaml("per_writer: {label: le}\n").unwrap_err();
        assert!(matches!(e, ConfigError::InvalidLabelName { .. }), "{e}");
        let e = Config::from_yaml("per_writer: {name: x}\n").unwrap_err();
        assert!(e.to_string().contains("unknown field `name`"), "{e}");
    }

    #[test]
    fn aliases_are_validated_and_vllm_defaults_added() {
        let config = Config::from_yaml(
            "vllm_aliases: true\naliases: {\"vllm:gpu_cache_usage_perc\": \"vllm:other\", old_x: new_x}\n",
        )
        .unwrap();
        let pairs: Vec<(&str, &str)> = config.aliases.iter().map(|(a, b)| (&**a, &**b)).collect();
        assert_eq!(
            pairs,
            [
                ("vllm:gpu_prefix_cache_queries", "vllm:prefix_cache_queries"),
                ("vllm:gpu_prefix_cache_hits", "vllm:prefix_cache_hits"),
                (
                    "vllm:time_per_output_token_seconds",
                    "vllm:inter_token_latency_seconds"
                ),
                ("old_x", "new_x"),
                ("vllm:gpu_cache_usage_perc", "vllm:other"),
            ]
        );
        for bad in ["{a: a}", "{\"a-b\": c}", "{a: \"0c\"}"] {
            let e = Config::from_yaml(&format!("aliases: {bad}\n")).unwrap_err();
            assert!(matches!(e, ConfigError::InvalidAlias { .. }), "{bad}: {e}");
        }
        assert!(Config::from_yaml("vllm_aliases: false\n")
            .unwrap()
            .is_identity());
    }

    #[test]
    fn empty_document_is_default() {
        for text in ["", "\n", "# nothing\n", "---\n", "{}"] {
            let config = Config::from_yaml(text).unwrap();
            assert!(config.is_identity(), "{text:?}");
        }
    }

    #[test]
    fn views_are_validated_and_the_builtin_one_follows_the_naming() {
        let default = Config::from_yaml("").unwrap();
        assert_eq!(default.views, vec![builtin_view(Naming::Prometheus, true)]);
        assert_eq!(default, Config::default());
        let config =
            Config::from_yaml("naming: ray\nviews: {mine: [ray_vllm_num_requests_waiting]}\n")
                .unwrap();
        let names: Vec<&str> = config.views.iter().map(|v| &*v.name).collect();
        assert_eq!(names, ["endpoint-picker", "mine"]);
        assert_eq!(
            &*config.views[0].families[0],
            "ray_vllm_num_requests_waiting"
        );
        let off = Config::from_yaml("views: {endpoint-picker: []}\n").unwrap();
        assert!(off.views.is_empty());
        let replaced = Config::from_yaml("views: {endpoint-picker: [a, b]}\n").unwrap();
        assert_eq!(replaced.views.len(), 1);
        assert!(!replaced.views[0].builtin);
        for (text, wanted) in [
            (
                "views: {\"a/b\": [x]}\n",
                "in `views.a/b`: invalid view name",
            ),
            (
                "views: {mine: []}\n",
                "in `views.mine`: a view lists at least one family",
            ),
            ("views: {mine: [\"a b\"]}\n", "\"a b\" is not a metric name"),
        ] {
            let e = Config::from_yaml(text).unwrap_err().to_string();
            assert!(e.contains(wanted), "{text}: {e}");
        }
    }

    #[test]
    fn unknown_keys_are_named() {
        let e = Config::from_yaml("naming: ray\nlabel: {a: b}\n").unwrap_err();
        assert!(e.to_string().contains("unknown field `label`"), "{e}");
        let e = Config::from_yaml("filter:\n  include: [a]\n").unwrap_err();
        assert!(e.to_string().contains("unknown field `include`"), "{e}");
    }

    #[test]
    fn unknown_naming_is_an_error() {
        let e = Config::from_yaml("naming: otel\n").unwrap_err();
        assert!(e.to_string().contains("unknown variant `otel`"), "{e}");
    }

    #[test]
    fn invalid_label_names_are_errors() {
        for bad in ["0a", "a-b", "a:b", "__x", "le", "quantile", "é", "\"\""] {
            let yaml = format!("labels: {{{bad}: v}}\n");
            let e = Config::from_yaml(&yaml).unwrap_err();
            assert!(
                matches!(e, ConfigError::InvalidLabelName { .. }),
                "{bad}: {e}"
            );
        }
        assert!(Config::from_yaml("labels: {_x: v, A9: w}\n").is_ok());
    }

    #[test]
    fn empty_prefix_is_an_error() {
        let e = Config::from_yaml("filter: {exclude_prefixes: [\"\"]}\n").unwrap_err();
        assert_eq!(
            e,
            ConfigError::EmptyPrefix {
                key: "exclude_prefixes"
            }
        );
    }

    #[test]
    fn wrong_types_are_errors() {
        assert!(Config::from_yaml("labels: [a, b]\n").is_err());
        assert!(Config::from_yaml("filter: {include_prefixes: vllm}\n").is_err());
        assert!(Config::from_yaml("- a\n").is_err());
    }
}
