"""The engine emulator and vLLM's and SGLang's own publishers on the wire, without the gateway: what
a subscriber receives live (three frames, each encoding's payload shape, block hashes chained over
the prompt's tokens as the engine tokenizes it), what the replay socket answers (the batches lost
on the PUB socket, then the -1 end mark), and the emulated cache (reuse, eviction, clear, offload).
These pin down the contract the gateway tests rely on."""

from __future__ import annotations

import itertools
import os
import queue
import signal
import subprocess
import sys
import threading
from pathlib import Path

import httpx
import msgspec
import pytest

from conftest import VARIANTS, Variant, direct
from emulator import Emulator
from stack import chat_body, continuation, document, shared_blocks
from wire import END_SEQ, Message, Subscriber

HERE = Path(__file__).resolve().parent
_tags = itertools.count()


def fresh(prefix: str) -> list[dict]:
    return document(f"{prefix}-{next(_tags)}", words=120)


def batch_events(msg: Message, variant: Variant) -> tuple[object, list]:
    """(dp rank, events) of a live or replayed batch, checking the outer shape of the encoding."""
    batch = msg.decoded()
    if variant.engine == "vllm-map":
        assert isinstance(batch, dict) and set(batch) == {"ts", "events", "data_parallel_rank"}, batch
        return batch["data_parallel_rank"], batch["events"]
    assert isinstance(batch, list) and len(batch) == 3 and isinstance(batch[0], float), batch
    return batch[2], batch[1]


def as_map(event: object, variant: Variant) -> dict:
    """An event as a dict with `type`, checking it is encoded as the variant encodes events."""
    if variant.engine == "vllm-positional":
        assert isinstance(event, list) and isinstance(event[0], str), event
        fields = {
            "BlockStored": ["block_hashes", "parent_block_hash", "token_ids", "block_size", "lora_id", "medium", "lora_name"],
            "BlockRemoved": ["block_hashes", "medium"],
            "AllBlocksCleared": [],
        }[event[0]]
        return {"type": event[0], **dict(zip(fields, event[1:]))}
    assert isinstance(event, dict) and "type" in event, event
    return event


def check_hash(h: object, variant: Variant) -> None:
    if variant.bytes_hashes:
        assert isinstance(h, bytes) and len(h) == 32, h
    elif variant.engine.startswith("sglang"):
        assert isinstance(h, int) and -(2**63) <= h < 2**63, h
    else:
        assert isinstance(h, int) and 0 <= h < 2**64, h


def flat_tokens(token_ids: list, variant: Variant) -> list[int]:
    if variant.engine == "sglang-bigram":
        assert all(isinstance(p, list) and len(p) == 2 for p in token_ids), token_ids[:4]
        firsts = [p[0] for p in token_ids]
        # pair i is (t_i, t_i+1)
        assert [p[1] for p in token_ids[:-1]] == firsts[1:]
        return firsts
    assert all(isinstance(t, int) for t in token_ids)
    return token_ids


def make(emulator_factory, variant: Variant, **kwargs) -> Emulator:
    return emulator_factory(engine=variant.engine, bytes_hashes=variant.bytes_hashes, **kwargs)


def subscribed(emu: Emulator) -> Subscriber:
    sub = Subscriber(emu.pub_endpoint, emu.replay_endpoint)
    sub.await_subscribed(lambda: direct(emu, fresh("probe")))
    sub.drain()
    return sub


@pytest.mark.parametrize("variant", VARIANTS, ids=[v.id for v in VARIANTS])
def test_live_batch_is_the_engines_encoding_of_the_prompts_blocks(emulator_factory, variant: Variant) -> None:
    emu = make(emulator_factory, variant)
    sub = subscribed(emu)
    try:
        doc = fresh("doc")
        direct(emu, doc)
        msg = sub.recv()
        assert msg is not None and msg.topic == b""
        rank, events = batch_events(msg, variant)
        assert rank == 0
        assert len(events) == 1
        ev = as_map(events[0], variant)
        assert ev["type"] == "BlockStored"
        tokens = emu.tokens(chat_body(doc))
        n = len(tokens) // 16
        assert ev["block_size"] == 16 and ev["parent_block_hash"] is None
        assert ev["medium"] == emu.encoding.gpu and ev.get("lora_id") is None
        assert flat_tokens(ev["token_ids"], variant) == tokens[: n * 16]
        assert len(ev["block_hashes"]) == n
        for h in ev["block_hashes"]:
            check_hash(h, variant)

        # The next turn of the conversation stores only what follows the shared blocks, chained
        # to the last of them.
        cont = continuation(doc, "And what does it say about the harbour?")
        shared = shared_blocks(emu, doc, cont)
        usage = direct(emu, cont)
        assert usage["prompt_tokens_details"]["cached_tokens"] == shared * 16
        nxt = as_map(batch_events(sub.recv(), variant)[1][0], variant)
        assert nxt["parent_block_hash"] == ev["block_hashes"][shared - 1]
        cont_tokens = emu.tokens(chat_body(cont))
        assert flat_tokens(nxt["token_ids"], variant) == cont_tokens[shared * 16: len(cont_tokens) // 16 * 16]

        # The engine's own classes decode what its publisher sent (where they describe it).
        if variant.engine in ("vllm", "vllm-map", "sglang"):
            decoded = msgspec.msgpack.decode(msg.payload, type=emu.encoding.batch_cls)
            assert type(decoded.events[0]).__name__ == "BlockStored"
    finally:
        sub.close()


@pytest.mark.parametrize("variant", VARIANTS, ids=[v.id for v in VARIANTS])
def test_dropped_batches_come_back_through_replay(emulator_factory, variant: Variant) -> None:
    emu = make(emulator_factory, variant)
    sub = subscribed(emu)
    try:
        seqs = emu.drop(2)
        lost = [fresh("lost"), fresh("lost")]
        for doc in lost:
            direct(emu, doc)
        direct(emu, fresh("after"))
        live = sub.recv()
        assert live is not None and live.seq == seqs[-1] + 1, "the lost batches must not arrive live"
        assert emu.blocks()["dropped"] == 2

        replayed, end = sub.replay(seqs[0])
        assert [m.seq for m in replayed] == [seqs[0], seqs[0] + 1, seqs[0] + 2]
        assert replayed[2].payload == live.payload
        for m, doc in zip(replayed, lost):
            ev = as_map(batch_events(m, variant)[1][0], variant)
            tokens = emu.tokens(chat_body(doc))
            assert flat_tokens(ev["token_ids"], variant) == tokens[: len(tokens) // 16 * 16]
        assert end == [b"", b"", END_SEQ.to_bytes(8, "big", signed=True), b""]

        everything, _ = sub.replay(0)
        assert [m.seq for m in everything] == list(range(seqs[0] + 3))
    finally:
        sub.close()


@pytest.mark.parametrize("variant", [v for v in VARIANTS if v.id in ("vllm", "vllm-positional", "sglang")], ids=lambda v: v.id)
def test_eviction_removes_lru_leaves_and_clear_clears(emulator_factory, variant: Variant) -> None:
    emu = make(emulator_factory, variant, capacity_blocks=20)
    sub = subscribed(emu)
    try:
        r = httpx.post(emu.url + "/admin/clear")  # the probes' blocks
        assert r.json()["gpu"] == 0
        events = [as_map(e, variant) for e in batch_events(sub.recv(), variant)[1]]
        assert events == [{"type": "AllBlocksCleared"}]

        direct(emu, [{"role": "system", "content": "s"}, {"role": "user", "content": "x"}])  # no full block: no batch
        a, b = fresh("a"), fresh("b")  # 13 blocks each
        direct(emu, a)
        sub.recv()
        before = set(emu.blocks()["hashes"])
        direct(emu, b)
        after = emu.blocks()
        assert after["gpu"] == 20
        events = [as_map(e, variant) for e in batch_events(sub.recv(), variant)[1]]
        assert [e["type"] for e in events] == ["BlockRemoved", "BlockStored"]
        assert events[0]["medium"] == emu.encoding.gpu
        removed, stored = events[0]["block_hashes"], events[1]["block_hashes"]
        assert len(set(removed)) == len(removed) == len(before) + len(stored) - 20
        assert set(removed) <= before
        assert (before - set(removed)) | set(stored) == set(after["hashes"])
        # leaves first: what is left of `a` is its leading blocks
        lookup = httpx.post(emu.url + "/admin/lookup", json=chat_body(a)).json()
        assert lookup["gpu_blocks"] == len(before) - len(removed)
        assert direct(emu, b)["prompt_tokens_details"]["cached_tokens"] == len(stored) * 16
    finally:
        sub.close()


@pytest.mark.parametrize("variant", [v for v in VARIANTS if v.id in ("vllm", "sglang")], ids=lambda v: v.id)
def test_offload_moves_blocks_to_the_cpu_medium(emulator_factory, variant: Variant) -> None:
    emu = make(emulator_factory, variant)
    sub = subscribed(emu)
    try:
        doc = fresh("offload")
        direct(emu, doc)
        sub.recv()
        gpu = emu.blocks()["gpu"]
        httpx.post(emu.url + "/admin/offload").raise_for_status()
        events = [as_map(e, variant) for e in batch_events(sub.recv(), variant)[1]]
        stored = [e for e in events if e["type"] == "BlockStored"]
        assert {e["medium"] for e in stored} == {emu.encoding.cpu}
        assert sum(len(e["block_hashes"]) for e in stored) == gpu
        assert [e["type"] for e in events if e["type"] != "BlockStored"] == ["BlockRemoved"]
        assert emu.blocks()["gpu"] == 0 and emu.blocks()["cpu"] == gpu

        # served again: loaded back from the CPU (reused), and on the GPU once more
        tokens = emu.tokens(chat_body(doc))
        assert direct(emu, doc)["prompt_tokens_details"]["cached_tokens"] == (len(tokens) - 1) // 16 * 16
        back = [as_map(e, variant) for e in batch_events(sub.recv(), variant)[1]]
        assert [(e["type"], e["medium"]) for e in back] == [("BlockStored", emu.encoding.gpu)]
    finally:
        sub.close()


def test_stream_and_usage(emulator_factory) -> None:
    emu = emulator_factory(engine="vllm")
    doc = fresh("stream")
    with httpx.stream("POST", emu.url + "/v1/chat/completions",
                      json=chat_body(doc, stream=True, stream_options={"include_usage": True})) as r:
        assert r.headers["content-type"] == "text/event-stream"
        lines = [line for line in r.iter_lines() if line.startswith("data: ")]
    assert lines[-1] == "data: [DONE]"
    chunks = [msgspec.json.decode(line[6:]) for line in lines[:-1]]
    assert "".join(c["choices"][0]["delta"].get("content", "") for c in chunks if c["choices"]) == "ok"
    assert chunks[-1]["usage"]["prompt_tokens"] == len(emu.tokens(chat_body(doc)))
    assert httpx.post(emu.url + "/v1/chat/completions", json={**chat_body(doc), "model": "other"}).status_code == 404
    models = httpx.get(emu.url + "/v1/models").json()["data"]
    assert [m["id"] for m in models] == ["qwen"]


def test_command_line_prints_ready_and_serves(tokenizer_dir: Path) -> None:
    proc = subprocess.Popen(
        [sys.executable, str(HERE / "emulator.py"), "--port", "0", "--zmq-port", "0", "--replay-port", "0",
         "--model", "qwen", "--tokenizer", str(tokenizer_dir), "--engine", "sglang", "--capacity-blocks", "64"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=dict(os.environ, PYTHONUNBUFFERED="1"),
    )
    try:
        lines: "queue.Queue[str]" = queue.Queue()
        threading.Thread(target=lambda: lines.put(proc.stdout.readline()), daemon=True).start()
        try:
            line = lines.get(timeout=60)
        except queue.Empty:
            pytest.fail("no ready line within 60s")
        word, url, pub, replay = line.split()
        assert word == "ready" and url.startswith("http://127.0.0.1:")
        assert pub.startswith("tcp://127.0.0.1:") and replay.startswith("tcp://127.0.0.1:")
        assert httpx.get(url + "/health").status_code == 200
        sub = Subscriber(pub, replay)
        try:
            body = chat_body(fresh("cli"))
            sub.await_subscribed(lambda: httpx.post(url + "/v1/chat/completions", json=body).raise_for_status())
        finally:
            sub.close()
    finally:
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=15) == 0, proc.stderr.read()
