"""A minimal KV-event subscriber of the tests' own, to check what the engines' publishers put on the
wire without the gateway: a SUB socket for the live three-frame messages `[topic, seq (8 bytes,
big-endian), msgpack payload]` and a DEALER socket for the replay protocol (send `[b"", start_seq]`,
receive `[b"", topic, seq, payload]` per buffered batch, then the end mark whose seq is -1)."""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Callable

import msgspec
import zmq

END_SEQ = -1


@dataclass
class Message:
    topic: bytes
    seq: int
    payload: bytes

    def decoded(self) -> object:
        """The payload as plain msgpack (lists, dicts, ints, bytes)."""
        return msgspec.msgpack.decode(self.payload)


class Subscriber:
    """SUB on an engine's PUB endpoint and DEALER on its replay endpoint."""

    def __init__(self, endpoint: str, replay_endpoint: str, topic: bytes = b"") -> None:
        self._ctx = zmq.Context.instance()
        self.sub = self._ctx.socket(zmq.SUB)
        self.sub.setsockopt(zmq.SUBSCRIBE, topic)
        self.sub.connect(endpoint)
        self.replay_endpoint = replay_endpoint

    def recv(self, timeout: float = 5.0) -> Message | None:
        """The next live message, or None if none arrived within `timeout` seconds."""
        if not self.sub.poll(int(timeout * 1000)):
            return None
        frames = self.sub.recv_multipart()
        assert len(frames) == 3, f"a live message has 3 frames, got {len(frames)}: {frames!r}"
        topic, seq, payload = frames
        assert len(seq) == 8, f"seq is 8 bytes, got {seq!r}"
        return Message(topic, int.from_bytes(seq, "big", signed=True), payload)

    def await_subscribed(self, publish_one: Callable[[], None], timeout: float = 10.0) -> Message:
        """ZMQ's slow joiner: a SUB misses what is published before its subscription reaches the
        PUB, and nothing says when that happened. Publish a fresh batch at a time (through the
        engine) until one arrives live; every later batch arrives too."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            publish_one()
            msg = self.recv(timeout=0.2)
            if msg is not None:
                return msg
        raise AssertionError(f"no live message within {timeout}s")

    def drain(self) -> list[Message]:
        """Live messages already waiting."""
        out = []
        while (msg := self.recv(timeout=0.05)) is not None:
            out.append(msg)
        return out

    def replay(self, start_seq: int, timeout: float = 5.0) -> tuple[list[Message], list[bytes]]:
        """Ask the replay socket for every buffered batch from `start_seq`: (batches, end mark frames)."""
        dealer = self._ctx.socket(zmq.DEALER)
        dealer.connect(self.replay_endpoint)
        try:
            dealer.send_multipart([b"", start_seq.to_bytes(8, "big")])
            out = []
            while True:
                if not dealer.poll(int(timeout * 1000)):
                    raise AssertionError(f"replay from {start_seq}: no end mark within {timeout}s after {len(out)} batches")
                frames = dealer.recv_multipart()
                assert len(frames) == 4 and frames[0] == b"", f"replay frames [b'', topic, seq, payload], got {frames!r}"
                _, topic, seq, payload = frames
                seq_no = int.from_bytes(seq, "big", signed=True)
                if seq_no == END_SEQ:
                    return out, frames
                out.append(Message(topic, seq_no, payload))
        finally:
            dealer.close(linger=0)

    def close(self) -> None:
        self.sub.close(linger=0)
