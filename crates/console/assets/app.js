/* Switchyard console: the single-page app's entry module. Native ES modules, no build step:
   lib/ holds the shared pieces (dom.js helpers, format.js, the api.js client, chart.js over uPlot,
   components.js, the router.js hash router) and pages/ one module per page, each exporting
   {title, subtitle, mount(root, params, signal)}. A new page is a module here and a name below
   (and, like every file, an entry in crates/console/src/lib.rs and a modulepreload in index.html). */
import { showError } from './lib/api.js';
import { start } from './lib/router.js';
import { overview } from './pages/overview.js';
import { usage } from './pages/usage.js';
import { requests } from './pages/requests.js';
import { keys } from './pages/keys.js';
import { backends } from './pages/backends.js';
import { mcp } from './pages/mcp.js';
import { playground } from './pages/playground.js';

// uPlot comes from a classic script that index.html runs before any module.
if (typeof globalThis.uPlot === 'undefined') {
  showError('The chart library failed to load (/ui/assets/uplot.iife.min.js).');
}
start({ overview, usage, requests, keys, backends, mcp, playground });
