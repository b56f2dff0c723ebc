"""Test backends for the semantic cache: a real embedding model and a mock chat model.

    python tests/semantic/backends.py --port 0 --port-file PATH [--host 127.0.0.1] [--verbose]

One stdlib HTTP server (ThreadingHTTPServer, HTTP/1.1 keep-alive). The MiniLM
model is loaded before the socket is opened; the chosen port is written to
PATH (atomically: temp file + rename) once the socket is listening, so a
caller polls for PATH (or GET /health) instead of sleeping.

Endpoints
---------
POST /v1/embeddings         all-MiniLM-L6-v2 (tests/semantic/minilm.py), OpenAI shape.
    input: a string or a non-empty list of strings. Token-id input (a list of
    ints or a list of int lists), empty strings and other types: 400.
    encoding_format: "float" (default) or "base64" (little-endian float32).
    dimensions: accepted only if 384. `model` is echoed.
    usage.prompt_tokens = total_tokens = tokens the model embedded (incl.
    [CLS]/[SEP], after truncation to 256 per input).
POST /v1/chat/completions   deterministic mock chat model.
    Answer text: "answer to: " + <text of the last user message> (content a
    string or a list of parts; the text parts are joined with "\\n").
    usage: prompt_tokens = whitespace word count of all messages' text,
    completion_tokens = word count of the answer.
    stream: true -> OpenAI SSE chunks: a role chunk, the answer in ~3-word
    chunks (concatenated they equal the answer), finish_reason "stop" on the
    last content chunk, a usage chunk (choices: []) when
    stream_options.include_usage is true, then "data: [DONE]". Chunked
    transfer encoding.
    Last user message contains "TOOL-CALL": the answer is a tool call instead
    (finish_reason "tool_calls"; the function is the first of `tools`, else
    "lookup"; arguments {"query": <user text>}), streamed or not.
    Last user message contains "CUT-STREAM" (stream: true): two content chunks
    are sent, then the socket is closed abruptly: no [DONE], no
    finish_reason, no chunked terminator (headers say Connection: close).
    Without stream it answers normally.
GET  /v1/models             the two model ids (not counted).
GET  /counts                {"embeddings": n, "chat": n}: every request to the two
                            POST endpoints, valid or not.
POST /counts/reset          sets both to 0 (answers the zeroed counts).
GET  /health                200 {"status": "ok"}.
"""

from __future__ import annotations

import argparse
import base64
import json
import os
import signal
import socket
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

# One BLAS thread: on 2-core machines that are also building/running the gateway, multi-threaded
# OpenBLAS spin-waits and gets 2-20x slower (measured); one thread keeps latency steady.
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
os.environ.setdefault("OMP_NUM_THREADS", "1")

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from minilm import DIM, MODEL_NAME, MiniLM  # noqa: E402

CHAT_MODEL = "mock-chat"
MAX_BODY = 32 * 1024 * 1024


class ApiError(Exception):
    def __init__(self, status: int, message: str, param: str | None = None, type_: str = "invalid_request_error"):
        super().__init__(message)
        self.status, self.message, self.param, self.type = status, message, param, type_


class State:
    def __init__(self, model: MiniLM):
        self.model = model
        self.embed_lock = threading.Lock()  # one forward pass at a time (2-core machines)
        self.count_lock = threading.Lock()
        self.counts = {"embeddings": 0, "chat": 0}
        self.seq = 0

    def bump(self, key: str) -> int:
        with self.count_lock:
            self.counts[key] += 1
            self.seq += 1
            return self.seq

    def snapshot(self) -> dict:
        with self.count_lock:
            return dict(self.counts)

    def reset(self) -> dict:
        with self.count_lock:
            for k in self.counts:
                self.counts[k] = 0
            return dict(self.counts)


# ---------------------------------------------------------------- helpers


def words(text: str) -> int:
    return len(text.split())


def content_text(content) -> str:
    """Text of an OpenAI message content: a string, a list of parts, or null."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        out = []
        for part in content:
            if isinstance(part, str):
                out.append(part)
            elif isinstance(part, dict) and part.get("type") in ("text", "input_text") and isinstance(part.get("text"), str):
                out.append(part["text"])
        return "\n".join(out)
    raise ApiError(400, "message content must be a string or a list of content parts", "messages")


def split_chunks(text: str, per: int = 3) -> list[str]:
    """Split text into pieces of ~`per` words whose concatenation is exactly `text`."""
    if not text:
        return [""]
    pieces, count, start, i, n = [], 0, 0, 0, len(text)
    while i < n:
        # skip whitespace, then a word
        while i < n and text[i].isspace():
            i += 1
        if i >= n:
            break
        while i < n and not text[i].isspace():
            i += 1
        count += 1
        if count == per:
            pieces.append(text[start:i])
            start, count = i, 0
    if start < n:
        pieces.append(text[start:])
    return pieces


# ---------------------------------------------------------------- handler


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True  # headers and body go out in separate writes: avoid the 40 ms delayed-ACK stall
    server_version = "switchyard-semantic-backends/1"
    state: State = None  # set in main
    verbose = False

    def log_message(self, fmt, *args):
        if self.verbose:
            sys.stderr.write("backends: " + (fmt % args) + "\n")

    # -- plumbing
    def _send_json(self, status: int, obj, extra_headers: dict | None = None):
        body = json.dumps(obj).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        for k, v in (extra_headers or {}).items():
            self.send_header(k, v)
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def _send_error(self, e: ApiError):
        self._send_json(e.status, {"error": {"message": e.message, "type": e.type, "param": e.param, "code": None}})

    def _read_json(self):
        if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
            raise ApiError(411, "chunked request bodies are not supported; send Content-Length")
        try:
            length = int(self.headers.get("Content-Length") or 0)
        except ValueError:
            raise ApiError(400, "bad Content-Length")
        if length > MAX_BODY:
            raise ApiError(413, "request body too large")
        raw = self.rfile.read(length) if length else b""
        try:
            body = json.loads(raw or b"null")
        except (json.JSONDecodeError, UnicodeDecodeError) as e:
            raise ApiError(400, f"invalid JSON body: {e}")
        if not isinstance(body, dict):
            raise ApiError(400, "request body must be a JSON object")
        return body

    def _route(self):
        return self.path.split("?", 1)[0].rstrip("/") or "/"

    # -- verbs
    def do_GET(self):
        path = self._route()
        if path == "/health":
            self._send_json(200, {"status": "ok"})
        elif path == "/counts":
            self._send_json(200, self.state.snapshot())
        elif path == "/v1/models":
            now = int(time.time())
            self._send_json(200, {"object": "list", "data": [
                {"id": MODEL_NAME, "object": "model", "created": now, "owned_by": "tests"},
                {"id": CHAT_MODEL, "object": "model", "created": now, "owned_by": "tests"},
            ]})
        else:
            self._send_error(ApiError(404, f"no route GET {path}", type_="not_found_error"))

    def do_POST(self):
        path = self._route()
        try:
            if path == "/v1/embeddings":
                self.state.bump("embeddings")
                self._embeddings(self._read_json())
            elif path == "/v1/chat/completions":
                seq = self.state.bump("chat")
                self._chat(self._read_json(), seq)
            elif path == "/counts/reset":
                self._drain()
                self._send_json(200, self.state.reset())
            else:
                self._drain()
                raise ApiError(404, f"no route POST {path}", type_="not_found_error")
        except ApiError as e:
            self._send_error(e)

    def _drain(self):
        try:
            n = int(self.headers.get("Content-Length") or 0)
        except ValueError:
            n = 0
        if 0 < n <= MAX_BODY:
            self.rfile.read(n)

    # -- /v1/embeddings
    def _embeddings(self, body):
        inp = body.get("input")
        if isinstance(inp, str):
            texts = [inp]
        elif isinstance(inp, list) and inp and all(isinstance(x, str) for x in inp):
            texts = inp
        elif isinstance(inp, list) and inp and all(isinstance(x, (int, list)) and not isinstance(x, bool) for x in inp):
            raise ApiError(400, "token-id input is not supported by this backend; send strings", "input")
        elif isinstance(inp, list) and not inp:
            raise ApiError(400, "'input' must not be an empty list", "input")
        else:
            raise ApiError(400, "'input' must be a string or a list of strings", "input")
        if any(t == "" for t in texts):
            raise ApiError(400, "'input' must not contain empty strings", "input")
        fmt = body.get("encoding_format") or "float"
        if fmt not in ("float", "base64"):
            raise ApiError(400, "'encoding_format' must be 'float' or 'base64'", "encoding_format")
        dims = body.get("dimensions")
        if dims is not None and dims != DIM:
            raise ApiError(400, f"this model only produces {DIM}-dimensional embeddings", "dimensions")
        model = body.get("model") or MODEL_NAME
        m = self.state.model
        with self.state.embed_lock:
            ids = m.encode_ids(texts)
            vecs = np.zeros((len(ids), DIM), dtype=np.float32)
            order = sorted(range(len(ids)), key=lambda i: len(ids[i]))
            for s in range(0, len(order), 32):
                idx = order[s:s + 32]
                vecs[idx] = m.embed_ids([ids[i] for i in idx])
        ntok = sum(len(x) for x in ids)
        data = []
        for i, v in enumerate(vecs):
            if fmt == "base64":
                emb = base64.b64encode(np.asarray(v, dtype="<f4").tobytes()).decode("ascii")
            else:
                emb = [float(x) for x in v]
            data.append({"object": "embedding", "index": i, "embedding": emb})
        self._send_json(200, {"object": "list", "data": data, "model": model,
                              "usage": {"prompt_tokens": ntok, "total_tokens": ntok}})

    # -- /v1/chat/completions
    def _chat(self, body, seq: int):
        msgs = body.get("messages")
        if not isinstance(msgs, list) or not msgs or not all(isinstance(m, dict) for m in msgs):
            raise ApiError(400, "'messages' must be a non-empty list of objects", "messages")
        prompt_words = 0
        last_user = None
        for m in msgs:
            text = content_text(m.get("content"))
            prompt_words += words(text)
            if m.get("role") == "user":
                last_user = text
        user_text = last_user or ""
        model = body.get("model") or CHAT_MODEL
        cid = f"chatcmpl-mock-{seq}"
        created = int(time.time())
        stream = bool(body.get("stream"))
        so = body.get("stream_options") or {}
        include_usage = stream and isinstance(so, dict) and bool(so.get("include_usage"))

        tool_call = None
        if "TOOL-CALL" in user_text:
            tools = body.get("tools") or []
            name = "lookup"
            if tools and isinstance(tools[0], dict):
                name = (tools[0].get("function") or {}).get("name") or name
            tool_call = {"id": f"call_mock_{seq}", "type": "function",
                         "function": {"name": name, "arguments": json.dumps({"query": user_text})}}
            answer = ""
            completion_words = words(tool_call["function"]["arguments"])
            finish = "tool_calls"
        else:
            answer = "answer to: " + user_text
            completion_words = words(answer)
            finish = "stop"
        usage = {"prompt_tokens": prompt_words, "completion_tokens": completion_words,
                 "total_tokens": prompt_words + completion_words}

        if not stream:
            msg = {"role": "assistant", "content": None if tool_call else answer, "refusal": None}
            if tool_call:
                msg["tool_calls"] = [tool_call]
            self._send_json(200, {
                "id": cid, "object": "chat.completion", "created": created, "model": model,
                "choices": [{"index": 0, "message": msg, "logprobs": None, "finish_reason": finish}],
                "usage": usage, "system_fingerprint": "fp_mock",
            })
            return

        def chunk(delta, finish_reason=None, with_choices=True, usage_obj=None):
            obj = {"id": cid, "object": "chat.completion.chunk", "created": created, "model": model,
                   "system_fingerprint": "fp_mock",
                   "choices": [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish_reason}]
                   if with_choices else []}
            if include_usage:
                obj["usage"] = usage_obj
            return obj

        cut = "CUT-STREAM" in user_text and tool_call is None
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream; charset=utf-8")
        self.send_header("Cache-Control", "no-cache")
        self.send_header("Transfer-Encoding", "chunked")
        if cut:
            self.send_header("Connection", "close")
            self.close_connection = True
        self.end_headers()

        def send(obj):
            data = b"data: " + (obj if isinstance(obj, bytes) else json.dumps(obj).encode()) + b"\n\n"
            self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
            self.wfile.flush()

        try:
            if cut:
                pieces = split_chunks(answer)
                first = pieces[0]
                second = pieces[1] if len(pieces) > 1 else ""
                send(chunk({"role": "assistant", "content": first}))
                send(chunk({"content": second}))
                self._abort()
                return
            if tool_call:
                send(chunk({"role": "assistant", "content": None, "tool_calls": [
                    {"index": 0, "id": tool_call["id"], "type": "function",
                     "function": {"name": tool_call["function"]["name"], "arguments": ""}}]}))
                args = tool_call["function"]["arguments"]
                step = max(1, len(args) // 3 + 1)
                for s in range(0, len(args), step):
                    send(chunk({"tool_calls": [{"index": 0, "function": {"arguments": args[s:s + step]}}]}))
                send(chunk({}, finish_reason="tool_calls"))
            else:
                send(chunk({"role": "assistant", "content": "", "refusal": None}))
                pieces = split_chunks(answer)
                for i, p in enumerate(pieces):
                    send(chunk({"content": p}, finish_reason="stop" if i == len(pieces) - 1 else None))
            if include_usage:
                send(chunk(None, with_choices=False, usage_obj=usage))
            send(b"[DONE]")
            self.wfile.write(b"0\r\n\r\n")
            self.wfile.flush()
        except (BrokenPipeError, ConnectionResetError):
            self.close_connection = True

    def _abort(self):
        """Close the client socket now: no [DONE], no chunked terminator."""
        self.close_connection = True
        try:
            self.wfile.flush()
        except OSError:
            pass
        try:
            self.connection.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        self.connection.close()


class Server(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True
    request_queue_size = 128

    def handle_error(self, request, client_address):
        # Abruptly closed sockets (CUT-STREAM, clients going away) are expected here.
        exc = sys.exc_info()[1]
        if isinstance(exc, (OSError, ValueError)):
            return
        super().handle_error(request, client_address)


def write_port_file(path: str, port: int):
    tmp = f"{path}.tmp.{os.getpid()}"
    with open(tmp, "w") as f:
        f.write(f"{port}\n")
    os.replace(tmp, path)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--port", type=int, default=0, help="0 = any free port")
    ap.add_argument("--port-file", help="write the port here once listening")
    ap.add_argument("--verbose", action="store_true", help="log every request to stderr")
    args = ap.parse_args(argv)

    t0 = time.perf_counter()
    model = MiniLM()
    model.embed(["warm up"])
    Handler.state = State(model)
    Handler.verbose = args.verbose
    httpd = Server((args.host, args.port), Handler)  # bound and listening after this
    port = httpd.server_address[1]

    def stop(signum, frame):
        threading.Thread(target=httpd.shutdown, daemon=True).start()

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    if args.port_file:
        write_port_file(args.port_file, port)
    print(f"backends: listening on http://{args.host}:{port} (model loaded in {time.perf_counter() - t0:.1f}s)",
          file=sys.stderr, flush=True)
    try:
        httpd.serve_forever(poll_interval=0.2)
    finally:
        httpd.server_close()


if __name__ == "__main__":
    main()
