/* Switchyard console · Users: who may sign in to the console and with which role, each with the
   limits and budget that apply to their keys. Admins create, edit (role, name, limits), end the
   sessions of and delete users; a team admin sees the list only (to know whom to add to a team). */
import { h } from '../lib/dom.js';
import { fmtFull, fmtIsoDate, orDash } from '../lib/format.js';
import { api, isAbort } from '../lib/api.js';
import { card, emptyLine, loadingLine, table } from '../lib/components.js';
import { me, isAdmin, ROLE_TEXT, directory } from '../lib/session.js';
import { field, limitInputs, readLimits, keptFields, limitsCell, budgetCell, confirmButton } from '../lib/forms.js';

const ROLES = ['admin', 'team_admin', 'member', 'viewer'];
const ROLE_BADGE = { admin: 'warn', team_admin: 'info', member: null, viewer: null };
const userPath = (id) => `/ui/api/users/${encodeURIComponent(id)}`;
const roleSelect = (value) => h('select', { name: 'role', value }, ROLES.map((r) => h('option', { value: r, text: ROLE_TEXT[r] })));

export const users = {
  title: 'Users',
  subtitle: 'People who sign in to the console, their roles and limits',
  mount(root, params, signal) {
    const admin = isAdmin();
    const tableBox = h('div.table-wrap', { 'data-testid': 'users-table' }, loadingLine());
    const countEl = h('span.sub');
    const note = h('div.form-error.card-body', { role: 'status' });
    let createCard = null;
    if (admin) {
      const err = h('span.form-error', { role: 'alert' });
      const btn = h('button.btn.primary', { type: 'submit', text: 'Add user' });
      const form = h('form', { 'data-testid': 'user-create', autocomplete: 'off' },
        h('div.form-grid', null,
          field('Email', h('input', { name: 'email', type: 'email', placeholder: 'ada@example.com', spellcheck: 'false', required: true }), 'span-2'),
          field('Name', h('input', { name: 'name', placeholder: 'optional' }), 'span-2'),
          field('Role', roleSelect('member'), 'span-2')),
        h('div.form-actions', null, btn, err));
      form.addEventListener('submit', async (ev) => {
        ev.preventDefault();
        err.textContent = '';
        const fd = new FormData(form);
        const body = { email: String(fd.get('email') || '').trim(), role: String(fd.get('role') || 'member') };
        const name = String(fd.get('name') || '').trim();
        if (name) body.name = name;
        btn.disabled = true;
        try {
          await api('/ui/api/users', { method: 'POST', body, signal });
          form.reset();
          await load();
        } catch (e) {
          if (!isAbort(e)) err.textContent = e.message;
        } finally {
          btn.disabled = false;
        }
      });
      createCard = card('Add a user', { sub: 'they sign in with single sign-on under this email' }, h('div.card-body', null, form));
    }
    root.replaceChildren(h('div.stack', null, createCard,
      h('section.card', null, h('div.card-head', null, h('h2', { text: 'Users' }), countEl), h('div.card-body.flush', null, tableBox), note)));

    let list = [];
    let teamName = new Map();
    let editing = null;

    function render() {
      countEl.textContent = list.length ? `${list.length} user${list.length === 1 ? '' : 's'}` : '';
      if (!list.length) { tableBox.replaceChildren(emptyLine(admin ? 'No users yet. Add one above.' : 'No users.')); return; }
      const cols = [{ label: 'User' }, { label: 'Role', width: '120px' }, { label: 'Limits', width: '130px' },
        { label: 'Budget', num: true, width: '100px' }, { label: 'Created', width: '110px' }];
      if (admin) cols.push({ label: '', width: '330px' }); // fits the three buttons, one armed
      const rows = [];
      for (const u of list) {
        rows.push(h('tr', { 'data-user-id': u.id },
          h('td', { title: [u.email, u.name, u.id].filter(Boolean).join(' · ') },
            h('div.cell-main', { text: orDash(u.email) }),
            h('div.cell-sub', { text: [u.name, u.id].filter(Boolean).join(' · ') }),
            me.user && me.user.id === u.id ? h('span.badge', { text: 'you' }) : null),
          h('td', null, h('span.badge', { 'data-testid': 'user-role', class: ROLE_BADGE[u.role], text: ROLE_TEXT[u.role] || orDash(u.role) })),
          limitsCell(u),
          budgetCell(u),
          h('td', { text: fmtIsoDate(u.created_at), title: u.created_at ? fmtFull(Date.parse(u.created_at)) : null }),
          admin ? h('td.actions', null,
            h('button.btn.sm', { type: 'button', 'data-action': 'edit', text: editing === u.id ? 'Close' : 'Edit', onclick: () => { editing = editing === u.id ? null : u.id; render(); } }),
            confirmButton('End sessions', 'Confirm end', (btn) => change(btn, userPath(u.id), 'PATCH', { revoke_sessions: true }),
              { 'data-action': 'revoke-sessions', title: 'Sign this user out of the console everywhere' }),
            confirmButton('Delete', 'Confirm delete', (btn) => change(btn, userPath(u.id), 'DELETE'), { 'data-action': 'delete' })) : null));
        if (admin && editing === u.id) rows.push(editRow(u, cols.length));
      }
      tableBox.replaceChildren(table(cols, rows));
    }

    function editRow(u, span) {
      const err = h('span.form-error', { role: 'alert' });
      const save = h('button.btn.primary.sm', { type: 'submit', text: 'Save' });
      const teamsLine = h('div.cell-sub', { 'data-testid': 'user-teams', text: 'Teams: …' });
      const form = h('form', { 'data-testid': 'user-edit', autocomplete: 'off' },
        h('div.form-grid', null,
          field('Name', h('input', { name: 'name', value: u.name ?? '' }), 'span-2'),
          field('Role', roleSelect(u.role)),
          limitInputs(u)),
        h('div.form-actions', null, save,
          h('button.btn.sm', { type: 'button', text: 'Cancel', onclick: () => { editing = null; render(); } }), err, h('span.spacer'), teamsLine));
      // Which teams they are in (GET one adds its memberships).
      api(userPath(u.id), { signal, silent: true, quiet: true }).then((d) => {
        const ms = Array.isArray(d && d.teams) ? d.teams : [];
        teamsLine.replaceChildren(ms.length ? 'Teams: ' : 'In no team', ...ms.flatMap((m, i) => [i ? ', ' : '',
          h('a', { href: `#/teams?id=${encodeURIComponent(m.team_id)}`, text: teamName.get(m.team_id) || m.team_id }),
          m.role === 'team_admin' ? ' (admin)' : '']));
      }, () => { teamsLine.textContent = ''; });
      form.addEventListener('submit', async (ev) => {
        ev.preventDefault();
        err.textContent = '';
        note.textContent = '';
        const fd = new FormData(form);
        const body = {};
        const name = String(fd.get('name') || '').trim();
        if (name !== (u.name ?? '')) body.name = name;
        const role = String(fd.get('role') || u.role);
        if (role !== u.role) body.role = role;
        const bad = readLimits(fd, body, u);
        if (bad) { err.textContent = bad; return; }
        if (!Object.keys(body).length) { editing = null; render(); return; }
        save.disabled = true;
        try {
          const got = await api(userPath(u.id), { method: 'PATCH', body, signal });
          const kept = keptFields(body, got);
          if (kept.length) note.textContent = `The gateway kept ${kept.join(', ')} for ${u.email}: it cannot remove a user's limit here; set another value instead.`;
          editing = null;
          await load();
        } catch (e) {
          if (!isAbort(e)) { err.textContent = e.message; save.disabled = false; }
        }
      });
      return h('tr.edit-row', { 'data-edit-for': u.id }, h('td', { colspan: span }, form));
    }

    async function change(btn, path, method, body) {
      btn.disabled = true;
      try {
        await api(path, { method, body, signal });
        await load();
      } catch (e) {
        if (!isAbort(e)) btn.disabled = false;
      }
    }

    async function load() {
      try {
        const [d, dir] = await Promise.all([api('/ui/api/users', { signal }), directory(signal, { users: false })]);
        list = Array.isArray(d.data) ? d.data : [];
        list.sort((a, b) => String(a.email).localeCompare(String(b.email)));
        teamName = new Map(dir.teams.map((t) => [t.id, t.name]));
        render();
      } catch (e) {
        if (!isAbort(e) && !list.length) tableBox.replaceChildren(emptyLine(e.status === 403 ? 'Your role may not list users.' : `Could not load users: ${e.message}`));
      }
    }
    load();
  },
};
