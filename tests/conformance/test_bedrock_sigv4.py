"""Bedrock backends signed with SigV4, judged by botocore: a stand-in for Bedrock's runtime
endpoint recomputes the signature of every request the gateway sends it (the health probe's GET
and each Converse call, plain and streamed) with botocore's own `SigV4Auth` from the same
credentials and the request's `x-amz-date`, and refuses any that differ, as Bedrock would. The
official OpenAI and Anthropic clients talk to the gateway; the stand-in answers Converse JSON or an
AWS event stream whose frames are written here from the framing's specification (not by the
gateway's own library).
"""

from __future__ import annotations

import json
import struct
import threading
import zlib
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Iterator
from urllib.parse import unquote

import anthropic
import pytest
from botocore.auth import SigV4Auth
from botocore.awsrequest import AWSRequest
from botocore.credentials import Credentials
from openai import OpenAI

from conftest import _wait_for_models, start_gateway

MODEL = "anthropic.claude-3-5-haiku-20241022-v1:0"
REGION = "eu-central-1"
ACCESS_KEY = "AKIAIOSFODNN7EXAMPLE"
SECRET_KEY = "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"
SESSION_TOKEN = "IQoJb3JpZ2luX2VjEXAMPLE/token+with=chars"
WORDS = ["Bonjour ", "from ", "Bedrock."]


def botocore_signature(method: str, url: str, headers: dict[str, str], body: bytes, secret: str) -> str:
    """The signature botocore computes for this request, signing the headers it was signed with."""
    auth = headers["authorization"]
    signed = auth.split("SignedHeaders=")[1].split(",")[0].split(";")
    request = AWSRequest(method=method, url=url, data=body, headers={h: headers[h] for h in signed})
    request.context["timestamp"] = headers["x-amz-date"]
    signer = SigV4Auth(Credentials(ACCESS_KEY, secret, SESSION_TOKEN), "bedrock", REGION)
    canonical = signer.canonical_request(request)
    return signer.signature(signer.string_to_sign(request, canonical), request)


def frame(event_type: str, payload: dict) -> bytes:
    """One AWS event-stream message: prelude (total and headers length, CRC32), string headers
    (type 7), the JSON payload, and the message's CRC32."""
    headers = b""
    for name, value in ((":event-type", event_type), (":content-type", "application/json"), (":message-type", "event")):
        n, v = name.encode(), value.encode()
        headers += bytes([len(n)]) + n + bytes([7]) + struct.pack(">H", len(v)) + v
    body = json.dumps(payload).encode()
    prelude = struct.pack(">II", 12 + len(headers) + len(body) + 4, len(headers))
    message = prelude + struct.pack(">I", zlib.crc32(prelude)) + headers + body
    return message + struct.pack(">I", zlib.crc32(message))


class StandIn(BaseHTTPRequestHandler):
    verified: list[str] = []
    refused: list[str] = []

    def log_message(self, *args) -> None:  # quiet
        pass

    def _check(self, body: bytes) -> bool:
        headers = {k.lower(): v for k, v in self.headers.items()}
        url = f"http://{headers.get('host')}{self.path}"
        if "authorization" not in headers or "x-amz-date" not in headers:
            self.refused.append(f"{self.command} {self.path}: unsigned")
            return False
        sent = headers["authorization"].split("Signature=")[1]
        if sent != botocore_signature(self.command, url, headers, body, SECRET_KEY):
            self.refused.append(f"{self.command} {self.path}: {headers['authorization']}")
            return False
        assert f"Credential={ACCESS_KEY}/" in headers["authorization"] and f"/{REGION}/bedrock/aws4_request" in headers["authorization"]
        assert headers.get("x-amz-security-token") == SESSION_TOKEN
        self.verified.append(f"{self.command} {self.path}")
        return True

    def _send(self, status: int, content_type: str, body: bytes, error: str | None = None) -> None:
        self.send_response(status)
        self.send_header("content-type", content_type)
        self.send_header("content-length", str(len(body)))
        if error:
            self.send_header("x-amzn-errortype", error)
        self.end_headers()
        self.wfile.write(body)

    def _refuse(self) -> None:
        message = b'{"message":"The request signature we calculated does not match the signature you provided."}'
        self._send(403, "application/json", message, "InvalidSignatureException")

    def do_GET(self) -> None:
        if not self._check(b""):
            return self._refuse()
        self._send(200, "application/json", json.dumps({"modelSummaries": [{"modelId": MODEL}]}).encode())

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers.get("content-length", "0")))
        if not self._check(body):
            return self._refuse()
        model, operation = unquote(self.path.removeprefix("/model/")).rsplit("/", 1)
        assert model == MODEL, self.path
        request = json.loads(body)
        assert request["messages"][0]["role"] == "user"
        usage = {"inputTokens": 11, "outputTokens": 3, "totalTokens": 14}
        if operation == "converse":
            answer = {"output": {"message": {"role": "assistant", "content": [{"text": "".join(WORDS)}]}},
                      "stopReason": "end_turn", "usage": usage, "metrics": {"latencyMs": 5}}
            return self._send(200, "application/json", json.dumps(answer).encode())
        events = [frame("messageStart", {"role": "assistant", "p": "abc"})]
        events += [frame("contentBlockDelta", {"contentBlockIndex": 0, "delta": {"text": w}, "p": "ab"}) for w in WORDS]
        events += [frame("contentBlockStop", {"contentBlockIndex": 0}), frame("messageStop", {"stopReason": "end_turn"}),
                   frame("metadata", {"usage": usage, "metrics": {"latencyMs": 5}})]
        self._send(200, "application/vnd.amazon.eventstream", b"".join(events))


@pytest.fixture(scope="module")
def gateway_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    StandIn.verified, StandIn.refused = [], []
    server = ThreadingHTTPServer(("127.0.0.1", 0), StandIn)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    log_dir = tmp_path_factory.mktemp("bedrock")
    data = log_dir / "data"
    data.mkdir()
    config = log_dir / "bedrock.yaml"
    config.write_text(
        "listen: 127.0.0.1:0\n"
        f"storage: {{url: 'sqlite://{data}/switchyard.db', usage_journal_dir: '{data}/usage'}}\n"
        "backends:\n"
        f"  - {{name: br, type: bedrock, url: 'http://127.0.0.1:{server.server_address[1]}', region: {REGION},\n"
        f"      aws_access_key_id: {ACCESS_KEY}, aws_secret_access_key: '{SECRET_KEY}',\n"
        f"      aws_session_token: '{SESSION_TOKEN}', models: ['{MODEL}']}}\n"
    )
    gateway = start_gateway("bedrock-gateway", config, log_dir)
    try:
        _wait_for_models(gateway, [MODEL])
        yield gateway.url
    finally:
        gateway.stop()
        server.shutdown()


def test_botocore_would_refuse_a_signature_made_with_another_secret() -> None:
    """The check below can fail: a request signed with one secret does not verify with another."""
    headers = {"host": "127.0.0.1:1", "x-amz-date": "20261125T120000Z", "x-amz-security-token": SESSION_TOKEN}
    headers["authorization"] = "AWS4-HMAC-SHA256 Credential=x, SignedHeaders=host;x-amz-date;x-amz-security-token, Signature=0"
    url = "http://127.0.0.1:1/model/x/converse"
    assert botocore_signature("POST", url, headers, b"{}", SECRET_KEY) != botocore_signature("POST", url, headers, b"{}", "other")
    assert botocore_signature("POST", url, headers, b"{}", SECRET_KEY) != botocore_signature("POST", url, headers, b"{ }", SECRET_KEY)


def test_openai_client_plain_and_streamed(gateway_url: str) -> None:
    client = OpenAI(base_url=gateway_url + "/v1", api_key="unused")
    r = client.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": "Salut ! ça va ? 🙂"}])
    assert r.choices[0].message.content == "".join(WORDS)
    assert (r.usage.prompt_tokens, r.usage.completion_tokens) == (11, 3)
    assert r.model == MODEL
    stream = client.chat.completions.create(
        model=MODEL, messages=[{"role": "user", "content": "stream please"}], stream=True, stream_options={"include_usage": True}
    )
    chunks = list(stream)
    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices) == "".join(WORDS)
    assert chunks[-1].usage.completion_tokens == 3


def test_anthropic_client_with_tools_streamed(gateway_url: str) -> None:
    client = anthropic.Anthropic(base_url=gateway_url, api_key="unused")
    tools = [{"name": "get_weather", "description": "Weather", "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}}}]
    with client.messages.stream(model=MODEL, max_tokens=64, tools=tools, system="Be brief.",
                                messages=[{"role": "user", "content": "Weather in Paris?"}]) as stream:
        text = "".join(stream.text_stream)
        final = stream.get_final_message()
    assert text == "".join(WORDS)
    assert final.stop_reason == "end_turn"


def test_every_request_was_signed_as_botocore_signs(gateway_url: str) -> None:
    assert StandIn.refused == []
    posts = [v for v in StandIn.verified if v.startswith("POST")]
    assert len(posts) >= 3, StandIn.verified
    assert any(v.startswith("GET /foundation-models") for v in StandIn.verified), StandIn.verified
    assert all("%3A0/converse" in v for v in posts), posts
