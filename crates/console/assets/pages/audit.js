/* Switchyard console · Audit log (admins): every change made through the admin API and the
   console, newest first: when, who, what, to which record and from where. A row opens the record
   before and after the change, field by field, with the entry's place in the hash chain. Paged
   with next_before; the filter narrows the entries loaded so far. */
import { h, add } from '../lib/dom.js';
import { DASH, fmt, fmtTs, fmtFull, orDash } from '../lib/format.js';
import { api, isAbort } from '../lib/api.js';
import { emptyLine, loadingLine, table } from '../lib/components.js';

const PAGE = 50;
const isObj = (v) => v != null && typeof v === 'object' && !Array.isArray(v);
const show = (v) => (v === undefined ? '' : v === null ? 'null' : typeof v === 'string' ? v : JSON.stringify(v));
const ACTION_BADGE = { create: 'ok', put: 'ok', delete: 'bad', revoke: 'bad', login_failed: 'warn' };

function actionBadge(action) {
  const verb = String(action || '').split('.').pop();
  return h('span.badge.mono', { class: ACTION_BADGE[verb] || null, text: orDash(action) });
}

/** Where an entry's target leads in the console, by what kind of record the action names. */
function targetLink(action, target) {
  const kind = String(action || '').split('.')[0];
  if (!target) return null;
  if (kind === 'team') return `#/teams?id=${encodeURIComponent(target)}`;
  if (kind === 'user') return '#/users';
  if (kind === 'key') return '#/keys';
  return null;
}

/** The record before and after, field by field; changed fields first and marked. */
export function diffView(e) {
  const before = e.before;
  const after = e.after;
  let body;
  if (before == null && after == null) {
    body = h('div.muted.small', { text: 'No record attached to this entry.' });
  } else if (!isObj(before) && !isObj(after)) {
    body = h('div', null, h('pre.body-text', { text: `before: ${show(before)}\nafter:  ${show(after)}` }));
  } else {
    const b = isObj(before) ? before : {};
    const a = isObj(after) ? after : {};
    const keys = [...new Set([...Object.keys(b), ...Object.keys(a)])];
    const changed = (k) => JSON.stringify(b[k]) !== JSON.stringify(a[k]);
    keys.sort((x, y) => Number(changed(y)) - Number(changed(x)));
    const cell = (obj, has, k) => h('td.mono.wrap', { class: has ? null : 'muted', text: has ? show(obj[k]) : DASH });
    body = table([{ label: 'Field', width: '22%' }, { label: before == null ? 'Before (none)' : 'Before' }, { label: after == null ? 'After (none)' : 'After' }],
      keys.map((k) => h('tr', { 'data-field': k, class: changed(k) ? 'changed' : 'same' },
        h('td.mono', { text: k }),
        cell(b, isObj(before) && k in b, k),
        cell(a, isObj(after) && k in a, k))));
    body.classList.add('compact', 'diff');
  }
  return h('div.audit-diff', { 'data-testid': 'audit-diff' }, body,
    h('div.cell-sub.mono', { text: `#${e.seq} · hash ${String(e.hash || DASH).slice(0, 16)} · previous ${String(e.prev_hash || DASH).slice(0, 16)} · ${e.time || fmtFull(e.ts_ms)}` }));
}

export const audit = {
  title: 'Audit log',
  subtitle: 'Every change to keys, teams, users and the configuration, newest first',
  mount(root, params, signal) {
    const filter = h('input', { name: 'filter', type: 'search', placeholder: 'Filter by actor, action or target', 'data-testid': 'audit-filter', spellcheck: 'false' });
    const tableBox = h('div.table-wrap', { 'data-testid': 'audit-table' }, loadingLine());
    const count = h('span');
    const older = h('button.btn', { type: 'button', 'data-testid': 'audit-next', text: 'Older', hidden: true });
    const pager = h('div.pager', { hidden: true }, count, older);
    root.replaceChildren(h('div.stack', null,
      h('section.card', null,
        h('div.card-head', null, h('h2', { text: 'Entries' }), h('span.sub', { text: 'click an entry for the record before and after' }),
          h('div.actions', null, filter)),
        h('div.card-body.flush', null, tableBox),
        pager)));

    const entries = [];
    let tbody = null;
    let next = null;

    function matches(e) {
      const q = filter.value.trim().toLowerCase();
      return !q || [e.actor, e.action, e.target, e.client].some((v) => String(v || '').toLowerCase().includes(q));
    }

    function rowFor(e) {
      const link = targetLink(e.action, e.target);
      const tr = h('tr.clickable', { 'data-seq': e.seq, 'data-action': e.action, tabindex: '0', 'aria-expanded': 'false' },
        h('td', { title: fmtFull(e.ts_ms) }, fmtTs(e.ts_ms)),
        h('td', { text: orDash(e.actor), title: e.actor || null }),
        h('td', null, actionBadge(e.action)),
        h('td.mono', { title: e.target || null }, link ? h('a', { href: link, text: e.target }) : orDash(e.target)),
        h('td.mono', { text: orDash(e.client), class: e.client ? null : 'muted' }),
        h('td.muted', { text: e.before != null || e.after != null ? 'details' : '' }));
      const toggle = () => {
        const shown = tr.nextElementSibling && tr.nextElementSibling.classList.contains('audit-detail');
        for (const d of tbody.querySelectorAll('tr.audit-detail')) d.remove();
        for (const r of tbody.querySelectorAll('tr[aria-expanded=true]')) r.setAttribute('aria-expanded', 'false');
        if (shown) return;
        tr.setAttribute('aria-expanded', 'true');
        tr.after(h('tr.audit-detail', { 'data-detail-for': e.seq }, h('td', { colspan: 6 }, diffView(e))));
      };
      tr.addEventListener('click', (ev) => { if (!ev.target.closest('a')) toggle(); });
      tr.addEventListener('keydown', (ev) => { if (ev.key === 'Enter' || ev.key === ' ') { ev.preventDefault(); toggle(); } });
      tr.hidden = !matches(e);
      return tr;
    }

    function render(page) {
      if (!entries.length) { tableBox.replaceChildren(emptyLine('Nothing has been changed yet.')); return; }
      if (!tbody) {
        const t = table([{ label: 'Time', width: '130px' }, { label: 'Actor', width: '22%' }, { label: 'Action', width: '170px' },
          { label: 'Target' }, { label: 'Client', width: '130px' }, { label: '', width: '70px' }], []);
        t.classList.add('compact');
        tbody = t.tBodies[0];
        tableBox.replaceChildren(t);
      }
      add(tbody, page.map(rowFor));
    }

    filter.addEventListener('input', () => {
      let i = 0;
      for (const tr of tbody ? tbody.querySelectorAll('tr[data-seq]') : []) {
        const e = entries[i++];
        tr.hidden = !matches(e);
        const detail = tr.nextElementSibling;
        if (detail && detail.classList.contains('audit-detail')) detail.hidden = tr.hidden;
      }
    });

    async function load(before) {
      const q = new URLSearchParams({ limit: String(PAGE) });
      if (before != null) q.set('before', String(before));
      older.disabled = true;
      try {
        const d = await api(`/ui/api/audit?${q}`, { signal });
        const page = Array.isArray(d.data) ? d.data : [];
        entries.push(...page);
        next = d.next_before ?? null;
        render(page);
        count.textContent = entries.length ? `Showing ${fmt.int(entries.length)} entr${entries.length === 1 ? 'y' : 'ies'}${next == null ? ' · start of the log' : ''}` : '';
        older.hidden = next == null;
        pager.hidden = !entries.length;
      } catch (e) {
        if (isAbort(e)) return;
        if (!entries.length) tableBox.replaceChildren(emptyLine(e.status === 403 ? 'Only admins may read the audit log.' : `Could not load the audit log: ${e.message}`));
      } finally {
        older.disabled = false;
      }
    }
    older.addEventListener('click', () => { if (next != null) load(next); });
    load(null);
  },
};
