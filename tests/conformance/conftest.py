"""Fixtures for the SDK conformance tests (OpenAI, Anthropic and Ollama clients).

Everything runs against the real `switchyard` binary: mock backends (`switchyard mock`) and
gateways (`switchyard serve`) are started as subprocesses. Each prints exactly one line
`listening on http://ADDR` on stdout when ready; that line is the only readiness signal used
(no sleeps), read under a timeout so a broken binary fails the run quickly instead of hanging.

Starting and stopping processes lives in `procs.py`; the binary is `$SWITCHYARD_BIN` if set, else
`target/debug/switchyard`. Build it first with `cargo build`.
"""

from __future__ import annotations

import signal
import time
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

import httpx
import pytest
from openai import OpenAI

from procs import Proc, start, switchyard_bin  # noqa: F401 (Proc and switchyard_bin are re-exported to the tests)

# Model layout of the shared gateway: m1 serves model-a, m2 serves model-b, both serve "shared".
MODEL_A = "model-a"
MODEL_B = "model-b"
SHARED_MODEL = "shared"
ALIAS = "fast"  # -> model-a

# Model layout of the matrix gateway: one model per backend type, so a test parametrized over
# `backend_model` runs once against each kind of backend (translating where the APIs differ).
OA_MODEL = "oa-model"  # backend `oa`, type openai
AN_MODEL = "an-model"  # backend `an`, type anthropic (the mock demands x-api-key: test-key)
OL_MODEL = "ol-model"  # backend `ol`, type ollama
MATRIX_MODELS = {OA_MODEL: "oa", AN_MODEL: "an", OL_MODEL: "ol"}
ANTHROPIC_BACKEND_KEY = "test-key"

# What every mock answers: its default 5 chunks, 5 completion tokens, one tool call with these
# arguments when offered tools, and this prefix before a tool result's content.
CONTENT = "tok0 tok1 tok2 tok3 tok4 "
COMPLETION_TOKENS = 5
TOOL_ARGUMENTS = {"location": "Paris", "unit": "celsius"}
TOOL_RESULT_PREFIX = "Tool result: "


def start_mock(name: str, models: list[str], log_dir: Path, *extra: str) -> Proc:
    return start(name, ["mock", "--listen", "127.0.0.1:0", "--models", ",".join(models), *extra], log_dir)


def _backend_line(backend: tuple[str, ...]) -> str:
    """`(name, url)` or `(name, url, type)` or `(name, url, type, api_key)` as a YAML list item."""
    name, url, kind, *key = (*backend, "openai") if len(backend) == 2 else backend
    api_key = f", api_key: {key[0]}" if key else ""
    return f'  - {{name: {name}, url: "{url}", type: {kind}{api_key}}}'


def write_config(path: Path, backends: list[tuple[str, ...]], extra: str = "") -> Path:
    data = path.parent / (path.stem + "-data")
    data.mkdir(parents=True, exist_ok=True)
    lines = [
        "listen: 127.0.0.1:0",
        f"storage: {{url: 'sqlite://{data}/switchyard.db', usage_journal_dir: '{data}/usage'}}",
        "routing: {strategy: round-robin}",
        f"aliases: {{{ALIAS}: {MODEL_A}}}",
        "backends:",
        *(_backend_line(b) for b in backends),
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


@dataclass
class Matrix:
    """One mock backend of each type (openai, anthropic, ollama) behind one gateway."""

    mocks: dict[str, Proc]  # backend name -> mock
    gateway: Proc

    @property
    def url(self) -> str:
        return self.gateway.url

    def mock_of(self, model: str) -> Proc:
        return self.mocks[MATRIX_MODELS[model]]


def _wait_for_models(gateway: Proc, models: list[str], timeout: float = 10.0) -> None:
    """Poll the gateway's catalogue until every backend's model was discovered. On timeout carry
    on: the tests of the missing backend fail on their own (404), the others still run."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        r = httpx.get(gateway.url + "/v1/models", timeout=5.0)
        if r.status_code == 200 and set(models) <= {m.get("id") for m in r.json().get("data", [])}:
            return
        time.sleep(0.05)


@pytest.fixture(scope="session")
def backend_mocks(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Proc]]:
    """`switchyard mock --api openai|anthropic|ollama`, by backend name (`oa`, `an`, `ol`)."""
    log_dir = tmp_path_factory.mktemp("mocks")
    mocks: dict[str, Proc] = {}
    try:
        mocks["oa"] = start_mock("mock-openai", [OA_MODEL], log_dir, "--api", "openai")
        mocks["an"] = start_mock(
            "mock-anthropic", [AN_MODEL], log_dir, "--api", "anthropic", "--api-key", ANTHROPIC_BACKEND_KEY
        )
        mocks["ol"] = start_mock("mock-ollama", [OL_MODEL], log_dir, "--api", "ollama")
        yield mocks
    finally:
        for p in reversed(list(mocks.values())):
            p.stop()


@pytest.fixture(scope="session")
def matrix(backend_mocks: dict[str, Proc], tmp_path_factory: pytest.TempPathFactory) -> Iterator[Matrix]:
    """A gateway in front of one backend of each type (see `backend_mocks`)."""
    log_dir = tmp_path_factory.mktemp("matrix")
    backends = [
        ("oa", backend_mocks["oa"].url, "openai"),
        ("an", backend_mocks["an"].url, "anthropic", ANTHROPIC_BACKEND_KEY),
        ("ol", backend_mocks["ol"].url, "ollama"),
    ]
    config = write_config(log_dir / "matrix.yaml", backends)
    gateway = start_gateway("matrix-gateway", config, log_dir)
    try:
        _wait_for_models(gateway, list(MATRIX_MODELS))
        yield Matrix(backend_mocks, gateway)
    finally:
        gateway.stop()


@contextmanager
def four_backend_gateway(
    backend_mocks: dict[str, Proc], log_dir: Path, gemini_model: str, gemini_key: str, extra: str = ""
) -> Iterator[str]:
    """A gateway before the matrix's three mocks and a Gemini one serving `gemini_model` (with
    `extra` YAML): its URL, once every model is discovered."""
    gemini = start_mock("mock-gemini", [gemini_model], log_dir, "--api", "gemini", "--api-key", gemini_key)
    backends = [
        ("oa", backend_mocks["oa"].url, "openai"),
        ("an", backend_mocks["an"].url, "anthropic", ANTHROPIC_BACKEND_KEY),
        ("ol", backend_mocks["ol"].url, "ollama"),
        ("ge", gemini.url, "gemini", gemini_key),
    ]
    config = write_config(log_dir / "four-backends.yaml", backends, extra)
    gateway = start_gateway("four-backend-gateway", config, log_dir)
    try:
        _wait_for_models(gateway, [*MATRIX_MODELS, gemini_model])
        yield gateway.url
    finally:
        gateway.stop()
        gemini.stop()


@pytest.fixture(params=list(MATRIX_MODELS), ids=["openai-backend", "anthropic-backend", "ollama-backend"])
def backend_model(request: pytest.FixtureRequest) -> str:
    """The model of each backend type in turn (see `matrix`)."""
    return request.param
