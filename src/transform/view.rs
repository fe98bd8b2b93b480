//! The views the configuration declares: their type, the built-in one's
//! families and the rule for their names. Pure: no I/O. How a view is read
//! and cut from `/metrics` is [`crate::transform::views`].

use std::sync::Arc;

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

/// The built-in view, its families named by `rename` (the configuration's
/// `naming`).
pub fn endpoint_picker(rename: impl Fn(&str) -> Arc<str>) -> View {
    View {
        name: ENDPOINT_PICKER.into(),
        families: ENDPOINT_PICKER_FAMILIES.iter().map(|f| rename(f)).collect(),
        builtin: true,
        matching: Matching::Families,
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
