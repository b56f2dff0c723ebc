/* Switchyard console · Backends: one card per backend with a 5-minute health strip. */
import { h, icon, ICON } from '../lib/dom.js';
import { isNum, fmt, fmtTs, ago, orDash } from '../lib/format.js';
import { api, isAbort } from '../lib/api.js';
import { card, emptyLine, loadingLine, healthOf, HEALTH_TEXT, HEALTH_BADGE, healthDot, meter, chips, table } from '../lib/components.js';
import { headerExtra } from '../lib/router.js';

export const backends = {
  title: 'Backends',
  subtitle: 'Health, load and routing of the upstream servers',
  mount(root, params, signal) {
    const refresh = h('button.btn', { type: 'button', onclick: () => load() }, icon(ICON.refresh), 'Refresh');
    const strategy = h('span.badge.info', { hidden: true });
    headerExtra.append(strategy, refresh);
    const list = h('div', { 'data-testid': 'backends-list' }, loadingLine());
    const models = h('div.table-wrap', { 'data-testid': 'models-table' }, loadingLine());
    root.replaceChildren(h('div.stack', null, list,
      card('Models', { sub: 'which backends serve each model, and its aliases' }, h('div.card-body.flush', null, models))));

    function strip(history) {
      if (!Array.isArray(history) || !history.length) return h('div.strip-empty', { text: 'No health history yet' });
      const cells = history.map((p) => {
        const st = healthOf(p);
        return h('span', { class: st === 'up' ? null : st, title: `${fmtTs(isNum(p.t) ? p.t * 1000 : null)} · ${HEALTH_TEXT[st]} · ${fmt.int(p.in_flight)} in flight` });
      });
      const first = history[0].t;
      return [h('div.strip', { role: 'img', 'aria-label': 'Health over the last 5 minutes' }, cells),
        h('div.strip-axis', null, h('span', { text: isNum(first) ? ago(first * 1000) : '' }), h('span', { text: 'now' }))];
    }

    function fact(k, v) { return h('div.fact', null, h('div.k', { text: k }), h('div.v', null, v)); }

    // The KV-cache blocks a backend holds: from its engine's events (by tier), or the gateway's
    // estimate of what it sent there; an event feed that is not live is unknown.
    function cachedBlocks(c) {
      if (!c) return h('span.muted', { text: 'off', title: 'Cache-aware routing is off' });
      if (c.source === 'events' && !c.live) {
        return h('span.muted', { 'data-testid': 'kv-source', 'data-source': 'events', text: 'unknown (events not live)' });
      }
      const tiers = c.source === 'events' && (c.cpu || c.other) ? ` · GPU ${fmt.int(c.gpu)} · CPU ${fmt.int(c.cpu)} · other ${fmt.int(c.other)}` : '';
      return h('span', { 'data-testid': 'kv-source', 'data-source': c.source, title: c.source === 'events' ? 'From the engine\'s KV-cache events' : 'Estimated from what the gateway sent' },
        fmt.int(c.blocks), h('span.cell-sub', { text: ` ${c.source}${tiers}` }));
    }

    function backendCard(b) {
      const st = healthOf(b);
      const failRate = isNum(b.attempts) && b.attempts > 0 && isNum(b.failures) ? b.failures / b.attempts : null;
      return h('section.card.backend-card', { 'data-backend': b.name, 'data-health': st },
        h('div.card-head', null, healthDot(st), h('h2', { text: orDash(b.name) }),
          b.kind ? h('span.badge', { text: b.kind }) : null,
          h('div.actions', null, h('span.badge', { class: HEALTH_BADGE[st], text: HEALTH_TEXT[st] }))),
        h('div.card-body', null,
          h('div.url', { text: orDash(b.url), title: b.url || null }),
          h('div.strip-box', null, strip(b.history)),
          h('div.facts', null,
            fact('In flight', isNum(b.capacity) ? `${fmt.int(b.in_flight)} / ${fmt.int(b.capacity)}` : fmt.int(b.in_flight)),
            fact('Waiting', fmt.int(b.waiting)),
            fact('KV cache', meter(b.kv_usage)),
            fact('Cached blocks', cachedBlocks(b.kv_cache)),
            fact('Affinity hits', b.affinity_hit_ratio == null ? h('span.muted', { text: 'off', title: 'Cache-aware routing is off' }) : fmt.pct(b.affinity_hit_ratio, 0)),
            fact('Attempts', fmt.int(b.attempts)),
            fact('Failures', h('span', null, fmt.int(b.failures), failRate == null ? null : h('span.cell-sub', { text: ` ${fmt.pct(failRate)}` })))),
          h('div.models', null, h('span.k', { text: 'Models' }), chips(b.models, 'none'))));
    }

    async function load() {
      refresh.disabled = true;
      try {
        const d = await api('/ui/api/backends', { signal });
        const bs = Array.isArray(d.backends) ? d.backends : [];
        const strat = d.routing && d.routing.strategy;
        strategy.hidden = !strat;
        strategy.textContent = strat ? `Routing: ${strat}` : '';
        list.replaceChildren(bs.length
          ? h('div.backend-cards', null, bs.map(backendCard))
          : card(null, {}, emptyLine('No backends configured. Add one to the gateway config to start routing.')));
        const ms = Array.isArray(d.models) ? d.models : [];
        models.replaceChildren(ms.length
          ? table([{ label: 'Model' }, { label: 'Backends' }, { label: 'Aliases' }],
            ms.map((m) => h('tr', { 'data-model': m.model },
              h('td.mono.cell-main', { text: orDash(m.model) }), h('td', null, chips(m.backends, 'none')), h('td', null, chips(m.aliases, 'none')))))
          : emptyLine('No models are served yet.'));
      } catch (e) {
        if (isAbort(e)) return;
        if (list.querySelector('.loading')) list.replaceChildren(card(null, {}, emptyLine('Could not load backends.')));
        if (models.querySelector('.loading')) models.replaceChildren(emptyLine('Could not load models.'));
      } finally {
        refresh.disabled = false;
      }
    }
    load();
  },
};
