//! The status page's "Pods" section (issue 36): with
//! `--discover.processes` or `--dir.subdirectories-label`, every part the
//! server reads (a pod's container, a directory outside Kubernetes, a
//! subdirectory) as one row of a table, sorted by namespace and pod and
//! searchable: its labels, its directories as their writers see them, their
//! mount namespaces, holders and states, its files and writers, when it was
//! found; and the directories dropped in the last minutes with the reason.
//! The server renders it from the last collection
//! ([`super::parts_status`]); the script redraws it from `/api/v1/status`
//! and lets the vLLM charts show one pod (`pod-filter`). `/?q=TEXT` opens
//! the page with the table searched for `TEXT`, `/?pod=NS/POD/CONTAINER`
//! with the charts of that pod.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use super::html::html_escape;
use super::parts_status::PartJson;

/// The section, with `parts` rendered (hidden when there are none: a single
/// directory).
pub(crate) fn section(parts: &[PartJson]) -> String {
    let hidden = if parts.is_empty() { " hidden" } else { "" };
    let mut rows = String::new();
    let mut sorted: Vec<&PartJson> = parts.iter().collect();
    sorted.sort_by_key(|p| sort_key(p));
    for part in sorted {
        rows.push_str(&row(part));
    }
    format!(
        "<section id=\"pods-section\"{hidden}><h2>Pods</h2>\
         <p class=\"muted\">Every directory this exporter reads, with the labels its series get; sorted by namespace and pod.</p>\
         <input id=\"pods-search\" type=\"search\" placeholder=\"Search labels, directories, pids…\" aria-label=\"Search the pods\">\
         <span id=\"pods-count\" class=\"muted\">{}</span>\
         <div class=\"wide\"><table id=\"pods\"><thead><tr><th>Labels</th><th>Directory (as its writers see it)</th><th>Mount ns</th>\
         <th>Holders</th><th>State</th><th title=\"read / skipped / pending\">Files</th><th title=\"live / dead\">Writers</th><th>Found</th></tr></thead>\
         <tbody>{rows}</tbody></table></div>\
         <h3>Dropped in the last 5 minutes</h3><div id=\"pods-dropped\"><p class=\"muted\">None.</p></div></section>",
        count_text(parts.len())
    )
}

fn count_text(n: usize) -> String {
    format!("{n} shown")
}

/// Pods first, by namespace, pod, container, then the name: the table's
/// order.
fn sort_key(part: &PartJson) -> (bool, String, String, String, String) {
    let get = |k: &str| part.labels.get(k).cloned().unwrap_or_default();
    (
        !part.labels.contains_key("namespace"),
        get("namespace"),
        get("pod"),
        get("container"),
        part.name.clone(),
    )
}

/// The labels in the page's order: namespace, pod, container, the others
/// by name, and `directory` last (the script's `labelOrder`).
fn ordered(labels: &BTreeMap<String, String>) -> Vec<(&String, &String)> {
    let mut out: Vec<(&String, &String)> = labels.iter().collect();
    out.sort_by_key(|(name, _)| {
        let first = ["namespace", "pod", "container"]
            .iter()
            .position(|n| n == name)
            .unwrap_or(if name.as_str() == "directory" { 4 } else { 3 });
        (first, name.as_str())
    });
    out
}

/// One part's row, as the script's `partRow` renders it.
fn row(part: &PartJson) -> String {
    let mut labels = String::new();
    for (name, value) in ordered(&part.labels) {
        let _ = write!(
            labels,
            "<code class=\"label\">{}=\"{}\"</code> ",
            html_escape(name),
            html_escape(value)
        );
    }
    let cell = |f: &dyn Fn(&super::parts_status::DirectoryJson) -> String| -> String {
        part.directories
            .iter()
            .map(|d| html_escape(&f(d)))
            .collect::<Vec<_>>()
            .join("<br>")
    };
    format!(
        "<tr data-part=\"{}\"><td>{labels}</td><td><code>{}</code></td><td>{}</td><td>{}</td><td>{}</td>\
         <td class=\"nowrap\">{} / {} / {}</td><td class=\"nowrap\">{} / {}</td><td class=\"nowrap\">{}</td></tr>",
        html_escape(&part.name),
        cell(&|d| d.dir.clone()),
        cell(&|d| d.mount_ns.map_or_else(String::new, |n| n.to_string())),
        cell(&|d| d.holders
            .iter()
            .map(u32::to_string)
            .collect::<Vec<_>>()
            .join(" ")),
        cell(&|d| d.state.unwrap_or_default().to_owned()),
        part.files_merged,
        part.files_skipped,
        part.files_pending,
        part.writers_live,
        part.writers_dead,
        cell(&|d| d.found_at.map_or_else(String::new, |at| {
            humantime::format_rfc3339_seconds(
                std::time::UNIX_EPOCH + std::time::Duration::from_secs_f64(at.max(0.0)),
            )
            .to_string()
        })),
    )
}

/// The section's style.
pub(crate) const STYLE: &str = "\
#pods-search{margin:.3em 1em .6em 0;padding:.3em .5em;min-width:22em}\
#pods td{vertical-align:top;font-size:.85em}#pods th{font-size:.9em}.wide{overflow-x:auto}.nowrap{white-space:nowrap}code.label{white-space:nowrap;background:#f2f2f7;border-radius:3px;padding:0 .2em}\
.pod-filter{margin:.3em 0}";

/// The section's script: `renderParts(status)` redraws the table, the search
/// filters it, and `chartKeys(summary)` / `chartTitle(summary, key)` let the
/// charts show one pod or all, each pod's models apart.
pub(crate) const SCRIPT: &str = r##"
// Label names in the page's order: namespace, pod, container, the others by
// name, and directory last.
function labelOrder(labels) {
  const first = ['namespace', 'pod', 'container'];
  const rank = k => { const i = first.indexOf(k); return i >= 0 ? i : k === 'directory' ? 4 : 3; };
  return Object.keys(labels).sort((a, b) => rank(a) - rank(b) || (a < b ? -1 : a > b ? 1 : 0));
}
function labelCodes(labels) {
  return labelOrder(labels).map(k => '<code class="label">' + esc(k) + '="' + esc(labels[k]) + '"</code>').join(' ');
}
function partSortKey(p) {
  const l = p.labels;
  return [l.namespace === undefined ? 1 : 0, l.namespace || '', l.pod || '', l.container || '', p.name];
}
function partRow(p) {
  const labels = labelCodes(p.labels);
  const cell = f => p.directories.map(d => esc(f(d))).join('<br>');
  return '<tr data-part="' + esc(p.name) + '"><td>' + labels + '</td><td><code>' + cell(d => d.dir) + '</code></td><td>' +
    cell(d => d.mount_ns === null ? '' : d.mount_ns) + '</td><td>' + cell(d => d.holders.join(' ')) + '</td><td>' +
    cell(d => d.state || '') + '</td><td class="nowrap">' + p.files_merged + ' / ' + p.files_skipped + ' / ' + p.files_pending + '</td><td class="nowrap">' +
    p.writers_live + ' / ' + p.writers_dead + '</td><td class="nowrap">' +
    cell(d => d.found_at === null ? '' : new Date(d.found_at * 1000).toISOString().replace(/\.\d+Z$/, 'Z')) + '</td></tr>';
}
function cmpKeys(a, b) {
  for (let i = 0; i < a.length; i++) { if (a[i] < b[i]) return -1; if (a[i] > b[i]) return 1; }
  return 0;
}
function filterParts() {
  const q = (document.getElementById('pods-search').value || '').toLowerCase();
  let shown = 0;
  document.querySelectorAll('#pods tbody tr').forEach(tr => {
    const match = !q || tr.textContent.toLowerCase().includes(q);
    tr.hidden = !match;
    if (match) shown++;
  });
  document.getElementById('pods-count').textContent = shown + ' shown';
}
function renderParts(status) {
  const section = document.getElementById('pods-section');
  const parts = (status.last && status.last.parts) || [];
  const dropped = status.dropped || [];
  section.hidden = parts.length === 0 && dropped.length === 0;
  parts.sort((a, b) => cmpKeys(partSortKey(a), partSortKey(b)));
  document.querySelector('#pods tbody').innerHTML = parts.map(partRow).join('');
  document.getElementById('pods-dropped').innerHTML = dropped.length === 0 ? '<p class="muted">None.</p>' :
    '<table><tr><th>When</th><th>Labels</th><th>Directory</th><th>Reason</th></tr>' +
    dropped.slice().reverse().map(d => '<tr><td>' + esc(new Date(d.at * 1000).toISOString().replace(/\.\d+Z$/, 'Z')) + '</td><td>' +
      labelCodes(d.labels) +
      '</td><td><code>' + esc(d.dir) + '</code></td><td><code>' + esc(d.reason) + '</code></td></tr>').join('') + '</table>';
  filterParts();
}
// The pod of a chart key: its labels without model_name, as text.
function podOf(summary, key) {
  const labels = (summary.groups || {})[key];
  if (!labels) return '';
  return labelOrder(labels).filter(k => k !== 'model_name').map(k => labels[k]).join('/');
}
function chartTitle(summary, key) {
  const labels = (summary.groups || {})[key];
  if (!labels) return key || '(no model_name)';
  return podOf(summary, key) + ' · ' + (labels.model_name || '(no model_name)');
}
// The keys to chart: every pod's models, or the chosen pod's; and the pod
// selector kept up to date.
function chartKeys(summary) {
  const keys = Object.keys(summary.models);
  const select = document.getElementById('pod-filter');
  const pods = [...new Set(keys.map(k => podOf(summary, k)))].filter(p => p !== '').sort();
  select.hidden = pods.length === 0;
  // Before the first options: the page's `?pod=`, if any.
  const chosen = select.getAttribute('data-pods') === null ?
    (new URLSearchParams(location.search).get('pod') || '') : select.value;
  const options = '<option value="">Every pod</option>' + pods.map(p => '<option value="' + esc(p) + '"' + (p === chosen ? ' selected' : '') + '>' + esc(p) + '</option>').join('');
  if (select.getAttribute('data-pods') !== pods.join('\n')) {
    select.innerHTML = options;
    select.setAttribute('data-pods', pods.join('\n'));
  }
  const sortKey = k => { const l = (summary.groups || {})[k] || {}; return [l.namespace === undefined ? 1 : 0, l.namespace || '', l.pod || '', podOf(summary, k), l.model_name || k]; };
  return keys.filter(k => !chosen || podOf(summary, k) === chosen).sort((a, b) => cmpKeys(sortKey(a), sortKey(b)));
}
// The search box: `?q=` fills it (a link to one pod's row), typing filters.
(function () {
  const input = document.getElementById('pods-search');
  if (!input) return;
  const q = new URLSearchParams(location.search).get('q');
  if (q) input.value = q;
  input.addEventListener('input', filterParts);
  // Another pod chosen: the charts of the last summary again.
  document.getElementById('pod-filter').addEventListener('change', () => {
    if (lastSummary) renderModels(lastSummary);
  });
})();
"##;

#[cfg(test)]
mod tests {
    use super::*;

    fn part(name: &str, labels: &[(&str, &str)]) -> PartJson {
        let labels = labels
            .iter()
            .map(|(n, v)| ((*n).to_owned(), (*v).to_owned()))
            .collect();
        PartJson::unread(name.to_owned(), labels, Vec::new())
    }

    #[test]
    fn pods_come_first_by_namespace_and_pod_labels_in_order_escaped() {
        let html = section(&[
            part("process <py>", &[("process", "<py>"), ("directory", "/m")]),
            part(
                "b/p/c",
                &[("container", "c"), ("namespace", "b"), ("pod", "p")],
            ),
            part(
                "a/q/c",
                &[("pod", "q"), ("namespace", "a"), ("container", "c")],
            ),
        ]);
        let rows: Vec<&str> = html
            .match_indices("data-part=\"")
            .map(|(i, _)| &html[i + 11..i + 16])
            .collect();
        assert_eq!(rows, ["a/q/c", "b/p/c", "proce"], "{html}");
        assert!(html.contains(
            "<code class=\"label\">namespace=\"a\"</code> <code class=\"label\">pod=\"q\"</code> <code class=\"label\">container=\"c\"</code>"
        ), "{html}");
        assert!(
            html.contains("process=\"&lt;py&gt;\"</code> <code class=\"label\">directory="),
            "{html}"
        );
        assert!(!html.contains("<py>"), "{html}");
        assert!(section(&[]).starts_with("<section id=\"pods-section\" hidden>"));
    }
}
