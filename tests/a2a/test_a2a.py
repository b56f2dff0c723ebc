"""The gateway's A2A proxy, black-box: the official A2A SDK (a2a-sdk 1.3.0, protocol 1.0) as
both the agent (agent.py) and the client, the client pointed at http://GW/a2a/{name}.

The flows (hello, count N streamed, wait + cancel) are plain async functions taking the agent's
base URL and a key, so the same code can be run straight at agent.py (`check_direct`, used by
`python tests/a2a/conftest.py --direct`) to tell a harness fault from a gateway one.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import json
from pathlib import Path
from typing import Optional

import httpx
import pytest

from a2a.client import A2AClientError, AgentCardResolutionError, ClientConfig, ClientFactory
from a2a.types.a2a_pb2 import (
    AgentCapabilities,
    AgentCard,
    AgentInterface,
    CancelTaskRequest,
    GetTaskRequest,
    Role,
    StreamResponse,
    TaskState,
)
from a2a.utils.constants import PROTOCOL_VERSION_1_0, TransportProtocol

from conftest import (
    Agent,
    Gateway,
    Key,
    collect,
    http_client,
    resolve_card,
    rows_with,
    run,
    sdk_client,
    state_name,
    texts,
    user_message,
    FLOW_TIMEOUT_S,
)

JSONRPC = TransportProtocol.JSONRPC
REST = TransportProtocol.HTTP_JSON


# ------------------------------------------------------------------ the flows


def describe(ev: StreamResponse) -> tuple:
    """One streamed event as a comparable tuple."""
    kind = ev.WhichOneof("payload")
    if kind == "task":
        return ("task", state_name(ev.task.status.state))
    if kind == "message":
        return ("message", *texts(ev.message.parts))
    if kind == "status_update":
        st = ev.status_update.status
        return ("status", state_name(st.state), *(texts(st.message.parts) if st.HasField("message") else []))
    if kind == "artifact_update":
        au = ev.artifact_update
        return ("artifact", *texts(au.artifact.parts), bool(au.append), bool(au.last_chunk))
    raise AssertionError(f"unexpected event {ev}")


def task_id_of(ev: StreamResponse) -> str:
    kind = ev.WhichOneof("payload")
    if kind == "task":
        return ev.task.id
    if kind == "status_update":
        return ev.status_update.task_id
    if kind == "artifact_update":
        return ev.artifact_update.task_id
    return ev.message.task_id


async def hello_flow(base: str, key: Optional[str], binding: str = JSONRPC) -> None:
    """`hello ...` sent (non-streaming: SendMessage): one Message back, echoing the text, no task."""
    async with sdk_client(base, key, streaming=False, binding=binding) as (client, _):
        events = await collect(client.send_message(user_message("hello through the gateway")))
    assert [describe(e) for e in events] == [("message", "echo: hello through the gateway")]
    assert events[0].message.role == Role.ROLE_AGENT
    assert not events[0].message.task_id


async def count_flow(base: str, key: Optional[str], n: int = 5, binding: str = JSONRPC) -> str:
    """`count N` streamed (SendStreamingMessage) to completion, every event in order, then
    GetTask; the task's id."""
    async with sdk_client(base, key, streaming=True, binding=binding) as (client, _):
        events = await collect(client.send_message(user_message(f"count {n}")))
        assert events, "no events streamed"
        task_id = task_id_of(events[0])
        assert task_id and {task_id_of(e) for e in events} == {task_id}, [task_id_of(e) for e in events]
        expected = [("task", "submitted"), ("status", "working")]
        for i in range(1, n + 1):
            expected += [("status", "working", str(i)), ("artifact", str(i), i > 1, i == n)]
        expected.append(("status", "completed", f"counted to {n}"))
        assert [describe(e) for e in events] == expected

        task = await client.get_task(GetTaskRequest(id=task_id))
    assert task.id == task_id
    assert task.status.state == TaskState.TASK_STATE_COMPLETED
    assert [texts(a.parts) for a in task.artifacts] == [[str(i) for i in range(1, n + 1)]]
    return task_id


async def wait_cancel_flow(base: str, key: Optional[str]) -> tuple[str, list[tuple]]:
    """`wait` streamed until the task is working; CancelTask (while that stream is still open)
    answers canceled; the stream then ends; GetTask says canceled. (task id, events streamed)."""
    async with sdk_client(base, key, streaming=True) as (client, _):
        stream = client.send_message(user_message("wait"))
        seen: list[StreamResponse] = []
        try:
            while not (seen and describe(seen[-1])[:2] == ("status", "working")):
                seen.append(await asyncio.wait_for(stream.__anext__(), FLOW_TIMEOUT_S))
            task_id = task_id_of(seen[0])
            assert describe(seen[0]) == ("task", "submitted")

            canceled = await client.cancel_task(CancelTaskRequest(id=task_id))
            assert canceled.id == task_id
            assert canceled.status.state == TaskState.TASK_STATE_CANCELED, state_name(canceled.status.state)

            # The agent closes the stream once the task is canceled (the canceled status update
            # may or may not reach it first: the SDK does not promise it).
            seen += await collect(stream, FLOW_TIMEOUT_S)
        finally:
            await stream.aclose()
        described = [describe(e) for e in seen]
        assert all(d[0] in ("task", "status") for d in described), described
        assert described[-1][:2] in (("status", "working"), ("status", "canceled")), described

        task = await client.get_task(GetTaskRequest(id=task_id))
    assert task.status.state == TaskState.TASK_STATE_CANCELED, state_name(task.status.state)
    return task_id, described


def check_direct(agent: Agent) -> None:
    """The flows straight at agent.py, no gateway, no key (by hand: conftest.py --direct)."""
    async def all_flows():
        card = await resolve_card(agent.url, None)
        print("card interfaces:", [(i.protocol_binding, i.protocol_version, i.url) for i in card.supported_interfaces])
        for binding in (JSONRPC, REST):
            await hello_flow(agent.url, None, binding)
            print(binding, "hello: ok")
            print(binding, "count 5: ok, task", await count_flow(agent.url, None, 5, binding))
        task_id, events = await wait_cancel_flow(agent.url, None)
        print("wait + cancel: ok, task", task_id, "streamed", events)

    run(all_flows())


# ------------------------------------------------------------------ helpers


A2A_RECORD = {"model_requested": "a2a:echo", "backend": "echo"}


def jsonrpc(method: str, params: dict, id_: str = "1") -> dict:
    return {"jsonrpc": "2.0", "id": id_, "method": method, "params": params}


def send_params(text: str) -> dict:
    return {"message": {"messageId": f"m-{text}", "role": "ROLE_USER", "parts": [{"text": text}]}}


def http_status(e: BaseException) -> Optional[int]:
    """The HTTP status behind an SDK client error (its cause is httpx's HTTPStatusError)."""
    if isinstance(e, AgentCardResolutionError) and e.status_code:
        return e.status_code
    cause = e.__cause__
    if isinstance(cause, httpx.HTTPStatusError):
        return cause.response.status_code
    return None


def assert_error_body(r: httpx.Response, status: int) -> None:
    assert r.status_code == status, f"{r.request.method} {r.request.url}: {r.status_code} {r.text[:500]}"
    body = r.json()
    assert isinstance(body.get("error"), dict), f"no {{\"error\": {{...}}}} body: {r.text[:500]}"


# ------------------------------------------------------------------ the card


def test_card_names_only_gateway_urls(gateway: Gateway, agent: Agent, key: Key):
    r = httpx.get(gateway.agent_base("echo") + "/.well-known/agent-card.json", headers=key.headers, timeout=10)
    assert r.status_code == 200, f"{r.status_code} {r.text[:500]}"
    assert agent.hostport not in r.text, f"the agent's own address leaks through the card: {r.text}"
    card = r.json()
    assert card["name"] == "echo-agent"
    assert {s["id"] for s in card["skills"]} == {"hello", "count", "wait"}
    jsonrpc_url, rest_url = gateway.jsonrpc_url("echo"), gateway.agent_base("echo")
    by_binding = {(i["protocolBinding"], i.get("protocolVersion")): i["url"] for i in card["supportedInterfaces"]}
    assert by_binding == {
        ("JSONRPC", "1.0"): jsonrpc_url, ("HTTP+JSON", "1.0"): rest_url,
        ("JSONRPC", "0.3"): jsonrpc_url, ("HTTP+JSON", "0.3"): rest_url,
    }, json.dumps(card["supportedInterfaces"])
    # A2A 0.3's fields of the same card.
    assert card["url"] == jsonrpc_url
    assert [i["url"] for i in card["additionalInterfaces"]] == [rest_url]

    async def sdk():
        parsed = await resolve_card(gateway.agent_base("echo"), key.key)
        assert {i.url for i in parsed.supported_interfaces} == {jsonrpc_url, rest_url}
        for binding, url in ((JSONRPC, jsonrpc_url), (REST, rest_url)):
            async with sdk_client(gateway.agent_base("echo"), key.key, binding=binding, card=parsed) as (client, _):
                assert client._transport.url == url  # the interface the SDK picked

    run(sdk())


# ------------------------------------------------------------------ the flows through the gateway


def test_hello_message(gateway: Gateway):
    k = gateway.create_key(["echo"])
    run(hello_flow(gateway.agent_base("echo"), k.key))
    rows = gateway.wait_usage(k.id, lambda rows: rows_with(rows, tool="SendMessage"), "SendMessage's usage record")
    [rec] = rows_with(rows, tool="SendMessage")
    assert rec | A2A_RECORD == rec and rec["status"] == 200 and rec["key_id"] == k.id, rec
    assert not rec["task_id"], f"a Message answer has no task: {rec}"


def test_count_streamed_to_completion(gateway: Gateway):
    k = gateway.create_key(["echo"])
    task_id = run(count_flow(gateway.agent_base("echo"), k.key, 5))
    want = lambda rows: rows_with(rows, tool="SendStreamingMessage") and rows_with(rows, tool="GetTask")
    rows = gateway.wait_usage(k.id, want, "SendStreamingMessage's and GetTask's usage records")
    [stream] = rows_with(rows, tool="SendStreamingMessage")
    [get] = rows_with(rows, tool="GetTask")
    for rec in (stream, get):
        assert rec | A2A_RECORD == rec and rec["status"] == 200 and rec["key_id"] == k.id, rec
        assert rec["task_id"] == task_id and rec["task_state"] == "completed", rec


def test_wait_then_cancel(gateway: Gateway):
    k = gateway.create_key(["echo"])
    task_id, streamed = run(wait_cancel_flow(gateway.agent_base("echo"), k.key))
    tools = ("SendStreamingMessage", "CancelTask", "GetTask")
    rows = gateway.wait_usage(k.id, lambda rows: all(rows_with(rows, tool=t) for t in tools),
                              f"usage records of {', '.join(tools)}")
    [stream] = rows_with(rows, tool="SendStreamingMessage")
    [cancel] = rows_with(rows, tool="CancelTask")
    [get] = rows_with(rows, tool="GetTask")
    for rec in (stream, cancel, get):
        assert rec | A2A_RECORD == rec and rec["status"] == 200 and rec["key_id"] == k.id, rec
        assert rec["task_id"] == task_id, rec
    assert stream["task_state"] == streamed[-1][1], (stream, streamed)  # the last state the stream carried
    assert cancel["task_state"] == "canceled" and get["task_state"] == "canceled", (cancel, get)


def test_rest_binding(gateway: Gateway):
    """The same SDK client over HTTP+JSON: /a2a/echo/message:send etc. relayed to the agent's REST interface."""
    k = gateway.create_key(["echo"])

    async def flows():
        await hello_flow(gateway.agent_base("echo"), k.key, REST)
        return await count_flow(gateway.agent_base("echo"), k.key, 3, REST)

    task_id = run(flows())
    tools = ("SendMessage", "SendStreamingMessage", "GetTask")
    rows = gateway.wait_usage(k.id, lambda rows: all(rows_with(rows, tool=t) for t in tools),
                              f"usage records of {', '.join(tools)}")
    for t in tools:
        [rec] = rows_with(rows, tool=t)
        assert rec | A2A_RECORD == rec and rec["status"] == 200, rec
    assert rows_with(rows, tool="SendStreamingMessage", task_id=task_id, task_state="completed"), rows


def test_v03_method_names(gateway: Gateway):
    """A 0.3 client's `message/send` and `tasks/get` (kind-tagged objects) are relayed too,
    recorded under the 1.0 names."""
    k = gateway.create_key(["echo"])
    with httpx.Client(headers=k.headers, timeout=10) as http:
        r = http.post(gateway.jsonrpc_url("echo"), json=jsonrpc("message/send", {"message": {
            "kind": "message", "messageId": "m-03", "role": "user", "parts": [{"kind": "text", "text": "count 2"}]}}))
        assert r.status_code == 200, r.text
        task = r.json()["result"]
        assert task["kind"] == "task" and task["status"]["state"] == "completed", task
        r = http.post(gateway.jsonrpc_url("echo"), json=jsonrpc("tasks/get", {"id": task["id"]}, "2"))
        assert r.status_code == 200 and r.json()["result"]["status"]["state"] == "completed", r.text
    rows = gateway.wait_usage(k.id, lambda rows: rows_with(rows, tool="SendMessage") and rows_with(rows, tool="GetTask"),
                              "message/send's and tasks/get's usage records")
    for t in ("SendMessage", "GetTask"):
        [rec] = rows_with(rows, tool=t)
        assert rec | A2A_RECORD == rec and rec["status"] == 200, rec
        assert rec["task_id"] == task["id"] and rec["task_state"] == "completed", rec


# ------------------------------------------------------------------ refusals


def test_no_key_is_401(gateway: Gateway):
    card_url = gateway.agent_base("echo") + "/.well-known/agent-card.json"
    assert httpx.get(card_url, timeout=10).status_code == 401
    r = httpx.post(gateway.jsonrpc_url("echo"), json=jsonrpc("SendMessage", send_params("hello")), timeout=10)
    assert r.status_code == 401, r.text
    assert httpx.get(gateway.url + "/a2a", timeout=10).status_code == 401

    async def sdk():
        with pytest.raises(AgentCardResolutionError) as e:
            await resolve_card(gateway.agent_base("echo"), None)
        assert http_status(e.value) == 401, repr(e.value)

    run(sdk())


def test_key_without_the_agent_is_403(gateway: Gateway, key: Key):
    other = gateway.create_key(["other"])
    card_url = gateway.agent_base("echo") + "/.well-known/agent-card.json"
    assert_error_body(httpx.get(card_url, headers=other.headers, timeout=10), 403)
    r = httpx.post(gateway.jsonrpc_url("echo"), headers=other.headers,
                   json=jsonrpc("SendMessage", send_params("hello")), timeout=10)
    assert_error_body(r, 403)

    async def sdk():
        with pytest.raises(AgentCardResolutionError) as e:
            await resolve_card(gateway.agent_base("echo"), other.key)
        assert http_status(e.value) == 403, repr(e.value)
        card = await resolve_card(gateway.agent_base("echo"), key.key)  # the card, as an allowed key sees it
        for streaming in (False, True):
            async with sdk_client(gateway.agent_base("echo"), other.key, streaming=streaming, card=card) as (client, _):
                with pytest.raises(A2AClientError) as e:
                    await collect(client.send_message(user_message("hello")))
                assert http_status(e.value) == 403, repr(e.value)

    run(sdk())
    rows = gateway.wait_usage(other.id, lambda rows: rows_with(rows, status=403, model_requested="a2a:echo"),
                              "a 403 usage record")
    assert all(r["status"] == 403 for r in rows), rows


def test_method_scoped_key(gateway: Gateway, key: Key):
    """A key allowed only `echo/SendMessage` sends, but may not GetTask or CancelTask."""
    scoped = gateway.create_key(["echo/SendMessage"])

    async def sdk():
        card = await resolve_card(gateway.agent_base("echo"), key.key)
        async with sdk_client(gateway.agent_base("echo"), scoped.key, streaming=False, card=card) as (client, _):
            [ev] = await collect(client.send_message(user_message("count 1")))
            assert ev.task.status.state == TaskState.TASK_STATE_COMPLETED, ev
            for call in (client.get_task(GetTaskRequest(id=ev.task.id)),
                         client.cancel_task(CancelTaskRequest(id=ev.task.id))):
                with pytest.raises(A2AClientError) as e:
                    await call
                assert http_status(e.value) == 403, repr(e.value)
            return ev.task.id

    task_id = run(sdk())
    r = httpx.post(gateway.jsonrpc_url("echo"), headers=scoped.headers, json=jsonrpc("GetTask", {"id": task_id}), timeout=10)
    assert_error_body(r, 403)
    rows = gateway.wait_usage(scoped.id, lambda rows: rows_with(rows, tool="SendMessage", status=200)
                              and len(rows_with(rows, status=403)) >= 3, "the scoped key's usage records")
    assert rows_with(rows, tool="SendMessage", status=200, task_id=task_id, task_state="completed"), rows
    assert {r["tool"] for r in rows_with(rows, status=403)} == {"GetTask", "CancelTask"}, rows


def test_rpm_limit(gateway: Gateway):
    """`limited` allows 2 calls a minute: the third in a row is 429."""
    k = gateway.create_key(["limited"])
    # A card of our own making, so that no card fetch (whether or not it counts) comes first.
    card = AgentCard(
        name="limited", description="", version="1", capabilities=AgentCapabilities(streaming=False),
        supported_interfaces=[AgentInterface(url=gateway.jsonrpc_url("limited"), protocol_binding=JSONRPC,
                                             protocol_version=PROTOCOL_VERSION_1_0)],
    )

    async def sdk():
        async with http_client(k.key) as http:
            client = ClientFactory(ClientConfig(httpx_client=http, streaming=False)).create(card)
            for i in range(2):
                [ev] = await collect(client.send_message(user_message(f"hello {i}")))
                assert texts(ev.message.parts) == [f"echo: hello {i}"]
            with pytest.raises(A2AClientError) as e:
                await collect(client.send_message(user_message("hello 2")))
            assert http_status(e.value) == 429, repr(e.value)

    run(sdk())
    r = httpx.post(gateway.jsonrpc_url("limited"), headers=k.headers, json=jsonrpc("SendMessage", send_params("hello 3")), timeout=10)
    assert_error_body(r, 429)
    rows = gateway.wait_usage(k.id, lambda rows: len(rows_with(rows, status=200)) == 2 and len(rows_with(rows, status=429)) >= 2,
                              "2 records of 200 and 2 of 429")
    assert all(r["model_requested"] == "a2a:limited" and r["backend"] == "limited" for r in rows), rows


def test_ssrf_card_is_refused(gateway: Gateway):
    """evil's card names http://169.254.169.254/latest/ as its JSON-RPC interface: the gateway
    answers 502 for the card and for a call, and (unobservable here) never goes there."""
    k = gateway.create_key(["evil"])
    r = httpx.get(gateway.agent_base("evil") + "/.well-known/agent-card.json", headers=k.headers, timeout=10)
    assert r.status_code == 502, f"{r.status_code} {r.text[:500]}"
    r = httpx.post(gateway.jsonrpc_url("evil"), headers=k.headers, json=jsonrpc("SendMessage", send_params("hello")), timeout=10)
    assert r.status_code == 502, f"{r.status_code} {r.text[:500]}"

    async def sdk():
        with pytest.raises(AgentCardResolutionError) as e:
            await resolve_card(gateway.agent_base("evil"), k.key)
        assert http_status(e.value) == 502, repr(e.value)

    run(sdk())
    rows = gateway.wait_usage(k.id, lambda rows: rows_with(rows, status=502, model_requested="a2a:evil"),
                              "a 502 usage record for evil")
    assert all(r["status"] == 502 for r in rows), rows


# ------------------------------------------------------------------ GET /a2a


def test_list_names_only_the_keys_agents(gateway: Gateway, key: Key):
    def names(k: Key) -> list[str]:
        r = httpx.get(gateway.url + "/a2a", headers=k.headers, timeout=10)
        assert r.status_code == 200, f"{r.status_code} {r.text[:500]}"
        body = r.json()
        assert body["object"] == "list", body
        return sorted(a["name"] for a in body["data"])

    assert names(key) == ["echo", "evil", "limited"]
    assert names(gateway.create_key(["echo"])) == ["echo"]
    assert names(gateway.create_key(["other"])) == []

    r = httpx.get(gateway.url + "/a2a", headers=key.headers, timeout=10)
    [echo] = [a for a in r.json()["data"] if a["name"] == "echo"]
    assert echo["url"] == gateway.jsonrpc_url("echo"), echo
    assert echo["card"] == gateway.agent_base("echo") + "/.well-known/agent-card.json", echo


# ------------------------------------------------------------------ the JavaScript SDK


def test_the_js_sdk_client_through_the_gateway(gateway: Gateway, agent: Agent):
    """The official A2A JavaScript SDK (@a2a-js/sdk, installed with the other Node SDKs in
    tests/conformance/node) resolves the card from the gateway, sends a message and follows a
    streamed task to completion; each call is recorded."""
    node_bin = os.environ.get("SWITCHYARD_TEST_NODE")
    if not node_bin:
        pytest.skip("SWITCHYARD_TEST_NODE is not set (scripts/test sets it)")
    node_dir = Path(__file__).resolve().parents[1] / "conformance" / "node"
    k = gateway.create_key(["echo"])
    done = subprocess.run(
        [str(Path(node_bin) / "node"), str(node_dir / "a2a_client.mjs"), gateway.jsonrpc_url("echo"), k.key],
        cwd=node_dir, capture_output=True, text=True, timeout=60,
    )
    assert done.returncode == 0, f"a2a_client.mjs failed:\n{done.stdout}\n{done.stderr}"
    out = json.loads(done.stdout.strip().splitlines()[-1])
    assert gateway.jsonrpc_url("echo") in out["interfaces"] and agent.hostport not in json.dumps(out), out
    assert out["hello"] == "echo: hello from js", out
    # TaskState as the SDK numbers it: 1 submitted, 2 working, 3 completed.
    assert out["events"][0] == ["task", 1] and out["events"][-1] == ["statusUpdate", 3], out
    assert out["events"].count(["artifactUpdate", "count"]) == 3, out
    want = lambda rows: rows_with(rows, tool="SendMessage") and rows_with(rows, tool="SendStreamingMessage")
    rows = gateway.wait_usage(k.id, want, "the JS SDK's calls' usage records")
    [stream] = rows_with(rows, tool="SendStreamingMessage")
    assert stream["task_id"] == out["task"] and stream["task_state"] == "completed", stream
