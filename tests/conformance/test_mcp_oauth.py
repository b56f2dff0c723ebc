"""The official MCP Python SDK's own OAuth client (`mcp.client.auth.OAuthClientProvider`) against `/mcp`, with
ORY Hydra (scripts/hydra, started by scripts/test, which passes HYDRA_ISSUER and HYDRA_ADMIN_URL) as the
authorization server: an MCP client completes OAuth and sees only its team's tools.

The SDK does everything an MCP client does by the authorization specification: its first request to `/mcp` gets
401 with `WWW-Authenticate: Bearer resource_metadata=...`; it reads the gateway's protected resource metadata
(RFC 9728), which names Hydra as the authorization server; it finds Hydra's metadata (no RFC 8414
`/.well-known/oauth-authorization-server`, so the OpenID discovery document), sends the "browser" to Hydra's
authorization endpoint (PKCE S256, `resource` = the gateway's `/mcp`), exchanges the code at the token endpoint and
retries `/mcp` with Hydra's JWT access token. The browser's part is done here headlessly: the redirect handler
follows Hydra's redirects with a cookie jar and accepts the login and consent through Hydra's admin API (as
tests/sso/hydra_helper.py does), putting `{"teams": [<team>]}` in the access token's session; the callback handler
returns the code and state of the final redirect to the client's redirect URI, which is never fetched.

Hydra as scripts/hydra runs it has dynamic client registration off (its discovery document names no
`registration_endpoint`; `POST /oauth2/register` answers 404 "Dynamic registration is not enabled."), so the client
is registered beforehand through Hydra's admin API and handed to the SDK in its token storage, the SDK's path for a
pre-registered client. The `dynamic` case leaves the storage empty so that the SDK registers the client itself
(RFC 7591); it runs when Hydra's discovery document names a `registration_endpoint`, which takes both
`oidc.dynamic_client_registration.enabled: true` and `webfinger.oidc_discovery.client_registration_url:
<issuer>/oauth2/register` in Hydra's config (without the second, Hydra accepts registrations but does not advertise
them, and the SDK falls back to `/register` on the gateway's origin). Hydra ignores the RFC 8707 `resource`
parameter the SDK sends (the token's `aud` stays empty), so the gateway's issuer entry has `audiences: []`.

The gateway has two mock MCP servers, `files` and `search`; team `files-team` may use server `files` only
(`mcp_servers`), team `echo-team` the one tool `search__echo` (`mcp_tools`). The token's `teams` claim names the team
(`team_claim: teams`), whose allow-lists decide what the client is shown and may call.
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path
from typing import Iterator
from urllib.parse import parse_qs, urljoin, urlsplit

import anyio
import httpx
import pytest
from mcp import ClientSession
from mcp.client.auth import OAuthClientProvider
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.auth import OAuthClientInformationFull, OAuthClientMetadata, OAuthToken
from mcp.shared.exceptions import McpError

from node_sdk import run_node
from procs import Proc, start

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "sso"))
from hydra_helper import Hydra, decode_jwt  # noqa: E402

MASTER = "sk-mcp-oauth-master"
SUBJECT = "alice.smith@corp.example"
REDIRECT_URI = "http://127.0.0.1:9/callback"  # never fetched: the code is read from Hydra's redirect to it
TEAMS = {
    "files-team": {"mcp_servers": ["files"]},
    "echo-team": {"mcp_tools": ["search__echo"]},
}

pytestmark = pytest.mark.skipif(
    not os.environ.get("HYDRA_ISSUER"), reason="needs ORY Hydra (scripts/test starts it: scripts/hydra start)"
)


@pytest.fixture(scope="module")
def oauth_stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict]:
    hydra = Hydra()
    log_dir = tmp_path_factory.mktemp("mcp-oauth")
    procs: list[Proc] = []
    try:
        files = start("mcp-oauth-files", ["mock-mcp", "--listen", "127.0.0.1:0"], log_dir)
        procs.append(files)
        search = start("mcp-oauth-search", ["mock-mcp", "--listen", "127.0.0.1:0", "--sse"], log_dir)
        procs.append(search)
        data = log_dir / "gateway-data"
        data.mkdir()
        config = log_dir / "gateway.yaml"
        config.write_text(
            "listen: 127.0.0.1:0\n"
            f"storage: {{url: 'sqlite://{data}/switchyard.db', usage_journal_dir: '{data}/usage'}}\n"
            f"auth: {{master_key: {MASTER}, jwt: [{{issuer: '{hydra.issuer}', audiences: [], team_claim: teams}}]}}\n"
            "mcp:\n"
            "  servers:\n"
            f"    - {{name: files, url: '{files.url}'}}\n"
            f"    - {{name: search, url: '{search.url}'}}\n"
        )
        gateway = start("mcp-oauth-gateway", ["serve", "--config", str(config)], log_dir)
        procs.append(gateway)
        for name, lists in TEAMS.items():
            made = httpx.post(
                f"{gateway.url}/admin/teams",
                json={"name": name, **lists},
                headers={"Authorization": f"Bearer {MASTER}"},
                timeout=10,
            )
            assert made.status_code == 201, made.text
        yield {"url": gateway.url, "hydra": hydra}
    finally:
        for p in reversed(procs):
            p.stop()


class MemoryTokenStorage:
    """The SDK's `TokenStorage`, in memory: the tokens, and the client's registration (given beforehand, or stored
    by the SDK once it registered the client)."""

    def __init__(self, client_info: OAuthClientInformationFull | None) -> None:
        self.tokens: OAuthToken | None = None
        self.client_info: OAuthClientInformationFull | None = client_info

    async def get_tokens(self) -> OAuthToken | None:
        return self.tokens

    async def set_tokens(self, tokens: OAuthToken) -> None:
        self.tokens = tokens

    async def get_client_info(self) -> OAuthClientInformationFull | None:
        return self.client_info

    async def set_client_info(self, client_info: OAuthClientInformationFull) -> None:
        self.client_info = client_info


def _param(url: str, name: str) -> str:
    values = parse_qs(urlsplit(url).query).get(name)
    assert values, f"no {name} in {url}"
    return values[0]


class HeadlessBrowser:
    """The SDK's `redirect_handler` and `callback_handler`: follows Hydra's redirects as a browser would (cookies
    kept: Hydra's login and consent CSRF cookies), accepting the login for `subject` and the consent with `claims` in
    the access token through Hydra's admin API, up to the redirect to the client's redirect URI."""

    def __init__(self, hydra: Hydra, subject: str, claims: dict) -> None:
        self.hydra, self.subject, self.claims = hydra, subject, claims
        self.authorization_urls: list[str] = []
        self.final: str | None = None

    async def redirect_handler(self, authorization_url: str) -> None:
        self.authorization_urls.append(authorization_url)
        async with httpx.AsyncClient(follow_redirects=False, timeout=10) as browser:

            async def next_hop(url: str) -> str:
                r = await browser.get(url)
                assert r.status_code in (302, 303) and "location" in r.headers, f"GET {url}: {r.status_code} {r.text}"
                return urljoin(url, r.headers["location"])

            url = await next_hop(authorization_url)
            accepted = await anyio.to_thread.run_sync(
                self.hydra.accept_login, _param(url, "login_challenge"), self.subject
            )
            url = await next_hop(accepted)
            accepted = await anyio.to_thread.run_sync(
                self.hydra.accept_consent, _param(url, "consent_challenge"), None, self.claims
            )
            self.final = await next_hop(accepted)
        assert self.final.startswith(REDIRECT_URI + "?"), self.final

    async def callback_handler(self) -> tuple[str, str | None]:
        assert self.final is not None, "the redirect handler ran first"
        query = parse_qs(urlsplit(self.final).query)
        return query["code"][0], query.get("state", [None])[0]


class OAuthClient:
    """One MCP client: the SDK's OAuth provider, its storage and headless browser, and a log of every HTTP exchange
    its transport made. The OAuth client is pre-registered at Hydra for `REDIRECT_URI` (public: PKCE only, allowed
    the scopes the SDK asks for, which are those Hydra's metadata lists), or, `dynamic`, registered by the SDK."""

    def __init__(self, stack: dict, subject: str, team: str, dynamic: bool = False) -> None:
        hydra: Hydra = stack["hydra"]
        self.url = f"{stack['url']}/mcp"
        metadata = OAuthClientMetadata(
            client_name=f"switchyard conformance ({subject})",
            redirect_uris=[REDIRECT_URI],
            grant_types=["authorization_code", "refresh_token"],
            response_types=["code"],
        )
        if dynamic:
            self.storage = MemoryTokenStorage(None)
        else:
            registered = hydra.create_auth_code_client(REDIRECT_URI, scope="openid offline offline_access")
            metadata.token_endpoint_auth_method = "none"
            self.storage = MemoryTokenStorage(
                OAuthClientInformationFull(client_id=registered["client_id"], **metadata.model_dump(exclude_none=True))
            )
        self.browser = HeadlessBrowser(hydra, subject, {"teams": [team]})
        self.provider = OAuthClientProvider(
            server_url=self.url,
            client_metadata=metadata,
            storage=self.storage,
            redirect_handler=self.browser.redirect_handler,
            callback_handler=self.browser.callback_handler,
            timeout=30,
        )
        self.exchanges: list[tuple[str, str, int]] = []  # (method, URL without its query, status)
        self.challenges: list[str] = []  # WWW-Authenticate of every 401

    async def session(self, body):
        async def log(response: httpx.Response) -> None:
            request = response.request
            self.exchanges.append((request.method, str(request.url.copy_with(query=None)), response.status_code))
            if response.status_code == 401:
                self.challenges.append(response.headers.get("www-authenticate", ""))

        # The provider is the httpx client's auth; the hook sees every exchange, the OAuth flow's own included.
        timeout = httpx.Timeout(30, read=300)
        async with httpx.AsyncClient(auth=self.provider, timeout=timeout, event_hooks={"response": [log]}) as http:
            async with streamable_http_client(self.url, http_client=http) as (read, write, _):
                async with ClientSession(read, write) as session:
                    await session.initialize()
                    return await body(session)


async def _tool_names(session: ClientSession) -> list[str]:
    return [t.name for t in (await session.list_tools()).tools]


def _all_tools(url: str) -> list[str]:
    async def main() -> list[str]:
        async with httpx.AsyncClient(headers={"Authorization": f"Bearer {MASTER}"}, timeout=30) as http:
            async with streamable_http_client(f"{url}/mcp", http_client=http) as (read, write, _):
                async with ClientSession(read, write) as session:
                    await session.initialize()
                    return await _tool_names(session)

    return anyio.run(main)


@pytest.mark.parametrize("registration", ["pre-registered", "dynamic"])
def test_the_sdk_completes_oauth_with_hydra_and_sees_only_its_teams_tools(oauth_stack, registration):
    hydra: Hydra = oauth_stack["hydra"]
    gateway = oauth_stack["url"]
    dynamic = registration == "dynamic"
    registration_endpoint = hydra.discovery().get("registration_endpoint")
    if dynamic and not registration_endpoint:
        pytest.skip(
            "Hydra advertises no registration_endpoint (dynamic client registration needs "
            "oidc.dynamic_client_registration.enabled and webfinger.oidc_discovery.client_registration_url)"
        )
    everything = _all_tools(gateway)
    files_tools = [n for n in everything if n.startswith("files__")]
    assert "files__echo" in files_tools and "search__echo" in everything, everything

    # A subject with dots, as an email is: the session the gateway issues is bound to the token's user.
    client = OAuthClient(oauth_stack, SUBJECT, "files-team", dynamic=dynamic)
    tokens_seen: list[str] = []

    async def body(session: ClientSession):
        names = await _tool_names(session)
        ok = await session.call_tool("files__echo", {"text": "through oauth"})
        with pytest.raises(McpError) as refused:
            await session.call_tool("search__echo", {"text": "not my team's"})
        # The access token runs out mid-session: the SDK refreshes it at Hydra (refresh_token grant) and the
        # same session goes on under the new token.
        tokens_seen.append(client.storage.tokens.access_token)
        assert client.storage.tokens.refresh_token, "Hydra issued a refresh token (offline access)"
        client.provider.context.token_expiry_time = time.time() - 1
        after = await session.call_tool("files__echo", {"text": "after the refresh"})
        tokens_seen.append(client.storage.tokens.access_token)
        return names, ok, refused.value, after

    names, ok, refused, after = anyio.run(client.session, body)
    assert names == files_tools, "the team's servers only"
    assert ok.content[0].text == "through oauth" and not ok.isError
    assert refused.error.code == -32602 and "not permitted" in refused.error.message
    assert after.content[0].text == "after the refresh" and not after.isError
    assert tokens_seen[0] != tokens_seen[1], "a new access token"
    refreshes = [e for e in client.exchanges if e[:2] == ("POST", f"{hydra.issuer}/oauth2/token")]
    assert [e[2] for e in refreshes] == [200, 200], client.exchanges
    assert len(client.browser.authorization_urls) == 1, "refreshed, not signed in again"

    # The flow the SDK went through: 401 with the metadata's address, the gateway's protected resource metadata,
    # Hydra's metadata (RFC 8414's path first, then OpenID discovery), the client's registration (dynamic only),
    # one authorization (the only login), the code exchanged at Hydra's token endpoint, and /mcp again, answered.
    mcp = f"{gateway}/mcp"
    prm = f"{gateway}/.well-known/oauth-protected-resource/mcp"
    assert client.challenges[0] == f'Bearer resource_metadata="{prm}"', client.challenges
    flow = [
        ("POST", mcp, 401),
        ("GET", prm, 200),
        ("GET", f"{hydra.issuer}/.well-known/oauth-authorization-server", 404),
        ("GET", f"{hydra.issuer}/.well-known/openid-configuration", 200),
        *([("POST", registration_endpoint, 201)] if dynamic else []),
        ("POST", f"{hydra.issuer}/oauth2/token", 200),
        ("POST", mcp, 200),
    ]
    assert client.exchanges[: len(flow)] == flow, client.exchanges
    assert len(client.challenges) == 1 and len(client.browser.authorization_urls) == 1
    authorize = client.browser.authorization_urls[0]
    assert authorize.startswith(f"{hydra.issuer}/oauth2/auth?"), authorize
    assert client.storage.client_info is not None
    assert _param(authorize, "client_id") == client.storage.client_info.client_id
    assert _param(authorize, "code_challenge_method") == "S256"
    assert _param(authorize, "resource") == mcp, "RFC 8707: the gateway's /mcp, from its metadata"

    # What the gateway accepted: Hydra's JWT access token naming the user and, at its top level, the team.
    assert client.storage.tokens is not None
    _, claims = decode_jwt(client.storage.tokens.access_token)
    assert claims["iss"] == hydra.issuer and claims["sub"] == SUBJECT and claims["teams"] == ["files-team"], claims

    # A second session of the same client reuses the token: no second 401, no second login.
    again = anyio.run(client.session, _tool_names)
    assert again == files_tools
    assert len(client.challenges) == 1 and len(client.browser.authorization_urls) == 1


def test_another_teams_client_sees_its_one_tool(oauth_stack):
    client = OAuthClient(oauth_stack, "bob@corp.example", "echo-team")

    async def body(session: ClientSession):
        names = await _tool_names(session)
        ok = await session.call_tool("search__echo", {"text": "allowed"})
        with pytest.raises(McpError) as refused:
            await session.call_tool("files__echo", {"text": "another server"})
        return names, ok, refused.value

    names, ok, refused = anyio.run(client.session, body)
    assert names == ["search__echo"]
    assert ok.content[0].text == "allowed"
    assert refused.error.code == -32602 and "not permitted" in refused.error.message
    assert len(client.browser.authorization_urls) == 1


def test_the_typescript_sdks_oauth_client_keeps_its_session_across_a_refresh(oauth_stack):
    """The MCP TypeScript SDK's own OAuth client (node/mcp_oauth_client.mjs): dynamic registration at Hydra, PKCE,
    its team's tools only, a refusal for another server's tool, and a token refreshed mid-session that keeps the
    session."""
    hydra: Hydra = oauth_stack["hydra"]
    if not hydra.discovery().get("registration_endpoint"):
        pytest.skip("Hydra advertises no registration_endpoint")
    everything = _all_tools(oauth_stack["url"])
    files_tools = [n for n in everything if n.startswith("files__")]
    mcp = f"{oauth_stack['url']}/mcp"
    out = run_node(
        "mcp_oauth_client.mjs", mcp, hydra.admin_url, "carol.jones@corp.example", "files-team", REDIRECT_URI,
        "files__echo", "search__echo",
    )
    assert out["registered"] and out["logins"] == 1, out
    assert out["tools"] == files_tools, "the team's servers only"
    assert out["echo"] == "from ts", out
    assert out["refused"] and out["refused"]["code"] == -32602 and "not permitted" in out["refused"]["message"], out
    assert out["afterRefresh"] == "after the refresh", out
    assert out["hadRefreshToken"] and out["newToken"] and out["sameSession"] and out["sessionId"], out
    token = f"{hydra.issuer}/oauth2/token"
    assert [e[2] for e in out["exchanges"] if e[:2] == ["POST", token]] == [200, 200], out["exchanges"]
    assert ["POST", mcp, 401] in out["exchanges"][2:], "the unusable token was refused, then refreshed"
