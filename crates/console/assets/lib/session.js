/* Switchyard console · who is signed in (GET /ui/api/me, read once by app.js before any page
   mounts) and what their role lets the app offer. The server filters and refuses on its own; this
   only hides what the role cannot use, so a page never offers a button that would answer 403.
   Also the look-ups pages share to name teams and users (pickers, owner columns). */
import { api } from './api.js';

/** The signed-in operator; the master-key shape until loadMe() has answered. */
export const me = { role: 'admin', master: true, user: null, teams: [] };

/** The pages each role may open, in nav order (admin: every page). */
const PAGES = {
  viewer: ['overview', 'usage', 'requests', 'keys', 'teams', 'backends', 'mcp', 'cache'],
  team_admin: ['usage', 'requests', 'keys', 'teams', 'users', 'playground'],
  member: ['usage', 'requests', 'keys', 'teams', 'playground'],
};
export const ROLE_TEXT = { admin: 'Admin', team_admin: 'Team admin', member: 'Member', viewer: 'Viewer' };

/** Read /ui/api/me. A gateway that predates roles (404) or a failed look-up leaves the master
 *  shape: every page shows, and the server still refuses what it must. */
export async function loadMe() {
  try {
    const d = await api('/ui/api/me', { silent: true, quiet: true });
    if (d && typeof d.role === 'string') {
      me.role = d.role;
      me.master = !!d.master;
      me.user = d.user && typeof d.user === 'object' ? d.user : null;
      me.teams = Array.isArray(d.teams) ? d.teams : [];
    }
  } catch (_) { /* keep the default; a 401 already went to the login page */ }
  return me;
}

export const isAdmin = () => me.role === 'admin';
export const isViewer = () => me.role === 'viewer';
/** Whether the role may open `page`. */
export function canSee(page) {
  const allowed = PAGES[me.role];
  return !allowed || allowed.includes(page);
}
/** The page to land on: the first the role may open. */
export function homePage(all) {
  return all.find(canSee) || all[0];
}
/** Whether the operator may add and remove members of team `id` (and manage its keys). */
export function adminsTeam(id) {
  if (isAdmin()) return true;
  if (isViewer()) return false;
  return me.teams.some((t) => t.id === id && t.role === 'team_admin'); // /me says team_admin where they administer it
}
/** Whether the operator may create keys at all. */
export const canMakeKeys = () => !isViewer();
/** Whether the operator may list users (to pick members and key owners). */
export const canListUsers = () => isAdmin() || me.teams.some((t) => t.role === 'team_admin');
/** "ada@example.com" or "Master key": how the sidebar names the operator. */
export function whoText() {
  if (me.user) return me.user.email || me.user.name || me.user.id || 'Signed in';
  return me.master ? 'Master key' : 'Signed in';
}

/** Teams and users by id, for pickers and for naming owners; each list fetched once per call
 *  and quietly empty when the role may not read it. */
export async function directory(signal, { teams = true, users = true } = {}) {
  const out = { teams: [], users: [], team: new Map(), user: new Map() };
  const get = (path) => api(path, { signal, silent: true, quiet: true }).then((d) => (Array.isArray(d && d.data) ? d.data : []), (e) => {
    if (e && e.name === 'AbortError') throw e;
    return [];
  });
  const [ts, us] = await Promise.all([
    teams ? get('/ui/api/teams') : Promise.resolve(me.teams),
    users && canListUsers() ? get('/ui/api/users') : Promise.resolve([]),
  ]);
  out.teams = ts.length ? ts : me.teams;
  out.users = us;
  for (const t of out.teams) out.team.set(t.id, t);
  for (const u of out.users) out.user.set(u.id, u);
  if (me.user && !out.user.has(me.user.id)) out.user.set(me.user.id, me.user);
  return out;
}
