/* Switchyard console · Teams: the list (admins create teams there) and one team's page at
   #/teams?id=t_…: its limits, spend against its budget, its members (added and removed by admins
   and the team's own admins) and its keys; admins edit and delete it. The server decides who sees
   which team; the page only hides the buttons the role cannot use. */
import { h } from '../lib/dom.js';
import { DASH, isNum, fmt, fmtFull, fmtIsoDate, orDash, splitList } from '../lib/format.js';
import { api, isAbort } from '../lib/api.js';
import { card, emptyLine, loadingLine, chips, table } from '../lib/components.js';
import { navigate } from '../lib/router.js';
import { me, isAdmin, adminsTeam, canListUsers, directory } from '../lib/session.js';
import { field, limitInputs, readLimits, keptFields, limitsCell, budgetCell, spendBar, confirmButton } from '../lib/forms.js';

const teamHref = (id) => `#/teams?id=${encodeURIComponent(id)}`;
const teamPath = (id) => `/ui/api/teams/${encodeURIComponent(id)}`;
const ROLE_BADGE = { team_admin: 'info', member: null };
const ROLE_LABEL = { team_admin: 'Team admin', member: 'Member' };

/** The name, models and limit fields of a team, filled from `t` when editing. */
function teamFields(t = {}) {
  return h('div.form-grid', null,
    field('Name', h('input', { name: 'name', value: t.name ?? '', placeholder: 'e.g. research', spellcheck: 'false', required: true }), 'span-2'),
    field('Models', h('input', { name: 'models', value: (t.models || []).join(', '), placeholder: 'llama-3.1-8b, fast', spellcheck: 'false' }), 'span-2', 'comma separated, blank = all'),
    field('Guardrails', h('input', { name: 'guardrails', value: (t.guardrails || []).join(', '), placeholder: 'pii, secrets', spellcheck: 'false' }), 'span-2', "comma separated, every key of the team gets them"),
    limitInputs(t));
}

/** The fields of a team form as a POST body (`t` absent) or the changed ones of a PATCH. */
function readTeam(form, t) {
  const fd = new FormData(form);
  const body = {};
  const name = String(fd.get('name') || '').trim();
  if (!t ? name : name !== t.name) body.name = name;
  const models = splitList(fd.get('models'));
  if (!t ? models.length : models.join(',') !== (t.models || []).join(',')) body.models = models;
  const guardrails = splitList(fd.get('guardrails'));
  if (!t ? guardrails.length : guardrails.join(',') !== (t.guardrails || []).join(',')) body.guardrails = guardrails;
  const err = readLimits(fd, body, t);
  return { body, err };
}

function mountList(root, signal) {
  const tableBox = h('div.table-wrap', { 'data-testid': 'teams-table' }, loadingLine());
  const countEl = h('span.sub');
  let createCard = null;
  if (isAdmin()) {
    const err = h('span.form-error', { role: 'alert' });
    const btn = h('button.btn.primary', { type: 'submit', text: 'Create team' });
    const form = h('form', { 'data-testid': 'team-create', autocomplete: 'off' }, teamFields(), h('div.form-actions', null, btn, err));
    form.addEventListener('submit', async (ev) => {
      ev.preventDefault();
      err.textContent = '';
      const { body, err: bad } = readTeam(form);
      if (bad) { err.textContent = bad; return; }
      btn.disabled = true;
      try {
        const t = await api('/ui/api/teams', { method: 'POST', body, signal });
        navigate(teamHref(t.id));
      } catch (e) {
        if (!isAbort(e)) err.textContent = e.message;
        btn.disabled = false;
      }
    });
    createCard = card('Create a team', { sub: 'its limits and budget apply to its keys beside their own' }, h('div.card-body', null, form));
  }
  root.replaceChildren(h('div.stack', null, createCard,
    h('section.card', null, h('div.card-head', null, h('h2', { text: 'Teams' }), countEl), h('div.card-body.flush', null, tableBox))));

  const myRole = new Map(me.teams.map((t) => [t.id, t.role]));
  (async () => {
    try {
      const d = await api('/ui/api/teams', { signal });
      const list = Array.isArray(d.data) ? d.data : [];
      countEl.textContent = list.length ? `${fmt.int(list.length)} team${list.length === 1 ? '' : 's'}` : '';
      if (!list.length) {
        tableBox.replaceChildren(emptyLine(isAdmin() ? 'No teams yet. Create one above.' : 'You are not in any team.'));
        return;
      }
      const cols = [{ label: 'Team', width: '22%' }, { label: 'Models' }, { label: 'Limits', width: '130px' },
        { label: 'Budget', num: true, width: '100px' }, { label: 'Your role', width: '110px' }, { label: 'Created', width: '110px' }];
      tableBox.replaceChildren(table(cols, list.map((t) => {
        const role = myRole.get(t.id);
        const tr = h('tr.clickable', { 'data-team-id': t.id, tabindex: '0' },
          h('td', { title: [t.name, t.id].join(' · ') },
            h('div.cell-main', null, h('a', { href: teamHref(t.id), text: orDash(t.name) })), h('div.cell-sub.mono', { text: t.id })),
          h('td.wrap', null, chips(t.models, 'all models')),
          limitsCell(t),
          budgetCell(t),
          h('td', null, role ? h('span.badge', { class: ROLE_BADGE[role], text: ROLE_LABEL[role] || role }) : h('span.muted', { text: isAdmin() ? 'admin' : DASH })),
          h('td', { text: fmtIsoDate(t.created_at), title: t.created_at ? fmtFull(Date.parse(t.created_at)) : null }));
        tr.addEventListener('click', (e) => { if (!e.target.closest('a')) navigate(teamHref(t.id)); });
        tr.addEventListener('keydown', (e) => { if (e.key === 'Enter') navigate(teamHref(t.id)); });
        return tr;
      })));
    } catch (e) {
      if (!isAbort(e)) tableBox.replaceChildren(emptyLine(`Could not load teams: ${e.message}`));
    }
  })();
}

function mountTeam(root, id, signal) {
  const manage = adminsTeam(id);
  const title = h('h2', { text: 'Team' });
  const sub = h('span.sub.mono', { text: id });
  const actions = h('div.actions');
  const editBox = h('div', { hidden: true });
  const note = h('div.form-error.card-body', { role: 'status' });
  const limitsBox = h('div.card-body', { 'data-testid': 'team-limits' }, loadingLine());
  const spendBox = h('div', { 'data-testid': 'team-spend-box' });
  const membersBox = h('div.table-wrap', { 'data-testid': 'team-members' }, loadingLine());
  const addBox = h('div');
  const keysBox = h('div.table-wrap', { 'data-testid': 'team-keys' }, loadingLine());
  root.replaceChildren(h('div.stack', { 'data-testid': 'team-detail', 'data-team-id': id },
    h('div', null, h('a', { href: '#/teams', 'data-testid': 'teams-back', text: '← All teams' })),
    h('section.card', null, h('div.card-head', null, title, sub, actions), limitsBox, h('div.card-body.flush', null, spendBox), editBox, note),
    h('section.card', null, h('div.card-head', null, h('h2', { text: 'Members' })), h('div.card-body.flush', null, membersBox), addBox),
    h('section.card', null, h('div.card-head', null, h('h2', { text: 'Keys' }), h('span.sub', { text: 'keys that belong to this team' }),
      h('div.actions', null, h('a.btn.sm', { href: '#/keys', text: 'Manage keys' }))), h('div.card-body.flush', null, keysBox))));

  let team = null;
  let dir = { user: new Map(), users: [] };
  let keyById = new Map();

  function fact(k, v) { return h('div.fact', null, h('div.k', { text: k }), h('div.v', null, v)); }
  const userLabel = (uid) => dir.user.get(uid);

  function render() {
    title.textContent = team.name;
    document.title = `${team.name} · Teams · Switchyard`;
    limitsBox.replaceChildren(
      h('div.facts', null,
        fact('Requests / min', isNum(team.rpm) ? fmt.int(team.rpm) : 'no limit'),
        fact('Tokens / min', isNum(team.tpm) ? fmt.int(team.tpm) : 'no limit'),
        fact('Max parallel', isNum(team.max_parallel) ? fmt.int(team.max_parallel) : 'no limit'),
        fact('Budget', isNum(team.budget_usd) ? `${fmt.usd(team.budget_usd)} ${team.budget_period || 'lifetime'}` : 'none'),
        fact('Created', fmtIsoDate(team.created_at)),
        // The team's request log is for those who run it (a member sees only their own requests).
        manage ? fact('Requests', h('a', { href: `#/requests?team=${encodeURIComponent(team.name)}`, text: 'Request log' })) : null),
      h('div.models', null, h('span.k', { text: 'Models' }), chips(team.models, 'all models')),
      h('div.models', null, h('span.k', { text: 'Guardrails' }), chips(team.guardrails, 'the configured ones')));
    spendBox.replaceChildren(spendBar(team.spend_usd, team.budget_usd, team.budget_period, 'team-spend'));
    renderMembers();
    renderKeys();
  }

  function renderMembers() {
    const members = Array.isArray(team.members) ? team.members : [];
    if (!members.length) membersBox.replaceChildren(emptyLine('No members yet.'));
    else {
      const cols = [{ label: 'User' }, { label: 'Role', width: '130px' }, { label: 'Added', width: '120px' }];
      if (manage) cols.push({ label: '', width: '300px' }); // fits "Make team admin" + "Confirm remove"
      membersBox.replaceChildren(table(cols, members.map((m) => {
        const u = userLabel(m.user_id);
        const other = m.role === 'team_admin' ? 'member' : 'team_admin';
        return h('tr', { 'data-user-id': m.user_id },
          h('td', { title: m.user_id },
            h('div.cell-main', { text: u ? u.email || u.name || m.user_id : m.user_id }),
            h('div.cell-sub', { text: u ? [u.name, m.user_id].filter(Boolean).join(' · ') : 'user id' })),
          h('td', null, h('span.badge', { 'data-testid': 'member-role', class: ROLE_BADGE[m.role], text: ROLE_LABEL[m.role] || m.role })),
          h('td', { text: fmtIsoDate(m.created_at) }),
          manage ? h('td.actions', null,
            h('button.btn.sm', { type: 'button', 'data-action': 'set-role', text: other === 'team_admin' ? 'Make team admin' : 'Make member',
              onclick: (e) => change(e.currentTarget, `${teamPath(id)}/members`, 'POST', { user_id: m.user_id, role: other }) }),
            confirmButton('Remove', 'Confirm remove', (btn) => change(btn, `${teamPath(id)}/members/${encodeURIComponent(m.user_id)}`, 'DELETE'),
              { 'data-action': 'remove-member' })) : null);
      })));
    }
    if (!manage) { addBox.replaceChildren(); return; }
    const err = h('span.form-error', { role: 'alert' });
    const present = new Set(members.map((m) => m.user_id));
    const candidates = dir.users.filter((u) => !present.has(u.id));
    const who = dir.users.length
      ? h('select', { name: 'user_id', required: true }, h('option', { value: '', text: candidates.length ? 'Choose a user…' : 'Every user is a member' }),
        candidates.map((u) => h('option', { value: u.id, text: u.name ? `${u.email} (${u.name})` : u.email })))
      : h('input', { name: 'user_id', placeholder: 'u_…', spellcheck: 'false', required: true });
    const role = h('select', { name: 'role' }, h('option', { value: 'member', text: 'Member' }), h('option', { value: 'team_admin', text: 'Team admin' }));
    const btn = h('button.btn.primary', { type: 'submit', text: 'Add member' });
    const form = h('form.member-add', { 'data-testid': 'team-member-add', autocomplete: 'off' },
      field('User', who, null, canListUsers() ? null : 'user id'), field('Role', role), btn, err);
    form.addEventListener('submit', async (ev) => {
      ev.preventDefault();
      err.textContent = '';
      const userId = String(who.value || '').trim();
      if (!userId) { err.textContent = 'Choose a user.'; return; }
      btn.disabled = true;
      try {
        await api(`${teamPath(id)}/members`, { method: 'POST', body: { user_id: userId, role: role.value }, signal });
        await load();
      } catch (e) {
        if (!isAbort(e)) { err.textContent = e.message; btn.disabled = false; }
      }
    });
    addBox.replaceChildren(h('div.card-body', null, form));
  }

  function renderKeys() {
    const ids = Array.isArray(team.keys) ? team.keys : [];
    if (!ids.length) { keysBox.replaceChildren(emptyLine('No keys belong to this team.')); return; }
    keysBox.replaceChildren(table([{ label: 'Key' }, { label: 'Status', width: '100px' }, { label: 'Owner', width: '26%' }, { label: 'Limits', width: '150px' }],
      ids.map((kid) => {
        const k = keyById.get(kid);
        const st = !k ? null : k.revoked_at ? 'revoked' : 'active';
        const owner = k && k.user_id ? userLabel(k.user_id) : null;
        return h('tr', { 'data-key-id': kid },
          h('td', { title: kid }, h('div.cell-main', { text: k && k.name ? k.name : k ? '(unnamed)' : kid, class: k && k.name ? null : 'muted' }), k ? h('div.cell-sub.mono', { text: kid }) : null),
          h('td', null, st ? h('span.badge', { class: st === 'active' ? 'ok' : 'bad', text: st }) : h('span.muted', { text: DASH })),
          h('td', { text: k && k.user_id ? (owner ? owner.email || k.user_id : k.user_id) : DASH, class: k && k.user_id ? null : 'muted' }),
          k ? limitsCell(k) : h('td.muted', { text: DASH }));
      })));
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

  function openEdit() {
    const err = h('span.form-error', { role: 'alert' });
    const save = h('button.btn.primary', { type: 'submit', text: 'Save' });
    const form = h('form', { 'data-testid': 'team-edit', autocomplete: 'off' }, teamFields(team),
      h('div.form-actions', null, save, h('button.btn', { type: 'button', text: 'Cancel', onclick: () => { editBox.hidden = true; } }), err));
    form.addEventListener('submit', async (ev) => {
      ev.preventDefault();
      err.textContent = '';
      note.textContent = '';
      const { body, err: bad } = readTeam(form, team);
      if (bad) { err.textContent = bad; return; }
      if (!Object.keys(body).length) { editBox.hidden = true; return; }
      save.disabled = true;
      try {
        const got = await api(teamPath(id), { method: 'PATCH', body, signal });
        const kept = keptFields(body, got);
        if (kept.length) note.textContent = `The gateway kept ${kept.join(', ')}: it cannot remove a team's limit here; set another value instead.`;
        editBox.hidden = true;
        await load();
      } catch (e) {
        if (!isAbort(e)) { err.textContent = e.message; save.disabled = false; }
      }
    });
    editBox.replaceChildren(h('div.card-body.edit-box', null, form));
    editBox.hidden = false;
  }

  if (isAdmin()) {
    actions.append(
      h('button.btn.sm', { type: 'button', 'data-action': 'edit', text: 'Edit', onclick: () => { if (team) { if (editBox.hidden) openEdit(); else editBox.hidden = true; } } }),
      confirmButton('Delete team', 'Confirm delete', async (btn) => {
        btn.disabled = true;
        try {
          await api(teamPath(id), { method: 'DELETE', signal });
          navigate('#/teams');
        } catch (e) { if (!isAbort(e)) btn.disabled = false; }
      }, { 'data-action': 'delete' }));
  }

  async function load() {
    try {
      const [t, d, ks] = await Promise.all([
        api(teamPath(id), { signal }),
        directory(signal, { teams: false }),
        api('/ui/api/keys', { signal, silent: true, quiet: true }).catch((e) => { if (isAbort(e)) throw e; return { data: [] }; }),
      ]);
      team = t;
      dir = d;
      keyById = new Map((Array.isArray(ks && ks.data) ? ks.data : []).map((k) => [k.id, k]));
      render();
    } catch (e) {
      if (isAbort(e)) return;
      if (!team) {
        const msg = e.status === 404 ? 'There is no such team.' : e.status === 403 ? 'Your role may not see this team.' : `Could not load the team: ${e.message}`;
        limitsBox.replaceChildren(emptyLine(msg));
        for (const box of [membersBox, keysBox]) box.replaceChildren(emptyLine('—'));
        actions.replaceChildren();
      }
    }
  }
  load();
}

export const teams = {
  title: 'Teams',
  subtitle: 'Teams, their members, keys and budgets',
  mount(root, params, signal) {
    const id = params.get('id');
    if (id) mountTeam(root, id, signal);
    else mountList(root, signal);
  },
};
