/* Switchyard console · Keys: create (secret shown once), edit limits inline, revoke/reinstate.
   What the form offers follows the role: admins pick any team and owner; a team admin one of
   their teams and, for a team they run, any owner; a member one of their teams (the key is
   theirs); a viewer only reads the list. */
import { h, icon, ICON } from '../lib/dom.js';
import { DASH, isNum, fmt, fmtFull, fmtIsoDate, orDash, splitList, numField } from '../lib/format.js';
import { api, isAbort } from '../lib/api.js';
import { card, emptyLine, loadingLine, chips, table } from '../lib/components.js';
import { me, isAdmin, canMakeKeys, canListUsers, directory } from '../lib/session.js';

const PERIODS = ['none', 'daily', 'weekly', 'monthly'];

function keyStatus(k) {
  if (k.revoked_at) return 'revoked';
  const exp = k.expires_at ? Date.parse(k.expires_at) : NaN;
  if (Number.isFinite(exp) && exp <= Date.now()) return 'expired';
  return 'active';
}

export const keys = {
  title: 'Keys',
  subtitle: 'Virtual API keys, their limits and budgets',
  mount(root, params, signal) {
    const admin = isAdmin();
    const writable = canMakeKeys();
    let dir = { teams: me.teams, users: [], team: new Map(me.teams.map((t) => [t.id, t])), user: new Map() };
    // Team and owner pickers, filled once the directory has loaded.
    const teamPick = h('select', { name: 'team_id' });
    const userPick = h('select', { name: 'user_id' });
    const teamField = h('label.field', { 'data-testid': 'key-team' }, h('span', null, 'Team'), teamPick);
    const userField = h('label.field', { 'data-testid': 'key-owner', hidden: !canListUsers() },
      h('span', null, 'Owner', admin ? null : h('span.hint', { text: ' · blank = team key' })), userPick);
    function fillPickers() {
      const teamOpts = admin ? [h('option', { value: '', text: 'No team' })] : [];
      const pickable = admin ? dir.teams : me.teams; // others: only the teams they are in
      teamPick.replaceChildren(...teamOpts, ...pickable.map((t) => h('option', { value: t.id, text: t.name || t.id })));
      teamField.hidden = !pickable.length;
      userPick.replaceChildren(h('option', { value: '', text: admin ? 'No one' : 'Default' }),
        ...dir.users.map((u) => h('option', { value: u.id, text: u.email || u.id })));
    }
    fillPickers();
    const createError = h('span.form-error', { role: 'alert' });
    const createBtn = h('button.btn.primary', { type: 'submit', text: 'Create key' });
    const periodSelect = (name, value) => h('select', { name, value }, PERIODS.map((p) => h('option', { value: p, text: p === 'none' ? 'No period (lifetime)' : p[0].toUpperCase() + p.slice(1) })));
    const field = (label, input, cls, hint) => h('label.field', { class: cls }, h('span', null, label, hint ? h('span.hint', { text: ` · ${hint}` }) : null), input);
    const form = h('form', { 'data-testid': 'key-create', autocomplete: 'off' },
      h('div.form-grid', null,
        field('Name', h('input', { name: 'name', placeholder: 'e.g. ci-bot', spellcheck: 'false' }), 'span-2'),
        field('Models', h('input', { name: 'models', placeholder: 'llama-3.1-8b, fast', spellcheck: 'false' }), 'span-2', 'comma separated, blank = all'),
        field('Guardrails', h('input', { name: 'guardrails', placeholder: 'pii, secrets', spellcheck: 'false' }), 'span-2', 'comma separated, added to the configured ones'),
        teamField,
        userField,
        field('Requests / min', h('input', { name: 'rpm', type: 'number', min: '0', step: '1', inputmode: 'numeric' })),
        field('Tokens / min', h('input', { name: 'tpm', type: 'number', min: '0', step: '1', inputmode: 'numeric' })),
        field('Max parallel', h('input', { name: 'max_parallel', type: 'number', min: '0', step: '1', inputmode: 'numeric' })),
        field('Budget', h('input', { name: 'budget_usd', type: 'number', min: '0', step: '0.01', placeholder: 'USD' })),
        field('Budget period', periodSelect('budget_period', 'none'), 'span-2'),
        admin ? field('User label', h('input', { name: 'user' }), 'span-2', 'for usage reports') : null,
        admin ? field('Team label', h('input', { name: 'team' }), 'span-2', 'for usage reports') : null),
      h('div.form-actions', null, createBtn, createError,
        !admin && !canListUsers() ? h('span.muted.small', { text: 'The key will be yours.' }) : null));

    const secretBox = h('div');
    const tableBox = h('div.table-wrap', { 'data-testid': 'keys-table' }, loadingLine());
    const countEl = h('span.sub');

    root.replaceChildren(h('div.stack', null,
      writable ? card('Create a key', { sub: 'the secret is shown once' }, h('div.card-body', null, form)) : null,
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
      const guardrails = splitList(fd.get('guardrails'));
      if (guardrails.length) body.guardrails = guardrails;
      for (const [k, integer] of [['rpm', true], ['tpm', true], ['max_parallel', true], ['budget_usd', false]]) {
        const n = numField(fd.get(k), integer);
        if (Number.isNaN(n)) { createError.textContent = `${k} must be a ${integer ? 'whole ' : ''}number ≥ 0.`; return; }
        if (n != null) body[k] = n;
      }
      const period = fd.get('budget_period');
      if (period && period !== 'none') body.budget_period = period;
      for (const k of ['team_id', 'user_id']) { const v = String(fd.get(k) || ''); if (v) body[k] = v; }
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

    /** Owner: the key's user and team (by email and name where known), else its usage labels. */
    function ownerCell(k, meta, tags) {
      const u = k.user_id ? dir.user.get(k.user_id) : null;
      const t = k.team_id ? dir.team.get(k.team_id) : null;
      const user = k.user_id ? (u && u.email) || k.user_id : meta.user;
      const team = k.team_id ? (t && t.name) || k.team_id : meta.team;
      const main = user || team;
      return h('td', { 'data-testid': 'key-owner-cell', title: [user, team, k.user_id, k.team_id, tags].filter(Boolean).join(' · ') || null },
        h('div', { text: main || DASH, class: main ? null : 'muted' }),
        user && team ? h('div.cell-sub', { text: team }) : null,
        tags ? h('div.cell-sub', { text: tags }) : null);
    }

    function limitsText(k) {
      const parts = [];
      if (isNum(k.rpm)) parts.push(`${fmt.compact(k.rpm)} req/min`);
      if (isNum(k.tpm)) parts.push(`${fmt.compact(k.tpm)} tok/min`);
      if (isNum(k.max_parallel)) parts.push(`${fmt.int(k.max_parallel)} parallel`);
      return parts;
    }

    function render() {
      countEl.textContent = keys.length ? `${keys.filter((k) => keyStatus(k) === 'active').length} active of ${keys.length}` : '';
      if (!keys.length) { tableBox.replaceChildren(emptyLine(writable ? 'No keys yet. Create one above to let clients call the gateway.' : 'No keys yet.')); return; }
      // The actions column fits "Edit" + "Confirm revoke" without clipping.
      const cols = [{ label: 'Name', width: '150px' }, { label: 'Status', width: '104px' }, { label: 'Models' }, { label: 'Limits', width: '116px' },
        { label: 'Budget', num: true, width: '86px' }, { label: 'Owner', width: '120px' }, { label: 'Created', width: '110px' }];
      if (writable) cols.push({ label: '', width: '210px' });
      const rows = [];
      for (const k of keys) {
        const st = keyStatus(k);
        const meta = k.metadata || {};
        const limits = limitsText(k);
        const actions = writable ? h('td.actions') : null;
        if (writable && st !== 'revoked') {
          actions.append(h('button.btn.sm', { type: 'button', 'data-action': 'edit', text: editing === k.id ? 'Close' : 'Edit', onclick: () => { editing = editing === k.id ? null : k.id; render(); } }));
          actions.append(revokeButton(k));
        } else if (writable) {
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
          ownerCell(k, meta, tags),
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
        team_id: k.team_id || '', user_id: k.user_id || '', guardrails: (k.guardrails || []).join(', '),
      };
      // Admins may move a key to another team or owner.
      const owners = admin ? h('div.owner-grid', null,
        f('Team', h('select', { name: 'team_id', value: initial.team_id }, h('option', { value: '', text: 'No team' }),
          dir.teams.map((t) => h('option', { value: t.id, text: t.name || t.id })),
          initial.team_id && !dir.team.has(initial.team_id) ? h('option', { value: initial.team_id, text: initial.team_id }) : null)),
        f('Owner', h('select', { name: 'user_id', value: initial.user_id }, h('option', { value: '', text: 'No one' }),
          dir.users.map((u) => h('option', { value: u.id, text: u.email || u.id })),
          initial.user_id && !dir.user.has(initial.user_id) ? h('option', { value: initial.user_id, text: initial.user_id }) : null))) : null;
      const save = h('button.btn.primary.sm', { type: 'submit', text: 'Save' });
      const form = h('form', { 'data-testid': 'key-edit', autocomplete: 'off' },
        h('div.edit-grid', null,
          f('Models', h('input', { name: 'models', value: initial.models, placeholder: 'all models (comma separated)' })),
          f('Guardrails', h('input', { name: 'guardrails', value: initial.guardrails, placeholder: 'added guards (comma separated)' })),
          f('Requests / min', h('input', { name: 'rpm', type: 'number', min: '0', step: '1', value: initial.rpm })),
          f('Tokens / min', h('input', { name: 'tpm', type: 'number', min: '0', step: '1', value: initial.tpm })),
          f('Max parallel', h('input', { name: 'max_parallel', type: 'number', min: '0', step: '1', value: initial.max_parallel })),
          f('Budget (USD)', h('input', { name: 'budget_usd', type: 'number', min: '0', step: '0.01', value: initial.budget_usd })),
          f('Budget period', h('select', { name: 'budget_period', value: initial.budget_period },
            PERIODS.map((p) => h('option', { value: p, text: p === 'none' ? 'lifetime' : p })))),
          h('div.row.nowrap', null, save,
            h('button.btn.sm', { type: 'button', text: 'Cancel', onclick: () => { editing = null; render(); } }))),
        owners, err);
      form.addEventListener('submit', async (ev) => {
        ev.preventDefault();
        err.textContent = '';
        const fd = new FormData(form);
        // Send only what changed; a cleared field is sent as null (limit removed).
        const body = {};
        const models = String(fd.get('models') || '');
        if (splitList(models).join(',') !== splitList(initial.models).join(',')) body.models = splitList(models);
        const guardrails = String(fd.get('guardrails') || '');
        if (splitList(guardrails).join(',') !== splitList(initial.guardrails).join(',')) body.guardrails = splitList(guardrails);
        for (const [key, integer] of [['rpm', true], ['tpm', true], ['max_parallel', true], ['budget_usd', false]]) {
          const n = numField(fd.get(key), integer);
          if (Number.isNaN(n)) { err.textContent = `${key} must be a ${integer ? 'whole ' : ''}number ≥ 0.`; return; }
          if (String(n ?? '') !== String(initial[key])) body[key] = n;
        }
        const period = String(fd.get('budget_period') || 'none');
        if (period !== initial.budget_period) body.budget_period = period === 'none' ? null : period;
        if (admin) {
          for (const key of ['team_id', 'user_id']) {
            const v = String(fd.get(key) || '');
            if (v !== initial[key]) body[key] = v || null;
          }
        }
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
        const [d, people] = await Promise.all([api('/ui/api/keys', { signal }), dirOnce()]);
        if (people) { dir = people; fillPickers(); }
        keys = Array.isArray(d.data) ? d.data : [];
        render();
      } catch (e) {
        if (!isAbort(e) && !keys.length) tableBox.replaceChildren(emptyLine('Could not load keys.'));
      }
    }
    // Teams and users for the pickers and the owner column, read with the first load only.
    let dirRead = false;
    function dirOnce() {
      if (dirRead) return Promise.resolve(null);
      dirRead = true;
      return directory(signal, { users: canListUsers() }).catch((e) => { if (isAbort(e)) throw e; return null; });
    }
    load();
    return () => clearTimeout(armTimer);
  },
};
