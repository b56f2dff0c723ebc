"""Single sign-on to the console with a real OpenID provider (ORY Hydra) in Debian's chromium.

The gateway runs with `auth.oidc` pointed at Hydra (started by scripts/test: `scripts/hydra start`,
which passes HYDRA_ISSUER and HYDRA_ADMIN_URL; without them the file is skipped). For an admin, a
team admin and a member, each in a fresh browser: the login page's single sign-on link, the real
redirect flow (the gateway's authorization request with PKCE, state and nonce; Hydra's login and
consent steps; the code back to the gateway's callback, exchanged there with the client secret),
and the console signed in. Hydra's login and consent UIs are not served: the browser lands on
their (404) pages, and the test plays the person there, accepting the challenge through Hydra's
admin API with the person's claims (email, name, groups, teams) and sending the page on.

What each role may do is then asked of the server itself, with the browser's own session cookie
(a `fetch` from the signed-in page): allowed rows answer, the rest are refused with 403
`forbidden`. Signing out ends the session on the server; a later sign-in with other groups changes
the role and teams (provisioning follows the claims); revoking a user's sessions with the master
key signs their browser out; and a provider on another site than the gateway signs in as well.
"""

from __future__ import annotations

import json
import os
import socket
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
import uuid
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterator

import pytest
from playwright.sync_api import Browser, BrowserContext, Page, expect

from conftest import MODEL, Stack, shot
from procs import start

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "sso"))
from hydra_helper import Hydra  # noqa: E402

pytestmark = pytest.mark.skipif(
    not (os.environ.get("HYDRA_ISSUER") and os.environ.get("HYDRA_ADMIN_URL")),
    reason="needs ORY Hydra (scripts/test starts it: scripts/hydra start)",
)

MASTER = "console-sso-master-key"
ROLES = {"sw-admins": "admin", "sw-leads": "team_admin", "sw-staff": "member"}


@dataclass
class Person:
    """Who signs in at Hydra: the subject and the ID token's claims."""

    subject: str
    email: str
    name: str
    groups: list[str]
    teams: list[str] = field(default_factory=list)

    def claims(self) -> dict:
        return {"email": self.email, "name": self.name, "groups": self.groups, "teams": self.teams}


@dataclass
class Sso:
    stack: Stack
    hydra: Hydra
    ml: dict
    other: dict
    spare: dict
    #: The gateway as the browser reaches it (its redirect URL's origin).
    url: str


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextmanager
def sso_gateway(logs: Path, host: str) -> Iterator[Sso]:
    """A mock backend and a gateway signing its console in through Hydra, which the browser reaches
    as http://HOST:PORT; teams `ml` (limits, a budget) and `other`, and a spare user, made with the
    master key."""
    hydra = Hydra()
    # The redirect URL names the gateway's port, so the port is chosen before the gateway starts.
    port = free_port()
    url = f"http://{host}:{port}"
    callback = f"{url}/ui/oidc/callback"
    client = hydra.create_client(
        grant_types=["authorization_code"],
        response_types=["code"],
        redirect_uris=[callback],
        scope="openid email profile",
        token_endpoint_auth_method="client_secret_basic",
    )
    mock = start("sso-mock", ["mock", "--listen", "127.0.0.1:0", "--models", MODEL], logs)
    data = logs / "data"
    data.mkdir()
    roles = ", ".join(f"{group}: {role}" for group, role in ROLES.items())
    config = logs / "gateway.yaml"
    config.write_text(
        f"listen: 127.0.0.1:{port}\n"
        f"storage: {{url: 'sqlite://{data}/switchyard.db', usage_journal_dir: '{data}/usage'}}\n"
        "auth:\n"
        f"  master_key: {MASTER}\n"
        "  oidc:\n"
        f"    issuer: '{hydra.issuer}'\n"
        f"    client_id: '{client['client_id']}'\n"
        f"    client_secret: '{client['client_secret']}'\n"
        f"    redirect_url: '{callback}'\n"
        f"    roles: {{{roles}}}\n"
        "    teams_claim: teams\n"
        f"prices: {{{MODEL}: {{input_per_million: 3.0, output_per_million: 15.0}}}}\n"
        f"backends:\n  - {{name: b0, url: '{mock.url}'}}\n"
    )
    try:
        gateway = start("sso-gateway", ["serve", "--config", str(config)], logs)
    except BaseException:
        mock.stop()
        raise
    stack = Stack(mock, gateway)
    try:
        assert gateway.url == f"http://127.0.0.1:{port}", gateway.url

        def made(path: str, body: dict) -> dict:
            status, _, record = stack.call(path, body, key=MASTER)
            assert status == 201, (path, status, record)
            return record

        ml = made("/admin/teams", {"name": "ml", "models": [MODEL], "rpm": 100, "budget_usd": 50, "budget_period": "monthly"})
        other = made("/admin/teams", {"name": "other"})
        spare = made("/admin/users", {"email": "spare@corp.example", "role": "member"})
        yield Sso(stack, hydra, ml, other, spare, url)
    finally:
        gateway.stop()
        mock.stop()


@pytest.fixture(scope="module")
def sso(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Sso]:
    """The gateway at 127.0.0.1, as Hydra is: the same site for the browser (ports do not count),
    like a provider on another subdomain of the company's own domain."""
    with sso_gateway(tmp_path_factory.mktemp("console-sso"), "127.0.0.1") as s:
        yield s


# -- the browser's side ---------------------------------------------------------------------------------------


def sign_in(browser: Browser, sso: Sso, who: Person) -> tuple[BrowserContext, Page, list[str]]:
    """A fresh browser signed in as `who` through the login page's single sign-on link; its page
    on /ui, and the JavaScript errors it raises."""
    context = browser.new_context(viewport={"width": 1280, "height": 800})
    page = context.new_page()
    errors: list[str] = []
    page.on("pageerror", lambda e: errors.append(str(e)))
    # Every response the browser saw, for the failure message.
    trail: list[str] = []
    page.on("response", lambda r: trail.append(f"{r.status} {r.request.method} {r.url} -> {r.headers.get('location', '')}"))

    def arrive(url: str, what: str) -> None:
        try:
            page.wait_for_url(url, timeout=15_000)
        except Exception as e:  # noqa: BLE001 - the trail is the report
            held = sorted(f"{c['name']}@{c['domain']}" for c in context.cookies())
            raise AssertionError(
                f"{who.email} never reached {what} (at {page.url}; cookies held: {held}): {e}\n" + "\n".join(trail)
            ) from None

    page.goto(sso.url + "/ui/login")
    link = page.locator("[data-testid=sso-login]")
    expect(link).to_be_visible()
    assert link.get_attribute("href") == "/ui/oidc/login"
    link.click()
    # The gateway sends the browser to Hydra, which sends it to its login UI, then its consent UI.
    arrive(f"{sso.hydra.issuer}/unused-login-ui?*", "Hydra's login UI")
    provider_ui(page, sso.hydra.accept_login(challenge(page.url, "login_challenge"), who.subject))
    arrive(f"{sso.hydra.issuer}/unused-consent-ui?*", "Hydra's consent UI")
    provider_ui(page, sso.hydra.accept_consent(challenge(page.url, "consent_challenge"), who.claims(), who.claims()))
    # Hydra sends the code to the gateway's callback, which signs the browser in and sends it to the console.
    arrive(sso.url + "/ui", "the console")
    page.wait_for_selector("[data-testid=logout]")
    return context, page, errors


def challenge(url: str, name: str) -> str:
    values = urllib.parse.parse_qs(urllib.parse.urlsplit(url).query).get(name)
    assert values, f"no {name} in {url}"
    return values[0]


def provider_ui(page: Page, redirect_to: str) -> None:
    """Hydra's login and consent UIs are not served (scripts/hydra points Hydra at unused paths of
    its own origin, which answer 404): the browser is on that page, the challenge in its URL. The
    test plays the UI: the challenge is accepted through Hydra's admin API (as the person, granting
    the scopes asked for, with their claims in the ID token), and the page goes on where Hydra says,
    as a UI's page would after its form was sent (the navigation starts in the provider's page)."""
    page.evaluate("to => { window.location.assign(to); }", redirect_to)


def api(page: Page, method: str, path: str, body: dict | None = None, csrf: bool = True) -> tuple[int, dict]:
    """A request from the signed-in page to the gateway, with the browser's own cookie:
    (status, JSON body or {})."""
    return page.evaluate(
        """async ([method, path, body, csrf]) => {
            const headers = {};
            if (csrf && method !== 'GET') headers['x-switchyard-console'] = '1';
            if (body !== null) headers['content-type'] = 'application/json';
            const r = await fetch(path, {method, headers, body: body === null ? undefined : JSON.stringify(body),
                                         credentials: 'same-origin', redirect: 'manual'});
            const text = await r.text();
            let json = {};
            try { json = text ? JSON.parse(text) : {}; } catch (e) { json = {raw: text}; }
            return [r.status, json];
        }""",
        [method, path, body, csrf],
    )


def allowed(page: Page, who: str, method: str, path: str, body: dict | None = None) -> dict:
    status, answer = api(page, method, path, body)
    assert status not in (401, 403), f"{who} {method} {path} {body}: {status} {answer}"
    assert status < 400, f"{who} {method} {path} {body}: {status} {answer}"
    return answer


def refused(page: Page, who: str, method: str, path: str, body: dict | None = None) -> None:
    status, answer = api(page, method, path, body)
    assert status == 403, f"{who} {method} {path} {body}: {status} {answer}"
    assert answer.get("error", {}).get("code") == "forbidden", f"{who} {method} {path}: {answer}"


def wait_for_own_request(page: Page, email: str) -> list[dict]:
    """The request log as the page reads it, once it holds the playground request `email` made."""
    deadline = time.monotonic() + 20
    while True:
        status, answer = api(page, "GET", "/ui/api/requests")
        assert status == 200, answer
        if any(r.get("user") == email for r in answer["data"]):
            return answer["data"]
        assert time.monotonic() < deadline, f"{email}'s playground request never showed: {answer}"
        time.sleep(0.1)


def me(page: Page) -> tuple[int, dict]:
    return api(page, "GET", "/ui/api/me")


def session_cookie(context: BrowserContext) -> dict:
    cookies = [c for c in context.cookies() if c["name"] == "sy_console"]
    assert len(cookies) == 1, context.cookies()
    return cookies[0]


# -- the tests --------------------------------------------------------------------------------------------------


def test_each_role_signs_in_through_hydra_and_the_server_holds_the_role_table(browser: Browser, sso: Sso) -> None:
    ml, other = sso.ml["id"], sso.other["id"]
    tag = uuid.uuid4().hex[:6]
    people = {
        "admin": Person(f"ada-{tag}", f"ada-{tag}@corp.example", "Ada Admin", ["sw-admins", "sw-staff"], ["ml"]),
        # Two mapped groups: the more powerful role wins; a team the gateway lacks is skipped.
        "team_admin": Person(f"lee-{tag}", f"lee-{tag}@corp.example", "Lee Lead", ["sw-staff", "sw-leads"], ["ml", "no-such-team"]),
        "member": Person(f"mo-{tag}", f"mo-{tag}@corp.example", "Mo Member", ["sw-staff", "unmapped"], ["ml"]),
    }
    spare = sso.spare["id"]
    # Keys of no one's: a service key of ml (its team admin manages it) and one of the other team.
    service_ml = sso.stack.call("/admin/keys", {"name": f"svc-ml-{tag}", "team_id": ml}, key=MASTER)[2]["id"]
    service_other = sso.stack.call("/admin/keys", {"name": f"svc-other-{tag}", "team_id": other}, key=MASTER)[2]["id"]
    for role, who in people.items():
        context, page, errors = sign_in(browser, sso, who)
        try:
            # The session cookie: HttpOnly, SameSite=Strict, the console's path; the flow cookie is gone.
            cookie = session_cookie(context)
            assert (cookie["httpOnly"], cookie["sameSite"], cookie["path"]) == (True, "Strict", "/ui"), cookie
            assert not [c for c in context.cookies() if c["name"] == "sy_oidc"], context.cookies()

            # Who the server says is signed in: provisioned just in time from the ID token's claims.
            status, mine = me(page)
            assert status == 200, mine
            assert mine["role"] == role and mine["master"] is False, mine
            assert (mine["user"]["email"], mine["user"]["name"]) == (who.email, who.name), mine
            team_role = "team_admin" if role in ("admin", "team_admin") else "member"
            assert [(t["id"], t["name"], t["role"]) for t in mine["teams"]] == [(ml, "ml", team_role)], mine
            status, _, user = sso.stack.call(f"/admin/users/{mine['user']['id']}", key=MASTER)
            assert status == 200 and user["role"] == role and user["email"] == who.email, user

            # The page is the console of that user (loosely: the sidebar names them when it can).
            whoami = page.locator("[data-testid=whoami]")
            if whoami.count() and whoami.is_visible():
                expect(whoami).to_contain_text(who.email)
            shot(page, f"sso-{role}")

            everyone = True
            admin = role == "admin"
            lead = role in ("admin", "team_admin")
            rows: list[tuple[bool, str, str, dict | None]] = [
                (everyone, "GET", "/ui/api/me", None),
                (everyone, "GET", "/ui/api/models", None),
                (everyone, "GET", "/ui/api/usage", None),
                (everyone, "GET", "/ui/api/requests", None),
                (everyone, "GET", "/ui/api/keys", None),
                (everyone, "GET", "/ui/api/teams", None),
                (everyone, "GET", f"/ui/api/teams/{ml}", None),
                (admin, "GET", f"/ui/api/teams/{other}", None),
                (admin, "GET", "/ui/api/audit", None),
                (admin, "GET", "/ui/api/overview", None),
                (admin, "GET", "/ui/api/backends", None),
                (admin, "GET", "/ui/api/mcp", None),
                (lead, "GET", "/ui/api/users", None),
                (admin, "POST", "/ui/api/users", {"email": f"new-{role}-{tag}@corp.example"}),
                (admin, "POST", "/ui/api/teams", {"name": f"new-{role}-{tag}"}),
                (admin, "PATCH", f"/ui/api/teams/{ml}", {"rpm": 100}),
                (everyone, "POST", "/ui/api/keys", {"name": f"{role}-own", "team_id": ml}),
                (admin, "POST", "/ui/api/keys", {"name": f"{role}-other", "team_id": other}),
                # Above the team's rpm (100): only an admin sets a key's limits past its team's.
                (admin, "POST", "/ui/api/keys", {"name": f"{role}-fast", "team_id": ml, "rpm": 1000}),
                (lead, "POST", f"/ui/api/teams/{ml}/members", {"user_id": spare}),
                (lead, "DELETE", f"/ui/api/teams/{ml}/members/{spare}", None),
                (admin, "POST", f"/ui/api/teams/{other}/members", {"user_id": spare}),
                (admin, "DELETE", f"/ui/api/teams/{other}/members/{spare}", None),
                (lead, "GET", f"/ui/api/keys/{service_ml}", None),
                (lead, "PATCH", f"/ui/api/keys/{service_ml}", {"name": f"svc-ml-{tag}"}),
                (admin, "GET", f"/ui/api/keys/{service_other}", None),
                (admin, "PATCH", f"/ui/api/keys/{service_other}", {"name": f"svc-other-{tag}"}),
                (everyone, "POST", "/ui/api/chat/completions", {"model": MODEL, "messages": [{"role": "user", "content": "hi"}]}),
            ]
            for may, method, path, body in rows:
                (allowed if may else refused)(page, role, method, path, body)

            # Their own key: made, renamed, revoked.
            own = allowed(page, role, "POST", "/ui/api/keys", {"name": f"{role}-mine", "team_id": ml})
            assert own.get("user_id") in (None, mine["user"]["id"]) and own.get("team_id") == ml, own
            allowed(page, role, "PATCH", f"/ui/api/keys/{own['id']}", {"name": f"{role}-renamed"})
            allowed(page, role, "DELETE", f"/ui/api/keys/{own['id']}")

            # Lists hold only what the role may see.
            teams = {t["id"] for t in allowed(page, role, "GET", "/ui/api/teams")["data"]}
            if admin:
                assert {ml, other} <= teams, teams
            else:
                assert teams == {ml}, teams
            keys = allowed(page, role, "GET", "/ui/api/keys")["data"]
            if role == "member":
                assert keys and all(k.get("user_id") == mine["user"]["id"] for k in keys), keys
            # A member's key is theirs, in their team, whatever the request named.
            made = allowed(page, role, "POST", "/ui/api/keys", {"name": f"{role}-bare"})
            if role == "member":
                assert (made.get("user_id"), made.get("team_id")) == (mine["user"]["id"], ml), made

            # Usage and the request log: a team admin reads their team's, a member only their own.
            scope_rows = [
                (lead, "/ui/api/usage?team=ml"),
                # By the team's id too, as the console's team page names it (issue 53).
                (lead, f"/ui/api/usage?team={ml}"),
                (lead, f"/ui/api/usage.csv?team={ml}"),
                (lead, f"/ui/api/requests?team={ml}"),
                (admin, f"/ui/api/usage?team={other}"),
                (admin, "/ui/api/usage?team=other"),
                (admin, "/ui/api/requests?team=other"),
                (admin, "/ui/api/usage?user=spare@corp.example"),
                (everyone, f"/ui/api/usage?user={urllib.parse.quote(who.email)}"),
            ]
            for may, path in scope_rows:
                (allowed if may else refused)(page, role, "GET", path)
            rows_seen = wait_for_own_request(page, who.email)
            if role == "member":
                assert {r["user"] for r in rows_seen} == {who.email}, rows_seen
            elif role == "team_admin":
                assert {r["team"] for r in rows_seen} == {"ml"}, rows_seen

            # A write without the console's header is refused whoever asks (CSRF guard).
            status, answer = api(page, "POST", "/ui/api/keys", {"team_id": ml}, csrf=False)
            assert status == 403 and answer["error"]["code"] == "csrf", (status, answer)

            # Page-level, loosely: the nav offers the pages the role may use (where the console marks them).
            for name, may in (("audit", admin), ("overview", admin), ("users", lead), ("keys", True)):
                nav = page.locator(f"[data-testid=nav-{name}]")
                if nav.count():
                    if may:
                        expect(nav).to_be_visible()
                    else:
                        expect(nav).to_be_hidden()
            assert not errors, f"errors in the browser: {errors}"
        finally:
            context.close()


def test_signing_out_ends_the_session_on_the_server(browser: Browser, sso: Sso) -> None:
    tag = uuid.uuid4().hex[:6]
    who = Person(f"out-{tag}", f"out-{tag}@corp.example", "Out", ["sw-staff"], ["ml"])
    # Twice: with the page's own button, and as POST /ui/logout with the console's header.
    for how in ("button", "request"):
        context, page, _ = sign_in(browser, sso, who)
        try:
            cookie = session_cookie(context)
            assert me(page)[0] == 200
            if how == "button":
                page.click("[data-testid=logout]")
                page.wait_for_url(sso.url + "/ui/login")
            else:
                # The context's own request client: the browser's cookie jar, the 303 itself readable.
                out = page.request.post(sso.url + "/ui/logout", headers={"x-switchyard-console": "1"}, max_redirects=0)
                assert (out.status, out.headers.get("location")) == (303, "/ui/login"), (out.status, out.headers)
            assert not [c for c in context.cookies() if c["name"] == "sy_console"], context.cookies()
            status, answer = me(page)
            assert status == 401 and answer["error"]["code"] == "console_login_required", (how, status, answer)
            # The old cookie, put back, is dead on the server too.
            context.add_cookies([cookie])
            status, answer = me(page)
            assert status == 401 and answer["error"]["code"] == "console_login_required", (how, status, answer)
        finally:
            context.close()


def test_a_later_sign_in_with_other_groups_changes_the_role(browser: Browser, sso: Sso) -> None:
    tag = uuid.uuid4().hex[:6]
    email = f"jit-{tag}@corp.example"
    steps = [
        (["sw-staff"], ["ml"], "member", [("ml", "member")]),
        (["sw-leads"], ["ml"], "team_admin", [("ml", "team_admin")]),
        # No mapped group: the default role; no teams named: no memberships.
        (["elsewhere"], [], "viewer", []),
        (["sw-staff"], ["ml", "other"], "member", [("ml", "member"), ("other", "member")]),
    ]
    user_id = None
    for groups, teams, role, memberships in steps:
        context, page, _ = sign_in(browser, sso, Person(f"jit-{tag}", email, "Jit", groups, teams))
        try:
            status, mine = me(page)
            assert status == 200 and mine["role"] == role, (groups, mine)
            assert sorted((t["name"], t["role"]) for t in mine["teams"]) == memberships, (groups, mine)
            # One user throughout, found again by email.
            user_id = user_id or mine["user"]["id"]
            assert mine["user"]["id"] == user_id, mine
            # And the role table follows: users list for a team admin only, playground not for a viewer.
            (allowed if role == "team_admin" else refused)(page, role, "GET", "/ui/api/users")
            chat = {"model": MODEL, "messages": [{"role": "user", "content": "hi"}]}
            (refused if role == "viewer" else allowed)(page, role, "POST", "/ui/api/chat/completions", chat)
            (allowed if role == "viewer" else refused)(page, role, "GET", "/ui/api/overview")
            if role == "viewer":
                # Reads, and nothing that writes.
                for path in ("/ui/api/backends", "/ui/api/mcp", "/ui/api/keys", "/ui/api/teams", "/ui/api/usage"):
                    allowed(page, role, "GET", path)
                refused(page, role, "GET", "/ui/api/audit")
                refused(page, role, "POST", "/ui/api/keys", {"team_id": sso.ml["id"]})
                refused(page, role, "POST", f"/ui/api/teams/{sso.ml['id']}/members", {"user_id": sso.spare["id"]})
                shot(page, "sso-viewer")
        finally:
            context.close()
    status, _, user = sso.stack.call(f"/admin/users/{user_id}", key=MASTER)
    assert status == 200 and user["role"] == "member", user


def test_revoking_a_users_sessions_signs_their_browser_out(browser: Browser, sso: Sso) -> None:
    tag = uuid.uuid4().hex[:6]
    who = Person(f"rev-{tag}", f"rev-{tag}@corp.example", "Rev", ["sw-staff"], ["ml"])
    context, page, _ = sign_in(browser, sso, who)
    try:
        status, mine = me(page)
        assert status == 200, mine
        status, _, answer = patch(sso, f"/admin/users/{mine['user']['id']}", {"revoke_sessions": True})
        assert status == 200, answer
        status, answer = me(page)
        assert status == 401, (status, answer)
        # The page itself is signed out: /ui sends it back to the login page.
        page.goto(sso.url + "/ui")
        page.wait_for_url(sso.url + "/ui/login")
    finally:
        context.close()


def patch(sso: Sso, path: str, body: dict) -> tuple[int, dict, dict]:
    """PATCH with the master key (Stack.call sends GET or POST only)."""
    req = urllib.request.Request(sso.stack.url + path, data=json.dumps(body).encode(), method="PATCH")
    req.add_header("authorization", f"Bearer {MASTER}")
    req.add_header("content-type", "application/json")
    try:
        with urllib.request.urlopen(req, timeout=10) as resp:
            return resp.status, dict(resp.headers), json.loads(resp.read() or b"{}")
    except urllib.error.HTTPError as e:
        return e.code, dict(e.headers), json.loads(e.read() or b"{}")


def test_a_provider_on_another_site_signs_the_browser_in_too(browser: Browser, tmp_path: Path) -> None:
    """A company's provider is usually on another site than its gateway. Here the browser reaches
    the gateway as `localhost` while Hydra is at 127.0.0.1 (two sites to the browser), and the step
    back to the gateway starts on the provider's page, as it does after a person signs in on a real
    login form: the callback's answer must still leave the browser signed in on /ui (the session
    cookie is SameSite=Strict, which a browser withholds from a navigation another site started)."""
    with sso_gateway(tmp_path, "localhost") as cross:
        tag = uuid.uuid4().hex[:6]
        context, page, errors = sign_in(browser, cross, Person(f"far-{tag}", f"far-{tag}@corp.example", "Far", ["sw-staff"], ["ml"]))
        try:
            status, mine = me(page)
            assert status == 200 and mine["role"] == "member", (status, mine)
            assert not errors, f"errors in the browser: {errors}"
        finally:
            context.close()
