"""The response cache through the official clients: a streamed answer replayed from the cache reads
the same as the first, in each client's own API, against each backend type.

A gateway with `cache: {}` sits in front of the matrix's mocks. Each test asks twice with the
same request; the first goes to the backend (`x-switchyard-cache: miss`), the second is replayed
(`hit`), and the SDK must parse both into the same answer.
"""

from __future__ import annotations

from typing import Iterator

import anthropic
import httpx
import ollama
import pytest
from openai import OpenAI

from conftest import ANTHROPIC_BACKEND_KEY, CONTENT, MATRIX_MODELS, Proc, _wait_for_models, start_gateway, write_config


@pytest.fixture(scope="module")
def cached_url(backend_mocks: dict[str, Proc], tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    log_dir = tmp_path_factory.mktemp("cached")
    backends = [
        ("oa", backend_mocks["oa"].url, "openai"),
        ("an", backend_mocks["an"].url, "anthropic", ANTHROPIC_BACKEND_KEY),
        ("ol", backend_mocks["ol"].url, "ollama"),
    ]
    config = write_config(log_dir / "cached.yaml", backends, "cache: {ttl: 5m}\n")
    gateway = start_gateway("cached-gateway", config, log_dir)
    try:
        _wait_for_models(gateway, list(MATRIX_MODELS))
        yield gateway.url
    finally:
        gateway.stop()


def hits(url: str) -> int:
    metrics = httpx.get(url + "/metrics", timeout=5.0).text
    line = next(line for line in metrics.splitlines() if line.startswith('switchyard_cache_hits_total{source="memory"}'))
    return int(line.split()[-1])


@pytest.fixture(params=list(MATRIX_MODELS), ids=["openai-backend", "anthropic-backend", "ollama-backend"])
def model(request: pytest.FixtureRequest) -> str:
    return request.param


def test_openai_stream_replayed(cached_url: str, model: str) -> None:
    client = OpenAI(base_url=cached_url + "/v1", api_key="unused", max_retries=0, timeout=30.0)
    messages = [{"role": "user", "content": f"openai cache test for {model}"}]
    seen = []
    for expected in ("miss", "exact-hit"):
        raw = client.chat.completions.with_raw_response.create(model=model, messages=messages, stream=True)
        assert raw.headers.get("x-switchyard-cache") == expected
        chunks = list(raw.parse())
        text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
        finish = [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason]
        seen.append((text, finish, chunks[0].id))
    assert seen[0] == seen[1]
    assert seen[0][0] == CONTENT and seen[0][1] == ["stop"]
    client.close()


def test_anthropic_stream_replayed(cached_url: str, model: str) -> None:
    client = anthropic.Anthropic(base_url=cached_url, api_key="unused", max_retries=0, timeout=30.0)
    messages = [{"role": "user", "content": f"anthropic cache test for {model}"}]
    seen = []
    for expected in ("miss", "exact-hit"):
        with client.messages.with_streaming_response.create(
            model=model, max_tokens=64, messages=messages, stream=True
        ) as raw:
            assert raw.headers.get("x-switchyard-cache") == expected
            events = list(raw.parse())
        text = "".join(e.delta.text for e in events if e.type == "content_block_delta" and e.delta.type == "text_delta")
        stop = [e.delta.stop_reason for e in events if e.type == "message_delta"]
        seen.append((text, stop, events[-1].type))
    assert seen[0] == seen[1]
    assert seen[0] == (CONTENT, ["end_turn"], "message_stop")
    client.close()


def test_ollama_stream_replayed(cached_url: str, model: str) -> None:
    client = ollama.Client(host=cached_url, timeout=30.0)
    messages = [{"role": "user", "content": f"ollama cache test for {model}"}]
    before = hits(cached_url)
    answers = []
    for _ in range(2):
        parts = list(client.chat(model=model, messages=messages, stream=True))
        answers.append(("".join(p.message.content or "" for p in parts), parts[-1].done, parts[-1].eval_count))
    assert hits(cached_url) == before + 1
    assert answers[0] == answers[1]
    assert answers[0][0] == CONTENT and answers[0][1] is True
