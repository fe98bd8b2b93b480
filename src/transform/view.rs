//! The views the configuration declares: their type, the built-in one's
//! families and the rule for their names. Pure: no I/O. How a view is read
//! and cut from `/metrics` is [`crate::transform::views`].

use std::sync::Arc;

use crate::transform::fold::{Fold, FoldFunction, FoldRule};

/// The name (and path segment) of the built-in view.
pub const ENDPOINT_PICKER: &str = "endpoint-picker";

/// The families of the built-in view, as vLLM names them: what the
/// endpoint picker's releases (v0.5.1 to v1.5.0) and the llm-d router read
/// from vLLM by default. `vllm:gpu_cache_usage_perc` (EPP up to v1.2) is
/// served where vLLM still writes it, or with `vllm_aliases`; the llm-d
/// router's LoRA residency families where vLLM writes them. SGLang's three
/// that the endpoint picker reads when configured for SGLang
/// (gateway-api-inference-extension#1141) where SGLang writes them, one
/// series per scheduler rank (not folded per pod yet: docs/sglang.md).
pub const ENDPOINT_PICKER_FAMILIES: [&str; 12] = [
    "vllm:num_requests_waiting",
    "vllm:num_requests_running",
    "vllm:kv_cache_usage_perc",
    "vllm:gpu_cache_usage_perc",
    "vllm:lora_requests_info",
    "vllm:cache_config_info",
    "vllm:lora_adapter_loaded",
    "vllm:num_gpu_loaded_lora_adapters",
    "vllm:max_gpu_lora_adapters",
    "sglang:num_queue_reqs",
    "sglang:num_running_reqs",
    "sglang:token_usage",
];

/// A validated view.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct View {
    /// Its name: the last segment of its path.
    pub name: Arc<str>,
    /// The families it serves, as `/metrics` names them.
    pub families: Vec<Arc<str>>,
    /// Whether it is the built-in [`ENDPOINT_PICKER`].
    pub builtin: bool,
    /// What its names match: families (a configured view), or sample
    /// names (a `?name[]=` request, [`View::of_sample_names`]).
    pub matching: Matching,
    /// The labels it folds away and how ([`crate::transform::fold`]);
    /// `None`: its families as `/metrics` serves them.
    pub fold: Option<Fold>,
}

/// What a [`View`]'s names match.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub enum Matching {
    /// Family names (or the name the text format declares for a family).
    #[default]
    Families,
    /// Sample names, as `?name[]=` restricts (prometheus_client's
    /// `restricted_registry`: the samples of those names, families left
    /// empty dropped).
    Samples,
}

/// The labels the built-in view folds away by default: vLLM's
/// data-parallel rank (`--data-parallel-size`), one series per engine, and
/// SGLang's scheduler ranks (`dp_rank`, `tp_rank`, `pp_rank`,
/// `moe_ep_rank`: its scheduler gauges are one series per rank that logs).
/// A family without them is not changed.
pub const ENDPOINT_PICKER_FOLDED_LABELS: [&str; 5] =
    ["engine", "dp_rank", "tp_rank", "pp_rank", "moe_ep_rank"];

/// The built-in view's fold rules, as `(family, function)` with vLLM's
/// names (the formulas: `docs/gateway-api-inference-extension.md`, "Data
/// parallelism") (renamed by the configuration's `naming` when the view is made).
/// To fold another family in the built-in view, add its rule here (and its
/// folded label to [`ENDPOINT_PICKER_FOLDED_LABELS`]).
pub fn endpoint_picker_rules() -> Vec<(&'static str, FoldFunction)> {
    let labels = |names: &[&str]| names.iter().map(|n| Arc::from(*n)).collect::<Vec<_>>();
    let block_weighted = || FoldFunction::WeightedMean {
        family: "vllm:cache_config_info".into(),
        label: Some("num_gpu_blocks".into()),
    };
    vec![
        ("vllm:num_requests_waiting", FoldFunction::Sum),
        ("vllm:num_requests_running", FoldFunction::Sum),
        ("vllm:kv_cache_usage_perc", block_weighted()),
        ("vllm:gpu_cache_usage_perc", block_weighted()),
        // vLLM's frontend writes the pod's blocks (the sum over its engines,
        // `vllm/v1/engine/utils.py`: "Sum values from all engines in DP
        // case") on every engine's series: without `engine` they are one.
        ("vllm:cache_config_info", FoldFunction::Max),
        // SGLang 0.5.23 (`observability/metrics_collector.py`): only the
        // schedulers of attention-TP rank 0 log (`is_stats_logging_rank`),
        // one per data-parallel rank, each with requests of its own: the
        // queues add up; the fullest KV cache decides whether a request fits.
        ("sglang:num_queue_reqs", FoldFunction::Sum),
        ("sglang:num_running_reqs", FoldFunction::Sum),
        ("sglang:token_usage", FoldFunction::Max),
        (
            "vllm:lora_requests_info",
            FoldFunction::NewestUnion {
                labels: labels(&["running_lora_adapters", "waiting_lora_adapters"]),
                ranks: Some("vllm:cache_config_info".into()),
            },
        ),
    ]
}

/// The built-in view, its families named by `rename` (the configuration's
/// `naming`); with `fold`, folding `engine` away by
/// [`endpoint_picker_rules`].
pub fn endpoint_picker(rename: impl Fn(&str) -> Arc<str>, fold: bool) -> View {
    let fold = fold.then(|| {
        let rename_function = |function: FoldFunction| match function {
            FoldFunction::WeightedMean { family, label } => FoldFunction::WeightedMean {
                family: rename(&family),
                label,
            },
            FoldFunction::NewestUnion { labels, ranks } => FoldFunction::NewestUnion {
                labels,
                ranks: ranks.map(|r| rename(&r)),
            },
            other => other,
        };
        let mut labels: Vec<Arc<str>> = ENDPOINT_PICKER_FOLDED_LABELS
            .iter()
            .map(|l| Arc::from(*l))
            .collect();
        labels.sort_unstable();
        labels.dedup();
        Fold {
            labels,
            rules: endpoint_picker_rules()
                .into_iter()
                .map(|(family, function)| FoldRule {
                    family: rename(family),
                    function: rename_function(function),
                })
                .collect(),
        }
    });
    View {
        name: ENDPOINT_PICKER.into(),
        families: ENDPOINT_PICKER_FAMILIES.iter().map(|f| rename(f)).collect(),
        builtin: true,
        matching: Matching::Families,
        fold,
    }
}

/// Why a view's name cannot be used, if it cannot: one path segment of
/// letters, digits, `-`, `_` and `.`, starting with a letter or digit.
pub fn view_name_problem(name: &str) -> Option<&'static str> {
    if name.is_empty() {
        return Some("empty");
    }
    if !name.starts_with(|c: char| c.is_ascii_alphanumeric()) {
        return Some("must start with a letter or a digit");
    }
    if !name
        .chars()
        .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
    {
        return Some("only letters, digits, '-', '_' and '.' make a path segment");
    }
    None
}
