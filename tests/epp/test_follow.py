"""Switchyard follows an external Endpoint Picker (issue 55): the inference extension's own reference picker.

The picker is the Gateway API Inference Extension's lightweight EPP (lwepp, v1.6.2), built from its Go module by
`scripts/refpicker` (tests/epp/refpicker/) and run with the mock pods as its static endpoints. A pool backend with
`epp: {endpoint, failure_mode}` must, for every request, open an ext_proc stream to it as Envoy would, send the
request's headers and body, send the request to the endpoint named by the answer's `x-gateway-destination-endpoint`
header mutation (or `envoy.lb` dynamic metadata), and report the served endpoint back on the response path.

lwepp picks round-robin over its pods, or among the pods whose IPs are listed in the `test-epp-endpoint-selection`
request header (the conformance suite's steering header), which Switchyard forwards to the picker with the client's
other headers. On the response path it reads `envoy.lb` / `x-gateway-destination-endpoint-served` and logs it as the
value of `x-conformance-test-served-endpoint` ("fail: missing ..." when absent): its log is how the report is checked.

Environment: SWITCHYARD_BIN (default target/debug/switchyard), REFPICKER_BIN (default: built by scripts/refpicker).
No sleeps stand in for readiness: each process's own "listening on" line, then Switchyard's /ready, are polled.
"""

from __future__ import annotations

import http.client
import json
import os
import re
import signal
import socket
import subprocess
import time
import urllib.error
import urllib.request
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

import pytest

from mocks import MODEL, MockPod, completion_text, start_pods
from procs import free_port, log_tail, spawn, stop_process, wait_line, wait_until

REPO = Path(__file__).resolve().parents[2]
STEER = "test-epp-endpoint-selection"  # lwepp's test-only steering header
STARTUP_TIMEOUT = float(os.environ.get("SWITCHYARD_STARTUP_TIMEOUT", "30"))
REQUEST_TIMEOUT = 30.0


# --------------------------------------------------------------------------------------------- processes


def switchyard_bin() -> Path:
    path = Path(os.environ.get("SWITCHYARD_BIN", "target/debug/switchyard"))
    if not path.is_absolute():
        path = REPO / path
    if not (path.is_file() and os.access(path, os.X_OK)):
        pytest.fail(f"switchyard binary not found at {path} (cargo build, or set SWITCHYARD_BIN)")
    return path


@pytest.fixture(scope="session")
def refpicker_bin() -> str:
    """The reference picker: $REFPICKER_BIN, else built (once; cached afterwards) by scripts/refpicker."""
    if os.environ.get("REFPICKER_BIN"):
        return os.environ["REFPICKER_BIN"]
    done = subprocess.run([str(REPO / "scripts/refpicker")], capture_output=True, text=True, timeout=1800)
    if done.returncode != 0:
        pytest.fail(f"scripts/refpicker failed ({done.returncode}):\n{done.stderr[-4000:]}")
    return done.stdout.strip().splitlines()[-1]


class Picker:
    """A running refpicker (lwepp) on 127.0.0.1:port with the given pods as its endpoints."""

    def __init__(self, binary: str, port: int, pods: list[MockPod], log_dir: Path, name: str = "refpicker"):
        self.port = port
        endpoints = ",".join(p.address for p in pods)
        # --v 4: lwepp logs each pick ("Selected endpoint"), which the tests compare with what was served.
        self.proc, self.out, self.err = spawn(
            [binary, "--listen", f"127.0.0.1:{port}", "--endpoints", endpoints, "--v", "4"], log_dir, name)
        wait_line(self.proc, self.out, self.err, "refpicker: listening on ", "the reference picker", STARTUP_TIMEOUT)

    @property
    def endpoint(self) -> str:
        return f"127.0.0.1:{self.port}"

    def kill(self) -> None:
        """SIGKILL: the picker is gone, its port refuses connections."""
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(10)

    def stop(self) -> None:
        stop_process(self.proc)

    def _logged(self, message: str) -> list[dict]:
        pattern = re.compile(re.escape(message) + r"\s+(\{.*\})\s*$")
        text = self.err.read_text(errors="replace")
        # Only whole lines: the picker may be writing one as it is read.
        return [json.loads(m.group(1)) for line in text[: text.rfind("\n") + 1].splitlines()
                if (m := pattern.search(line))]

    def picks(self) -> list[str]:
        """Every endpoint lwepp has picked, in order (one per request it answered)."""
        return [f["endpoint"] for f in self._logged("Selected endpoint")]

    def served_reports(self) -> list[str]:
        """Each value lwepp set as x-conformance-test-served-endpoint, i.e. what the gateway reported as served
        (lwepp writes "fail: missing ..." when the response headers came without the envoy.lb metadata)."""
        return [f["value"] for f in self._logged("Setting conformance test result header")]

    def streams(self) -> int:
        """How many ext_proc streams lwepp has opened (it logs one line per stream)."""
        return self.err.read_text(errors="replace").count("Processing new stream")

    def log(self) -> str:
        return log_tail(self.err, 40)


class Gateway:
    """`switchyard serve` with one pool backend `pool` (model m1) over `pods`, following the picker at `epp`."""

    def __init__(self, name: str, pods: list[MockPod], epp: str, failure_mode: str, log_dir: Path,
                 timeout: str | None = None):
        data = log_dir / f"{name}-data"
        data.mkdir(parents=True, exist_ok=True)
        follow = f'endpoint: "{epp}", failure_mode: {failure_mode}' + (f", timeout: {timeout}" if timeout else "")
        self.config = log_dir / f"{name}.yaml"
        self.config.write_text("\n".join([
            'listen: "127.0.0.1:0"',
            f"storage: {{url: 'sqlite://{data}/switchyard.db', usage_journal_dir: '{data}/usage'}}",
            "backends:",
            "  - name: pool",
            "    type: openai",
            f"    models: [{MODEL}]",
            f"    epp: {{{follow}}}",
            "    endpoints: [" + ", ".join(f'"{p.address}"' for p in pods) + "]",
        ]) + "\n")
        env = dict(os.environ, NO_COLOR="1")
        env.setdefault("SWITCHYARD_LOG", "info")
        self.name = name
        self.proc, self.out, self.err = spawn(
            [str(switchyard_bin()), "serve", "--config", str(self.config)], log_dir, name, env)
        self.url = wait_line(self.proc, self.out, self.err, "listening on ", f"switchyard ({name})", STARTUP_TIMEOUT).rstrip("/")
        wait_until(self._ready, STARTUP_TIMEOUT, f"{name}: /ready to answer 200", diag=self.log)

    def _ready(self) -> bool:
        if self.proc.poll() is not None:
            raise AssertionError(f"{self.name} exited with {self.proc.returncode}\n{self.log()}")
        try:
            with urllib.request.urlopen(self.url + "/ready", timeout=5) as r:
                return r.status == 200
        except (urllib.error.URLError, OSError):
            return False

    def stop(self) -> None:
        stop_process(self.proc)

    def log(self) -> str:
        return log_tail(self.err, 60)


# ------------------------------------------------------------------------------------------------- HTTP


@dataclass
class Reply:
    status: int
    headers: dict[str, str]
    body: bytes

    def json(self):
        return json.loads(self.body)


def post(gw: Gateway, path: str, payload: dict | bytes, headers: dict[str, str] | None = None) -> Reply:
    data = payload if isinstance(payload, bytes) else encode(payload)
    host, port = gw.url.removeprefix("http://").rsplit(":", 1)
    conn = http.client.HTTPConnection(host, int(port), timeout=REQUEST_TIMEOUT)
    try:
        conn.request("POST", path, body=data, headers={"content-type": "application/json",
                                                       "authorization": "Bearer unused", **(headers or {})})
        resp = conn.getresponse()
        body = resp.read()  # a streamed answer is read to its end
        return Reply(resp.status, {k.lower(): v for k, v in resp.getheaders()}, body)
    finally:
        conn.close()


def sse_data(body: bytes) -> list[str]:
    return [line[len("data:"):].strip() for line in body.decode().splitlines() if line.startswith("data:")]


def chat_body(marker: str, size: int = 1024, stream: bool = False) -> dict:
    """An OpenAI chat request of about `size` bytes (UTF-8 JSON) whose user message carries `marker`, padded with
    multi-byte text so a re-encoding on the way would show."""
    body = {"model": MODEL, "messages": [
        {"role": "system", "content": "You are a test."},
        {"role": "user", "content": marker},
    ], "max_tokens": 16, "temperature": 0}
    if stream:
        body["stream"] = True
    unit = " naïve café — 数据 🚂"
    room = size - len(encode(body))
    body["messages"][1]["content"] += unit * max(0, room // len(unit.encode()))
    return body


def encode(payload: dict) -> bytes:
    return json.dumps(payload, ensure_ascii=False).encode()


def served_by(pods: list[MockPod], marker: str) -> list[str]:
    """The addresses of the pods that received a chat completion carrying `marker` (one entry per request)."""
    return [r.served_by for p in pods for r in p.find(marker) if r.method == "POST"]


def new_marker() -> str:
    return f"marker-{uuid.uuid4().hex}"


def ip(pod: MockPod) -> str:
    return pod.ip


# --------------------------------------------------------------------------------------------- fixtures


@pytest.fixture(scope="module")
def pods() -> Iterator[list[MockPod]]:
    ps = start_pods(3)
    yield ps
    for p in ps:
        p.stop()


@pytest.fixture(scope="module")
def picker(refpicker_bin: str, pods: list[MockPod], tmp_path_factory: pytest.TempPathFactory) -> Iterator[Picker]:
    pk = Picker(refpicker_bin, free_port(), pods, tmp_path_factory.mktemp("picker"))
    yield pk
    pk.stop()


@pytest.fixture(scope="module")
def gateway(picker: Picker, pods: list[MockPod], tmp_path_factory: pytest.TempPathFactory) -> Iterator[Gateway]:
    gw = Gateway("follow-closed", pods, picker.endpoint, "closed", tmp_path_factory.mktemp("gateway"))
    yield gw
    gw.stop()


def _explain(gw: Gateway, pk: Picker | None = None) -> str:
    return f"\n--- switchyard ---\n{gw.log()}" + (f"\n--- refpicker ---\n{pk.log()}" if pk else "")


# ------------------------------------------------------------------------------------------------ tests


@pytest.mark.parametrize("index", [0, 1, 2])
def test_steered_request_lands_on_the_picked_pod(gateway: Gateway, picker: Picker, pods: list[MockPod], index: int):
    """With `test-epp-endpoint-selection: <ip>` lwepp picks that pod; Switchyard must send the request there."""
    target = pods[index]
    for _ in range(3):  # several times: a steered pick must win every time, not by luck of its own routing
        marker = new_marker()
        sent = chat_body(marker)
        r = post(gateway, "/v1/chat/completions", sent, {STEER: ip(target)})
        assert r.status == 200, f"{r.status} {r.body[:500]!r}{_explain(gateway, picker)}"
        assert served_by(pods, marker) == [target.address], _explain(gateway, picker)
        assert r.json()["choices"][0]["message"]["content"] == completion_text(target.address)


def test_body_reaches_the_pod_intact(gateway: Gateway, picker: Picker, pods: list[MockPod]):
    """The ~1 KB body (multi-byte UTF-8 included) arrives with every field the client sent."""
    marker = new_marker()
    sent = chat_body(marker, size=1024)
    raw = encode(sent)
    assert 950 < len(raw) <= 1024
    r = post(gateway, "/v1/chat/completions", raw, {STEER: ip(pods[1])})
    assert r.status == 200, f"{r.status} {r.body[:500]!r}{_explain(gateway, picker)}"
    got = pods[1].find(marker)
    assert len(got) == 1, _explain(gateway, picker)
    received = json.loads(got[0].body)
    for key, value in sent.items():
        assert received.get(key) == value, f"field {key!r} changed on the way: {received.get(key)!r}"


def test_large_body_split_into_several_ext_proc_chunks(gateway: Gateway, picker: Picker, pods: list[MockPod]):
    """A body over 62 KiB reaches the picker in several body messages; lwepp then answers a body message before it
    answers the headers (its pick). The pick must still be followed, and the whole body must reach the pod."""
    marker = new_marker()
    sent = chat_body(marker, size=200_000)
    r = post(gateway, "/v1/chat/completions", sent, {STEER: ip(pods[2])})
    assert r.status == 200, f"{r.status} {r.body[:500]!r}{_explain(gateway, picker)}"
    assert served_by(pods, marker) == [pods[2].address], _explain(gateway, picker)
    assert json.loads(pods[2].find(marker)[0].body)["messages"] == sent["messages"]


def test_streamed_request_lands_on_the_picked_pod(gateway: Gateway, picker: Picker, pods: list[MockPod]):
    for target in [pods[0], pods[0], pods[2], pods[1], pods[1]]:  # no cycle of a gateway's own would serve this
        marker = new_marker()
        r = post(gateway, "/v1/chat/completions", chat_body(marker, stream=True), {STEER: ip(target)})
        assert r.status == 200, f"{r.status} {r.body[:500]!r}{_explain(gateway, picker)}"
        assert r.headers.get("content-type", "").startswith("text/event-stream")
        events = sse_data(r.body)
        assert events and events[-1] == "[DONE]", r.body[-300:]
        text = "".join((json.loads(e)["choices"] or [{}])[0].get("delta", {}).get("content") or ""
                       for e in events[:-1])
        assert text == completion_text(target.address)
        assert served_by(pods, marker) == [target.address], _explain(gateway, picker)


def test_unsteered_requests_follow_the_round_robin(gateway: Gateway, picker: Picker, pods: list[MockPod]):
    """Without the steering header lwepp round-robins over its pods. Each request must be served by exactly the pod
    lwepp picked for it (its log names each pick), with one pick per request: a gateway round-robining on its own
    would cycle too, but not in step with lwepp's counter, which the steered requests in between also advance."""
    n = len(pods)
    before = len(picker.picks())
    served = []
    for i in range(4 * n):
        marker = new_marker()
        steer = {STEER: ip(pods[i % n])} if i % 4 == 3 else {}  # every fourth request steered: shifts lwepp's cycle
        r = post(gateway, "/v1/chat/completions", chat_body(marker, stream=(i % 2 == 1)), steer)
        assert r.status == 200, f"{r.status} {r.body[:500]!r}{_explain(gateway, picker)}"
        got = served_by(pods, marker)
        assert len(got) == 1, f"request {i} reached {got}{_explain(gateway, picker)}"
        served.append(got[0])
    picks = picker.picks()[before:]
    assert picks == served, f"lwepp picked {picks}, the pods served {served}{_explain(gateway, picker)}"
    unsteered = [a for i, a in enumerate(served) if i % 4 != 3]
    assert set(unsteered) == {p.address for p in pods}, f"round-robin never reached every pod: {unsteered}"


def test_served_endpoint_is_reported_to_the_picker(gateway: Gateway, picker: Picker, pods: list[MockPod]):
    """After the answer, the served endpoint goes back on the same stream (response headers with envoy.lb /
    x-gateway-destination-endpoint-served metadata), which lwepp turns into its conformance result value."""
    # Earlier tests' reports go out after their answers too: wait until every pick so far has its report.
    wait_until(lambda: len(picker.served_reports()) >= len(picker.picks()), 10,
               "earlier requests' served-endpoint reports", diag=lambda: picker.log())
    before = len(picker.served_reports())
    expected = []
    for target in pods:
        r = post(gateway, "/v1/chat/completions", chat_body(new_marker()), {STEER: ip(target)})
        assert r.status == 200, f"{r.status}{_explain(gateway, picker)}"
        expected.append(target.address)
    # The report is sent after the client's answer, off the request path: poll lwepp's log for it.
    wait_until(lambda: len(picker.served_reports()) >= before + len(expected), 10,
               f"lwepp to log {len(expected)} served-endpoint reports", diag=lambda: picker.log() + _explain(gateway))
    reports = picker.served_reports()[before:]
    assert sorted(reports) == sorted(expected), f"lwepp saw {reports}, the pods served {expected}"


def test_anthropic_messages_follow_the_picker(gateway: Gateway, picker: Picker, pods: list[MockPod]):
    """POST /v1/messages for m1 is translated to an OpenAI chat for the pool; the picker's pick still decides."""
    for target in (pods[2], pods[0]):
        marker = new_marker()
        body = {"model": MODEL, "max_tokens": 16, "messages": [{"role": "user", "content": f"{marker} hello"}]}
        r = post(gateway, "/v1/messages", body, {STEER: ip(target), "anthropic-version": "2023-06-01"})
        assert r.status == 200, f"{r.status} {r.body[:500]!r}{_explain(gateway, picker)}"
        msg = r.json()
        assert msg["type"] == "message"
        assert "".join(b.get("text", "") for b in msg["content"]) == completion_text(target.address)
        assert served_by(pods, marker) == [target.address], _explain(gateway, picker)
        assert target.find(marker)[0].path == "/v1/chat/completions"

    marker = new_marker()
    body = {"model": MODEL, "max_tokens": 16, "stream": True,
            "messages": [{"role": "user", "content": f"{marker} hello"}]}
    r = post(gateway, "/v1/messages", body, {STEER: ip(pods[1]), "anthropic-version": "2023-06-01"})
    assert r.status == 200, f"{r.status} {r.body[:500]!r}{_explain(gateway, picker)}"
    events = [json.loads(d) for d in sse_data(r.body)]
    text = "".join(e["delta"].get("text", "") for e in events if e.get("type") == "content_block_delta")
    assert text == completion_text(pods[1].address)
    assert served_by(pods, marker) == [pods[1].address], _explain(gateway, picker)


def test_picker_error_fails_closed(gateway: Gateway, picker: Picker, pods: list[MockPod]):
    """Steering to an IP that is no pod makes lwepp end the stream with a gRPC error (no candidates): the request
    must not be served by Switchyard's own choice under failure_mode closed."""
    marker = new_marker()
    r = post(gateway, "/v1/chat/completions", chat_body(marker), {STEER: "10.255.255.1"})
    assert r.status == 503, f"{r.status} {r.body[:500]!r}{_explain(gateway, picker)}"
    assert served_by(pods, marker) == []


# ------------------------------------------------------------------------------ the picker goes away


@dataclass
class Outage:
    picker: Picker
    closed: Gateway
    open: Gateway
    pods: list[MockPod]
    refpicker_bin: str
    log_dir: Path


@pytest.fixture
def outage(refpicker_bin: str, pods: list[MockPod], tmp_path: Path) -> Iterator[Outage]:
    """A picker of its own, and two gateways following it: failure_mode closed and open."""
    pk = Picker(refpicker_bin, free_port(), pods, tmp_path, "refpicker-outage")
    closed = opened = None
    try:
        closed = Gateway("closed", pods, pk.endpoint, "closed", tmp_path)
        opened = Gateway("open", pods, pk.endpoint, "open", tmp_path)
        # Both follow it while it is up.
        for gw in (closed, opened):
            marker = new_marker()
            r = post(gw, "/v1/chat/completions", chat_body(marker), {STEER: ip(pods[1])})
            assert r.status == 200 and served_by(pods, marker) == [pods[1].address], f"{r.status}{_explain(gw, pk)}"
        yield Outage(pk, closed, opened, pods, refpicker_bin, tmp_path)
    finally:
        for gw in (opened, closed):
            if gw is not None:
                gw.stop()
        pk.stop()


def test_picker_down_fails_closed_with_503(outage: Outage):
    outage.picker.kill()
    for stream in (False, True):
        marker = new_marker()
        started = time.monotonic()
        r = post(outage.closed, "/v1/chat/completions", chat_body(marker, stream=stream), {STEER: ip(outage.pods[0])})
        took = time.monotonic() - started
        assert r.status == 503, f"{r.status} {r.body[:500]!r}{_explain(outage.closed)}"
        assert served_by(outage.pods, marker) == [], "served although the picker is down and failure_mode is closed"
        assert took < 5, f"a refused connection to the picker took {took:.1f}s to turn into the 503"


def test_picker_down_fails_open_to_own_routing(outage: Outage):
    outage.picker.kill()
    addresses = {p.address for p in outage.pods}
    for stream in (False, True):
        marker = new_marker()
        r = post(outage.open, "/v1/chat/completions", chat_body(marker, stream=stream))
        assert r.status == 200, f"{r.status} {r.body[:500]!r}{_explain(outage.open)}"
        got = served_by(outage.pods, marker)
        assert len(got) == 1 and got[0] in addresses, f"served by {got}{_explain(outage.open)}"
        if not stream:
            assert r.json()["choices"][0]["message"]["content"] == completion_text(got[0])


def test_following_resumes_when_the_picker_returns(outage: Outage):
    """Killed, then started again on the same port: the closed gateway refuses meanwhile, then follows again."""
    port = outage.picker.port
    outage.picker.kill()
    r = post(outage.closed, "/v1/chat/completions", chat_body(new_marker()), {STEER: ip(outage.pods[2])})
    assert r.status == 503, f"{r.status}{_explain(outage.closed)}"
    back = Picker(outage.refpicker_bin, port, outage.pods, outage.log_dir, "refpicker-back")
    try:
        def follows() -> bool:
            marker = new_marker()
            r = post(outage.closed, "/v1/chat/completions", chat_body(marker), {STEER: ip(outage.pods[2])})
            if r.status == 503:
                return False  # still reconnecting
            assert r.status == 200 and served_by(outage.pods, marker) == [outage.pods[2].address], \
                f"{r.status} {r.body[:300]!r}{_explain(outage.closed, back)}"
            return True

        wait_until(follows, 15, "the closed gateway to follow the restarted picker", interval=0.2,
                   diag=lambda: _explain(outage.closed, back))
    finally:
        back.stop()


def test_picker_that_never_answers_fails_closed_within_the_timeout(pods: list[MockPod], tmp_path: Path):
    """A picker that accepts the connection but never speaks: after `epp.timeout` the request gets a 503."""
    mute = socket.socket()
    mute.bind(("127.0.0.1", 0))
    mute.listen(16)  # the kernel completes the handshakes; nothing ever answers
    try:
        gw = Gateway("mute", pods, f"127.0.0.1:{mute.getsockname()[1]}", "closed", tmp_path, timeout="1s")
        try:
            marker = new_marker()
            started = time.monotonic()
            r = post(gw, "/v1/chat/completions", chat_body(marker), {STEER: ip(pods[0])})
            took = time.monotonic() - started
            assert r.status == 503, f"{r.status} {r.body[:500]!r}{_explain(gw)}"
            assert served_by(pods, marker) == []
            assert 0.8 < took < 6, f"answered after {took:.1f}s with epp.timeout 1s"
        finally:
            gw.stop()
    finally:
        mute.close()
