/* Switchyard console · Experiments: every experiment on live traffic (the configuration's and
   the admin API's) — its variants and their shares now, a shadow, a winner or a stopped
   variant — and its results: per variant and metric the count, the mean with its 95% interval,
   and the difference to the control with its own, drawn as interval charts. */
import { h, icon, ICON } from '../lib/dom.js';
import { fmt } from '../lib/format.js';
import { api, isAbort } from '../lib/api.js';
import { card, chips, emptyLine, loadingLine, table } from '../lib/components.js';
import { headerExtra } from '../lib/router.js';

const SVG = 'http://www.w3.org/2000/svg';

function svg(tag, attrs, ...children) {
  const el = document.createElementNS(SVG, tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (k === 'text') el.textContent = v;
    else if (v != null) el.setAttribute(k, String(v));
  }
  children.forEach((c) => c && el.append(c));
  return el;
}

const num = (v) => (Math.abs(v) >= 100 ? fmt.num(v, 0) : fmt.num(v, 3));
const interval = (ci) => (ci ? `[${num(ci[0])}, ${num(ci[1])}]` : '—');

/* One metric's intervals, a row per variant: the mean as a dot, its 95% interval as a bar. */
function intervalChart(metric, rows) {
  const shown = rows.filter((r) => r.m && typeof r.m.mean === 'number');
  if (!shown.length) return null;
  const lo = Math.min(...shown.map((r) => (r.m.ci95 ? r.m.ci95[0] : r.m.mean)));
  const hi = Math.max(...shown.map((r) => (r.m.ci95 ? r.m.ci95[1] : r.m.mean)));
  const span = hi - lo || Math.abs(hi) || 1;
  const [left, width, rowH] = [90, 300, 22];
  const x = (v) => left + ((v - (lo - span * 0.05)) / (span * 1.1)) * width;
  const g = svg('svg', { viewBox: `0 0 ${left + width + 10} ${rowH * shown.length + 18}`, class: 'interval-chart', 'data-testid': `interval-chart-${metric}`, role: 'img', 'aria-label': `${metric}: mean and 95% interval per variant` });
  shown.forEach((r, i) => {
    const y = 12 + i * rowH;
    g.append(svg('text', { x: 4, y: y + 4, class: 'ic-label', text: r.name }));
    if (r.m.ci95) g.append(svg('line', { x1: x(r.m.ci95[0]), x2: x(r.m.ci95[1]), y1: y, y2: y, class: 'ic-bar' }));
    g.append(svg('circle', { cx: x(r.m.mean), cy: y, r: 4, class: 'ic-dot' }));
  });
  g.append(svg('text', { x: left, y: rowH * shown.length + 14, class: 'ic-axis', text: num(lo) }));
  g.append(svg('text', { x: left + width, y: rowH * shown.length + 14, class: 'ic-axis', 'text-anchor': 'end', text: num(hi) }));
  return h('div.interval', null, h('div.interval-title', { text: metric }), g);
}

function resultsBody(r) {
  const names = Object.keys(r.variants || {});
  // The experiment's own metrics (feedback, scores) first, then the usage records'.
  const usage = ['latency', 'ttft', 'errors', 'cost', 'tokens', 'prompt_tokens', 'completion_tokens'];
  const present = new Set(names.flatMap((n) => Object.keys(r.variants[n].metrics || {})));
  const rank = (m) => ((r.metrics || []).includes(m) ? -1 : usage.indexOf(m) === -1 ? usage.length : usage.indexOf(m));
  const metrics = [...present].sort((a, b) => rank(a) - rank(b) || a.localeCompare(b));
  if (!metrics.length) return emptyLine('No results yet: they fill as requests, feedback and scores come.');
  const rows = metrics.flatMap((metric) => names.map((name) => {
    const m = r.variants[name].metrics[metric];
    if (!m) return null;
    const d = m.difference;
    return h('tr', { 'data-testid': 'result-row' },
      h('td', { text: metric }), h('td', { text: name === r.control ? `${name} (control)` : name }),
      h('td.num', { text: fmt.int(m.count) }), h('td.num', { text: num(m.mean) }),
      h('td.num', { text: interval(m.ci95) }),
      h('td.num', { text: d ? `${d.mean >= 0 ? '+' : ''}${num(d.mean)} ${interval(d.ci95)}` : '—' }));
  }));
  const charts = metrics.map((metric) => intervalChart(metric, names.map((name) => ({ name, m: r.variants[name].metrics[metric] }))));
  return h('div.stack', null,
    h('div.intervals', null, charts),
    table([{ label: 'Metric' }, { label: 'Variant' }, { label: 'Count', num: true }, { label: 'Mean', num: true },
      { label: '95% interval', num: true }, { label: 'Difference to control', num: true }], rows));
}

function experimentCard(e, signal) {
  const results = h('div', null, loadingLine());
  const facts = [
    `model ${e.model}`, `unit ${e.unit}`, `${e.allocation} allocation`, e.team ? `team ${e.team}` : null,
    e.shadow ? `shadow ${e.shadow.model} at ${fmt.pct(e.shadow.sample)}` : null, e.source === 'api' ? 'made through the API' : 'in the configuration',
  ].filter(Boolean).join(' · ');
  const variants = chips(e.variants.map((v) => `${v.name}: ${v.model} · ${fmt.pct(v.share)}${v.stopped ? ' · stopped' : ''}`));
  const flags = [
    e.winner ? h('div.note', { 'data-testid': 'winner', text: `Winner: ${e.winner}` }) : null,
    ...e.variants.filter((v) => v.stopped).map((v) => h('div.note.bad', { text: `${v.name} stopped: ${v.stopped}` })),
    e.shadow_stopped ? h('div.note.bad', { text: `shadow stopped: ${e.shadow_stopped}` }) : null,
  ];
  api(`/ui/api/experiments/${encodeURIComponent(e.name)}`, { signal })
    .then((r) => results.replaceChildren(resultsBody(r)))
    .catch((err) => { if (!isAbort(err)) results.replaceChildren(emptyLine('Could not load the results.')); });
  return h('div', { 'data-testid': `experiment-${e.name}` },
    card(e.name, { sub: facts }, h('div.card-body', null, variants, flags, results)));
}

export const experiments = {
  title: 'Experiments',
  subtitle: 'Variants, shadows and scores on live traffic',
  mount(root, params, signal) {
    const refresh = h('button.btn', { type: 'button', onclick: () => load() }, icon(ICON.refresh), 'Refresh');
    headerExtra.append(refresh);
    const body = h('div.stack', { 'data-testid': 'experiments-page' }, loadingLine());
    root.replaceChildren(body);
    async function load() {
      try {
        const d = await api('/ui/api/experiments', { signal });
        body.replaceChildren(...(d.data.length
          ? d.data.map((e) => experimentCard(e, signal))
          : [emptyLine('No experiments: add `experiments:` to the configuration, or POST /admin/experiments.')]));
      } catch (e) {
        if (!isAbort(e)) body.replaceChildren(emptyLine('Could not load the experiments.'));
      }
    }
    load();
  },
};
