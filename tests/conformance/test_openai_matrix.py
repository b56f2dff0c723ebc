"""The official OpenAI Python SDK against each backend type: Chat Completions (plain, streamed,
tools) and the Responses API (plain, streamed, function tools).

Every test runs once per backend (`backend_model`): the openai backend is passed through (Chat) or
translated (Responses); the anthropic and ollama backends are reached by translation.
"""

from __future__ import annotations

import json
from typing import Iterator

import pytest
from openai import OpenAI

from conftest import COMPLETION_TOKENS, CONTENT, TOOL_ARGUMENTS, TOOL_RESULT_PREFIX, Matrix

MESSAGES = [{"role": "user", "content": "Say hello."}]
PARAMETERS = {
    "type": "object",
    "properties": {
        "location": {"type": "string", "description": "City name"},
        "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
    },
    "required": ["location"],
}
CHAT_TOOL = {
    "type": "function",
    "function": {"name": "get_weather", "description": "Current weather in a city.", "parameters": PARAMETERS},
}
RESPONSES_TOOL = {
    "type": "function",
    "name": "get_weather",
    "description": "Current weather in a city.",
    "parameters": PARAMETERS,
}
WEATHER_QUESTION = [{"role": "user", "content": "What is the weather in Paris?"}]
TOOL_RESULT = "18C and sunny"


@pytest.fixture(scope="module")
def client(matrix: Matrix) -> Iterator[OpenAI]:
    c = OpenAI(base_url=matrix.url + "/v1", api_key="unused", max_retries=0, timeout=30.0)
    yield c
    c.close()


# --- chat completions ---------------------------------------------------------------------------


def test_chat_plain(client: OpenAI, backend_model: str) -> None:
    resp = client.chat.completions.create(model=backend_model, messages=MESSAGES)
    assert resp.object == "chat.completion"
    assert resp.model == backend_model
    assert len(resp.choices) == 1
    assert resp.choices[0].message.role == "assistant"
    assert resp.choices[0].message.content == CONTENT
    assert resp.choices[0].finish_reason == "stop"
    assert resp.usage is not None
    assert resp.usage.completion_tokens == COMPLETION_TOKENS
    assert resp.usage.prompt_tokens > 0
    assert resp.usage.total_tokens == resp.usage.prompt_tokens + resp.usage.completion_tokens


def test_chat_stream_with_usage(client: OpenAI, backend_model: str) -> None:
    chunks = list(
        client.chat.completions.create(
            model=backend_model, messages=MESSAGES, stream=True, stream_options={"include_usage": True}
        )
    )
    assert all(c.object == "chat.completion.chunk" for c in chunks)
    assert all(c.model == backend_model for c in chunks)
    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices) == CONTENT
    assert [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason] == ["stop"]
    last = chunks[-1]
    assert last.choices == []
    assert last.usage is not None
    assert last.usage.completion_tokens == COMPLETION_TOKENS
    assert last.usage.prompt_tokens > 0
    assert last.usage.total_tokens == last.usage.prompt_tokens + last.usage.completion_tokens
    assert all(c.usage is None for c in chunks[:-1]), "only the final chunk carries usage"


def test_chat_stream_without_usage(client: OpenAI, backend_model: str) -> None:
    chunks = list(client.chat.completions.create(model=backend_model, messages=MESSAGES, stream=True))
    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices) == CONTENT
    assert all(c.usage is None for c in chunks), "no usage chunk unless the client asked for one"
    assert all(c.choices for c in chunks)


def test_chat_tool_call_then_result(client: OpenAI, backend_model: str) -> None:
    resp = client.chat.completions.create(model=backend_model, messages=WEATHER_QUESTION, tools=[CHAT_TOOL])
    choice = resp.choices[0]
    assert choice.finish_reason == "tool_calls"
    calls = choice.message.tool_calls or []
    assert len(calls) == 1
    assert calls[0].type == "function"
    assert calls[0].function.name == "get_weather"
    assert json.loads(calls[0].function.arguments) == TOOL_ARGUMENTS
    assert calls[0].id

    follow_up = [
        *WEATHER_QUESTION,
        choice.message.model_dump(exclude_none=True),
        {"role": "tool", "tool_call_id": calls[0].id, "content": TOOL_RESULT},
    ]
    answer = client.chat.completions.create(model=backend_model, messages=follow_up, tools=[CHAT_TOOL])
    assert answer.choices[0].finish_reason == "stop"
    assert answer.choices[0].message.content == TOOL_RESULT_PREFIX + TOOL_RESULT
    assert not answer.choices[0].message.tool_calls


def test_chat_tool_call_streamed(client: OpenAI, backend_model: str) -> None:
    chunks = list(
        client.chat.completions.create(model=backend_model, messages=WEATHER_QUESTION, tools=[CHAT_TOOL], stream=True)
    )
    calls: dict[int, dict[str, str]] = {}
    for chunk in chunks:
        for delta in (chunk.choices[0].delta.tool_calls or []) if chunk.choices else []:
            call = calls.setdefault(delta.index, {"id": "", "name": "", "arguments": ""})
            call["id"] += delta.id or ""
            if delta.function:
                call["name"] += delta.function.name or ""
                call["arguments"] += delta.function.arguments or ""
    assert list(calls) == [0]
    assert calls[0]["name"] == "get_weather"
    assert calls[0]["id"]
    assert json.loads(calls[0]["arguments"]) == TOOL_ARGUMENTS
    finishes = [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason]
    assert finishes == ["tool_calls"]


# --- responses ----------------------------------------------------------------------------------


def test_responses_plain(client: OpenAI, backend_model: str) -> None:
    resp = client.responses.create(model=backend_model, input="Say hello.")
    assert resp.object == "response"
    assert resp.status == "completed"
    assert resp.model == backend_model
    assert resp.output_text == CONTENT
    assert [item.type for item in resp.output] == ["message"]
    assert resp.usage is not None
    assert resp.usage.output_tokens == COMPLETION_TOKENS
    assert resp.usage.input_tokens > 0
    assert resp.usage.total_tokens == resp.usage.input_tokens + resp.usage.output_tokens


def test_responses_instructions_and_messages(client: OpenAI, backend_model: str) -> None:
    resp = client.responses.create(model=backend_model, instructions="Be brief.", input=MESSAGES)
    assert resp.output_text == CONTENT


def test_responses_stream(client: OpenAI, backend_model: str) -> None:
    events = list(client.responses.create(model=backend_model, input="Say hello.", stream=True))
    types = [e.type for e in events]
    assert types[0] == "response.created"
    assert types[-1] == "response.completed"
    first = events[0].sequence_number
    assert [e.sequence_number for e in events] == list(range(first, first + len(events)))
    text = "".join(e.delta for e in events if e.type == "response.output_text.delta")
    assert text == CONTENT
    done = [e.text for e in events if e.type == "response.output_text.done"]
    assert done == [CONTENT]
    completed = events[-1].response
    assert completed.status == "completed"
    assert completed.output_text == CONTENT
    assert completed.usage is not None and completed.usage.output_tokens == COMPLETION_TOKENS


def test_responses_function_call_then_output(client: OpenAI, backend_model: str) -> None:
    resp = client.responses.create(model=backend_model, input=WEATHER_QUESTION, tools=[RESPONSES_TOOL])
    calls = [item for item in resp.output if item.type == "function_call"]
    assert len(calls) == 1
    call = calls[0]
    assert call.name == "get_weather"
    assert json.loads(call.arguments) == TOOL_ARGUMENTS
    assert call.call_id

    output = {"type": "function_call_output", "call_id": call.call_id, "output": TOOL_RESULT}
    follow_up = [*WEATHER_QUESTION, call, output]
    answer = client.responses.create(model=backend_model, input=follow_up, tools=[RESPONSES_TOOL])
    assert answer.output_text == TOOL_RESULT_PREFIX + TOOL_RESULT
    assert not [item for item in answer.output if item.type == "function_call"]


def test_responses_function_call_streamed(client: OpenAI, backend_model: str) -> None:
    events = list(
        client.responses.create(model=backend_model, input=WEATHER_QUESTION, tools=[RESPONSES_TOOL], stream=True)
    )
    deltas = "".join(e.delta for e in events if e.type == "response.function_call_arguments.delta")
    assert json.loads(deltas) == TOOL_ARGUMENTS
    done = [e for e in events if e.type == "response.function_call_arguments.done"]
    assert len(done) == 1 and json.loads(done[0].arguments) == TOOL_ARGUMENTS
    assert events[-1].type == "response.completed"
    calls = [item for item in events[-1].response.output if item.type == "function_call"]
    assert len(calls) == 1
    assert calls[0].name == "get_weather"
    assert json.loads(calls[0].arguments) == TOOL_ARGUMENTS
