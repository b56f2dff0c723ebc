"""MCP through a fleet (issue 59): three gateways sharing one Redis and the secret that signs
sessions, behind HAProxy balancing every request round-robin (no stickiness). The official MCP
Python SDK (2.x) calls tools whose server asks the client something — sampling and elicitation —
in both eras: stateless (the question comes back as `input_required` and the SDK retries, each
retry on whichever instance the balancer picks) and legacy (the question on the call's stream, the
SDK's answer POSTed to whichever instance). Every call must complete with the SDK's own answer,
and across the fleet no server request may go unanswered and no forwarding may fail.

Needs redis-server ($SWITCHYARD_TEST_REDIS_SERVER or on PATH; scripts/redis) and haproxy
($SWITCHYARD_TEST_HAPROXY or on PATH; scripts/haproxy). Readiness is never a sleep: each
gateway's `listening on` line, Redis's PING, HAProxy's /health, the instances' channels in
`PUBSUB CHANNELS`.
"""

from __future__ import annotations

import os
import re
import shutil
import socket
import subprocess
import time
from pathlib import Path
from typing import Iterator

import anyio
import httpx2
import pytest
from mcp import Client, types
from mcp.client.streamable_http import streamable_http_client

from procs import Proc, start

MASTER = "sk-mcp2-fleet-master"
SECRET = "mcp2-fleet-secret-mcp2-fleet-secret-0123"
CALLS_PER_MODE = 6
READY_TIMEOUT_S = 20.0


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def poll(what: str, check, timeout: float = READY_TIMEOUT_S):
    deadline = time.monotonic() + timeout
    while True:
        got = check()
        if got:
            return got
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.02)


def redis_command(port: int, *args: str) -> bytes:
    """One command in RESP; the raw answer (b"" when nothing answers)."""
    out = f"*{len(args)}\r\n" + "".join(f"${len(a)}\r\n{a}\r\n" for a in args)
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=2) as s:
            s.sendall(out.encode())
            return s.recv(65536)
    except OSError:
        return b""


def binary(env: str, name: str) -> str:
    path = os.environ.get(env) or shutil.which(name)
    if not path:
        pytest.fail(f"{name} is not installed: run scripts/{name.split('-')[0]} (or set {env})")
    return path


class Fleet:
    def __init__(self, url: str, instances: list[Proc]):
        self.url = url
        self.instances = instances

    def metrics(self) -> list[str]:
        return [httpx2.get(f"{p.url}/metrics", timeout=10).text for p in self.instances]


@pytest.fixture(scope="module")
def fleet(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Fleet]:
    log_dir = tmp_path_factory.mktemp("mcp2-fleet")
    redis_port, proxy_port = free_port(), free_port()
    children: list[subprocess.Popen] = []
    procs: list[Proc] = []
    try:
        children.append(subprocess.Popen(
            [binary("SWITCHYARD_TEST_REDIS_SERVER", "redis-server"), "--bind", "127.0.0.1", "--port", str(redis_port),
             "--save", "", "--appendonly", "no", "--dir", str(log_dir)],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        ))
        poll("redis-server", lambda: redis_command(redis_port, "PING").startswith(b"+PONG"))
        files = start("fleet-mcp-files", ["mock-mcp", "--listen", "127.0.0.1:0"], log_dir)
        procs.append(files)
        for i in range(3):
            data = log_dir / f"gw{i}"
            data.mkdir()
            config = log_dir / f"gw{i}.yaml"
            config.write_text(
                "listen: 127.0.0.1:0\n"
                f"storage: {{url: 'sqlite://{data}/switchyard.db', usage_journal_dir: '{data}/usage'}}\n"
                f"auth: {{master_key: {MASTER}, secret: {SECRET}}}\n"
                f"redis: {{url: 'redis://127.0.0.1:{redis_port}/0'}}\n"
                f"mcp:\n  servers:\n    - {{name: files, url: '{files.url}'}}\n"
            )
            procs.append(start(f"fleet-gw{i}", ["serve", "--config", str(config)], log_dir))
        instances = procs[1:]
        servers = "".join(f"    server gw{i} {p.url.removeprefix('http://')}\n" for i, p in enumerate(instances))
        (log_dir / "haproxy.cfg").write_text(
            "global\n    maxconn 256\n"
            "defaults\n    mode http\n    timeout connect 2s\n    timeout client 60s\n    timeout server 60s\n"
            f"frontend mcp\n    bind 127.0.0.1:{proxy_port}\n    default_backend fleet\n"
            f"backend fleet\n    balance roundrobin\n{servers}"
        )
        children.append(subprocess.Popen(
            [binary("SWITCHYARD_TEST_HAPROXY", "haproxy"), "-f", str(log_dir / "haproxy.cfg"), "-db"],
            stdout=open(log_dir / "haproxy.log", "wb"), stderr=subprocess.STDOUT,
        ))
        url = f"http://127.0.0.1:{proxy_port}"

        def proxied():
            try:
                return httpx2.get(f"{url}/health", timeout=2).status_code == 200
            except httpx2.HTTPError:
                return False

        poll("haproxy", proxied)
        # Each instance listens on a channel of its own for what the others forward to it.
        poll("the instances' MCP channels", lambda: redis_command(redis_port, "PUBSUB", "CHANNELS", "switchyard:mcp:*").count(b"switchyard:mcp:") == 3)
        yield Fleet(url, instances)
    finally:
        for child in reversed(children):
            child.terminate()
            child.wait(timeout=10)
        for p in reversed(procs):
            p.stop()


def metric_sum(texts: list[str], pattern: str) -> float:
    rx = re.compile(pattern)
    return sum(float(line.rsplit(" ", 1)[1]) for text in texts for line in text.splitlines() if rx.match(line))


@pytest.mark.parametrize("mode", ["auto", "legacy"])
def test_server_requests_complete_through_a_round_robin_fleet(fleet: Fleet, mode: str):
    seen: list[str] = []

    async def sampling(context, params):
        asked = params.messages[0].content.text
        seen.append(asked)
        return types.CreateMessageResult(
            role="assistant", content=types.TextContent(type="text", text=f"fleet answer to {asked}"), model="m"
        )

    async def elicitation(context, params):
        return types.ElicitResult(action="accept", content={"name": "Noor"})

    async def main():
        http = httpx2.AsyncClient(headers={"Authorization": f"Bearer {MASTER}"}, timeout=30)
        client = Client(
            streamable_http_client(f"{fleet.url}/mcp", http_client=http), mode=mode,
            sampling_callback=sampling, elicitation_callback=elicitation,
        )
        out = []
        async with client:
            for i in range(CALLS_PER_MODE):
                with anyio.fail_after(30):
                    sample = await client.call_tool("files__sample", {"prompt": f"{mode} {i}?"})
                    elicit = await client.call_tool("files__elicit", {})
                out.append((sample.content[0].text, elicit.content[0].text))
            version = client.protocol_version
        return version, out

    version, out = anyio.run(main)
    assert version == ("2026-07-28" if mode == "auto" else "2025-11-25")
    assert out == [(f"sample: fleet answer to {mode} {i}?", 'elicit: accept {"name":"Noor"}') for i in range(CALLS_PER_MODE)]
    assert seen == [f"{mode} {i}?" for i in range(CALLS_PER_MODE)]


def test_nothing_went_unanswered_and_forwarding_was_used(fleet: Fleet):
    """After both eras' calls: every server request relayed was answered, none timed out or went
    unanswered, and answers and retries really crossed instances (the balancer spread them)."""
    texts = fleet.metrics()
    relayed = metric_sum(texts, r'switchyard_mcp_server_requests_total\{.*outcome="relayed"\}')
    answered = metric_sum(texts, r'switchyard_mcp_server_requests_total\{.*outcome="answered"\}')
    unanswered = metric_sum(texts, r'switchyard_mcp_server_requests_total\{.*outcome="unanswered"\}')
    assert relayed >= 4 * CALLS_PER_MODE and answered == relayed and unanswered == 0, (relayed, answered, unanswered)
    failed = metric_sum(texts, r'switchyard_mcp_forwarded_total\{.*outcome="(no_holder|unavailable|timeout|refused)"\}')
    assert failed == 0, texts
    assert metric_sum(texts, r'switchyard_mcp_forwarded_total\{kind="answer",outcome="delivered"\}') > 0
    assert metric_sum(texts, r'switchyard_mcp_forwarded_total\{kind="resume",outcome="delivered"\}') > 0
