"""The official Ollama Python client, pointed at the gateway, against each backend type.

Every test runs once per backend (`backend_model`): the ollama backend speaks Ollama's native API,
the openai and anthropic backends are reached by translating it both ways.
"""

from __future__ import annotations

from typing import Iterator

import httpx
import ollama
import pytest

from conftest import (
    AN_MODEL,
    COMPLETION_TOKENS,
    CONTENT,
    MATRIX_MODELS,
    OA_MODEL,
    OL_MODEL,
    TOOL_ARGUMENTS,
    TOOL_RESULT_PREFIX,
    Matrix,
)

MESSAGES = [{"role": "user", "content": "Say hello."}]
WEATHER_TOOL = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Current weather in a city.",
        "parameters": {
            "type": "object",
            "properties": {
                "location": {"type": "string", "description": "City name"},
                "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
            },
            "required": ["location"],
        },
    },
}
WEATHER_QUESTION = [{"role": "user", "content": "What is the weather in Paris?"}]
TOOL_RESULT = "18C and sunny"


@pytest.fixture(scope="module")
def client(matrix: Matrix) -> Iterator[ollama.Client]:
    c = ollama.Client(host=matrix.url, timeout=30.0)
    yield c
    c.close()


def assert_final(part: ollama.ChatResponse | ollama.GenerateResponse, model: str) -> None:
    """The last object of an answer: done, why, and the counts."""
    assert part.model == model
    assert part.done is True
    assert part.done_reason == "stop"
    assert part.eval_count == COMPLETION_TOKENS
    assert part.prompt_eval_count and part.prompt_eval_count > 0
    assert part.created_at


# --- chat ---------------------------------------------------------------------------------------


def test_chat_plain(client: ollama.Client, backend_model: str) -> None:
    resp = client.chat(model=backend_model, messages=MESSAGES)
    assert resp.message.role == "assistant"
    assert resp.message.content == CONTENT
    assert not resp.message.tool_calls
    assert_final(resp, backend_model)


def test_chat_stream(client: ollama.Client, backend_model: str) -> None:
    parts = list(client.chat(model=backend_model, messages=MESSAGES, stream=True))
    assert len(parts) >= 2
    assert all(p.done is False for p in parts[:-1])
    assert all(p.model == backend_model for p in parts)
    assert "".join(p.message.content or "" for p in parts) == CONTENT
    assert_final(parts[-1], backend_model)


def test_chat_with_system_message(client: ollama.Client, backend_model: str) -> None:
    messages = [{"role": "system", "content": "You are terse."}, *MESSAGES]
    resp = client.chat(model=backend_model, messages=messages)
    assert resp.message.content == CONTENT


def test_chat_tool_call_then_result(client: ollama.Client, backend_model: str) -> None:
    resp = client.chat(model=backend_model, messages=WEATHER_QUESTION, tools=[WEATHER_TOOL])
    calls = resp.message.tool_calls or []
    assert len(calls) == 1
    assert calls[0].function.name == "get_weather"
    assert dict(calls[0].function.arguments) == TOOL_ARGUMENTS
    assert resp.done is True

    # The client keeps no tool call ids (Ollama's API has none): the gateway must pair the result
    # with the call for backends that need ids (Anthropic rejects an unmatched tool_result).
    follow_up = [*WEATHER_QUESTION, resp.message, {"role": "tool", "content": TOOL_RESULT, "tool_name": "get_weather"}]
    answer = client.chat(model=backend_model, messages=follow_up, tools=[WEATHER_TOOL])
    assert answer.message.content == TOOL_RESULT_PREFIX + TOOL_RESULT
    assert not answer.message.tool_calls


def test_chat_tool_call_streamed(client: ollama.Client, backend_model: str) -> None:
    parts = list(client.chat(model=backend_model, messages=WEATHER_QUESTION, tools=[WEATHER_TOOL], stream=True))
    calls = [c for p in parts for c in (p.message.tool_calls or [])]
    assert len(calls) == 1, "Ollama sends a tool call whole, once"
    assert calls[0].function.name == "get_weather"
    assert dict(calls[0].function.arguments) == TOOL_ARGUMENTS
    assert parts[-1].done is True


# --- generate -----------------------------------------------------------------------------------


def test_generate_plain(client: ollama.Client, backend_model: str) -> None:
    resp = client.generate(model=backend_model, prompt="Say hello.")
    assert resp.response == CONTENT
    assert_final(resp, backend_model)


def test_generate_stream(client: ollama.Client, backend_model: str) -> None:
    parts = list(client.generate(model=backend_model, prompt="Say hello.", system="Be brief.", stream=True))
    assert len(parts) >= 2
    assert all(p.done is False for p in parts[:-1])
    assert "".join(p.response or "" for p in parts) == CONTENT
    assert_final(parts[-1], backend_model)


# --- embeddings ---------------------------------------------------------------------------------


def test_embed(client: ollama.Client, backend_model: str, matrix: Matrix) -> None:
    if backend_model == AN_MODEL:
        # Anthropic has no embeddings API: the model is not found for embeddings (a 404 naming
        # the endpoint), not a silent empty answer.
        with pytest.raises(ollama.ResponseError) as info:
            client.embed(model=backend_model, input="hello")
        assert info.value.status_code == 404, info.value
        assert "embeddings" in info.value.error
        return
    resp = client.embed(model=backend_model, input=["first", "second"])
    assert resp.model == backend_model
    assert len(resp.embeddings) == 2
    assert all(len(e) == 8 for e in resp.embeddings)
    assert resp.embeddings[0] != resp.embeddings[1]
    # The vectors are the backend's own (both mocks embed alike), whichever API it speaks.
    mock = matrix.mock_of(backend_model)
    if backend_model == OL_MODEL:
        direct = httpx.post(mock.url + "/api/embed", json={"model": OL_MODEL, "input": ["first", "second"]}).json()
        expected = direct["embeddings"]
    else:
        direct = httpx.post(mock.url + "/v1/embeddings", json={"model": OA_MODEL, "input": ["first", "second"]}).json()
        expected = [d["embedding"] for d in direct["data"]]
    for got, want in zip(resp.embeddings, expected):
        assert got == pytest.approx(want, abs=1e-6)
    single = client.embed(model=backend_model, input="first")
    assert single.embeddings[0] == pytest.approx(resp.embeddings[0], abs=1e-6)


# --- models and errors --------------------------------------------------------------------------


def test_list_shows_every_backends_models(client: ollama.Client) -> None:
    listed = client.list()
    names = [m.model for m in listed.models]
    assert set(MATRIX_MODELS) <= set(names), names
    assert len(names) == len(set(names)), f"duplicates: {names}"


def test_ps(client: ollama.Client) -> None:
    running = client.ps()
    assert set(MATRIX_MODELS) <= {m.model for m in running.models}


def test_version(matrix: Matrix) -> None:
    r = httpx.get(matrix.url + "/api/version", timeout=5.0)
    assert r.status_code == 200
    assert isinstance(r.json().get("version"), str) and r.json()["version"]


def test_unknown_model_is_404_in_ollama_shape(client: ollama.Client) -> None:
    with pytest.raises(ollama.ResponseError) as info:
        client.chat(model="no-such-model", messages=MESSAGES)
    assert info.value.status_code == 404
    assert "no-such-model" in info.value.error
    with pytest.raises(ollama.ResponseError) as info:
        list(client.generate(model="no-such-model", prompt="x", stream=True))
    assert info.value.status_code == 404
