/* Switchyard console · Requests: filterable request log with cursor paging and a detail drawer.
   Filters live in the hash (#/requests?model=x&status=error). */
import { h, add, icon, ICON } from '../lib/dom.js';
import { DASH, isNum, fmt, dtf, fmtFull, orDash } from '../lib/format.js';
import { api, isAbort } from '../lib/api.js';
import { card, emptyLine, loadingLine, statusClass, table } from '../lib/components.js';
import { navigate } from '../lib/router.js';
import { isAdmin } from '../lib/session.js';

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

export const requests = {
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
    /** The request's kept bodies (console.store_bodies), fetched when the detail opens (admins
     *  only: the gateway keeps bodies from every other role). */
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

    // What a request used besides tokens: images (size, quality), search units, audio, characters;
    // and what the response cache said, with what a hit saved.
    function unitsText(u) {
      if (!u) return null;
      const parts = [];
      if (u.images) parts.push(`${fmt.int(u.images)} image${u.images === 1 ? '' : 's'}${u.image_size ? ` ${u.image_size}` : ''}${u.image_quality ? ` ${u.image_quality}` : ''}`);
      if (u.search_units) parts.push(`${fmt.int(u.search_units)} search unit${u.search_units === 1 ? '' : 's'}`);
      if (u.audio_seconds) parts.push(`${fmt.num(u.audio_seconds, 1)} s of audio`);
      if (u.characters) parts.push(`${fmt.int(u.characters)} characters`);
      if (u.cache) parts.push(`cache: ${u.cache}`);
      if (u.saved_tokens) parts.push(`saved ${fmt.int(u.saved_tokens)} tokens (${fmt.usd(u.saved_usd)})`);
      return parts.join(' · ') || null;
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
        ['Guardrails', r.guardrails ? r.guardrails.map((v) => `${v.guard}: ${v.kind} ${v.action} ×${v.count}`).join('; ') : null],
        ['Guard call', r.guard_call == null ? null : `classifier call of guardrail ${r.guard_call}`, 'mono'],
        ['Units', unitsText(r.units)],
      ];
      // Any field the server adds later is shown too.
      const known = new Set(['id', 'ts_ms', 'status', 'key_id', 'key_name', 'user', 'team', 'model_requested', 'model_served', 'backend',
        'prompt_tokens', 'completion_tokens', 'total_tokens', 'latency_ms', 'ttft_ms', 'cost_usd', 'estimated', 'route', 'tool',
        'response_bytes', 'has_bodies', 'guardrails', 'guard_call', 'units']);
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
          h('div.body', null, dl, r.has_bodies && isAdmin() ? bodiesOf(r.id) : null)));
      document.body.append(drawer);
      document.addEventListener('keydown', onKey);
      closeBtn.focus();
    }

    load(null);
    return closeDetail;
  },
};
