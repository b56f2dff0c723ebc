/* Switchyard console · Usage: totals over a range, grouped by key/user/team/model.
   range/by live in the hash (replaceState, so no remount) to be linkable. */
import { h, icon, ICON } from '../lib/dom.js';
import { isNum, fmt, dtf, orDash } from '../lib/format.js';
import { api, isAbort } from '../lib/api.js';
import { makeChart } from '../lib/chart.js';
import { card, emptyLine, loadingLine, tile, meter, table } from '../lib/components.js';
import { replaceHash } from '../lib/router.js';

const RANGES = ['24h', '7d', '30d'];
const BYS = { key: 'Key', user: 'User', team: 'Team', model: 'Model' };
const METRICS = {
  requests: { label: 'Requests', unit: 'requests', fmt: (v) => `${fmt.int(v)} requests`, axis: fmt.compact, color: '--c1' },
  tokens: { label: 'Tokens', unit: 'tokens', fmt: (v) => `${fmt.int(v)} tokens`, axis: fmt.compact, color: '--c6' },
  cost_usd: { label: 'Cost', unit: 'USD', fmt: fmt.usd, axis: (v) => fmt.usd(v), color: '--c3' },
};

export const usage = {
  title: 'Usage',
  subtitle: 'Requests, tokens and spend from the usage rollups',
  mount(root, params, signal) {
    const state = {
      range: RANGES.includes(params.get('range')) ? params.get('range') : '24h',
      by: BYS[params.get('by')] ? params.get('by') : 'key',
      metric: METRICS[params.get('metric')] ? params.get('metric') : 'requests',
    };
    let data = null;
    let chart = null;
    let seq = 0;

    const rangeBtns = RANGES.map((r) => h('button', {
      type: 'button', 'data-range': r, text: { '24h': 'Last 24 hours', '7d': 'Last 7 days', '30d': 'Last 30 days' }[r],
      onclick: () => { state.range = r; sync(); load(); },
    }));
    const bySelect = h('select', { name: 'by', onchange: () => { state.by = bySelect.value; sync(); load(); } },
      Object.entries(BYS).map(([v, l]) => h('option', { value: v, text: l })));
    const csv = h('a.btn', { 'data-testid': 'usage-csv', download: 'usage.csv' }, icon(ICON.download), 'Download CSV');
    const metricBtns = Object.entries(METRICS).map(([k, m]) => h('button', {
      type: 'button', 'data-metric': k, text: m.label,
      onclick: () => { state.metric = k; sync(); drawChart(); },
    }));
    const totals = {
      requests: tile('usage-total-requests', 'Requests', 'requests'),
      tokens: tile('usage-total-tokens', 'Tokens', 'tokens'),
      cost: tile('usage-total-cost', 'Spend', ''),
    };
    const chartBox = h('div.chart', { 'data-testid': 'usage-chart' });
    const chartSub = h('span.sub');
    const tableBox = h('div.table-wrap', { 'data-testid': 'usage-table' }, loadingLine());
    const budgetsBox = h('div', { 'data-testid': 'budgets' }, loadingLine());
    const tableTitle = h('h2');

    root.replaceChildren(h('div.stack', null,
      h('div.row', null,
        h('div.segmented', { role: 'group', 'aria-label': 'Time range' }, rangeBtns),
        h('label.inline-field', null, 'Group by', bySelect),
        h('div.spacer'),
        csv),
      h('div.tiles.three', null, totals.requests.el, totals.tokens.el, totals.cost.el),
      h('div.grid-side', null,
        h('section.card', null,
          h('div.card-head', null, h('h2', { text: 'Over time' }), chartSub,
            h('div.actions', null, h('div.segmented', { role: 'group', 'aria-label': 'Metric' }, metricBtns))),
          h('div.card-body', null, chartBox)),
        card('Budgets', { sub: 'spent against limit', class: 'budgets-card' }, h('div.card-body.flush.scroll', null, budgetsBox))),
      h('section.card', null, h('div.card-head', null, tableTitle), h('div.card-body.flush', null, tableBox))));

    function query() { return `range=${encodeURIComponent(state.range)}&by=${encodeURIComponent(state.by)}`; }
    function sync() {
      for (const b of rangeBtns) b.setAttribute('aria-pressed', String(b.dataset.range === state.range));
      for (const b of metricBtns) b.setAttribute('aria-pressed', String(b.dataset.metric === state.metric));
      bySelect.value = state.by;
      csv.href = `/ui/api/usage.csv?${query()}`;
      csv.setAttribute('download', `switchyard-usage-${state.range}-by-${state.by}.csv`);
      tableTitle.textContent = `By ${BYS[state.by].toLowerCase()}`;
      replaceHash(`#/usage?${query()}${state.metric !== 'requests' ? `&metric=${state.metric}` : ''}`);
    }

    function drawChart() {
      if (!data) return;
      const m = METRICS[state.metric];
      const bucket = data.bucket === 'day' ? 86400 : 3600;
      chartSub.textContent = `${m.unit} per ${data.bucket || 'bucket'}`;
      // Rebuilt (not setData) because the unit, colour and bar width change with the metric/range.
      if (chart) chart.destroy();
      chartBox.replaceChildren();
      chart = makeChart(chartBox, {
        unit: m.unit, bars: bucket, height: 250, axisFmt: m.axis,
        series: [{ label: m.label, color: m.color, fmt: m.fmt }],
      });
      const s = data.series || {};
      const t = s.t || [];
      const key = state.metric;
      chart.set([t, Array.isArray(s[key]) ? s[key] : t.map(() => null)], 'No usage in this range');
    }

    function renderTable(groups) {
      if (!groups.length) { tableBox.replaceChildren(emptyLine('No usage recorded in this range.')); return; }
      const sorted = [...groups].sort((a, b) => (b.cost_usd || 0) - (a.cost_usd || 0) || (b.requests || 0) - (a.requests || 0));
      const totalCost = sorted.reduce((n, g) => n + (g.cost_usd || 0), 0);
      const totalTok = sorted.reduce((n, g) => n + (g.total_tokens || 0), 0);
      const rows = sorted.map((g) => {
        const share = totalCost > 0 ? (g.cost_usd || 0) / totalCost : totalTok > 0 ? (g.total_tokens || 0) / totalTok : null;
        const label = g.label || g.name;
        return h('tr', { 'data-group': g.name ?? '' },
          h('td', null,
            h('div.cell-main', { text: label ? label : '(none)', class: label ? null : 'muted' }),
            g.label && g.name && g.label !== g.name ? h('div.cell-sub.mono', { text: g.name }) : null),
          h('td.num', { text: fmt.int(g.requests) }),
          h('td.num', { text: fmt.int(g.prompt_tokens) }),
          h('td.num', { text: fmt.int(g.completion_tokens) }),
          h('td.num', { text: fmt.int(g.total_tokens) }),
          h('td.num', { text: fmt.usd(g.cost_usd) }),
          h('td.num', null, meter(share, { warnAt: 2, badAt: 2 })));
      });
      tableBox.replaceChildren(table([
        { label: BYS[state.by] }, { label: 'Requests', num: true }, { label: 'Prompt tokens', num: true },
        { label: 'Completion tokens', num: true }, { label: 'Total tokens', num: true }, { label: 'Cost', num: true },
        { label: 'Share', num: true },
      ], rows));
    }

    function renderBudgets(budgets) {
      if (!budgets.length) { budgetsBox.replaceChildren(emptyLine('No key has a budget. Set one on the Keys page.')); return; }
      budgetsBox.replaceChildren(...budgets.map((b) => {
        const ratio = isNum(b.budget_usd) && b.budget_usd > 0 && isNum(b.spent_usd) ? b.spent_usd / b.budget_usd : null;
        const fill = h('span', { class: ratio == null ? null : ratio > 0.9 ? 'over' : ratio > 0.75 ? 'warn' : null });
        fill.style.width = `${Math.min(100, (ratio || 0) * 100).toFixed(1)}%`;
        return h('div.budget', { 'data-key-id': b.key_id, 'data-over': ratio != null && ratio > 0.9 ? 'true' : null },
          h('div.line', null,
            h('span.name', { text: orDash(b.name || b.key_id), title: b.key_id }),
            h('span.figs', { text: `${fmt.usd(b.spent_usd)} of ${fmt.usd(b.budget_usd)} · ${b.period || 'lifetime'}` })),
          h('div.track', { role: 'meter', 'aria-valuemin': 0, 'aria-valuemax': 100, 'aria-valuenow': ratio == null ? null : Math.round(ratio * 100) }, fill),
          h('div.cell-sub', { text: ratio == null ? '' : `${fmt.pct(ratio, 0)} used` }));
      }));
    }

    async function load() {
      const my = ++seq; // ignore answers to superseded selections
      tableBox.replaceChildren(loadingLine());
      try {
        const d = await api(`/ui/api/usage?${query()}`, { signal });
        if (my !== seq) return;
        data = d;
        const s = d.series || {};
        const sum = (arr) => (Array.isArray(arr) ? arr.reduce((n, v) => n + (isNum(v) ? v : 0), 0) : null);
        const from = isNum(d.from_ms) ? dtf.dayHm.format(new Date(d.from_ms)) : null;
        const span = from ? `since ${from}` : '';
        totals.requests.set(fmt.compact(sum(s.requests)), null, span);
        totals.tokens.set(fmt.compact(sum(s.tokens)), null, span);
        totals.cost.set(fmt.usd(sum(s.cost_usd)), null, span);
        drawChart();
        renderTable(d.groups || []);
        renderBudgets(d.budgets || []);
      } catch (e) {
        if (isAbort(e) || my !== seq) return;
        if (!chart) chartBox.replaceChildren(emptyLine('Could not load usage.'));
        tableBox.replaceChildren(emptyLine('Could not load usage.'));
        budgetsBox.replaceChildren(emptyLine('Could not load budgets.'));
      }
    }

    sync();
    load();
    return () => { if (chart) chart.destroy(); };
  },
};
