/* Switchyard console · charts: a thin wrapper over uPlot that sizes to its container, follows the
   theme colours and updates in place with setData(). uPlot is the global the classic script
   uplot.iife.min.js defines (index.html loads it before the modules run). */
import { h } from './dom.js';
import { DASH, isNum, fmt, fmtTs } from './format.js';

const css = (name) => getComputedStyle(document.documentElement).getPropertyValue(name).trim();
function alpha(color, a) {
  const m = /^#([0-9a-f]{6})$/i.exec(color);
  if (!m) return color;
  const n = parseInt(m[1], 16);
  return `rgba(${n >> 16}, ${(n >> 8) & 255}, ${n & 255}, ${a})`;
}

// X-axis labels in local time; granularity follows uPlot's chosen tick increment (seconds).
const axisDtf = {
  day: new Intl.DateTimeFormat(undefined, { month: 'short', day: 'numeric' }),
  hm: new Intl.DateTimeFormat(undefined, { hour: 'numeric', minute: '2-digit' }),
  hms: new Intl.DateTimeFormat(undefined, { hour: 'numeric', minute: '2-digit', second: '2-digit' }),
};
function timeTicks(u, splits, axisIdx, space, incr) {
  const f = incr >= 86400 ? axisDtf.day : incr >= 60 ? axisDtf.hm : axisDtf.hms;
  return splits.map((s) => (s == null ? '' : f.format(new Date(s * 1000))));
}

/**
 * spec: { unit: axis label, axisFmt(v) -> string, height, bars: bucket seconds (bar chart),
 *         series: [{label, color, fmt(v) -> legend text, fill, dash, width}], sync: cursor sync key }
 * returns { set(data, emptyText), destroy() }
 */
export function makeChart(container, spec) {
  const { uPlot } = globalThis;
  const grid = css('--grid');
  const axisColor = css('--axis');
  const font = `11px ${css('--sans') || 'system-ui'}`;
  const overlay = h('div.chart-empty', { text: 'Loading…' });
  container.append(overlay);

  const axisFmt = spec.axisFmt || ((v) => fmt.compact(v));
  const series = [{
    label: 'Time',
    value: (u, v) => (v == null ? DASH : fmtTs(v * 1000)),
  }];
  for (const s of spec.series) {
    const color = css(s.color) || s.color;
    const cfg = {
      label: s.label,
      stroke: color,
      width: s.width || 1.6,
      spanGaps: false,
      points: { show: false },
      value: (u, v) => (v == null ? DASH : s.fmt(v)),
    };
    if (s.dash) cfg.dash = s.dash;
    if (s.fill) cfg.fill = alpha(color, 0.12);
    if (spec.bars) {
      cfg.paths = uPlot.paths.bars({ size: [0.7, 48], gap: 2 });
      cfg.fill = alpha(color, 0.75);
      cfg.width = 0;
      cfg.points = { show: false };
    }
    series.push(cfg);
  }

  const opts = {
    width: Math.max(200, container.clientWidth),
    height: spec.height || 220,
    series,
    legend: { live: true },
    cursor: {
      drag: { x: false, y: false }, // no zoom: these are live, fixed-window charts
      y: false, // vertical crosshair only
      points: { size: 6 },
      sync: spec.sync ? { key: spec.sync } : undefined,
    },
    scales: {
      x: spec.bars
        ? { time: true, range: (u, min, max) => (min == null ? [0, 1] : [min - spec.bars / 2, max + spec.bars / 2]) }
        : { time: true },
      // Always start at zero; leave a little headroom; a flat 0..1 when there is no data.
      y: { range: (u, min, max) => [0, isNum(max) && max > 0 ? max * 1.12 : 1] },
    },
    axes: [
      // space: at least 90 px per time label, so "12:02:20 PM" labels never overlap.
      { stroke: axisColor, font, values: timeTicks, space: 90, grid: { stroke: grid, width: 1 }, ticks: { stroke: grid, width: 1, size: 4 } },
      {
        stroke: axisColor, font, labelFont: font, label: spec.unit, labelSize: 16, labelGap: 2,
        size: 52, gap: 4,
        grid: { stroke: grid, width: 1 }, ticks: { show: false },
        values: (u, vals) => vals.map(axisFmt),
      },
    ],
    hooks: {
      // Outside the plot the legend only names the series (values appear on hover).
      setLegend: [(u) => {
        const legend = u.root.querySelector('.u-legend');
        if (legend) legend.classList.toggle('idle', u.cursor.idx == null);
      }],
    },
  };
  const empty = [[], ...spec.series.map(() => [])];
  const plot = new uPlot(opts, empty, container);
  const legendEl = plot.root.querySelector('.u-legend');
  if (legendEl) legendEl.classList.add('idle');

  // Follow the container's width (sidebar layouts, window resizes).
  let lastW = 0;
  const ro = new ResizeObserver(() => {
    const w = Math.floor(container.clientWidth);
    if (w > 0 && w !== lastW) {
      lastW = w;
      plot.setSize({ width: w, height: opts.height });
    }
  });
  ro.observe(container);

  return {
    set(data, emptyText) {
      plot.setData(data);
      const hasValue = data.slice(1).some((col) => col.some((v) => v != null));
      overlay.hidden = hasValue;
      overlay.textContent = emptyText || 'No data';
    },
    /** Replace the overlay text while no data has arrived (e.g. the first load failed). */
    note(text) { if (!overlay.hidden) overlay.textContent = text; },
    destroy() { ro.disconnect(); plot.destroy(); },
  };
}
