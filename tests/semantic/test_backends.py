"""Self-tests of tests/semantic/backends.py (no gateway involved).

Starts `backends.py --port 0 --port-file ...` once for the module, waits for
the port file and /health (polling, no sleeps as readiness), then checks the
embeddings endpoint against minilm.py and the mock chat model with raw HTTP
and the official openai client.
"""

from __future__ import annotations

import base64
import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import numpy as np
import pytest

HERE = Path(__file__).resolve().parent
STARTUP_TIMEOUT_S = float(os.environ.get("SEMANTIC_BACKENDS_STARTUP_TIMEOUT", "60"))


def start_backends(tmp_dir: Path):
    """Start backends.py; returns (Popen, base_url). Polls the port file, then /health."""
    port_file = tmp_dir / "backends.port"
    log = open(tmp_dir / "backends.log", "wb")
    proc = subprocess.Popen(
        [sys.executable, str(HERE / "backends.py"), "--port", "0", "--port-file", str(port_file)],
        stdout=log, stderr=subprocess.STDOUT,
    )
    deadline = time.monotonic() + STARTUP_TIMEOUT_S
    url = None
    with httpx.Client(timeout=2.0) as c:
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                raise RuntimeError(f"backends.py exited with {proc.returncode}: "
                                   + (tmp_dir / "backends.log").read_text(errors="replace")[-2000:])
            if url is None and port_file.exists():
                url = f"http://127.0.0.1:{int(port_file.read_text().strip())}"
            if url is not None:
                try:
                    if c.get(url + "/health").status_code == 200:
                        return proc, url
                except httpx.TransportError:
                    pass
            # wait for the child to change state (bounded), rather than a fixed sleep
            try:
                proc.wait(timeout=0.05)
            except subprocess.TimeoutExpired:
                pass
    proc.kill()
    raise RuntimeError("backends.py did not become ready in time")


@pytest.fixture(scope="module")
def backends(tmp_path_factory):
    proc, url = start_backends(tmp_path_factory.mktemp("backends"))
    yield url
    proc.terminate()
    try:
        proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


@pytest.fixture(scope="module")
def model():
    sys.path.insert(0, str(HERE))
    from minilm import get_model

    return get_model()


def counts(url):
    return httpx.get(url + "/counts").json()


def test_health_and_counts(backends):
    assert httpx.get(backends + "/health").status_code == 200
    assert httpx.post(backends + "/counts/reset").json() == {"embeddings": 0, "chat": 0}
    httpx.post(backends + "/v1/embeddings", json={"input": "x", "model": "m"})
    httpx.post(backends + "/v1/chat/completions", json={"model": "m", "messages": [{"role": "user", "content": "hi"}]})
    httpx.post(backends + "/v1/embeddings", json={"input": [[1, 2]]})  # rejected, still counted
    assert counts(backends) == {"embeddings": 2, "chat": 1}
    httpx.post(backends + "/counts/reset")
    assert counts(backends) == {"embeddings": 0, "chat": 0}


def test_embeddings_match_minilm(backends, model):
    texts = ["How do I boil an egg?", "what's the way to boil eggs", "What is the capital of Australia?"]
    r = httpx.post(backends + "/v1/embeddings", json={"input": texts, "model": "my-embedder"})
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["object"] == "list" and body["model"] == "my-embedder"
    assert [d["index"] for d in body["data"]] == [0, 1, 2]
    got = np.array([d["embedding"] for d in body["data"]], dtype=np.float32)
    assert got.shape == (3, 384)
    np.testing.assert_allclose(got, model.embed(texts), atol=1e-5)
    ntok = sum(model.count_tokens(t) for t in texts)
    assert body["usage"] == {"prompt_tokens": ntok, "total_tokens": ntok}
    assert got[0] @ got[1] > got[0] @ got[2] + 0.3

    single = httpx.post(backends + "/v1/embeddings", json={"input": texts[0], "model": "m"}).json()
    assert len(single["data"]) == 1
    np.testing.assert_allclose(single["data"][0]["embedding"], got[0], atol=1e-5)


def test_embeddings_base64(backends):
    f = httpx.post(backends + "/v1/embeddings", json={"input": ["a cat", "a dog"], "model": "m"}).json()
    b = httpx.post(backends + "/v1/embeddings",
                   json={"input": ["a cat", "a dog"], "model": "m", "encoding_format": "base64"}).json()
    for df, db in zip(f["data"], b["data"]):
        v = np.frombuffer(base64.b64decode(db["embedding"]), dtype="<f4")
        np.testing.assert_array_equal(v, np.array(df["embedding"], dtype=np.float32))


@pytest.mark.parametrize("inp", [[1, 2, 3], [[1, 2], [3]], [], "", ["ok", ""], 5, None, ["ok", 3]])
def test_embeddings_rejects(backends, inp):
    r = httpx.post(backends + "/v1/embeddings", json={"input": inp, "model": "m"})
    assert r.status_code == 400
    assert "message" in r.json()["error"]


def test_openai_client_embeddings(backends, model):
    import openai

    client = openai.OpenAI(base_url=backends + "/v1", api_key="test", max_retries=0)
    r = client.embeddings.create(model="all-MiniLM-L6-v2", input=["hello world", "goodbye"])
    np.testing.assert_allclose(np.array(r.data[1].embedding), model.embed(["goodbye"])[0], atol=1e-5)
    r = client.embeddings.create(model="x", input="hello world", encoding_format="float")
    assert len(r.data[0].embedding) == 384


def test_chat_non_stream(backends):
    msgs = [{"role": "system", "content": "be brief"},
            {"role": "user", "content": "first question"},
            {"role": "assistant", "content": "first answer"},
            {"role": "user", "content": [{"type": "text", "text": "How do I boil an egg?"},
                                         {"type": "image_url", "image_url": {"url": "data:,"}}]}]
    r = httpx.post(backends + "/v1/chat/completions", json={"model": "gpt-x", "messages": msgs})
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["object"] == "chat.completion" and body["model"] == "gpt-x"
    ch = body["choices"][0]
    assert ch["message"] == {"role": "assistant", "content": "answer to: How do I boil an egg?", "refusal": None}
    assert ch["finish_reason"] == "stop"
    assert body["usage"] == {"prompt_tokens": 2 + 2 + 2 + 6, "completion_tokens": 8, "total_tokens": 20}


def test_chat_stream_openai_client(backends):
    import openai

    client = openai.OpenAI(base_url=backends + "/v1", api_key="test", max_retries=0)
    q = "what is the best way to sharpen a kitchen knife at home"
    stream = client.chat.completions.create(model="m", messages=[{"role": "user", "content": q}], stream=True,
                                            stream_options={"include_usage": True})
    text, finishes, usage, n = "", [], None, 0
    for c in stream:
        n += 1
        if c.choices:
            text += c.choices[0].delta.content or ""
            if c.choices[0].finish_reason:
                finishes.append(c.choices[0].finish_reason)
        if c.usage:
            usage = c.usage
    assert text == "answer to: " + q
    assert finishes == ["stop"]
    assert usage.prompt_tokens == len(q.split()) and usage.completion_tokens == len(q.split()) + 2
    assert n >= 5


def test_chat_stream_raw_sse(backends):
    q = "one two three four five six seven"
    with httpx.stream("POST", backends + "/v1/chat/completions",
                      json={"model": "m", "stream": True, "messages": [{"role": "user", "content": q}]}) as r:
        assert r.headers["content-type"].startswith("text/event-stream")
        lines = [l for l in r.iter_lines() if l]
    assert lines[-1] == "data: [DONE]"
    chunks = [json.loads(l[6:]) for l in lines[:-1]]
    assert all("usage" not in c for c in chunks)  # include_usage not asked for
    contents = [c["choices"][0]["delta"].get("content") for c in chunks]
    assert contents[0] == "" and "".join(contents) == "answer to: " + q
    assert all(len(p.split()) <= 3 for p in contents)
    assert chunks[-1]["choices"][0]["finish_reason"] == "stop" and chunks[-1]["choices"][0]["delta"]["content"]
    assert all(c["choices"][0]["finish_reason"] is None for c in chunks[:-1])


def test_chat_tool_call(backends):
    import openai

    client = openai.OpenAI(base_url=backends + "/v1", api_key="test", max_retries=0)
    tools = [{"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object"}}}]
    msgs = [{"role": "user", "content": "TOOL-CALL weather in Paris"}]
    r = client.chat.completions.create(model="m", messages=msgs, tools=tools)
    assert r.choices[0].finish_reason == "tool_calls"
    tc = r.choices[0].message.tool_calls[0]
    assert tc.function.name == "get_weather"
    assert json.loads(tc.function.arguments) == {"query": "TOOL-CALL weather in Paris"}
    args, finish = "", None
    for c in client.chat.completions.create(model="m", messages=msgs, tools=tools, stream=True):
        if c.choices:
            for d in c.choices[0].delta.tool_calls or []:
                args += d.function.arguments or ""
            finish = c.choices[0].finish_reason or finish
    assert finish == "tool_calls" and json.loads(args) == {"query": "TOOL-CALL weather in Paris"}


def test_chat_cut_stream(backends):
    body = {"model": "m", "stream": True, "messages": [{"role": "user", "content": "please CUT-STREAM this long answer now"}]}
    lines = []
    with pytest.raises(httpx.RemoteProtocolError):
        with httpx.stream("POST", backends + "/v1/chat/completions", json=body) as r:
            assert r.headers["connection"] == "close"
            for l in r.iter_lines():
                if l:
                    lines.append(l)
    assert len(lines) == 2 and all(l.startswith("data: {") for l in lines)
    assert all(json.loads(l[6:])["choices"][0]["finish_reason"] is None for l in lines)

    # the same at socket level: the server closes without the chunked terminator
    port = int(backends.rsplit(":", 1)[1])
    payload = json.dumps(body).encode()
    with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
        s.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                  b"Content-Length: %d\r\n\r\n%s" % (len(payload), payload))
        raw = b""
        while True:
            try:
                part = s.recv(65536)
            except ConnectionResetError:
                break
            if not part:
                break
            raw += part
    assert b"[DONE]" not in raw and not raw.endswith(b"0\r\n\r\n")
    # the server is still fine afterwards
    assert httpx.get(backends + "/health").status_code == 200


def test_concurrent_requests(backends, model):
    from concurrent.futures import ThreadPoolExecutor

    texts = [f"how do I convert {i} cups to millilitres" for i in range(24)]
    want = model.embed(texts)

    def one(i):
        with httpx.Client(timeout=30) as c:
            e = c.post(backends + "/v1/embeddings", json={"input": texts[i], "model": "m"}).json()
            a = c.post(backends + "/v1/chat/completions",
                       json={"model": "m", "messages": [{"role": "user", "content": texts[i]}]}).json()
        return i, np.array(e["data"][0]["embedding"]), a["choices"][0]["message"]["content"]

    with ThreadPoolExecutor(8) as ex:
        for i, emb, ans in ex.map(one, range(len(texts))):
            np.testing.assert_allclose(emb, want[i], atol=1e-5)
            assert ans == "answer to: " + texts[i]
