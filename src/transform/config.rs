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
//! labels: {ReplicaId: ""}
//! ```

use std::collections::BTreeMap;
use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use serde::Deserialize;

use crate::model::names::is_legacy_label_name;

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
    /// Constant labels added to every served sample, as `name: value`.
    /// Names must be legacy Prometheus label names (`[a-zA-Z_][a-zA-Z0-9_]*`),
    /// must not start with `__` (reserved), and must not be `le` or
    /// `quantile` (they would corrupt histograms and summaries). When a
    /// sample already has a label of the same name, the constant label wins
    /// and the sample's own label is kept as `exported_<name>`, as Prometheus
    /// does for target labels (`honor_labels: false`).
    #[serde(default)]
    pub labels: BTreeMap<String, String>,
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
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Config {
    /// Family name prefixes to keep (empty keeps all).
    pub include_prefixes: Vec<String>,
    /// Family name prefixes to drop.
    pub exclude_prefixes: Vec<String>,
    /// Naming convention.
    pub naming: Naming,
    /// Constant labels, sorted by name.
    pub labels: Vec<(Arc<str>, Arc<str>)>,
}

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

    /// Validates a parsed file.
    pub fn validate(file: ConfigFile) -> Result<Self, ConfigError> {
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
        Ok(Self {
            include_prefixes: file.filter.include_prefixes,
            exclude_prefixes: file.filter.exclude_prefixes,
            naming: file.naming,
            labels: file
                .labels
                .into_iter()
                .map(|(k, v)| (Arc::from(k), Arc::from(v)))
                .collect(),
        })
    }

    /// Whether this configuration changes nothing.
    pub fn is_identity(&self) -> bool {
        self.include_prefixes.is_empty()
            && self.exclude_prefixes.is_empty()
            && self.naming == Naming::Prometheus
            && self.labels.is_empty()
    }
}

/// Why `name` cannot be a constant label name, if it cannot.
pub(crate) fn label_name_problem(name: &str) -> Option<&'static str> {
    if name.starts_with("__") {
        return Some("names starting with `__` are reserved");
    }
    if name.ends_with('\n') || !is_legacy_label_name(name) {
        return Some("must match [a-zA-Z_][a-zA-Z0-9_]*");
    }
    if name == "le" || name == "quantile" {
        return Some(
            "`le` and `quantile` are reserved for histogram buckets and summary quantiles",
        );
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

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
    fn empty_document_is_default() {
        for text in ["", "\n", "# nothing\n", "---\n", "{}"] {
            let config = Config::from_yaml(text).unwrap();
            assert!(config.is_identity(), "{text:?}");
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
