"""Drives a real ORY Hydra v2.3.0 (started by `scripts/hydra start`) for the SSO/JWT tests. Python 3 stdlib only.

Verified against a running Hydra v2.3.0 (scripts/hydra start: PostgreSQL store, strategies.access_token=jwt), with real
HTTP calls, by `HYDRA_ISSUER=... HYDRA_ADMIN_URL=... python3 tests/sso/hydra_helper.py` (the self-test at the end):
- create_client_credentials_client / create_auth_code_client: POST /admin/clients, 201 with client_id and secret.
- client_credentials_token: a JWT access token (RS256, `kid` found in the issuer's /.well-known/jwks.json, signature
  checked here by verify_rs256); `aud` is [] unless an `audience` the client was created with is asked for, then
  that list; `sub` and `client_id` are the client's id; `scp` lists the granted scopes; `iss` is the issuer.
- authorization_code_flow: the browser's part done by hand with urllib (no redirects followed automatically, cookies
  kept): /oauth2/auth with PKCE S256 -> login_challenge -> accept_login(subject) -> consent_challenge ->
  accept_consent(claims) -> redirect_uri?code= -> /oauth2/token. The ID token (RS256, its own kid) carries the
  subject as `sub`, the client id as `aud` and the claims given to accept_consent (`groups`, `teams`, ...) at its
  top level; the JWT access token carries them under `ext`, and also at its top level for those listed in
  oauth2.allowed_top_level_claims (scripts/hydra allows groups, teams, email, name).
These are the admin calls Hydra's own end-to-end tests make to stand in for a login and consent UI.
"""

import base64
import hashlib
import http.cookiejar
import json
import os
import secrets
import urllib.error
import urllib.parse
import urllib.request


class HydraError(Exception):
    pass


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, *args, **kwargs):
        return None  # a 3xx comes back as an HTTPError whose Location the flow reads itself


def _b64url_decode(part):
    return base64.urlsafe_b64decode(part + "=" * (-len(part) % 4))


def _b64url(data):
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def decode_jwt(token):
    """(header, payload) of a compact JWS, not verified (see verify_rs256)."""
    header, payload, _ = token.split(".")
    return json.loads(_b64url_decode(header)), json.loads(_b64url_decode(payload))


def verify_rs256(token, jwks):
    """Checks an RS256 signature against the key of the token's `kid` in a JWKS; returns the payload."""
    header, payload = decode_jwt(token)
    if header.get("alg") != "RS256":
        raise HydraError(f"unexpected alg {header.get('alg')}")
    keys = [k for k in jwks["keys"] if k.get("kid") == header.get("kid")]
    if not keys:
        raise HydraError(f"kid {header.get('kid')} not in the JWKS")
    n = int.from_bytes(_b64url_decode(keys[0]["n"]), "big")
    e = int.from_bytes(_b64url_decode(keys[0]["e"]), "big")
    signing_input, _, signature = token.rpartition(".")
    size = (n.bit_length() + 7) // 8
    em = pow(int.from_bytes(_b64url_decode(signature), "big"), e, n).to_bytes(size, "big")
    # EMSA-PKCS1-v1_5 with the DER DigestInfo prefix of SHA-256 (RFC 8017, 9.2).
    digest_info = bytes.fromhex("3031300d060960864801650304020105000420") + hashlib.sha256(signing_input.encode()).digest()
    if em != b"\x00\x01" + b"\xff" * (size - len(digest_info) - 3) + b"\x00" + digest_info:
        raise HydraError("bad RS256 signature")
    return payload


class Hydra:
    def __init__(self, issuer=None, admin_url=None):
        self.issuer = (issuer or os.environ["HYDRA_ISSUER"]).rstrip("/")
        self.admin_url = (admin_url or os.environ["HYDRA_ADMIN_URL"]).rstrip("/")

    # -- plain HTTP --------------------------------------------------------------------------------------------

    def _request(self, method, url, body=None, form=None, auth=None, opener=None):
        headers = {"Accept": "application/json"}
        data = None
        if body is not None:
            data, headers["Content-Type"] = json.dumps(body).encode(), "application/json"
        elif form is not None:
            data = urllib.parse.urlencode(form).encode()
            headers["Content-Type"] = "application/x-www-form-urlencoded"
        if auth is not None:
            headers["Authorization"] = "Basic " + base64.b64encode(":".join(auth).encode()).decode()
        request = urllib.request.Request(url, data=data, headers=headers, method=method)
        try:
            with (opener or urllib.request.build_opener()).open(request, timeout=10) as response:
                raw = response.read()
        except urllib.error.HTTPError as err:
            raise HydraError(f"{method} {url}: {err.code} {err.read().decode(errors='replace')}") from None
        return json.loads(raw) if raw else None

    def discovery(self):
        return self._request("GET", f"{self.issuer}/.well-known/openid-configuration")

    def jwks(self):
        return self._request("GET", f"{self.issuer}/.well-known/jwks.json")

    # -- (a) clients (admin API) -------------------------------------------------------------------------------

    def create_client(self, **fields):
        return self._request("POST", f"{self.admin_url}/admin/clients", body=fields)

    def create_client_credentials_client(self, scope="read write", audience=()):
        """A confidential client (client_secret_basic) for the client_credentials grant. `audience`: the values
        it may ask for in the token request's `audience` parameter, which then become the JWT's `aud`."""
        return self.create_client(
            grant_types=["client_credentials"],
            response_types=["token"],
            scope=scope,
            audience=list(audience),
            token_endpoint_auth_method="client_secret_basic",
        )

    def create_auth_code_client(self, redirect_uri, scope="openid offline profile email", audience=(), public=True):
        """An authorization_code (+ refresh_token) client for `redirect_uri`; public (auth method none, PKCE only)
        by default, else confidential with client_secret_basic. PKCE is used by authorization_code_flow either way."""
        return self.create_client(
            grant_types=["authorization_code", "refresh_token"],
            response_types=["code", "id_token"],
            redirect_uris=[redirect_uri],
            scope=scope,
            audience=list(audience),
            token_endpoint_auth_method="none" if public else "client_secret_basic",
        )

    # -- (b) client-credentials token ------------------------------------------------------------------------

    def client_credentials_token(self, client, scope=None, audience=()):
        """The token endpoint's response (access_token is a JWT when Hydra runs with strategies.access_token=jwt)."""
        form = {"grant_type": "client_credentials"}
        if scope:
            form["scope"] = scope
        if audience:
            form["audience"] = " ".join(audience)
        return self._request(
            "POST", f"{self.issuer}/oauth2/token", form=form, auth=(client["client_id"], client["client_secret"])
        )

    # -- (c) login and consent (admin API) -------------------------------------------------------------------

    def accept_login(self, login_challenge, subject):
        """Accepts a login challenge for `subject`; returns the URL the browser goes to next."""
        query = urllib.parse.urlencode({"login_challenge": login_challenge})
        return self._request(
            "PUT", f"{self.admin_url}/admin/oauth2/auth/requests/login/accept?{query}", body={"subject": subject}
        )["redirect_to"]

    def accept_consent(self, consent_challenge, id_token_claims=None, access_token_claims=None):
        """Grants every requested scope and audience, with `id_token_claims` put at the ID token's top level and
        `access_token_claims` in the access token's session (its `ext`, and its top level where allowed);
        returns the URL the browser goes to next."""
        query = urllib.parse.urlencode({"consent_challenge": consent_challenge})
        consent = self._request("GET", f"{self.admin_url}/admin/oauth2/auth/requests/consent?{query}")
        body = {
            "grant_scope": consent.get("requested_scope") or [],
            "grant_access_token_audience": consent.get("requested_access_token_audience") or [],
            "session": {"id_token": id_token_claims or {}, "access_token": access_token_claims or {}},
        }
        return self._request(
            "PUT", f"{self.admin_url}/admin/oauth2/auth/requests/consent/accept?{query}", body=body
        )["redirect_to"]

    def authorization_code_flow(self, client, redirect_uri, subject, claims=None, scope="openid offline", audience=()):
        """Runs the whole code flow with PKCE (S256) as a browser would, accepting login and consent for `subject`
        with `claims` in both tokens; returns the token endpoint's response (access_token, id_token, ...)."""
        jar = http.cookiejar.CookieJar()  # Hydra's login and consent CSRF cookies
        opener = urllib.request.build_opener(_NoRedirect, urllib.request.HTTPCookieProcessor(jar))

        def location(url):
            try:
                opener.open(url, timeout=10).close()
            except urllib.error.HTTPError as err:
                if err.code in (302, 303) and err.headers.get("Location"):
                    return urllib.parse.urljoin(url, err.headers["Location"])
                raise HydraError(f"GET {url}: {err.code} {err.read().decode(errors='replace')}") from None
            raise HydraError(f"GET {url}: no redirect")

        def param(url, name):
            values = urllib.parse.parse_qs(urllib.parse.urlsplit(url).query).get(name)
            if not values:
                raise HydraError(f"no {name} in {url}")
            return values[0]

        verifier, state, nonce = secrets.token_urlsafe(48), secrets.token_urlsafe(16), secrets.token_urlsafe(16)
        query = {
            "response_type": "code",
            "client_id": client["client_id"],
            "redirect_uri": redirect_uri,
            "scope": scope,
            "state": state,
            "nonce": nonce,
            "code_challenge": _b64url(hashlib.sha256(verifier.encode()).digest()),
            "code_challenge_method": "S256",
        }
        if audience:
            query["audience"] = " ".join(audience)
        url = location(f"{self.issuer}/oauth2/auth?{urllib.parse.urlencode(query)}")
        url = location(self.accept_login(param(url, "login_challenge"), subject))
        url = location(self.accept_consent(param(url, "consent_challenge"), claims, claims))
        if not url.startswith(redirect_uri) or param(url, "state") != state:
            raise HydraError(f"unexpected final redirect {url}")
        form = {
            "grant_type": "authorization_code",
            "code": param(url, "code"),
            "redirect_uri": redirect_uri,
            "code_verifier": verifier,
            "client_id": client["client_id"],
        }
        secret = client.get("client_secret")
        auth = (client["client_id"], secret) if secret else None
        tokens = self._request("POST", f"{self.issuer}/oauth2/token", form=form, auth=auth)
        tokens["nonce"] = nonce
        return tokens


def _self_test():
    hydra = Hydra()
    jwks = hydra.jwks()
    assert hydra.discovery()["jwks_uri"] == f"{hydra.issuer}/.well-known/jwks.json"

    m2m = hydra.create_client_credentials_client(audience=["https://gateway.test"])
    for audience, want_aud in (((), []), (("https://gateway.test",), ["https://gateway.test"])):
        token = hydra.client_credentials_token(m2m, scope="read", audience=audience)
        header, _ = decode_jwt(token["access_token"])
        claims = verify_rs256(token["access_token"], jwks)
        assert claims["iss"] == hydra.issuer and claims["sub"] == m2m["client_id"], claims
        assert claims["client_id"] == m2m["client_id"] and claims["scp"] == ["read"], claims
        assert claims.get("aud") == want_aud, claims
        print("client_credentials access token:", json.dumps(header), json.dumps(claims))

    redirect_uri = "http://127.0.0.1:9/callback"  # never fetched: the code is read from the redirect itself
    for public in (True, False):
        app = hydra.create_auth_code_client(redirect_uri, public=public)
        claims = {"groups": ["eng", "admins"], "teams": ["platform"], "email": "alice@example.test"}
        tokens = hydra.authorization_code_flow(app, redirect_uri, "alice", claims, scope="openid offline email")
        id_header, _ = decode_jwt(tokens["id_token"])
        id_claims = verify_rs256(tokens["id_token"], jwks)
        assert id_claims["sub"] == "alice" and id_claims["aud"] == [app["client_id"]], id_claims
        assert id_claims["nonce"] == tokens["nonce"] and id_claims["groups"] == ["eng", "admins"], id_claims
        at_header, _ = decode_jwt(tokens["access_token"])
        at_claims = verify_rs256(tokens["access_token"], jwks)
        assert at_claims["sub"] == "alice" and at_claims["ext"]["teams"] == ["platform"], at_claims
        assert at_claims["groups"] == ["eng", "admins"], at_claims
        assert "refresh_token" in tokens
        print(f"code flow ({'public' if public else 'confidential'} client), id token:", json.dumps(id_header), json.dumps(id_claims))
        print(f"code flow ({'public' if public else 'confidential'} client), access token:", json.dumps(at_header), json.dumps(at_claims))
    print("hydra_helper self-test: all checks passed")


if __name__ == "__main__":
    _self_test()
