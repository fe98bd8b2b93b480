//! Views: named sets of families served on their own query-free path,
//! `<telemetry path>/<name>` (`/metrics/endpoint-picker`). Pure: no I/O.
//!
//! A view lists families as `/metrics` names them (after `naming` and
//! `aliases`). Its answer is the families of `/metrics` whose name (or the
//! name the text format declares for it: `<name>_total` for a counter,
//! `<name>_info` for an info metric) is in the list, in `/metrics`'s order:
//! [`View::cut`]. So that a poll of a view costs what the view holds, the
//! records of the metric files are filtered before they are read, merged and
//! encoded: [`View::source_filter`] tells, from a record's family name as
//! prometheus_client writes it, whether the family can end up in the view
//! (a superset: the cut is exact).
//!
//! The built-in view [`ENDPOINT_PICKER`] holds what the inference gateway's
//! endpoint picker (EPP, releases v0.5.1 to v1.5.0, and the llm-d router)
//! reads from a vLLM pod by default ([`ENDPOINT_PICKER_FAMILIES`]), named as
//! the configuration's `naming` names them.

use std::sync::Arc;

pub use crate::transform::view::{
    view_name_problem, Matching, View, ENDPOINT_PICKER, ENDPOINT_PICKER_FAMILIES,
};

use crate::model::MetricFamily;
use crate::transform::config::{Config, Naming};
use crate::transform::ray_name;

/// The suffixes a sample name may add to its family's name.
const SAMPLE_SUFFIXES: [&str; 8] = [
    "_total", "_created", "_bucket", "_count", "_sum", "_gcount", "_gsum", "_info",
];

/// Prefixes of the exporter's own families: a view that lists one also
/// gets the exporter's own families it lists.
const OWN_PREFIXES: [&str; 2] = ["multiproc_exporter_", "process_"];

impl View {
    /// The built-in view, its families named as `naming` names them.
    pub fn endpoint_picker(naming: Naming) -> Self {
        crate::transform::config::builtin_view(naming, true)
    }

    /// The view a `?name[]=` request asks for: the samples named `names`
    /// (after renaming), as `/metrics?name[]=…` serves them.
    pub fn of_sample_names(names: &[String]) -> Self {
        Self {
            name: format!("?name[]={}", names.join("&name[]=")).into(),
            families: names.iter().map(|n| Arc::from(n.as_str())).collect(),
            builtin: false,
            matching: Matching::Samples,
            fold: None,
        }
    }

    /// Whether `family` (as `/metrics` serves it) belongs to the view.
    pub fn holds(&self, family: &MetricFamily) -> bool {
        self.families
            .iter()
            .any(|name| **name == *family.name || family.declares(name))
    }

    /// The view's families of one collection (`families`, as `/metrics`
    /// serves them): [`View::cut`], then [`View::fold`]'s labels folded
    /// away ([`crate::transform::fold`]). What a view serves.
    pub fn families_of(&self, families: &[MetricFamily]) -> Vec<MetricFamily> {
        let cut = self.cut(families);
        match &self.fold {
            Some(fold) => fold.apply(cut, families),
            None => cut,
        }
    }

    /// The families of `families` (as `/metrics` serves them) that belong to
    /// the view, in their order.
    pub fn cut(&self, families: &[MetricFamily]) -> Vec<MetricFamily> {
        match self.matching {
            Matching::Families => families.iter().filter(|f| self.holds(f)).cloned().collect(),
            Matching::Samples => families
                .iter()
                .filter_map(|f| f.restricted(&self.families))
                .collect(),
        }
    }

    /// Whether the view lists one of the exporter's own families (or a
    /// writer's `process_*`).
    pub fn wants_own(&self) -> bool {
        self.families
            .iter()
            .any(|f| OWN_PREFIXES.iter().any(|p| f.starts_with(p)))
    }

    /// Whether a record of the family prometheus_client names `source`
    /// (before `aliases` and `naming`) may end up in the view under
    /// `config`: under its own name or an alias, renamed, with or without a
    /// counter's or info's suffix. Never false for a family of the view.
    pub fn source_filter(&self, config: &Config) -> SourceFilter {
        let mut view = self.families.clone();
        if let Some(fold) = &self.fold {
            view.extend(fold.referenced_families().cloned());
        }
        SourceFilter {
            view,
            naming: config.naming,
            aliases: config.aliases.clone(),
            matching: self.matching,
        }
    }
}

/// [`View::source_filter`]: a predicate on a record's family name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SourceFilter {
    view: Vec<Arc<str>>,
    naming: Naming,
    aliases: Vec<(Arc<str>, Arc<str>)>,
    matching: Matching,
}

impl SourceFilter {
    /// Whether records of the family `source` are read for the view.
    pub fn keeps(&self, source: &str) -> bool {
        let served = std::iter::once(source).chain(
            self.aliases
                .iter()
                .filter(|(_, new)| **new == *source)
                .map(|(old, _)| &**old),
        );
        for name in served {
            let renamed;
            let name = match self.naming {
                Naming::Prometheus => name,
                Naming::Ray => {
                    renamed = ray_name(name);
                    renamed.as_str()
                }
            };
            let suffixes: &[&str] = match self.matching {
                Matching::Families => &["_total", "_info"],
                Matching::Samples => &SAMPLE_SUFFIXES,
            };
            let listed = self.view.iter().any(|v| {
                **v == *name
                    || v.strip_prefix(name)
                        .is_some_and(|suffix| suffixes.contains(&suffix))
            });
            if listed {
                return true;
            }
        }
        false
    }
}

/// What a request's path is, given the telemetry path ([`view_of`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ViewPath<'a> {
    /// Not under the telemetry path (or the telemetry path itself).
    Elsewhere,
    /// The path of this view.
    View(&'a View),
    /// Under the telemetry path, but no view's.
    Unknown,
}

/// What `path` is, given the views and the telemetry path.
pub fn view_of<'a>(views: &'a [View], telemetry_path: &str, path: &str) -> ViewPath<'a> {
    let base = telemetry_path.trim_end_matches('/');
    let Some(name) = path
        .strip_prefix(base)
        .and_then(|rest| rest.strip_prefix('/'))
    else {
        return ViewPath::Elsewhere;
    };
    if name.is_empty() || path == telemetry_path {
        return ViewPath::Elsewhere;
    }
    match views.iter().find(|v| *v.name == *name) {
        Some(view) => ViewPath::View(view),
        None if telemetry_path == "/" && name.contains('/') => ViewPath::Elsewhere,
        None => ViewPath::Unknown,
    }
}

/// The path of `view` under `telemetry_path`.
pub fn view_path(telemetry_path: &str, view: &str) -> String {
    format!("{}/{view}", telemetry_path.trim_end_matches('/'))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{Labels, MetricType, Sample};

    fn family(name: &str, metric_type: MetricType) -> MetricFamily {
        MetricFamily {
            name: name.into(),
            help: "h".into(),
            metric_type,
            samples: vec![Sample {
                name: name.into(),
                labels: Labels::new([]),
                value: 1.0,
            }],
        }
    }

    #[test]
    fn the_builtin_view_follows_the_naming() {
        let ray = View::endpoint_picker(Naming::Ray);
        assert!(ray
            .families
            .iter()
            .any(|f| &**f == "ray_vllm_num_requests_waiting"));
        let plain = View::endpoint_picker(Naming::Prometheus);
        assert_eq!(plain.families.len(), ENDPOINT_PICKER_FAMILIES.len());
        assert!(plain.holds(&family("vllm:cache_config_info", MetricType::Gauge)));
        assert!(!plain.holds(&family("vllm:prompt_tokens", MetricType::Counter)));
        assert!(plain.holds(&family("sglang:num_queue_reqs", MetricType::Gauge)));
        assert!(plain.holds(&family("sglang:token_usage", MetricType::Gauge)));
        assert!(!plain.holds(&family("sglang:prompt_tokens", MetricType::Counter)));
        assert!(ray.holds(&family("ray_sglang_num_running_reqs", MetricType::Gauge)));
    }

    #[test]
    fn the_source_filter_keeps_renamed_aliased_and_suffixed_families() {
        let config = Config {
            naming: Naming::Ray,
            aliases: vec![(
                "vllm:gpu_cache_usage_perc".into(),
                "vllm:kv_cache_usage_perc".into(),
            )],
            ..Config::default()
        };
        let view = View {
            name: "v".into(),
            families: vec!["ray_vllm_gpu_cache_usage_perc".into(), "ray_c_total".into()],
            builtin: false,
            matching: Matching::Families,
            fold: None,
        };
        let filter = view.source_filter(&config);
        assert!(filter.keeps("vllm:kv_cache_usage_perc"));
        assert!(filter.keeps("vllm:gpu_cache_usage_perc"));
        assert!(filter.keeps("c"));
        assert!(!filter.keeps("vllm:num_requests_waiting"));
        assert!(view.holds(&family("ray_c", MetricType::Counter)));
        assert!(!view.holds(&family("ray_c", MetricType::Gauge)));
    }

    #[test]
    fn the_builtin_view_folds_engines_unless_switched_off() {
        use crate::transform::fold::FoldFunction;
        let folded = &Config::default().views[0];
        let fold = folded.fold.as_ref().unwrap();
        assert!(fold.labels.contains(&Arc::<str>::from("engine")));
        assert!(fold.labels.contains(&Arc::<str>::from("dp_rank")));
        assert!(fold
            .rules
            .iter()
            .any(|r| &*r.family == "vllm:num_requests_waiting" && r.function == FoldFunction::Sum));
        let exact = Config::from_yaml("endpoint_picker: {fold: false}\n").unwrap();
        assert!(exact.views[0].builtin && exact.views[0].fold.is_none());
        assert_eq!(exact.views[0].families, folded.families);
        let e = Config::from_yaml("endpoint_picker: {fold: false, x: 1}\n").unwrap_err();
        assert!(e.to_string().contains("unknown field `x`"), "{e}");
        // Renamed with the naming, the weights' family too.
        let ray = Config::from_yaml("naming: ray\n").unwrap();
        let rules = &ray.views[0].fold.as_ref().unwrap().rules;
        assert!(rules
            .iter()
            .any(|r| &*r.family == "ray_vllm_kv_cache_usage_perc"
                && r.function
                    == FoldFunction::WeightedMean {
                        family: "ray_vllm_cache_config_info".into(),
                        label: Some("num_gpu_blocks".into())
                    }));
    }

    #[test]
    fn a_folded_views_source_reads_the_families_its_rules_read() {
        let config = Config::from_yaml(
            "views:\n  v:\n    families: [kv]\n    fold:\n      labels: [engine]\n      rules: {kv: {weighted_mean: {family: cache, label: n}}}\n",
        )
        .unwrap();
        let view = config.views.iter().find(|v| &*v.name == "v").unwrap();
        let filter = view.source_filter(&config);
        assert!(filter.keeps("kv") && filter.keeps("cache"));
        assert!(!filter.keeps("other"));
        // The weights are read, not served.
        let families = [
            family("kv", MetricType::Gauge),
            family("cache", MetricType::Gauge),
        ];
        let served = view.families_of(&families);
        assert_eq!(served, vec![families[0].clone()]);
    }

    #[test]
    fn a_name_query_keeps_the_families_of_its_samples() {
        let view = View::of_sample_names(&["h_bucket".to_owned(), "c_total".to_owned()]);
        let filter = view.source_filter(&Config::default());
        assert!(filter.keeps("h"));
        assert!(filter.keeps("c"));
        assert!(!filter.keeps("g"));
        let families = [
            family("c", MetricType::Counter),
            family("g", MetricType::Gauge),
        ];
        // `family` names its one sample after the family: no `c_total` sample.
        assert!(view.cut(&families).is_empty());
        let gauge = View::of_sample_names(&["g".to_owned()]);
        assert_eq!(gauge.cut(&families), vec![families[1].clone()]);
    }

    #[test]
    fn paths_name_views() {
        let views = vec![View::endpoint_picker(Naming::Prometheus)];
        assert_eq!(
            view_of(&views, "/metrics", "/metrics/endpoint-picker"),
            ViewPath::View(&views[0])
        );
        assert_eq!(
            view_of(&views, "/metrics", "/metrics/nope"),
            ViewPath::Unknown
        );
        assert_eq!(view_of(&views, "/metrics", "/metrics"), ViewPath::Elsewhere);
        assert_eq!(
            view_of(&views, "/metrics", "/metricsx"),
            ViewPath::Elsewhere
        );
        assert_eq!(
            view_of(&views, "/metrics", "/-/healthy"),
            ViewPath::Elsewhere
        );
        assert_eq!(
            view_of(&views, "/", "/endpoint-picker"),
            ViewPath::View(&views[0])
        );
        assert_eq!(view_of(&views, "/", "/api/v1/status"), ViewPath::Elsewhere);
        assert_eq!(view_path("/", "a"), "/a");
        assert_eq!(view_path("/m", "a"), "/m/a");
        assert!(view_name_problem("my-view_1.x").is_none());
        assert!(view_name_problem("-x").is_some());
        assert!(view_name_problem("a/b").is_some());
    }
}
