"""The real KV-cache event publisher code of vLLM and SGLang, loaded from their PyPI wheels without
torch, and the event encodings the tests publish with it.

Neither engine's publisher is copied into this repository. `pip download --no-deps` fetches the
wheels once into target/kv-engines/wheels (vllm 0.34.0: ~240 MB, sglang 0.5.23: ~40 MB); only
`vllm/distributed/kv_events.py` and `sglang/srt/disaggregation/kv_events.py` are extracted
(target/kv-engines/src) and each is loaded as a module after minimal stand-ins for the engine
modules it imports (the ones that would pull torch) are put into `sys.modules`. What the tests use
from them is theirs: `ZmqEventPublisher` (PUB socket + ROUTER replay socket over its in-memory
buffer), `BlockStored`, `BlockRemoved`, `AllBlocksCleared` and `KVEventBatch`.

Encodings (`ENCODINGS`, by the emulator's `--engine` name):
- `vllm`: vLLM 0.34 as it is: the batch a positional array `[ts, events, dp_rank]`, each event a
  msgpack map with a `type` key.
- `vllm-map`: vLLM main after vllm-project/vllm#42892: the batch a map
  `{ts, events, data_parallel_rank}` (vLLM's `KVEventBatch` subclassed with `array_like=False`;
  msgspec lets a subclass override its parent's struct options).
- `vllm-positional`: older vLLM releases: events as arrays `["BlockStored", block_hashes,
  parent_block_hash, token_ids, block_size, lora_id, medium, lora_name, ...]` (vLLM's event
  classes subclassed with `array_like=True` and the class name as tag).
- `sglang`: SGLang 0.5.23 as it is: batch `[ts, events, attn_dp_rank]`, events as maps.
- `sglang-bigram`: SGLang under speculative decoding (EAGLE bigram keys): `token_ids` a list of
  `[t_i, t_i+1]` pairs instead of ints.
"""

from __future__ import annotations

import importlib.util
import ipaddress
import logging
import os
import socket
import subprocess
import sys
import time
import types
import zipfile
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Any, Callable

REPO_ROOT = Path(__file__).resolve().parents[2]
CACHE_DIR = Path(os.environ.get("KV_ENGINES_CACHE", REPO_ROOT / "target" / "kv-engines"))


@dataclass(frozen=True)
class Wheel:
    package: str
    version: str
    member: str  # the publisher module's path inside the wheel
    module: str  # the name it is loaded under


VLLM = Wheel("vllm", "0.34.0", "vllm/distributed/kv_events.py", "vllm.distributed.kv_events")
SGLANG = Wheel("sglang", "0.5.23", "sglang/srt/disaggregation/kv_events.py", "sglang.srt.disaggregation.kv_events")


def wheel_path(wheel: Wheel) -> Path:
    """The engine's wheel in the cache, downloaded (no dependencies) when missing."""
    wheels = CACHE_DIR / "wheels"
    pattern = f"{wheel.package}-{wheel.version}-*.whl"
    found = sorted(wheels.glob(pattern))
    if not found:
        wheels.mkdir(parents=True, exist_ok=True)
        subprocess.run(
            [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:",
             f"{wheel.package}=={wheel.version}", "-d", str(wheels)],
            check=True,
        )
        found = sorted(wheels.glob(pattern))
        if not found:
            raise RuntimeError(f"pip download left no {pattern} in {wheels}")
    return found[0]


def extracted_source(wheel: Wheel) -> Path:
    """The publisher module's source, extracted from the wheel once."""
    target = CACHE_DIR / "src" / f"{wheel.package}-{wheel.version}" / wheel.member
    if not target.is_file():
        with zipfile.ZipFile(wheel_path(wheel)) as zf:
            data = zf.read(wheel.member)
        target.parent.mkdir(parents=True, exist_ok=True)
        tmp = target.with_suffix(f".tmp{os.getpid()}")
        tmp.write_bytes(data)
        tmp.replace(target)  # atomic: concurrent emulators never read half a file
    return target


def _stub(name: str, **attrs: Any) -> None:
    """Register `name` (and its parent packages) in sys.modules unless a real one is there."""
    parts = name.split(".")
    for i in range(1, len(parts) + 1):
        sub = ".".join(parts[:i])
        if sub not in sys.modules:
            mod = types.ModuleType(sub)
            mod.__path__ = []  # a package, so children can be registered under it
            sys.modules[sub] = mod
    for key, value in attrs.items():
        setattr(sys.modules[name], key, value)


def _load(wheel: Wheel) -> types.ModuleType:
    if wheel.module in sys.modules:
        return sys.modules[wheel.module]
    spec = importlib.util.spec_from_file_location(wheel.module, extracted_source(wheel))
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[wheel.module] = module  # msgspec resolves the structs' annotations through it
    try:
        spec.loader.exec_module(module)
    except BaseException:
        del sys.modules[wheel.module]
        raise
    return module


# --- vLLM --------------------------------------------------------------------------------------

@dataclass
class _VllmKVEventsConfig:
    """Stand-in for `vllm.config.kv_events.KVEventsConfig` (the publisher only records itself in
    one; the real one is a pydantic dataclass under vLLM's config machinery)."""

    enable_kv_cache_events: bool = False
    publisher: str | None = None
    endpoint: str = "tcp://*:5557"
    replay_endpoint: str | None = None
    buffer_steps: int = 10_000
    hwm: int = 100_000
    max_queue_size: int = 100_000
    topic: str = ""


def _split_zmq_path(path: str) -> tuple[str, str, str]:
    scheme, rest = path.split("://", 1)
    host, _, port = rest.rpartition(":")
    return scheme, host.strip("[]"), port


def _get_tcp_uri(ip: str, port: int) -> str:
    return f"tcp://[{ip}]:{port}" if _is_ipv6(ip) else f"tcp://{ip}:{port}"


def _is_ipv6(address: str) -> bool:
    try:
        return isinstance(ipaddress.ip_address(address), ipaddress.IPv6Address)
    except ValueError:
        return False


@cache
def vllm() -> types.ModuleType:
    """vLLM 0.34.0's `vllm.distributed.kv_events`, loaded from its wheel."""
    _stub("vllm.config.kv_events", KVEventsConfig=_VllmKVEventsConfig)
    _stub("vllm.logger", init_logger=logging.getLogger)
    # Used only to bind `tcp://*:0`; the tests always name their ports.
    _stub(
        "vllm.utils.network_utils",
        get_ip=lambda: "127.0.0.1",
        get_tcp_uri=_get_tcp_uri,
        is_valid_ipv6_address=_is_ipv6,
        split_zmq_path=_split_zmq_path,
    )
    _stub("vllm.v1.core.kv_cache_utils", ExternalBlockHash=bytes | int)
    return _load(VLLM)


# --- SGLang ------------------------------------------------------------------------------------

@dataclass
class _SglangParallel:
    pp_rank: int = 0
    attn_tp_rank: int = 0
    attn_cp_rank: int = 0


@dataclass(frozen=True)
class _NetworkAddress:
    """Stand-in for `sglang.srt.utils.network.NetworkAddress` (host/port parsing, used by the
    publisher to describe its own bound endpoints)."""

    host: str
    port: int

    @classmethod
    def parse(cls, text: str) -> "_NetworkAddress":
        host, sep, port = text.rpartition(":")
        if not sep:
            raise ValueError(f"no port in {text!r}")
        try:
            return cls(host.strip("[]"), int(port))
        except ValueError as e:
            raise ValueError(f"bad port in {text!r}") from e

    @property
    def is_ipv6(self) -> bool:
        return _is_ipv6(self.host)

    def to_tcp(self) -> str:
        return _get_tcp_uri(self.host, self.port)


@cache
def sglang() -> types.ModuleType:
    """SGLang 0.5.23's `sglang.srt.disaggregation.kv_events`, loaded from its wheel."""
    _stub("sglang.srt.runtime_context", get_parallel=_SglangParallel)
    _stub("sglang.srt.utils.network", NetworkAddress=_NetworkAddress)
    return _load(SGLANG)


# --- encodings ---------------------------------------------------------------------------------

@dataclass
class Encoding:
    """How one engine flavour builds and publishes its events, with that engine's own classes."""

    name: str
    engine: str  # the gateway's `kv_events.engine`: vllm | sglang
    module: types.ModuleType
    batch_cls: type
    stored_cls: type
    removed_cls: type
    cleared_cls: type
    gpu: str  # the `medium` names this engine uses
    cpu: str
    bigram: bool = False
    _make_publisher: Callable[..., Any] = field(default=None, repr=False)  # type: ignore[assignment]

    def publisher(self, pub_port: int, replay_port: int, topic: str = "", buffer_steps: int = 10_000) -> Any:
        """The engine's own `ZmqEventPublisher`, PUB bound on `pub_port` and ROUTER on `replay_port`."""
        return self._make_publisher(pub_port, replay_port, topic, buffer_steps)

    def stored(self, hashes: list, parent: Any, tokens: list[int], block_size: int, medium: str,
               next_token: int | None = None) -> Any:
        token_ids: list = tokens
        if self.bigram:
            # EAGLE bigram keys: pair i is (t_i, t_i+1); the last pair's second is the next token.
            following = [*tokens[1:], tokens[-1] if next_token is None else next_token]
            token_ids = [[a, b] for a, b in zip(tokens, following)]
        return self.stored_cls(
            block_hashes=hashes, parent_block_hash=parent, token_ids=token_ids, block_size=block_size,
            lora_id=None, medium=medium, lora_name=None,
        )

    def removed(self, hashes: list, medium: str) -> Any:
        return self.removed_cls(block_hashes=hashes, medium=medium)

    def cleared(self) -> Any:
        return self.cleared_cls()

    def batch(self, events: list) -> Any:
        return self.batch_cls(ts=time.time(), events=events)


def _vllm_encoding(name: str) -> Encoding:
    m = vllm()
    batch_cls, stored_cls, removed_cls, cleared_cls = m.KVEventBatch, m.BlockStored, m.BlockRemoved, m.AllBlocksCleared
    if name == "vllm-map":
        class MapKVEventBatch(m.KVEventBatch, array_like=False):  # type: ignore[call-arg]
            """vLLM after #42892: the outer batch a map {ts, events, data_parallel_rank}."""

        batch_cls = MapKVEventBatch
    elif name == "vllm-positional":
        class PositionalBlockStored(m.BlockStored, array_like=True, tag="BlockStored"):  # type: ignore[call-arg]
            """Older vLLM: ["BlockStored", block_hashes, parent_block_hash, token_ids, ...]."""

        class PositionalBlockRemoved(m.BlockRemoved, array_like=True, tag="BlockRemoved"):  # type: ignore[call-arg]
            """Older vLLM: ["BlockRemoved", block_hashes, medium, ...]."""

        class PositionalAllBlocksCleared(m.AllBlocksCleared, array_like=True, tag="AllBlocksCleared"):  # type: ignore[call-arg]
            """Older vLLM: ["AllBlocksCleared"]."""

        stored_cls, removed_cls, cleared_cls = PositionalBlockStored, PositionalBlockRemoved, PositionalAllBlocksCleared

    def make(pub_port: int, replay_port: int, topic: str, buffer_steps: int) -> Any:
        # vLLM binds a wildcard endpoint and connects to a concrete one; its ROUTER always binds.
        return m.ZmqEventPublisher(
            data_parallel_rank=0, endpoint=f"tcp://*:{pub_port}",
            replay_endpoint=f"tcp://127.0.0.1:{replay_port}", buffer_steps=buffer_steps, topic=topic,
        )

    return Encoding(name, "vllm", m, batch_cls, stored_cls, removed_cls, cleared_cls,
                    gpu=m.MEDIUM_GPU, cpu=m.MEDIUM_CPU, _make_publisher=make)


def _sglang_encoding(name: str) -> Encoding:
    m = sglang()

    def make(pub_port: int, replay_port: int, topic: str, buffer_steps: int) -> Any:
        return m.ZmqEventPublisher(
            attn_dp_rank=0, endpoint=f"tcp://127.0.0.1:{pub_port}", bind=True,
            replay_endpoint=f"tcp://127.0.0.1:{replay_port}", buffer_steps=buffer_steps, topic=topic,
        )

    return Encoding(name, "sglang", m, m.KVEventBatch, m.BlockStored, m.BlockRemoved, m.AllBlocksCleared,
                    gpu=m.StorageMedium.GPU.value, cpu=m.StorageMedium.CPU.value,
                    bigram=name == "sglang-bigram", _make_publisher=make)


ENCODINGS = ("vllm", "vllm-map", "vllm-positional", "sglang", "sglang-bigram")


def encoding(name: str) -> Encoding:
    """The encoding called `name` (one of `ENCODINGS`)."""
    if name not in ENCODINGS:
        raise ValueError(f"unknown engine encoding {name!r}; one of {', '.join(ENCODINGS)}")
    return _vllm_encoding(name) if name.startswith("vllm") else _sglang_encoding(name)


def free_port() -> int:
    """A TCP port free on 127.0.0.1 right now (the OS's pick)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


if __name__ == "__main__":  # fetch and extract both wheels ahead of a test run
    for w in (VLLM, SGLANG):
        print(extracted_source(w))
    print(vllm().ZmqEventPublisher, sglang().ZmqEventPublisher)
