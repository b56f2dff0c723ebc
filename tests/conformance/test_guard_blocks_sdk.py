"""A guardrail's block as each official SDK sees it: its normal error type, and the block
machine-readable in that API's own shape (issue 53) — OpenAI's `code`, Anthropic's `code` beside
`invalid_request_error`, Gemini's `google.rpc.ErrorInfo` (reason CONTENT_BLOCKED, the guard and the
kind in its metadata), Ollama's error string led by `content_blocked:` — for a blocked request (a
400) and a blocked answer stream (the API's error event), over each backend type.

The guard blocks the word `nightingale` in requests and the mock's third token (`tok2`) in answers,
so a plain question's answer is blocked mid-stream.
"""

from __future__ import annotations

from typing import Iterator

import anthropic
import ollama
import openai
import pytest
from google import genai
from google.genai import types

from conftest import Proc, four_backend_gateway

GE_MODEL = "ge-model"
GEMINI_BACKEND_KEY = "gemini-key"
MODELS = ["oa-model", "an-model", "ol-model", GE_MODEL]
GUARDS = """guardrails:
  default: [blocker]
  blocker: {type: keywords, keywords: [nightingale, tok2], action: block}
"""
BLOCKED = "Tell me about nightingale."
PLAIN = "Say hello."


@pytest.fixture(scope="module")
def url(backend_mocks: dict[str, Proc], tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    log_dir = tmp_path_factory.mktemp("guard-blocks")
    with four_backend_gateway(backend_mocks, log_dir, GE_MODEL, GEMINI_BACKEND_KEY, GUARDS) as url:
        yield url


@pytest.fixture(params=MODELS, ids=["openai-backend", "anthropic-backend", "ollama-backend", "gemini-backend"])
def model(request: pytest.FixtureRequest) -> str:
    return request.param


def anthropic_error(body: object) -> dict:
    assert isinstance(body, dict), body
    error = body.get("error", body)
    assert isinstance(error, dict), body
    return error


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "stream"])
@pytest.mark.parametrize("text", [BLOCKED, PLAIN], ids=["request", "answer"])
def test_openai(url: str, model: str, text: str, stream: bool) -> None:
    client = openai.OpenAI(base_url=url + "/v1", api_key="unused", max_retries=0)
    messages = [{"role": "user", "content": text}]
    if stream and text == PLAIN:
        # The answer began: the block arrives as the stream's error event.
        with pytest.raises(openai.APIError) as caught:
            for _ in client.chat.completions.create(model=model, messages=messages, stream=True):
                pass
    else:
        with pytest.raises(openai.BadRequestError) as caught:
            client.chat.completions.create(model=model, messages=messages, stream=stream)
    assert caught.value.code == "content_blocked", caught.value.body
    assert "nightingale" not in str(caught.value.body) and "tok2" not in str(caught.value.body)


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "stream"])
@pytest.mark.parametrize("text", [BLOCKED, PLAIN], ids=["request", "answer"])
def test_anthropic(url: str, model: str, text: str, stream: bool) -> None:
    client = anthropic.Anthropic(base_url=url, api_key="unused", max_retries=0)
    messages = [{"role": "user", "content": text}]
    with pytest.raises(anthropic.APIStatusError) as caught:
        if stream:
            with client.messages.stream(model=model, max_tokens=64, messages=messages) as events:
                for _ in events:
                    pass
        else:
            client.messages.create(model=model, max_tokens=64, messages=messages)
    if not (stream and text == PLAIN):
        assert isinstance(caught.value, anthropic.BadRequestError), caught.value
    error = anthropic_error(caught.value.body)
    assert (error["type"], error["code"]) == ("invalid_request_error", "content_blocked"), error
    assert "blocker" in error["message"] and "keyword" in error["message"], error


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "stream"])
@pytest.mark.parametrize("text", [BLOCKED, PLAIN], ids=["request", "answer"])
def test_gemini(url: str, model: str, text: str, stream: bool) -> None:
    client = genai.Client(api_key="unused", http_options=types.HttpOptions(base_url=url))
    with pytest.raises(genai.errors.ClientError) as caught:
        if stream:
            for _ in client.models.generate_content_stream(model=model, contents=text):
                pass
        else:
            client.models.generate_content(model=model, contents=text)
    assert (caught.value.code, caught.value.status) == (400, "INVALID_ARGUMENT"), caught.value.details
    error = caught.value.details.get("error", caught.value.details)
    [info] = [d for d in error["details"] if d["@type"] == "type.googleapis.com/google.rpc.ErrorInfo"]
    assert info["reason"] == "CONTENT_BLOCKED", info
    assert info["metadata"] == {"guard": "blocker", "kind": "keyword"}, info


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "stream"])
@pytest.mark.parametrize("text", [BLOCKED, PLAIN], ids=["request", "answer"])
def test_ollama(url: str, model: str, text: str, stream: bool) -> None:
    client = ollama.Client(host=url)
    messages = [{"role": "user", "content": text}]
    with pytest.raises(ollama.ResponseError) as caught:
        if stream:
            for _ in client.chat(model=model, messages=messages, stream=True):
                pass
        else:
            client.chat(model=model, messages=messages)
    assert caught.value.error.startswith("content_blocked: blocked by guardrail `blocker`"), caught.value.error
    assert "nightingale" not in caught.value.error and "tok2" not in caught.value.error
