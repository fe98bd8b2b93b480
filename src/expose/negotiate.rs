//! HTTP content negotiation, exactly as prometheus_client 0.26.0's
//! exposition does it. Pure: no I/O.
//!
//! * [`choose_encoder`] is `prometheus_client.exposition.choose_encoder`: the
//!   `Accept` header is read clause by clause **in order, ignoring q-values**;
//!   the first `application/openmetrics-text` clause without a version, or
//!   with a version ≥ 1.0.0, selects OpenMetrics; the first `text/plain`
//!   clause with a version ≥ 1.0.0 selects text 1.0.0; otherwise the answer is
//!   text 0.0.4. The Content-Type strings are Python's, byte for byte,
//!   including the echoed OpenMetrics version.
//! * [`gzip_accepted`] is `gzip_accepted`: any `Accept-Encoding` clause whose
//!   coding is `gzip` (case-insensitive), whatever its q-value.
//! * [`name_params`] is `parse_qs(query)['name[]']`: the values of every
//!   `name[]` parameter, percent-decoded, with blank values dropped.
//!
//! [`negotiate`] puts a rule in front of that ([`Negotiation::Safe`], the
//! default): OpenMetrics is answered only to a scraper that keeps UTF-8 names
//! (`escaping=allow-utf-8`, what Prometheus 3.x sends), because
//! prometheus_client's OpenMetrics encoder with its default `underscores`
//! escaping writes `vllm:num_requests_running` as
//! `vllm_num_requests_running`, and Prometheus 2.x (whose `Accept` prefers
//! OpenMetrics 1.0.0 without an `escaping` parameter) would store every vLLM
//! series under a name no vLLM dashboard queries. Every other scraper gets a
//! Prometheus text format, which keeps the names. A request that names no
//! format (no `Accept`, or `curl`'s `*/*`) is answered as vLLM's own
//! `/metrics` route answers it: the text body with
//! `text/plain; version=1.0.0; charset=utf-8`. [`Negotiation::PrometheusClient`]
//! (`--web.negotiation=prometheus-client`) is prometheus_client's negotiation
//! exactly.
//!
//! Two deliberate differences, both about requests Python cannot serve well:
//!
//! * `escaping=dots` and `escaping=values` are answered with the
//!   `underscores` encoding and a Content-Type that says
//!   `escaping=underscores`. Python would apply its own `dots`/`values`
//!   escaping, which rewrites even legacy-valid names (`a_b` becomes `a__b`
//!   under `dots`), so those series would not match what Prometheus gets from
//!   any other target. The Content-Type always names the escaping actually
//!   used.
//! * A version Python cannot compare with `(1, 0, 0)` (such as `1.x`, which
//!   makes Python raise `TypeError` and fail the request) makes that clause
//!   unacceptable, and negotiation continues with the next clause.

use crate::expose::encode::{Escaping, Format};

/// `text/plain; version=0.0.4; charset=utf-8` (Python's `CONTENT_TYPE_PLAIN_0_0_4`).
pub const CONTENT_TYPE_TEXT_0_0_4: &str = "text/plain; version=0.0.4; charset=utf-8";
/// `text/plain; version=1.0.0; charset=utf-8` (Python's `CONTENT_TYPE_LATEST`).
pub const CONTENT_TYPE_TEXT_1_0_0: &str = "text/plain; version=1.0.0; charset=utf-8";
/// `application/openmetrics-text; version=1.0.0; charset=utf-8` (Python's
/// `openmetrics.exposition.CONTENT_TYPE_LATEST`).
pub const CONTENT_TYPE_OPENMETRICS_1_0_0: &str =
    "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// The outcome of negotiation: which encoder to run and the Content-Type to send.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Negotiated {
    /// Exposition format.
    pub format: Format,
    /// Name escaping.
    pub escaping: Escaping,
    /// The exact `Content-Type` header value.
    pub content_type: String,
}

impl Negotiated {
    fn text_0_0_4() -> Self {
        Self {
            format: Format::Text,
            escaping: Escaping::Underscores,
            content_type: CONTENT_TYPE_TEXT_0_0_4.to_owned(),
        }
    }
}

/// How the server picks the format.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Negotiation {
    /// OpenMetrics only with `escaping=allow-utf-8`, text otherwise, and a
    /// missing `Accept` answered as vLLM's route answers it (module docs).
    #[default]
    Safe,
    /// prometheus_client 0.26.0's `choose_encoder`, exactly.
    PrometheusClient,
}

/// The format for an `Accept` header under `negotiation`; `openmetrics:
/// false` never answers OpenMetrics (`--web.disable-openmetrics`).
pub fn negotiate(accept: Option<&str>, negotiation: Negotiation, openmetrics: bool) -> Negotiated {
    let filtered;
    let accept = if openmetrics {
        accept
    } else {
        filtered = without_openmetrics(accept);
        filtered.as_deref()
    };
    match negotiation {
        Negotiation::PrometheusClient => choose_encoder(accept),
        Negotiation::Safe => {
            if !names_a_format(accept) {
                return Negotiated {
                    content_type: CONTENT_TYPE_TEXT_1_0_0.to_owned(),
                    ..Negotiated::text_0_0_4()
                };
            }
            let chosen = choose_encoder(accept);
            if chosen.format == Format::OpenMetrics && chosen.escaping != Escaping::AllowUtf8 {
                choose_encoder(without_openmetrics(accept).as_deref())
            } else {
                chosen
            }
        }
    }
}

/// Whether an `Accept` header names a Prometheus format at all (`curl`'s
/// `*/*` and a missing header do not: no preference).
fn names_a_format(accept: Option<&str>) -> bool {
    accept.unwrap_or("").split(',').any(|clause| {
        matches!(
            clause.split(';').next().map(str::trim),
            Some("text/plain" | "application/openmetrics-text")
        )
    })
}

/// The Accept header without its `application/openmetrics-text` clauses (for
/// `--web.disable-openmetrics`).
pub fn without_openmetrics(accept: Option<&str>) -> Option<String> {
    let kept: Vec<&str> = accept?
        .split(',')
        .filter(|clause| {
            clause.split(';').next().map(str::trim) != Some("application/openmetrics-text")
        })
        .collect();
    Some(kept.join(","))
}

/// Chooses the encoder for an `Accept` header (`None` when absent; several
/// headers are joined with `,` first, as Python's ASGI app does).
pub fn choose_encoder(accept: Option<&str>) -> Negotiated {
    for clause in accept.unwrap_or("").split(',') {
        let tokens: Vec<&str> = clause.split(';').collect();
        let media_type = tokens[0].trim();
        if media_type == "application/openmetrics-text" {
            let version = parameter(&tokens, "version");
            let escaping = escaping(&tokens);
            match version {
                None => {
                    return Negotiated {
                        format: Format::OpenMetrics,
                        escaping: Escaping::Underscores,
                        content_type: CONTENT_TYPE_OPENMETRICS_1_0_0.to_owned(),
                    }
                }
                Some(v) if at_least_1_0_0(v) == Some(true) => {
                    return Negotiated {
                        format: Format::OpenMetrics,
                        escaping,
                        content_type: format!(
                            "application/openmetrics-text; version={v}; charset=utf-8; escaping={}",
                            escaping.as_str()
                        ),
                    }
                }
                Some(_) => {}
            }
        } else if media_type == "text/plain" {
            if let Some(v) = parameter(&tokens, "version") {
                if at_least_1_0_0(v) == Some(true) {
                    let escaping = escaping(&tokens);
                    return Negotiated {
                        format: Format::Text,
                        escaping,
                        content_type: format!(
                            "{CONTENT_TYPE_TEXT_1_0_0}; escaping={}",
                            escaping.as_str()
                        ),
                    };
                }
            }
        }
    }
    Negotiated::text_0_0_4()
}

/// Python's `_get_version`/`_get_escaping` lookup: the first token that,
/// stripped, splits at its first `=` into exactly `key` and a value. An empty
/// value counts as absent (Python tests `if version`).
fn parameter<'a>(tokens: &[&'a str], key: &str) -> Option<&'a str> {
    tokens
        .iter()
        .filter_map(|t| t.trim().split_once('='))
        .find(|(k, _)| *k == key)
        .map(|(_, v)| v)
        .filter(|v| !v.is_empty())
}

/// `_get_escaping`, mapped onto the encoders this crate has: `allow-utf-8`
/// keeps UTF-8 names; everything else (including `dots` and `values`) is
/// `underscores`.
fn escaping(tokens: &[&str]) -> Escaping {
    // Python looks at the first `escaping=` token only.
    match tokens
        .iter()
        .filter_map(|t| t.trim().split_once('='))
        .find(|(k, _)| *k == "escaping")
    {
        Some((_, "allow-utf-8")) => Escaping::AllowUtf8,
        _ => Escaping::Underscores,
    }
}

/// One element of Python's `parse_version` tuple.
#[derive(Debug, PartialEq, Eq)]
enum Part {
    Int(i128),
    Str,
}

/// `parse_version(v) >= (1, 0, 0)`; `None` where Python raises `TypeError`
/// (a non-numeric part compared with a number).
fn at_least_1_0_0(version: &str) -> Option<bool> {
    let parts: Vec<Part> = version
        .split('.')
        .map(|p| python_int(p).map_or(Part::Str, Part::Int))
        .collect();
    for (i, want) in [1i128, 0, 0].into_iter().enumerate() {
        match parts.get(i) {
            None => return Some(false), // a shorter equal prefix is smaller
            Some(Part::Str) => return None,
            Some(Part::Int(n)) if *n != want => return Some(*n > want),
            Some(Part::Int(_)) => {}
        }
    }
    Some(true)
}

/// Python's `int(s)` for ASCII input: surrounding whitespace, an optional
/// sign, digits with single `_` between them. `None` where Python raises
/// `ValueError` (or the number does not fit, which no real version does).
fn python_int(s: &str) -> Option<i128> {
    let s = s.trim_matches(|c: char| c.is_whitespace());
    let (negative, digits) = match s.as_bytes().first() {
        Some(b'-') => (true, &s[1..]),
        Some(b'+') => (false, &s[1..]),
        _ => (false, s),
    };
    if digits.is_empty()
        || digits.starts_with('_')
        || digits.ends_with('_')
        || digits.contains("__")
        || !digits.bytes().all(|b| b.is_ascii_digit() || b == b'_')
    {
        return None;
    }
    let value: i128 = digits.replace('_', "").parse().ok()?;
    Some(if negative { -value } else { value })
}

/// Whether the response should be gzipped (Python's `gzip_accepted`).
pub fn gzip_accepted(accept_encoding: Option<&str>) -> bool {
    accept_encoding.unwrap_or("").split(',').any(|clause| {
        clause
            .split(';')
            .next()
            .unwrap_or("")
            .trim()
            .eq_ignore_ascii_case("gzip")
    })
}

/// The values of the `name[]` query parameters (Python's
/// `parse_qs(query).get('name[]')`): `None` when there is none, so no
/// restriction applies; blank values are dropped, `+` is a space, `%XX` is
/// decoded (invalid UTF-8 becomes U+FFFD).
pub fn name_params(query: Option<&str>) -> Option<Vec<String>> {
    let mut names = Vec::new();
    for field in query.unwrap_or("").split('&') {
        let Some((key, value)) = field.split_once('=') else {
            continue;
        };
        if value.is_empty() {
            continue;
        }
        if unquote_plus(key) == "name[]" {
            names.push(unquote_plus(value));
        }
    }
    (!names.is_empty()).then_some(names)
}

/// Python's `unquote_plus`.
fn unquote_plus(s: &str) -> String {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let escaped = match bytes.get(i..i + 3) {
            Some([b'%', hi, lo]) => hex(*hi).zip(hex(*lo)).map(|(h, l)| h * 16 + l),
            _ => None,
        };
        match (escaped, bytes[i]) {
            (Some(b), _) => {
                out.push(b);
                i += 3;
            }
            (None, b'+') => {
                out.push(b' ');
                i += 1;
            }
            (None, b) => {
                out.push(b);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

fn hex(b: u8) -> Option<u8> {
    char::from(b).to_digit(16).map(|d| d as u8)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_safe_default_never_answers_openmetrics_with_underscores() {
        let safe = |accept| negotiate(accept, Negotiation::Safe, true);
        let two = safe(Some(PROMETHEUS_2));
        assert_eq!(
            (two.format, two.content_type.as_str()),
            (Format::Text, CONTENT_TYPE_TEXT_0_0_4)
        );
        let three = safe(Some(PROMETHEUS_3));
        assert_eq!(
            (three.format, three.escaping),
            (Format::OpenMetrics, Escaping::AllowUtf8)
        );
        let none = safe(None);
        assert_eq!(
            (none.format, none.content_type.as_str()),
            (Format::Text, CONTENT_TYPE_TEXT_1_0_0)
        );
        assert_eq!(safe(Some("")).content_type, CONTENT_TYPE_TEXT_1_0_0);
        assert_eq!(safe(Some("*/*")).content_type, CONTENT_TYPE_TEXT_1_0_0);
        assert_eq!(
            safe(Some("text/plain")).content_type,
            CONTENT_TYPE_TEXT_0_0_4
        );
        // prometheus_client's own negotiation is one flag away.
        let exact = negotiate(Some(PROMETHEUS_2), Negotiation::PrometheusClient, true);
        assert_eq!(
            (exact.format, exact.escaping),
            (Format::OpenMetrics, Escaping::Underscores)
        );
        assert_eq!(
            negotiate(None, Negotiation::PrometheusClient, true).content_type,
            CONTENT_TYPE_TEXT_0_0_4
        );
        // --web.disable-openmetrics wins over both.
        assert_eq!(
            negotiate(Some(PROMETHEUS_3), Negotiation::Safe, false).format,
            Format::Text
        );
    }

    #[test]
    fn without_openmetrics_keeps_the_text_clauses() {
        let prometheus_2 = "application/openmetrics-text;version=1.0.0,application/openmetrics-text;version=0.0.1;q=0.75,text/plain;version=0.0.4;q=0.5,*/*;q=0.1";
        let kept = without_openmetrics(Some(prometheus_2));
        assert_eq!(
            kept.as_deref(),
            Some("text/plain;version=0.0.4;q=0.5,*/*;q=0.1")
        );
        assert_eq!(
            choose_encoder(kept.as_deref()).content_type,
            CONTENT_TYPE_TEXT_0_0_4
        );
        assert_eq!(without_openmetrics(None), None);
    }

    fn ct(accept: &str) -> String {
        choose_encoder(Some(accept)).content_type
    }

    const PROMETHEUS_2: &str = "application/openmetrics-text;version=1.0.0,application/openmetrics-text;version=0.0.1;q=0.75,text/plain;version=0.0.4;q=0.5,*/*;q=0.1";
    const PROMETHEUS_3: &str = "application/openmetrics-text;version=1.0.0;escaping=allow-utf-8;q=0.5,application/openmetrics-text;version=0.0.1;q=0.4,text/plain;version=1.0.0;escaping=allow-utf-8;q=0.3,text/plain;version=0.0.4;q=0.2,*/*;q=0.1";

    #[test]
    fn research_table() {
        assert_eq!(
            choose_encoder(None),
            Negotiated {
                format: Format::Text,
                escaping: Escaping::Underscores,
                content_type: "text/plain; version=0.0.4; charset=utf-8".into()
            }
        );
        assert_eq!(
            choose_encoder(Some(PROMETHEUS_2)),
            Negotiated {
                format: Format::OpenMetrics,
                escaping: Escaping::Underscores,
                content_type:
                    "application/openmetrics-text; version=1.0.0; charset=utf-8; escaping=underscores"
                        .into()
            }
        );
        assert_eq!(
            choose_encoder(Some(PROMETHEUS_3)),
            Negotiated {
                format: Format::OpenMetrics,
                escaping: Escaping::AllowUtf8,
                content_type:
                    "application/openmetrics-text; version=1.0.0; charset=utf-8; escaping=allow-utf-8"
                        .into()
            }
        );
        assert_eq!(
            choose_encoder(Some("application/openmetrics-text")),
            Negotiated {
                format: Format::OpenMetrics,
                escaping: Escaping::Underscores,
                content_type: "application/openmetrics-text; version=1.0.0; charset=utf-8".into()
            }
        );
        assert_eq!(
            ct("application/openmetrics-text;version=0.0.1"),
            "text/plain; version=0.0.4; charset=utf-8"
        );
        assert_eq!(
            choose_encoder(Some("text/plain;version=1.0.0;escaping=allow-utf-8")),
            Negotiated {
                format: Format::Text,
                escaping: Escaping::AllowUtf8,
                content_type: "text/plain; version=1.0.0; charset=utf-8; escaping=allow-utf-8"
                    .into()
            }
        );
    }

    #[test]
    fn text_variants() {
        assert_eq!(
            ct("text/plain;version=1.0.0"),
            "text/plain; version=1.0.0; charset=utf-8; escaping=underscores"
        );
        assert_eq!(ct("text/plain"), CONTENT_TYPE_TEXT_0_0_4);
        assert_eq!(ct("text/plain;version=0.0.4"), CONTENT_TYPE_TEXT_0_0_4);
        assert_eq!(ct("*/*"), CONTENT_TYPE_TEXT_0_0_4);
        assert_eq!(ct(""), CONTENT_TYPE_TEXT_0_0_4);
        assert_eq!(ct("application/json"), CONTENT_TYPE_TEXT_0_0_4);
    }

    #[test]
    fn order_wins_over_q_values() {
        assert_eq!(
            ct("text/plain;version=1.0.0;q=0.1,application/openmetrics-text;q=1"),
            "text/plain; version=1.0.0; charset=utf-8; escaping=underscores"
        );
        // q=0 does not make a clause unacceptable in Python.
        assert_eq!(
            ct("application/openmetrics-text;q=0"),
            CONTENT_TYPE_OPENMETRICS_1_0_0
        );
    }

    #[test]
    fn whitespace_and_parameters() {
        assert_eq!(
            ct(" application/openmetrics-text ; version=1.0.0 ; escaping=allow-utf-8 "),
            "application/openmetrics-text; version=1.0.0; charset=utf-8; escaping=allow-utf-8"
        );
        // "version = 1.0.0" is not a version parameter for Python.
        assert_eq!(
            ct("application/openmetrics-text;version = 1.0.0"),
            CONTENT_TYPE_OPENMETRICS_1_0_0
        );
        // An empty version is no version.
        assert_eq!(
            ct("application/openmetrics-text;version="),
            CONTENT_TYPE_OPENMETRICS_1_0_0
        );
        // Media types are case-sensitive in Python's comparison.
        assert_eq!(ct("Application/OpenMetrics-Text"), CONTENT_TYPE_TEXT_0_0_4);
        // Unknown escaping falls back to underscores.
        assert_eq!(
            ct("text/plain;version=1.0.0;escaping=bogus"),
            "text/plain; version=1.0.0; charset=utf-8; escaping=underscores"
        );
    }

    #[test]
    fn versions_compare_like_python() {
        assert_eq!(at_least_1_0_0("1.0.0"), Some(true));
        assert_eq!(at_least_1_0_0("1"), Some(false));
        assert_eq!(at_least_1_0_0("1.0"), Some(false));
        assert_eq!(at_least_1_0_0("1.0.0.0"), Some(true));
        assert_eq!(at_least_1_0_0("2"), Some(true));
        assert_eq!(at_least_1_0_0("0.9.9"), Some(false));
        assert_eq!(at_least_1_0_0("0.x"), Some(false));
        assert_eq!(at_least_1_0_0("1.x"), None);
        assert_eq!(at_least_1_0_0("x"), None);
        assert_eq!(at_least_1_0_0(" 1.0.0"), Some(true));
        assert_eq!(at_least_1_0_0("+1.0_0.0"), Some(true));
        assert_eq!(at_least_1_0_0("1.-0.0"), Some(true));
        // Python echoes the requested version.
        assert_eq!(
            ct("application/openmetrics-text;version=2.0.0"),
            "application/openmetrics-text; version=2.0.0; charset=utf-8; escaping=underscores"
        );
        // A version Python cannot compare skips the clause.
        assert_eq!(
            ct("application/openmetrics-text;version=1.x,text/plain;version=1.0.0"),
            "text/plain; version=1.0.0; charset=utf-8; escaping=underscores"
        );
    }

    #[test]
    fn dots_and_values_fall_back_to_underscores() {
        for scheme in ["dots", "values"] {
            assert_eq!(
                choose_encoder(Some(&format!(
                    "application/openmetrics-text;version=1.0.0;escaping={scheme}"
                ))),
                Negotiated {
                    format: Format::OpenMetrics,
                    escaping: Escaping::Underscores,
                    content_type: "application/openmetrics-text; version=1.0.0; charset=utf-8; escaping=underscores".into()
                }
            );
        }
    }

    #[test]
    fn gzip() {
        assert!(!gzip_accepted(None));
        assert!(gzip_accepted(Some("gzip")));
        assert!(gzip_accepted(Some("deflate, GZIP;q=0.5")));
        assert!(gzip_accepted(Some("br, gzip;q=0")));
        assert!(!gzip_accepted(Some("x-gzip, identity")));
        assert!(!gzip_accepted(Some("*")));
    }

    #[test]
    fn names() {
        assert_eq!(name_params(None), None);
        assert_eq!(name_params(Some("")), None);
        assert_eq!(name_params(Some("name[]=")), None);
        assert_eq!(name_params(Some("name[]")), None);
        assert_eq!(
            name_params(Some(
                "name[]=a&x=y&name[]=&name%5B%5D=vllm%3Ab_total&name[]=c+d"
            )),
            Some(vec!["a".into(), "vllm:b_total".into(), "c d".into()])
        );
        assert_eq!(
            name_params(Some("name[]=%zz%4&name[]=%C3%A9%FF")),
            Some(vec!["%zz%4".into(), "é\u{fffd}".into()])
        );
        assert_eq!(name_params(Some("name[]=a=b")), Some(vec!["a=b".into()]));
    }
}
