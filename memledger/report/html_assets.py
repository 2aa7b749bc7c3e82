"""The HTML report's page: CSS and a small hand-written SVG renderer, inlined into one file.

No library and no network: the page draws from the JSON in `<script id="ml-data">`. Text
from the ledger (module names, ops) is set with `textContent`, never as markup.

When drawing is done the page fills `#ml-status` (data-status="ok" or "error", the drawn
categories, the errors caught): the browser test reads it from the dumped DOM.
"""

CSS = r"""
body { font: 14px/1.4 system-ui, -apple-system, "Segoe UI", sans-serif; margin: 24px;
       color: #222; max-width: 1200px; }
h1 { font-size: 20px; margin: 0 0 4px; } h2 { font-size: 16px; margin: 28px 0 8px; }
.dim { color: #777; } .num { text-align: right; font-variant-numeric: tabular-nums; }
table { border-collapse: collapse; } td, th { padding: 2px 10px; border-bottom: 1px solid #eee; }
th { text-align: left; font-weight: 600; }
#ml-chart-wrap { position: relative; }
#ml-chart { max-width: 100%; height: auto; }
#ml-chart text { font-size: 11px; fill: #444; }
#ml-chart .ml-phase-name { fill: #999; }
#ml-legend span { display: inline-block; margin-right: 14px; }
#ml-legend i { display: inline-block; width: 11px; height: 11px; margin-right: 4px;
               vertical-align: -1px; }
#ml-peak-label { font-weight: 600; cursor: pointer; }
#ml-peak-panel, #ml-tip { background: #fff; border: 1px solid #bbb; padding: 8px;
  font-size: 12px; display: none; }
#ml-peak-panel { margin: 6px 0 10px; max-height: 320px; overflow: auto; }
#ml-peak-panel td { white-space: nowrap; }
#ml-tip { position: absolute; pointer-events: none; z-index: 1;
  box-shadow: 0 2px 8px rgba(0,0,0,.15); }
.bar { height: 14px; display: inline-block; vertical-align: middle; }
"""

JS = r"""
(function () {
  const status = document.getElementById('ml-status');
  const errors = [];
  window.addEventListener('error', e => { errors.push(String(e.message)); finish(); });
  const origError = console.error;
  console.error = function () { errors.push(Array.from(arguments).join(' ')); origError.apply(console, arguments); };
  function finish(drawn) {
    status.dataset.status = errors.length ? 'error' : 'ok';
    if (drawn) status.dataset.drawn = drawn.join(',');
    status.dataset.errors = errors.join(' | ');
    status.textContent = errors.length ? ('errors: ' + errors.join(' | ')) : '';
  }
  const D = JSON.parse(document.getElementById('ml-data').textContent);
  const NS = 'http://www.w3.org/2000/svg';
  const fmt = b => { const a = Math.abs(b); const u = [['TiB', 2**40], ['GiB', 2**30], ['MiB', 2**20], ['KiB', 2**10]];
    for (const [n, s] of u) if (a >= s) return (b / s).toFixed(1) + ' ' + n; return b + ' B'; };
  const el = (tag, attrs, parent, text) => { const e = document.createElementNS(NS, tag);
    for (const k in attrs) e.setAttribute(k, attrs[k]); if (text !== undefined) e.textContent = text;
    if (parent) parent.appendChild(e); return e; };
  const h = (tag, parent, text, cls) => { const e = document.createElement(tag);
    if (text !== undefined) e.textContent = text; if (cls) e.className = cls; if (parent) parent.appendChild(e); return e; };

  // ---- the timeline --------------------------------------------------------------------
  const W = 1100, H = 380, L = 80, R = 20, T = 30, B = 40;
  const svg = el('svg', {id: 'ml-chart', width: W, height: H, viewBox: `0 0 ${W} ${H}`,
                          role: 'img', 'aria-label': 'live bytes by category over events'});
  document.getElementById('ml-chart-wrap').prepend(svg);
  const n = Math.max(D.n_events - 1, 1);
  const top = Math.max(D.peak.bytes, D.measured ? D.measured.peak_bytes : 0, 1) * 1.08;
  const X = ev => L + (W - L - R) * ev / n, Y = b => H - B - (H - T - B) * b / top;
  const bands = el('g', {id: 'ml-phases'}, svg);
  for (const [e0, e1, ph, st] of D.phases) {
    const r = el('rect', {x: X(e0), y: T, width: Math.max(X(e1) - X(e0), 0.5), height: H - T - B,
                          fill: D.phase_colors[ph] || '#fff', 'data-phase': ph}, bands);
    el('title', {}, r, `${ph} (step ${st}): events ${e0}–${e1 - 1}`);
    if (X(e1) - X(e0) > 8 * ph.length)   // name the band under the chart where it fits
      el('text', {x: (X(e0) + X(e1)) / 2, y: H - B + 14, 'text-anchor': 'middle',
                  class: 'ml-phase-name'}, svg, ph);
  }
  for (let i = 0; i <= 4; i++) {   // y grid
    const b = top / 1.08 * i / 4;
    el('line', {x1: L, x2: W - R, y1: Y(b), y2: Y(b), stroke: '#ddd'}, svg);
    el('text', {x: L - 6, y: Y(b) + 4, 'text-anchor': 'end'}, svg, fmt(Math.round(b)));
  }
  el('text', {x: (L + W - R) / 2, y: H - 8, 'text-anchor': 'middle'}, svg,
     `event (op) index — ${D.n_events.toLocaleString()} events, ${D.steps_traced} steps`);
  const areas = el('g', {id: 'ml-areas'}, svg);
  const lower = new Array(D.x.length).fill(0);
  const drawn = [];
  for (const c of D.categories) {
    const ys = D.series[c], upper = lower.map((v, i) => v + ys[i]);
    let d = '';
    for (let i = 0; i < D.x.length; i++) d += (i ? 'L' : 'M') + X(D.x[i]).toFixed(2) + ',' + Y(upper[i]).toFixed(2);
    for (let i = D.x.length - 1; i >= 0; i--) d += 'L' + X(D.x[i]).toFixed(2) + ',' + Y(lower[i]).toFixed(2);
    el('path', {d: d + 'Z', fill: D.colors[c], 'fill-opacity': 0.85, stroke: 'none',
                class: 'ml-area', 'data-category': c}, areas);
    for (let i = 0; i < lower.length; i++) lower[i] = upper[i];
    drawn.push(c);
  }
  for (const ev of D.step_ends) {
    el('line', {x1: X(ev), x2: X(ev), y1: T, y2: H - B, stroke: '#555', 'stroke-dasharray': '4 3',
                class: 'ml-step'}, svg);
  }
  if (D.measured) {
    const y = Y(D.measured.peak_bytes);
    el('line', {id: 'ml-measured', x1: L, x2: W - R, y1: y, y2: y, stroke: '#000', 'stroke-width': 1.2,
                'stroke-dasharray': '7 4', 'data-bytes': D.measured.peak_bytes}, svg);
    el('text', {x: L + 4, y: y - 4}, svg,
       `allocator peak ${D.measured.human} (${D.measured.source})`);
  }
  const px = X(D.peak.event), py = Y(D.peak.bytes);
  el('line', {x1: px, x2: px, y1: py, y2: H - B, stroke: '#000'}, svg);
  const dot = el('circle', {id: 'ml-peak', cx: px, cy: py, r: 6, fill: '#000', stroke: '#fff',
                            'stroke-width': 2, 'data-bytes': D.peak.bytes, cursor: 'pointer'}, svg);
  const label = el('text', {id: 'ml-peak-label', x: px + (px > W / 2 ? -10 : 10), y: Math.max(py - 10, 12),
                            'text-anchor': px > W / 2 ? 'end' : 'start', 'data-bytes': D.peak.bytes}, svg,
                   `peak ${D.peak.human} (${D.peak.bytes.toLocaleString('en-US')} B)`);

  // ---- the peak panel: what is live there -------------------------------------------------
  const panel = document.getElementById('ml-peak-panel');
  h('div', panel, `Live at the peak: event ${D.peak.event}, step ${D.peak.step}, ${D.peak.phase}, ` +
                  `op ${D.peak.op || '-'} in ${D.peak.module || '(no module)'}`).style.fontWeight = 600;
  const pt = h('table', panel), hr = h('tr', pt);
  for (const c of ['bytes', 'category', 'module', 'shape', 'dtype', 'op / name', 'created', 'last used', 'freed'])
    h('th', hr, c);
  for (const r of D.top) {
    const tr = h('tr', pt);
    h('td', tr, r.human, 'num'); h('td', tr, r.category); h('td', tr, r.module || '(no module)');
    h('td', tr, r.shape); h('td', tr, r.dtype); h('td', tr, r.name || r.op);
    h('td', tr, String(r.created), 'num'); h('td', tr, String(r.last_use), 'num');
    h('td', tr, r.freed >= D.n_events ? 'live at end' : String(r.freed), 'num');
  }
  let pinned = location.hash === '#peak';   // report.html#peak opens with the panel pinned
  const show = on => { panel.style.display = (on || pinned) ? 'block' : 'none'; };
  for (const t of [dot, label]) {
    t.addEventListener('mouseenter', () => show(true));
    t.addEventListener('mouseleave', () => show(false));
    t.addEventListener('click', () => { pinned = !pinned; show(pinned); });
  }
  show(false);

  // ---- hover: the breakdown at the nearest drawn event -----------------------------------
  const tip = document.getElementById('ml-tip');
  svg.addEventListener('mousemove', ev => {
    const box = svg.getBoundingClientRect(), mx = (ev.clientX - box.left) * W / box.width;
    if (mx < L || mx > W - R) { tip.style.display = 'none'; return; }
    const target = (mx - L) / (W - L - R) * n;
    let lo = 0, hi = D.x.length - 1;
    while (lo < hi) { const m = (lo + hi) >> 1; if (D.x[m] < target) lo = m + 1; else hi = m; }
    tip.textContent = '';
    let tot = 0;
    for (const c of D.categories) tot += D.series[c][lo];
    h('div', tip, `event ${D.x[lo]}: ${fmt(tot)}`).style.fontWeight = 600;
    for (const c of D.categories.slice().reverse()) if (D.series[c][lo]) h('div', tip, `${c}: ${fmt(D.series[c][lo])}`);
    tip.style.display = 'block';
    tip.style.left = (ev.clientX - box.left + 14) + 'px'; tip.style.top = (ev.clientY - box.top + 14) + 'px';
  });
  svg.addEventListener('mouseleave', () => { tip.style.display = 'none'; });

  // ---- legend, activation bars --------------------------------------------------------
  const legend = document.getElementById('ml-legend');
  for (const c of drawn) { const s = h('span', legend); const i = h('i', s); i.style.background = D.colors[c];
    s.appendChild(document.createTextNode(c)); }
  const acts = document.getElementById('ml-activations');
  const amax = Math.max(1, ...D.activations.by_module.map(r => r[1]));
  for (const [m, b] of D.activations.by_module) {
    const tr = h('tr', acts); h('td', tr, m || '(no module)'); h('td', tr, fmt(b), 'num');
    const bar = h('span', h('td', tr), undefined, 'bar');
    bar.style.width = Math.max(1, 400 * b / amax) + 'px'; bar.style.background = D.colors.activation;
  }
  finish(drawn);
})();
"""
