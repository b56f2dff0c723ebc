"""Cache-aware routing on the engines' KV-cache events, through a fleet, in steady state and with a
late joiner (issue 54, judged: "cache-aware warm prefill ≤ 1.25× the ideal, and ≤ ½ of
round-robin").

Four engine emulators (emulator.py, vLLM's own publisher, `vllm` encoding) whose GPU tier holds
four finished conversations' worth of blocks: a little more than the ideal assignment gives any
engine (13 users over 4 engines: 4, 3, 3, 3), far less than the 13 conversations round-robin
spreads over every engine. Each of the 13 users, all at once, holds a 4-turn conversation: a
system prompt shared by every user (~150 tokens), the user's own document (~500 tokens, distinct
per user and per run), then per turn the engine's reply and a short new question. Each turn waits
for the previous one.

Warm prefill = Σ over turns 2..4 of (usage.prompt_tokens − usage.prompt_tokens_details.cached_tokens),
the tokens the engines computed for conversations they could have held. Runs, each on fresh engines:
- ideal: user u's turns sent straight to engine u % 4 (no gateway);
- round-robin: one gateway, `routing: {strategy: round-robin}`;
- steady state: a fleet of three gateway instances, `cache-aware` with the model's tokenizer and
  `kv_events` for all four engines (every instance subscribes to every engine, no Redis); turn t of
  user u goes through instance (u + t) % 3, so consecutive turns never pass the same instance;
- late joiner: the same, but engine e3 is started only after the three instances are up (their
  config names its ports, picked in advance); traffic starts once every instance has it up and live.

Between turns each user thinks THINK_MS/2..THINK_MS (`FLEET_THINK_MS`, default 100; 0 = back to
back, see THINK_MS). Asserted for both fleet runs: warm ≤ 1.25 × ideal, warm ≤ 0.5 × round-robin,
every engine took a fair share (max/min requests ≤ 2, from `x-switchyard-backend`), and every warm
turn was routed by the events (`why=events: N blocks on <the backend it went to>`).

The figures of every run are printed (run with `-s`): warm and cold prefill, requests per engine,
the ratios, new conversations per engine, the route reasons by kind, every turn-1 route that was
not "least recently loaded", and every warm turn that computed more than its new tail:
    .venv-kv/bin/python -m pytest tests/kv_events/test_fleet_prefill.py -s
    FLEET_THINK_MS=0 .venv-kv/bin/python -m pytest tests/kv_events/test_fleet_prefill.py -s
"""

from __future__ import annotations

import os
import random
import re
import socket
import threading
import time
import uuid
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterator

import httpx
import pytest

from stack import _WORDS, BLOCK_SIZE, MODEL, Gateway, Routed, chat_body, wait_for  # first: puts procs on the path
from emulator import Emulator
from procs import start

import reference

ENGINES = ("e0", "e1", "e2", "e3")
LATE = "e3"
INSTANCES = 3
USERS = 13  # not a multiple of 4: lockstep round-robin cannot keep a conversation on one engine by chance
TURNS = 4
SYSTEM_WORDS = 110  # ~150 tokens of shared system prompt
DOCUMENT_WORDS = 340  # ~500 tokens of the user's own document
CONVERSATIONS_HELD = 4  # engine capacity, in finished conversations (ideal: at most 4 per engine)
MAX_OVER_IDEAL = 1.25
MAX_OVER_ROUND_ROBIN = 0.5
MAX_IMBALANCE = 2.0  # max/min requests per engine
READY_S = 30.0
# Between a turn's answer and the user's next turn: a pause of THINK_MS/2..THINK_MS, varied by user
# and turn (as `switchyard-bench --think-ms`, which scripts/bench-llamacpp uses); 0 sends the next
# turn the moment the answer arrives. In a fleet the next turn goes through another instance, which
# knows where the previous turn went only from the engine's events (a few ms after the answer
# here): back to back, it can route before they arrived.
THINK_MS = int(os.environ.get("FLEET_THINK_MS", "100"))

SYSTEM = "You are a careful analyst of field reports. Answer briefly and cite the line. " + " ".join(
    random.Random("system").choice(_WORDS) for _ in range(SYSTEM_WORDS)
)


# --- the conversations -------------------------------------------------------------------------

def opening(run: str, user: int) -> list[dict]:
    """User `user`'s first prompt in run `run`: the shared system prompt, then a document of its own."""
    rng = random.Random(f"{run}-{user}")
    lines = [" ".join(rng.choice(_WORDS) for _ in range(12)) + "." for _ in range(DOCUMENT_WORDS // 12)]
    return [
        {"role": "system", "content": SYSTEM},
        {"role": "user", "content": f"Report {run}-{user}:\n" + "\n".join(lines)},
    ]


def question(user: int, turn: int) -> str:
    word = random.Random(f"q-{user}-{turn}").choice(_WORDS)
    return f"Question {turn}: what does the report say about the {word}?"


@dataclass
class Turn:
    user: int
    turn: int  # 1-based
    backend: str | None
    route: str
    status: int
    prompt_tokens: int
    cached_tokens: int
    body: object = None
    sent: float = 0.0  # time.monotonic() when sent, and when answered
    answered: float = 0.0

    @property
    def computed(self) -> int:
        return self.prompt_tokens - self.cached_tokens

    @property
    def routed(self) -> Routed:
        return Routed(self.status, self.backend, self.route, self.body)


@dataclass
class Run:
    name: str
    turns: list[Turn]
    wall_s: float
    notes: list[str] = field(default_factory=list)

    @property
    def warm(self) -> int:
        return sum(t.computed for t in self.turns if t.turn > 1)

    @property
    def cold(self) -> int:
        return sum(t.computed for t in self.turns if t.turn == 1)

    def per_engine(self) -> dict[str, int]:
        counts = Counter(t.backend for t in self.turns)
        return {name: counts.get(name, 0) for name in ENGINES} | {k: v for k, v in counts.items() if k not in ENGINES}

    def imbalance(self) -> float:
        counts = [self.per_engine().get(name, 0) for name in ENGINES]
        return max(counts) / min(counts) if min(counts) else float("inf")


Send = Callable[[httpx.Client, int, int, list[dict]], Turn]


def think_s(user: int, turn: int) -> float:
    """The user's pause before `turn` (seconds): THINK_MS/2..THINK_MS, deterministic."""
    if THINK_MS <= 0:
        return 0.0
    half = THINK_MS // 2
    return (half + (user * 7919 + turn * 104_729) % (THINK_MS - half + 1)) / 1000


def converse(name: str, run_tag: str, send: Send) -> Run:
    """Every user's conversation at once (one thread each, all released together); each turn waits
    for the previous one, and the user's think time (`THINK_MS`)."""
    go = threading.Barrier(USERS)

    def user(u: int) -> list[Turn]:
        out: list[Turn] = []
        with httpx.Client(timeout=60.0) as client:
            messages = opening(run_tag, u)
            go.wait()
            for t in range(1, TURNS + 1):
                if t > 1:
                    time.sleep(think_s(u, t))  # the user reading the answer (workload, not a readiness wait)
                    messages = [*messages, {"role": "assistant", "content": "ok"},
                                {"role": "user", "content": question(u, t)}]
                sent = time.monotonic()
                turn = send(client, u, t, messages)
                turn.sent, turn.answered = sent, time.monotonic()
                out.append(turn)
                if turn.status != 200:
                    break
        return out

    t0 = time.monotonic()
    with ThreadPoolExecutor(USERS) as pool:
        turns = [t for ts in pool.map(user, range(USERS)) for t in ts]
    run = Run(name, sorted(turns, key=lambda t: (t.user, t.turn)), time.monotonic() - t0)
    bad = [t for t in run.turns if t.status != 200]
    assert not bad, f"{name}: failed requests: {[(t.user, t.turn, t.status, t.body) for t in bad[:3]]}"
    assert len(run.turns) == USERS * TURNS
    return run


def usage_turn(u: int, t: int, r: httpx.Response, backend: str | None) -> Turn:
    body = r.json() if r.headers.get("content-type", "").startswith("application/json") else r.text
    usage = (body.get("usage") or {}) if isinstance(body, dict) else {}
    cached = (usage.get("prompt_tokens_details") or {}).get("cached_tokens") or 0
    return Turn(u, t, backend, r.headers.get("x-switchyard-route", ""), r.status_code,
                usage.get("prompt_tokens", 0), cached, body)


def direct_send(engines: dict[str, Emulator]) -> Send:
    names = list(engines)

    def send(client: httpx.Client, u: int, t: int, messages: list[dict]) -> Turn:
        name = names[u % len(names)]
        r = client.post(engines[name].url + "/v1/chat/completions", json=chat_body(messages))
        return usage_turn(u, t, r, name)

    return send


def fleet_send(gateways: list[Gateway]) -> Send:
    def send(client: httpx.Client, u: int, t: int, messages: list[dict]) -> Turn:
        gw = gateways[(u + t) % len(gateways)]
        r = client.post(gw.url + "/v1/chat/completions", json=chat_body(messages))
        return usage_turn(u, t, r, r.headers.get("x-switchyard-backend"))

    return send


# --- engines and gateways ----------------------------------------------------------------------

def free_ports(n: int) -> list[int]:
    """`n` distinct ports free right now (held together while picked, so they differ)."""
    socks = []
    try:
        for _ in range(n):
            s = socket.socket()
            s.bind(("0.0.0.0", 0))
            socks.append(s)
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


@dataclass(frozen=True)
class EngineAddr:
    """Where an engine listens, known before it starts."""

    name: str
    http: int
    pub: int
    replay: int

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.http}"


def capacity_blocks(tokenizer_dir: Path) -> int:
    """`CONVERSATIONS_HELD` finished conversations' worth of blocks (shared prefix counted each time)."""
    messages = opening("capacity", 0)
    for t in range(2, TURNS + 1):
        messages = [*messages, {"role": "assistant", "content": "ok"}, {"role": "user", "content": question(0, t)}]
    return CONVERSATIONS_HELD * (len(reference.render_ids(tokenizer_dir, chat_body(messages))) // BLOCK_SIZE)


class Fleet:
    """Fresh engines (some started later) and gateway instances in front of them."""

    def __init__(self, tokenizer_dir: Path, log_dir: Path, capacity: int) -> None:
        self.tokenizer_dir, self.log_dir, self.capacity = tokenizer_dir, log_dir, capacity
        self.addrs = {name: EngineAddr(name, *free_ports(3)) for name in ENGINES}
        self.engines: dict[str, Emulator] = {}
        self.gateways: list[Gateway] = []

    def start_engine(self, name: str) -> Emulator:
        a = self.addrs[name]
        emu = Emulator(model=MODEL, tokenizer_dir=self.tokenizer_dir, engine="vllm", capacity_blocks=self.capacity,
                       block_size=BLOCK_SIZE, http_port=a.http, zmq_port=a.pub, replay_port=a.replay, name=name)
        self.engines[name] = emu.start()
        assert emu.url == a.url, (emu.url, a.url)
        return emu

    def config(self, name: str, strategy: str, kv_events: bool) -> Path:
        data = self.log_dir / f"{name}-data"
        data.mkdir(parents=True, exist_ok=True)
        lines = [
            "listen: 127.0.0.1:0",
            f"storage: {{url: 'sqlite://{data}/switchyard.db', usage_journal_dir: '{data}/usage'}}",
            f"routing: {{strategy: {strategy}}}",
            "models:",
            f"  {MODEL}: {{tokenizer: '{self.tokenizer_dir}'}}" if kv_events else f"  {MODEL}: {{}}",
            "backends:",
        ]
        for a in self.addrs.values():
            lines += [f"  - name: {a.name}", f"    url: {a.url}", f"    models: [{MODEL}]"]
            if kv_events:
                lines.append(
                    f'    kv_events: {{endpoint: "tcp://127.0.0.1:{a.pub}", '
                    f'replay_endpoint: "tcp://127.0.0.1:{a.replay}", topic: "", '
                    f'block_size: {BLOCK_SIZE}, engine: vllm}}'
                )
        path = self.log_dir / f"{name}.yaml"
        path.write_text("\n".join(lines) + "\n")
        return path

    def start_gateway(self, name: str, strategy: str, kv_events: bool) -> Gateway:
        proc = start(name, ["serve", "--config", str(self.config(name, strategy, kv_events))], self.log_dir)
        gw = Gateway(proc, list(ENGINES))
        self.gateways.append(gw)
        return gw

    def wait_ready(self, gateways: list[Gateway], backends: tuple[str, ...] = ENGINES, kv_events: bool = True) -> None:
        """Every instance: the model listed, and each of `backends` up (and its event feed live)."""
        for gw in gateways:
            wait_for(f"model {MODEL} in {gw.proc.name}'s /v1/models",
                     lambda: gw.client.get(gw.url + "/v1/models").json(),
                     lambda doc: MODEL in {m.get("id") for m in doc.get("data", [])}, READY_S)

            def probe(gw: Gateway = gw) -> dict[str, tuple[float | None, float | None]]:
                m = gw.metrics()
                return {b: (m.get("switchyard_backend_up", backend=b), m.get("switchyard_kv_events_live", backend=b))
                        for b in backends}

            live = " and switchyard_kv_events_live 1" if kv_events else ""
            wait_for(f"{gw.proc.name}: switchyard_backend_up 1{live} for {list(backends)} (up, live)", probe,
                     lambda v: all(up == 1 and (live == 1 or not kv_events) for up, live in v.values()), READY_S)

    def logs(self) -> str:
        return "\n".join(f"--- {gw.proc.name} log ---\n{gw.log_tail()}" for gw in self.gateways)

    def stop(self) -> None:
        for gw in self.gateways:
            gw.stop()
        for emu in self.engines.values():
            emu.stop()


# --- figures -----------------------------------------------------------------------------------

FIGURES: dict[str, Run] = {}


def report(run: Run, baseline: dict[str, Run] | None = None) -> None:
    per = run.per_engine()
    line = (f"[fleet-prefill] {run.name:<13} warm prefill {run.warm:>6} tokens (turns 2..{TURNS}), cold {run.cold:>6}, "
            f"requests per engine {per}, max/min {run.imbalance():.2f}, {run.wall_s:.1f}s")
    if baseline:
        ideal, rr = baseline["ideal"].warm, baseline["round-robin"].warm
        line += f"; ×ideal {run.warm / ideal:.2f}, ×round-robin {run.warm / rr:.3f}"
    print(line, flush=True)
    for note in run.notes:
        print(f"[fleet-prefill]   {note}", flush=True)


def route_kinds(run: Run) -> Counter:
    """The `why` of each turn with its numbers and backend names blanked (`events: N blocks on B`,
    `events: new conversation sharing a cached prefix (N): ...`, `events: balance: ...`)."""
    kinds: Counter = Counter()
    for t in run.turns:
        why = re.sub(r"\d+(\.\d+)?", "N", re.sub(r"\be\d+\b", "B", t.routed.why))
        kinds[f"turn {'1' if t.turn == 1 else '2+'}: {why}"] += 1
    return kinds


def costly_warm_turns(run: Run) -> list[str]:
    """Warm turns that computed more than their new tail (what an engine holding the conversation
    computes): where the cache was missed, and why the gateway chose as it did."""
    previous = {(t.user, t.turn): t for t in run.turns}
    out = []
    for t in run.turns:
        if t.turn == 1:
            continue
        prev = previous[(t.user, t.turn - 1)]
        expected = t.prompt_tokens - (prev.prompt_tokens // BLOCK_SIZE) * BLOCK_SIZE
        if t.computed > expected:
            out.append(f"user {t.user} turn {t.turn}: computed {t.computed} (not {expected}) on {t.backend}, "
                       f"previous turn on {prev.backend}; route {t.route!r}")
    return out


@pytest.fixture(scope="module")
def capacity(tokenizer_dir: Path) -> int:
    return capacity_blocks(tokenizer_dir)


@pytest.fixture(scope="module")
def baseline(tokenizer_dir: Path, tmp_path_factory: pytest.TempPathFactory, capacity: int) -> Iterator[dict[str, Run]]:
    """The ideal assignment and round-robin, each on fresh engines; the summary printed at the end."""
    runs: dict[str, Run] = {}
    tag = uuid.uuid4().hex[:8]
    print(f"\n[fleet-prefill] {USERS} users × {TURNS} turns over {len(ENGINES)} engines, engine capacity "
          f"{capacity} blocks of {BLOCK_SIZE} ({CONVERSATIONS_HELD} finished conversations), think time "
          f"{THINK_MS // 2}-{THINK_MS} ms, run tag {tag}", flush=True)

    ideal = Fleet(tokenizer_dir, tmp_path_factory.mktemp("fleet-ideal"), capacity)
    try:
        for name in ENGINES:
            ideal.start_engine(name)
        runs["ideal"] = converse("ideal", f"{tag}-ideal", direct_send(ideal.engines))
    finally:
        ideal.stop()
    report(runs["ideal"])

    rr = Fleet(tokenizer_dir, tmp_path_factory.mktemp("fleet-rr"), capacity)
    try:
        for name in ENGINES:
            rr.start_engine(name)
        gw = rr.start_gateway("round-robin", "round-robin", kv_events=False)
        rr.wait_ready([gw], kv_events=False)
        runs["round-robin"] = converse("round-robin", f"{tag}-rr", fleet_send([gw]))
    finally:
        rr.stop()
    report(runs["round-robin"])
    FIGURES.update(runs)
    runs["tag"] = tag  # type: ignore[assignment]
    yield runs

    print("\n[fleet-prefill] summary", flush=True)
    for run in FIGURES.values():
        report(run, runs)


def check_fleet(run: Run, baseline: dict[str, Run], fleet: Fleet) -> None:
    ideal, rr = baseline["ideal"].warm, baseline["round-robin"].warm
    kinds = route_kinds(run)
    opened = Counter(t.backend for t in run.turns if t.turn == 1)
    run.notes.append("new conversations per engine: " + str({name: opened.get(name, 0) for name in ENGINES}))
    run.notes += [f"turn 1 of user {t.user} via gw{(t.user + 1) % INSTANCES}: {t.route!r}"
                  for t in run.turns if t.turn == 1 and not t.route.endswith("least recently loaded")]
    run.notes.append("routes: " + ", ".join(f"{k} ×{n}" for k, n in sorted(kinds.items())))
    misses = costly_warm_turns(run)
    run.notes += [f"cache missed: {m}" for m in misses]
    report(run, baseline)
    FIGURES[run.name] = run

    problems = []
    if run.warm > MAX_OVER_IDEAL * ideal:
        problems.append(f"warm prefill {run.warm} > {MAX_OVER_IDEAL} × ideal {ideal} ({run.warm / ideal:.2f}×)")
    if run.warm > MAX_OVER_ROUND_ROBIN * rr:
        problems.append(f"warm prefill {run.warm} > {MAX_OVER_ROUND_ROBIN} × round-robin {rr} ({run.warm / rr:.3f}×)")
    if run.imbalance() > MAX_IMBALANCE:
        problems.append(f"unfair shares: requests per engine {run.per_engine()} (max/min {run.imbalance():.2f})")
    not_events = [t for t in run.turns if t.turn > 1 and (t.routed.events is None or t.routed.events[1] != t.backend)]
    if not_events:
        problems.append(f"{len(not_events)} warm turns not routed by the events: "
                        + "; ".join(f"user {t.user} turn {t.turn} on {t.backend}: {t.route!r}" for t in not_events[:5]))
    assert not problems, f"{run.name}:\n  " + "\n  ".join(problems) + "\n" + fleet.logs()


def test_steady_state_fleet(baseline: dict[str, Run], tokenizer_dir: Path, tmp_path: Path, capacity: int) -> None:
    """Three cache-aware instances, every engine there from the start."""
    fleet = Fleet(tokenizer_dir, tmp_path, capacity)
    try:
        for name in ENGINES:
            fleet.start_engine(name)
        gateways = [fleet.start_gateway(f"gw{i}", "cache-aware", kv_events=True) for i in range(INSTANCES)]
        fleet.wait_ready(gateways)
        run = converse("steady-state", f"{baseline['tag']}-steady", fleet_send(gateways))
        check_fleet(run, baseline, fleet)
    finally:
        fleet.stop()


def test_late_joiner_fleet(baseline: dict[str, Run], tokenizer_dir: Path, tmp_path: Path, capacity: int) -> None:
    """Three cache-aware instances started while e3 is not there; e3 joins, then the traffic."""
    fleet = Fleet(tokenizer_dir, tmp_path, capacity)
    try:
        early = tuple(n for n in ENGINES if n != LATE)
        for name in early:
            fleet.start_engine(name)
        gateways = [fleet.start_gateway(f"gw{i}", "cache-aware", kv_events=True) for i in range(INSTANCES)]
        fleet.wait_ready(gateways, early)
        for gw in gateways:  # it is really late: down, its feed not live
            m = gw.metrics()
            assert m.get("switchyard_backend_up", backend=LATE) == 0, f"{gw.proc.name}: {LATE} up before it started"
            assert m.get("switchyard_kv_events_live", backend=LATE) == 0, f"{gw.proc.name}: {LATE} live too early"
        joined = time.monotonic()
        fleet.start_engine(LATE)
        fleet.wait_ready(gateways)
        print(f"\n[fleet-prefill] late joiner {LATE}: up and live on all {INSTANCES} instances "
              f"{time.monotonic() - joined:.2f}s after it started", flush=True)
        run = converse("late-joiner", f"{baseline['tag']}-late", fleet_send(gateways))
        check_fleet(run, baseline, fleet)
    finally:
        fleet.stop()
