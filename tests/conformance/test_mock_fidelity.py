"""The official SDKs straight against each mock backend, no gateway: proves the mocks speak their
APIs as the real servers do, so a failure in the matrix tests is the gateway's, not the mock's."""

from __future__ import annotations

import json

import anthropic
import httpx
import ollama
import pytest
from openai import OpenAI

from conftest import (
    AN_MODEL,
    ANTHROPIC_BACKEND_KEY,
    COMPLETION_TOKENS,
    CONTENT,
    OA_MODEL,
    OL_MODEL,
    TOOL_ARGUMENTS,
    TOOL_RESULT_PREFIX,
    Proc,
)

MESSAGES = [{"role": "user", "content": "Say hello."}]
QUESTION = [{"role": "user", "content": "What is the weather in Paris?"}]
SCHEMA = {"type": "object", "properties": {"location": {"type": "string"}}, "required": ["location"]}


def test_anthropic_sdk_against_the_anthropic_mock(backend_mocks: dict[str, Proc]) -> None:
    url = backend_mocks["an"].url
    with anthropic.Anthropic(base_url=url, api_key="wrong-key", max_retries=0, timeout=10.0) as wrong:
        with pytest.raises(anthropic.AuthenticationError):
            wrong.messages.create(model=AN_MODEL, max_tokens=16, messages=MESSAGES)
    client = anthropic.Anthropic(base_url=url, api_key=ANTHROPIC_BACKEND_KEY, max_retries=0, timeout=10.0)
    with client:
        assert [m.id for m in client.models.list()] == [AN_MODEL]
        msg = client.messages.create(model=AN_MODEL, max_tokens=16, system="Be brief.", messages=MESSAGES)
        assert (msg.content[0].text, msg.stop_reason) == (CONTENT, "end_turn")
        assert msg.usage.output_tokens == COMPLETION_TOKENS
        with client.messages.stream(model=AN_MODEL, max_tokens=16, messages=MESSAGES) as stream:
            assert "".join(stream.text_stream) == CONTENT
            final = stream.get_final_message()
        assert (final.stop_reason, final.usage.output_tokens) == ("end_turn", COMPLETION_TOKENS)
        tool = {"name": "get_weather", "input_schema": SCHEMA}
        with client.messages.stream(model=AN_MODEL, max_tokens=64, tools=[tool], messages=QUESTION) as stream:
            call = stream.get_final_message().content[0]
        assert (call.type, call.name, call.input) == ("tool_use", "get_weather", TOOL_ARGUMENTS)
        follow_up = [
            *QUESTION,
            {"role": "assistant", "content": [call]},
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": call.id, "content": "18C"}]},
        ]
        answer = client.messages.create(model=AN_MODEL, max_tokens=64, tools=[tool], messages=follow_up)
        assert answer.content[0].text == TOOL_RESULT_PREFIX + "18C"
        assert client.messages.count_tokens(model=AN_MODEL, messages=MESSAGES).input_tokens == len("Say hello.")
        with pytest.raises(anthropic.NotFoundError):
            client.messages.create(model="nope", max_tokens=16, messages=MESSAGES)
        with pytest.raises(anthropic.BadRequestError):
            client.messages.create(model=AN_MODEL, max_tokens=16, messages=[{"role": "system", "content": "x"}])


def test_ollama_client_against_the_ollama_mock(backend_mocks: dict[str, Proc]) -> None:
    client = ollama.Client(host=backend_mocks["ol"].url, timeout=10.0)
    with client:
        assert [m.model for m in client.list().models] == [OL_MODEL]
        assert [m.model for m in client.ps().models] == [OL_MODEL]
        resp = client.chat(model=OL_MODEL, messages=MESSAGES)
        assert (resp.message.content, resp.done_reason, resp.eval_count) == (CONTENT, "stop", COMPLETION_TOKENS)
        parts = list(client.chat(model=OL_MODEL, messages=MESSAGES, stream=True))
        assert "".join(p.message.content or "" for p in parts) == CONTENT and parts[-1].done
        assert client.generate(model=OL_MODEL, prompt="hi").response == CONTENT
        assert "".join(p.response or "" for p in client.generate(model=OL_MODEL, prompt="hi", stream=True)) == CONTENT
        assert len(client.embed(model=OL_MODEL, input=["a", "b"]).embeddings) == 2
        tool = {"type": "function", "function": {"name": "get_weather", "parameters": SCHEMA}}
        resp = client.chat(model=OL_MODEL, messages=QUESTION, tools=[tool])
        calls = resp.message.tool_calls or []
        assert [(c.function.name, dict(c.function.arguments)) for c in calls] == [("get_weather", TOOL_ARGUMENTS)]
        follow_up = [*QUESTION, resp.message, {"role": "tool", "content": "18C", "tool_name": "get_weather"}]
        answer = client.chat(model=OL_MODEL, messages=follow_up, tools=[tool])
        assert answer.message.content == TOOL_RESULT_PREFIX + "18C"
        with pytest.raises(ollama.ResponseError) as info:
            client.chat(model="nope", messages=MESSAGES)
        assert info.value.status_code == 404
    # Ollama also serves the OpenAI API, which the gateway uses for OpenAI-speaking clients.
    with OpenAI(base_url=backend_mocks["ol"].url + "/v1", api_key="unused", max_retries=0) as oa:
        assert oa.chat.completions.create(model=OL_MODEL, messages=MESSAGES).choices[0].message.content == CONTENT
    assert httpx.get(backend_mocks["ol"].url + "/api/version").json()["version"]


def test_openai_sdk_tools_against_the_openai_mock(backend_mocks: dict[str, Proc]) -> None:
    tool = {"type": "function", "function": {"name": "get_weather", "parameters": SCHEMA}}
    with OpenAI(base_url=backend_mocks["oa"].url + "/v1", api_key="unused", max_retries=0) as client:
        chunks = list(client.chat.completions.create(model=OA_MODEL, messages=QUESTION, tools=[tool], stream=True))
        arguments = "".join(
            d.function.arguments or "" for c in chunks if c.choices for d in (c.choices[0].delta.tool_calls or [])
        )
        assert json.loads(arguments) == TOOL_ARGUMENTS
        resp = client.chat.completions.create(model=OA_MODEL, messages=QUESTION, tools=[tool])
        call = (resp.choices[0].message.tool_calls or [])[0]
        follow_up = [
            *QUESTION,
            resp.choices[0].message.model_dump(exclude_none=True),
            {"role": "tool", "tool_call_id": call.id, "content": "18C"},
        ]
        answer = client.chat.completions.create(model=OA_MODEL, messages=follow_up, tools=[tool])
        assert answer.choices[0].message.content == TOOL_RESULT_PREFIX + "18C"


def test_botocore_against_the_bedrock_mock(tmp_path) -> None:
    """botocore's own bedrock-runtime client (its service model, SigV4 signer, JSON and event-stream
    parsers) against the Bedrock mock: Converse, ConverseStream, and a tool call both ways."""
    import botocore.session

    from conftest import start_mock

    model = "anthropic.claude-3-5-haiku-20241022-v1:0"
    mock = start_mock("mock-bedrock", [model], tmp_path, "--api", "bedrock")
    try:
        client = botocore.session.get_session().create_client(
            "bedrock-runtime", region_name="us-east-1", endpoint_url=mock.url,
            aws_access_key_id="AKIDEXAMPLE", aws_secret_access_key="secret",
        )
        messages = [{"role": "user", "content": [{"text": "Say hello."}]}]
        r = client.converse(modelId=model, messages=messages, inferenceConfig={"maxTokens": 32})
        assert r["output"]["message"]["content"][0]["text"] == CONTENT
        assert r["stopReason"] == "end_turn"
        assert r["usage"]["outputTokens"] == COMPLETION_TOKENS
        events = list(client.converse_stream(modelId=model, messages=messages)["stream"])
        text = "".join(e["contentBlockDelta"]["delta"]["text"] for e in events if "contentBlockDelta" in e)
        assert text == CONTENT
        assert events[-2]["messageStop"]["stopReason"] == "end_turn"
        assert events[-1]["metadata"]["usage"]["outputTokens"] == COMPLETION_TOKENS
        tools = {"tools": [{"toolSpec": {"name": "get_weather", "inputSchema": {"json": SCHEMA}}}]}
        r = client.converse(modelId=model, messages=QUESTION_BLOCKS, toolConfig=tools)
        call = r["output"]["message"]["content"][0]["toolUse"]
        assert (call["name"], call["input"], r["stopReason"]) == ("get_weather", TOOL_ARGUMENTS, "tool_use")
        events = list(client.converse_stream(modelId=model, messages=QUESTION_BLOCKS, toolConfig=tools)["stream"])
        start = next(e["contentBlockStart"]["start"]["toolUse"] for e in events if "contentBlockStart" in e)
        pieces = "".join(e["contentBlockDelta"]["delta"]["toolUse"]["input"] for e in events if "contentBlockDelta" in e)
        assert start["name"] == "get_weather" and json.loads(pieces) == TOOL_ARGUMENTS
        answered = QUESTION_BLOCKS + [
            {"role": "assistant", "content": [{"toolUse": {"toolUseId": call["toolUseId"], "name": "get_weather", "input": TOOL_ARGUMENTS}}]},
            {"role": "user", "content": [{"toolResult": {"toolUseId": call["toolUseId"], "content": [{"text": "18C"}]}}]},
        ]
        r = client.converse(modelId=model, messages=answered, toolConfig=tools)
        assert r["output"]["message"]["content"][0]["text"] == TOOL_RESULT_PREFIX + "18C"
        # The mock refuses what Bedrock refuses, in Bedrock's error shape.
        with pytest.raises(client.exceptions.ValidationException):
            client.converse(modelId=model, messages=[{"role": "assistant", "content": [{"text": "hi"}]}])
        with pytest.raises(client.exceptions.ResourceNotFoundException):
            client.converse(modelId="no-such-model", messages=messages)
    finally:
        mock.stop()


QUESTION_BLOCKS = [{"role": "user", "content": [{"text": "What is the weather in Paris?"}]}]
