"""The official Google Gen AI Python SDK (`google-genai`), pointed at the gateway's Gemini API
with the SDK's defaults (only `base_url` set: API version `v1`, so `/v1/models/{model}:generateContent`,
`:streamGenerateContent?alt=sse` and `GET /v1/models`, the path OpenAI clients also call), against
every backend type: OpenAI-compatible, Anthropic and Ollama reached by translation, and a Gemini
backend reached as it is. `v1beta`, which older code sets, is checked too.
"""

from __future__ import annotations

from typing import Iterator

import pytest
from google import genai
from google.genai import types

from conftest import CONTENT, COMPLETION_TOKENS, TOOL_ARGUMENTS, Proc, four_backend_gateway

GE_MODEL = "gemini-2.5-flash"
GEMINI_BACKEND_KEY = "gemini-test-key"
MODELS = ["oa-model", "an-model", "ol-model", GE_MODEL]
WEATHER = types.Tool(
    function_declarations=[
        types.FunctionDeclaration(
            name="get_weather",
            description="Current weather in a city.",
            parameters=types.Schema(
                type="OBJECT",
                properties={
                    "location": types.Schema(type="STRING", description="City name"),
                    "unit": types.Schema(type="STRING", enum=["celsius", "fahrenheit"]),
                },
                required=["location"],
            ),
        )
    ]
)
NO_AUTO_CALLS = types.AutomaticFunctionCallingConfig(disable=True)


@pytest.fixture(scope="module")
def url(backend_mocks: dict[str, Proc], tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    with four_backend_gateway(backend_mocks, tmp_path_factory.mktemp("gemini"), GE_MODEL, GEMINI_BACKEND_KEY) as url:
        yield url


@pytest.fixture
def client(url: str) -> genai.Client:
    return genai.Client(api_key="unused", http_options=types.HttpOptions(base_url=url))


@pytest.fixture(params=MODELS, ids=["openai-backend", "anthropic-backend", "ollama-backend", "gemini-backend"])
def model(request: pytest.FixtureRequest) -> str:
    return request.param


def test_generate_content(client: genai.Client, model: str) -> None:
    r = client.models.generate_content(model=model, contents="Say hello.")
    assert r.text == CONTENT
    assert r.candidates[0].finish_reason == types.FinishReason.STOP
    assert r.usage_metadata.candidates_token_count == COMPLETION_TOKENS
    assert r.usage_metadata.prompt_token_count > 0


def test_generate_content_stream(client: genai.Client, model: str) -> None:
    chunks = list(client.models.generate_content_stream(model=model, contents="Say hello."))
    assert "".join(c.text or "" for c in chunks) == CONTENT
    assert chunks[-1].candidates[0].finish_reason == types.FinishReason.STOP
    assert chunks[-1].usage_metadata.candidates_token_count == COMPLETION_TOKENS


def test_system_instruction_and_config(client: genai.Client, model: str) -> None:
    config = types.GenerateContentConfig(system_instruction="Be brief.", temperature=0.2, max_output_tokens=64)
    r = client.models.generate_content(model=model, contents="Say hello.", config=config)
    assert r.text == CONTENT


@pytest.mark.parametrize("stream", [False, True], ids=["plain", "streamed"])
def test_function_call_then_its_response(client: genai.Client, model: str, stream: bool) -> None:
    config = types.GenerateContentConfig(tools=[WEATHER], automatic_function_calling=NO_AUTO_CALLS)
    question = types.Content(role="user", parts=[types.Part(text="What is the weather in Paris?")])
    if stream:
        chunks = list(client.models.generate_content_stream(model=model, contents=[question], config=config))
        calls = [call for c in chunks for call in (c.function_calls or [])]
        turn = types.Content(role="model", parts=[types.Part(function_call=calls[0])])
    else:
        r = client.models.generate_content(model=model, contents=[question], config=config)
        calls = r.function_calls
        turn = r.candidates[0].content
    assert len(calls) == 1
    assert calls[0].name == "get_weather"
    assert calls[0].args == TOOL_ARGUMENTS
    result = types.Part.from_function_response(name="get_weather", response={"result": "18C and sunny"})
    answer = client.models.generate_content(
        model=model, contents=[question, turn, types.Content(role="user", parts=[result])], config=config
    )
    assert "18C and sunny" in answer.text


def test_errors_arrive_as_the_sdk_expects(client: genai.Client) -> None:
    with pytest.raises(genai.errors.ClientError) as caught:
        client.models.generate_content(model="no-such-model", contents="Say hello.")
    assert caught.value.code == 404


@pytest.mark.parametrize("api_version", [None, "v1beta"])
def test_models_are_listed_and_found(url: str, api_version: str | None) -> None:
    client = genai.Client(api_key="unused", http_options=types.HttpOptions(base_url=url, api_version=api_version))
    names = {m.name for m in client.models.list()}
    assert {f"models/{m}" for m in MODELS} <= names
    assert client.models.get(model=GE_MODEL).name == f"models/{GE_MODEL}"
    assert client.models.get(model=f"models/{GE_MODEL}").name == f"models/{GE_MODEL}"
    with pytest.raises(genai.errors.ClientError) as caught:
        client.models.get(model="no-such-model")
    assert caught.value.code == 404


def test_openai_clients_still_get_openai_shapes_on_the_same_paths(url: str) -> None:
    """`GET /v1/models` without Google's key header is OpenAI's list, and `/v1/models/{id}` OpenAI's model."""
    import httpx

    listed = httpx.get(f"{url}/v1/models").json()
    assert listed["object"] == "list" and GE_MODEL in {m["id"] for m in listed["data"]}
    one = httpx.get(f"{url}/v1/models/{GE_MODEL}").json()
    assert one["id"] == GE_MODEL and one["object"] == "model"
    assert httpx.get(f"{url}/v1/models/no-such-model").status_code == 404
    gemini = httpx.get(f"{url}/v1/models", params={"key": "k"}).json()
    assert f"models/{GE_MODEL}" in {m["name"] for m in gemini["models"]}


@pytest.mark.parametrize("model", [GE_MODEL, "oa-model"])
def test_the_node_sdk_with_its_defaults(url: str, model: str) -> None:
    """`@google/genai` (Node) with only `baseUrl` set: API version v1 everywhere."""
    from node_sdk import run_node

    out = run_node("gemini.mjs", url, model)
    assert {f"models/{m}" for m in MODELS} <= set(out["listed"]), out
    assert out["got"] == f"models/{model}"
    assert out["plain"].strip() == CONTENT.strip(), out
    assert out["streamed"].strip() == CONTENT.strip(), out
    assert out["counted"] == 4 if model == GE_MODEL else out["counted"] > 0, out
    assert out["missing"] == 404, out


@pytest.mark.parametrize("api_version", [None, "v1beta"])
def test_count_tokens(url: str, api_version: str | None) -> None:
    """`countTokens` goes to a Gemini backend as it is, and is estimated by the gateway for others."""
    client = genai.Client(api_key="unused", http_options=types.HttpOptions(base_url=url, api_version=api_version))
    counted = client.models.count_tokens(model=GE_MODEL, contents="one two three four")
    assert counted.total_tokens == 4, "the Gemini backend's own count (the mock counts words)"
    for model in ["oa-model", "an-model", "ol-model"]:
        estimated = client.models.count_tokens(model=model, contents="one two three four")
        assert estimated.total_tokens and estimated.total_tokens > 0, model
