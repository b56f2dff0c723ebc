// @google/genai with its defaults (only baseUrl and an API key set: API version v1) against the
// gateway: list models, get one, generate plain and streamed, count tokens. Prints one JSON object for
// tests/conformance/test_node_sdks.py to check.
import { GoogleGenAI } from "@google/genai";

const [baseUrl, model] = process.argv.slice(2);
const ai = new GoogleGenAI({ apiKey: "unused", httpOptions: { baseUrl } });

const listed = [];
const pager = await ai.models.list();
for await (const m of pager) listed.push(m.name);
const got = await ai.models.get({ model });
const plain = await ai.models.generateContent({ model, contents: "Say hello." });
let streamed = "";
for await (const chunk of await ai.models.generateContentStream({ model, contents: "Say hello." })) {
  streamed += chunk.text ?? "";
}
const counted = await ai.models.countTokens({ model, contents: "one two three four" });
let missing = null;
try {
  await ai.models.get({ model: "no-such-model" });
} catch (e) {
  missing = e.status ?? String(e);
}
console.log(JSON.stringify({ listed, got: got.name, plain: plain.text, streamed, counted: counted.totalTokens, missing }));
