/* Switchyard console · Playground: streams a chat completion through the gateway. */
import { h } from '../lib/dom.js';
import { DASH, isNum, fmt, numField } from '../lib/format.js';
import { showError, ApiError, api, isAbort } from '../lib/api.js';
import { card } from '../lib/components.js';

export const playground = {
  title: 'Playground',
  subtitle: 'Try a model through the gateway, streamed',
  mount(root, params, signal) {
    const modelSel = h('select', { name: 'model' }, h('option', { value: '', text: 'Loading models…' }));
    const system = h('textarea', { name: 'system', rows: '3', placeholder: 'Optional system prompt' });
    const prompt = h('textarea', { name: 'prompt', rows: '8', placeholder: 'Ask something…', required: true });
    const temp = h('input', { name: 'temperature', type: 'number', min: '0', max: '2', step: '0.1', placeholder: 'default' });
    const maxTok = h('input', { name: 'max_tokens', type: 'number', min: '1', step: '1', placeholder: 'default' });
    const send = h('button.btn.primary', { type: 'submit', 'data-testid': 'send', text: 'Send' });
    const stop = h('button.btn', { type: 'button', 'data-testid': 'stop', text: 'Stop', hidden: true });
    const field = (label, input) => h('label.field', null, label, input);
    const form = h('form', { autocomplete: 'off' },
      field('Model', modelSel),
      field('System', system),
      field('Prompt', prompt),
      h('div.two', null, field('Temperature', temp), field('Max tokens', maxTok)),
      h('div.row', null, send, stop, h('span.muted.small', null, h('span.kbd', { text: 'Ctrl' }), ' + ', h('span.kbd', { text: 'Enter' }), ' to send')));

    const answer = h('div.answer.placeholder', { 'data-testid': 'answer', 'aria-live': 'polite', text: 'The answer streams here.' });
    const stat = (label) => { const b = h('b', { text: DASH }); return { el: h('span', null, `${label} `, b), b }; };
    const S = { ttft: stat('TTFT'), total: stat('Total'), tin: stat('Tokens in'), tout: stat('out'), rate: stat('Speed'), model: stat('Served by') };
    const stats = h('div.answer-stats', { 'data-testid': 'answer-stats' }, Object.values(S).map((s) => s.el));
    const statusBadge = h('span.badge', { hidden: true });

    root.replaceChildren(h('div.play', null,
      card('Request', {}, h('div.card-body', null, form)),
      h('section.card', null,
        h('div.card-head', null, h('h2', { text: 'Answer' }), h('div.actions', null, statusBadge)),
        h('div.card-body.flush', null, answer), stats)));

    prompt.addEventListener('keydown', (e) => {
      if (e.key === 'Enter' && (e.ctrlKey || e.metaKey)) { e.preventDefault(); form.requestSubmit(); }
    });

    let streamCtl = null;
    const setStatus = (text, cls) => {
      statusBadge.hidden = !text;
      statusBadge.textContent = text || '';
      statusBadge.className = `badge ${cls || ''}`;
    };

    async function loadModels() {
      try {
        const d = await api('/ui/api/models', { signal });
        const ids = (Array.isArray(d.data) ? d.data : []).map((m) => m && m.id).filter(Boolean);
        if (!ids.length) {
          modelSel.replaceChildren(h('option', { value: '', text: 'No models available' }));
          send.disabled = true;
          return;
        }
        modelSel.replaceChildren(...ids.map((id) => h('option', { value: id, text: id })));
      } catch (e) {
        if (!isAbort(e)) modelSel.replaceChildren(h('option', { value: '', text: 'Could not load models' }));
      }
    }

    form.addEventListener('submit', async (ev) => {
      ev.preventDefault();
      if (streamCtl) return;
      const model = modelSel.value;
      const text = prompt.value.trim();
      if (!model || !text) { (model ? prompt : modelSel).focus(); return; }
      const messages = [];
      if (system.value.trim()) messages.push({ role: 'system', content: system.value });
      messages.push({ role: 'user', content: prompt.value });
      const body = { model, messages, stream: true, stream_options: { include_usage: true } };
      const t = numField(temp.value, false);
      if (isNum(t)) body.temperature = t;
      const mt = numField(maxTok.value, true);
      if (isNum(mt)) body.max_tokens = mt;

      // Reset the output; text goes into one Text node we append to.
      const textNode = document.createTextNode('');
      const caret = h('span.caret');
      answer.classList.remove('placeholder');
      answer.replaceChildren(textNode, caret);
      for (const s of Object.values(S)) s.b.textContent = DASH;
      setStatus('Streaming…', 'info');
      send.disabled = true;
      stop.hidden = false;

      streamCtl = new AbortController();
      const onLeave = () => streamCtl && streamCtl.abort();
      signal.addEventListener('abort', onLeave);
      const started = performance.now();
      let firstAt = null;
      let served = null;
      let usage = null;
      let finish = null;
      const showTimes = () => {
        const total = performance.now() - started;
        S.total.b.textContent = fmt.ms(total);
        if (usage && isNum(usage.completion_tokens) && firstAt != null) {
          const genS = (total - (firstAt - started)) / 1000;
          S.rate.b.textContent = genS > 0 ? `${fmt.num(usage.completion_tokens / genS, 1)} tokens/s` : DASH;
        }
      };
      try {
        const res = await api('/ui/api/chat/completions', { method: 'POST', body, signal: streamCtl.signal, raw: true });
        const reader = res.body.getReader();
        const decoder = new TextDecoder();
        let buf = '';
        let done = false;
        const handle = (event) => {
          // One SSE event: join its data: lines.
          const data = event.split(/\r?\n/).filter((l) => l.startsWith('data:')).map((l) => l.slice(5).replace(/^ /, '')).join('\n');
          if (!data) return;
          if (data === '[DONE]') { done = true; return; }
          let chunk;
          try { chunk = JSON.parse(data); } catch (_) { return; }
          if (chunk.error) throw new ApiError(chunk.error.message || String(chunk.error), 0);
          if (chunk.model && !served) { served = chunk.model; S.model.b.textContent = served; }
          if (chunk.usage) {
            usage = chunk.usage;
            S.tin.b.textContent = fmt.int(usage.prompt_tokens);
            S.tout.b.textContent = fmt.int(usage.completion_tokens);
          }
          const choice = Array.isArray(chunk.choices) ? chunk.choices[0] : null;
          const delta = choice && choice.delta && choice.delta.content;
          if (delta) {
            if (firstAt == null) { firstAt = performance.now(); S.ttft.b.textContent = fmt.ms(firstAt - started); }
            textNode.appendData(delta);
            answer.scrollTop = answer.scrollHeight;
          }
          if (choice && choice.finish_reason) finish = choice.finish_reason;
        };
        while (!done) {
          const { value, done: eof } = await reader.read();
          if (eof) break;
          buf += decoder.decode(value, { stream: true });
          let m;
          while (!done && (m = /\r?\n\r?\n/.exec(buf))) {
            const event = buf.slice(0, m.index);
            buf = buf.slice(m.index + m[0].length);
            handle(event);
          }
        }
        if (!done && buf.trim()) handle(buf);
        if (done) reader.cancel().catch(() => {});
        showTimes();
        setStatus(finish === 'length' ? 'Stopped: max tokens' : 'Done', finish === 'length' ? 'warn' : 'ok');
        if (!textNode.data) answer.append(h('span.muted', { text: '(empty answer)' }));
      } catch (e) {
        showTimes();
        if (isAbort(e)) setStatus(signal.aborted ? '' : 'Stopped', 'warn');
        else {
          // api() already showed HTTP errors; this covers errors inside the stream and dropped connections.
          showError(e.message);
          setStatus('Failed', 'bad');
          if (!textNode.data) answer.append(h('span.form-error', { text: e.message }));
        }
      } finally {
        caret.remove();
        signal.removeEventListener('abort', onLeave);
        streamCtl = null;
        send.disabled = false;
        stop.hidden = true;
      }
    });

    stop.addEventListener('click', () => { if (streamCtl) streamCtl.abort(); });
    loadModels();
    return () => { if (streamCtl) streamCtl.abort(); };
  },
};
