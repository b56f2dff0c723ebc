"""Prompt caching through translation, as the official Anthropic SDK sees it (issue 53): a coding agent's request
with `cache_control` breakpoints on a system block, a tool and a message goes to a Bedrock backend (the mock speaks
Converse and caches the prompt up to its last `cachePoint`, as Bedrock does); the first answer reports a cache write,
the next ones a cache read of the same size, in Anthropic's usage fields, plain and streamed. (Where the breakpoints
land at Bedrock, and how reads and writes are priced, the Rust suite checks: tests/it/prompt_cache.rs.)
"""

from __future__ import annotations

from typing import Iterator

import anthropic
import pytest

from conftest import Proc, _wait_for_models, start_gateway, start_mock, write_config

MODEL = "anthropic.claude-sonnet-4-5-20250929-v1:0"
KEY = "br-key"


@pytest.fixture(scope="module")
def url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    log_dir = tmp_path_factory.mktemp("prompt-cache")
    bedrock: Proc = start_mock("mock-bedrock", [MODEL], log_dir, "--api", "bedrock", "--api-key", KEY)
    config = write_config(log_dir / "prompt-cache.yaml", [])
    config.write_text(
        config.read_text().replace(
            "backends:\n", f"backends:\n  - {{name: br, type: bedrock, url: '{bedrock.url}', api_key: {KEY}, models: ['{MODEL}']}}\n"
        )
    )
    gateway = start_gateway("prompt-cache-gateway", config, log_dir)
    try:
        _wait_for_models(gateway, [MODEL])
        yield gateway.url
    finally:
        gateway.stop()
        bedrock.stop()


def agent_request(question: str) -> dict:
    return {
        "model": MODEL,
        "max_tokens": 64,
        "system": [
            {"type": "text", "text": "You are a careful coding agent. " * 40},
            {"type": "text", "text": "The repository's conventions. " * 40, "cache_control": {"type": "ephemeral"}},
        ],
        "tools": [
            {"name": "read_file", "description": "Read a file", "input_schema": {"type": "object"}},
            {"name": "grep", "description": "Search", "input_schema": {"type": "object"}, "cache_control": {"type": "ephemeral"}},
        ],
        "messages": [
            {
                "role": "user",
                "content": [
                    {"type": "text", "text": "Here is the whole file. " * 50, "cache_control": {"type": "ephemeral", "ttl": "1h"}},
                    {"type": "text", "text": question},
                ],
            }
        ],
    }


def test_the_anthropic_sdk_sees_cache_writes_then_reads_from_a_bedrock_backend(url: str) -> None:
    client = anthropic.Anthropic(base_url=url, api_key="unused", max_retries=0)
    first = client.messages.create(**agent_request("What does main do?"))
    written = first.usage.cache_creation_input_tokens
    assert written and written > 100 and not first.usage.cache_read_input_tokens, first.usage
    assert first.usage.input_tokens > 0

    second = client.messages.create(**agent_request("And the tests?"))
    assert (second.usage.cache_read_input_tokens, second.usage.cache_creation_input_tokens) == (written, 0), second.usage

    with client.messages.stream(**agent_request("And the docs?")) as stream:
        final = stream.get_final_message()
    # Offered tools, the mock calls one.
    assert [b.type for b in final.content] == ["tool_use"], final.content
    assert final.usage.cache_read_input_tokens == written, final.usage
