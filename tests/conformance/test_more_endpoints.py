"""The rest of the API (issue 33) through official clients, unmodified: the openai SDK's image
generation and moderations, and the cohere SDK's rerank (v1 and v2 clients, `base_url` at the
gateway), against `switchyard mock`'s vLLM-shaped endpoints, each with a usage record."""

from __future__ import annotations

import base64

import cohere
from openai import OpenAI

from conftest import MODEL_A, LoneBackend, Stack
from test_openai_sdk import wait_for_usage


def test_images_generate(client: OpenAI) -> None:
    image = client.images.generate(model=MODEL_A, prompt="a lighthouse at dusk", n=2, size="1024x1024")
    assert len(image.data) == 2
    png = base64.b64decode(image.data[0].b64_json or "")
    assert png.startswith(b"\x89PNG\r\n\x1a\n")


def test_moderations_create(client: OpenAI) -> None:
    result = client.moderations.create(model=MODEL_A, input=["a nice day", "attack the castle"])
    assert [r.flagged for r in result.results] == [False, True]
    assert result.results[1].categories.violence is True


def test_cohere_rerank_v1_and_v2(stack: Stack) -> None:
    documents = ["green pears", "red apples are sweet", "a blue sky"]
    v1 = cohere.Client(api_key="unused", base_url=stack.url, timeout=30)
    ranked = v1.rerank(model=MODEL_A, query="red apples", documents=documents, top_n=2)
    assert [r.index for r in ranked.results] == [1, 0] or ranked.results[0].index == 1
    assert len(ranked.results) == 2
    v2 = cohere.ClientV2(api_key="unused", base_url=stack.url, timeout=30)
    ranked = v2.rerank(model=MODEL_A, query="red apples", documents=documents)
    assert ranked.results[0].index == 1
    assert len(ranked.results) == 3


def test_each_call_is_a_usage_record(lone_backend: LoneBackend) -> None:
    c = lone_backend.client()
    c.images.generate(model=MODEL_A, prompt="x")
    c.moderations.create(model=MODEL_A, input="x")
    cohere.Client(api_key="unused", base_url=lone_backend.gateway.url, timeout=30).rerank(
        model=MODEL_A, query="x", documents=["x"]
    )
    assert wait_for_usage(lone_backend.gateway.url, 3)["requests"] == 3
