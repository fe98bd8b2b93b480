//! The status page at `/`: one self-contained HTML document (inline CSS and
//! JavaScript, no external assets, usable offline) for people without
//! Grafana.
//!
//! The server renders the generic part from the last collection (the
//! directories, files read, skipped and pending with the reasons, writers
//! live and dead, the collection's time, size and cost), so the page says
//! something without JavaScript. The script then polls `/api/v1/status` and
//! `/api/v1/summary` every two seconds (same origin, so the browser sends the
//! credentials the page was loaded with) and redraws that part and the charts
//! of the curated vLLM numbers per model ([`crate::insight`]): requests
//! running and waiting, KV-cache usage, prompt and generation throughput,
//! prefix-cache hit rate, TTFT and TPOT. A directory without vLLM's metrics
//! shows the generic part and says that there is nothing to chart.

use crate::transform::views::{view_path, View};
use std::fmt::Write as _;
use std::path::PathBuf;

use super::api::LastCollection;
use super::html::html_escape;

/// The page, with the generic part of `last` rendered.
pub(crate) fn page(
    telemetry_path: &str,
    dirs: &[PathBuf],
    last: Option<&LastCollection>,
) -> String {
    let path = html_escape(telemetry_path);
    let version = env!("CARGO_PKG_VERSION");
    let mut directories = String::new();
    for dir in dirs {
        let _ = write!(
            directories,
            "<li><code>{}</code></li>",
            html_escape(&dir.display().to_string())
        );
    }
    let pods = super::status_pods::section(last.map(|l| l.parts.as_slice()).unwrap_or(&[]));
    let pods_style = super::status_pods::STYLE;
    let pods_script = super::status_pods::SCRIPT;
    let generic = last
        .map(generic_html)
        .unwrap_or_else(|| "<p>No collection yet.</p>".to_owned());
    format!(
        r##"<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="UTF-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>multiproc-exporter</title>
<link rel="icon" href="data:,">
<style>{STYLE}{pods_style}</style>
</head>
<body>
<header><h1>multiproc-exporter</h1><span class="muted">version {version}</span>
<nav><a href="{path}">Metrics</a> · <a href="/api/v1/snapshot">Snapshot (JSON)</a> · <a href="/api/v1/summary">Summary (JSON)</a> · <a href="/-/healthy">Health</a> · <a href="/-/ready">Readiness</a></nav></header>
<section><h2>Directories</h2><ul id="directories">{directories}</ul>
<div id="generic">{generic}</div></section>
{pods}
<section><h2>vLLM and SGLang</h2><p class="muted">Per model (and pod); SGLang: queued requests, token usage (KV cache), cached over prompt tokens (hit rate), inter-token latency (TPOT); rates and averages between collections, a counter reset skips its interval. The last 15 minutes.</p>
<select id="pod-filter" class="pod-filter" aria-label="Pod" hidden></select>
<div id="models"><p class="muted">Waiting for two collections…</p></div></section>
<script>{pods_script}{SCRIPT}</script>
</body>
</html>
"##
    )
}

/// `page` with a link to each view (`/metrics/endpoint-picker`) in its
/// navigation.
pub(crate) fn with_views(page: String, telemetry_path: &str, views: &[View]) -> String {
    if views.is_empty() {
        return page;
    }
    let mut links = String::from(" · Views:");
    for view in views {
        let path = html_escape(&view_path(telemetry_path, &view.name));
        let _ = write!(links, r#" <a class="view" href="{path}">{path}</a>"#);
    }
    links.push_str("</nav></header>");
    page.replacen("</nav></header>", &links, 1)
}

/// The generic part, as the script renders it too (`renderGeneric`).
fn generic_html(last: &LastCollection) -> String {
    let mut problems = String::new();
    for p in &last.problems {
        let _ = write!(
            problems,
            "<tr><td><code>{}</code></td><td><code>{}</code></td><td>{}</td></tr>",
            html_escape(&p.path),
            p.reason,
            html_escape(&p.message)
        );
    }
    let problems = if problems.is_empty() {
        "<p class=\"muted\">Nothing left out.</p>".to_owned()
    } else {
        format!(
            "<table><tr><th>File</th><th>Reason</th><th>What is wrong</th></tr>{problems}</table>"
        )
    };
    format!(
        "<div class=\"tiles\">\
         <div class=\"tile\"><b id=\"files-merged\">{}</b>files read</div>\
         <div class=\"tile\"><b id=\"files-skipped\">{}</b>skipped</div>\
         <div class=\"tile\"><b id=\"files-pending\">{}</b>pending</div>\
         <div class=\"tile\"><b id=\"writers-live\">{}</b>writers live</div>\
         <div class=\"tile\"><b id=\"writers-dead\">{}</b>writers dead</div>\
         <div class=\"tile\"><b id=\"series\">{}</b>samples in {} families</div>\
         <div class=\"tile\"><b id=\"duration\">{:.2} ms</b>last collection, {} bytes read</div>\
         </div><p class=\"muted\">Last collection: <span id=\"collected-at\" data-at=\"{}\">{}</span></p>\
         <h3>Left out</h3><div id=\"problems\">{problems}</div>",
        last.files_merged,
        last.files_skipped,
        last.files_pending,
        last.writers_live,
        last.writers_dead,
        last.samples,
        last.families,
        last.duration_ms,
        last.bytes_read,
        last.at,
        humantime::format_rfc3339_seconds(
            std::time::UNIX_EPOCH + std::time::Duration::from_secs_f64(last.at.max(0.0))
        ),
    )
}

const STYLE: &str = "\
body{font-family:system-ui,sans-serif;margin:0 auto;max-width:1200px;padding:0 1em;color:#1d1d1f}\
header{display:flex;flex-wrap:wrap;align-items:baseline;gap:1em;border-bottom:1px solid #ddd}\
h1{font-size:1.4em}h2{font-size:1.15em;margin-top:1.2em}h3{font-size:1em}\
nav{margin-left:auto}.muted{color:#6e6e73}code{font-size:.9em}\
.tiles{display:flex;flex-wrap:wrap;gap:.6em}.tile{border:1px solid #ddd;border-radius:6px;padding:.5em .8em;min-width:8em}\
.tile b{display:block;font-size:1.3em}\
table{border-collapse:collapse}td,th{border-bottom:1px solid #eee;padding:.2em .6em;text-align:left}\
.charts{display:grid;grid-template-columns:repeat(auto-fill,minmax(360px,1fr));gap:1em}\
.chart{border:1px solid #ddd;border-radius:6px;padding:.4em}.chart h4{margin:.2em 0;font-size:.95em}\
.chart .now{float:right;font-weight:bold}svg{width:100%;height:120px}\
.legend span{margin-right:1em;font-size:.85em}";

const SCRIPT: &str = r##"
'use strict';
const COLORS = ['#0a84ff', '#ff9f0a', '#30d158', '#bf5af2', '#ff375f', '#64d2ff'];
const CHARTS = [
  {title: 'Requests', unit: '', series: [['requests_running', 'running'], ['requests_waiting', 'waiting']]},
  {title: 'KV-cache usage', unit: '%', scale: 100, series: [['kv_cache_usage', 'usage']]},
  {title: 'Throughput', unit: ' tok/s', series: [['prompt_tokens_per_second', 'prompt'], ['generation_tokens_per_second', 'generation']]},
  {title: 'Prefix-cache hit rate', unit: '%', scale: 100, series: [['prefix_cache_hit_rate', 'hit rate']]},
  {title: 'Time to first token', unit: ' s', series: [['ttft_seconds', 'mean']]},
  {title: 'Time per output token', unit: ' s', series: [['tpot_seconds', 'mean']]},
];
function esc(s) {
  return String(s).replace(/[&<>"']/g, c => ({'&': '&amp;', '<': '&lt;', '>': '&gt;', '"': '&quot;', "'": '&#39;'}[c]));
}
function fmt(v, chart) {
  if (v === null || v === undefined) return '–';
  const x = v * (chart.scale || 1);
  const digits = Math.abs(x) >= 100 ? 0 : Math.abs(x) >= 1 ? 2 : 3;
  return x.toFixed(digits) + chart.unit;
}
function renderGeneric(s) {
  const set = (id, text) => { const e = document.getElementById(id); if (e) e.textContent = text; };
  set('files-merged', s.files_merged);
  set('files-skipped', s.files_skipped);
  set('files-pending', s.files_pending);
  set('writers-live', s.writers_live);
  set('writers-dead', s.writers_dead);
  set('series', s.samples);
  set('duration', s.duration_ms.toFixed(2) + ' ms');
  set('collected-at', new Date(s.at * 1000).toISOString());
  const problems = document.getElementById('problems');
  if (!problems) return;
  problems.innerHTML = s.problems.length === 0 ? '<p class="muted">Nothing left out.</p>' :
    '<table><tr><th>File</th><th>Reason</th><th>What is wrong</th></tr>' +
    s.problems.map(p => '<tr><td><code>' + esc(p.path) + '</code></td><td><code>' + esc(p.reason) +
      '</code></td><td>' + esc(p.message) + '</td></tr>').join('') + '</table>';
}
function svgChart(points, chart, model) {
  const w = 360, h = 120, pad = 4;
  const t0 = points.length ? points[0].at : 0, t1 = points.length ? points[points.length - 1].at : 1;
  let max = 0;
  const lines = chart.series.map(([key]) => points.map(p => {
    const d = p.models[model];
    const v = d ? d[key] : null;
    if (v !== null && v !== undefined) max = Math.max(max, v);
    return [p.at, v];
  }));
  if (max <= 0) max = 1;
  const x = t => pad + (w - 2 * pad) * (t1 > t0 ? (t - t0) / (t1 - t0) : 1);
  const y = v => h - pad - (h - 2 * pad) * v / max;
  let paths = '', dots = 0;
  lines.forEach((line, i) => {
    let d = '';
    let pen = false;
    for (const [t, v] of line) {
      if (v === null || v === undefined) { pen = false; continue; }
      d += (pen ? 'L' : 'M') + x(t).toFixed(1) + ' ' + y(v).toFixed(1) + ' ';
      pen = true;
      dots++;
    }
    paths += '<path d="' + d + '" fill="none" stroke="' + COLORS[i] + '" stroke-width="2"/>';
  });
  const top = '<text x="' + (w - pad) + '" y="12" text-anchor="end" font-size="10" fill="#6e6e73">' + esc(fmt(max, chart)) + '</text>';
  return {svg: '<svg viewBox="0 0 ' + w + ' ' + h + '" preserveAspectRatio="none" data-points="' + dots + '">' + top + paths + '</svg>', dots};
}
let lastSummary = null;
function renderModels(summary) {
  lastSummary = summary;
  const box = document.getElementById('models');
  const models = chartKeys(summary);
  if (models.length === 0) {
    box.innerHTML = '<p class="muted">No vLLM or SGLang metrics in these directories: nothing to chart.</p>';
    return;
  }
  box.innerHTML = models.map(model => {
    const now = summary.models[model];
    const charts = CHARTS.map(chart => {
      const {svg} = svgChart(summary.history, chart, model);
      const legend = chart.series.map(([key, name], i) =>
        '<span style="color:' + COLORS[i] + '">■ ' + esc(name) + ' ' + esc(fmt(now[key], chart)) + '</span>').join('');
      return '<div class="chart" data-chart="' + esc(chart.title) + '"><h4>' + esc(chart.title) + '</h4>' + svg +
        '<div class="legend">' + legend + '</div></div>';
    }).join('');
    return '<h3 data-model="' + esc(model) + '">' + esc(chartTitle(summary, model)) + '</h3><div class="charts">' + charts + '</div>';
  }).join('');
}
async function refresh() {
  try {
    const [status, summary] = await Promise.all([
      fetch('/api/v1/status', {cache: 'no-store'}).then(r => r.ok ? r.json() : Promise.reject(r.status)),
      fetch('/api/v1/summary', {cache: 'no-store'}).then(r => r.ok ? r.json() : Promise.reject(r.status)),
    ]);
    if (status.last) renderGeneric(status.last);
    renderParts(status);
    renderModels(summary);
  } catch (e) {
    const box = document.getElementById('models');
    box.setAttribute('data-error', String(e));
  }
}
refresh();
setInterval(refresh, 2000);
"##;
