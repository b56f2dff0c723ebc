/* Switchyard console · Cache: the response cache's two layers — exact answers reused for the
   same request, and the semantic layer's answers reused for questions that mean the same: hits,
   misses, what the hits saved, the candidates each check refused, and the false-hit rate the
   last calibration measured at the threshold configured now. */
import { h, icon, ICON } from '../lib/dom.js';
import { fmt, fmtTs, orDash } from '../lib/format.js';
import { api, isAbort } from '../lib/api.js';
import { card, emptyLine, loadingLine } from '../lib/components.js';
import { headerExtra } from '../lib/router.js';

export const cache = {
  title: 'Cache',
  subtitle: 'Answers reused: the same request, or a question that means the same',
  mount(root, params, signal) {
    const refresh = h('button.btn', { type: 'button', onclick: () => load() }, icon(ICON.refresh), 'Refresh');
    headerExtra.append(refresh);
    const body = h('div.stack', { 'data-testid': 'cache-page' }, loadingLine());
    root.replaceChildren(body);

    function fact(k, v, id) { return h('div.fact', { 'data-testid': id || null }, h('div.k', { text: k }), h('div.v', null, v)); }
    const rate = (hits, misses) => (hits + misses ? hits / (hits + misses) : null);

    function exactCard(e) {
      if (!e) return card('Exact layer', { sub: 'off (cache: not configured)' }, h('div.card-body', null, emptyLine('The response cache is off.')));
      return card('Exact layer', { sub: 'the same canonical request' }, h('div.card-body', null, h('div.facts', null,
        fact('Hits', fmt.int(e.hits), 'exact-hits'),
        fact('Misses', fmt.int(e.misses), 'exact-misses'),
        fact('Hit rate', fmt.pct(rate(e.hits, e.misses))),
        fact('From Redis', fmt.int(e.hits_redis)),
        fact('Entries', fmt.int(e.entries)),
        fact('Memory', `${fmt.int(Math.round(e.bytes / 1024))} KiB of ${fmt.int(Math.round(e.max_bytes / 1048576))} MiB`))));
    }

    function calibrationFacts(c) {
      if (!c) return h('div.empty', { 'data-testid': 'calibration-none', text: 'No calibration: run switchyard cache calibrate --write FILE and set cache.semantic.calibration.' });
      if (c.error) return h('div.empty', { 'data-testid': 'calibration-error', text: c.error });
      const at = c.at_threshold || {};
      const rec = c.recommended || {};
      return h('div.facts', { 'data-testid': 'calibration' },
        fact('False hits at this threshold', fmt.pct(at.false_hit_rate), 'calibration-false-hits'),
        fact('Paraphrase hits at this threshold', fmt.pct(at.hit_rate), 'calibration-hits'),
        fact('Similarity alone', `${fmt.pct(at.plain_false_hit_rate)} false hits`),
        fact('Recommended threshold', rec.threshold == null ? '—' : `${rec.threshold.toFixed(3)} (≤ ${fmt.pct(c.target)} false hits)`),
        fact('Pairs', fmt.int(c.pairs)),
        fact('Calibrated', fmtTs(c.calibrated_ms)));
    }

    function semanticCard(s) {
      if (!s) return card('Semantic layer', { sub: 'off (cache.semantic: not configured)' }, h('div.card-body', null, emptyLine('The semantic layer is off.')));
      const refused = Object.entries(s.rejected || {}).filter(([, n]) => n > 0);
      return card('Semantic layer', { sub: `${orDash(s.embedding_model)} · threshold ${s.threshold.toFixed(3)} · ${s.store} store` },
        h('div.card-body', null,
          h('div.facts', null,
            fact('Hits', fmt.int(s.hits), 'semantic-hits'),
            fact('Misses', fmt.int(s.misses), 'semantic-misses'),
            fact('Hit rate', fmt.pct(rate(s.hits, s.misses))),
            fact('Saved', `${fmt.usd(s.saved_usd)} · ${fmt.int(s.saved_tokens)} tokens`, 'semantic-saved'),
            fact('Entries', fmt.int(s.entries)),
            fact('Errors', fmt.int(s.errors))),
          h('h3.cache-section', { text: 'Candidates refused, by check' }),
          refused.length
            ? h('div.facts', { 'data-testid': 'semantic-refused' }, refused.map(([check, n]) => fact(check, fmt.int(n))))
            : h('div.empty', { text: 'None refused yet.' }),
          h('h3.cache-section', { text: 'Calibration' }),
          calibrationFacts(s.calibration)));
    }

    async function load() {
      try {
        const d = await api('/ui/api/cache', { signal });
        body.replaceChildren(exactCard(d.exact), semanticCard(d.semantic));
      } catch (e) {
        if (!isAbort(e)) body.replaceChildren(emptyLine('Could not load the cache.'));
      }
    }
    load();
  },
};
