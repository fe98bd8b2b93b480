//! Serving the views ([`crate::transform::views`]): `<telemetry path>/<name>`,
//! and the `?name[]=` requests of the telemetry path, each answered as a view
//! of its sample names ([`View::of_sample_names`]).
//!
//! The views' sources, their collections and their kept answers belong to
//! the pipeline ([`crate::pipeline::views::ViewSources`]); here a view's
//! request is routed to its entry there, or, where it has none (no source
//! of its own: subdirectories, discovered directories, upstreams; a
//! `?name[]=` set that finds no room; or a source whose first read would run
//! beside the collection of `/metrics` in flight), cut from the shared
//! collection of `/metrics` ([`crate::pipeline::views::view_families`]). The exporter's
//! own families are added only when the view lists them
//! ([`View::wants_own`]); a view's poll reports no problem of its own (the
//! collections of `/metrics` log and count them).

use std::sync::Arc;

use crate::expose::memo::Gzipper;
use crate::pipeline::coalesce::InFlight;
use crate::pipeline::rendered::{encoded, SharedBody};
use crate::pipeline::views::{view_families, ViewEntry, ViewFamilies, ViewSources};
use crate::server::scrape::{Request, Scraper};
use crate::server::telemetry::self_metrics::{self, SelfMetrics};
use crate::transform::config::{Config, ConfigError};
use crate::transform::views::{view_path, View};

/// Serves `entry`'s view for `request` (blocking: off the async workers);
/// `None` when the pipeline has it cut from the shared collection of
/// `/metrics` instead (its source's first read would run beside it).
pub(crate) fn render(
    views: &ViewSources,
    entry: &ViewEntry,
    shared: &dyn InFlight,
    request: &Request,
    self_metrics: Option<&SelfMetrics>,
) -> Option<SharedBody> {
    let families = views.families(entry, shared)?;
    Some(answer(entry, &families, request, self_metrics))
}

/// [`render`] on an async worker: `None` when a collection of the view, or
/// another view's read, is in flight (the poll is then handed to the
/// blocking pool).
pub(crate) fn render_now(
    views: &ViewSources,
    entry: &ViewEntry,
    request: &Request,
    self_metrics: Option<&SelfMetrics>,
) -> Option<SharedBody> {
    let families = views.families_now(entry)?;
    Some(answer(entry, &families, request, self_metrics))
}

/// The view's `families` for `request`, with the exporter's own it lists.
fn answer(
    entry: &ViewEntry,
    families: &ViewFamilies,
    request: &Request,
    self_metrics: Option<&SelfMetrics>,
) -> SharedBody {
    let view = entry.view();
    let own = match self_metrics {
        Some(m) if view.wants_own() => {
            self_metrics::without_clashes(view.cut(&m.families()), &families.families).0
        }
        _ => Vec::new(),
    };
    if own.is_empty() {
        return entry.body(families, request.format, request.escaping, request.gzip);
    }
    let mut all = families.families.to_vec();
    all.extend(own);
    encode_alone(&all, request)
}

/// `view` cut from the shared collection of `/metrics` (blocking).
pub(crate) fn render_from_shared(
    scraper: &Scraper,
    view: &View,
    request: &Request,
    config: &Arc<Config>,
    self_metrics: Option<&SelfMetrics>,
) -> SharedBody {
    let served = scraper.families(config, self_metrics);
    encode_alone(&view_families(view, served.families()), request)
}

fn encode_alone(families: &[crate::model::MetricFamily], request: &Request) -> SharedBody {
    let rendered = encoded(
        families,
        request.format,
        request.escaping,
        request.gzip,
        &mut Gzipper::default(),
    );
    SharedBody::alone(rendered)
}

/// Why the configuration's views cannot be served under `telemetry_path`, if
/// they cannot: a view whose path is one the server already serves (the
/// metrics path, `/`, `/-/healthy`, `/-/ready`, the JSON API's).
pub fn view_clash(telemetry_path: &str, config: &Config) -> Option<ConfigError> {
    config.views.iter().find_map(|view| {
        let path = view_path(telemetry_path, &view.name);
        let taken = path == telemetry_path
            || ["/", "/-/healthy", "/-/ready"].contains(&path.as_str())
            || super::api::Endpoint::of(&path).is_some();
        taken.then(|| ConfigError::InvalidView {
            name: view.name.to_string(),
            error: format!("its path {path} is one the server already serves"),
        })
    })
}

/// The answer to a path under the metrics path that names no view: 404,
/// naming the views that exist.
pub(crate) fn unknown_view(telemetry_path: &str, config: &Config) -> axum::response::Response {
    use axum::response::IntoResponse;
    let mut text = String::from("404 page not found: no such view. ");
    if config.views.is_empty() {
        text.push_str("No view is configured.\n");
    } else {
        text.push_str("The views are:\n");
        for view in &config.views {
            text.push_str(&view_path(telemetry_path, &view.name));
            text.push('\n');
        }
    }
    (axum::http::StatusCode::NOT_FOUND, text).into_response()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_view_under_a_served_path_is_refused() {
        let config = Config::default();
        assert!(view_clash("/metrics", &config).is_none());
        let mut api = Config::default();
        api.views[0].name = "status".into();
        let clash = view_clash("/api/v1", &api).unwrap().to_string();
        assert!(clash.contains("/api/v1/status"), "{clash}");
        api.views[0].name = "healthy".into();
        assert!(view_clash("/-", &api).is_some());
        // Under the API's prefix but no path of it: served.
        assert!(view_clash("/api/v1", &Config::default()).is_none());
    }
}
