"""The system under test for the EPP tests (issue 55): mock pods (mocks.py), the real `switchyard`
binary serving the Endpoint Picker protocol (`epp:`) for a pool of them, and real Envoy
(envoy_proxy.py) calling it over ext_proc — plus the clients the tests use: requests through
Envoy, Switchyard's Prometheus metrics, and gRPC health.

The binary is `$SWITCHYARD_BIN` if set, else `target/debug/switchyard` (relative paths from the
repository root). Readiness is polled: Envoy's admin /ready, Switchyard's gRPC readiness, and one
request through Envoy answered by a pod.
"""

from __future__ import annotations

import http.client
import json
import os
import re
import subprocess
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

from envoy_proxy import Envoy, start_envoy
from mocks import MODEL, MockPod, Recorded, start_pods
from procs import free_port, log_tail, stop_process, wait_until

REPO_ROOT = Path(__file__).resolve().parents[2]
POOL = "pool"
EXT_PROC_SERVICE = "envoy.service.ext_proc.v3.ExternalProcessor"
DESTINATION = "x-gateway-destination-endpoint"
STARTUP_S = float(os.environ.get("SWITCHYARD_STARTUP_TIMEOUT", "30"))

# The two ways the data plane routes on the pick (see envoy.yaml.in): the inference extension's own
# ORIGINAL_DST cluster on the x-gateway-destination-endpoint header, and Envoy's override_host
# policy on the envoy.lb metadata, which also reports the served endpoint back.
ORIGINAL_DST = "original-dst"
OVERRIDE_HOST = "override-host"
DATAPLANES = (ORIGINAL_DST, OVERRIDE_HOST)


def switchyard_bin() -> Path:
    path = Path(os.environ.get("SWITCHYARD_BIN", "target/debug/switchyard"))
    if not path.is_absolute():
        path = REPO_ROOT / path
    if not path.is_file() or not os.access(path, os.X_OK):
        raise FileNotFoundError(f"switchyard binary not found at {path} (cargo build, or set SWITCHYARD_BIN)")
    return path


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

    def get(self, name: str, **labels: str) -> float:
        """The sum of the samples of `name` whose labels include `labels` (0 when none)."""
        return sum(v for n, ls, v in self.samples if n == name and all(ls.get(k) == w for k, w in labels.items()))

    def by(self, name: str, label: str, **labels: str) -> dict[str, float]:
        out: dict[str, float] = {}
        for n, ls, v in self.samples:
            if n == name and label in ls and all(ls.get(k) == w for k, w in labels.items()):
                out[ls[label]] = out.get(ls[label], 0.0) + v
        return out


# --- switchyard --------------------------------------------------------------------------------

@dataclass
class Switchyard:
    proc: subprocess.Popen
    http_port: int
    epp_port: int
    health_port: int
    config_path: Path
    log_path: Path

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.http_port}"

    def metrics(self) -> Metrics:
        conn = http.client.HTTPConnection("127.0.0.1", self.http_port, timeout=5)
        try:
            conn.request("GET", "/metrics")
            r = conn.getresponse()
            text = r.read().decode()
            assert r.status == 200, f"/metrics answered {r.status}: {text[:200]}"
            return Metrics.parse(text)
        finally:
            conn.close()

    def health(self, service: str, port: int | None = None) -> str:
        """The gRPC health status name of `service` on the health port (or `port`)."""
        with grpc.insecure_channel(f"127.0.0.1:{port or self.health_port}") as ch:
            stub = health_pb2_grpc.HealthStub(ch)
            try:
                r = stub.Check(health_pb2.HealthCheckRequest(service=service), timeout=2)
            except grpc.RpcError as e:
                return f"rpc error {e.code().name}"
            return health_pb2.HealthCheckResponse.ServingStatus.Name(r.status)

    def log_tail(self, n: int = 60) -> str:
        return log_tail(self.log_path, n)

    def stop(self) -> None:
        stop_process(self.proc)


def switchyard_config(path: Path, *, http_port: int, epp_port: int, health_port: int,
                      endpoints: Iterable[str], strategy: str | None = "cache-aware",
                      fast_probes: bool = True) -> Path:
    """Switchyard serving the picker over `endpoints`; `strategy=None` and `fast_probes=False`
    leave the routing strategy and health probing at their defaults (the benchmark's)."""
    data = path.parent / (path.stem + "-data")
    data.mkdir(parents=True, exist_ok=True)
    eps = ", ".join(f'"{e}"' for e in endpoints)
    routing = f"routing: {{strategy: {strategy}}}\n" if strategy else ""
    # Probe the pods often, so a stopped pod is seen down within a second.
    probes = "health: {interval: 200ms, timeout: 500ms, down_backoff_min: 50ms, down_backoff_max: 200ms}\n"
    path.write_text(
        f'listen: "127.0.0.1:{http_port}"\n'
        f"storage: {{url: 'sqlite://{data}/switchyard.db', usage_journal_dir: '{data}/usage'}}\n"
        + routing
        + (probes if fast_probes else "")
        + "epp:\n"
        f'  listen: "127.0.0.1:{epp_port}"\n'
        f'  health_listen: "127.0.0.1:{health_port}"\n'
        "  pools:\n"
        f"    - name: {POOL}\n"
        f"      models: [{MODEL}]\n"
        f"      endpoints: [{eps}]\n"
    )
    return path


def check_config(path: Path) -> subprocess.CompletedProcess:
    return subprocess.run([str(switchyard_bin()), "check", "--config", str(path)],
                          capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL)


def start_switchyard(log_dir: Path, endpoints: list[str], *, name: str = "switchyard",
                     strategy: str = "cache-aware") -> Switchyard:
    http_port, epp_port, health_port = free_port(), free_port(), free_port()
    config = switchyard_config(log_dir / f"{name}.yaml", http_port=http_port, epp_port=epp_port,
                               health_port=health_port, endpoints=endpoints, strategy=strategy)
    log_path = log_dir / f"{name}.log"
    env = dict(os.environ)
    env.setdefault("RUST_LOG", "info")
    log = open(log_path, "wb")
    proc = subprocess.Popen([str(switchyard_bin()), "serve", "--config", str(config)],
                            stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                            env=env, cwd=log_dir, start_new_session=True)
    log.close()
    sy = Switchyard(proc, http_port, epp_port, health_port, config, log_path)

    def ready() -> bool:
        if proc.poll() is not None:
            raise RuntimeError(f"switchyard exited with {proc.returncode}\n{sy.log_tail()}")
        return sy.health("readiness") == "SERVING"

    try:
        wait_until(ready, STARTUP_S, "switchyard's gRPC readiness SERVING", sy.log_tail)
    except BaseException:
        sy.stop()
        raise
    return sy


# --- requests through envoy --------------------------------------------------------------------

@dataclass
class Reply:
    status: int
    headers: dict[str, str]
    body: bytes
    test_id: str
    first_byte_at: float | None = None  # monotonic time of the first body bytes

    def json(self) -> Any:
        return json.loads(self.body)

    @property
    def text(self) -> str:
        return self.body.decode(errors="replace")


def new_id(prefix: str = "t") -> str:
    return f"{prefix}-{uuid.uuid4().hex[:12]}"


def send(port: int, method: str, path: str, body: bytes | Iterable[bytes] | None = None, *,
         headers: dict[str, str] | None = None, dataplane: str = ORIGINAL_DST, test_id: str | None = None,
         timeout: float = 30.0) -> Reply:
    """One request to Envoy on 127.0.0.1:`port`, tagged `x-test-id`; a body given as an iterable of
    chunks goes out with chunked transfer-encoding, one chunk at a time."""
    test_id = test_id or new_id()
    hs = {"x-test-id": test_id, **(headers or {})}
    if dataplane == OVERRIDE_HOST:
        hs["x-test-dataplane"] = OVERRIDE_HOST
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    try:
        if body is None or isinstance(body, (bytes, bytearray)):
            conn.request(method, path, body=body, headers=hs)
        else:
            conn.request(method, path, body=iter(body), headers=hs, encode_chunked=True)
        r = conn.getresponse()
        first = r.read(1)
        first_at = time.monotonic() if first else None
        rest = r.read()
        return Reply(r.status, {k.lower(): v for k, v in r.getheaders()}, first + rest, test_id, first_at)
    finally:
        conn.close()


def chat_body(messages: list[dict], *, stream: bool = False, model: str = MODEL, **extra: Any) -> bytes:
    obj: dict[str, Any] = {"model": model, "messages": messages, **extra}
    if stream:
        obj["stream"] = True
    return json.dumps(obj, separators=(",", ":")).encode()


# --- the whole stack ---------------------------------------------------------------------------

@dataclass
class Stack:
    pods: list[MockPod]
    switchyard: Switchyard
    envoy: Envoy
    log_dir: Path
    by_address: dict[str, MockPod] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.by_address = {p.address: p for p in self.pods}

    @property
    def addresses(self) -> list[str]:
        return [p.address for p in self.pods]

    def request(self, method: str, path: str, body: bytes | Iterable[bytes] | None = None, **kw) -> Reply:
        return send(self.envoy.proxy_port, method, path, body, **kw)

    def chat(self, messages: list[dict], *, stream: bool = False, headers: dict[str, str] | None = None,
             **kw) -> tuple[bytes, Reply]:
        body = chat_body(messages, stream=stream)
        hs = {"content-type": "application/json", **(headers or {})}
        return body, self.request("POST", "/v1/chat/completions", body, headers=hs, **kw)

    def received(self, test_id: str) -> list[Recorded]:
        """Every pod's recorded requests tagged `test_id`."""
        return [r for p in self.pods for r in p.snapshot() if r.header("x-test-id") == test_id]

    def served_one(self, reply: Reply) -> Recorded:
        """The one pod request behind `reply` (fails unless exactly one pod got it)."""
        got = self.received(reply.test_id)
        assert len(got) == 1, (
            f"{reply.test_id}: expected exactly one pod to receive it, got {[r.served_by for r in got]} "
            f"(status {reply.status}, body {reply.text[:300]!r})\n{self.diagnostics()}"
        )
        return got[0]

    def diagnostics(self) -> str:
        return "\n".join([self.envoy.log_tail(40), self.switchyard.log_tail(40)])

    def stop(self) -> None:
        self.envoy.stop()
        self.switchyard.stop()
        for p in self.pods:
            p.stop()


def start_stack(log_dir: Path, *, first_ip: int = 2, n: int = 3, strategy: str = "cache-aware",
                **pod_kw) -> Stack:
    pods = start_pods(n, first=first_ip, **pod_kw)
    sy = envoy = None
    try:
        sy = start_switchyard(log_dir, [p.address for p in pods], strategy=strategy)
        envoy = start_envoy(sy.epp_port, [p.address for p in pods], log_dir)
        stack = Stack(pods, sy, envoy, log_dir)

        # Warm: a headers-only request through Envoy answered by a pod once the pool's members
        # are up (Switchyard probes them), polled. Through the override_host route, which takes
        # any form of the pick (the ORIGINAL_DST route is what the tests judge).
        def answered() -> bool:
            r = stack.request("GET", "/v1/models", test_id=new_id("warmup"), dataplane=OVERRIDE_HOST)
            return r.status == 200

        wait_until(answered, STARTUP_S, "a request through envoy answered by a pod", stack.diagnostics, 0.1)
        for p in pods:
            p.clear()
        return stack
    except BaseException:
        if envoy is not None:
            envoy.stop()
        if sy is not None:
            sy.stop()
        for p in pods:
            p.stop()
        raise
