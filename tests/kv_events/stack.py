"""The gateway side of the KV-event tests: the real `switchyard` binary in front of engine
emulators (emulator.py) with `routing: cache-aware` and each backend's `kv_events`, its readiness
(the model discovered and every backend's event feed live, by bounded polls), its Prometheus
metrics, and the routing decision it reports in `x-switchyard-route`.

Processes are started with tests/conformance/procs.py (readiness = the gateway's one
`listening on URL` line; `$SWITCHYARD_BIN` or target/debug/switchyard)."""

from __future__ import annotations

import random
import re
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, TypeVar

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "conformance"))

from procs import Proc, start  # noqa: E402

from emulator import Emulator  # noqa: E402

MODEL = "qwen"
BLOCK_SIZE = 16
POLL_S = 0.02  # between two polls of a condition (never a readiness wait of its own)
WAIT_S = 15.0  # how long a condition may take to come true

T = TypeVar("T")


def wait_for(what: str, probe: Callable[[], T], ok: Callable[[T], bool], timeout: float = WAIT_S) -> T:
    """Poll `probe()` until `ok` holds for its value, which is returned; fail with the last value."""
    deadline = time.monotonic() + timeout
    while True:
        value = probe()
        if ok(value):
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:.0f}s waiting for {what}; last value: {value!r}")
        time.sleep(POLL_S)


# --- metrics -----------------------------------------------------------------------------------

_SAMPLE = re.compile(r'^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})?\s+(\S+)')
_LABEL = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"')


@dataclass
class Metrics:
    samples: list[tuple[str, dict[str, str], float]]

    @classmethod
    def parse(cls, text: str) -> "Metrics":
        out = []
        for line in text.splitlines():
            m = _SAMPLE.match(line)
            if m and not line.startswith("#"):
                out.append((m[1], dict(_LABEL.findall(m[2] or "")), float(m[3])))
        return cls(out)

    def get(self, name: str, **labels: str) -> float | None:
        """The sum of the samples of `name` whose labels include `labels`; None when there is none."""
        found = [v for n, ls, v in self.samples if n == name and all(ls.get(k) == w for k, w in labels.items())]
        return sum(found) if found else None


# --- routing decisions -------------------------------------------------------------------------

_EVENTS_WHY = re.compile(r"events: (\d+) blocks? on ([A-Za-z0-9_.-]+)")


@dataclass
class Routed:
    """A chat answer through the gateway and the decision behind it."""

    status: int
    backend: str | None
    route: str
    body: Any

    @property
    def why(self) -> str:
        _, _, why = self.route.partition("why=")
        return why

    @property
    def events(self) -> tuple[int, str] | None:
        """(blocks, backend) when the events decided (`why=events: N blocks on B`), else None."""
        m = _EVENTS_WHY.search(self.why)
        return (int(m[1]), m[2]) if m else None

    @property
    def cached_tokens(self) -> int | None:
        usage = (self.body or {}).get("usage") or {}
        return (usage.get("prompt_tokens_details") or {}).get("cached_tokens")


# --- prompts -----------------------------------------------------------------------------------

_WORDS = (
    "harbour lantern orchard granite meadow quarry ledger compass velvet thimble anchor willow "
    "furnace saddle beacon marble cinder pigeon canyon timber parcel ribbon glacier hazel tundra "
    "mantle ferry cobalt prism walnut falcon ember basalt cedar raven copper lagoon summit juniper "
    "spindle orbit vessel crater garnet kettle meadowlark thistle sparrow pebble quartz lattice "
    "bramble cascade dune estuary fjord grove heath inlet knoll loch marsh nook oasis plateau"
).split()


def document(tag: str, words: int = 240) -> list[dict]:
    """A chat that opens with a long document of its own (~1.3 tokens a word): its system prompt
    names `tag`, so no two documents share even their first block."""
    rng = random.Random(tag)
    lines = [" ".join(rng.choice(_WORDS) for _ in range(12)) + "." for _ in range(words // 12)]
    return [
        {"role": "system", "content": f"You are the archivist of collection {tag}."},
        {"role": "user", "content": "Read this document:\n" + "\n".join(lines)},
    ]


def continuation(messages: list[dict], question: str) -> list[dict]:
    """The conversation of `messages` one turn on: the engine's reply, then a new question."""
    return [*messages, {"role": "assistant", "content": "ok"}, {"role": "user", "content": question}]


def chat_body(messages: list[dict], **extra: Any) -> dict:
    return {"model": MODEL, "messages": messages, "max_tokens": 1, **extra}


# --- the stack ---------------------------------------------------------------------------------

def gateway_config(path: Path, tokenizer_dir: Path, engines: dict[str, Emulator]) -> Path:
    data = path.parent / (path.stem + "-data")
    data.mkdir(parents=True, exist_ok=True)
    lines = [
        "listen: 127.0.0.1:0",
        f"storage: {{url: 'sqlite://{data}/switchyard.db', usage_journal_dir: '{data}/usage'}}",
        "routing: {strategy: cache-aware}",
        "models:",
        f"  {MODEL}: {{tokenizer: '{tokenizer_dir}'}}",
        "backends:",
    ]
    for name, emu in engines.items():
        lines += [
            f"  - name: {name}",
            f"    url: {emu.url}",
            f"    models: [{MODEL}]",
            f'    kv_events: {{endpoint: "{emu.pub_endpoint}", replay_endpoint: "{emu.replay_endpoint}", '
            f'topic: "", block_size: {emu.cache.block_size}, engine: {emu.encoding.engine}}}',
        ]
    path.write_text("\n".join(lines) + "\n")
    return path


@dataclass
class Gateway:
    proc: Proc
    backends: list[str]
    client: httpx.Client = field(default_factory=lambda: httpx.Client(timeout=30.0))

    @property
    def url(self) -> str:
        return self.proc.url

    def metrics(self) -> Metrics:
        r = self.client.get(self.url + "/metrics")
        r.raise_for_status()
        return Metrics.parse(r.text)

    def blocks(self, backend: str, tier: str = "gpu") -> float | None:
        return self.metrics().get("switchyard_kv_blocks", backend=backend, tier=tier)

    def counter(self, name: str, backend: str) -> float:
        return self.metrics().get(name, backend=backend) or 0.0

    def chat(self, messages: list[dict], **extra: Any) -> Routed:
        r = self.client.post(self.url + "/v1/chat/completions", json=chat_body(messages, **extra))
        body = r.json() if r.headers.get("content-type", "").startswith("application/json") else r.text
        return Routed(r.status_code, r.headers.get("x-switchyard-backend"), r.headers.get("x-switchyard-route", ""), body)

    def wait_ready(self) -> None:
        """The model discovered, and every backend's event feed subscribed and caught up."""
        wait_for(
            f"model {MODEL} in /v1/models",
            lambda: self.client.get(self.url + "/v1/models").json(),
            lambda doc: MODEL in {m.get("id") for m in doc.get("data", [])},
        )
        wait_for(
            f"switchyard_kv_events_live 1 for {self.backends}",
            lambda: {b: self.metrics().get("switchyard_kv_events_live", backend=b) for b in self.backends},
            lambda live: all(v == 1 for v in live.values()),
        )

    def wait_blocks(self, backend: str, emu: Emulator, timeout: float = WAIT_S) -> None:
        """Until the gateway knows as many blocks per tier on `backend` as the engine holds."""
        def probe() -> tuple[dict, dict]:
            held = emu.blocks()
            m = self.metrics()
            known = {t: m.get("switchyard_kv_blocks", backend=backend, tier=t) or 0 for t in ("gpu", "cpu")}
            return {"gpu": held["gpu"], "cpu": held["cpu"]}, known

        wait_for(f"the gateway's switchyard_kv_blocks{{backend={backend}}} to equal the engine's (engine, gateway)",
                 probe, lambda v: v[0] == v[1], timeout)

    def log_tail(self) -> str:
        return self.proc.log_tail(60)

    def stop(self) -> None:
        self.client.close()
        self.proc.stop()


def start_gateway(name: str, log_dir: Path, tokenizer_dir: Path, engines: dict[str, Emulator]) -> Gateway:
    config = gateway_config(log_dir / f"{name}.yaml", tokenizer_dir, engines)
    gw = Gateway(start(name, ["serve", "--config", str(config)], log_dir), list(engines))
    try:
        gw.wait_ready()
    except BaseException:
        print(f"--- {name} log ---\n{gw.log_tail()}", file=sys.stderr)
        gw.stop()
        raise
    return gw


def shared_blocks(emu: Emulator, warm: list[dict], cont: list[dict]) -> int:
    """Full blocks `cont`'s prompt shares with `warm`'s (what an engine that served `warm` holds
    of it), by the engine's own tokenization."""
    a, b = emu.tokens(chat_body(warm)), emu.tokens(chat_body(cont))
    common = next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))
    return common // emu.cache.block_size
