// Switchyard's own target server for the official MCP conformance suite
// (@modelcontextprotocol/conformance, server mode), written for this project.
//
// scripts/mcp-conformance runs the suite against this server directly and through the gateway's
// `/mcp/{server}` passthrough, and compares the two. The server speaks Streamable HTTP in its
// session-era form: `initialize` opens a session (`Mcp-Session-Id`), later POSTs answer on SSE
// streams, GET opens the server-to-client stream (resumable with Last-Event-ID), DELETE ends the
// session. It offers the tools, resources, prompts, completions and logging that the suite's server
// scenarios ask for, by the names those scenarios use.
//
//   node tests/mcp-conformance/server.mjs [PORT]      # or PORT=...; 0 (the default) picks a free port
//
// It listens on 127.0.0.1 only and prints one line, `listening on http://127.0.0.1:PORT/mcp`, on
// stdout once it accepts connections; diagnostics go to stderr. Its only dependency is
// @modelcontextprotocol/sdk, taken from tests/conformance/node (`npm ci` there installs it).

import { randomUUID } from 'node:crypto';
import http from 'node:http';
import { createRequire } from 'node:module';
import zlib from 'node:zlib';

const sdk = createRequire(new URL('../conformance/node/package.json', import.meta.url));
const { Server } = sdk('@modelcontextprotocol/sdk/server/index.js');
const { StreamableHTTPServerTransport } = sdk('@modelcontextprotocol/sdk/server/streamableHttp.js');
const mcp = sdk('@modelcontextprotocol/sdk/types.js');

const SERVER_INFO = { name: 'switchyard-conformance-target', version: '1.0.0' };
const SSE_RETRY_MS = 500; // the `retry:` a resumable stream suggests to clients that poll
const MAX_BODY_BYTES = 4 * 1024 * 1024;
const LOCAL_HOSTNAMES = new Set(['localhost', '127.0.0.1', '[::1]']);
const LOG_LEVELS = ['debug', 'info', 'notice', 'warning', 'error', 'critical', 'alert', 'emergency'];
const RESOURCE_NOT_FOUND = -32002;

const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));
const text = (value) => ({ type: 'text', text: value });
const invalidParams = (message) => new mcp.McpError(mcp.ErrorCode.InvalidParams, message);

// --- media, generated rather than pasted in --------------------------------------------------------------

// A PNG of one pixel of the given colour (8-bit RGB, no interlace).
function onePixelPng([r, g, b]) {
  const chunk = (type, data) => {
    const body = Buffer.concat([Buffer.from(type, 'ascii'), data]);
    const frame = Buffer.alloc(8 + body.length);
    frame.writeUInt32BE(data.length, 0);
    body.copy(frame, 4);
    frame.writeUInt32BE(zlib.crc32(body), 4 + body.length);
    return frame;
  };
  const header = Buffer.alloc(13);
  header.writeUInt32BE(1, 0); // width
  header.writeUInt32BE(1, 4); // height
  header[8] = 8; // bits per sample
  header[9] = 2; // colour type: truecolour
  const scanline = Buffer.from([0, r, g, b]); // filter type 0, then the pixel
  return Buffer.concat([
    Buffer.from([0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a]),
    chunk('IHDR', header),
    chunk('IDAT', zlib.deflateSync(scanline)),
    chunk('IEND', Buffer.alloc(0)),
  ]).toString('base64');
}

// A short mono 8-bit PCM WAV: a tenth of a second of a 440 Hz tone at 8 kHz.
function shortToneWav() {
  const rate = 8000;
  const samples = Buffer.alloc(rate / 10);
  for (let i = 0; i < samples.length; i++) samples[i] = 128 + Math.round(60 * Math.sin((2 * Math.PI * 440 * i) / rate));
  const header = Buffer.alloc(44);
  header.write('RIFF', 0, 'ascii');
  header.writeUInt32LE(36 + samples.length, 4);
  header.write('WAVEfmt ', 8, 'ascii');
  header.writeUInt32LE(16, 16); // fmt chunk size
  header.writeUInt16LE(1, 20); // PCM
  header.writeUInt16LE(1, 22); // channels
  header.writeUInt32LE(rate, 24);
  header.writeUInt32LE(rate, 28); // bytes per second
  header.writeUInt16LE(1, 32); // block align
  header.writeUInt16LE(8, 34); // bits per sample
  header.write('data', 36, 'ascii');
  header.writeUInt32LE(samples.length, 40);
  return Buffer.concat([header, samples]).toString('base64');
}

const PNG = onePixelPng([220, 30, 30]);
const WAV = shortToneWav();
const image = () => ({ type: 'image', data: PNG, mimeType: 'image/png' });

// --- what the server offers ------------------------------------------------------------------------------

const NO_ARGS = { type: 'object', properties: {} };
const stringArgs = (...names) => ({
  type: 'object',
  properties: Object.fromEntries(names.map(([name, description]) => [name, { type: 'string', description }])),
  required: names.map(([name]) => name),
});

// Elicitation forms: one default per primitive type (SEP-1034), and every enum shape (SEP-1330).
const DEFAULTS_FORM = {
  type: 'object',
  properties: {
    name: { type: 'string', title: 'Name', default: 'John Doe' },
    age: { type: 'integer', title: 'Age', minimum: 0, default: 30 },
    score: { type: 'number', title: 'Score', default: 95.5 },
    status: { type: 'string', title: 'Status', enum: ['active', 'inactive', 'pending'], default: 'active' },
    verified: { type: 'boolean', title: 'Verified', default: true },
  },
};
const choices = (prefix, titles) => titles.map((title, i) => ({ const: `${prefix}${i + 1}`, title }));
const ENUMS_FORM = {
  type: 'object',
  properties: {
    untitledSingle: { type: 'string', title: 'Pick one', enum: ['option1', 'option2', 'option3'] },
    titledSingle: { type: 'string', title: 'Pick one (titled)', oneOf: choices('value', ['First Option', 'Second Option', 'Third Option']) },
    legacyEnum: {
      type: 'string',
      title: 'Pick one (enumNames)',
      enum: ['opt1', 'opt2', 'opt3'],
      enumNames: ['Option One', 'Option Two', 'Option Three'],
    },
    untitledMulti: { type: 'array', title: 'Pick some', items: { type: 'string', enum: ['option1', 'option2', 'option3'] } },
    titledMulti: { type: 'array', title: 'Pick some (titled)', items: { anyOf: choices('value', ['First Choice', 'Second Choice', 'Third Choice']) } },
  },
};

// Each tool: its listing, and `run(args, ctx)` returning a CallToolResult. `ctx` is the session's
// view of the call in progress (see callContext).
const TOOLS = [
  { name: 'test_simple_text', description: 'Answers with one text block', run: () => ({ content: [text('This is a simple text response for testing.')] }) },
  { name: 'test_image_content', description: 'Answers with a PNG image', run: () => ({ content: [image()] }) },
  { name: 'test_audio_content', description: 'Answers with a WAV clip', run: () => ({ content: [{ type: 'audio', data: WAV, mimeType: 'audio/wav' }] }) },
  {
    name: 'test_embedded_resource',
    description: 'Answers with an embedded text resource',
    run: () => ({
      content: [{ type: 'resource', resource: { uri: 'test://embedded-resource', mimeType: 'text/plain', text: 'This is an embedded resource content.' } }],
    }),
  },
  {
    name: 'test_multiple_content_types',
    description: 'Answers with text, an image and an embedded resource',
    run: () => ({
      content: [
        text('Multiple content types test:'),
        image(),
        { type: 'resource', resource: { uri: 'test://mixed-content-resource', mimeType: 'application/json', text: JSON.stringify({ test: 'data', value: 123 }) } },
      ],
    }),
  },
  {
    name: 'test_tool_with_logging',
    description: 'Sends three info log messages while it runs',
    async run(_args, ctx) {
      await ctx.log('info', 'Tool execution started');
      await sleep(50);
      await ctx.log('info', 'Tool processing data');
      await sleep(50);
      await ctx.log('info', 'Tool execution completed');
      return { content: [text('Logged three messages')] };
    },
  },
  {
    name: 'test_tool_with_progress',
    description: 'Reports progress 0, 50 and 100 of 100 when given a progress token',
    async run(_args, ctx) {
      for (const done of [0, 50, 100]) {
        await ctx.progress(done, 100);
        if (done < 100) await sleep(50);
      }
      return { content: [text('Finished with progress reported')] };
    },
  },
  {
    name: 'test_error_handling',
    description: 'Always fails, as a tool error (isError)',
    run: () => ({ isError: true, content: [text('This tool intentionally returns an error for testing')] }),
  },
  {
    name: 'test_sampling',
    description: 'Asks the client to sample an LLM completion of the prompt',
    inputSchema: stringArgs(['prompt', 'The prompt for the LLM']),
    async run({ prompt }, ctx) {
      if (!ctx.client?.sampling) return { isError: true, content: [text('The client does not offer sampling')] };
      const reply = await ctx.ask(
        { method: 'sampling/createMessage', params: { messages: [{ role: 'user', content: text(String(prompt)) }], maxTokens: 100 } },
        mcp.CreateMessageResultSchema,
      );
      const said = reply.content?.type === 'text' ? reply.content.text : JSON.stringify(reply.content);
      return { content: [text(`LLM response: ${said}`)] };
    },
  },
  {
    name: 'test_elicitation',
    description: 'Asks the user, through the client, for a username and an email address',
    inputSchema: stringArgs(['message', 'What to tell the user']),
    async run({ message }, ctx) {
      const form = {
        type: 'object',
        properties: {
          username: { type: 'string', description: "User's response" },
          email: { type: 'string', description: "User's email address" },
        },
        required: ['username', 'email'],
      };
      return elicit(ctx, String(message), form, 'User response');
    },
  },
  {
    name: 'test_elicitation_sep1034_defaults',
    description: 'Elicits a form whose fields all carry defaults (SEP-1034)',
    run: (_args, ctx) => elicit(ctx, 'Confirm or change these values', DEFAULTS_FORM, 'Elicitation completed'),
  },
  {
    name: 'test_elicitation_sep1330_enums',
    description: 'Elicits a form with every enum shape (SEP-1330)',
    run: (_args, ctx) => elicit(ctx, 'Make your choices', ENUMS_FORM, 'Elicitation completed'),
  },
  {
    name: 'json_schema_2020_12_tool',
    description: 'Declares its input with JSON Schema 2020-12 keywords ($schema, $defs, $ref)',
    inputSchema: {
      $schema: 'https://json-schema.org/draft/2020-12/schema',
      type: 'object',
      $defs: { address: { type: 'object', properties: { street: { type: 'string' }, city: { type: 'string' } } } },
      properties: { name: { type: 'string' }, address: { $ref: '#/$defs/address' } },
      additionalProperties: false,
    },
    run: (args) => ({ content: [text(`Received ${JSON.stringify(args ?? {})}`)] }),
  },
  {
    name: 'test_reconnection',
    description: 'Closes its SSE stream mid-call (when the client can resume) and answers after it reconnects',
    async run(_args, ctx) {
      await sleep(100);
      if (ctx.closeStream) {
        ctx.closeStream();
        await sleep(SSE_RETRY_MS + 200); // the answer is stored and replayed on the client's GET
      }
      return { content: [text('Reconnection test completed')] };
    },
  },
];
const TOOL_BY_NAME = new Map(TOOLS.map((tool) => [tool.name, tool]));

async function elicit(ctx, message, requestedSchema, label) {
  if (!ctx.client?.elicitation) return { isError: true, content: [text('The client does not offer elicitation')] };
  const answer = await ctx.ask({ method: 'elicitation/create', params: { message, requestedSchema } }, mcp.ElicitResultSchema);
  return { content: [text(`${label}: action=${answer.action}, content=${JSON.stringify(answer.content ?? {})}`)] };
}

const RESOURCES = [
  { uri: 'test://static-text', name: 'static-text', description: 'A fixed text resource', mimeType: 'text/plain', text: 'This is the content of the static text resource.' },
  { uri: 'test://static-binary', name: 'static-binary', description: 'A fixed binary resource (a PNG image)', mimeType: 'image/png', blob: PNG },
  { uri: 'test://watched-resource', name: 'watched-resource', description: 'A text resource to subscribe to', mimeType: 'text/plain', text: 'Watched resource content.' },
];
const TEMPLATE = { uriTemplate: 'test://template/{id}/data', name: 'template-data', description: 'JSON data for any id', mimeType: 'application/json' };
const TEMPLATE_URI = /^test:\/\/template\/([^/]+)\/data$/;

const PROMPTS = [
  { name: 'test_simple_prompt', description: 'A prompt without arguments', messages: () => [{ role: 'user', content: text('This is a simple prompt for testing.') }] },
  {
    name: 'test_prompt_with_arguments',
    description: 'A prompt with two arguments',
    arguments: [
      { name: 'arg1', description: 'First test argument', required: true },
      { name: 'arg2', description: 'Second test argument', required: true },
    ],
    messages: ({ arg1, arg2 }) => [{ role: 'user', content: text(`Prompt with arguments: arg1='${arg1}', arg2='${arg2}'`) }],
  },
  {
    name: 'test_prompt_with_embedded_resource',
    description: 'A prompt that embeds a resource',
    arguments: [{ name: 'resourceUri', description: 'URI of the resource to embed', required: true }],
    messages: ({ resourceUri }) => [
      { role: 'user', content: { type: 'resource', resource: { uri: resourceUri, mimeType: 'text/plain', text: 'Embedded resource content for testing.' } } },
      { role: 'user', content: text('Please process the embedded resource above.') },
    ],
  },
  {
    name: 'test_prompt_with_image',
    description: 'A prompt that carries an image',
    messages: () => [{ role: 'user', content: image() }, { role: 'user', content: text('Please analyze the image above.') }],
  },
];
const PROMPT_BY_NAME = new Map(PROMPTS.map((prompt) => [prompt.name, prompt]));

// Completion candidates, by argument name (prompt arguments and the template's `id`).
const COMPLETIONS = {
  arg1: ['test', 'testing', 'tested', 'paris', 'park', 'party'],
  arg2: ['alpha', 'beta', 'gamma'],
  resourceUri: ['test://static-text', 'test://static-binary', 'test://watched-resource'],
  id: ['1', '2', '3', '42', '123'],
};

// --- one MCP session -------------------------------------------------------------------------------------

function newSession() {
  const server = new Server(SERVER_INFO, {
    capabilities: { tools: {}, resources: { subscribe: true }, prompts: {}, logging: {}, completions: {} },
    instructions: 'Conformance target for the Switchyard MCP gateway.',
  });
  let logLevel = 'debug';
  const subscriptions = new Set();

  // What a tool sees of its call: notifications and requests ride the call's own SSE stream.
  const callContext = (request, extra) => ({
    client: server.getClientCapabilities(),
    closeStream: extra.closeSSEStream,
    ask: (req, schema) => extra.sendRequest(req, schema),
    log: async (level, data) => {
      if (LOG_LEVELS.indexOf(level) < LOG_LEVELS.indexOf(logLevel)) return;
      await extra.sendNotification({ method: 'notifications/message', params: { level, logger: 'conformance-target', data } });
    },
    progress: async (progress, total) => {
      const progressToken = request.params._meta?.progressToken;
      if (progressToken === undefined) return;
      await extra.sendNotification({ method: 'notifications/progress', params: { progressToken, progress, total } });
    },
  });

  server.setRequestHandler(mcp.SetLevelRequestSchema, async (request) => {
    logLevel = request.params.level;
    return {};
  });

  server.setRequestHandler(mcp.ListToolsRequestSchema, async () => ({
    tools: TOOLS.map(({ name, description, inputSchema }) => ({ name, description, inputSchema: inputSchema ?? NO_ARGS })),
  }));
  server.setRequestHandler(mcp.CallToolRequestSchema, async (request, extra) => {
    const tool = TOOL_BY_NAME.get(request.params.name);
    if (!tool) throw invalidParams(`Unknown tool: ${request.params.name}`);
    const args = request.params.arguments ?? {};
    for (const name of tool.inputSchema?.required ?? []) {
      if (typeof args[name] !== 'string') throw invalidParams(`${tool.name}: the string argument '${name}' is required`);
    }
    return tool.run(args, callContext(request, extra));
  });

  server.setRequestHandler(mcp.ListResourcesRequestSchema, async () => ({
    resources: RESOURCES.map(({ uri, name, description, mimeType }) => ({ uri, name, description, mimeType })),
  }));
  server.setRequestHandler(mcp.ListResourceTemplatesRequestSchema, async () => ({ resourceTemplates: [TEMPLATE] }));
  server.setRequestHandler(mcp.ReadResourceRequestSchema, async (request) => {
    const { uri } = request.params;
    const fixed = RESOURCES.find((resource) => resource.uri === uri);
    if (fixed) {
      const { text: body, blob, mimeType } = fixed;
      return { contents: [blob ? { uri, mimeType, blob } : { uri, mimeType, text: body }] };
    }
    const match = TEMPLATE_URI.exec(uri);
    if (match) {
      const id = decodeURIComponent(match[1]);
      return { contents: [{ uri, mimeType: 'application/json', text: JSON.stringify({ id, templateTest: true, data: `Data for ID: ${id}` }) }] };
    }
    throw new mcp.McpError(RESOURCE_NOT_FOUND, `Resource not found: ${uri}`, { uri });
  });
  server.setRequestHandler(mcp.SubscribeRequestSchema, async (request) => {
    subscriptions.add(request.params.uri);
    return {};
  });
  server.setRequestHandler(mcp.UnsubscribeRequestSchema, async (request) => {
    subscriptions.delete(request.params.uri);
    return {};
  });

  server.setRequestHandler(mcp.ListPromptsRequestSchema, async () => ({
    prompts: PROMPTS.map(({ name, description, arguments: args }) => ({ name, description, ...(args && { arguments: args }) })),
  }));
  server.setRequestHandler(mcp.GetPromptRequestSchema, async (request) => {
    const prompt = PROMPT_BY_NAME.get(request.params.name);
    if (!prompt) throw invalidParams(`Unknown prompt: ${request.params.name}`);
    const args = request.params.arguments ?? {};
    const missing = (prompt.arguments ?? []).filter((arg) => arg.required && args[arg.name] === undefined);
    if (missing.length) throw invalidParams(`${prompt.name}: missing argument(s) ${missing.map((arg) => arg.name).join(', ')}`);
    return { description: prompt.description, messages: prompt.messages(args) };
  });

  server.setRequestHandler(mcp.CompleteRequestSchema, async (request) => {
    const { ref, argument } = request.params;
    const known = ref.type === 'ref/prompt' ? PROMPT_BY_NAME.has(ref.name) : ref.uri === TEMPLATE.uriTemplate;
    const candidates = known ? (COMPLETIONS[argument.name] ?? []) : [];
    const values = candidates.filter((value) => value.startsWith(argument.value ?? ''));
    return { completion: { values, total: values.length, hasMore: false } };
  });

  return server;
}

// Resumability for SSE streams: every message sent on a stream is kept, in order, so that a client
// reconnecting with Last-Event-ID gets what it missed. Event ids are `<stream id>/<sequence>`.
class MemoryEventStore {
  #streams = new Map(); // stream id -> [{ id, message }]
  #sequence = 0;

  async storeEvent(streamId, message) {
    const id = `${streamId}/${++this.#sequence}`;
    if (!this.#streams.has(streamId)) this.#streams.set(streamId, []);
    this.#streams.get(streamId).push({ id, message });
    return id;
  }

  async getStreamIdForEventId(eventId) {
    const streamId = eventId.slice(0, eventId.lastIndexOf('/'));
    return this.#streams.has(streamId) ? streamId : undefined;
  }

  async replayEventsAfter(lastEventId, { send }) {
    const streamId = await this.getStreamIdForEventId(lastEventId);
    if (streamId === undefined) throw new Error(`Unknown event id: ${lastEventId}`);
    const events = this.#streams.get(streamId);
    const from = events.findIndex((event) => event.id === lastEventId) + 1;
    for (const { id, message } of events.slice(from)) {
      if ('jsonrpc' in message) await send(id, message); // priming events carry no message
    }
    return streamId;
  }
}

// --- HTTP ------------------------------------------------------------------------------------------------

const transports = new Map(); // session id -> StreamableHTTPServerTransport

function replyError(res, status, code, message) {
  if (res.headersSent) return res.end();
  res.writeHead(status, { 'Content-Type': 'application/json' });
  res.end(JSON.stringify({ jsonrpc: '2.0', error: { code, message }, id: null }));
}

// DNS rebinding protection: only local names in Host, and in Origin when there is one.
function isLocal(req) {
  const hostnameOf = (url) => {
    try {
      return new URL(url).hostname.toLowerCase();
    } catch {
      return undefined;
    }
  };
  if (!LOCAL_HOSTNAMES.has(hostnameOf(`http://${req.headers.host ?? ''}`))) return false;
  return req.headers.origin === undefined || LOCAL_HOSTNAMES.has(hostnameOf(req.headers.origin));
}

async function readJson(req) {
  const parts = [];
  let size = 0;
  for await (const part of req) {
    size += part.length;
    if (size > MAX_BODY_BYTES) throw Object.assign(new Error('request body too large'), { status: 413 });
    parts.push(part);
  }
  try {
    return JSON.parse(Buffer.concat(parts).toString('utf8'));
  } catch {
    throw Object.assign(new Error('Parse error: the body is not JSON'), { status: 400, code: mcp.ErrorCode.ParseError });
  }
}

async function openSession(req, res, body) {
  const transport = new StreamableHTTPServerTransport({
    sessionIdGenerator: randomUUID,
    eventStore: new MemoryEventStore(),
    retryInterval: SSE_RETRY_MS,
    onsessioninitialized: (id) => transports.set(id, transport),
    onsessionclosed: (id) => transports.delete(id),
  });
  transport.onclose = () => transport.sessionId && transports.delete(transport.sessionId);
  await newSession().connect(transport);
  await transport.handleRequest(req, res, body);
}

async function handle(req, res) {
  const { pathname } = new URL(req.url ?? '/', 'http://localhost');
  if (pathname !== '/mcp') return replyError(res, 404, -32601, `Not found: ${pathname} (the MCP endpoint is /mcp)`);
  if (!isLocal(req)) return replyError(res, 403, -32000, 'Forbidden: Host and Origin must name this machine');
  if (!['GET', 'POST', 'DELETE'].includes(req.method)) {
    res.setHeader('Allow', 'GET, POST, DELETE');
    return replyError(res, 405, -32000, `Method not allowed: ${req.method}`);
  }
  const body = req.method === 'POST' ? await readJson(req) : undefined;
  const sessionId = req.headers['mcp-session-id'];
  if (sessionId !== undefined) {
    const transport = transports.get(sessionId);
    if (!transport) return replyError(res, 404, -32001, 'Session not found');
    return transport.handleRequest(req, res, body);
  }
  const opensSession = req.method === 'POST' && (Array.isArray(body) ? body.some(mcp.isInitializeRequest) : mcp.isInitializeRequest(body));
  if (!opensSession) return replyError(res, 400, -32000, 'Bad Request: no Mcp-Session-Id, and not an initialize request');
  return openSession(req, res, body);
}

const httpServer = http.createServer((req, res) => {
  handle(req, res).catch((error) => {
    if (!error.status) console.error('conformance target: request failed:', error);
    replyError(res, error.status ?? 500, error.code ?? mcp.ErrorCode.InternalError, error.message);
  });
});

const port = Number(process.argv[2] ?? process.env.PORT ?? 0);
httpServer.listen(port, '127.0.0.1', () => {
  console.log(`listening on http://127.0.0.1:${httpServer.address().port}/mcp`);
});

async function shutdown() {
  httpServer.close();
  await Promise.allSettled([...transports.values()].map((transport) => transport.close()));
  process.exit(0);
}
process.on('SIGTERM', shutdown);
process.on('SIGINT', shutdown);
