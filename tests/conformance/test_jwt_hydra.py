"""The official openai SDK with a token from a real OpenID provider: ORY Hydra (scripts/hydra,
built from its Go modules and started by scripts/test, which passes HYDRA_ISSUER and
HYDRA_ADMIN_URL). A service gets a client-credentials JWT for the gateway's audience; the gateway
checks it against Hydra's JWKS, treats it as a key of the team its `client_id` names (Hydra puts
no custom claims in client-credentials tokens, so `team_claim: client_id`), applies that team's
rpm and records usage under it. A forged token is refused by the SDK's own error type.
"""

from __future__ import annotations

import base64
import json
import os
import sys
import time
from pathlib import Path

import httpx
import openai
import pytest
from openai import OpenAI

from conftest import MODEL_A, start_gateway, start_mock, write_config

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "sso"))
from hydra_helper import Hydra  # noqa: E402

MASTER = "master-key-for-jwt-tests"

pytestmark = pytest.mark.skipif(
    not os.environ.get("HYDRA_ISSUER"), reason="needs ORY Hydra (scripts/test starts it: scripts/hydra start)"
)


def _admin(url: str, method: str, path: str, body: dict | None = None) -> httpx.Response:
    return httpx.request(method, url + path, json=body, headers={"authorization": f"Bearer {MASTER}"}, timeout=10)


def test_a_hydra_client_credentials_token_is_a_key_of_its_team(tmp_path: Path) -> None:
    hydra = Hydra()
    client = hydra.create_client_credentials_client(audience=["switchyard"])
    token = hydra.client_credentials_token(client, audience=["switchyard"])["access_token"]
    team = client["client_id"]

    mock = start_mock("jwt-mock", [MODEL_A], tmp_path)
    extra = (
        f"auth: {{master_key: {MASTER}, jwt: [{{issuer: '{hydra.issuer}', audiences: [switchyard], "
        "team_claim: client_id}]}\n"
    )
    gateway = start_gateway("jwt-gateway", write_config(tmp_path / "jwt.yaml", [("m", mock.url)], extra), tmp_path)
    try:
        made = _admin(gateway.url, "POST", "/admin/teams", {"name": team, "rpm": 2})
        assert made.status_code == 201, made.text

        sdk = OpenAI(base_url=gateway.url + "/v1", api_key=token, max_retries=0, timeout=30)
        for _ in range(2):
            answer = sdk.chat.completions.create(model=MODEL_A, messages=[{"role": "user", "content": "hi"}])
            assert answer.choices[0].message.content
        # The team's rpm applies to the token.
        with pytest.raises(openai.RateLimitError) as refused:
            sdk.chat.completions.create(model=MODEL_A, messages=[{"role": "user", "content": "hi"}])
        assert "team" in str(refused.value)

        # Usage names the token's team.
        deadline = time.monotonic() + 20
        while True:
            usage = _admin(gateway.url, "GET", f"/admin/usage?team={team}").json()
            if usage["totals"]["requests"] == 2:
                break
            assert time.monotonic() < deadline, f"usage never named the team: {usage}"
            time.sleep(0.05)

        # A token whose payload was changed after signing: the SDK's authentication error.
        head, payload, sig = token.split(".")
        claims = json.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)))
        claims["client_id"] = "someone-else"
        forged_payload = base64.urlsafe_b64encode(json.dumps(claims).encode()).rstrip(b"=").decode()
        forged = OpenAI(base_url=gateway.url + "/v1", api_key=f"{head}.{forged_payload}.{sig}", max_retries=0)
        with pytest.raises(openai.AuthenticationError) as bad:
            forged.chat.completions.create(model=MODEL_A, messages=[{"role": "user", "content": "hi"}])
        assert bad.value.code == "invalid_signature"

        # A token for another audience.
        other = hydra.create_client_credentials_client(audience=["elsewhere"])
        elsewhere = hydra.client_credentials_token(other, audience=["elsewhere"])["access_token"]
        with pytest.raises(openai.AuthenticationError) as wrong:
            OpenAI(base_url=gateway.url + "/v1", api_key=elsewhere, max_retries=0).chat.completions.create(
                model=MODEL_A, messages=[{"role": "user", "content": "hi"}]
            )
        assert wrong.value.code == "invalid_audience"
    finally:
        gateway.stop()
        mock.stop()
