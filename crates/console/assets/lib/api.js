/* Switchyard console · the API client, with the error banner and progress line it drives.
   - 401 anywhere: the session expired, go to the login page.
   - Any other failure: show the banner (and throw, so callers can also
     show it inline), unless the call is `silent` (a look-up the page can do
     without). Any success hides the banner again.
   - Mutations carry the CSRF header the gateway demands. */
import { $ } from './dom.js';

// The error banner and the progress line.
const banner = $('[data-testid=error-banner]');
$('button', banner).addEventListener('click', () => { banner.hidden = true; });
export function showError(msg) {
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

// The client.
export class ApiError extends Error {
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

export async function api(path, { method = 'GET', body, signal, quiet = false, raw = false, silent = false } = {}) {
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
      if (!silent) showError(msg);
      throw new ApiError(msg, 0);
    }
    if (res.status === 401) {
      location.href = '/ui/login';
      throw new ApiError('Session expired', 401);
    }
    if (!res.ok) {
      const msg = await errorMessage(res);
      if (!silent) showError(msg);
      throw new ApiError(msg, res.status);
    }
    if (!silent) clearError();
    if (raw) return res;
    if (res.status === 204) return null;
    return await res.json();
  } finally {
    if (!quiet) setBusy(-1);
  }
}
export const isAbort = (e) => e && e.name === 'AbortError';
