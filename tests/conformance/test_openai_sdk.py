"""The official OpenAI Python SDK, pointed at the gateway, must behave as against OpenAI itself."""

from __future__ import annotations

import signal
import time

import httpx
import openai
import pytest
from openai import OpenAI

from conftest import ALIAS, MODEL_A, MODEL_B, SHARED_MODEL, LoneBackend, Stack

MESSAGES = [{"role": "user", "content": "Say hello."}]
# What the mock answers with its default 5 chunks.
CONTENT = "tok0 tok1 tok2 tok3 tok4 "


# --- chat completions ---------------------------------------------------------------------------


def test_chat_plain(client: OpenAI) -> None:
    resp = client.chat.completions.create(model=MODEL_A, messages=MESSAGES)
    assert resp.object == "chat.completion"
    assert resp.model == MODEL_A
    assert len(resp.choices) == 1
    choice = resp.choices[0]
    assert choice.message.role == "assistant"
    assert choice.message.content == CONTENT
    assert choice.finish_reason == "stop"
    assert resp.usage is not None
    assert resp.usage.completion_tokens == 5
    assert resp.usage.prompt_tokens > 0
    assert resp.usage.total_tokens == resp.usage.prompt_tokens + resp.usage.completion_tokens


def test_chat_plain_second_backend(client: OpenAI) -> None:
    resp = client.chat.completions.create(model=MODEL_B, messages=MESSAGES)
    assert resp.model == MODEL_B
    assert resp.choices[0].message.content == CONTENT


def test_chat_streaming_matches_plain(client: OpenAI) -> None:
    plain = client.chat.completions.create(model=MODEL_A, messages=MESSAGES)
    stream = client.chat.completions.create(model=MODEL_A, messages=MESSAGES, stream=True)
    chunks = list(stream)
    assert len(chunks) >= 5, "expected one chunk per token"
    assert all(c.object == "chat.completion.chunk" for c in chunks)
    assert all(c.model == MODEL_A for c in chunks)
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == plain.choices[0].message.content == CONTENT
    finishes = [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason]
    assert finishes == ["stop"]
    # Without stream_options.include_usage no chunk carries usage.
    assert all(c.usage is None for c in chunks)


def test_chat_streaming_include_usage(client: OpenAI) -> None:
    chunks = list(
        client.chat.completions.create(
            model=MODEL_B, messages=MESSAGES, stream=True, stream_options={"include_usage": True}
        )
    )
    last = chunks[-1]
    assert last.choices == []
    assert last.usage is not None
    assert last.usage.completion_tokens == 5
    assert last.usage.total_tokens == last.usage.prompt_tokens + last.usage.completion_tokens
    assert all(c.usage is None for c in chunks[:-1]), "only the final chunk carries usage"
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == CONTENT


def test_chat_stream_context_manager_and_raw_sse(client: OpenAI) -> None:
    """The SDK's streaming helper sees the whole stream, ending with the usage chunk."""
    with client.chat.completions.with_streaming_response.create(
        model=MODEL_A, messages=MESSAGES, stream=True, stream_options={"include_usage": True}
    ) as resp:
        assert resp.http_response.headers["content-type"].startswith("text/event-stream")
        lines = [line for line in resp.iter_lines() if line]
    assert lines[-1] == "data: [DONE]"
    assert all(line.startswith("data: ") for line in lines)


# --- aliases ------------------------------------------------------------------------------------


def test_alias_resolves_to_real_model(client: OpenAI) -> None:
    raw = client.chat.completions.with_raw_response.create(model=ALIAS, messages=MESSAGES)
    resp = raw.parse()
    assert resp.model == MODEL_A, "the response names the real model, not the alias"
    assert resp.choices[0].message.content == CONTENT
    assert raw.headers["x-switchyard-backend"] == "m1"


def test_alias_streaming(client: OpenAI) -> None:
    chunks = list(client.chat.completions.create(model=ALIAS, messages=MESSAGES, stream=True))
    assert chunks and all(c.model == MODEL_A for c in chunks)
    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices) == CONTENT


# --- legacy completions -------------------------------------------------------------------------


def test_completions_plain(client: OpenAI) -> None:
    resp = client.completions.create(model=MODEL_A, prompt="Say hello.")
    assert resp.object == "text_completion"
    assert resp.model == MODEL_A
    assert resp.choices[0].text == CONTENT
    assert resp.choices[0].finish_reason == "stop"
    assert resp.usage is not None and resp.usage.completion_tokens == 5


def test_completions_streaming(client: OpenAI) -> None:
    plain = client.completions.create(model=MODEL_B, prompt="Say hello.")
    chunks = list(client.completions.create(model=MODEL_B, prompt="Say hello.", stream=True))
    assert len(chunks) >= 5
    assert all(c.model == MODEL_B for c in chunks)
    assert "".join(c.choices[0].text for c in chunks if c.choices) == plain.choices[0].text == CONTENT
    assert [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason] == ["stop"]


def test_completions_alias(client: OpenAI) -> None:
    resp = client.completions.create(model=ALIAS, prompt=["a prompt in a list"])
    assert resp.model == MODEL_A
    assert resp.choices[0].text == CONTENT


# --- embeddings ---------------------------------------------------------------------------------


def test_embeddings_single(client: OpenAI) -> None:
    resp = client.embeddings.create(model=MODEL_A, input="hello world", encoding_format="float")
    assert resp.object == "list"
    assert resp.model == MODEL_A
    assert len(resp.data) == 1
    assert resp.data[0].index == 0
    assert len(resp.data[0].embedding) == 8
    assert all(isinstance(x, float) for x in resp.data[0].embedding)
    assert resp.usage.prompt_tokens > 0


def test_embeddings_batch(client: OpenAI) -> None:
    inputs = ["first", "second", "third"]
    resp = client.embeddings.create(model=MODEL_B, input=inputs, encoding_format="float")
    assert resp.model == MODEL_B
    assert [d.index for d in resp.data] == [0, 1, 2]
    assert all(len(d.embedding) == 8 for d in resp.data)
    assert resp.data[0].embedding != resp.data[1].embedding, "different inputs, different vectors"


def test_embeddings_default_encoding(client: OpenAI) -> None:
    """Without encoding_format the SDK asks for base64 and decodes it; the gateway must pass that through."""
    resp = client.embeddings.create(model=ALIAS, input=["x", "y"])
    assert resp.model == MODEL_A
    assert len(resp.data) == 2
    assert all(len(d.embedding) == 8 for d in resp.data)


# --- models -------------------------------------------------------------------------------------


def test_models_list(client: OpenAI) -> None:
    ids = [m.id for m in client.models.list()]
    assert MODEL_A in ids
    assert MODEL_B in ids
    assert SHARED_MODEL in ids
    assert ALIAS in ids
    assert len(ids) == len(set(ids)), f"duplicate model ids: {ids}"
    assert all(m.object == "model" for m in client.models.list())


# --- headers and routing ------------------------------------------------------------------------


def test_raw_response_headers(client: OpenAI, stack: Stack) -> None:
    raw = client.chat.completions.with_raw_response.create(model=MODEL_B, messages=MESSAGES)
    assert raw.status_code == 200
    assert raw.headers["x-switchyard-backend"] == "m2"
    # The mock stamps its own port: the header names the backend that really answered.
    assert raw.headers["x-mock-port"] == str(stack.mock2.port)
    rid = raw.headers.get("x-request-id")
    assert rid, "x-request-id missing"
    timing = raw.headers.get("server-timing", "")
    assert "gateway;dur=" in timing and "upstream;dur=" in timing
    assert raw.parse().choices[0].message.content == CONTENT


def test_request_ids_are_unique_and_propagated(client: OpenAI) -> None:
    a = client.chat.completions.with_raw_response.create(model=MODEL_A, messages=MESSAGES)
    b = client.chat.completions.with_raw_response.create(model=MODEL_A, messages=MESSAGES)
    assert a.headers["x-request-id"] != b.headers["x-request-id"]
    c = client.chat.completions.with_raw_response.create(
        model=MODEL_A, messages=MESSAGES, extra_headers={"x-request-id": "conformance-123"}
    )
    assert c.headers["x-request-id"] == "conformance-123"


def test_shared_model_round_robins_over_both_backends(client: OpenAI, stack: Stack) -> None:
    seen = []
    for _ in range(6):
        raw = client.chat.completions.with_raw_response.create(model=SHARED_MODEL, messages=MESSAGES)
        backend = raw.headers["x-switchyard-backend"]
        port = {"m1": stack.mock1.port, "m2": stack.mock2.port}[backend]
        assert raw.headers["x-mock-port"] == str(port)
        assert raw.parse().model == SHARED_MODEL
        seen.append(backend)
    assert set(seen) == {"m1", "m2"}, seen


# --- errors -------------------------------------------------------------------------------------


def test_unknown_model_is_not_found(client: OpenAI) -> None:
    with pytest.raises(openai.NotFoundError) as info:
        client.chat.completions.create(model="no-such-model", messages=MESSAGES)
    err = info.value
    assert err.status_code == 404
    assert err.code == "model_not_found"
    assert err.type == "invalid_request_error"
    assert err.param == "model"
    assert "no-such-model" in err.message
    assert err.response.headers.get("x-request-id")


def test_unknown_model_streaming_is_not_found(client: OpenAI) -> None:
    with pytest.raises(openai.NotFoundError) as info:
        client.chat.completions.create(model="no-such-model", messages=MESSAGES, stream=True)
    assert info.value.code == "model_not_found"


def test_unknown_model_embeddings_is_not_found(client: OpenAI) -> None:
    with pytest.raises(openai.NotFoundError) as info:
        client.embeddings.create(model="no-such-model", input="x")
    assert info.value.code == "model_not_found"


def test_missing_messages_is_bad_request(client: OpenAI) -> None:
    with pytest.raises(openai.BadRequestError) as info:
        client.post("/chat/completions", body={"model": MODEL_A}, cast_to=object)
    err = info.value
    assert err.status_code == 400
    assert err.type == "invalid_request_error"
    assert err.param == "messages"


def test_null_messages_is_bad_request(client: OpenAI) -> None:
    with pytest.raises(openai.BadRequestError) as info:
        client.chat.completions.create(model=MODEL_A, messages=None)  # type: ignore[arg-type]
    assert info.value.type == "invalid_request_error"
    assert info.value.param == "messages"


def test_missing_model_is_bad_request(client: OpenAI) -> None:
    with pytest.raises(openai.BadRequestError) as info:
        client.post("/chat/completions", body={"messages": MESSAGES}, cast_to=object)
    assert info.value.param == "model"
    assert info.value.type == "invalid_request_error"


def test_invalid_json_is_bad_request(gateway_url: str) -> None:
    r = httpx.post(
        gateway_url + "/v1/chat/completions",
        content=b'{"model": "model-a", "messages": [',
        headers={"content-type": "application/json"},
    )
    assert r.status_code == 400
    error = r.json()["error"]
    assert set(error) >= {"message", "type", "param", "code"}
    assert error["type"] == "invalid_request_error"


def test_unknown_route_is_not_found(client: OpenAI) -> None:
    with pytest.raises(openai.NotFoundError) as info:
        client.get("/no/such/route", cast_to=object)
    assert info.value.status_code == 404
    assert isinstance(info.value.body, dict) and "message" in info.value.body


def test_health_endpoints(gateway_url: str) -> None:
    assert httpx.get(gateway_url + "/health").status_code == 200
    ready = httpx.get(gateway_url + "/ready")
    assert ready.status_code == 200
    assert ready.json()["backends_up"] == 2
    metrics = httpx.get(gateway_url + "/metrics")
    assert metrics.status_code == 200
    assert "# TYPE" in metrics.text


# --- dead backends (function-scoped gateway) -----------------------------------------------------


def test_dead_backend_is_503(lone_backend: LoneBackend) -> None:
    c = lone_backend.client()
    ok = c.chat.completions.create(model=MODEL_A, messages=MESSAGES)
    assert ok.choices[0].message.content == CONTENT
    lone_backend.kill_backend()
    lone_backend.wait_until_not_ready()
    with pytest.raises(openai.InternalServerError) as info:
        c.chat.completions.create(model=MODEL_A, messages=MESSAGES)
    err = info.value
    assert isinstance(err, openai.APIStatusError)
    assert err.status_code == 503
    assert err.type == "server_error"
    assert err.code == "no_healthy_backend"
    # Streaming requests fail the same way, before any stream starts.
    with pytest.raises(openai.APIStatusError) as info:
        c.chat.completions.create(model=MODEL_A, messages=MESSAGES, stream=True)
    assert info.value.status_code == 503
    with pytest.raises(openai.APIStatusError) as info:
        c.embeddings.create(model=MODEL_A, input="x")
    assert info.value.status_code == 503


def test_dead_backend_right_after_kill(lone_backend: LoneBackend) -> None:
    """Before the prober notices, the first request finds the dead backend itself: still a clean 503."""
    c = lone_backend.client()
    assert c.chat.completions.create(model=MODEL_A, messages=MESSAGES).model == MODEL_A
    lone_backend.kill_backend()
    with pytest.raises(openai.APIStatusError) as info:
        c.chat.completions.create(model=MODEL_A, messages=MESSAGES)
    assert info.value.status_code == 503, info.value.status_code
    assert info.value.code == "no_healthy_backend"
    # That failure takes the backend out at once: the next request is a 503 without waiting for a probe.
    with pytest.raises(openai.APIStatusError) as info:
        c.chat.completions.create(model=MODEL_A, messages=MESSAGES)
    assert info.value.status_code == 503
    assert info.value.code == "no_healthy_backend"


def test_gateway_exits_cleanly_on_sigterm(lone_backend: LoneBackend) -> None:
    assert httpx.get(lone_backend.gateway.url + "/health").status_code == 200
    code = lone_backend.gateway.stop(signal.SIGTERM)
    assert code == 0, f"gateway exited with {code}\n{lone_backend.gateway.log_tail()}"
    with pytest.raises(httpx.TransportError):
        httpx.get(lone_backend.gateway.url + "/health", timeout=2.0)


# --- usage accounting (function-scoped gateway, so its usage totals are these requests only) ------


def wait_for_usage(gateway_url: str, requests: int, timeout: float = 15.0) -> dict:
    """Poll /admin/usage (open: no master key) until the writer has stored `requests` records."""
    deadline = time.monotonic() + timeout
    totals: dict = {}
    while time.monotonic() < deadline:
        totals = httpx.get(gateway_url + "/admin/usage", timeout=5.0).json()["totals"]
        if totals["requests"] >= requests:
            return totals
        time.sleep(0.05)
    raise AssertionError(f"usage never reached {requests} requests: {totals}")


def test_streaming_usage_is_recorded_exactly_without_include_usage(lone_backend: LoneBackend) -> None:
    c = lone_backend.client()
    chunks = list(c.chat.completions.create(model=MODEL_A, messages=MESSAGES, stream=True))
    # The gateway asked upstream for usage; the client, which did not, never sees that chunk.
    assert all(ch.usage is None for ch in chunks)
    assert "".join(ch.choices[0].delta.content or "" for ch in chunks if ch.choices) == CONTENT
    # What was recorded is the backend's own count, the same a client asking for it would get.
    asked = list(
        c.chat.completions.create(model=MODEL_A, messages=MESSAGES, stream=True, stream_options={"include_usage": True})
    )
    usage = asked[-1].usage
    assert usage is not None and usage.completion_tokens == 5
    totals = wait_for_usage(lone_backend.gateway.url, 2)
    assert totals["requests"] == 2
    assert totals["completion_tokens"] == 2 * usage.completion_tokens
    # Same messages, same prompt count (the injected field does not change what the backend counts
    # beyond the bytes it adds): within the few tokens of the added `stream_options` text.
    assert abs(totals["prompt_tokens"] - 2 * usage.prompt_tokens) <= 12


def test_plain_usage_is_recorded_exactly(lone_backend: LoneBackend) -> None:
    c = lone_backend.client()
    r1 = c.chat.completions.create(model=MODEL_A, messages=MESSAGES)
    r2 = c.completions.create(model=MODEL_A, prompt="hello")
    totals = wait_for_usage(lone_backend.gateway.url, 2)
    assert totals["prompt_tokens"] == r1.usage.prompt_tokens + r2.usage.prompt_tokens
    assert totals["completion_tokens"] == r1.usage.completion_tokens + r2.usage.completion_tokens
