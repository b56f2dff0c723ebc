// The official MCP TypeScript SDK as a client of the gateway: initialize, list and call tools,
// answer a server's sampling, elicitation and roots requests, take its log messages, on the URL
// given (/mcp/{server} or /mcp) with the key given. Prints one JSON object for
// tests/conformance/test_node_sdks.py to check.
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js";
import {
  CreateMessageRequestSchema,
  ElicitRequestSchema,
  ListRootsRequestSchema,
  LoggingMessageNotificationSchema,
} from "@modelcontextprotocol/sdk/types.js";

const [url, key, prefix = ""] = process.argv.slice(2);
const transport = new StreamableHTTPClientTransport(new URL(url), {
  requestInit: { headers: { Authorization: `Bearer ${key}` } },
});
const client = new Client(
  { name: "switchyard-conformance", version: "1" },
  { capabilities: { sampling: {}, elicitation: {}, roots: { listChanged: true } } },
);
const logs = [];
client.setRequestHandler(CreateMessageRequestSchema, async (req) => ({
  role: "assistant",
  content: { type: "text", text: `ts answer to ${req.params.messages[0].content.text}` },
  model: "ts-sdk-model",
}));
client.setRequestHandler(ElicitRequestSchema, async () => ({ action: "accept", content: { name: "Grace" } }));
client.setRequestHandler(ListRootsRequestSchema, async () => ({ roots: [{ uri: "file:///ts", name: "ts" }] }));
client.setNotificationHandler(LoggingMessageNotificationSchema, (n) => logs.push(n.params.logger));

await client.connect(transport);
const server = client.getServerVersion();
const tools = (await client.listTools()).tools.map((t) => t.name);
await client.setLoggingLevel("debug");
const text = async (name, args) => (await client.callTool({ name: prefix + name, arguments: args })).content[0].text;
const out = {
  server: server?.name,
  sessionId: transport.sessionId ?? null,
  tools: tools.length,
  echo: await text("echo", { text: "from ts" }),
  sample: await text("sample", { prompt: "ts?" }),
  elicit: await text("elicit", {}),
  roots: await text("roots", {}),
  log: await text("log", { text: "ts log" }),
  logs,
};
await client.close();
console.log(JSON.stringify(out));
