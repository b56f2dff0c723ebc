"""Fixtures for the OpenAI-SDK conformance tests.

Everything runs against the real `switchyard` binary: two mock backends (`switchyard mock`) and
the gateway (`switchyard serve`) are started as subprocesses. Each prints exactly one line
`listening on http://ADDR` on stdout when ready; that line is the only readiness signal used
(no sleeps), read under a timeout so a broken binary fails the run quickly instead of hanging.

The binary is `$SWITCHYARD_BIN` if set, else `target/debug/switchyard`; a relative path is taken
from the repository root. Build it first with `cargo build`.
"""

from __future__ import annotations

import os
import queue
import signal
import subprocess
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Iterator, Optional

import httpx
import pytest
from openai import OpenAI

REPO_ROOT = Path(__file__).resolve().parents[2]
STARTUP_TIMEOUT_S = float(os.environ.get("SWITCHYARD_STARTUP_TIMEOUT", "20"))
STOP_TIMEOUT_S = 10.0

# Model layout of the shared gateway: m1 serves model-a, m2 serves model-b, both serve "shared".
MODEL_A = "model-a"
MODEL_B = "model-b"
SHARED_MODEL = "shared"
ALIAS = "fast"  # -> model-a


def switchyard_bin() -> Path:
    path = Path(os.environ.get("SWITCHYARD_BIN", "target/debug/switchyard"))
    if not path.is_absolute():
        path = REPO_ROOT / path
    if not path.is_file() or not os.access(path, os.X_OK):
        pytest.fail(f"switchyard binary not found or not executable at {path} (run `cargo build` or set SWITCHYARD_BIN)")
    return path


@dataclass
class Proc:
    """A running switchyard subprocess and the URL it announced."""

    name: str
    popen: subprocess.Popen
    url: str
    log_path: Path
    _log: IO[bytes] = field(repr=False)

    @property
    def port(self) -> int:
        return int(self.url.rsplit(":", 1)[1])

    def log_tail(self, lines: int = 40) -> str:
        try:
            text = self.log_path.read_text(errors="replace")
        except OSError:
            return ""
        return "\n".join(text.splitlines()[-lines:])

    def stop(self, sig: int = signal.SIGTERM) -> Optional[int]:
        """Signal the process and wait for it; SIGKILL if it does not exit in time. Returns its exit code."""
        if self.popen.poll() is None:
            try:
                self.popen.send_signal(sig)
                self.popen.wait(timeout=STOP_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                self.popen.kill()
                self.popen.wait(timeout=STOP_TIMEOUT_S)
        if self.popen.stdout is not None:
            self.popen.stdout.close()
        self._log.close()
        return self.popen.returncode


def _read_line(stream: IO[bytes], timeout: float) -> Optional[bytes]:
    """First line of `stream`, or None if none arrived within `timeout` seconds."""
    box: "queue.Queue[bytes]" = queue.Queue(maxsize=1)
    reader = threading.Thread(target=lambda: box.put(stream.readline()), daemon=True)
    reader.start()
    try:
        return box.get(timeout=timeout)
    except queue.Empty:
        return None


def start(name: str, args: list[str], log_dir: Path) -> Proc:
    """Start `switchyard ARGS`, wait for its `listening on` line, return it as a Proc."""
    log_path = log_dir / f"{name}.log"
    log = open(log_path, "wb")
    env = dict(os.environ, NO_COLOR="1")
    env.setdefault("SWITCHYARD_LOG", "info")
    popen = subprocess.Popen(
        [str(switchyard_bin()), *args],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=log,
        cwd=log_dir,
        env=env,
    )
    proc = Proc(name=name, popen=popen, url="", log_path=log_path, _log=log)
    assert popen.stdout is not None
    line = _read_line(popen.stdout, STARTUP_TIMEOUT_S)
    text = (line or b"").decode(errors="replace").strip()
    prefix = "listening on "
    if not text.startswith(prefix):
        proc.stop(signal.SIGKILL)
        why = "no `listening on` line within %.0fs" % STARTUP_TIMEOUT_S if line is None else f"first stdout line was {text!r}"
        pytest.fail(f"{name} did not start: {why} (exit code {popen.returncode})\n--- {log_path} ---\n{proc.log_tail()}")
    proc.url = text[len(prefix):]
    return proc


def start_mock(name: str, models: list[str], log_dir: Path, *extra: str) -> Proc:
    return start(name, ["mock", "--listen", "127.0.0.1:0", "--models", ",".join(models), *extra], log_dir)


def write_config(path: Path, backends: list[tuple[str, str]], extra: str = "") -> Path:
    data = path.parent / (path.stem + "-data")
    data.mkdir(parents=True, exist_ok=True)
    lines = [
        "listen: 127.0.0.1:0",
        f"storage: {{url: 'sqlite://{data}/switchyard.db', usage_journal_dir: '{data}/usage'}}",
        "routing: {strategy: round-robin}",
        f"aliases: {{{ALIAS}: {MODEL_A}}}",
        "backends:",
        *(f'  - {{name: {n}, url: "{u}", type: openai}}' for n, u in backends),
    ]
    path.write_text("\n".join(lines) + "\n" + extra)
    return path


def start_gateway(name: str, config: Path, log_dir: Path) -> Proc:
    return start(name, ["serve", "--config", str(config)], log_dir)


@dataclass
class Stack:
    mock1: Proc
    mock2: Proc
    gateway: Proc

    @property
    def url(self) -> str:
        return self.gateway.url


@pytest.fixture(scope="session")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    """Two mock backends and a gateway in front of both, shared by the whole session."""
    log_dir = tmp_path_factory.mktemp("switchyard")
    procs: list[Proc] = []
    try:
        mock1 = start_mock("mock1", [MODEL_A, SHARED_MODEL], log_dir)
        procs.append(mock1)
        mock2 = start_mock("mock2", [MODEL_B, SHARED_MODEL], log_dir)
        procs.append(mock2)
        config = write_config(log_dir / "gateway.yaml", [("m1", mock1.url), ("m2", mock2.url)])
        gateway = start_gateway("gateway", config, log_dir)
        procs.append(gateway)
        yield Stack(mock1, mock2, gateway)
    finally:
        for p in reversed(procs):
            p.stop()


@pytest.fixture(scope="session")
def gateway_url(stack: Stack) -> str:
    return stack.url


@pytest.fixture(scope="session")
def client(gateway_url: str) -> Iterator[OpenAI]:
    # No SDK retries: a failing request must show up as the failure it is.
    c = OpenAI(base_url=gateway_url + "/v1", api_key="unused", max_retries=0, timeout=30.0)
    yield c
    c.close()


@dataclass
class LoneBackend:
    """A gateway whose only backend is a mock the test may kill."""

    mock: Proc
    gateway: Proc

    def kill_backend(self) -> None:
        self.mock.stop(signal.SIGKILL)

    def wait_until_not_ready(self, timeout: float = 15.0) -> None:
        """Poll /ready until the gateway reports no healthy backend (its prober noticed the kill)."""
        deadline = time.monotonic() + timeout
        last = None
        while time.monotonic() < deadline:
            last = httpx.get(self.gateway.url + "/ready", timeout=5.0)
            if last.status_code == 503:
                return
            time.sleep(0.05)
        raise AssertionError(f"/ready never went to 503 after the backend died; last answer: {last and last.text}")

    def client(self, **kwargs) -> OpenAI:
        kwargs.setdefault("max_retries", 0)
        return OpenAI(base_url=self.gateway.url + "/v1", api_key="unused", timeout=30.0, **kwargs)


@pytest.fixture
def lone_backend(tmp_path: Path) -> Iterator[LoneBackend]:
    """Function scope: a fresh mock and gateway for tests that kill the backend."""
    procs: list[Proc] = []
    try:
        mock = start_mock("lone-mock", [MODEL_A], tmp_path)
        procs.append(mock)
        # A short probe interval keeps the "prober notices the dead backend" wait small.
        config = write_config(tmp_path / "lone.yaml", [("lone", mock.url)], "health: {interval: 200ms}\n")
        gateway = start_gateway("lone-gateway", config, tmp_path)
        procs.append(gateway)
        yield LoneBackend(mock, gateway)
    finally:
        for p in reversed(procs):
            p.stop()
