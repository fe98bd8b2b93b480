//! The legacy (pre-UTF-8) name rules of Prometheus, with Python's `re`
//! semantics, as prometheus_client applies them: shared by the encoders and
//! the configuration's validation.

/// Whether `c` may stand at `index` of a legacy label name.
pub fn is_legacy_label_rune(c: char, index: usize) -> bool {
    c.is_ascii_alphabetic() || c == '_' || (c.is_ascii_digit() && index > 0)
}

/// Whether `c` may stand at `index` of a legacy metric name.
pub fn is_legacy_metric_rune(c: char, index: usize) -> bool {
    is_legacy_label_rune(c, index) || c == ':'
}

/// Python's `re.match(pattern, s)` for a pattern ending in `$`, which also
/// matches before a single trailing newline.
fn without_final_newline(s: &str) -> &str {
    s.strip_suffix('\n').unwrap_or(s)
}

/// `^[a-zA-Z_:][a-zA-Z0-9_:]*$` (Python semantics).
pub fn is_legacy_metric_name(name: &str) -> bool {
    let body = without_final_newline(name);
    // Legacy runes are ASCII, so byte positions equal rune positions up to
    // the first non-ASCII byte, which fails the test anyway.
    !body.is_empty()
        && body
            .bytes()
            .enumerate()
            .all(|(i, b)| is_legacy_metric_rune(char::from(b), i))
}

/// `^[a-zA-Z_][a-zA-Z0-9_]*$` and not `^__.*$` (Python semantics).
pub fn is_legacy_label_name(name: &str) -> bool {
    let body = without_final_newline(name);
    // As in `is_legacy_metric_name`, bytes stand for runes.
    !body.is_empty()
        && body
            .bytes()
            .enumerate()
            .all(|(i, b)| is_legacy_label_rune(char::from(b), i))
        && !body.starts_with("__")
}

/// Why `name` cannot be a constant label name, if it cannot.
pub fn label_name_problem(name: &str) -> Option<&'static str> {
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
