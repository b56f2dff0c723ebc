/* Switchyard console · form pieces the Teams and Users pages share: the limit fields every level
   has (requests and tokens per minute, parallel requests, a budget and its period), reading them
   back as the changed fields of a PATCH, describing them, a budget bar, and a two-click button for
   what cannot be undone. */
import { h } from './dom.js';
import { isNum, fmt, numField } from './format.js';

export const PERIODS = ['none', 'daily', 'weekly', 'monthly'];
export const LIMITS = [['rpm', true, 'Requests / min'], ['tpm', true, 'Tokens / min'], ['max_parallel', true, 'Max parallel'], ['budget_usd', false, 'Budget (USD)']];

/** <label class=field>: label (with an optional hint) over its input. */
export function field(label, input, cls, hint) {
  return h('label.field', { class: cls }, h('span', null, label, hint ? h('span.hint', { text: ` · ${hint}` }) : null), input);
}

export function periodSelect(value) {
  return h('select', { name: 'budget_period', value: value || 'none' },
    PERIODS.map((p) => h('option', { value: p, text: p === 'none' ? 'Lifetime' : p[0].toUpperCase() + p.slice(1) })));
}

/** The limit inputs, filled from `rec` (a team or user) when editing. */
export function limitInputs(rec = {}) {
  return [
    ...LIMITS.map(([name, integer, label]) => field(label, h('input', {
      name, type: 'number', min: integer ? '1' : '0', step: integer ? '1' : '0.01', inputmode: integer ? 'numeric' : 'decimal',
      value: rec[name] ?? '', placeholder: name === 'budget_usd' ? 'USD' : 'no limit',
    }))),
    field('Budget period', periodSelect(rec.budget_period)),
  ];
}

/** The limit fields of `fd` into `body`: all that are set (`rec` absent), or those that differ
 *  from `rec` (a cleared one as null). Returns an error message, or ''. */
export function readLimits(fd, body, rec) {
  for (const [name, integer] of LIMITS) {
    const n = numField(fd.get(name), integer);
    if (Number.isNaN(n)) return `${name} must be a ${integer ? 'whole ' : ''}number ≥ 0.`;
    if (rec ? String(n ?? '') !== String(rec[name] ?? '') : n != null) body[name] = n;
  }
  const period = String(fd.get('budget_period') || 'none');
  if (rec ? period !== (rec.budget_period || 'none') : period !== 'none') body.budget_period = period === 'none' ? null : period;
  return '';
}

/** What the server kept of a PATCH that asked to clear fields (a limit it cannot remove). */
export function keptFields(sent, got) {
  return Object.keys(sent).filter((k) => sent[k] === null && got && got[k] != null);
}

/** ["100 req/min", "1K tok/min", "4 parallel"]: the rate limits that are set. */
export function limitsText(x) {
  const parts = [];
  if (isNum(x.rpm)) parts.push(`${fmt.compact(x.rpm)} req/min`);
  if (isNum(x.tpm)) parts.push(`${fmt.compact(x.tpm)} tok/min`);
  if (isNum(x.max_parallel)) parts.push(`${fmt.int(x.max_parallel)} parallel`);
  return parts;
}
export function limitsCell(x) {
  const parts = limitsText(x);
  return h('td.wrap', { class: parts.length ? null : 'muted' }, parts.length ? parts.map((l) => h('div', { text: l })) : 'no limits');
}
export function budgetCell(x) {
  return h('td.num', null,
    h('div', { text: isNum(x.budget_usd) ? fmt.usd(x.budget_usd) : '—' }),
    isNum(x.budget_usd) ? h('div.cell-sub', { text: x.budget_period || 'lifetime' }) : null);
}

/** Spend against a budget: figures and a bar that turns amber then red. */
export function spendBar(spent, budget, period, testid) {
  const ratio = isNum(budget) && budget > 0 && isNum(spent) ? spent / budget : null;
  const fill = h('span', { class: ratio == null ? null : ratio >= 1 ? 'over' : ratio >= 0.8 ? 'warn' : null });
  fill.style.width = `${Math.min(100, (ratio ?? 0) * 100).toFixed(1)}%`;
  const figs = isNum(budget)
    ? `${fmt.usd(spent ?? 0)} of ${fmt.usd(budget)} · ${period || 'lifetime'}${ratio == null ? '' : ` · ${fmt.pct(ratio, 0)}`}`
    : `${fmt.usd(spent ?? 0)} spent · no budget`;
  return h('div.budget', { 'data-testid': testid, 'data-over': ratio != null && ratio >= 1 ? 'true' : null },
    h('div.line', null, h('span.name', { text: 'Spend this period' }), h('span.figs', { text: figs })),
    isNum(budget) ? h('div.track', { role: 'meter', 'aria-valuemin': 0, 'aria-valuemax': 100, 'aria-valuenow': ratio == null ? null : Math.round(ratio * 100) }, fill) : null);
}

/** A button that acts on the second click within a few seconds (no native confirm()). */
export function confirmButton(label, armedLabel, action, attrs = {}) {
  let timer = null;
  const btn = h('button.btn.sm.danger', { type: 'button', text: label, ...attrs });
  btn.addEventListener('click', () => {
    clearTimeout(timer);
    if (!btn.classList.contains('confirm')) {
      btn.classList.add('confirm');
      btn.textContent = armedLabel;
      timer = setTimeout(() => { btn.classList.remove('confirm'); btn.textContent = label; }, 6000);
      return;
    }
    btn.classList.remove('confirm');
    btn.textContent = label;
    action(btn);
  });
  return btn;
}
