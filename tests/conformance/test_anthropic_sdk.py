"""The official Anthropic Python SDK, pointed at the gateway, against each backend type.

Every test runs once per backend (`backend_model`): the anthropic backend is passed through, the
openai and ollama backends are reached by translating Anthropic Messages both ways.
"""

from __future__ import annotations

import json
import re
from typing import Iterator

import anthropic
import pytest
from anthropic import Anthropic

from conftest import (
    AN_MODEL,
    COMPLETION_TOKENS,
    CONTENT,
    TOOL_ARGUMENTS,
    TOOL_RESULT_PREFIX,
    Matrix,
)

MESSAGES = [{"role": "user", "content": "Say hello."}]
WEATHER_TOOL = {
    "name": "get_weather",
    "description": "Current weather in a city.",
    "input_schema": {
        "type": "object",
        "properties": {
            "location": {"type": "string", "description": "City name"},
            "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
        },
        "required": ["location"],
    },
}
WEATHER_QUESTION = [{"role": "user", "content": "What is the weather in Paris?"}]
TOOL_RESULT = "18C and sunny"
# Anthropic accepts no other characters in a tool_use id.
TOOL_ID = re.compile(r"^[a-zA-Z0-9_-]+$")


@pytest.fixture(scope="module")
def client(matrix: Matrix) -> Iterator[Anthropic]:
    # Any key: the gateway has no master key, and must send the backend's own key upstream.
    c = Anthropic(base_url=matrix.url, api_key="client-key", max_retries=0, timeout=30.0)
    yield c
    c.close()


def test_messages_plain(client: Anthropic, backend_model: str) -> None:
    msg = client.messages.create(model=backend_model, max_tokens=64, messages=MESSAGES)
    assert msg.type == "message"
    assert msg.role == "assistant"
    assert msg.model == backend_model
    assert msg.id.startswith("msg_")
    assert [b.type for b in msg.content] == ["text"]
    assert msg.content[0].text == CONTENT
    assert msg.stop_reason == "end_turn"
    assert msg.stop_sequence is None
    assert msg.usage.output_tokens == COMPLETION_TOKENS
    assert msg.usage.input_tokens > 0


def test_messages_system_prompt(client: Anthropic, backend_model: str) -> None:
    """The system prompt reaches the backend: the mock counts a prompt token per 4 request bytes."""
    bare = client.messages.create(model=backend_model, max_tokens=64, messages=MESSAGES)
    system = "You are a terse assistant. " * 20
    msg = client.messages.create(model=backend_model, max_tokens=64, system=system, messages=MESSAGES)
    assert msg.content[0].text == CONTENT
    assert msg.usage.input_tokens >= bare.usage.input_tokens + len(system) // 4 - 10
    blocks = client.messages.create(
        model=backend_model, max_tokens=64, system=[{"type": "text", "text": system}], messages=MESSAGES
    )
    assert blocks.content[0].text == CONTENT
    assert blocks.usage.input_tokens > bare.usage.input_tokens


def test_messages_stream(client: Anthropic, backend_model: str) -> None:
    with client.messages.stream(model=backend_model, max_tokens=64, messages=MESSAGES) as stream:
        events = list(stream)
        final = stream.get_final_message()
    types = [e.type for e in events if e.type not in ("text", "input_json", "citation", "thinking", "signature")]
    assert types[0] == "message_start"
    assert types[-2:] == ["message_delta", "message_stop"]
    assert types.count("content_block_start") == types.count("content_block_stop") == 1
    assert types.count("content_block_delta") >= 1
    deltas = [e.delta.text for e in events if e.type == "content_block_delta" and e.delta.type == "text_delta"]
    assert "".join(deltas) == CONTENT
    assert final.model == backend_model
    assert [b.type for b in final.content] == ["text"]
    assert final.content[0].text == CONTENT
    assert final.stop_reason == "end_turn"
    assert final.usage.output_tokens == COMPLETION_TOKENS
    assert final.usage.input_tokens > 0


def test_messages_stream_text_stream(client: Anthropic, backend_model: str) -> None:
    with client.messages.stream(model=backend_model, max_tokens=64, messages=MESSAGES) as stream:
        text = "".join(stream.text_stream)
    assert text == CONTENT


def test_tool_use_then_tool_result(client: Anthropic, backend_model: str) -> None:
    msg = client.messages.create(model=backend_model, max_tokens=256, tools=[WEATHER_TOOL], messages=WEATHER_QUESTION)
    assert msg.stop_reason == "tool_use"
    calls = [b for b in msg.content if b.type == "tool_use"]
    assert len(calls) == 1
    call = calls[0]
    assert call.name == "get_weather"
    assert call.input == TOOL_ARGUMENTS
    assert TOOL_ID.match(call.id), call.id

    follow_up = [
        *WEATHER_QUESTION,
        {"role": "assistant", "content": msg.content},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": call.id, "content": TOOL_RESULT}]},
    ]
    answer = client.messages.create(model=backend_model, max_tokens=256, tools=[WEATHER_TOOL], messages=follow_up)
    assert answer.stop_reason == "end_turn"
    assert [b.type for b in answer.content] == ["text"]
    assert answer.content[0].text == TOOL_RESULT_PREFIX + TOOL_RESULT


def test_tool_use_streamed_arrives_intact(client: Anthropic, backend_model: str) -> None:
    with client.messages.stream(
        model=backend_model, max_tokens=256, tools=[WEATHER_TOOL], messages=WEATHER_QUESTION
    ) as stream:
        events = list(stream)
        final = stream.get_final_message()
    partial = [
        e.delta.partial_json for e in events if e.type == "content_block_delta" and e.delta.type == "input_json_delta"
    ]
    assert json.loads("".join(partial)) == TOOL_ARGUMENTS
    starts = [e.content_block for e in events if e.type == "content_block_start"]
    assert [b.type for b in starts] == ["tool_use"]
    assert starts[0].name == "get_weather"
    assert final.stop_reason == "tool_use"
    calls = [b for b in final.content if b.type == "tool_use"]
    assert len(calls) == 1 and calls[0].name == "get_weather"
    assert calls[0].input == TOOL_ARGUMENTS
    assert TOOL_ID.match(calls[0].id), calls[0].id


def test_tool_result_streamed(client: Anthropic, backend_model: str) -> None:
    follow_up = [
        *WEATHER_QUESTION,
        {
            "role": "assistant",
            "content": [{"type": "tool_use", "id": "toolu_01", "name": "get_weather", "input": TOOL_ARGUMENTS}],
        },
        {
            "role": "user",
            "content": [
                {"type": "tool_result", "tool_use_id": "toolu_01", "content": [{"type": "text", "text": TOOL_RESULT}]}
            ],
        },
    ]
    with client.messages.stream(
        model=backend_model, max_tokens=256, tools=[WEATHER_TOOL], messages=follow_up
    ) as stream:
        text = "".join(stream.text_stream)
        final = stream.get_final_message()
    assert text == TOOL_RESULT_PREFIX + TOOL_RESULT
    assert final.stop_reason == "end_turn"


def test_count_tokens(client: Anthropic, backend_model: str) -> None:
    counted = client.messages.count_tokens(model=backend_model, messages=MESSAGES)
    assert counted.input_tokens > 0
    if backend_model == AN_MODEL:
        # Counted by the Anthropic backend (the mock counts one token per character), not estimated.
        assert counted.input_tokens == len("Say hello.")
    longer = client.messages.count_tokens(
        model=backend_model, system="Be brief. " * 40, tools=[WEATHER_TOOL], messages=MESSAGES
    )
    assert longer.input_tokens > counted.input_tokens


def test_unknown_model_is_not_found_in_anthropic_shape(client: Anthropic) -> None:
    with pytest.raises(anthropic.NotFoundError) as info:
        client.messages.create(model="no-such-model", max_tokens=16, messages=MESSAGES)
    assert info.value.status_code == 404
    body = info.value.body
    assert isinstance(body, dict) and body.get("type") == "error", body
    assert body["error"]["type"] == "not_found_error"
    assert body["error"]["message"]

