"""The official MCP Python SDK (the 1.x line, session handshake) against the gateway's MCP endpoints.

Three mock MCP servers (`switchyard mock-mcp`): `files` lists its tools over several pages and answers
with JSON, `search` answers every request as an SSE stream, `local` is a stdio server the gateway
runs as its own child process. The gateway (`switchyard serve`) has
keys on; the SDK is used unmodified, with the key as a bearer token.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Iterator

import anyio
import httpx
import pytest
from mcp import ClientSession
from mcp.client.streamable_http import streamablehttp_client  # 1.x: headers as an argument
from mcp.shared.exceptions import McpError

from procs import Proc, start, start_mcp_gateway, switchyard_bin

MASTER = "sk-mcp-conformance-master"
NAME = re.compile(r"^[A-Za-z0-9_-]{1,64}$")


@pytest.fixture(scope="module")
def mcp_stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict]:
    log_dir = tmp_path_factory.mktemp("mcp")
    procs: list[Proc] = []
    try:
        files = start("mcp-files", ["mock-mcp", "--listen", "127.0.0.1:0", "--extra-tools", "95", "--page-size", "40"], log_dir)
        procs.append(files)
        search = start("mcp-search", ["mock-mcp", "--listen", "127.0.0.1:0", "--sse"], log_dir)
        procs.append(search)
        gateway = start_mcp_gateway(
            "mcp-gateway",
            log_dir,
            MASTER,
            [
                f"{{name: files, url: '{files.url}', tools: {{deny: ['write_*']}}}}",
                f"{{name: search, url: '{search.url}'}}",
                f"{{name: local, command: ['{switchyard_bin()}', mock-mcp, --stdio]}}",
            ],
            code_mode="{enabled: true, timeout: 5s}",
        )
        procs.append(gateway)
        yield {"url": gateway.url, "files": files, "search": search}
    finally:
        for p in reversed(procs):
            p.stop()


def run(coro_fn, *args):
    return anyio.run(coro_fn, *args)


async def with_session(url: str, key: str, body):
    async with streamablehttp_client(url, headers={"Authorization": f"Bearer {key}"}) as (read, write, session_id):
        async with ClientSession(read, write) as session:
            init = await session.initialize()
            return await body(session, init, session_id())


def create_key(url: str, **fields) -> str:
    r = httpx.post(f"{url}/admin/keys", json=fields, headers={"Authorization": f"Bearer {MASTER}"})
    assert r.status_code == 201, r.text
    return r.json()["key"]


def test_initialize_and_the_aggregated_catalogue(mcp_stack):
    async def body(session, init, session_id):
        assert init.protocolVersion == "2025-11-25"
        assert init.serverInfo.name == "switchyard"
        assert session_id, "the gateway issued a session id"
        tools = (await session.list_tools()).tools
        return [t.name for t in tools], tools

    names, tools = run(with_session, f"{mcp_stack['url']}/mcp", MASTER, body)
    assert all(NAME.match(n) for n in names), names
    assert names == sorted(names), "a deterministic order"
    # files: 13 fixed tools (write_file denied by config) + 95 generated across 3 pages; search: 14;
    # local (stdio): 14 + pid, crash, spawn_sleeper.
    assert len(names) == 13 + 95 + 14 + 17
    assert "files__tool_94" in names and "files__write_file" not in names and "search__slow" in names
    echo = next(t for t in tools if t.name == "files__echo")
    assert echo.inputSchema["required"] == ["text"], "schemas pass through"


def test_calls_answered_as_json_and_as_sse(mcp_stack):
    async def body(session, init, session_id):
        a = await session.call_tool("files__echo", {"text": "json upstream"})
        b = await session.call_tool("search__echo", {"text": "sse upstream"})
        c = await session.call_tool("files__add", {"a": 2, "b": 40})
        d = await session.call_tool("files__fail", {})
        e = await session.call_tool("local__echo", {"text": "stdio upstream"})
        return a, b, c, d, e

    a, b, c, d, e = run(with_session, f"{mcp_stack['url']}/mcp", MASTER, body)
    assert e.content[0].text == "stdio upstream"
    assert a.content[0].text == "json upstream" and not a.isError
    assert b.content[0].text == "sse upstream"
    assert c.content[0].text == "42"
    assert d.isError is True


def test_progress_is_relayed_to_the_sdk(mcp_stack):
    seen: list[tuple[float, float | None]] = []

    async def on_progress(progress: float, total: float | None, message: str | None) -> None:
        seen.append((progress, total))

    async def body(session, init, session_id):
        return await session.call_tool("files__slow", {"ms": 90, "steps": 3}, progress_callback=on_progress)

    result = run(with_session, f"{mcp_stack['url']}/mcp", MASTER, body)
    assert result.content[0].text == "waited 90 ms"
    assert seen == [(1, 3), (2, 3), (3, 3)]


def test_one_server_passed_through_with_its_resources(mcp_stack):
    async def body(session, init, session_id):
        tools = [t.name for t in (await session.list_tools()).tools]
        resources = (await session.list_resources()).resources
        read = await session.read_resource(resources[0].uri)
        return tools, read

    tools, read = run(with_session, f"{mcp_stack['url']}/mcp/files", MASTER, body)
    assert "echo" in tools and "tool_94" in tools and "write_file" not in tools
    assert read.contents[0].text == "hello from the mock"


def test_a_forbidden_tool_is_a_json_rpc_error_and_is_not_listed(mcp_stack):
    key = create_key(mcp_stack["url"], mcp_servers=["search"], mcp_tools=["search__echo"])

    async def body(session, init, session_id):
        names = [t.name for t in (await session.list_tools()).tools]
        with pytest.raises(McpError) as refused:
            await session.call_tool("search__large", {"kb": 1})
        ok = await session.call_tool("search__echo", {"text": "allowed"})
        return names, refused.value, ok

    names, refused, ok = run(with_session, f"{mcp_stack['url']}/mcp", key, body)
    assert names == ["search__echo"]
    assert refused.error.code == -32602 and "not permitted" in refused.error.message
    assert ok.content[0].text == "allowed"


def test_a_missing_key_is_refused(mcp_stack):
    r = httpx.post(
        f"{mcp_stack['url']}/mcp",
        json={"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {}},
        headers={"Accept": "application/json, text/event-stream"},
    )
    assert r.status_code == 401


def test_an_unknown_session_is_404_and_a_new_session_works(mcp_stack):
    url = f"{mcp_stack['url']}/mcp"
    headers = {"Authorization": f"Bearer {MASTER}", "Accept": "application/json, text/event-stream"}

    async def body(session, init, session_id):
        return session_id

    old = run(with_session, url, MASTER, body)
    tampered = old[:-1] + ("0" if old[-1] != "0" else "1")
    r = httpx.post(url, json={"jsonrpc": "2.0", "id": 1, "method": "ping"}, headers={**headers, "Mcp-Session-Id": tampered})
    assert r.status_code == 404, "a session the gateway did not issue is unknown: the client re-initialises"
    # The SDK ended its session with DELETE on the way out: that session is gone too.
    r = httpx.post(url, json={"jsonrpc": "2.0", "id": 2, "method": "ping"}, headers={**headers, "Mcp-Session-Id": old})
    assert r.status_code == 404
    assert run(with_session, url, MASTER, body) != old, "re-initialising gets a fresh session"


def test_tool_list_changes_reach_the_sdk_on_its_get_stream(mcp_stack):
    import mcp.types as types

    heard: list[str] = []

    async def on_message(message) -> None:
        if isinstance(message, types.ServerNotification) and isinstance(message.root, types.ToolListChangedNotification):
            heard.append(message.root.method)

    async def main():
        headers = {"Authorization": f"Bearer {MASTER}"}
        async with streamablehttp_client(f"{mcp_stack['url']}/mcp", headers=headers) as (read, write, _):
            async with ClientSession(read, write, message_handler=on_message) as session:
                await session.initialize()
                # The SDK opens its GET stream in the background: announce until it has heard one.
                with anyio.fail_after(10):
                    while not heard:
                        await session.call_tool("search__change_tools", {})
                        await anyio.sleep(0.05)
                return [t.name for t in (await session.list_tools()).tools]

    names = run(main)
    assert heard[0] == "notifications/tools/list_changed"
    assert "search__added_tool" in names, "the gateway listed the server afresh"


def test_a_cancelled_call_is_cancelled_at_the_upstream(mcp_stack):
    files_stats = mcp_stack["files"].url.rsplit("/mcp", 1)[0] + "/mock/stats"
    before = httpx.get(files_stats).json()
    started = anyio.Event()

    async def on_progress(progress: float, total: float | None, message: str | None) -> None:
        started.set()

    async def main():
        async def body(session, init, session_id):
            async with anyio.create_task_group() as tg:
                async def slow_call():
                    await session.call_tool("files__slow", {"ms": 10000, "steps": 100}, progress_callback=on_progress)

                tg.start_soon(slow_call)
                with anyio.fail_after(5):
                    await started.wait()
                # The SDK sends notifications/cancelled for a request whose scope is cancelled.
                tg.cancel_scope.cancel()
            return True

        return await with_session(f"{mcp_stack['url']}/mcp", MASTER, body)

    assert run(main)
    for _ in range(250):
        after = httpx.get(files_stats).json()
        if after["stopped_early"] > before["stopped_early"]:
            break
        anyio.run(anyio.sleep, 0.02)
    assert after["stopped_early"] == before["stopped_early"] + 1, after
    assert len(after["cancelled"]) == len(before["cancelled"]) + 1


def test_code_mode_runs_a_program_over_all_three_upstreams(mcp_stack):
    """Code Mode on /mcp/code through the unmodified SDK: search, then one program calling a JSON, an SSE and
    a stdio upstream at once."""

    async def body(session, init, _sid):
        names = [t.name for t in (await session.list_tools()).tools]
        assert names == ["list_servers", "search_tools", "execute_code"]
        found = await session.call_tool("search_tools", {"query": "add numbers"})
        assert "tools.files.add(args: { a: number" in found.content[0].text, found.content[0].text
        program = (
            "const [sum, a, b] = await Promise.all([tools.files.add({a: 20, b: 22}), "
            "tools.search.echo({text: 'sse'}), tools.local.echo({text: 'stdio'})]);\n"
            "console.log('sum is', sum);\n"
            "return {sum, a, b};"
        )
        ran = await session.call_tool("execute_code", {"code": program})
        assert not ran.isError, ran
        assert ran.structuredContent["result"] == {"sum": 42, "a": "sse", "b": "stdio"}
        assert ran.structuredContent["logs"] == [{"level": "log", "text": "sum is 42"}]
        assert ran.structuredContent["toolCalls"] == 3
        failed = await session.call_tool("execute_code", {"code": "while (true) {}"})
        assert failed.isError and "time limit exceeded" in failed.content[0].text

    run(with_session, f"{mcp_stack['url']}/mcp/code", MASTER, body)


def test_a_servers_sampling_elicitation_roots_and_logs_reach_the_sdk(mcp_stack):
    """Server-to-client requests through /mcp/{server} and /mcp, from a JSON, an SSE and a stdio
    upstream: the SDK's callbacks answer them and the server gets the answers."""
    from mcp import types

    logs: list[tuple[str, str | None]] = []

    async def sampling(context, params: types.CreateMessageRequestParams) -> types.CreateMessageResult:
        asked = params.messages[0].content.text
        return types.CreateMessageResult(
            role="assistant", content=types.TextContent(type="text", text=f"answer to {asked}"), model="sdk-model"
        )

    async def elicitation(context, params: types.ElicitRequestParams) -> types.ElicitResult:
        return types.ElicitResult(action="accept", content={"name": "Ada"})

    async def roots(context) -> types.ListRootsResult:
        return types.ListRootsResult(roots=[types.Root(uri="file:///work", name="work")])

    async def logging(params: types.LoggingMessageNotificationParams) -> None:
        logs.append((params.level, params.logger))

    async def session_on(url: str, calls: list[tuple[str, dict]]):
        async with streamablehttp_client(url, headers={"Authorization": f"Bearer {MASTER}"}) as (read, write, _):
            async with ClientSession(
                read, write, sampling_callback=sampling, elicitation_callback=elicitation,
                list_roots_callback=roots, logging_callback=logging,
            ) as session:
                await session.initialize()
                await session.set_logging_level("debug")
                return [(await session.call_tool(name, args)).content[0].text for name, args in calls]

    base = mcp_stack["url"]
    texts = run(session_on, f"{base}/mcp/files", [
        ("sample", {"prompt": "2+2?"}), ("elicit", {}), ("roots", {}), ("log", {"text": "hi"}),
    ])
    assert texts == ["sample: answer to 2+2?", 'elicit: accept {"name":"Ada"}', "roots: file:///work", "logged"]
    assert ("info", "mock") in logs
    texts = run(session_on, f"{base}/mcp", [
        ("search__sample", {"prompt": "sse?"}), ("local__sample", {"prompt": "stdio?"}), ("local__log", {}),
    ])
    assert texts == ["sample: answer to sse?", "sample: answer to stdio?", "logged"]
    assert ("info", "local/mock") in logs, logs
    stats = httpx.get(mcp_stack["files"].url.replace("/mcp", "/mock/stats")).json()
    assert stats["calls"].get("sample", 0) >= 1
