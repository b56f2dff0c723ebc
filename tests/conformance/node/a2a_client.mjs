// The official A2A JavaScript SDK (@a2a-js/sdk) as a client of an agent behind the gateway: it
// resolves the agent's card from the gateway, sends a message, and follows a streamed task to its
// end, all with the key given. Prints one JSON object for tests/a2a/test_a2a.py to check.
import { randomUUID } from "node:crypto";
import { Role } from "@a2a-js/sdk";
import { ClientFactory, ClientFactoryOptions, DefaultAgentCardResolver, JsonRpcTransportFactory } from "@a2a-js/sdk/client";

const [base, key] = process.argv.slice(2);
const authed = (url, init = {}) => {
  const headers = new Headers(init.headers);
  headers.set("Authorization", `Bearer ${key}`);
  return fetch(url, { ...init, headers });
};
const resolver = new DefaultAgentCardResolver({ fetchImpl: authed });
const card = await resolver.resolve(base);
const factory = new ClientFactory(
  ClientFactoryOptions.createFrom(ClientFactoryOptions.default, {
    transports: [new JsonRpcTransportFactory({ fetchImpl: authed })],
    cardResolver: resolver,
  }),
);
const client = await factory.createFromAgentCard(card);
const message = (text) => ({
  message: { messageId: randomUUID(), role: Role.ROLE_USER, parts: [{ content: { $case: "text", value: text } }] },
});
const textOf = (parts) => (parts ?? []).map((p) => p.content?.value ?? p.text ?? "").join("");

const hello = await client.sendMessage(message("hello from js"));
const events = [];
let task = null;
for await (const event of client.sendMessageStream(message("count 3"))) {
  const { $case, value } = event.payload ?? {};
  if ($case === "task") task = value.id;
  if ($case === "statusUpdate") task = value.taskId;
  events.push([$case, value?.status?.state ?? value?.artifact?.artifactId ?? null]);
}
console.log(
  JSON.stringify({
    interfaces: (card.supportedInterfaces ?? []).map((i) => i.url),
    hello: textOf(hello.parts ?? hello.message?.parts ?? hello.status?.message?.parts),
    events,
    task,
  }),
);
