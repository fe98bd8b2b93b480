//! The status page's "Pods" section (issue 36): with
//! `--discover.processes` or `--dir.subdirectories-label`, every part the
//! server reads (a pod's container, a directory outside Kubernetes, a
//! subdirectory) as one row of a table, sorted by namespace and pod and
//! searchable: its labels, its directories as their writers see them, their
//! mount namespaces, holders and states, its files and writers, when it was
//! found; and the directories dropped in the last minutes with the reason.
//! The script renders it from `/api/v1/status` (the JSON of
//! [`super::parts_status`]), the one place it is rendered, and lets the
//! vLLM charts show one pod (`pod-filter`). `/?q=TEXT` opens
//! the page with the table searched for `TEXT`, `/?pod=NS/POD/CONTAINER`
//! with the charts of that pod.

use super::parts_status::PartJson;

/// The section, empty: the script renders its rows from `/api/v1/status`
/// (`renderParts`), the only place they are rendered (issue 40: they were
/// rendered twice, here and in the script). Hidden when `parts` is empty (a
/// single directory), so that the page does not flash a table it will hide.
pub(crate) fn section(parts: &[PartJson]) -> String {
    let hidden = if parts.is_empty() { " hidden" } else { "" };
    format!(
        "<section id=\"pods-section\"{hidden}><h2>Pods</h2>\
         <p class=\"muted\">Every directory this exporter reads, with the labels its series get; sorted by namespace and pod.</p>\
         <input id=\"pods-search\" type=\"search\" placeholder=\"Search labels, directories, pids…\" aria-label=\"Search the pods\">\
         <span id=\"pods-count\" class=\"muted\"></span>\
         <div class=\"wide\"><table id=\"pods\"><thead><tr><th>Labels</th><th>Directory (as its writers see it)</th><th>Mount ns</th>\
         <th>Holders</th><th>State</th><th title=\"read / skipped / pending\">Files</th><th title=\"live / dead\">Writers</th><th>Found</th></tr></thead>\
         <tbody></tbody></table></div>\
         <h3>Dropped in the last 5 minutes</h3><div id=\"pods-dropped\"><p class=\"muted\">None.</p></div></section>"
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

    #[test]
    fn the_rows_are_left_to_the_script_and_the_section_hidden_without_parts() {
        let part = PartJson::unread("a/q/c".to_owned(), Default::default(), Vec::new());
        let html = section(std::slice::from_ref(&part));
        assert!(
            html.starts_with("<section id=\"pods-section\"><h2>"),
            "{html}"
        );
        assert!(html.contains("<tbody></tbody>"), "{html}");
        assert!(!html.contains("data-part"), "{html}");
        assert!(section(&[]).starts_with("<section id=\"pods-section\" hidden>"));
        // The script draws the rows (and nothing else does).
        assert!(SCRIPT.contains("function partRow(p)"));
    }
}
