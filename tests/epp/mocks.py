"""Mock OpenAI-compatible model servers ("pods") for the EPP tests (issue 55).

Each `MockPod` is a threaded stdlib HTTP server bound to its own loopback address (127.0.0.2,
127.0.0.3, ... — all of 127/8 answers on Linux) on one port, so that an endpoint is told apart by
its `ip:port` exactly as the Gateway API Inference Extension's EPP protocol names pods. It answers:

- `GET /v1/models`: `{"object": "list", "data": [{"id": MODEL, ...}]}`
- `GET /health`: 200
- `POST /v1/chat/completions`: an OpenAI chat completion whose content names the pod
  ("served by 127.0.0.3:PORT") with a usage block; with `"stream": true` as SSE chunks
  (`chat.completion.chunk`, the last one carrying the usage) ending with `data: [DONE]`.

Every request is recorded (`pod.requests`: method, path, headers, raw body bytes) so a test can
check that a body arrived byte-for-byte intact and which pod served it. `start_pods(n)` picks one
free port that is free on every address and starts n pods on it.
"""

from __future__ import annotations

import json
import socket
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

MODEL = "m1"
FIRST_POD_IP = 2  # pods are 127.0.0.2, 127.0.0.3, ...


@dataclass
class Recorded:
    """One request as the pod received it."""

    method: str
    path: str
    headers: dict[str, str]  # lower-cased names; repeated headers joined with ", "
    body: bytes
    served_by: str  # the pod's own "ip:port"
    at: float = field(default_factory=time.monotonic)
    response: bytes = b""  # the response body the pod sent (de-chunked)
    done_at: float | None = None  # when the pod finished sending it

    def header(self, name: str) -> str | None:
        return self.headers.get(name.lower())


def completion_text(address: str) -> str:
    return f"served by {address}"


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    # The head and the body go out in two writes: with Nagle's algorithm on, the second waits for
    # the peer's delayed ACK (~40 ms on loopback) on a kept-alive connection.
    disable_nagle_algorithm = True
    server: "_Server"

    def log_message(self, fmt: str, *args) -> None:  # quiet
        pass

    def _read_body(self) -> bytes:
        if "chunked" in (self.headers.get("Transfer-Encoding") or "").lower():
            out = bytearray()
            while True:
                line = self.rfile.readline()
                size = int(line.split(b";", 1)[0].strip() or b"0", 16)
                if size == 0:
                    # trailers until the empty line
                    while self.rfile.readline() not in (b"\r\n", b"\n", b""):
                        pass
                    return bytes(out)
                out += self.rfile.read(size)
                self.rfile.readline()  # CRLF after the chunk
        n = int(self.headers.get("Content-Length") or 0)
        return self.rfile.read(n) if n else b""

    def _record(self, body: bytes) -> Recorded:
        headers: dict[str, str] = {}
        for k, v in self.headers.items():
            k = k.lower()
            headers[k] = f"{headers[k]}, {v}" if k in headers else v
        rec = Recorded(self.command, self.path, headers, body, self.server.pod.address)
        with self.server.pod.lock:
            self.server.pod.requests.append(rec)
        self.rec = rec
        return rec

    def _send_json(self, status: int, obj: object, extra: dict[str, str] | None = None) -> None:
        data = json.dumps(obj).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.send_header("x-mock-pod", self.server.pod.address)
        for k, v in (extra or {}).items():
            self.send_header(k, v)
        self.end_headers()
        # Recorded before the client can have it all (a test compares right after its reply).
        self.rec.response = data
        self.rec.done_at = time.monotonic()
        self.wfile.write(data)
        self.wfile.flush()

    def do_GET(self) -> None:  # noqa: N802
        body = self._read_body()
        self._record(body)
        path = self.path.split("?", 1)[0]
        if path == "/health":
            self._send_json(200, {"status": "ok"})
        elif path == "/v1/models":
            self._send_json(200, {
                "object": "list",
                "data": [{"id": MODEL, "object": "model", "created": 0, "owned_by": "mock",
                          "served_by": self.server.pod.address}],
            })
        else:
            self._send_json(404, {"error": {"message": f"no route {path}"}})

    def do_POST(self) -> None:  # noqa: N802
        body = self._read_body()
        self._record(body)
        path = self.path.split("?", 1)[0]
        if path != "/v1/chat/completions":
            self._send_json(404, {"error": {"message": f"no route {path}"}})
            return
        try:
            req = json.loads(body or b"{}")
        except ValueError:
            self._send_json(400, {"error": {"message": "bad json"}})
            return
        pod = self.server.pod
        text = completion_text(pod.address)
        prompt_tokens = max(1, len(body) // 4)
        completion_tokens = len(text.split())
        usage = {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens,
                 "total_tokens": prompt_tokens + completion_tokens}
        cid = f"chatcmpl-{pod.address.replace('.', '-').replace(':', '-')}-{len(pod.requests)}"
        if self.headers.get("x-mock-delay"):  # per-request override of the spread between events
            pod = _Delayed(pod, float(self.headers["x-mock-delay"]))
        model = req.get("model", MODEL)
        if not req.get("stream"):
            self._send_json(200, {
                "id": cid, "object": "chat.completion", "created": 0, "model": model,
                "choices": [{"index": 0, "message": {"role": "assistant", "content": text},
                             "finish_reason": "stop"}],
                "usage": usage,
            })
            return
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Cache-Control", "no-cache")
        self.send_header("Transfer-Encoding", "chunked")
        self.send_header("x-mock-pod", pod.address)
        self.end_headers()
        sent = bytearray()
        events = stream_events(cid, model, text, usage, pod.stream_pieces)
        n = len(events)
        for i, event in enumerate(events):
            if i and pod.stream_delay:
                time.sleep(pod.stream_delay)  # spread the events in time (not a readiness wait)
            sent += event
            if i == n - 1:  # recorded before the client can have it all
                self.rec.response = bytes(sent)
                self.rec.done_at = time.monotonic()
            self._chunk(event)
        self._chunk(b"")

    def _chunk(self, data: bytes) -> None:
        self.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
        self.wfile.flush()


def stream_events(cid: str, model: str, text: str, usage: dict, pieces: int) -> list[bytes]:
    """The SSE events of a streamed answer, each `data: ...\\n\\n`, ending with `data: [DONE]`."""
    words = text.split(" ")
    step = max(1, -(-len(words) // max(1, pieces)))
    parts = [" ".join(words[i:i + step]) + (" " if i + step < len(words) else "")
             for i in range(0, len(words), step)]

    def chunk(delta: dict, finish: str | None, with_usage: bool = False) -> bytes:
        obj = {"id": cid, "object": "chat.completion.chunk", "created": 0, "model": model,
               "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}
        if with_usage:
            obj["usage"] = usage
        return b"data: " + json.dumps(obj).encode() + b"\n\n"

    events = [chunk({"role": "assistant", "content": ""}, None)]
    events += [chunk({"content": p}, None) for p in parts]
    events.append(chunk({}, "stop", with_usage=True))
    events.append(b"data: [DONE]\n\n")
    return events


def expected_stream_text(address: str) -> str:
    return completion_text(address)


class _Delayed:
    """A pod as one request sees it, with its own delay between stream events."""

    def __init__(self, pod: "MockPod", delay: float):
        self._pod = pod
        self.stream_delay = delay

    def __getattr__(self, name: str):
        return getattr(self._pod, name)


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True
    pod: "MockPod"

    def __init__(self, *args, **kw):
        super().__init__(*args, **kw)
        self.connections: set = set()
        self.connections_lock = threading.Lock()

    def get_request(self):
        conn, addr = super().get_request()
        with self.connections_lock:
            self.connections.add(conn)
        return conn, addr

    def shutdown_request(self, request):
        with self.connections_lock:
            self.connections.discard(request)
        super().shutdown_request(request)

    def close_connections(self) -> None:
        """A stopped pod is gone: kept-alive connections end too (its handler threads outlive
        `shutdown`, which only stops accepting)."""
        with self.connections_lock:
            live = list(self.connections)
        for conn in live:
            try:
                conn.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass


class MockPod:
    """One mock model server on `ip:port`."""

    def __init__(self, ip: str, port: int, *, stream_pieces: int = 4, stream_delay: float = 0.0):
        self.ip = ip
        self.port = port
        self.stream_pieces = stream_pieces
        self.stream_delay = stream_delay
        self.requests: list[Recorded] = []
        self.lock = threading.Lock()
        self._server: _Server | None = None
        self._thread: threading.Thread | None = None

    @property
    def address(self) -> str:
        return f"{self.ip}:{self.port}"

    @property
    def url(self) -> str:
        return f"http://{self.address}"

    @property
    def running(self) -> bool:
        return self._server is not None

    def start(self) -> "MockPod":
        srv = _Server((self.ip, self.port), _Handler)
        srv.pod = self
        self._server = srv
        self._thread = threading.Thread(target=srv.serve_forever, kwargs={"poll_interval": 0.05},
                                        name=f"mock-{self.address}", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        srv, self._server = self._server, None
        if srv is not None:
            srv.shutdown()
            srv.server_close()
            srv.close_connections()
        if self._thread is not None:
            self._thread.join(timeout=5)
            self._thread = None

    def clear(self) -> None:
        with self.lock:
            self.requests.clear()

    def snapshot(self) -> list[Recorded]:
        with self.lock:
            return list(self.requests)

    def find(self, marker: str) -> list[Recorded]:
        """Recorded requests whose raw body or headers contain `marker`."""
        m = marker.encode()
        return [r for r in self.snapshot()
                if m in r.body or any(marker in v for v in r.headers.values())]


def free_port_on(ips: list[str]) -> int:
    """A TCP port that is free on every one of `ips` (tried a few times)."""
    for _ in range(50):
        with socket.socket() as s:
            s.bind((ips[0], 0))
            port = s.getsockname()[1]
        ok = True
        for ip in ips[1:]:
            with socket.socket() as t:
                try:
                    t.bind((ip, port))
                except OSError:
                    ok = False
                    break
        if ok:
            return port
    raise RuntimeError("no port free on all of " + ", ".join(ips))


def pod_ips(n: int, first: int = FIRST_POD_IP) -> list[str]:
    return [f"127.0.0.{first + i}" for i in range(n)]


def start_pods(n: int = 3, *, first: int = FIRST_POD_IP, port: int | None = None, **kw) -> list[MockPod]:
    """n pods on 127.0.0.{first}.. sharing one port, started (bound before this returns)."""
    ips = pod_ips(n, first)
    for attempt in range(5):
        p = port or free_port_on(ips)
        pods: list[MockPod] = []
        try:
            for ip in ips:
                pods.append(MockPod(ip, p, **kw).start())
            return pods
        except OSError:
            for pod in pods:
                pod.stop()
            if port is not None or attempt == 4:
                raise
    raise AssertionError("unreachable")


if __name__ == "__main__":  # manual use: python mocks.py [n]
    import sys

    ps = start_pods(int(sys.argv[1]) if len(sys.argv) > 1 else 3)
    print(" ".join(p.address for p in ps), flush=True)
    try:
        while True:
            time.sleep(3600)
    except KeyboardInterrupt:
        for p in ps:
            p.stop()
