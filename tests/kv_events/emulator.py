"""An inference-engine emulator that publishes KV-cache events through vLLM's or SGLang's own
`ZmqEventPublisher` (see engines.py), for the gateway's event-driven routing tests.

It owns: an OpenAI-compatible HTTP server (`GET /health`, `GET /v1/models`,
`POST /v1/chat/completions` plain and streamed, with a fixed reply "ok"), the chat tokenized as
vLLM does (`reference.render_ids`), and a prefix cache modelled on vLLM's: full blocks of
`block_size` tokens under chained hashes, `capacity` blocks on the GPU tier with least-recently-used
eviction of leaf blocks, an optional CPU tier. Each request reuses the longest cached run of whole
blocks (never the whole prompt: the last token is always computed, as in vLLM), answers
`usage.prompt_tokens_details.cached_tokens` accordingly, and publishes one batch for what it
changed: `BlockRemoved` for evictions, then `BlockStored` for the new blocks.

Control endpoints, for the tests:
- `POST /admin/clear`: empty the cache, publish `AllBlocksCleared`.
- `POST /admin/drop {"count": n}`: the next n batches are lost on the PUB socket. They still get
  their sequence number and go into the publisher's replay buffer (the publisher's own thread
  numbers, "sends" and buffers them), so a subscriber can only recover them through replay.
- `POST /admin/offload`: move every GPU block to the CPU tier (`BlockStored` with the engine's CPU
  medium, then `BlockRemoved` on the GPU).
- `POST /admin/lookup {chat request}`: how many blocks of that prompt are cached, per tier.
- `GET /admin/blocks`: block counts per tier, the blocks' engine hashes, batches published/dropped.

Use it in-process (`Emulator(...).start()`, one HTTP thread per instance) or as a process:
    python tests/kv_events/emulator.py --port P --zmq-port Z --replay-port R --model qwen \
        --tokenizer DIR --engine vllm|vllm-map|vllm-positional|sglang|sglang-bigram \
        --capacity-blocks N [--block-size 16] [--bytes-hashes]
Ports may be 0 (the OS picks); once everything is bound it prints one line
`ready http://127.0.0.1:P tcp://127.0.0.1:Z tcp://127.0.0.1:R` and serves until SIGTERM/SIGINT.
"""

from __future__ import annotations

import argparse
import atexit
import hashlib
import itertools
import json
import signal
import struct
import sys
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, Callable

sys.path.insert(0, str(Path(__file__).resolve().parent))

import zmq  # noqa: E402

import engines  # noqa: E402

from reference import render_ids  # noqa: E402  (the chat as vLLM tokenizes it)

REPLY = "ok"
GPU, CPU = "gpu", "cpu"


# --- the prefix cache --------------------------------------------------------------------------

@dataclass
class Block:
    digest: bytes  # the chained hash (sha256 over the parent's digest and the block's tokens)
    parent: bytes | None
    tokens: tuple[int, ...]
    depth: int
    tiers: set[str] = field(default_factory=set)
    last_used: int = 0
    gpu_children: int = 0


@dataclass
class Change:
    """What one operation did to the cache, as events in the engine's terms."""

    removed: dict[str, list[bytes]] = field(default_factory=dict)  # tier -> digests
    stored: list[tuple[str, list[Block], int | None]] = field(default_factory=list)  # (tier, run of blocks, next token)
    cleared: bool = False


def _leading(blocks: list[Block | None], held: Callable[[Block], bool]) -> int:
    """How many of `blocks`, from the first, exist and satisfy `held`."""
    n = 0
    while n < len(blocks) and blocks[n] is not None and held(blocks[n]):
        n += 1
    return n


class PrefixCache:
    """Full blocks under chained hashes, like vLLM's prefix cache: a block is named by its tokens
    and its parent's name, a GPU block's parent is always on the GPU, and eviction takes the least
    recently used block that has no child on the GPU."""

    def __init__(self, block_size: int, capacity: int) -> None:
        self.block_size = block_size
        self.capacity = capacity
        self.blocks: dict[bytes, Block] = {}
        self._clock = itertools.count(1)

    def chain(self, tokens: list[int]) -> list[tuple[bytes, tuple[int, ...]]]:
        """(digest, tokens) of each full block of `tokens`."""
        out, parent = [], b""
        for i in range(len(tokens) // self.block_size):
            chunk = tuple(tokens[i * self.block_size:(i + 1) * self.block_size])
            parent = hashlib.sha256(parent + struct.pack(f"<{len(chunk)}I", *chunk)).digest()
            out.append((parent, chunk))
        return out

    def count(self, tier: str) -> int:
        return sum(1 for b in self.blocks.values() if tier in b.tiers)

    def lookup(self, tokens: list[int]) -> dict[str, int]:
        """Leading blocks of `tokens` held on the GPU, and on the GPU or the CPU."""
        found = [self.blocks.get(digest) for digest, _ in self.chain(tokens)]
        return {"gpu_blocks": _leading(found, lambda b: GPU in b.tiers), "cached_blocks": _leading(found, lambda b: True)}

    def admit(self, tokens: list[int]) -> tuple[int, Change]:
        """Serve a prompt: (tokens reused from the cache, what changed). Blocks found only on the
        CPU are loaded back onto the GPU (and count as reused), the rest are computed and stored."""
        change = Change()
        chain = self.chain(tokens)
        hit = 0  # leading blocks found on any tier
        while hit < len(chain) and chain[hit][0] in self.blocks:
            hit += 1
        if hit and hit * self.block_size >= len(tokens):
            hit -= 1  # the last token is always computed, so a fully cached prompt reuses one block less
        now = next(self._clock)
        on_gpu = 0
        for digest, _ in chain:
            block = self.blocks.get(digest)
            if block is None or GPU not in block.tiers:
                break
            block.last_used = now
            on_gpu += 1
        keep = {d for d, _ in chain}
        run: list[Block] = []
        for i in range(on_gpu, len(chain)):
            if self.count(GPU) >= self.capacity and not self._evict_one(keep, change):
                break  # nothing left to evict but this prompt's own blocks: store what fits
            digest, chunk = chain[i]
            block = self.blocks.get(digest)
            if block is None:
                block = self.blocks[digest] = Block(digest, chain[i - 1][0] if i else None, chunk, i)
            block.tiers.add(GPU)
            block.last_used = now
            if block.parent is not None:
                self.blocks[block.parent].gpu_children += 1
            run.append(block)
        if run:
            last = run[-1].depth
            next_token = tokens[(last + 1) * self.block_size] if (last + 1) * self.block_size < len(tokens) else None
            change.stored.append((GPU, run, next_token))
        return hit * self.block_size, change

    def _evict_one(self, keep: set[bytes], change: Change) -> bool:
        leaves = [b for b in self.blocks.values() if GPU in b.tiers and b.gpu_children == 0 and b.digest not in keep]
        if not leaves:
            return False
        victim = min(leaves, key=lambda b: b.last_used)
        self._drop_tier(victim, GPU)
        change.removed.setdefault(GPU, []).append(victim.digest)
        return True

    def _drop_tier(self, block: Block, tier: str) -> None:
        block.tiers.discard(tier)
        if tier == GPU and block.parent is not None:
            self.blocks[block.parent].gpu_children -= 1
        if not block.tiers:
            del self.blocks[block.digest]

    def offload(self) -> Change:
        """Move every GPU block to the CPU tier."""
        change = Change()
        moving = sorted((b for b in self.blocks.values() if GPU in b.tiers), key=lambda b: b.depth)
        for block in moving:
            if CPU not in block.tiers:
                block.tiers.add(CPU)
                change.stored.append((CPU, [block], None))
        for block in reversed(moving):  # children first, so no GPU block is left without its parent
            self._drop_tier(block, GPU)
        if moving:
            change.removed[GPU] = [b.digest for b in moving]
        return change

    def clear(self) -> Change:
        self.blocks.clear()
        return Change(cleared=True)


# --- the publisher side ------------------------------------------------------------------------

class LossyPub:
    """Stands in for the publisher's PUB socket (`publisher._pub`) and loses the frames of chosen
    sequence numbers on the wire. The publisher's own thread still numbers, encodes, "sends" and
    buffers every batch (`_seq_gen`, `_buffer`), exactly as for a delivered one, so a lost batch
    is recoverable only through the replay socket. Doing it on the publisher's thread (rather than
    appending to `_buffer` from another thread) keeps the replay loop, which iterates `_buffer` on
    that thread, from seeing the deque change under it."""

    def __init__(self, socket: zmq.Socket) -> None:
        self._socket = socket
        self._lock = threading.Lock()
        self._lost: set[int] = set()
        self.dropped = 0

    def lose(self, seqs: range) -> None:
        with self._lock:
            self._lost.update(seqs)

    def send_multipart(self, frames, *args, **kwargs):
        seq = int.from_bytes(frames[1], "big")
        with self._lock:
            if seq in self._lost:
                self._lost.discard(seq)
                self.dropped += 1
                return None
        return self._socket.send_multipart(frames, *args, **kwargs)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._socket, name)


def external_hash(digest: bytes, mode: str) -> int | bytes:
    """The engine's name for a block: the digest itself (`bytes`), or its first 8 bytes as an
    unsigned (`uint`, as vLLM's int hashes) or a signed (`int`, as SGLang's int64) integer."""
    if mode == "bytes":
        return digest
    return int.from_bytes(digest[:8], "big", signed=mode == "int")


def _json_hash(h: int | bytes) -> int | str:
    return h.hex() if isinstance(h, bytes) else h


class Emulator:
    """One engine: its HTTP server, its prefix cache, its publisher."""

    def __init__(
        self,
        *,
        model: str,
        tokenizer_dir: str | Path,
        engine: str,
        capacity_blocks: int,
        block_size: int = 16,
        bytes_hashes: bool = False,
        http_port: int = 0,
        zmq_port: int = 0,
        replay_port: int = 0,
        topic: str = "",
        name: str = "engine",
    ) -> None:
        self.name = name
        self.model = model
        self.tokenizer_dir = str(tokenizer_dir)
        self.encoding = engines.encoding(engine)
        self.hash_mode = "bytes" if bytes_hashes else ("int" if self.encoding.engine == "sglang" else "uint")
        self.cache = PrefixCache(block_size, capacity_blocks)
        self._lock = threading.Lock()  # the cache and the order of published batches
        self._published = 0
        self._requests = itertools.count(1)
        self._ports = (http_port, zmq_port, replay_port)
        self._topic = topic
        self.publisher: Any = None
        self._http: ThreadingHTTPServer | None = None
        self.url = self.pub_endpoint = self.replay_endpoint = ""

    # lifecycle

    def start(self) -> "Emulator":
        http_port, zmq_port, replay_port = self._ports
        self.publisher = self.encoding.publisher(zmq_port, replay_port, self._topic)
        self.publisher._pub = LossyPub(self.publisher._pub)
        self.pub_endpoint = _connectable(self.publisher._pub.getsockopt_string(zmq.LAST_ENDPOINT))
        self.replay_endpoint = _connectable(self.publisher._replay.getsockopt_string(zmq.LAST_ENDPOINT))
        self._http = ThreadingHTTPServer(("127.0.0.1", http_port), _handler(self))
        self._http.daemon_threads = True
        self.url = f"http://127.0.0.1:{self._http.server_address[1]}"
        threading.Thread(  # a short poll interval: stop() returns as soon as the loop sees it
            target=self._http.serve_forever, kwargs={"poll_interval": 0.05}, name=f"{self.name}-http", daemon=True
        ).start()
        return self

    def stop(self) -> None:
        if self._http is not None:
            self._http.shutdown()
            self._http.server_close()
            self._http = None
        if self.publisher is not None:
            self.publisher.shutdown()
            # SGLang's publisher also shuts itself down at exit, which after this would wait a
            # second for a sentinel no thread reads.
            atexit.unregister(self.publisher.shutdown)
            self.publisher = None

    def __enter__(self) -> "Emulator":
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # operations (what the HTTP endpoints call)

    def tokens(self, body: dict) -> list[int]:
        return render_ids(self.tokenizer_dir, body)

    def complete(self, body: dict) -> dict:
        """Serve a chat request's prompt: its usage figures."""
        tokens = self.tokens(body)
        with self._lock:
            cached, change = self.cache.admit(tokens)
            self._publish(change)
        return {
            "prompt_tokens": len(tokens),
            "completion_tokens": 1,
            "total_tokens": len(tokens) + 1,
            "prompt_tokens_details": {"cached_tokens": cached},
        }

    def clear(self) -> None:
        with self._lock:
            self._publish(self.cache.clear())

    def offload(self) -> None:
        with self._lock:
            self._publish(self.cache.offload())

    def drop(self, count: int) -> range:
        """Lose the next `count` batches on the PUB socket: their sequence numbers."""
        with self._lock:
            seqs = range(self._published, self._published + count)
            self.publisher._pub.lose(seqs)
        return seqs

    def lookup(self, body: dict) -> dict:
        tokens = self.tokens(body)
        with self._lock:
            return {"prompt_tokens": len(tokens), **self.cache.lookup(tokens)}

    def blocks(self) -> dict:
        with self._lock:
            gpu = [b for b in self.cache.blocks.values() if GPU in b.tiers]
            return {
                "count": len(gpu),  # GPU blocks, as `gpu`
                "gpu": len(gpu),
                "cpu": self.cache.count(CPU),
                "hashes": [_json_hash(external_hash(b.digest, self.hash_mode)) for b in gpu],
                "published": self._published,
                "dropped": self.publisher._pub.dropped,
            }

    def _publish(self, change: Change) -> None:
        """One batch for one change, in the engine's own classes; nothing when nothing changed.
        Called under `_lock`, so batches leave in the order the cache changed."""
        enc, mode, bs = self.encoding, self.hash_mode, self.cache.block_size
        medium = {GPU: enc.gpu, CPU: enc.cpu}
        events = [enc.cleared()] if change.cleared else []
        for tier, digests in change.removed.items():
            events.append(enc.removed([external_hash(d, mode) for d in digests], medium[tier]))
        for tier, run, next_token in change.stored:
            parent = run[0].parent
            events.append(enc.stored(
                [external_hash(b.digest, mode) for b in run],
                None if parent is None else external_hash(parent, mode),
                [t for b in run for t in b.tokens], bs, medium[tier], next_token,
            ))
        if events:
            self.publisher.publish(enc.batch(events))
            self._published += 1


def _connectable(endpoint: str) -> str:
    """A bound endpoint as a subscriber on this host connects to it (`tcp://0.0.0.0:P` → loopback)."""
    return endpoint.replace("://0.0.0.0:", "://127.0.0.1:").replace("://*:", "://127.0.0.1:")


# --- HTTP --------------------------------------------------------------------------------------

def _handler(emu: Emulator) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"
        server_version = "kv-engine-emulator"

        def log_message(self, format: str, *args: Any) -> None:  # quiet
            pass

        def do_GET(self) -> None:
            path = self.path.split("?", 1)[0]
            if path == "/health":
                self._json(200, {})
            elif path == "/v1/models":
                self._json(200, {"object": "list", "data": [
                    {"id": emu.model, "object": "model", "created": 0, "owned_by": emu.name,
                     "max_model_len": 32768}]})
            elif path == "/admin/blocks":
                self._json(200, emu.blocks())
            else:
                self._json(404, {"error": {"message": f"no route {path}", "type": "not_found"}})

        def do_POST(self) -> None:
            path = self.path.split("?", 1)[0]
            try:
                body = self._body()
            except ValueError as e:
                return self._json(400, {"error": {"message": f"bad JSON: {e}", "type": "invalid_request_error"}})
            routes: dict[str, Callable[[], None]] = {
                "/v1/chat/completions": lambda: self._chat(body),
                "/admin/clear": lambda: (emu.clear(), self._json(200, emu.blocks())),
                "/admin/offload": lambda: (emu.offload(), self._json(200, emu.blocks())),
                "/admin/drop": lambda: self._json(200, {"seqs": list(emu.drop(int(body.get("count", 1))))}),
                "/admin/lookup": lambda: self._json(200, emu.lookup(body)),
            }
            route = routes.get(path)
            if route is None:
                return self._json(404, {"error": {"message": f"no route {path}", "type": "not_found"}})
            route()

        def _chat(self, body: dict) -> None:
            if body.get("model") != emu.model:
                return self._json(404, {"error": {"message": f"The model `{body.get('model')}` does not exist.",
                                                  "type": "NotFoundError", "code": 404}})
            if not isinstance(body.get("messages"), list) or not body["messages"]:
                return self._json(400, {"error": {"message": "messages must be a non-empty list",
                                                  "type": "BadRequestError", "code": 400}})
            usage = emu.complete(body)
            rid, created = f"chatcmpl-{emu.name}-{next(emu._requests)}", int(time.time())
            head = {"id": rid, "created": created, "model": emu.model}
            if not body.get("stream"):
                return self._json(200, {**head, "object": "chat.completion", "choices": [
                    {"index": 0, "message": {"role": "assistant", "content": REPLY}, "logprobs": None,
                     "finish_reason": "stop"}], "usage": usage})
            chunk = {**head, "object": "chat.completion.chunk"}
            deltas = [{"role": "assistant", "content": ""}, {"content": REPLY}, {}]
            frames = [{**chunk, "choices": [{"index": 0, "delta": d, "logprobs": None,
                                             "finish_reason": "stop" if not d else None}]} for d in deltas]
            if (body.get("stream_options") or {}).get("include_usage"):
                frames.append({**chunk, "choices": [], "usage": usage})
            self.send_response(200)
            self.send_header("content-type", "text/event-stream")
            self.send_header("cache-control", "no-cache")
            self.send_header("transfer-encoding", "chunked")
            self.end_headers()
            for frame in [*(f"data: {json.dumps(f)}\n\n" for f in frames), "data: [DONE]\n\n"]:
                data = frame.encode()
                self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
                self.wfile.flush()
            self.wfile.write(b"0\r\n\r\n")
            self.wfile.flush()

        def _body(self) -> dict:
            length = int(self.headers.get("content-length") or 0)
            raw = self.rfile.read(length) if length else b""
            if not raw:
                return {}
            data = json.loads(raw)
            if not isinstance(data, dict):
                raise ValueError("not an object")
            return data

        def _json(self, status: int, payload: Any) -> None:
            data = json.dumps(payload).encode()
            self.send_response(status)
            self.send_header("content-type", "application/json")
            self.send_header("content-length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

    return Handler


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--port", type=int, default=0, help="HTTP port (0: the OS picks)")
    p.add_argument("--zmq-port", type=int, default=0, help="PUB port")
    p.add_argument("--replay-port", type=int, default=0, help="ROUTER (replay) port")
    p.add_argument("--model", default="qwen")
    p.add_argument("--tokenizer", required=True, help="directory with tokenizer.json and tokenizer_config.json")
    p.add_argument("--engine", choices=engines.ENCODINGS, default="vllm")
    p.add_argument("--capacity-blocks", type=int, default=1024)
    p.add_argument("--block-size", type=int, default=16)
    p.add_argument("--bytes-hashes", action="store_true", help="32-byte block hashes instead of integers")
    p.add_argument("--topic", default="")
    p.add_argument("--name", default="engine")
    a = p.parse_args(argv)
    emu = Emulator(
        model=a.model, tokenizer_dir=a.tokenizer, engine=a.engine, capacity_blocks=a.capacity_blocks,
        block_size=a.block_size, bytes_hashes=a.bytes_hashes, http_port=a.port, zmq_port=a.zmq_port,
        replay_port=a.replay_port, topic=a.topic, name=a.name,
    )
    emu.tokens({"messages": [{"role": "user", "content": "warm-up"}]})  # load the tokenizer before "ready"
    emu.start()
    done = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: done.set())
    print(f"ready {emu.url} {emu.pub_endpoint} {emu.replay_endpoint}", flush=True)
    done.wait()
    emu.stop()


if __name__ == "__main__":
    main()
