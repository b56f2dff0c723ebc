"""Fixtures for the gateway's A2A proxy black-box tests (tests/a2a/test_a2a.py).

The official A2A SDK (a2a-sdk 1.3.0, protocol 1.0) plays both ends: agent.py is the agent (its
JSON-RPC binding at `/`, REST under `/rest`), and the tests' client is the SDK's `ClientFactory`
over an `httpx.AsyncClient` that carries `Authorization: Bearer <key>`, pointed at the gateway's
`/a2a/{name}`. Everything runs against the real `switchyard` binary ($SWITCHYARD_BIN, default
target/debug/switchyard; a relative path is taken from the repository root).

- `agent` / `evil_agent` (session): agent.py, ready when its --port-file exists and its card
  answers; the evil one's card advertises http://169.254.169.254/latest/ as its JSON-RPC URL.
- `gateway` (session): one gateway (SQLite storage in its temp dir) with the agents `echo`,
  `evil` and `limited` (rpm 2); ready on its `listening on http://ADDR` stdout line (read under
  a timeout), then /health. Usage records are read from its SQLite file, polled (bounded).

Readiness is never a sleep. To try the flows against agent.py alone (no gateway), see
`python tests/a2a/conftest.py --direct` (run by hand; not a test).

    SWITCHYARD_BIN=target/debug/switchyard .venv-a2a/bin/python -m pytest -q tests/a2a
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import queue
import signal
import sqlite3
import subprocess
import sys
import threading
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, AsyncIterator, Callable, Iterator, Optional

import httpx
import pytest

from a2a.client import A2ACardResolver, Client, ClientConfig, ClientFactory
from a2a.types.a2a_pb2 import (
    AgentCard,
    Message,
    Part,
    Role,
    SendMessageConfiguration,
    SendMessageRequest,
    StreamResponse,
    TaskState,
)
from a2a.utils.constants import TransportProtocol

HERE = Path(__file__).resolve().parent
REPO_ROOT = HERE.parents[1]

MASTER_KEY = "sy-master-a2a-tests"
EVIL_CARD_URL = "http://169.254.169.254/latest/"

STARTUP_TIMEOUT_S = float(os.environ.get("SWITCHYARD_STARTUP_TIMEOUT", "30"))
AGENT_STARTUP_TIMEOUT_S = float(os.environ.get("A2A_AGENT_STARTUP_TIMEOUT", "30"))
USAGE_TIMEOUT_S = 10.0
FLOW_TIMEOUT_S = 20.0
STOP_TIMEOUT_S = 15.0


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:12]}"


def poll(what: str, check: Callable[[], object], timeout: float, interval: float = 0.02):
    """Call `check` until it returns something truthy (returned) or `timeout` passes (AssertionError)."""
    deadline = time.monotonic() + timeout
    while True:
        last = check()
        if last:
            return last
        if time.monotonic() >= deadline:
            raise AssertionError(f"timed out after {timeout:.0f}s waiting for {what}")
        time.sleep(interval)


def _stop(popen: Optional[subprocess.Popen], sig: int = signal.SIGTERM) -> Optional[int]:
    if popen is None:
        return None
    if popen.poll() is None:
        try:
            popen.send_signal(sig)
            popen.wait(timeout=STOP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            popen.kill()
            popen.wait(timeout=STOP_TIMEOUT_S)
    return popen.returncode


def _tail(path: Optional[Path], lines: int) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])  # type: ignore[union-attr]
    except (OSError, AttributeError):
        return ""


# ------------------------------------------------------------------ agent.py


@dataclass
class Agent:
    name: str
    popen: subprocess.Popen
    log_path: Path
    url: str = ""  # http://127.0.0.1:PORT

    @property
    def hostport(self) -> str:
        return self.url.removeprefix("http://")

    def log_tail(self, lines: int = 30) -> str:
        return _tail(self.log_path, lines)

    def stop(self) -> None:
        _stop(self.popen)


def start_agent(log_dir: Path, name: str, card_url: Optional[str] = None) -> Agent:
    port_file = log_dir / f"{name}.port"
    log_path = log_dir / f"{name}.log"
    args = [sys.executable, str(HERE / "agent.py"), "--port", "0", "--port-file", str(port_file), "--name", name]
    if card_url:
        args += ["--card-url", card_url]
    with open(log_path, "wb") as log:
        popen = subprocess.Popen(args, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT)
    agent = Agent(name, popen, log_path)

    def ready():
        if popen.poll() is not None:
            raise RuntimeError(f"agent.py ({name}) exited with {popen.returncode}:\n{agent.log_tail()}")
        if not port_file.exists():
            return None
        url = f"http://127.0.0.1:{int(port_file.read_text().strip())}"
        try:
            r = httpx.get(url + "/.well-known/agent-card.json", timeout=2.0)
        except httpx.TransportError:
            return None
        return url if r.status_code == 200 else None

    try:
        agent.url = poll(f"agent.py ({name}) to listen", ready, AGENT_STARTUP_TIMEOUT_S, 0.02)
    except BaseException:
        agent.stop()
        raise
    return agent


@pytest.fixture(scope="session")
def agent(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Agent]:
    a = start_agent(tmp_path_factory.mktemp("agent"), "echo-agent")
    try:
        yield a
    finally:
        a.stop()


@pytest.fixture(scope="session")
def evil_agent(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Agent]:
    a = start_agent(tmp_path_factory.mktemp("evil-agent"), "evil-agent", card_url=EVIL_CARD_URL)
    try:
        yield a
    finally:
        a.stop()


# ------------------------------------------------------------------ the gateway


def switchyard_bin() -> Path:
    path = Path(os.environ.get("SWITCHYARD_BIN", "target/debug/switchyard"))
    if not path.is_absolute():
        path = REPO_ROOT / path
    if not path.is_file() or not os.access(path, os.X_OK):
        pytest.fail(f"switchyard binary not found or not executable at {path} (build it or set SWITCHYARD_BIN)")
    return path


def _read_line(stream: IO[bytes], timeout: float) -> Optional[bytes]:
    box: "queue.Queue[bytes]" = queue.Queue(maxsize=1)
    threading.Thread(target=lambda: box.put(stream.readline()), daemon=True).start()
    try:
        return box.get(timeout=timeout)
    except queue.Empty:
        return None


def write_config(path: Path, data: Path, agent_url: str, evil_url: str) -> Path:
    data.mkdir(parents=True, exist_ok=True)
    path.write_text(
        f"""listen: 127.0.0.1:0
auth: {{master_key: {MASTER_KEY}}}
storage: {{url: 'sqlite://{data}/db.sqlite', usage_journal_dir: '{data}/usage'}}
backends: []
agents:
  echo: {{url: '{agent_url}', rpm: 1000}}
  evil: {{url: '{evil_url}'}}
  limited: {{url: '{agent_url}', rpm: 2}}
"""
    )
    return path


@dataclass
class Key:
    id: str
    key: str

    @property
    def headers(self) -> dict:
        return {"Authorization": f"Bearer {self.key}"}


@dataclass
class Gateway:
    name: str
    config: Path
    data: Path
    log_dir: Path
    popen: Optional[subprocess.Popen] = None
    url: str = ""  # http://127.0.0.1:PORT
    log_path: Optional[Path] = None
    _log: Optional[IO[bytes]] = field(default=None, repr=False)

    # -- process
    def start(self) -> "Gateway":
        assert self.popen is None or self.popen.poll() is not None, "already running"
        self.log_path = self.log_dir / f"{self.name}.log"
        self._log = open(self.log_path, "wb")
        env = dict(os.environ, NO_COLOR="1")
        env.setdefault("SWITCHYARD_LOG", "info")
        self.popen = subprocess.Popen(
            [str(switchyard_bin()), "serve", "--config", str(self.config)],
            stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=self._log, cwd=self.log_dir, env=env,
        )
        line = _read_line(self.popen.stdout, STARTUP_TIMEOUT_S)
        text = (line or b"").decode(errors="replace").strip()
        prefix = "listening on "
        if not text.startswith(prefix):
            self.stop(signal.SIGKILL)
            why = f"no `listening on` line within {STARTUP_TIMEOUT_S:.0f}s" if line is None else f"first stdout line was {text!r}"
            pytest.fail(f"{self.name} did not start: {why} (exit code {self.popen.returncode})\n{self.log_tail()}")
        self.url = text[len(prefix):].rstrip("/")

        def healthy():
            try:
                return httpx.get(self.url + "/health", timeout=2.0).status_code == 200
            except httpx.TransportError:
                return False

        poll(f"{self.name}'s /health", healthy, 15.0)
        return self

    def stop(self, sig: int = signal.SIGTERM) -> Optional[int]:
        code = _stop(self.popen, sig)
        if self.popen is not None and self.popen.stdout is not None:
            self.popen.stdout.close()
        if self._log is not None:
            self._log.close()
        return code

    def log_tail(self, lines: int = 60) -> str:
        return _tail(self.log_path, lines)

    # -- URLs
    @property
    def hostport(self) -> str:
        return self.url.removeprefix("http://")

    def agent_base(self, name: str) -> str:
        """What a client is given for an agent: http://GW/a2a/NAME (its card under /.well-known)."""
        return f"{self.url}/a2a/{name}"

    def jsonrpc_url(self, name: str) -> str:
        return f"{self.url}/a2a/{name}/"

    # -- admin API
    @staticmethod
    def auth(key: str = MASTER_KEY) -> dict:
        return {"Authorization": f"Bearer {key}"}

    def create_key(self, agents: list[str], name: Optional[str] = None) -> Key:
        body = {"name": name or unique("a2a-key"), "agents": agents}
        r = httpx.post(self.url + "/admin/keys", headers=self.auth(), json=body, timeout=10.0)
        assert r.status_code == 201, f"POST /admin/keys {body}: {r.status_code} {r.text}"
        got = r.json()
        assert got.get("key") and got.get("id"), f"POST /admin/keys answered {got}"
        return Key(got["id"], got["key"])

    # -- usage records (the SQLite file, written asynchronously by the usage journal)
    def usage_rows(self, key_id: str) -> list[dict]:
        db = self.data / "db.sqlite"
        if not db.exists():
            return []
        conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=5.0)
        try:
            conn.row_factory = sqlite3.Row
            rows = conn.execute("SELECT * FROM usage_records WHERE key_id = ? ORDER BY ts_ms", (key_id,)).fetchall()
        except sqlite3.OperationalError as e:  # table not created yet, or the database busy
            if "no such table" in str(e) or "locked" in str(e):
                return []
            raise
        finally:
            conn.close()
        return [dict(r) for r in rows]

    def wait_usage(self, key_id: str, expect: Callable[[list[dict]], bool], what: str,
                   timeout: float = USAGE_TIMEOUT_S) -> list[dict]:
        """Poll the key's usage records until `expect(rows)` holds; the rows."""
        got: list[list[dict]] = [[]]

        def check():
            got[0] = self.usage_rows(key_id)
            return expect(got[0])

        try:
            poll(what, check, timeout, 0.05)
        except AssertionError as e:
            shown = [{k: r.get(k) for k in USAGE_COLUMNS} for r in got[0]]
            raise AssertionError(f"{e}; the key's records: {json.dumps(shown, indent=1)}") from None
        return got[0]


USAGE_COLUMNS = ("model_requested", "backend", "tool", "task_id", "task_state", "status", "key_id")


def rows_with(rows: list[dict], **want) -> list[dict]:
    return [r for r in rows if all(r.get(k) == v for k, v in want.items())]


@pytest.fixture(scope="session")
def gateway(agent: Agent, evil_agent: Agent, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Gateway]:
    log_dir = tmp_path_factory.mktemp("gateway")
    data = log_dir / "data"
    gw = Gateway("gateway", write_config(log_dir / "gateway.yaml", data, agent.url, evil_agent.url), data, log_dir)
    try:
        yield gw.start()
    finally:
        gw.stop()


@pytest.fixture(scope="session")
def key(gateway: Gateway) -> Key:
    """A key allowed all three agents (shared by tests that do not count its records)."""
    return gateway.create_key(["echo", "evil", "limited"])


# ------------------------------------------------------------------ the SDK's client


def user_message(text: str) -> SendMessageRequest:
    return SendMessageRequest(
        message=Message(message_id=str(uuid.uuid4()), role=Role.ROLE_USER, parts=[Part(text=text)]),
    )


def texts(parts) -> list[str]:
    return [p.text for p in parts if p.HasField("text")]


def state_name(state: int) -> str:
    """TASK_STATE_COMPLETED -> completed (how usage records name a state)."""
    return TaskState.Name(state).removeprefix("TASK_STATE_").lower()


def http_client(key: Optional[str]) -> httpx.AsyncClient:
    headers = {"Authorization": f"Bearer {key}"} if key else {}
    return httpx.AsyncClient(headers=headers, timeout=httpx.Timeout(30.0, connect=5.0))


async def resolve_card(base: str, key: Optional[str]) -> AgentCard:
    async with http_client(key) as http:
        return await A2ACardResolver(http, base).get_agent_card()


@contextlib.asynccontextmanager
async def sdk_client(base: str, key: Optional[str], *, streaming: bool = True,
                     binding: str = TransportProtocol.JSONRPC, card: Optional[AgentCard] = None,
                     ) -> AsyncIterator[tuple[Client, AgentCard]]:
    """The SDK's client for the agent at `base` (its card resolved there unless given), its
    requests carrying `Authorization: Bearer key`; (client, card)."""
    async with http_client(key) as http:
        if card is None:
            card = await A2ACardResolver(http, base).get_agent_card()
        config = ClientConfig(httpx_client=http, streaming=streaming, supported_protocol_bindings=[binding])
        client = ClientFactory(config).create(card)
        try:
            yield client, card
        finally:
            await client.close()


async def collect(stream: AsyncIterator[StreamResponse], timeout: float = FLOW_TIMEOUT_S) -> list[StreamResponse]:
    async def run():
        return [ev async for ev in stream]

    return await asyncio.wait_for(run(), timeout)


def run(coro, timeout: float = FLOW_TIMEOUT_S * 2):
    """Run one test's async flow to completion (bounded)."""
    return asyncio.run(asyncio.wait_for(coro, timeout))


# ------------------------------------------------------------------ failure reports


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo) -> Iterator[None]:
    """On a failure, attach the end of the gateway's log and of agent.py's."""
    outcome = yield
    report = outcome.get_result()
    if not report.failed:
        return
    funcargs = getattr(item, "funcargs", {})
    gw = funcargs.get("gateway")
    if isinstance(gw, Gateway):
        report.sections.append(("gateway log (tail)", gw.log_tail(40)))
    for v in funcargs.values():
        if isinstance(v, Agent):
            report.sections.append((f"{v.name} log (tail)", v.log_tail(20)))


# ------------------------------------------------------------------ by hand: the flows straight at agent.py


if __name__ == "__main__" and "--direct" in sys.argv:
    # Checks the harness without a gateway: the test module's flows against agent.py itself.
    import tempfile

    sys.path.insert(0, str(HERE))
    import test_a2a  # noqa: E402

    with tempfile.TemporaryDirectory() as tmp:
        a = start_agent(Path(tmp), "direct-agent")
        try:
            test_a2a.check_direct(a)
        finally:
            a.stop()
            print(a.log_tail(20))
