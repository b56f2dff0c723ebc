"""The official MCP Python SDK's 2.x line against the gateway: it probes `server/discover`, adopts
the stateless 2026-07-28 revision (no session: version and capabilities in each request's `_meta`),
and calls tools of an HTTP and a stdio upstream through the aggregated endpoint. Its `mode="legacy"`
still gets the session handshake from the same endpoint.
"""

from __future__ import annotations

import re
from typing import Iterator

import anyio
import httpx2
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError

from procs import Proc, start, start_mcp_gateway, switchyard_bin

MASTER = "sk-mcp2-conformance-master"
FILES_STATS = ""
NAME = re.compile(r"^[A-Za-z0-9_-]{1,64}$")


@pytest.fixture(scope="module")
def gateway(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    log_dir = tmp_path_factory.mktemp("mcp2")
    procs: list[Proc] = []
    try:
        files = start("mcp-files", ["mock-mcp", "--listen", "127.0.0.1:0", "--extra-tools", "50", "--page-size", "20"], log_dir)
        procs.append(files)
        global FILES_STATS
        FILES_STATS = files.url.rsplit("/mcp", 1)[0] + "/mock/stats"
        gw = start_mcp_gateway(
            "mcp2-gateway",
            log_dir,
            MASTER,
            [f"{{name: files, url: '{files.url}'}}", f"{{name: local, command: ['{switchyard_bin()}', mock-mcp, --stdio]}}"],
        )
        procs.append(gw)
        yield f"{gw.url}/mcp"
    finally:
        for p in reversed(procs):
            p.stop()


def connect(url: str, key: str = MASTER, mode: str = "auto"):
    http = httpx2.AsyncClient(headers={"Authorization": f"Bearer {key}"})
    return Client(streamable_http_client(url, http_client=http), mode=mode)


def test_the_sdk_adopts_the_stateless_revision_and_calls_tools(gateway):
    async def main():
        async with connect(gateway) as client:
            tools = (await client.list_tools()).tools
            echo = await client.call_tool("files__echo", {"text": "stateless"})
            local = await client.call_tool("local__add", {"a": 1, "b": 2})
            failed = await client.call_tool("files__fail", {})
            return client.protocol_version, client.server_info, [t.name for t in tools], echo, local, failed

    version, info, names, echo, local, failed = anyio.run(main)
    assert version == "2026-07-28"
    assert info is not None and info.name == "switchyard"
    assert all(NAME.match(n) for n in names) and names == sorted(names)
    assert "files__tool_49" in names and "local__pid" in names, "every upstream page, both upstreams"
    assert echo.content[0].text == "stateless"
    assert local.content[0].text == "3"
    assert failed.is_error is True


def test_progress_reaches_the_sdk_on_the_stateless_revision(gateway):
    seen = []

    async def on_progress(progress, total, message):
        seen.append(progress)

    async def main():
        async with connect(gateway) as client:
            return await client.call_tool("files__slow", {"ms": 60, "steps": 3}, progress_callback=on_progress)

    result = anyio.run(main)
    assert result.content[0].text == "waited 60 ms"
    assert seen == [1, 2, 3]


def test_the_legacy_mode_of_the_same_sdk_gets_the_session_handshake(gateway):
    async def main():
        async with connect(gateway, mode="legacy") as client:
            r = await client.call_tool("files__echo", {"text": "legacy"})
            return client.protocol_version, r

    version, r = anyio.run(main)
    assert version == "2025-11-25"
    assert r.content[0].text == "legacy"


def test_a_forbidden_tool_and_a_missing_key(gateway):
    base = gateway.rsplit("/mcp", 1)[0]
    r = httpx2.post(f"{base}/admin/keys", json={"mcp_tools": ["files__echo"]}, headers={"Authorization": f"Bearer {MASTER}"})
    assert r.status_code == 201, r.text
    key = r.json()["key"]

    async def main():
        async with connect(gateway, key=key) as client:
            names = [t.name for t in (await client.list_tools()).tools]
            with pytest.raises(MCPError) as refused:
                await client.call_tool("files__add", {"a": 1, "b": 1})
            return names, refused.value

    names, refused = anyio.run(main)
    assert names == ["files__echo"]
    assert refused.error.code == -32602
    missing = httpx2.post(gateway, json={"jsonrpc": "2.0", "id": 1, "method": "server/discover", "params": {}})
    assert missing.status_code == 401


def test_closing_the_stream_cancels_the_call_upstream(gateway):
    before = httpx2.get(FILES_STATS).json()
    started = anyio.Event()

    async def on_progress(progress, total, message):
        started.set()

    async def main():
        async with connect(gateway) as client:
            async with anyio.create_task_group() as tg:

                async def slow_call():
                    await client.call_tool("files__slow", {"ms": 10000, "steps": 100}, progress_callback=on_progress)

                tg.start_soon(slow_call)
                with anyio.fail_after(5):
                    await started.wait()
                tg.cancel_scope.cancel()

    anyio.run(main)
    after = before
    for _ in range(250):
        after = httpx2.get(FILES_STATS).json()
        if after["stopped_early"] > before["stopped_early"]:
            break
        anyio.run(anyio.sleep, 0.02)
    assert after["stopped_early"] == before["stopped_early"] + 1, after


@pytest.mark.parametrize("mode", ["auto", "legacy"])
def test_a_servers_sampling_and_elicitation_reach_the_sdk_in_both_eras(gateway, mode):
    """Stateless (auto): the server's question comes back as an `input_required` result and the
    SDK retries with its answer; legacy: on the call's stream. From an HTTP and a stdio upstream."""
    from mcp import types

    async def sampling(context, params):
        asked = params.messages[0].content.text
        return types.CreateMessageResult(
            role="assistant", content=types.TextContent(type="text", text=f"v2 answer to {asked}"), model="m"
        )

    async def elicitation(context, params):
        return types.ElicitResult(action="accept", content={"name": "Lin"})

    async def main():
        http = httpx2.AsyncClient(headers={"Authorization": f"Bearer {MASTER}"})
        client = Client(
            streamable_http_client(gateway, http_client=http), mode=mode,
            sampling_callback=sampling, elicitation_callback=elicitation,
        )
        async with client:
            a = await client.call_tool("files__sample", {"prompt": "eras?"})
            b = await client.call_tool("local__sample", {"prompt": "stdio?"})
            c = await client.call_tool("files__elicit", {})
            return client.protocol_version, a.content[0].text, b.content[0].text, c.content[0].text

    version, a, b, c = anyio.run(main)
    assert version == ("2026-07-28" if mode == "auto" else "2025-11-25")
    assert a == "sample: v2 answer to eras?"
    assert b == "sample: v2 answer to stdio?"
    assert c == 'elicit: accept {"name":"Lin"}'
