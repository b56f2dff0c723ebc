/* Switchyard console · router: #/page?query. Each page mounts into #view and may return a cleanup
   function; a per-page AbortController cancels its fetches. The pages are handed over by start()
   (app.js, only those the signed-in role may open), so this module imports none of them. */
import { $ } from './dom.js';
import { loadingLine } from './components.js';

const view = $('#view');
export const headerExtra = $('#header-extra');
const pages = {};
let home = 'overview';
let current = null;

/** Go to a hash now (pushState + mount in the same task), so no stale rows linger after a submit. */
export function navigate(hash) {
  if (hash !== location.hash) history.pushState(null, '', hash);
  route(true);
}
/** Record page state in the hash without remounting (usage range/group). */
export function replaceHash(hash) {
  history.replaceState(null, '', hash);
  mountedHash = location.hash;
}

function parseHash() {
  const raw = location.hash.replace(/^#\/?/, '');
  const q = raw.indexOf('?');
  const name = (q >= 0 ? raw.slice(0, q) : raw) || home;
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
  if (!page) { mountedHash = null; location.replace(`#/${home}`); return; }
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

/** Route over `byName` ({name: {title, subtitle, mount(root, params, signal)}}) from now on;
 *  an empty or unknown hash goes to `landing` (a page the role may open). */
export function start(byName, landing = 'overview') {
  Object.assign(pages, byName);
  home = landing;
  window.addEventListener('hashchange', route);
  window.addEventListener('popstate', route);
  // Charts read theme colours when built: rebuild the page if the OS theme flips.
  const mq = window.matchMedia('(prefers-color-scheme: dark)');
  if (mq.addEventListener) mq.addEventListener('change', () => route(true));
  route();
}
