/* Switchyard console · Overview: polls /ui/api/overview every 2 s while the tab is visible.
   The page is built once; each poll only updates text and chart data. */
import { h } from '../lib/dom.js';
import { DASH, isNum, fmt, dtf, fmtTs, ago, orDash } from '../lib/format.js';
import { api, isAbort } from '../lib/api.js';
import { makeChart } from '../lib/chart.js';
import { card, emptyLine, loadingLine, tile, healthOf, HEALTH_TEXT, HEALTH_BADGE, healthDot, meter, chips, table } from '../lib/components.js';
import { headerExtra } from '../lib/router.js';

export const overview = {
  title: 'Overview',
  subtitle: 'Live traffic over the last 5 minutes',
  mount(root, params, signal) {
    const live = h('span.live', null, h('span.pulse'), h('span', { text: 'Connecting…' }));
    headerExtra.append(live);
    const setLive = (text, paused) => {
      live.lastChild.textContent = text;
      live.classList.toggle('paused', !!paused);
    };

    const T = {
      rps: tile('stat-rps', 'Requests', 'req/s', 'last minute'),
      err: tile('stat-error-rate', 'Error rate', '%', 'last minute'),
      tokens: tile('stat-tokens', 'Throughput', 'tokens/s', 'last minute'),
      reqToday: tile('stat-requests-today', 'Requests today', 'requests', 'UTC day'),
      spend: tile('stat-spend', 'Spend today', '', 'UTC day'),
      p50: tile('stat-p50', 'Latency p50', 'ms', 'request duration'),
      p95: tile('stat-p95', 'Latency p95', 'ms', 'request duration'),
      p99: tile('stat-p99', 'Latency p99', 'ms', 'request duration'),
      ttft: tile('stat-ttft', 'Time to first token', 'ms', 'p50'),
      overhead: tile('stat-overhead', 'Gateway overhead', 'µs', 'p50, own time'),
    };
    const tiles = h('div.tiles', null, Object.values(T).map((t) => t.el));

    // Live gauges shown in the throughput card's header.
    const gauge = (label) => {
      const v = h('b', { text: DASH });
      return { el: h('span.badge', null, `${label}\u00a0`, v), v };
    };
    const G = { inflight: gauge('In flight'), queued: gauge('Queued'), conns: gauge('Connections') };

    const rpsBox = h('div.chart', { 'data-testid': 'chart-rps' });
    const latBox = h('div.chart', { 'data-testid': 'chart-latency' });
    const tokBox = h('div.chart', { 'data-testid': 'chart-tokens' });
    const topModels = h('div', { 'data-testid': 'top-models' }, loadingLine());
    const topKeys = h('div', { 'data-testid': 'top-keys' }, loadingLine());
    const backends = h('div.table-wrap', { 'data-testid': 'backends-table' }, loadingLine());
    const guardBox = h('div.chart', { 'data-testid': 'chart-guardrails' });
    const guardCard = card('Guardrails', { sub: 'verdicts per second' }, h('div.card-body', null, guardBox));
    guardCard.hidden = true;
    const exportsCard = card('Exports', { sub: 'Request-log sinks' });
    exportsCard.hidden = true;
    const exportsBox = h('div.table-wrap', { 'data-testid': 'exports-table' });
    exportsCard.append(h('div.card-body.flush', null, exportsBox));
    const backendsCount = h('span.sub');

    root.replaceChildren(h('div.stack', null,
      tiles,
      h('div.grid-2', null,
        card('Throughput', { actions: [G.inflight.el, G.queued.el, G.conns.el] }, h('div.card-body', null, rpsBox)),
        card('Latency', { sub: 'per 2 s step' }, h('div.card-body', null, latBox))),
      h('div.grid-3', null,
        card('Tokens', { sub: 'per second' }, h('div.card-body', null, tokBox)),
        card('Top models', { sub: 'today' }, h('div.card-body.flush', null, topModels)),
        card('Top keys', { sub: 'today' }, h('div.card-body.flush', null, topKeys))),
      h('section.card', null,
        h('div.card-head', null, h('h2', { text: 'Backends' }), backendsCount,
          h('div.actions', null, h('a.btn.sm', { href: '#/backends', text: 'Details' }))),
        h('div.card-body.flush', null, backends)),
      guardCard,
      exportsCard));

    const charts = {
      rps: makeChart(rpsBox, {
        unit: 'req/s', sync: 'overview',
        axisFmt: (v) => fmt.num(v, 2),
        series: [
          { label: 'Requests', color: '--c1', fill: true, fmt: (v) => `${fmt.num(v, 2)} req/s` },
          { label: 'Errors', color: '--c2', fmt: (v) => `${fmt.num(v, 2)} req/s` },
        ],
      }),
      lat: makeChart(latBox, {
        unit: 'ms', sync: 'overview',
        axisFmt: (v) => fmt.compact(v),
        series: [
          { label: 'p50', color: '--c1', fmt: fmt.ms },
          { label: 'p95', color: '--c3', fmt: fmt.ms },
          { label: 'p99', color: '--c4', fmt: fmt.ms },
          { label: 'TTFT p50', color: '--c5', dash: [5, 4], fmt: fmt.ms },
        ],
      }),
      tok: makeChart(tokBox, {
        unit: 'tokens/s', sync: 'overview',
        series: [{ label: 'Tokens', color: '--c6', fill: true, fmt: (v) => `${fmt.num(v, 1)} tokens/s` }],
      }),
      guard: makeChart(guardBox, {
        unit: 'verdicts/s', sync: 'overview',
        axisFmt: (v) => fmt.num(v, 2),
        series: [
          { label: 'Masked', color: '--c1', fmt: (v) => `${fmt.num(v, 2)}/s` },
          { label: 'Blocked', color: '--c2', fmt: (v) => `${fmt.num(v, 2)}/s` },
          { label: 'Logged', color: '--c5', dash: [5, 4], fmt: (v) => `${fmt.num(v, 2)}/s` },
        ],
      }),
    };

    function update(d) {
      const c = d.current || {};
      const today = d.today || {};
      T.rps.set(fmt.num(c.rps, 2));
      T.err.set(fmt.pctNum(c.error_rate), c.error_rate >= 0.05 ? 'bad' : c.error_rate >= 0.01 ? 'warn' : null);
      T.tokens.set(fmt.compact(c.tokens_per_s));
      T.reqToday.set(fmt.compact(today.requests), null,
        isNum(today.tokens) ? `${fmt.compact(today.tokens)} tokens · UTC day` : 'UTC day');
      T.spend.set(fmt.usd(today.cost_usd));
      T.p50.set(fmt.msNum(c.p50_ms));
      T.p95.set(fmt.msNum(c.p95_ms));
      T.p99.set(fmt.msNum(c.p99_ms));
      T.ttft.set(fmt.msNum(c.ttft_p50_ms));
      T.overhead.set(fmt.num(c.overhead_p50_us, isNum(c.overhead_p50_us) && c.overhead_p50_us < 10 ? 1 : 0));
      G.inflight.v.textContent = fmt.int(c.in_flight);
      G.queued.v.textContent = fmt.int(c.queued);
      G.conns.v.textContent = fmt.int(c.connections);

      const s = d.series || {};
      const t = s.t || [];
      const col = (k) => (Array.isArray(s[k]) ? s[k] : t.map(() => null));
      const rps = col('rps');
      const er = col('error_rate');
      // Errors per second = rate × error fraction (no requests means no errors).
      const errs = rps.map((r, i) => (r == null ? null : er[i] == null ? 0 : r * er[i]));
      charts.rps.set([t, rps, errs], 'No requests yet');
      charts.lat.set([t, col('p50_ms'), col('p95_ms'), col('p99_ms'), col('ttft_p50_ms')], 'No requests in the last 5 minutes');
      charts.tok.set([t, col('tokens_per_s')], 'No tokens in the last 5 minutes');
      // Only where guardrails are configured.
      guardCard.hidden = !d.guardrails;
      if (d.guardrails) {
        charts.guard.set([t, col('guard_masks_per_s'), col('guard_blocks_per_s'), col('guard_logs_per_s')], 'No verdicts in the last 5 minutes');
      }

      renderBackends(d.backends || []);
      renderTop(topModels, d.top_models || [], (m) => m.model, 'No requests today yet.');
      renderTop(topKeys, d.top_keys || [], (k) => k.name || k.key_id, 'No keyed requests today yet.');
      renderExports(d.exports || []);
    }

    function renderBackends(list) {
      backendsCount.textContent = list.length ? `${list.filter((b) => healthOf(b) === 'up').length} of ${list.length} healthy` : '';
      if (!list.length) {
        backends.replaceChildren(emptyLine('No backends configured. Add one to the gateway config to start routing.'));
        return;
      }
      const rows = list.map((b) => {
        const state = healthOf(b);
        const failRate = isNum(b.attempts) && b.attempts > 0 && isNum(b.failures) ? b.failures / b.attempts : null;
        return h('tr', { 'data-backend': b.name, 'data-health': state },
          h('td', null, h('span.health', null, healthDot(state),
            h('span', null, h('div.cell-main.mono', { text: orDash(b.name) }), h('div.cell-sub', { text: orDash(b.kind) })))),
          h('td', null, h('span.badge', { class: HEALTH_BADGE[state], text: HEALTH_TEXT[state] })),
          h('td.num', { text: isNum(b.capacity) ? `${fmt.int(b.in_flight)} / ${fmt.int(b.capacity)}` : fmt.int(b.in_flight) }),
          h('td.num', { text: fmt.int(b.waiting) }),
          h('td.num', null, meter(b.kv_usage)),
          h('td.num', { text: fmt.pct(b.affinity_hit_ratio, 0), title: b.affinity_hit_ratio == null ? 'Cache-aware routing is off' : null }),
          h('td.num', null, h('div', { text: `${fmt.int(b.failures)} / ${fmt.int(b.attempts)}` }),
            h('div.cell-sub', { text: failRate == null ? '' : `${fmt.pct(failRate)} failed` })),
          h('td', null, chips(b.models, 'none')));
      });
      backends.replaceChildren(table([
        { label: 'Backend' }, { label: 'Health' }, { label: 'In flight', num: true }, { label: 'Waiting', num: true },
        { label: 'KV cache', num: true }, { label: 'Affinity hits', num: true }, { label: 'Failures / attempts', num: true },
        { label: 'Models' },
      ], rows));
    }

    function renderTop(box, list, nameOf, emptyText) {
      if (!list.length) { box.replaceChildren(emptyLine(emptyText)); return; }
      const max = Math.max(1, ...list.map((x) => (isNum(x.requests) ? x.requests : 0)));
      box.replaceChildren(h('ol.rank', null, list.map((x) => {
        const share = h('span');
        share.style.width = `${((isNum(x.requests) ? x.requests : 0) / max * 100).toFixed(1)}%`;
        return h('li', { 'data-name': nameOf(x) ?? '' },
          h('div.line', null,
            h('span.name', { text: orDash(nameOf(x)), title: [nameOf(x), x.key_id].filter(Boolean).join(' · ') || null }),
            h('span.count', { text: `${fmt.int(x.requests)} req` })),
          h('div.line', null,
            h('div.share', null, share),
            h('span.figs', { text: `${fmt.compact(x.tokens)} tokens · ${fmt.usd(x.cost_usd)}` })));
      })));
    }

    function renderExports(list) {
      exportsCard.hidden = list.length === 0;
      if (!list.length) { exportsBox.replaceChildren(); return; }
      exportsBox.replaceChildren(table([
        { label: 'Sink' }, { label: 'Delivered', num: true }, { label: 'Failures', num: true },
        { label: 'Dropped', num: true }, { label: 'Last delivery', num: true },
      ], list.map((x) => h('tr', { 'data-sink': x.sink },
        h('td.mono', { text: orDash(x.sink) }),
        h('td.num', { text: fmt.int(x.delivered) }),
        h('td.num', null, h('span', { class: x.failures > 0 ? 'status-code s5' : null, text: fmt.int(x.failures) })),
        h('td.num', null, h('span', { class: x.dropped > 0 ? 'status-code s5' : null, text: fmt.int(x.dropped || 0) })),
        h('td.num', { text: x.last_delivery_ms == null ? 'never' : `${fmtTs(x.last_delivery_ms)} (${ago(x.last_delivery_ms)})` })))));
    }

    // Polling: the next request is scheduled only after the previous one
    // finished, so there is never more than one in flight; hidden tabs stop.
    let timer = null;
    let inflight = false;
    let stopped = false;
    let first = true;
    async function tick() {
      timer = null;
      if (stopped || document.hidden || inflight) return;
      inflight = true;
      try {
        const d = await api('/ui/api/overview', { signal, quiet: !first });
        if (stopped) return;
        first = false;
        update(d);
        setLive(`Live · updated ${dtf.time.format(new Date())}`);
      } catch (e) {
        if (!isAbort(e)) {
          setLive('Reconnecting…', true);
          if (first) {
            // Nothing to show yet: replace the spinners; the next good poll fills everything in.
            Object.values(charts).forEach((c) => c.note('Waiting for the gateway…'));
            for (const box of [topModels, topKeys, backends]) {
              if (box.querySelector('.loading')) box.replaceChildren(emptyLine('Waiting for the gateway…'));
            }
          }
        }
      } finally {
        inflight = false;
        if (!stopped && !document.hidden && !timer) timer = setTimeout(tick, 2000);
      }
    }
    function onVisibility() {
      if (document.hidden) {
        clearTimeout(timer);
        timer = null;
        setLive('Paused while hidden', true);
      } else if (!timer && !inflight) {
        tick();
      }
    }
    document.addEventListener('visibilitychange', onVisibility);
    tick();

    return () => {
      stopped = true;
      clearTimeout(timer);
      document.removeEventListener('visibilitychange', onVisibility);
      Object.values(charts).forEach((c) => c.destroy());
    };
  },
};
