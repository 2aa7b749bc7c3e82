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
#ml-notes { color: #555; font-size: 0.9em; } #ml-notes li.warn { color: #a15c00; }
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
#ml-legend span[data-category] { cursor: pointer; user-select: none; }
#ml-legend span.off { opacity: .35; text-decoration: line-through; }
#ml-chart { cursor: crosshair; }
#ml-at-panel { display: none; margin: 6px 0 10px; max-height: 360px; overflow: auto;
  border: 1px solid #d00; padding: 8px; font-size: 12px; }
#ml-at-panel td { white-space: nowrap; }
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

  // ---- the timeline: a view [v0, v1] of events, redrawn on zoom, pan and toggles --------
  // Wheel zooms around the cursor, a drag pans, a double click (or "reset zoom") shows all;
  // a click pins an event: the tensors live there are listed under the chart; a legend
  // entry hides or shows its category. The same functions serve the page's self-test
  // (report.html#selftest), which drives them with real DOM events.
  const W = 1100, H = 380, L = 80, R = 20, T = 30, B = 40;
  const svg = el('svg', {id: 'ml-chart', width: W, height: H, viewBox: `0 0 ${W} ${H}`,
                          role: 'img', 'aria-label': 'live bytes by category over events'});
  document.getElementById('ml-chart-wrap').prepend(svg);
  const n = Math.max(D.n_events - 1, 1);
  const top = Math.max(D.peak.bytes, D.measured ? D.measured.peak_bytes : 0, 1) * 1.08;
  let view = [0, n];
  const hidden = new Set();
  let selected = null;
  const X = ev => L + (W - L - R) * (ev - view[0]) / (view[1] - view[0]);
  const Y = b => H - B - (H - T - B) * b / top;
  const evAt = mx => view[0] + (mx - L) / (W - L - R) * (view[1] - view[0]);
  // the drawn point nearest to x = mx (clicks and hovers snap to what is drawn: a click on
  // the peak's point once selected the event before it, at ~2 events per pixel)
  const nearest = mx => {
    const target = evAt(mx);
    let lo = 0, hi = D.x.length - 1;
    while (lo < hi) { const m = (lo + hi) >> 1; if (D.x[m] < target) lo = m + 1; else hi = m; }
    return lo > 0 && target - D.x[lo - 1] < D.x[lo] - target ? lo - 1 : lo;
  };
  const clip = el('clipPath', {id: 'ml-clip'}, el('defs', {}, svg));
  el('rect', {x: L, y: 0, width: W - L - R, height: H}, clip);
  const axes = el('g', {id: 'ml-axes'}, svg);
  const plot = el('g', {id: 'ml-plot', 'clip-path': 'url(#ml-clip)'}, svg);
  const over = el('g', {id: 'ml-over'}, svg);
  const drawn = D.categories.slice();
  let dot, label;
  function draw() {
    axes.textContent = ''; plot.textContent = ''; over.textContent = '';
    svg.dataset.view = `${Math.round(view[0])},${Math.round(view[1])}`;
    for (const [e0, e1, ph, st] of D.phases) {
      if (e1 < view[0] || e0 > view[1]) continue;
      const r = el('rect', {x: X(e0), y: T, width: Math.max(X(e1) - X(e0), 0.5), height: H - T - B,
                            fill: D.phase_colors[ph] || '#fff', 'data-phase': ph}, plot);
      el('title', {}, r, `${ph} (step ${st}): events ${e0}–${e1 - 1}`);
      const a = Math.max(X(e0), L), b = Math.min(X(e1), W - R);
      if (b - a > 8 * ph.length)   // name the band under the chart where it fits
        el('text', {x: (a + b) / 2, y: H - B + 14, 'text-anchor': 'middle', class: 'ml-phase-name'}, axes, ph);
    }
    for (let i = 0; i <= 4; i++) {   // y grid
      const b = top / 1.08 * i / 4;
      el('line', {x1: L, x2: W - R, y1: Y(b), y2: Y(b), stroke: '#ddd'}, axes);
      el('text', {x: L - 6, y: Y(b) + 4, 'text-anchor': 'end'}, axes, fmt(Math.round(b)));
    }
    const zoomed = view[0] > 0 || view[1] < n;
    el('text', {x: (L + W - R) / 2, y: H - 8, 'text-anchor': 'middle'}, axes,
       `event (op) index — ${zoomed ? `events ${Math.round(view[0])}–${Math.round(view[1])} of ` : ''}` +
       `${D.n_events.toLocaleString()} events, ${D.steps_traced} steps`);
    const areas = el('g', {id: 'ml-areas'}, plot);
    let i0 = 0, i1 = D.x.length - 1;   // the drawn points in view, one more on each side
    while (i0 < i1 && D.x[i0 + 1] < view[0]) i0++;
    while (i1 > i0 && D.x[i1 - 1] > view[1]) i1--;
    const lower = new Array(i1 - i0 + 1).fill(0);
    for (const c of D.categories) {
      if (hidden.has(c)) continue;
      const ys = D.series[c], upper = lower.map((v, k) => v + ys[i0 + k]);
      let d = '';
      for (let k = 0; k < upper.length; k++) d += (k ? 'L' : 'M') + X(D.x[i0 + k]).toFixed(2) + ',' + Y(upper[k]).toFixed(2);
      for (let k = upper.length - 1; k >= 0; k--) d += 'L' + X(D.x[i0 + k]).toFixed(2) + ',' + Y(lower[k]).toFixed(2);
      el('path', {d: d + 'Z', fill: D.colors[c], 'fill-opacity': 0.85, stroke: 'none',
                  class: 'ml-area', 'data-category': c}, areas);
      for (let k = 0; k < lower.length; k++) lower[k] = upper[k];
    }
    for (const ev of D.step_ends)
      el('line', {x1: X(ev), x2: X(ev), y1: T, y2: H - B, stroke: '#555', 'stroke-dasharray': '4 3',
                  class: 'ml-step'}, plot);
    if (D.measured) {
      const y = Y(D.measured.peak_bytes);
      el('line', {id: 'ml-measured', x1: L, x2: W - R, y1: y, y2: y, stroke: '#000', 'stroke-width': 1.2,
                  'stroke-dasharray': '7 4', 'data-bytes': D.measured.peak_bytes}, over);
      el('text', {x: L + 4, y: y - 4}, over, `allocator peak ${D.measured.human} (${D.measured.source})`);
    }
    if (selected !== null && selected >= view[0] && selected <= view[1])
      el('line', {id: 'ml-cursor', x1: X(selected), x2: X(selected), y1: T, y2: H - B,
                  stroke: '#d00', 'stroke-width': 1.5, 'data-event': selected}, over);
    const px = X(D.peak.event), py = Y(D.peak.bytes);
    const inView = D.peak.event >= view[0] && D.peak.event <= view[1];
    if (inView) el('line', {x1: px, x2: px, y1: py, y2: H - B, stroke: '#000'}, over);
    dot = el('circle', {id: 'ml-peak', cx: px, cy: py, r: 6, fill: '#000', stroke: '#fff',
                        'stroke-width': 2, 'data-bytes': D.peak.bytes, cursor: 'pointer',
                        visibility: inView ? 'visible' : 'hidden'}, over);
    label = el('text', {id: 'ml-peak-label', x: px + (px > W / 2 ? -10 : 10), y: Math.max(py - 10, 12),
                        'text-anchor': px > W / 2 ? 'end' : 'start', 'data-bytes': D.peak.bytes,
                        visibility: inView ? 'visible' : 'hidden'}, over,
               `peak ${D.peak.human} (${D.peak.bytes.toLocaleString('en-US')} B)`);
    for (const t of [dot, label]) {
      t.addEventListener('mouseenter', () => show(true));
      t.addEventListener('mouseleave', () => show(false));
      t.addEventListener('click', e => { e.stopPropagation(); pinned = !pinned; show(pinned); });
    }
    const legendSpans = document.querySelectorAll('#ml-legend span[data-category]');
    for (const sp of legendSpans) sp.classList.toggle('off', hidden.has(sp.dataset.category));
    status.dataset.drawn = D.categories.filter(c => !hidden.has(c)).join(',');
  }
  function setView(a, b) {
    const w = Math.max(Math.min(b - a, n), Math.min(10, n));   // at least 10 events wide
    a = Math.max(0, Math.min(a, n - w));
    view = [a, a + w];
    draw();
  }
  svg.addEventListener('wheel', ev => {
    ev.preventDefault();
    const box = svg.getBoundingClientRect(), mx = (ev.clientX - box.left) * W / box.width;
    const c = evAt(Math.min(Math.max(mx, L), W - R)), f = ev.deltaY < 0 ? 0.8 : 1.25;
    setView(c - (c - view[0]) * f, c + (view[1] - c) * f);
  }, {passive: false});
  let drag = null;
  svg.addEventListener('mousedown', ev => { drag = {x: ev.clientX, view: view.slice(), moved: false}; });
  window.addEventListener('mousemove', ev => {
    if (!drag) return;
    const box = svg.getBoundingClientRect(), dx = (ev.clientX - drag.x) * W / box.width;
    if (Math.abs(dx) > 3) drag.moved = true;
    if (!drag.moved) return;
    const de = dx / (W - L - R) * (drag.view[1] - drag.view[0]);
    setView(drag.view[0] - de, drag.view[1] - de);
  });
  window.addEventListener('mouseup', ev => {
    if (drag && !drag.moved && ev.target.closest && ev.target.closest('#ml-chart')) {
      const box = svg.getBoundingClientRect(), mx = (ev.clientX - box.left) * W / box.width;
      if (mx >= L && mx <= W - R) {
        // a click within 4 screen pixels of the peak's marker selects the peak itself (it
        // may fall between drawn points, and a click lands on whole pixels); else the
        // nearest drawn point
        const px = Math.abs(X(D.peak.event) - mx) * box.width / W;
        select(px <= 4 ? D.peak.event : D.x[nearest(mx)]);
      }
    }
    drag = null;
  });
  svg.addEventListener('dblclick', () => setView(0, n));
  document.getElementById('ml-reset').addEventListener('click', () => setView(0, n));

  // ---- the peak panel: what is live there -------------------------------------------------
  const panel = document.getElementById('ml-peak-panel');
  h('div', panel, `Live at the peak: event ${D.peak.event}, step ${D.peak.step}, ${D.peak.phase}, ` +
                  `op ${D.peak.op || '-'} in ${D.peak.module || '(script)'}`).style.fontWeight = 600;
  const pt = h('table', panel), hr = h('tr', pt);
  for (const c of ['bytes', 'category', 'module', 'shape', 'dtype', 'op / name', 'created', 'last used', 'freed'])
    h('th', hr, c);
  for (const r of D.top) {
    const tr = h('tr', pt);
    h('td', tr, r.human, 'num'); h('td', tr, r.category); h('td', tr, r.module || '(script)');
    h('td', tr, r.shape); h('td', tr, r.dtype); h('td', tr, r.name || r.op);
    h('td', tr, String(r.created), 'num'); h('td', tr, String(r.last_use), 'num');
    h('td', tr, r.freed >= D.n_events ? 'live at end' : String(r.freed), 'num');
  }
  let pinned = location.hash === '#peak';   // report.html#peak opens with the panel pinned
  function show(on) { panel.style.display = (on || pinned) ? 'block' : 'none'; }

  // ---- a clicked event: every listed tensor live there, largest first -------------------
  const atPanel = document.getElementById('ml-at-panel');
  function select(ev) {
    selected = Math.max(0, Math.min(ev, n));
    const T_ = D.tensors, rows = [];
    let total = 0;
    for (let i = 0; i < T_.bytes.length; i++)
      if (T_.created[i] <= selected && selected < T_.freed[i] && !hidden.has(T_.category[i])) {
        rows.push(i); total += T_.bytes[i];
      }
    atPanel.textContent = '';
    atPanel.dataset.event = selected; atPanel.dataset.bytes = total; atPanel.dataset.rows = rows.length;
    h('div', atPanel, `Live after event ${selected}: ${rows.length} tensors, ${fmt(total)} ` +
      `(${total.toLocaleString('en-US')} B)` + (T_.complete ? '' :
      `; storages under ${fmt(T_.smallest_bytes)} not listed`)).style.fontWeight = 600;
    const t = h('table', atPanel), head = h('tr', t);
    for (const c of ['bytes', 'category', 'module', 'shape', 'dtype', 'op / name', 'created', 'freed']) h('th', head, c);
    for (const i of rows.slice(0, 30)) {
      const tr = h('tr', t);
      h('td', tr, fmt(T_.bytes[i]), 'num'); h('td', tr, T_.category[i]); h('td', tr, T_.module[i] || '(script)');
      h('td', tr, T_.shape[i]); h('td', tr, T_.dtype[i]); h('td', tr, T_.what[i]);
      h('td', tr, String(T_.created[i]), 'num');
      h('td', tr, T_.freed[i] >= D.n_events ? 'live at end' : String(T_.freed[i]), 'num');
    }
    if (rows.length > 30) h('div', atPanel, `... ${rows.length - 30} more`, 'dim');
    atPanel.style.display = 'block';
    draw();
  }

  // ---- hover: the breakdown, the op and the module at the nearest drawn event ------------
  const tip = document.getElementById('ml-tip');
  svg.addEventListener('mousemove', ev => {
    const box = svg.getBoundingClientRect(), mx = (ev.clientX - box.left) * W / box.width;
    if (mx < L || mx > W - R || (drag && drag.moved)) { tip.style.display = 'none'; return; }
    const lo = nearest(mx);
    tip.textContent = '';
    let tot = 0;
    for (const c of D.categories) if (!hidden.has(c)) tot += D.series[c][lo];
    h('div', tip, `event ${D.x[lo]}: ${fmt(tot)}`).style.fontWeight = 600;
    h('div', tip, `op ${D.x_op[lo] || '(no allocation)'} in ${D.x_module[lo] || '(script)'}`, 'ml-where');
    for (const c of D.categories.slice().reverse())
      if (D.series[c][lo] && !hidden.has(c)) h('div', tip, `${c}: ${fmt(D.series[c][lo])}`);
    tip.style.display = 'block';
    tip.style.left = (ev.clientX - box.left + 14) + 'px'; tip.style.top = (ev.clientY - box.top + 14) + 'px';
  });
  svg.addEventListener('mouseleave', () => { tip.style.display = 'none'; });

  // ---- legend, activation bars --------------------------------------------------------
  const legend = document.getElementById('ml-legend');
  for (const c of drawn) { const s = h('span', legend); const i = h('i', s); i.style.background = D.colors[c];
    s.appendChild(document.createTextNode(c)); s.dataset.category = c; s.title = 'click: hide or show';
    s.addEventListener('click', () => { if (hidden.has(c)) hidden.delete(c); else hidden.add(c); draw(); }); }
  draw();
  show(false);
  const acts = document.getElementById('ml-activations');
  const amax = Math.max(1, ...D.activations.by_module.map(r => r[1]));
  for (const [m, b] of D.activations.by_module) {
    const tr = h('tr', acts); h('td', tr, m || '(script)'); h('td', tr, fmt(b), 'num');
    const bar = h('span', h('td', tr), undefined, 'bar');
    bar.style.width = Math.max(1, 400 * b / amax) + 'px'; bar.style.background = D.colors.activation;
  }
  finish(D.categories.filter(c => !hidden.has(c)));
  if (location.hash === '#selftest') selfTest();

  // ---- report.html#selftest: the interactions above, driven by real DOM events ----------
  // The headless-browser test opens this and reads #ml-selftest's data attributes.
  function selfTest() {
    const out = document.getElementById('ml-selftest'), box = svg.getBoundingClientRect();
    const at = ev => box.left + X(ev) * box.width / W, y = box.top + box.height / 2;
    const mouse = (type, x, target) => (target || svg).dispatchEvent(new MouseEvent(type,
      {clientX: x, clientY: y, bubbles: true, cancelable: true, view: window}));
    try {
      const mid = (view[0] + view[1]) / 2;
      svg.dispatchEvent(new WheelEvent('wheel', {clientX: at(mid), clientY: y, deltaY: -100,
                                                 bubbles: true, cancelable: true}));
      out.dataset.zoomed = svg.dataset.view;
      const before = view[0];
      mouse('mousedown', at(mid)); mouse('mousemove', at(mid) - 200, window);
      mouse('mouseup', at(mid) - 200, window);
      out.dataset.panned = view[0] > before ? 'right' : (view[0] < before ? 'left' : 'no');
      svg.dispatchEvent(new MouseEvent('dblclick', {bubbles: true}));
      out.dataset.reset = svg.dataset.view;
      const first = document.querySelector('#ml-legend span[data-category]');
      first.click();
      out.dataset.hidden = first.dataset.category;
      out.dataset.drawnHidden = status.dataset.drawn;
      out.dataset.areasHidden = document.querySelectorAll('#ml-areas path').length;
      first.click();
      out.dataset.areasShown = document.querySelectorAll('#ml-areas path').length;
      mouse('mousemove', at(D.peak.event));
      out.dataset.tip = tip.querySelector('.ml-where').textContent;
      mouse('mousedown', at(D.peak.event)); mouse('mouseup', at(D.peak.event));
      out.dataset.clicked = atPanel.dataset.event;
      out.dataset.clickedBytes = atPanel.dataset.bytes;
      out.dataset.status = 'ok';
    } catch (e) {
      out.dataset.status = 'error: ' + e;
    }
  }
})();
"""
