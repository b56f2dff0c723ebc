/* Switchyard console: the single-page app (hash router, API client, the seven pages). Vanilla ES2020, no build step. */
'use strict';

(() => {
  // ======================================================================
  // DOM helpers. Everything is built with createElement/textContent, never
  // innerHTML, so nothing coming from the API can inject markup.
  // ======================================================================

  /** h('div.card.big', {attr: value, onclick: fn, text: '...'}, ...children) */
  function h(tag, attrs, ...children) {
    const [name, ...classes] = tag.split('.');
    const el = document.createElement(name || 'div');
    if (classes.length) el.className = classes.join(' ');
    let value;
    if (attrs) {
      for (const [k, v] of Object.entries(attrs)) {
        if (v == null || v === false) continue;
        if (k === 'text') el.textContent = v;
        else if (k === 'class') el.classList.add(...String(v).split(/\s+/).filter(Boolean));
        else if (k === 'value') value = v; // set after children: a <select> needs its options first
        else if (k === 'style') Object.assign(el.style, v); // an object, applied through CSSOM: the CSP refuses style="" attributes
        else if (k.startsWith('on') && typeof v === 'function') el.addEventListener(k.slice(2), v);
        else el.setAttribute(k, v === true ? '' : String(v));
      }
    }
    add(el, children);
    if (value !== undefined) el.value = value;
    return el;
  }

  function add(el, children) {
    for (const c of children.flat(Infinity)) {
      if (c == null || c === false) continue;
      el.append(c instanceof Node ? c : String(c));
    }
    return el;
  }

  /** A small stroke icon; the path data is ours, not from the API. */
  function icon(d) {
    const ns = 'http://www.w3.org/2000/svg';
    const svg = document.createElementNS(ns, 'svg');
    svg.setAttribute('viewBox', '0 0 24 24');
    svg.setAttribute('aria-hidden', 'true');
    svg.setAttribute('class', 'icon');
    const p = document.createElementNS(ns, 'path');
    p.setAttribute('d', d);
    svg.append(p);
    return svg;
  }
  const ICON = {
    refresh: 'M20 11a8 8 0 1 0-2.3 5.7M20 4v7h-7',
    download: 'M12 3v12M7 10l5 5 5-5M4 21h16',
    copy: 'M9 9h11v11H9zM5 15H4V4h11v1',
    close: 'M6 6l12 12M18 6L6 18',
    warn: 'M12 3l10 18H2zM12 10v5M12 18h.01',
  };

  const $ = (sel, root = document) => root.querySelector(sel);

  // ======================================================================
  // Formatting. Missing values (null/undefined/NaN) always render as "—".
  // ======================================================================
  const DASH = '—';
  const isNum = (v) => typeof v === 'number' && Number.isFinite(v);
  const nfCache = new Map();
  function nf(opts) {
    const key = JSON.stringify(opts);
    if (!nfCache.has(key)) nfCache.set(key, new Intl.NumberFormat(undefined, opts));
    return nfCache.get(key);
  }
  const fmt = {
    int: (v) => (isNum(v) ? nf({ maximumFractionDigits: 0 }).format(v) : DASH),
    num: (v, d = 1) => (isNum(v) ? nf({ maximumFractionDigits: d }).format(v) : DASH),
    // Big counts in tiles and charts: 456.8K.
    compact: (v) => (isNum(v) ? (Math.abs(v) < 10000 ? nf({ maximumFractionDigits: 1 }).format(v)
      : nf({ notation: 'compact', maximumFractionDigits: 1 }).format(v)) : DASH),
    // Milliseconds: one decimal below 10 ms, whole numbers above.
    msNum: (v) => (isNum(v) ? nf({ maximumFractionDigits: Math.abs(v) < 10 ? 1 : 0 }).format(v) : DASH),
    // Durations: ms, switching to seconds from 10 s so columns stay narrow.
    ms: (v) => (!isNum(v) ? DASH : Math.abs(v) >= 10000 ? `${nf({ maximumFractionDigits: 1 }).format(v / 1000)} s` : `${fmt.msNum(v)} ms`),
    pctNum: (v, d) => (isNum(v) ? nf({ maximumFractionDigits: d ?? (v !== 0 && Math.abs(v) < 0.1 ? 2 : 1) }).format(v * 100) : DASH),
    pct: (v, d) => (isNum(v) ? fmt.pctNum(v, d) + '%' : DASH),
    // Dollars: cents normally, more precision for tiny per-request costs.
    usd: (v) => {
      if (!isNum(v)) return DASH;
      const small = v !== 0 && Math.abs(v) < 1;
      return nf({ style: 'currency', currency: 'USD', minimumFractionDigits: 2, maximumFractionDigits: small ? 4 : 2 }).format(v);
    },
  };
  const dtf = {
    time: new Intl.DateTimeFormat(undefined, { hour: '2-digit', minute: '2-digit', second: '2-digit' }),
    dayTime: new Intl.DateTimeFormat(undefined, { month: 'short', day: 'numeric', hour: '2-digit', minute: '2-digit', second: '2-digit' }),
    full: new Intl.DateTimeFormat(undefined, { year: 'numeric', month: 'short', day: 'numeric', hour: '2-digit', minute: '2-digit', second: '2-digit', timeZoneName: 'short' }),
    date: new Intl.DateTimeFormat(undefined, { year: 'numeric', month: 'short', day: 'numeric' }),
    monthDay: new Intl.DateTimeFormat(undefined, { month: 'short', day: 'numeric' }),
    dayHm: new Intl.DateTimeFormat(undefined, { month: 'short', day: 'numeric', hour: 'numeric', minute: '2-digit' }),
  };
  /** Local time; the date is only added when it is not today. */
  function fmtTs(ms) {
    if (!isNum(ms)) return DASH;
    const d = new Date(ms);
    return d.toDateString() === new Date().toDateString() ? dtf.time.format(d) : dtf.dayTime.format(d);
  }
  function fmtFull(ms) { return isNum(ms) ? dtf.full.format(new Date(ms)) : DASH; }
  /** RFC 3339 string (or null) to a local date; the year only when it is not this year. */
  function fmtIsoDate(s) {
    const t = s ? Date.parse(s) : NaN;
    if (!Number.isFinite(t)) return DASH;
    const d = new Date(t);
    return (d.getFullYear() === new Date().getFullYear() ? dtf.monthDay : dtf.date).format(d);
  }
  function ago(ms) {
    if (!isNum(ms)) return DASH;
    const s = Math.max(0, Math.round((Date.now() - ms) / 1000));
    if (s < 60) return `${s} s ago`;
    if (s < 3600) return `${Math.round(s / 60)} min ago`;
    if (s < 86400) return `${Math.round(s / 3600)} h ago`;
    return `${Math.round(s / 86400)} d ago`;
  }
  const orDash = (v) => (v == null || v === '' ? DASH : String(v));

  // ======================================================================
  // Error banner and progress line.
  // ======================================================================
  const banner = $('[data-testid=error-banner]');
  $('button', banner).addEventListener('click', () => { banner.hidden = true; });
  function showError(msg) {
    $('.msg', banner).textContent = msg;
    banner.hidden = false;
  }
  function clearError() { banner.hidden = true; }

  let busy = 0;
  const progress = $('#progress');
  function setBusy(delta) {
    busy = Math.max(0, busy + delta);
    progress.classList.toggle('on', busy > 0);
  }

  // ======================================================================
  // API client.
  // - 401 anywhere: the session expired, go to the login page.
  // - Any other failure: show the banner (and throw, so callers can also
  //   show it inline). Any success hides the banner again.
  // - Mutations carry the CSRF header the gateway demands.
  // ======================================================================
  class ApiError extends Error {
    constructor(message, status) { super(message); this.status = status; }
  }

  async function errorMessage(res) {
    let text = '';
    try {
      text = await res.text();
      const body = JSON.parse(text);
      if (body && body.error) {
        if (typeof body.error === 'string') return body.error;
        if (body.error.message) return body.error.message;
      }
    } catch (_) { /* not JSON: fall through */ }
    const short = text && text.length < 200 ? `: ${text.trim()}` : '';
    return `Request failed (${res.status}${res.statusText ? ' ' + res.statusText : ''})${short}`;
  }

  async function api(path, { method = 'GET', body, signal, quiet = false, raw = false } = {}) {
    const headers = { accept: raw ? 'text/event-stream' : 'application/json' };
    if (method !== 'GET') {
      headers['content-type'] = 'application/json';
      headers['x-switchyard-console'] = '1';
    }
    const init = { method, headers, signal, credentials: 'same-origin', cache: 'no-store' };
    if (body !== undefined) init.body = JSON.stringify(body);
    if (!quiet) setBusy(1);
    try {
      let res;
      try {
        res = await fetch(path, init);
      } catch (e) {
        if (e.name === 'AbortError') throw e;
        const msg = `Could not reach the gateway (${e.message || 'network error'}).`;
        showError(msg);
        throw new ApiError(msg, 0);
      }
      if (res.status === 401) {
        location.href = '/ui/login';
        throw new ApiError('Session expired', 401);
      }
      if (!res.ok) {
        const msg = await errorMessage(res);
        showError(msg);
        throw new ApiError(msg, res.status);
      }
      clearError();
      if (raw) return res;
      if (res.status === 204) return null;
      return await res.json();
    } finally {
      if (!quiet) setBusy(-1);
    }
  }
  const isAbort = (e) => e && e.name === 'AbortError';

  // ======================================================================
  // Charts: a thin wrapper over uPlot that sizes to its container, follows
  // the theme colours and updates in place with setData().
  // ======================================================================
  const css = (name) => getComputedStyle(document.documentElement).getPropertyValue(name).trim();
  function alpha(color, a) {
    const m = /^#([0-9a-f]{6})$/i.exec(color);
    if (!m) return color;
    const n = parseInt(m[1], 16);
    return `rgba(${n >> 16}, ${(n >> 8) & 255}, ${n & 255}, ${a})`;
  }

  // X-axis labels in local time; granularity follows uPlot's chosen tick increment (seconds).
  const axisDtf = {
    day: new Intl.DateTimeFormat(undefined, { month: 'short', day: 'numeric' }),
    hm: new Intl.DateTimeFormat(undefined, { hour: 'numeric', minute: '2-digit' }),
    hms: new Intl.DateTimeFormat(undefined, { hour: 'numeric', minute: '2-digit', second: '2-digit' }),
  };
  function timeTicks(u, splits, axisIdx, space, incr) {
    const f = incr >= 86400 ? axisDtf.day : incr >= 60 ? axisDtf.hm : axisDtf.hms;
    return splits.map((s) => (s == null ? '' : f.format(new Date(s * 1000))));
  }

  /**
   * spec: { unit: axis label, axisFmt(v) -> string, height, bars: bucket seconds (bar chart),
   *         series: [{label, color, fmt(v) -> legend text, fill, dash, width}], sync: cursor sync key }
   * returns { set(data, emptyText), destroy() }
   */
  function makeChart(container, spec) {
    const grid = css('--grid');
    const axisColor = css('--axis');
    const font = `11px ${css('--sans') || 'system-ui'}`;
    const overlay = h('div.chart-empty', { text: 'Loading…' });
    container.append(overlay);

    const axisFmt = spec.axisFmt || ((v) => fmt.compact(v));
    const series = [{
      label: 'Time',
      value: (u, v) => (v == null ? DASH : fmtTs(v * 1000)),
    }];
    for (const s of spec.series) {
      const color = css(s.color) || s.color;
      const cfg = {
        label: s.label,
        stroke: color,
        width: s.width || 1.6,
        spanGaps: false,
        points: { show: false },
        value: (u, v) => (v == null ? DASH : s.fmt(v)),
      };
      if (s.dash) cfg.dash = s.dash;
      if (s.fill) cfg.fill = alpha(color, 0.12);
      if (spec.bars) {
        cfg.paths = uPlot.paths.bars({ size: [0.7, 48], gap: 2 });
        cfg.fill = alpha(color, 0.75);
        cfg.width = 0;
        cfg.points = { show: false };
      }
      series.push(cfg);
    }

    const opts = {
      width: Math.max(200, container.clientWidth),
      height: spec.height || 220,
      series,
      legend: { live: true },
      cursor: {
        drag: { x: false, y: false }, // no zoom: these are live, fixed-window charts
        y: false, // vertical crosshair only
        points: { size: 6 },
        sync: spec.sync ? { key: spec.sync } : undefined,
      },
      scales: {
        x: spec.bars
          ? { time: true, range: (u, min, max) => (min == null ? [0, 1] : [min - spec.bars / 2, max + spec.bars / 2]) }
          : { time: true },
        // Always start at zero; leave a little headroom; a flat 0..1 when there is no data.
        y: { range: (u, min, max) => [0, isNum(max) && max > 0 ? max * 1.12 : 1] },
      },
      axes: [
        // space: at least 90 px per time label, so "12:02:20 PM" labels never overlap.
        { stroke: axisColor, font, values: timeTicks, space: 90, grid: { stroke: grid, width: 1 }, ticks: { stroke: grid, width: 1, size: 4 } },
        {
          stroke: axisColor, font, labelFont: font, label: spec.unit, labelSize: 16, labelGap: 2,
          size: 52, gap: 4,
          grid: { stroke: grid, width: 1 }, ticks: { show: false },
          values: (u, vals) => vals.map(axisFmt),
        },
      ],
      hooks: {
        // Outside the plot the legend only names the series (values appear on hover).
        setLegend: [(u) => {
          const legend = u.root.querySelector('.u-legend');
          if (legend) legend.classList.toggle('idle', u.cursor.idx == null);
        }],
      },
    };
    const empty = [[], ...spec.series.map(() => [])];
    const plot = new uPlot(opts, empty, container);
    const legendEl = plot.root.querySelector('.u-legend');
    if (legendEl) legendEl.classList.add('idle');

    // Follow the container's width (sidebar layouts, window resizes).
    let lastW = 0;
    const ro = new ResizeObserver(() => {
      const w = Math.floor(container.clientWidth);
      if (w > 0 && w !== lastW) {
        lastW = w;
        plot.setSize({ width: w, height: opts.height });
      }
    });
    ro.observe(container);

    return {
      set(data, emptyText) {
        plot.setData(data);
        const hasValue = data.slice(1).some((col) => col.some((v) => v != null));
        overlay.hidden = hasValue;
        overlay.textContent = emptyText || 'No data';
      },
      /** Replace the overlay text while no data has arrived (e.g. the first load failed). */
      note(text) { if (!overlay.hidden) overlay.textContent = text; },
      destroy() { ro.disconnect(); plot.destroy(); },
    };
  }

  // ======================================================================
  // Small view components shared by pages.
  // ======================================================================
  function card(title, opts = {}, ...body) {
    return h('section.card', { class: opts.class, 'data-testid': opts.testid },
      title != null ? h('div.card-head', null,
        h('h2', { text: title }),
        opts.sub ? h('span.sub', { text: opts.sub }) : null,
        opts.actions ? h('div.actions', null, opts.actions) : null) : null,
      ...body);
  }
  function emptyLine(text) { return h('div.empty', { text }); }
  function loadingLine(text = 'Loading…') { return h('div.loading', { text }); }

  /** A tile: label, big value with unit, footnote. Returns the element and an updater. */
  function tile(testid, label, unit, foot) {
    const value = h('span', { text: DASH });
    const unitEl = h('span.unit', { text: unit, hidden: true }); // shown once there is a value
    const valueBox = h('div.value', null, value, unitEl);
    const footEl = h('div.foot', { text: foot || '' });
    const el = h('div.card.tile', { 'data-testid': testid }, h('div.label', { text: label }), valueBox, footEl);
    return {
      el,
      set(text, state, footText) {
        value.textContent = text;
        unitEl.hidden = text === DASH;
        valueBox.classList.toggle('bad', state === 'bad');
        valueBox.classList.toggle('warn', state === 'warn');
        if (footText !== undefined) footEl.textContent = footText;
      },
    };
  }

  /** Backend health: "up", "down" or "breaker" (open breaker wins over up). */
  function healthOf(b) {
    if (b && b.breaker_open) return 'breaker';
    if (b && b.up && isNum(b.cooling_ms) && b.cooling_ms > 0) return 'cooling';
    return b && b.up ? 'up' : 'down';
  }
  const HEALTH_TEXT = { up: 'Up', down: 'Down', breaker: 'Breaker open', cooling: 'Cooling down (asked to wait)' };
  const HEALTH_BADGE = { up: 'ok', down: 'bad', breaker: 'warn', cooling: 'warn' };
  function healthDot(state) {
    return h('span.dot', { class: state, title: HEALTH_TEXT[state], 'aria-label': HEALTH_TEXT[state] });
  }

  /** Fraction 0..1 as a small bar + percentage. */
  function meter(frac, { warnAt = 0.75, badAt = 0.9 } = {}) {
    if (!isNum(frac)) return h('span.muted', { text: DASH });
    const pct = Math.max(0, Math.min(1, frac));
    const cls = frac >= badAt ? 'bad' : frac >= warnAt ? 'warn' : '';
    const fill = h('span', { class: cls });
    fill.style.width = `${(pct * 100).toFixed(1)}%`;
    return h('span.meter', null, h('span.bar', null, fill), h('span.num', { text: fmt.pct(frac, 0) }));
  }

  function chips(list, emptyText = DASH) {
    if (!Array.isArray(list) || list.length === 0) return h('span.muted', { text: emptyText });
    return h('div.chips', null, list.map((m) => h('span.chip', { text: String(m) })));
  }

  function statusClass(code) {
    if (!isNum(code)) return '';
    if (code >= 500) return 's5';
    if (code >= 400) return 's4';
    if (code >= 200 && code < 300) return 's2';
    return '';
  }

  /** Build a <table class=data>; columns: [{label, num, width}] and rows of <tr>.
   *  With widths the table uses fixed layout so long values truncate instead of widening the page. */
  function table(columns, rows) {
    const fixed = columns.some((c) => c.width);
    return h('table.data', { class: fixed ? 'fixed' : null },
      fixed ? h('colgroup', null, columns.map((c) => h('col', { style: c.width ? { width: c.width } : null }))) : null,
      h('thead', null, h('tr', null, columns.map((c) => h('th', { class: c.num ? 'num' : null, text: c.label, scope: 'col' })))),
      h('tbody', null, rows));
  }

  // ======================================================================
  // Router: #/page?query. Each page mounts into #view and may return a
  // cleanup function; a per-page AbortController cancels its fetches.
  // ======================================================================
  const view = $('#view');
  const headerExtra = $('#header-extra');
  const pages = {};
  let current = null;

  /** Go to a hash now (pushState + mount in the same task), so no stale rows linger after a submit. */
  function navigate(hash) {
    if (hash !== location.hash) history.pushState(null, '', hash);
    route(true);
  }
  /** Record page state in the hash without remounting (usage range/group). */
  function replaceHash(hash) {
    history.replaceState(null, '', hash);
    mountedHash = location.hash;
  }

  function parseHash() {
    const raw = location.hash.replace(/^#\/?/, '');
    const q = raw.indexOf('?');
    const name = (q >= 0 ? raw.slice(0, q) : raw) || 'overview';
    const params = new URLSearchParams(q >= 0 ? raw.slice(q + 1) : '');
    return { name, params };
  }

  let mountedHash = null;

  /** Mount the page for the current hash; a hashchange + popstate pair for one navigation mounts once. */
  function route(force) {
    if (force !== true && location.hash === mountedHash) return;
    mountedHash = location.hash;
    const { name, params } = parseHash();
    const page = pages[name];
    if (!page) { mountedHash = null; location.replace('#/overview'); return; }
    if (current) {
      current.ctl.abort();
      if (current.cleanup) { try { current.cleanup(); } catch (e) { console.error(e); } }
    }
    for (const a of document.querySelectorAll('.nav a')) {
      if (a.dataset.page === name) a.setAttribute('aria-current', 'page');
      else a.removeAttribute('aria-current');
    }
    $('#page-title').textContent = page.title;
    $('#page-subtitle').textContent = page.subtitle || '';
    document.title = `${page.title} · Switchyard`;
    headerExtra.replaceChildren();
    view.replaceChildren(loadingLine());
    const ctl = new AbortController();
    current = { name, ctl, cleanup: null };
    current.cleanup = page.mount(view, params, ctl.signal) || null;
  }

  // ======================================================================
  // Overview: polls /ui/api/overview every 2 s while the tab is visible.
  // The page is built once; each poll only updates text and chart data.
  // ======================================================================
  pages.overview = {
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

  // ======================================================================
  // Usage: totals over a range, grouped by key/user/team/model.
  // range/by live in the hash (replaceState, so no remount) to be linkable.
  // ======================================================================
  const RANGES = ['24h', '7d', '30d'];
  const BYS = { key: 'Key', user: 'User', team: 'Team', model: 'Model' };
  const METRICS = {
    requests: { label: 'Requests', unit: 'requests', fmt: (v) => `${fmt.int(v)} requests`, axis: fmt.compact, color: '--c1' },
    tokens: { label: 'Tokens', unit: 'tokens', fmt: (v) => `${fmt.int(v)} tokens`, axis: fmt.compact, color: '--c6' },
    cost_usd: { label: 'Cost', unit: 'USD', fmt: fmt.usd, axis: (v) => fmt.usd(v), color: '--c3' },
  };

  pages.usage = {
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

  // ======================================================================
  // Requests: filterable request log with cursor paging and a detail drawer.
  // Filters live in the hash (#/requests?model=x&status=error).
  // ======================================================================
  const FILTERS = ['id', 'key_id', 'team', 'model', 'status', 'from', 'to'];
  const STATUS_OPTIONS = [['', 'Any status'], ['2xx', '2xx success'], ['4xx', '4xx client error'], ['5xx', '5xx server error'], ['error', 'Any error (≥ 400)']];

  /** unix ms <-> the value of an <input type=datetime-local> (local time). */
  function msToLocalInput(ms) {
    if (!isNum(ms)) return '';
    const d = new Date(ms);
    const p = (n) => String(n).padStart(2, '0');
    return `${d.getFullYear()}-${p(d.getMonth() + 1)}-${p(d.getDate())}T${p(d.getHours())}:${p(d.getMinutes())}`;
  }
  function localInputToMs(s) {
    const t = s ? new Date(s).getTime() : NaN;
    return Number.isFinite(t) ? t : null;
  }

  pages.requests = {
    title: 'Requests',
    subtitle: 'The request log, newest first',
    mount(root, params, signal) {
      const filters = {};
      for (const f of FILTERS) filters[f] = params.get(f) || '';

      const statusOpts = [...STATUS_OPTIONS];
      if (filters.status && !statusOpts.some(([v]) => v === filters.status)) statusOpts.push([filters.status, `Status ${filters.status}`]);
      const field = (label, input) => h('label.field', null, label, input);
      const form = h('form', { 'data-testid': 'request-filters', class: 'filters-wrap', autocomplete: 'off' },
        field('Request ID', h('input', { name: 'id', value: filters.id, placeholder: 'req_…', spellcheck: 'false' })),
        field('Key ID', h('input', { name: 'key_id', value: filters.key_id, placeholder: 'k_…', spellcheck: 'false' })),
        field('Team', h('input', { name: 'team', value: filters.team })),
        field('Model', h('input', { name: 'model', value: filters.model, placeholder: 'served model' })),
        field('Status', h('select', { name: 'status', value: filters.status }, statusOpts.map(([v, l]) => h('option', { value: v, text: l })))),
        field('From', h('input', { name: 'from', type: 'datetime-local', value: msToLocalInput(Number(filters.from) || null) })),
        field('To', h('input', { name: 'to', type: 'datetime-local', value: msToLocalInput(Number(filters.to) || null) })),
        h('div.row.nowrap', null,
          h('button.btn.primary', { type: 'submit', text: 'Apply' }),
          h('button.btn', { type: 'button', text: 'Reset', onclick: () => navigate('#/requests') })));

      form.addEventListener('submit', (ev) => {
        ev.preventDefault();
        const q = new URLSearchParams();
        const fd = new FormData(form);
        for (const f of FILTERS) {
          let v = String(fd.get(f) || '').trim();
          if (f === 'from' || f === 'to') v = v ? String(localInputToMs(v) ?? '') : '';
          if (v) q.set(f, v);
        }
        const next = `#/requests${q.toString() ? `?${q}` : ''}`;
        navigate(next); // same filters: reloads anyway
      });

      const tableBox = h('div.table-wrap', { 'data-testid': 'requests-table' }, loadingLine());
      const count = h('span');
      const older = h('button.btn', { type: 'button', 'data-testid': 'requests-next', text: 'Older', hidden: true });
      const activeFilters = FILTERS.filter((f) => filters[f]).length;
      const pager = h('div.pager', { hidden: true }, count, older);

      root.replaceChildren(h('div.stack', null,
        card(null, {}, h('div.card-body', null, form)),
        h('section.card', null,
          h('div.card-head', null, h('h2', { text: 'Requests' }),
            h('span.sub', { text: activeFilters ? `${activeFilters} filter${activeFilters > 1 ? 's' : ''} applied` : 'all requests' })),
          h('div.card-body.flush', null, tableBox),
          pager)));

      const rows = [];
      let tbody = null;
      let next = null;
      let drawer = null;

      function baseQuery() {
        const q = new URLSearchParams();
        for (const f of FILTERS) if (filters[f]) q.set(f, filters[f]);
        q.set('limit', '50');
        return q;
      }

      function rowFor(r) {
        const keyLabel = r.key_name || r.key_id;
        // "requested → served" when an alias or fallback changed the model.
        const req = r.model_requested;
        const served = r.model_served;
        const model = req && served && req !== served ? `${req} → ${served}` : (served || req);
        const tr = h('tr.clickable', { 'data-request-id': r.id, tabindex: '0' },
          h('td', { title: fmtFull(r.ts_ms) }, h('div', { text: isNum(r.ts_ms) ? dtf.time.format(new Date(r.ts_ms)) : DASH }),
            isNum(r.ts_ms) && new Date(r.ts_ms).toDateString() !== new Date().toDateString() ? h('div.cell-sub', { text: dtf.date.format(new Date(r.ts_ms)) }) : null),
          h('td.mono', { text: orDash(r.id), title: r.id }),
          h('td', { title: [r.key_name, r.key_id].filter(Boolean).join(' · ') || null },
            h('div.cell-main', { text: keyLabel ? keyLabel : 'no key', class: keyLabel ? null : 'muted' }),
            r.key_name && r.key_id ? h('div.cell-sub.mono', { text: r.key_id }) : null),
          h('td', { title: model || null },
            h('div', { text: orDash(model) }),
            req && !served ? h('div.cell-sub', { text: 'not served' }) : null),
          h('td.mono', { text: orDash(r.backend), title: r.backend || null }),
          h('td.num', null, h('span.status-code', { class: statusClass(r.status), text: orDash(r.status) })),
          h('td.num', { text: `${fmt.int(r.prompt_tokens)} / ${fmt.int(r.completion_tokens)}`, title: 'prompt / completion tokens' }),
          h('td.num', { text: fmt.ms(r.latency_ms) }),
          h('td.num', { text: fmt.ms(r.ttft_ms) }),
          h('td.muted', { text: orDash(r.route), title: r.route || null }));
        const open = () => openDetail(r, tr);
        tr.addEventListener('click', open);
        tr.addEventListener('keydown', (e) => { if (e.key === 'Enter' || e.key === ' ') { e.preventDefault(); open(); } });
        return tr;
      }

      function renderRows(newRows) {
        if (!rows.length) {
          tableBox.replaceChildren(emptyLine(activeFilters ? 'No requests match these filters.' : 'No requests logged yet. Send one from the Playground.'));
          return;
        }
        if (!tbody) {
          const t = table([
            { label: 'Time', width: '110px' }, { label: 'Request ID', width: '104px' }, { label: 'Key', width: '112px' },
            { label: 'Model', width: '15.5%' }, { label: 'Backend', width: '100px' }, { label: 'Status', num: true, width: '58px' },
            { label: 'Tokens in/out', num: true, width: '100px' }, { label: 'Latency', num: true, width: '80px' },
            { label: 'TTFT', num: true, width: '80px' }, { label: 'Route' },
          ], []);
          t.classList.add('compact');
          tbody = t.tBodies[0];
          tableBox.replaceChildren(t);
        }
        add(tbody, newRows.map(rowFor));
      }

      async function load(before) {
        const q = baseQuery();
        if (before) q.set('before', before);
        older.disabled = true;
        try {
          const d = await api(`/ui/api/requests?${q}`, { signal });
          const page = Array.isArray(d.data) ? d.data : [];
          rows.push(...page);
          next = d.next || null;
          renderRows(page);
          count.textContent = rows.length ? `Showing ${fmt.int(rows.length)} request${rows.length === 1 ? '' : 's'}${next ? '' : ' · end of log'}` : '';
          older.hidden = !next;
          pager.hidden = !rows.length && !next;
        } catch (e) {
          if (isAbort(e)) return;
          if (!rows.length) tableBox.replaceChildren(emptyLine('Could not load requests.'));
        } finally {
          older.disabled = false;
        }
      }
      older.addEventListener('click', () => { if (next) load(next); });

      // ---- Detail drawer ----
      function closeDetail() {
        if (!drawer) return;
        drawer.remove();
        drawer = null;
        for (const tr of tableBox.querySelectorAll('tr.selected')) tr.classList.remove('selected');
        document.removeEventListener('keydown', onKey);
      }
      function onKey(e) { if (e.key === 'Escape') closeDetail(); }
      /** The request's kept bodies (console.store_bodies), fetched when the detail opens. */
      function bodiesOf(id) {
        const box = h('div.bodies', { 'data-testid': 'request-bodies' }, loadingLine('Loading bodies…'));
        const pretty = (text) => {
          try { return JSON.stringify(JSON.parse(text), null, 2); } catch (_) { return text; }
        };
        api(`/ui/api/requests/bodies?id=${encodeURIComponent(id)}`, { signal, quiet: true })
          .then((b) => box.replaceChildren(
            h('h3', { text: 'Request body' }), h('pre.body-text', { 'data-testid': 'request-body', text: pretty(b.request) }),
            h('h3', { text: 'Response body' }), h('pre.body-text', { 'data-testid': 'response-body', text: pretty(b.response) }),
            b.truncated ? h('div.cell-sub', { text: 'Cut at the configured size (console.max_stored_body_bytes).' }) : null,
            h('div.cell-sub', { text: 'Secrets are redacted before bodies are stored.' })))
          .catch((e) => { if (!isAbort(e)) box.replaceChildren(emptyLine('Could not load the bodies.')); });
        return box;
      }

      function openDetail(r, tr) {
        closeDetail();
        tr.classList.add('selected');
        const fields = [
          ['Request ID', r.id, 'mono'], ['Time', fmtFull(r.ts_ms)], ['Status', r.status],
          ['Key', r.key_name ? `${r.key_name} (${r.key_id ?? DASH})` : r.key_id, 'mono'], ['User', r.user], ['Team', r.team],
          ['Model requested', r.model_requested, 'mono'], ['Model served', r.model_served, 'mono'], ['Backend', r.backend, 'mono'],
          ['Prompt tokens', fmt.int(r.prompt_tokens)], ['Completion tokens', fmt.int(r.completion_tokens)], ['Total tokens', fmt.int(r.total_tokens)],
          ['Latency', fmt.ms(r.latency_ms)], ['Time to first token', fmt.ms(r.ttft_ms)],
          ['Cost', fmt.usd(r.cost_usd) + (r.estimated ? ' (estimated)' : '')], ['Estimated', r.estimated == null ? null : r.estimated ? 'yes' : 'no'],
          ['Route', r.route], ['Tool', r.tool == null ? null : typeof r.tool === 'object' ? JSON.stringify(r.tool) : r.tool, 'mono'],
          ['Response bytes', r.response_bytes == null ? null : fmt.int(r.response_bytes)],
        ];
        // Any field the server adds later is shown too.
        const known = new Set(['id', 'ts_ms', 'status', 'key_id', 'key_name', 'user', 'team', 'model_requested', 'model_served', 'backend',
          'prompt_tokens', 'completion_tokens', 'total_tokens', 'latency_ms', 'ttft_ms', 'cost_usd', 'estimated', 'route', 'tool',
          'response_bytes', 'has_bodies']);
        for (const [k, v] of Object.entries(r)) {
          if (!known.has(k)) fields.push([k, v == null ? null : typeof v === 'object' ? JSON.stringify(v) : v, 'mono']);
        }
        const dl = h('dl.kv', null, fields.map(([k, v, cls]) => [h('dt', { text: k }), h('dd', { text: orDash(v), class: v == null || v === '' ? 'muted' : cls })]));
        const closeBtn = h('button.btn.ghost.sm', { type: 'button', 'aria-label': 'Close', onclick: closeDetail }, icon(ICON.close));
        drawer = h('div', null,
          h('div.drawer-backdrop', { onclick: closeDetail }),
          h('aside.drawer', { 'data-testid': 'request-detail', role: 'dialog', 'aria-label': 'Request detail' },
            h('header', null, h('h2', { text: 'Request detail' }),
              h('span.status-code', { class: statusClass(r.status), text: orDash(r.status) }), closeBtn),
            h('div.body', null, dl, r.has_bodies ? bodiesOf(r.id) : null)));
        document.body.append(drawer);
        document.addEventListener('keydown', onKey);
        closeBtn.focus();
      }

      load(null);
      return closeDetail;
    },
  };

  // ======================================================================
  // Keys: create (secret shown once), edit limits inline, revoke/reinstate.
  // ======================================================================
  const PERIODS = ['none', 'daily', 'weekly', 'monthly'];

  function keyStatus(k) {
    if (k.revoked_at) return 'revoked';
    const exp = k.expires_at ? Date.parse(k.expires_at) : NaN;
    if (Number.isFinite(exp) && exp <= Date.now()) return 'expired';
    return 'active';
  }
  const splitList = (s) => String(s || '').split(',').map((x) => x.trim()).filter(Boolean);
  /** Parse a numeric form field: '' -> null, bad input -> NaN (reported to the user). */
  function numField(v, integer) {
    const s = String(v ?? '').trim();
    if (!s) return null;
    const n = Number(s);
    if (!Number.isFinite(n) || n < 0 || (integer && !Number.isInteger(n))) return NaN;
    return n;
  }

  pages.keys = {
    title: 'Keys',
    subtitle: 'Virtual API keys, their limits and budgets',
    mount(root, params, signal) {
      const createError = h('span.form-error', { role: 'alert' });
      const createBtn = h('button.btn.primary', { type: 'submit', text: 'Create key' });
      const periodSelect = (name, value) => h('select', { name, value }, PERIODS.map((p) => h('option', { value: p, text: p === 'none' ? 'No period (lifetime)' : p[0].toUpperCase() + p.slice(1) })));
      const field = (label, input, cls, hint) => h('label.field', { class: cls }, h('span', null, label, hint ? h('span.hint', { text: ` · ${hint}` }) : null), input);
      const form = h('form', { 'data-testid': 'key-create', autocomplete: 'off' },
        h('div.form-grid', null,
          field('Name', h('input', { name: 'name', placeholder: 'e.g. ci-bot', spellcheck: 'false' }), 'span-2'),
          field('Models', h('input', { name: 'models', placeholder: 'llama-3.1-8b, fast', spellcheck: 'false' }), 'span-2', 'comma separated, blank = all'),
          field('User', h('input', { name: 'user' })),
          field('Team', h('input', { name: 'team' })),
          field('Requests / min', h('input', { name: 'rpm', type: 'number', min: '0', step: '1', inputmode: 'numeric' })),
          field('Tokens / min', h('input', { name: 'tpm', type: 'number', min: '0', step: '1', inputmode: 'numeric' })),
          field('Max parallel', h('input', { name: 'max_parallel', type: 'number', min: '0', step: '1', inputmode: 'numeric' })),
          field('Budget', h('input', { name: 'budget_usd', type: 'number', min: '0', step: '0.01', placeholder: 'USD' })),
          field('Budget period', periodSelect('budget_period', 'none'), 'span-2')),
        h('div.form-actions', null, createBtn, createError));

      const secretBox = h('div');
      const tableBox = h('div.table-wrap', { 'data-testid': 'keys-table' }, loadingLine());
      const countEl = h('span.sub');

      root.replaceChildren(h('div.stack', null,
        card('Create a key', { sub: 'the secret is shown once' }, h('div.card-body', null, form)),
        secretBox,
        h('section.card', null, h('div.card-head', null, h('h2', { text: 'Keys' }), countEl), h('div.card-body.flush', null, tableBox))));

      form.addEventListener('submit', async (ev) => {
        ev.preventDefault();
        createError.textContent = '';
        const fd = new FormData(form);
        const body = {};
        const name = String(fd.get('name') || '').trim();
        if (name) body.name = name;
        const models = splitList(fd.get('models'));
        if (models.length) body.models = models;
        for (const [k, integer] of [['rpm', true], ['tpm', true], ['max_parallel', true], ['budget_usd', false]]) {
          const n = numField(fd.get(k), integer);
          if (Number.isNaN(n)) { createError.textContent = `${k} must be a ${integer ? 'whole ' : ''}number ≥ 0.`; return; }
          if (n != null) body[k] = n;
        }
        const period = fd.get('budget_period');
        if (period && period !== 'none') body.budget_period = period;
        const meta = {};
        for (const k of ['user', 'team']) { const v = String(fd.get(k) || '').trim(); if (v) meta[k] = v; }
        if (Object.keys(meta).length) body.metadata = meta;

        createBtn.disabled = true;
        try {
          const k = await api('/ui/api/keys', { method: 'POST', body, signal });
          form.reset();
          showSecret(k);
          load();
        } catch (e) {
          if (!isAbort(e)) createError.textContent = e.message;
        } finally {
          createBtn.disabled = false;
        }
      });

      function showSecret(k) {
        const secret = k && k.key ? String(k.key) : '';
        const code = h('code', { text: secret });
        const copyBtn = h('button.btn.sm', { type: 'button', 'data-action': 'copy' }, icon(ICON.copy), 'Copy');
        copyBtn.addEventListener('click', async () => {
          let ok = false;
          try { await navigator.clipboard.writeText(secret); ok = true; } catch (_) {
            // Clipboard API needs a secure context; fall back to selecting the text.
            const range = document.createRange();
            range.selectNodeContents(code);
            const sel = getSelection();
            sel.removeAllRanges();
            sel.addRange(range);
            try { ok = document.execCommand('copy'); } catch (_) { ok = false; }
          }
          copyBtn.lastChild.textContent = ok ? 'Copied' : 'Press Ctrl+C';
        });
        secretBox.replaceChildren(h('div.secret', { 'data-testid': 'key-secret', role: 'status' },
          h('div.title', null, icon(ICON.warn), `Key “${k && k.name ? k.name : k && k.id ? k.id : 'new key'}” created: copy the secret now`),
          h('div.value-row', null, code, copyBtn,
            h('button.btn.sm.ghost', { type: 'button', text: 'Done', onclick: () => secretBox.replaceChildren() })),
          h('div.note', { text: 'This secret is shown once. The gateway stores only a hash, so it cannot be displayed again.' })));
      }

      let keys = [];
      let editing = null; // id of the key whose edit row is open

      function limitsText(k) {
        const parts = [];
        if (isNum(k.rpm)) parts.push(`${fmt.compact(k.rpm)} req/min`);
        if (isNum(k.tpm)) parts.push(`${fmt.compact(k.tpm)} tok/min`);
        if (isNum(k.max_parallel)) parts.push(`${fmt.int(k.max_parallel)} parallel`);
        return parts;
      }

      function render() {
        countEl.textContent = keys.length ? `${keys.filter((k) => keyStatus(k) === 'active').length} active of ${keys.length}` : '';
        if (!keys.length) { tableBox.replaceChildren(emptyLine('No keys yet. Create one above to let clients call the gateway.')); return; }
        // The actions column fits "Edit" + "Confirm revoke" without clipping.
        const cols = [{ label: 'Name', width: '150px' }, { label: 'Status', width: '104px' }, { label: 'Models' }, { label: 'Limits', width: '116px' },
          { label: 'Budget', num: true, width: '86px' }, { label: 'Owner', width: '92px' }, { label: 'Created', width: '110px' }, { label: '', width: '210px' }];
        const rows = [];
        for (const k of keys) {
          const st = keyStatus(k);
          const meta = k.metadata || {};
          const limits = limitsText(k);
          const actions = h('td.actions');
          if (st !== 'revoked') {
            actions.append(h('button.btn.sm', { type: 'button', 'data-action': 'edit', text: editing === k.id ? 'Close' : 'Edit', onclick: () => { editing = editing === k.id ? null : k.id; render(); } }));
            actions.append(revokeButton(k));
          } else {
            actions.append(h('button.btn.sm', { type: 'button', 'data-action': 'reinstate', text: 'Reinstate', onclick: (e) => mutate(e.currentTarget, `/ui/api/keys/${encodeURIComponent(k.id)}`, 'PATCH', { revoked: false }) }));
          }
          const tags = Array.isArray(meta.tags) ? meta.tags.join(', ') : '';
          rows.push(h('tr', { 'data-key-id': k.id, class: st === 'revoked' ? 'revoked' : null },
            h('td', { title: [k.name, k.id].filter(Boolean).join(' · ') },
              h('div.cell-main', { text: k.name ? k.name : '(unnamed)', class: k.name ? null : 'muted' }), h('div.cell-sub.mono', { text: orDash(k.id) })),
            h('td.wrap', null, h('span.badge', { 'data-testid': 'key-status', class: { active: 'ok', revoked: 'bad', expired: 'warn' }[st], text: st }),
              k.revoked_at ? h('div.cell-sub', { text: fmtIsoDate(k.revoked_at) })
                : k.expires_at ? h('div.cell-sub', { text: `${st === 'expired' ? 'since' : 'until'} ${fmtIsoDate(k.expires_at)}` }) : null),
            h('td.wrap', null, chips(k.models, 'all models')),
            h('td.wrap', { class: limits.length ? null : 'muted' }, limits.length ? limits.map((l) => h('div', { text: l })) : 'no limits'),
            h('td.num', null,
              h('div', { text: isNum(k.budget_usd) ? fmt.usd(k.budget_usd) : DASH }),
              isNum(k.budget_usd) ? h('div.cell-sub', { text: k.budget_period || 'lifetime' }) : null),
            h('td', { title: [meta.user, meta.team, tags].filter(Boolean).join(' · ') || null },
              h('div', { text: meta.user || meta.team ? (meta.user || meta.team) : DASH, class: meta.user || meta.team ? null : 'muted' }),
              meta.user && meta.team ? h('div.cell-sub', { text: meta.team }) : null,
              tags ? h('div.cell-sub', { text: tags }) : null),
            h('td', { text: fmtIsoDate(k.created_at), title: k.created_at ? fmtFull(Date.parse(k.created_at)) : null }),
            actions));
          if (editing === k.id) rows.push(editRow(k, cols.length));
        }
        tableBox.replaceChildren(table(cols, rows));
      }

      // Revoke needs two clicks (no native confirm()); it disarms after a few seconds.
      // The armed key lives outside the button so a table re-render keeps it.
      let armed = null;
      let armTimer = null;
      function revokeButton(k) {
        const isArmed = armed === k.id;
        const btn = h('button.btn.sm.danger', { type: 'button', 'data-action': 'revoke', class: isArmed ? 'confirm' : null, text: isArmed ? 'Confirm revoke' : 'Revoke' });
        btn.addEventListener('click', () => {
          clearTimeout(armTimer);
          if (armed !== k.id) {
            armed = k.id;
            btn.textContent = 'Confirm revoke';
            btn.classList.add('confirm');
            armTimer = setTimeout(() => { armed = null; render(); }, 6000);
            return;
          }
          armed = null;
          mutate(btn, `/ui/api/keys/${encodeURIComponent(k.id)}`, 'DELETE');
        });
        return btn;
      }

      function editRow(k, span) {
        const err = h('span.form-error', { role: 'alert' });
        const f = (label, input) => h('label.field', null, label, input);
        const initial = {
          models: (k.models || []).join(', '), rpm: k.rpm ?? '', tpm: k.tpm ?? '', max_parallel: k.max_parallel ?? '',
          budget_usd: k.budget_usd ?? '', budget_period: k.budget_period || 'none',
        };
        const save = h('button.btn.primary.sm', { type: 'submit', text: 'Save' });
        const form = h('form', { 'data-testid': 'key-edit', autocomplete: 'off' },
          h('div.edit-grid', null,
            f('Models', h('input', { name: 'models', value: initial.models, placeholder: 'all models (comma separated)' })),
            f('Requests / min', h('input', { name: 'rpm', type: 'number', min: '0', step: '1', value: initial.rpm })),
            f('Tokens / min', h('input', { name: 'tpm', type: 'number', min: '0', step: '1', value: initial.tpm })),
            f('Max parallel', h('input', { name: 'max_parallel', type: 'number', min: '0', step: '1', value: initial.max_parallel })),
            f('Budget (USD)', h('input', { name: 'budget_usd', type: 'number', min: '0', step: '0.01', value: initial.budget_usd })),
            f('Budget period', h('select', { name: 'budget_period', value: initial.budget_period },
              PERIODS.map((p) => h('option', { value: p, text: p === 'none' ? 'lifetime' : p })))),
            h('div.row.nowrap', null, save,
              h('button.btn.sm', { type: 'button', text: 'Cancel', onclick: () => { editing = null; render(); } }))),
          err);
        form.addEventListener('submit', async (ev) => {
          ev.preventDefault();
          err.textContent = '';
          const fd = new FormData(form);
          // Send only what changed; a cleared field is sent as null (limit removed).
          const body = {};
          const models = String(fd.get('models') || '');
          if (splitList(models).join(',') !== splitList(initial.models).join(',')) body.models = splitList(models);
          for (const [key, integer] of [['rpm', true], ['tpm', true], ['max_parallel', true], ['budget_usd', false]]) {
            const n = numField(fd.get(key), integer);
            if (Number.isNaN(n)) { err.textContent = `${key} must be a ${integer ? 'whole ' : ''}number ≥ 0.`; return; }
            if (String(n ?? '') !== String(initial[key])) body[key] = n;
          }
          const period = String(fd.get('budget_period') || 'none');
          if (period !== initial.budget_period) body.budget_period = period === 'none' ? null : period;
          if (!Object.keys(body).length) { editing = null; render(); return; }
          save.disabled = true;
          try {
            const updated = await api(`/ui/api/keys/${encodeURIComponent(k.id)}`, { method: 'PATCH', body, signal });
            editing = null;
            replaceKey(updated);
            load();
          } catch (e) {
            if (!isAbort(e)) err.textContent = e.message;
            save.disabled = false;
          }
        });
        return h('tr.edit-row', { 'data-edit-for': k.id }, h('td', { colspan: span }, form));
      }

      function replaceKey(updated) {
        if (!updated || !updated.id) return;
        const i = keys.findIndex((x) => x.id === updated.id);
        if (i >= 0) keys[i] = updated;
        render();
      }

      async function mutate(btn, path, method, body) {
        btn.disabled = true;
        try {
          const updated = await api(path, { method, body, signal });
          replaceKey(updated);
          load();
        } catch (e) {
          btn.disabled = false;
        }
      }

      async function load() {
        try {
          const d = await api('/ui/api/keys', { signal });
          keys = Array.isArray(d.data) ? d.data : [];
          render();
        } catch (e) {
          if (!isAbort(e) && !keys.length) tableBox.replaceChildren(emptyLine('Could not load keys.'));
        }
      }
      load();
      return () => clearTimeout(armTimer);
    },
  };

  // ======================================================================
  // Backends: one card per backend with a 5-minute health strip.
  // ======================================================================
  pages.backends = {
    title: 'Backends',
    subtitle: 'Health, load and routing of the upstream servers',
    mount(root, params, signal) {
      const refresh = h('button.btn', { type: 'button', onclick: () => load() }, icon(ICON.refresh), 'Refresh');
      const strategy = h('span.badge.info', { hidden: true });
      headerExtra.append(strategy, refresh);
      const list = h('div', { 'data-testid': 'backends-list' }, loadingLine());
      const models = h('div.table-wrap', { 'data-testid': 'models-table' }, loadingLine());
      root.replaceChildren(h('div.stack', null, list,
        card('Models', { sub: 'which backends serve each model, and its aliases' }, h('div.card-body.flush', null, models))));

      function strip(history) {
        if (!Array.isArray(history) || !history.length) return h('div.strip-empty', { text: 'No health history yet' });
        const cells = history.map((p) => {
          const st = healthOf(p);
          return h('span', { class: st === 'up' ? null : st, title: `${fmtTs(isNum(p.t) ? p.t * 1000 : null)} · ${HEALTH_TEXT[st]} · ${fmt.int(p.in_flight)} in flight` });
        });
        const first = history[0].t;
        return [h('div.strip', { role: 'img', 'aria-label': 'Health over the last 5 minutes' }, cells),
          h('div.strip-axis', null, h('span', { text: isNum(first) ? ago(first * 1000) : '' }), h('span', { text: 'now' }))];
      }

      function fact(k, v) { return h('div.fact', null, h('div.k', { text: k }), h('div.v', null, v)); }

      function backendCard(b) {
        const st = healthOf(b);
        const failRate = isNum(b.attempts) && b.attempts > 0 && isNum(b.failures) ? b.failures / b.attempts : null;
        return h('section.card.backend-card', { 'data-backend': b.name, 'data-health': st },
          h('div.card-head', null, healthDot(st), h('h2', { text: orDash(b.name) }),
            b.kind ? h('span.badge', { text: b.kind }) : null,
            h('div.actions', null, h('span.badge', { class: HEALTH_BADGE[st], text: HEALTH_TEXT[st] }))),
          h('div.card-body', null,
            h('div.url', { text: orDash(b.url), title: b.url || null }),
            h('div.strip-box', null, strip(b.history)),
            h('div.facts', null,
              fact('In flight', isNum(b.capacity) ? `${fmt.int(b.in_flight)} / ${fmt.int(b.capacity)}` : fmt.int(b.in_flight)),
              fact('Waiting', fmt.int(b.waiting)),
              fact('KV cache', meter(b.kv_usage)),
              fact('Affinity hits', b.affinity_hit_ratio == null ? h('span.muted', { text: 'off', title: 'Cache-aware routing is off' }) : fmt.pct(b.affinity_hit_ratio, 0)),
              fact('Attempts', fmt.int(b.attempts)),
              fact('Failures', h('span', null, fmt.int(b.failures), failRate == null ? null : h('span.cell-sub', { text: ` ${fmt.pct(failRate)}` })))),
            h('div.models', null, h('span.k', { text: 'Models' }), chips(b.models, 'none'))));
      }

      async function load() {
        refresh.disabled = true;
        try {
          const d = await api('/ui/api/backends', { signal });
          const bs = Array.isArray(d.backends) ? d.backends : [];
          const strat = d.routing && d.routing.strategy;
          strategy.hidden = !strat;
          strategy.textContent = strat ? `Routing: ${strat}` : '';
          list.replaceChildren(bs.length
            ? h('div.backend-cards', null, bs.map(backendCard))
            : card(null, {}, emptyLine('No backends configured. Add one to the gateway config to start routing.')));
          const ms = Array.isArray(d.models) ? d.models : [];
          models.replaceChildren(ms.length
            ? table([{ label: 'Model' }, { label: 'Backends' }, { label: 'Aliases' }],
              ms.map((m) => h('tr', { 'data-model': m.model },
                h('td.mono.cell-main', { text: orDash(m.model) }), h('td', null, chips(m.backends, 'none')), h('td', null, chips(m.aliases, 'none')))))
            : emptyLine('No models are served yet.'));
        } catch (e) {
          if (isAbort(e)) return;
          if (list.querySelector('.loading')) list.replaceChildren(card(null, {}, emptyLine('Could not load backends.')));
          if (models.querySelector('.loading')) models.replaceChildren(emptyLine('Could not load models.'));
        } finally {
          refresh.disabled = false;
        }
      }
      load();
    },
  };

  // ======================================================================
  // MCP: the tool servers behind /mcp, their tools and the tool-call log.
  // The log is the request log filtered to model "mcp:{server}" (indexed).
  // ======================================================================
  pages.mcp = {
    title: 'MCP',
    subtitle: 'Tool servers behind the MCP gateway, their tools and calls',
    mount(root, params, signal) {
      const refresh = h('button.btn', { type: 'button', onclick: () => load() }, icon(ICON.refresh), 'Refresh');
      const codeMode = h('span.badge.info', { hidden: true, text: 'Code Mode on' });
      headerExtra.append(codeMode, refresh);
      const list = h('div', { 'data-testid': 'mcp-servers' }, loadingLine());
      const serverPick = h('select', { 'aria-label': 'Server', 'data-testid': 'mcp-log-server', onchange: () => loadCalls() });
      const calls = h('div.table-wrap', { 'data-testid': 'mcp-calls' }, loadingLine());
      const logCard = card('Tool calls', { sub: 'newest first, from the request log', actions: serverPick }, h('div.card-body.flush', null, calls));
      logCard.hidden = true;
      root.replaceChildren(h('div.stack', null, list, logCard));

      function fact(k, v) { return h('div.fact', null, h('div.k', { text: k }), h('div.v', null, v)); }

      function callsText(byStatus) {
        const entries = Object.entries(byStatus || {});
        const total = entries.reduce((n, [, c]) => n + c, 0);
        const failed = entries.filter(([st]) => st !== 'ok').reduce((n, [, c]) => n + c, 0);
        return h('span', { title: entries.map(([st, c]) => `${st}: ${c}`).join(' · ') || null },
          fmt.int(total), failed ? h('span.cell-sub', { text: ` ${fmt.int(failed)} failed` }) : null);
      }

      function serverCard(s) {
        const state = s.breaker_open ? 'breaker' : s.error ? 'down' : 'up';
        const stateText = s.breaker_open ? 'Breaker open' : s.error ? 'Unavailable' : 'Up';
        const tools = Array.isArray(s.tools) ? s.tools : [];
        return h('section.card.backend-card', { 'data-mcp-server': s.name, 'data-health': state },
          h('div.card-head', null, healthDot(state), h('h2', { text: orDash(s.name) }),
            h('span.badge', { text: s.transport }),
            h('div.actions', null, h('span.badge', { class: HEALTH_BADGE[state], text: stateText }))),
          h('div.card-body', null,
            h('div.url', { text: orDash(s.target), title: s.target || null }),
            s.error ? h('div.empty', { text: `Could not list tools: ${s.error}` }) : null,
            h('div.facts', null,
              fact('Tools', fmt.int(tools.length)),
              fact('Calls', fmt.int(s.calls)),
              fact('Failed', fmt.int(s.failed_calls))),
            tools.length
              ? h('div.table-wrap', null, table(
                [{ label: 'Tool', width: '32%' }, { label: 'Description' }, { label: 'Calls', num: true, width: '120px' }],
                tools.map((t) => h('tr', { 'data-tool': t.aggregated },
                  h('td', { title: t.aggregated }, h('div.mono.cell-main', { text: orDash(t.name) }), h('div.cell-sub.mono', { text: t.aggregated })),
                  h('td.muted', { text: orDash(t.description), title: t.description || null }),
                  h('td.num', null, callsText(t.calls))))))
              : null));
      }

      async function loadCalls() {
        const server = serverPick.value;
        if (!server) return;
        calls.replaceChildren(loadingLine());
        try {
          const q = new URLSearchParams({ model: `mcp:${server}`, limit: '50' });
          const d = await api(`/ui/api/requests?${q}`, { signal });
          const rows = Array.isArray(d.data) ? d.data : [];
          calls.replaceChildren(rows.length
            ? table([{ label: 'Time', width: '130px' }, { label: 'Tool' }, { label: 'Key', width: '140px' },
              { label: 'Status', num: true, width: '70px' }, { label: 'Latency', num: true, width: '90px' },
              { label: 'Bytes', num: true, width: '90px' }, { label: 'Request ID', width: '120px' }],
            rows.map((r) => h('tr', { 'data-request-id': r.id },
              h('td', { text: fmtTs(r.ts_ms), title: fmtFull(r.ts_ms) }),
              h('td.mono', { text: orDash(r.tool), title: r.tool || null }),
              h('td', { text: r.key_name || r.key_id || 'no key', class: r.key_id ? null : 'muted' }),
              h('td.num', null, h('span.status-code', { class: statusClass(r.status), text: orDash(r.status) })),
              h('td.num', { text: fmt.ms(r.latency_ms) }),
              h('td.num', { text: fmt.int(r.response_bytes) }),
              h('td.mono', null, h('a', { href: `#/requests?id=${encodeURIComponent(r.id)}`, text: r.id, title: r.id })))))
            : emptyLine(`No tool calls to ${server} logged yet.`));
        } catch (e) {
          if (!isAbort(e)) calls.replaceChildren(emptyLine('Could not load the tool-call log.'));
        }
      }

      async function load() {
        refresh.disabled = true;
        try {
          const d = await api('/ui/api/mcp', { signal });
          codeMode.hidden = !d.code_mode;
          const servers = Array.isArray(d.servers) ? d.servers : [];
          if (!d.enabled || !servers.length) {
            list.replaceChildren(card(null, {}, emptyLine('The MCP gateway is off. Name tool servers under mcp.servers in the config to serve them at /mcp.')));
            logCard.hidden = true;
            return;
          }
          list.replaceChildren(h('div.backend-cards', null, servers.map(serverCard)));
          const picked = serverPick.value || params.get('server') || servers[0].name;
          serverPick.replaceChildren(...servers.map((s) => h('option', { value: s.name, text: s.name, selected: s.name === picked })));
          logCard.hidden = false;
          await loadCalls();
        } catch (e) {
          if (isAbort(e)) return;
          if (list.querySelector('.loading')) list.replaceChildren(card(null, {}, emptyLine('Could not load the MCP gateway.')));
        } finally {
          refresh.disabled = false;
        }
      }
      load();
    },
  };

  // ======================================================================
  // Playground: streams a chat completion through the gateway.
  // ======================================================================
  pages.playground = {
    title: 'Playground',
    subtitle: 'Try a model through the gateway, streamed',
    mount(root, params, signal) {
      const modelSel = h('select', { name: 'model' }, h('option', { value: '', text: 'Loading models…' }));
      const system = h('textarea', { name: 'system', rows: '3', placeholder: 'Optional system prompt' });
      const prompt = h('textarea', { name: 'prompt', rows: '8', placeholder: 'Ask something…', required: true });
      const temp = h('input', { name: 'temperature', type: 'number', min: '0', max: '2', step: '0.1', placeholder: 'default' });
      const maxTok = h('input', { name: 'max_tokens', type: 'number', min: '1', step: '1', placeholder: 'default' });
      const send = h('button.btn.primary', { type: 'submit', 'data-testid': 'send', text: 'Send' });
      const stop = h('button.btn', { type: 'button', 'data-testid': 'stop', text: 'Stop', hidden: true });
      const field = (label, input) => h('label.field', null, label, input);
      const form = h('form', { autocomplete: 'off' },
        field('Model', modelSel),
        field('System', system),
        field('Prompt', prompt),
        h('div.two', null, field('Temperature', temp), field('Max tokens', maxTok)),
        h('div.row', null, send, stop, h('span.muted.small', null, h('span.kbd', { text: 'Ctrl' }), ' + ', h('span.kbd', { text: 'Enter' }), ' to send')));

      const answer = h('div.answer.placeholder', { 'data-testid': 'answer', 'aria-live': 'polite', text: 'The answer streams here.' });
      const stat = (label) => { const b = h('b', { text: DASH }); return { el: h('span', null, `${label} `, b), b }; };
      const S = { ttft: stat('TTFT'), total: stat('Total'), tin: stat('Tokens in'), tout: stat('out'), rate: stat('Speed'), model: stat('Served by') };
      const stats = h('div.answer-stats', { 'data-testid': 'answer-stats' }, Object.values(S).map((s) => s.el));
      const statusBadge = h('span.badge', { hidden: true });

      root.replaceChildren(h('div.play', null,
        card('Request', {}, h('div.card-body', null, form)),
        h('section.card', null,
          h('div.card-head', null, h('h2', { text: 'Answer' }), h('div.actions', null, statusBadge)),
          h('div.card-body.flush', null, answer), stats)));

      prompt.addEventListener('keydown', (e) => {
        if (e.key === 'Enter' && (e.ctrlKey || e.metaKey)) { e.preventDefault(); form.requestSubmit(); }
      });

      let streamCtl = null;
      const setStatus = (text, cls) => {
        statusBadge.hidden = !text;
        statusBadge.textContent = text || '';
        statusBadge.className = `badge ${cls || ''}`;
      };

      async function loadModels() {
        try {
          const d = await api('/ui/api/models', { signal });
          const ids = (Array.isArray(d.data) ? d.data : []).map((m) => m && m.id).filter(Boolean);
          if (!ids.length) {
            modelSel.replaceChildren(h('option', { value: '', text: 'No models available' }));
            send.disabled = true;
            return;
          }
          modelSel.replaceChildren(...ids.map((id) => h('option', { value: id, text: id })));
        } catch (e) {
          if (!isAbort(e)) modelSel.replaceChildren(h('option', { value: '', text: 'Could not load models' }));
        }
      }

      form.addEventListener('submit', async (ev) => {
        ev.preventDefault();
        if (streamCtl) return;
        const model = modelSel.value;
        const text = prompt.value.trim();
        if (!model || !text) { (model ? prompt : modelSel).focus(); return; }
        const messages = [];
        if (system.value.trim()) messages.push({ role: 'system', content: system.value });
        messages.push({ role: 'user', content: prompt.value });
        const body = { model, messages, stream: true, stream_options: { include_usage: true } };
        const t = numField(temp.value, false);
        if (isNum(t)) body.temperature = t;
        const mt = numField(maxTok.value, true);
        if (isNum(mt)) body.max_tokens = mt;

        // Reset the output; text goes into one Text node we append to.
        const textNode = document.createTextNode('');
        const caret = h('span.caret');
        answer.classList.remove('placeholder');
        answer.replaceChildren(textNode, caret);
        for (const s of Object.values(S)) s.b.textContent = DASH;
        setStatus('Streaming…', 'info');
        send.disabled = true;
        stop.hidden = false;

        streamCtl = new AbortController();
        const onLeave = () => streamCtl && streamCtl.abort();
        signal.addEventListener('abort', onLeave);
        const started = performance.now();
        let firstAt = null;
        let served = null;
        let usage = null;
        let finish = null;
        const showTimes = () => {
          const total = performance.now() - started;
          S.total.b.textContent = fmt.ms(total);
          if (usage && isNum(usage.completion_tokens) && firstAt != null) {
            const genS = (total - (firstAt - started)) / 1000;
            S.rate.b.textContent = genS > 0 ? `${fmt.num(usage.completion_tokens / genS, 1)} tokens/s` : DASH;
          }
        };
        try {
          const res = await api('/ui/api/chat/completions', { method: 'POST', body, signal: streamCtl.signal, raw: true });
          const reader = res.body.getReader();
          const decoder = new TextDecoder();
          let buf = '';
          let done = false;
          const handle = (event) => {
            // One SSE event: join its data: lines.
            const data = event.split(/\r?\n/).filter((l) => l.startsWith('data:')).map((l) => l.slice(5).replace(/^ /, '')).join('\n');
            if (!data) return;
            if (data === '[DONE]') { done = true; return; }
            let chunk;
            try { chunk = JSON.parse(data); } catch (_) { return; }
            if (chunk.error) throw new ApiError(chunk.error.message || String(chunk.error), 0);
            if (chunk.model && !served) { served = chunk.model; S.model.b.textContent = served; }
            if (chunk.usage) {
              usage = chunk.usage;
              S.tin.b.textContent = fmt.int(usage.prompt_tokens);
              S.tout.b.textContent = fmt.int(usage.completion_tokens);
            }
            const choice = Array.isArray(chunk.choices) ? chunk.choices[0] : null;
            const delta = choice && choice.delta && choice.delta.content;
            if (delta) {
              if (firstAt == null) { firstAt = performance.now(); S.ttft.b.textContent = fmt.ms(firstAt - started); }
              textNode.appendData(delta);
              answer.scrollTop = answer.scrollHeight;
            }
            if (choice && choice.finish_reason) finish = choice.finish_reason;
          };
          while (!done) {
            const { value, done: eof } = await reader.read();
            if (eof) break;
            buf += decoder.decode(value, { stream: true });
            let m;
            while (!done && (m = /\r?\n\r?\n/.exec(buf))) {
              const event = buf.slice(0, m.index);
              buf = buf.slice(m.index + m[0].length);
              handle(event);
            }
          }
          if (!done && buf.trim()) handle(buf);
          if (done) reader.cancel().catch(() => {});
          showTimes();
          setStatus(finish === 'length' ? 'Stopped: max tokens' : 'Done', finish === 'length' ? 'warn' : 'ok');
          if (!textNode.data) answer.append(h('span.muted', { text: '(empty answer)' }));
        } catch (e) {
          showTimes();
          if (isAbort(e)) setStatus(signal.aborted ? '' : 'Stopped', 'warn');
          else {
            // api() already showed HTTP errors; this covers errors inside the stream and dropped connections.
            showError(e.message);
            setStatus('Failed', 'bad');
            if (!textNode.data) answer.append(h('span.form-error', { text: e.message }));
          }
        } finally {
          caret.remove();
          signal.removeEventListener('abort', onLeave);
          streamCtl = null;
          send.disabled = false;
          stop.hidden = true;
        }
      });

      stop.addEventListener('click', () => { if (streamCtl) streamCtl.abort(); });
      loadModels();
      return () => { if (streamCtl) streamCtl.abort(); };
    },
  };

  // ======================================================================
  // Boot.
  // ======================================================================
  function boot() {
    if (typeof uPlot === 'undefined') {
      showError('The chart library failed to load (/ui/assets/uplot.iife.min.js).');
    }
    window.addEventListener('hashchange', route);
    window.addEventListener('popstate', route);
    // Charts read theme colours when built: rebuild the page if the OS theme flips.
    const mq = window.matchMedia('(prefers-color-scheme: dark)');
    if (mq.addEventListener) mq.addEventListener('change', () => route(true));
    route();
  }
  boot();
})();
