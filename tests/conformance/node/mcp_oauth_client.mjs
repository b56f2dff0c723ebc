// The official MCP TypeScript SDK's own OAuth client against the gateway's /mcp, with ORY Hydra as
// the authorization server: the SDK discovers Hydra from the gateway's 401 and protected resource
// metadata, registers itself (dynamic client registration), sends the "browser" to Hydra (PKCE), and
// exchanges the code; then it lists and calls its team's tools and is refused another server's
// tool. Its access token is then made unusable mid-session: the gateway answers 401, the SDK
// refreshes the token at Hydra (refresh_token grant) and the same session goes on.
// The browser's part is done headlessly here: Hydra's redirects followed with its cookies, the
// login and consent accepted through Hydra's admin API, the team put in the access token.
// Prints one JSON object for tests/conformance/test_mcp_oauth.py to check.
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js";
import { UnauthorizedError } from "@modelcontextprotocol/sdk/client/auth.js";
import { randomBytes } from "node:crypto";

const [url, hydraAdmin, subject, team, redirectUri, allowed, other] = process.argv.slice(2);
const exchanges = [];
const logged = async (input, init) => {
  const response = await fetch(input, init);
  const target = new URL(input instanceof Request ? input.url : input.toString());
  exchanges.push([init?.method ?? "GET", `${target.origin}${target.pathname}`, response.status]);
  return response;
};

class MemoryProvider {
  constructor() {
    this.authorizationUrls = [];
  }
  get redirectUrl() {
    return redirectUri;
  }
  get clientMetadata() {
    return {
      client_name: `switchyard conformance (ts, ${subject})`,
      redirect_uris: [redirectUri],
      grant_types: ["authorization_code", "refresh_token"],
      response_types: ["code"],
      token_endpoint_auth_method: "none",
      scope: "openid offline offline_access",
      // Hydra's registration answer echoes these as "" and null when absent, which the SDK's
      // schema refuses (`client_uri` must be a URL, `contacts` an array): given, they come back.
      client_uri: "http://127.0.0.1/switchyard-conformance",
      logo_uri: "http://127.0.0.1/switchyard-conformance/logo.png",
      tos_uri: "http://127.0.0.1/switchyard-conformance/tos",
      policy_uri: "http://127.0.0.1/switchyard-conformance/policy",
      contacts: ["conformance@corp.example"],
    };
  }
  // Hydra wants a state of at least 8 characters, as any careful client sends; the SDK sends one
  // only when its provider gives it.
  state() {
    return randomBytes(16).toString("hex");
  }
  clientInformation() {
    return this.client;
  }
  saveClientInformation(client) {
    this.client = client;
  }
  tokens() {
    return this.saved;
  }
  saveTokens(tokens) {
    this.saved = tokens;
  }
  redirectToAuthorization(authorizationUrl) {
    this.authorizationUrls.push(authorizationUrl.toString());
  }
  saveCodeVerifier(verifier) {
    this.verifier = verifier;
  }
  codeVerifier() {
    return this.verifier;
  }
}

/** Hydra's admin API: PUT `path` with `body`, the URL the browser goes to next. */
async function accept(path, body) {
  const r = await fetch(`${hydraAdmin}${path}`, {
    method: "PUT",
    headers: { "content-type": "application/json" },
    body: JSON.stringify(body),
  });
  if (!r.ok) throw new Error(`PUT ${path}: ${r.status} ${await r.text()}`);
  return (await r.json()).redirect_to;
}

/** The browser: from the authorization URL to the code of the redirect to the client's redirect URI. */
async function browse(authorizationUrl) {
  const jar = new Map();
  const hop = async (at) => {
    const cookie = [...jar].map(([k, v]) => `${k}=${v}`).join("; ");
    const r = await fetch(at, { redirect: "manual", headers: cookie ? { cookie } : {} });
    for (const c of r.headers.getSetCookie()) {
      const pair = c.split(";")[0];
      const eq = pair.indexOf("=");
      jar.set(pair.slice(0, eq), pair.slice(eq + 1));
    }
    const location = r.headers.get("location");
    if (![302, 303].includes(r.status) || !location) throw new Error(`GET ${at}: ${r.status} ${await r.text()}`);
    return new URL(location, at).toString();
  };
  let at = await hop(authorizationUrl);
  const login = new URL(at).searchParams.get("login_challenge");
  if (!login) throw new Error(`no login challenge: ${authorizationUrl} went to ${at}`);
  at = await hop(await accept(`/admin/oauth2/auth/requests/login/accept?login_challenge=${login}`, { subject }));
  const consent = new URL(at).searchParams.get("consent_challenge");
  const asked = await (await fetch(`${hydraAdmin}/admin/oauth2/auth/requests/consent?consent_challenge=${consent}`)).json();
  const granted = await accept(`/admin/oauth2/auth/requests/consent/accept?consent_challenge=${consent}`, {
    grant_scope: asked.requested_scope ?? [],
    grant_access_token_audience: asked.requested_access_token_audience ?? [],
    session: { id_token: {}, access_token: { teams: [team] } },
  });
  at = await hop(granted);
  if (!at.startsWith(`${redirectUri}?`)) throw new Error(`ended at ${at}`);
  return new URL(at).searchParams.get("code");
}

const provider = new MemoryProvider();
const client = new Client({ name: "switchyard-conformance-oauth", version: "1" });
const transport = () => new StreamableHTTPClientTransport(new URL(url), { authProvider: provider, fetch: logged });
let first = transport();
try {
  await client.connect(first);
  throw new Error("connected without signing in");
} catch (e) {
  if (!(e instanceof UnauthorizedError)) throw e;
}
await first.finishAuth(await browse(provider.authorizationUrls[0]));
const connected = transport();
await client.connect(connected);
const sessionId = connected.sessionId;
const tools = (await client.listTools()).tools.map((t) => t.name);
const echo = (await client.callTool({ name: allowed, arguments: { text: "from ts" } })).content[0].text;
let refused = null;
try {
  await client.callTool({ name: other, arguments: { text: "not mine" } });
} catch (e) {
  refused = { code: e.code, message: e.message };
}
// The access token stops working: the next request's 401 makes the SDK refresh it.
const before = provider.saved.access_token;
provider.saved = { ...provider.saved, access_token: `${before.slice(0, -8)}AAAAAAAA` };
const afterRefresh = (await client.callTool({ name: allowed, arguments: { text: "after the refresh" } })).content[0]
  .text;
const out = {
  tools,
  echo,
  refused,
  afterRefresh,
  sessionId,
  sameSession: connected.sessionId === sessionId,
  newToken: provider.saved.access_token !== before,
  hadRefreshToken: Boolean(provider.saved.refresh_token),
  registered: Boolean(provider.client?.client_id),
  logins: provider.authorizationUrls.length,
  exchanges,
};
await client.close();
console.log(JSON.stringify(out));
