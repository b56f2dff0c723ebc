/* Switchyard console · MCP: the tool servers behind /mcp, their tools and the tool-call log.
   The log is the request log filtered to model "mcp:{server}" (indexed). */
import { h, icon, ICON } from '../lib/dom.js';
import { fmt, fmtTs, fmtFull, orDash } from '../lib/format.js';
import { api, isAbort } from '../lib/api.js';
import { card, emptyLine, loadingLine, HEALTH_BADGE, healthDot, statusClass, table } from '../lib/components.js';
import { headerExtra } from '../lib/router.js';

export const mcp = {
  title: 'MCP',
  subtitle: 'Tool servers behind the MCP gateway, their tools and calls',
  mount(root, params, signal) {
    const refresh = h('button.btn', { type: 'button', onclick: () => load() }, icon(ICON.refresh), 'Refresh');
    const codeMode = h('span.badge.info', { hidden: true, text: 'Code Mode on' });
    headerExtra.append(codeMode, refresh);
    const list = h('div', { 'data-testid': 'mcp-servers' }, loadingLine());
    const serverPick = h('select', { 'aria-label': 'Server', 'data-testid': 'mcp-log-server', onchange: () => loadCalls() });
    const calls = h('div.table-wrap', { 'data-testid': 'mcp-calls' }, loadingLine());
    const logCard = card('Tool calls', { sub: 'newest first, from the request log', actions: serverPick }, h('div.card-body.flush', null, calls));
    logCard.hidden = true;
    root.replaceChildren(h('div.stack', null, list, logCard));

    function fact(k, v) { return h('div.fact', null, h('div.k', { text: k }), h('div.v', null, v)); }

    function callsText(byStatus) {
      const entries = Object.entries(byStatus || {});
      const total = entries.reduce((n, [, c]) => n + c, 0);
      const failed = entries.filter(([st]) => st !== 'ok').reduce((n, [, c]) => n + c, 0);
      return h('span', { title: entries.map(([st, c]) => `${st}: ${c}`).join(' · ') || null },
        fmt.int(total), failed ? h('span.cell-sub', { text: ` ${fmt.int(failed)} failed` }) : null);
    }

    function serverCard(s) {
      const state = s.breaker_open ? 'breaker' : s.error ? 'down' : 'up';
      const stateText = s.breaker_open ? 'Breaker open' : s.error ? 'Unavailable' : 'Up';
      const tools = Array.isArray(s.tools) ? s.tools : [];
      return h('section.card.backend-card', { 'data-mcp-server': s.name, 'data-health': state },
        h('div.card-head', null, healthDot(state), h('h2', { text: orDash(s.name) }),
          h('span.badge', { text: s.transport }),
          h('div.actions', null, h('span.badge', { class: HEALTH_BADGE[state], text: stateText }))),
        h('div.card-body', null,
          h('div.url', { text: orDash(s.target), title: s.target || null }),
          s.error ? h('div.empty', { text: `Could not list tools: ${s.error}` }) : null,
          h('div.facts', null,
            fact('Tools', fmt.int(tools.length)),
            fact('Calls', fmt.int(s.calls)),
            fact('Failed', fmt.int(s.failed_calls))),
          tools.length
            ? h('div.table-wrap', null, table(
              [{ label: 'Tool', width: '32%' }, { label: 'Description' }, { label: 'Calls', num: true, width: '120px' }],
              tools.map((t) => h('tr', { 'data-tool': t.aggregated },
                h('td', { title: t.aggregated }, h('div.mono.cell-main', { text: orDash(t.name) }), h('div.cell-sub.mono', { text: t.aggregated })),
                h('td.muted', { text: orDash(t.description), title: t.description || null }),
                h('td.num', null, callsText(t.calls))))))
            : null));
    }

    async function loadCalls() {
      const server = serverPick.value;
      if (!server) return;
      calls.replaceChildren(loadingLine());
      try {
        const q = new URLSearchParams({ model: `mcp:${server}`, limit: '50' });
        const d = await api(`/ui/api/requests?${q}`, { signal });
        const rows = Array.isArray(d.data) ? d.data : [];
        calls.replaceChildren(rows.length
          ? table([{ label: 'Time', width: '130px' }, { label: 'Tool' }, { label: 'Key', width: '140px' },
            { label: 'Status', num: true, width: '70px' }, { label: 'Latency', num: true, width: '90px' },
            { label: 'Bytes', num: true, width: '90px' }, { label: 'Request ID', width: '120px' }],
          rows.map((r) => h('tr', { 'data-request-id': r.id },
            h('td', { text: fmtTs(r.ts_ms), title: fmtFull(r.ts_ms) }),
            h('td.mono', { text: orDash(r.tool), title: r.tool || null }),
            h('td', { text: r.key_name || r.key_id || 'no key', class: r.key_id ? null : 'muted' }),
            h('td.num', null, h('span.status-code', { class: statusClass(r.status), text: orDash(r.status) })),
            h('td.num', { text: fmt.ms(r.latency_ms) }),
            h('td.num', { text: fmt.int(r.response_bytes) }),
            h('td.mono', null, h('a', { href: `#/requests?id=${encodeURIComponent(r.id)}`, text: r.id, title: r.id })))))
          : emptyLine(`No tool calls to ${server} logged yet.`));
      } catch (e) {
        if (!isAbort(e)) calls.replaceChildren(emptyLine('Could not load the tool-call log.'));
      }
    }

    async function load() {
      refresh.disabled = true;
      try {
        const d = await api('/ui/api/mcp', { signal });
        codeMode.hidden = !d.code_mode;
        const servers = Array.isArray(d.servers) ? d.servers : [];
        if (!d.enabled || !servers.length) {
          list.replaceChildren(card(null, {}, emptyLine('The MCP gateway is off. Name tool servers under mcp.servers in the config to serve them at /mcp.')));
          logCard.hidden = true;
          return;
        }
        list.replaceChildren(h('div.backend-cards', null, servers.map(serverCard)));
        const picked = serverPick.value || params.get('server') || servers[0].name;
        serverPick.replaceChildren(...servers.map((s) => h('option', { value: s.name, text: s.name, selected: s.name === picked })));
        logCard.hidden = false;
        await loadCalls();
      } catch (e) {
        if (isAbort(e)) return;
        if (list.querySelector('.loading')) list.replaceChildren(card(null, {}, emptyLine('Could not load the MCP gateway.')));
      } finally {
        refresh.disabled = false;
      }
    }
    load();
  },
};
