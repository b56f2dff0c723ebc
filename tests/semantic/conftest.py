"""Fixtures for the semantic response cache's black-box tests (tests/semantic/test_semantic.py).

Everything runs against the real `switchyard` binary ($SWITCHYARD_BIN, default
target/debug/switchyard; a relative path is taken from the repository root) in front of
backends.py (all-MiniLM-L6-v2 as `minilm` on /v1/embeddings, the mock chat model as `chat`).

- `backends` (session): backends.py, ready when its port file exists and /health answers.
- `gateway` (session): one gateway with `cache.semantic` on the embedded store, shared by the
  tests that isolate themselves by a unique system prompt (a partition of their own).
- `gateway_factory`: gateways of a test's own (restart, pgvector fleet), stopped at its end.

Readiness is never a sleep: the gateway's one `listening on http://ADDR` stdout line (read under
a timeout), then its /v1/models listing both models; a stored answer is awaited by polling
/metrics until `switchyard_semantic_cache_stores_total` has grown (bounded).

The threshold under test: $SEMANTIC_THRESHOLD (default 0.80) and verify.terms $SEMANTIC_TERMS
(default 0.75).

    SWITCHYARD_BIN=target/debug/switchyard .venv-semantic/bin/python -m pytest -q tests/semantic
"""

from __future__ import annotations

import os
import queue
import signal
import string
import subprocess
import sys
import threading
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Callable, Iterator, Optional

import httpx
import pytest

HERE = Path(__file__).resolve().parent
REPO_ROOT = HERE.parents[1]
TEMPLATE = HERE / "gateway.yaml.tmpl"

MASTER_KEY = "sy-master-semantic-tests"
CHAT_MODEL = "chat"
EMBEDDING_MODEL = "minilm"
THRESHOLD = os.environ.get("SEMANTIC_THRESHOLD", "0.80")
TERMS = os.environ.get("SEMANTIC_TERMS", "0.65")

STARTUP_TIMEOUT_S = float(os.environ.get("SWITCHYARD_STARTUP_TIMEOUT", "30"))
BACKENDS_STARTUP_TIMEOUT_S = float(os.environ.get("SEMANTIC_BACKENDS_STARTUP_TIMEOUT", "60"))
STORE_TIMEOUT_S = 10.0
STOP_TIMEOUT_S = 15.0

STORES = "switchyard_semantic_cache_stores_total"
HITS = 'switchyard_semantic_cache_lookups_total{result="hit"}'
MISSES = 'switchyard_semantic_cache_lookups_total{result="miss"}'
ENTRIES = "switchyard_semantic_cache_entries"


def unique(prefix: str) -> str:
    """A system prompt (or name) no other test uses: a partition of its own."""
    return f"{prefix} {uuid.uuid4().hex[:12]}"


def poll(what: str, check: Callable[[], object], timeout: float, interval: float = 0.02):
    """Call `check` until it returns something truthy (returned) or `timeout` passes (AssertionError)."""
    deadline = time.monotonic() + timeout
    last = None
    while True:
        last = check()
        if last:
            return last
        if time.monotonic() >= deadline:
            raise AssertionError(f"timed out after {timeout:.0f}s waiting for {what}")
        time.sleep(interval)


# ------------------------------------------------------------------ backends.py


@dataclass
class Backends:
    url: str
    popen: subprocess.Popen
    log_path: Path

    def counts(self) -> dict:
        return httpx.get(self.url + "/counts", timeout=10.0).json()

    def chat_count(self) -> int:
        return self.counts()["chat"]

    def log_tail(self, lines: int = 30) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""

    def stop(self) -> None:
        if self.popen.poll() is None:
            self.popen.terminate()
            try:
                self.popen.wait(timeout=STOP_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                self.popen.kill()
                self.popen.wait()


def start_backends(log_dir: Path) -> Backends:
    port_file = log_dir / "backends.port"
    log_path = log_dir / "backends.log"
    log = open(log_path, "wb")
    popen = subprocess.Popen(
        [sys.executable, str(HERE / "backends.py"), "--port", "0", "--port-file", str(port_file)],
        stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
    )
    log.close()
    backends = Backends("", popen, log_path)

    def ready():
        if popen.poll() is not None:
            raise RuntimeError(f"backends.py exited with {popen.returncode}:\n{backends.log_tail()}")
        if not port_file.exists():
            return None
        url = f"http://127.0.0.1:{int(port_file.read_text().strip())}"
        try:
            return url if httpx.get(url + "/health", timeout=2.0).status_code == 200 else None
        except httpx.TransportError:
            return None

    try:
        backends.url = poll("backends.py to listen", ready, BACKENDS_STARTUP_TIMEOUT_S, 0.05)
    except BaseException:
        backends.stop()
        raise
    return backends


@pytest.fixture(scope="session")
def backends(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Backends]:
    b = start_backends(tmp_path_factory.mktemp("backends"))
    try:
        yield b
    finally:
        b.stop()


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


def write_config(path: Path, backends_url: str, data: Path, semantic_store: str = "") -> Path:
    """The gateway's YAML from gateway.yaml.tmpl; `semantic_store` is extra YAML under
    `cache.semantic` (indented by 4), e.g. "store: pgvector\\nurl: ...\\n"."""
    data.mkdir(parents=True, exist_ok=True)
    store = "".join(f"    {line}\n" for line in semantic_store.splitlines() if line.strip())
    template = "".join(line for line in TEMPLATE.read_text().splitlines(True) if not line.startswith("#"))
    text = string.Template(template).substitute(
        data=data, master_key=MASTER_KEY, backend_url=backends_url, chat_model=CHAT_MODEL,
        embedding_model=EMBEDDING_MODEL, threshold=THRESHOLD, terms=TERMS, semantic_store=store,
    )
    path.write_text(text)
    return path


@dataclass
class Gateway:
    name: str
    config: Path
    log_dir: Path
    popen: Optional[subprocess.Popen] = None
    url: str = ""
    log_path: Optional[Path] = None
    _log: Optional[IO[bytes]] = field(default=None, repr=False)
    starts: int = 0

    # -- process
    def start(self) -> "Gateway":
        assert self.popen is None or self.popen.poll() is not None, "already running"
        self.starts += 1
        self.log_path = self.log_dir / f"{self.name}-{self.starts}.log"
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
        self.url = text[len(prefix):]
        self._wait_for_models()
        return self

    def stop(self, sig: int = signal.SIGTERM) -> Optional[int]:
        if self.popen is None:
            return None
        if self.popen.poll() is None:
            try:
                self.popen.send_signal(sig)
                self.popen.wait(timeout=STOP_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                self.popen.kill()
                self.popen.wait(timeout=STOP_TIMEOUT_S)
        if self.popen.stdout is not None:
            self.popen.stdout.close()
        if self._log is not None:
            self._log.close()
        return self.popen.returncode

    def log_tail(self, lines: int = 60) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except (OSError, AttributeError):
            return ""

    def _wait_for_models(self, timeout: float = 15.0) -> None:
        def listed():
            try:
                r = httpx.get(self.url + "/v1/models", headers=self.auth(), timeout=5.0)
            except httpx.TransportError:
                return False
            return r.status_code == 200 and {CHAT_MODEL, EMBEDDING_MODEL} <= {m.get("id") for m in r.json().get("data", [])}

        poll(f"{self.name} to list {CHAT_MODEL} and {EMBEDDING_MODEL}", listed, timeout, 0.05)

    def wait_ready(self, timeout: float = 15.0) -> None:
        """Poll /ready until it answers 200 (a backend is up)."""
        def ready():
            try:
                return httpx.get(self.url + "/ready", timeout=5.0).status_code == 200
            except httpx.TransportError:
                return False

        poll(f"{self.name}'s /ready", ready, timeout)

    # -- HTTP
    @staticmethod
    def auth(key: str = MASTER_KEY) -> dict:
        return {"Authorization": f"Bearer {key}"}

    def metrics(self) -> dict[str, float]:
        """/metrics as {series (name with its labels as written): value}."""
        r = httpx.get(self.url + "/metrics", headers=self.auth(), timeout=10.0)
        r.raise_for_status()
        out: dict[str, float] = {}
        for line in r.text.splitlines():
            if not line or line.startswith("#"):
                continue
            series, _, value = line.rpartition(" ")
            try:
                out[series] = float(value)
            except ValueError:
                pass
        return out

    def metric(self, series: str) -> float:
        return self.metrics().get(series, 0.0)

    def stores(self) -> float:
        return self.metric(STORES)

    def wait_stores(self, at_least: float, timeout: float = STORE_TIMEOUT_S) -> float:
        """Poll /metrics until `switchyard_semantic_cache_stores_total` >= at_least; its value."""
        got = [0.0]

        def reached():
            got[0] = self.stores()
            return got[0] >= at_least

        try:
            poll(f"{STORES} >= {at_least}", reached, timeout)
        except AssertionError as e:
            raise AssertionError(f"{e} (it is {got[0]}); gateway log:\n{self.log_tail(20)}") from None
        return got[0]

    def chat(self, client: httpx.Client, question: str, system: Optional[str] = None, key: str = MASTER_KEY,
             headers: Optional[dict] = None, **body) -> httpx.Response:
        """One OpenAI chat completion (non-stream) through `client`."""
        messages = ([{"role": "system", "content": system}] if system is not None else []) + [
            {"role": "user", "content": question}]
        return client.post(self.url + "/v1/chat/completions", headers={**self.auth(key), **(headers or {})},
                           json={"model": CHAT_MODEL, "messages": messages, **body})

    def request_record(self, request_id: str, timeout: float = 15.0) -> dict:
        """The request log's row for `request_id` (GET /ui/api/requests?id=, signed in to the
        console with the master key), polled until the usage journal has reached the database."""
        with httpx.Client(base_url=self.url, timeout=10.0) as console:
            r = console.post("/ui/login", data={"key": MASTER_KEY})
            assert r.status_code in (302, 303) and "set-cookie" in r.headers, f"console login: {r.status_code} {r.text}"

            def row():
                got = console.get("/ui/api/requests", params={"id": request_id})
                assert got.status_code == 200, f"GET /ui/api/requests: {got.status_code} {got.text}"
                return next((d for d in got.json()["data"] if d.get("id") == request_id), None)

            return poll(f"the usage record of {request_id}", row, timeout, 0.05)

    # -- admin API
    def create_team(self, name: str) -> str:
        r = httpx.post(self.url + "/admin/teams", headers=self.auth(), json={"name": name}, timeout=10.0)
        assert r.status_code in (200, 201), f"POST /admin/teams: {r.status_code} {r.text}"
        return r.json()["id"]

    def create_key(self, team_id: Optional[str] = None, name: Optional[str] = None) -> str:
        body: dict = {"name": name or unique("key")}
        if team_id is not None:
            body["team_id"] = team_id
        r = httpx.post(self.url + "/admin/keys", headers=self.auth(), json=body, timeout=10.0)
        assert r.status_code in (200, 201), f"POST /admin/keys: {r.status_code} {r.text}"
        return r.json()["key"]


GatewayFactory = Callable[..., Gateway]


@pytest.fixture
def gateway_factory(backends: Backends, tmp_path: Path) -> Iterator[GatewayFactory]:
    """`make(name, semantic_store="", data=None)`: a started gateway of this test's own (its
    config in tmp_path, its SQLite data in `data`, default tmp_path/NAME-data), stopped at the end."""
    started: list[Gateway] = []

    def make(name: str, semantic_store: str = "", data: Optional[Path] = None) -> Gateway:
        config = write_config(tmp_path / f"{name}.yaml", backends.url, data or tmp_path / f"{name}-data", semantic_store)
        gw = Gateway(name, config, tmp_path)
        started.append(gw)
        return gw.start()

    make.started = started  # type: ignore[attr-defined]  # for the failure report
    yield make
    for gw in reversed(started):
        gw.stop()


@pytest.fixture(scope="session")
def gateway(backends: Backends, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Gateway]:
    """The shared gateway (embedded store)."""
    log_dir = tmp_path_factory.mktemp("gateway")
    gw = Gateway("gateway", write_config(log_dir / "gateway.yaml", backends.url, log_dir / "data"), log_dir)
    try:
        yield gw.start()
    finally:
        gw.stop()


@pytest.fixture
def http() -> Iterator[httpx.Client]:
    with httpx.Client(timeout=60.0) as c:
        yield c


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo) -> Iterator[None]:
    """On a failure, attach the end of each gateway's log and of backends.py's."""
    outcome = yield
    report = outcome.get_result()
    if not report.failed:
        return
    funcargs = getattr(item, "funcargs", {})
    gateways = [v for v in funcargs.values() if isinstance(v, Gateway)]
    for v in funcargs.values():
        gateways += getattr(v, "started", [])
    for gw in gateways:
        report.sections.append((f"{gw.name} log (tail)", gw.log_tail(40)))
    for v in funcargs.values():
        if isinstance(v, Backends):
            report.sections.append(("backends.py log (tail)", v.log_tail(20)))
