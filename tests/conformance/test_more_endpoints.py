"""The rest of the API (issue 33) through official clients, unmodified: the openai SDK's image
generation and moderations, and the cohere SDK's rerank (v1 and v2 clients, `base_url` at the
gateway), against `switchyard mock`'s vLLM-shaped endpoints, each with a usage record."""

from __future__ import annotations

import base64
import json
import time
from pathlib import Path

import cohere
from openai import OpenAI

from conftest import CONTENT, MODEL_A, LoneBackend, Stack
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


def _wav(seconds: int) -> bytes:
    """A WAV file of `seconds` of silence, 16 kHz 16-bit mono."""
    data = seconds * 32_000
    header = b"RIFF" + (36 + data).to_bytes(4, "little") + b"WAVEfmt " + (16).to_bytes(4, "little")
    header += (1).to_bytes(2, "little") + (1).to_bytes(2, "little") + (16_000).to_bytes(4, "little")
    header += (32_000).to_bytes(4, "little") + (2).to_bytes(2, "little") + (16).to_bytes(2, "little")
    return header + b"data" + data.to_bytes(4, "little") + bytes(data)


def _status_kib(pid: int, field: str) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise AssertionError(f"no {field} in /proc/{pid}/status")


def test_a_25_mb_transcription_streams_through_without_growing_the_gateway(lone_backend: LoneBackend) -> None:
    c = lone_backend.client()
    # Warm up: the first upload builds the upload client and its connection.
    c.audio.transcriptions.create(model=MODEL_A, file=("small.wav", _wav(1), "audio/wav"))
    pid = lone_backend.gateway.popen.pid
    before = _status_kib(pid, "VmRSS")
    Path(f"/proc/{pid}/clear_refs").write_text("5")  # the peak (VmHWM) starts again from now
    audio = _wav(782)  # 25.0 MB
    assert len(audio) >= 25_000_000
    text = c.audio.transcriptions.create(model=MODEL_A, file=("big.wav", audio, "audio/wav"))
    assert text.text == f"mock transcript of {len(audio)} bytes"
    grew_kib = _status_kib(pid, "VmHWM") - before
    print(f"gateway RSS before {before} KiB, peak during a {len(audio)}-byte upload +{grew_kib} KiB")
    assert grew_kib < 5 * 1024, f"the gateway's resident memory peaked {grew_kib} KiB above where it was"
    verbose = c.audio.transcriptions.create(
        model=MODEL_A, file=("a.wav", _wav(2), "audio/wav"), response_format="verbose_json"
    )
    assert verbose.duration == 2.0


def test_speech_streams_back(client: OpenAI) -> None:
    with client.audio.speech.with_streaming_response.create(
        model=MODEL_A, voice="alloy", input="hello there", response_format="wav"
    ) as response:
        chunks = list(response.iter_bytes(chunk_size=None))
    audio = b"".join(chunks)
    assert audio.startswith(b"RIFF") and len(audio) == 44 + 2400 * len("hello there")


def test_images_edit(client: OpenAI) -> None:
    png = base64.b64decode(
        "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGAWjR9awAAAABJRU5ErkJggg=="
    )
    edited = client.images.edit(model=MODEL_A, image=("in.png", png, "image/png"), prompt="add a moon", n=2)
    assert len(edited.data) == 2


def test_files_and_batches(lone_backend: LoneBackend) -> None:
    c = lone_backend.client()
    lines = [
        {
            "custom_id": f"q-{i}",
            "method": "POST",
            "url": "/v1/chat/completions",
            "body": {"model": MODEL_A, "messages": [{"role": "user", "content": f"question {i}"}]},
        }
        for i in range(25)
    ]
    payload = "".join(json.dumps(line) + "\n" for line in lines).encode()
    uploaded = c.files.create(file=("in.jsonl", payload, "application/jsonl"), purpose="batch")
    assert uploaded.purpose == "batch" and uploaded.bytes == len(payload)
    assert c.files.content(uploaded.id).read() == payload
    batch = c.batches.create(input_file_id=uploaded.id, endpoint="/v1/chat/completions", completion_window="24h")
    deadline = time.monotonic() + 30
    while batch.status not in ("completed", "failed", "cancelled"):
        assert time.monotonic() < deadline, batch
        time.sleep(0.05)
        batch = c.batches.retrieve(batch.id)
    assert batch.status == "completed", batch
    assert batch.request_counts is not None and batch.request_counts.completed == 25
    assert batch.output_file_id is not None
    output = [json.loads(line) for line in c.files.content(batch.output_file_id).text.splitlines()]
    # Line by line: each input's custom_id once, answered by the backend.
    assert sorted(o["custom_id"] for o in output) == sorted(line["custom_id"] for line in lines)
    for o in output:
        assert o["response"]["status_code"] == 200 and o["error"] is None
        assert o["response"]["body"]["choices"][0]["message"]["content"] == CONTENT
    assert [b.id for b in c.batches.list()] == [batch.id]
    # Cancelling a finished batch changes nothing.
    assert c.batches.cancel(batch.id).status == "completed"


def test_realtime_session_with_two_responses(lone_backend: LoneBackend) -> None:
    c = lone_backend.client()
    with c.realtime.connect(model=MODEL_A) as conn:
        texts = []
        for _ in range(2):
            conn.response.create()
            text = ""
            for event in conn:
                if event.type == "response.output_text.delta":
                    text += event.delta
                if event.type == "response.done":
                    assert event.response.usage is not None and event.response.usage.output_tokens == 5
                    break
            texts.append(text)
    assert texts == [CONTENT, CONTENT]
    usage = wait_for_usage(lone_backend.gateway.url, 2)
    assert usage["requests"] == 2 and usage["completion_tokens"] == 10
