/* Switchyard console: the single-page app's entry module. Native ES modules, no build step:
   lib/ holds the shared pieces (dom.js helpers, format.js, the api.js client, chart.js over uPlot,
   components.js, the router.js hash router, session.js for who is signed in) and pages/ one module
   per page, each exporting {title, subtitle, mount(root, params, signal)}. A new page is a module
   here and a name below (and, like every file, an entry in crates/console/src/lib.rs and a
   modulepreload in index.html). Who is signed in is read once (/ui/api/me) before any page mounts:
   the nav and the router offer only the pages the role may open. */
import { h, $ } from './lib/dom.js';
import { showError } from './lib/api.js';
import { start } from './lib/router.js';
import { me, loadMe, canSee, homePage, whoText, ROLE_TEXT } from './lib/session.js';
import { overview } from './pages/overview.js';
import { usage } from './pages/usage.js';
import { requests } from './pages/requests.js';
import { keys } from './pages/keys.js';
import { teams } from './pages/teams.js';
import { users } from './pages/users.js';
import { backends } from './pages/backends.js';
import { mcp } from './pages/mcp.js';
import { cache } from './pages/cache.js';
import { experiments } from './pages/experiments.js';
import { playground } from './pages/playground.js';
import { audit } from './pages/audit.js';

const PAGES = { overview, usage, requests, keys, teams, users, backends, mcp, cache, experiments, playground, audit };

// uPlot comes from a classic script that index.html runs before any module.
if (typeof globalThis.uPlot === 'undefined') {
  showError('The chart library failed to load (/ui/assets/uplot.iife.min.js).');
}

await loadMe();
const allowed = {};
for (const [name, page] of Object.entries(PAGES)) if (canSee(name)) allowed[name] = page;
for (const a of document.querySelectorAll('.nav a[data-page]')) a.hidden = !allowed[a.dataset.page];
const home = homePage(Object.keys(PAGES));
$('.brand').setAttribute('href', `#/${home}`);

// Who is signed in, in the sidebar's foot.
const who = $('[data-testid=whoami]');
if (who) {
  who.replaceChildren(
    h('span.who-name', { 'data-testid': 'whoami-name', text: whoText(), title: me.user && me.user.name ? me.user.name : null }),
    h('span.badge.info', { 'data-testid': 'whoami-role', 'data-role': me.role, text: ROLE_TEXT[me.role] || me.role }));
  who.hidden = false;
}
start(allowed, home);
