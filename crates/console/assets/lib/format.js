/* Switchyard console · formatting, and parsing of form fields. Missing values (null/undefined/NaN)
   always render as "—". */

export const DASH = '—';
export const isNum = (v) => typeof v === 'number' && Number.isFinite(v);
const nfCache = new Map();
function nf(opts) {
  const key = JSON.stringify(opts);
  if (!nfCache.has(key)) nfCache.set(key, new Intl.NumberFormat(undefined, opts));
  return nfCache.get(key);
}
export const fmt = {
  int: (v) => (isNum(v) ? nf({ maximumFractionDigits: 0 }).format(v) : DASH),
  num: (v, d = 1) => (isNum(v) ? nf({ maximumFractionDigits: d }).format(v) : DASH),
  // Big counts in tiles and charts: 456.8K.
  compact: (v) => (isNum(v) ? (Math.abs(v) < 10000 ? nf({ maximumFractionDigits: 1 }).format(v)
    : nf({ notation: 'compact', maximumFractionDigits: 1 }).format(v)) : DASH),
  // Milliseconds: one decimal below 10 ms, whole numbers above.
  msNum: (v) => (isNum(v) ? nf({ maximumFractionDigits: Math.abs(v) < 10 ? 1 : 0 }).format(v) : DASH),
  // Durations: ms, switching to seconds from 10 s so columns stay narrow.
  ms: (v) => (!isNum(v) ? DASH : Math.abs(v) >= 10000 ? `${nf({ maximumFractionDigits: 1 }).format(v / 1000)} s` : `${fmt.msNum(v)} ms`),
  pctNum: (v, d) => (isNum(v) ? nf({ maximumFractionDigits: d ?? (v !== 0 && Math.abs(v) < 0.1 ? 2 : 1) }).format(v * 100) : DASH),
  pct: (v, d) => (isNum(v) ? fmt.pctNum(v, d) + '%' : DASH),
  // Dollars: cents normally, more precision for tiny per-request costs.
  usd: (v) => {
    if (!isNum(v)) return DASH;
    const small = v !== 0 && Math.abs(v) < 1;
    return nf({ style: 'currency', currency: 'USD', minimumFractionDigits: 2, maximumFractionDigits: small ? 4 : 2 }).format(v);
  },
};
export const dtf = {
  time: new Intl.DateTimeFormat(undefined, { hour: '2-digit', minute: '2-digit', second: '2-digit' }),
  dayTime: new Intl.DateTimeFormat(undefined, { month: 'short', day: 'numeric', hour: '2-digit', minute: '2-digit', second: '2-digit' }),
  full: new Intl.DateTimeFormat(undefined, { year: 'numeric', month: 'short', day: 'numeric', hour: '2-digit', minute: '2-digit', second: '2-digit', timeZoneName: 'short' }),
  date: new Intl.DateTimeFormat(undefined, { year: 'numeric', month: 'short', day: 'numeric' }),
  monthDay: new Intl.DateTimeFormat(undefined, { month: 'short', day: 'numeric' }),
  dayHm: new Intl.DateTimeFormat(undefined, { month: 'short', day: 'numeric', hour: 'numeric', minute: '2-digit' }),
};
/** Local time; the date is only added when it is not today. */
export function fmtTs(ms) {
  if (!isNum(ms)) return DASH;
  const d = new Date(ms);
  return d.toDateString() === new Date().toDateString() ? dtf.time.format(d) : dtf.dayTime.format(d);
}
export function fmtFull(ms) { return isNum(ms) ? dtf.full.format(new Date(ms)) : DASH; }
/** RFC 3339 string (or null) to a local date; the year only when it is not this year. */
export function fmtIsoDate(s) {
  const t = s ? Date.parse(s) : NaN;
  if (!Number.isFinite(t)) return DASH;
  const d = new Date(t);
  return (d.getFullYear() === new Date().getFullYear() ? dtf.monthDay : dtf.date).format(d);
}
export function ago(ms) {
  if (!isNum(ms)) return DASH;
  const s = Math.max(0, Math.round((Date.now() - ms) / 1000));
  if (s < 60) return `${s} s ago`;
  if (s < 3600) return `${Math.round(s / 60)} min ago`;
  if (s < 86400) return `${Math.round(s / 3600)} h ago`;
  return `${Math.round(s / 86400)} d ago`;
}
export const orDash = (v) => (v == null || v === '' ? DASH : String(v));

// Form fields.
export const splitList = (s) => String(s || '').split(',').map((x) => x.trim()).filter(Boolean);
/** Parse a numeric form field: '' -> null, bad input -> NaN (reported to the user). */
export function numField(v, integer) {
  const s = String(v ?? '').trim();
  if (!s) return null;
  const n = Number(s);
  if (!Number.isFinite(n) || n < 0 || (integer && !Number.isInteger(n))) return NaN;
  return n;
}
