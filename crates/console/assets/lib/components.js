/* Switchyard console · small view components shared by pages: cards, tiles, health dots and
   badges, meters, chips and data tables. */
import { h } from './dom.js';
import { DASH, isNum, fmt } from './format.js';

export function card(title, opts = {}, ...body) {
  return h('section.card', { class: opts.class, 'data-testid': opts.testid },
    title != null ? h('div.card-head', null,
      h('h2', { text: title }),
      opts.sub ? h('span.sub', { text: opts.sub }) : null,
      opts.actions ? h('div.actions', null, opts.actions) : null) : null,
    ...body);
}
export function emptyLine(text) { return h('div.empty', { text }); }
export function loadingLine(text = 'Loading…') { return h('div.loading', { text }); }

/** A tile: label, big value with unit, footnote. Returns the element and an updater. */
export function tile(testid, label, unit, foot) {
  const value = h('span', { text: DASH });
  const unitEl = h('span.unit', { text: unit, hidden: true }); // shown once there is a value
  const valueBox = h('div.value', null, value, unitEl);
  const footEl = h('div.foot', { text: foot || '' });
  const el = h('div.card.tile', { 'data-testid': testid }, h('div.label', { text: label }), valueBox, footEl);
  return {
    el,
    set(text, state, footText) {
      value.textContent = text;
      unitEl.hidden = text === DASH;
      valueBox.classList.toggle('bad', state === 'bad');
      valueBox.classList.toggle('warn', state === 'warn');
      if (footText !== undefined) footEl.textContent = footText;
    },
  };
}

/** Backend health: "up", "down" or "breaker" (open breaker wins over up). */
export function healthOf(b) {
  if (b && b.breaker_open) return 'breaker';
  if (b && b.up && isNum(b.cooling_ms) && b.cooling_ms > 0) return 'cooling';
  return b && b.up ? 'up' : 'down';
}
export const HEALTH_TEXT = { up: 'Up', down: 'Down', breaker: 'Breaker open', cooling: 'Cooling down (asked to wait)' };
export const HEALTH_BADGE = { up: 'ok', down: 'bad', breaker: 'warn', cooling: 'warn' };
export function healthDot(state) {
  return h('span.dot', { class: state, title: HEALTH_TEXT[state], 'aria-label': HEALTH_TEXT[state] });
}

/** Fraction 0..1 as a small bar + percentage. */
export function meter(frac, { warnAt = 0.75, badAt = 0.9 } = {}) {
  if (!isNum(frac)) return h('span.muted', { text: DASH });
  const pct = Math.max(0, Math.min(1, frac));
  const cls = frac >= badAt ? 'bad' : frac >= warnAt ? 'warn' : '';
  const fill = h('span', { class: cls });
  fill.style.width = `${(pct * 100).toFixed(1)}%`;
  return h('span.meter', null, h('span.bar', null, fill), h('span.num', { text: fmt.pct(frac, 0) }));
}

export function chips(list, emptyText = DASH) {
  if (!Array.isArray(list) || list.length === 0) return h('span.muted', { text: emptyText });
  return h('div.chips', null, list.map((m) => h('span.chip', { text: String(m) })));
}

export function statusClass(code) {
  if (!isNum(code)) return '';
  if (code >= 500) return 's5';
  if (code >= 400) return 's4';
  if (code >= 200 && code < 300) return 's2';
  return '';
}

/** Build a <table class=data>; columns: [{label, num, width}] and rows of <tr>.
 *  With widths the table uses fixed layout so long values truncate instead of widening the page. */
export function table(columns, rows) {
  const fixed = columns.some((c) => c.width);
  return h('table.data', { class: fixed ? 'fixed' : null },
    fixed ? h('colgroup', null, columns.map((c) => h('col', { style: c.width ? { width: c.width } : null }))) : null,
    h('thead', null, h('tr', null, columns.map((c) => h('th', { class: c.num ? 'num' : null, text: c.label, scope: 'col' })))),
    h('tbody', null, rows));
}
