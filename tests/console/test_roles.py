"""Teams, users, roles and the audit log in the console (Debian's chromium through Playwright).

Signed in with the master key: what the admin API makes (a team with limits and a budget, users,
a membership, a key owned by both) shows on the Teams, Users and Keys pages; a member added on the
team page is added on the server; the audit log lists every one of those changes, who made them and
the record before and after, and pages back. The role-aware shell is checked by answering
/ui/api/me in the browser as a member would be answered (the server's own filtering has its tests
in Rust): the pages a member cannot use are gone from the nav and the router, their keys form offers
only their teams, and a 403 renders as a clean error. Single sign-on is not configured here: its
link on the login page stays hidden.
"""

from __future__ import annotations

import json
import re
import uuid

from playwright.sync_api import Browser, Page, Route, expect

from conftest import MODEL, Stack, shot


def created(stack: Stack, path: str, body: dict) -> dict:
    """POST to the admin API with the master key; the created record."""
    status, _, record = stack.call(path, body)
    assert status == 201, (path, status, record)
    return record


def test_teams_users_keys_and_the_audit_log_show_what_the_admin_api_made(page: Page, stack: Stack) -> None:
    tag = uuid.uuid4().hex[:6]
    team = created(stack, "/admin/teams", {
        "name": f"research-{tag}", "models": [MODEL], "rpm": 120, "budget_usd": 50, "budget_period": "monthly",
    })
    ada = created(stack, "/admin/users", {"email": f"ada-{tag}@example.com", "name": "Ada Lovelace", "role": "team_admin"})
    bob = created(stack, "/admin/users", {"email": f"bob-{tag}@example.com", "role": "member"})
    created(stack, f"/admin/teams/{team['id']}/members", {"user_id": ada["id"], "role": "team_admin"})
    key = created(stack, "/admin/keys", {"name": f"bot-{tag}", "team_id": team["id"], "user_id": ada["id"]})

    # The master key is an admin: every page, and the sidebar says who is signed in.
    expect(page.locator("[data-testid=whoami-name]")).to_have_text("Master key")
    expect(page.locator("[data-testid=whoami-role]")).to_have_text("Admin")
    for name in ["overview", "keys", "teams", "users", "audit", "playground"]:
        expect(page.locator(f"[data-testid=nav-{name}]")).to_be_visible()

    # Teams: the list, then the team's own page.
    page.click("[data-testid=nav-teams]")
    row = page.locator(f"[data-testid=teams-table] tr[data-team-id='{team['id']}']")
    expect(row).to_contain_text(f"research-{tag}")
    expect(row).to_contain_text("120 req/min")
    row.locator("a").click()
    expect(page.locator("[data-testid=team-detail]")).to_have_attribute("data-team-id", team["id"])
    expect(page.locator("[data-testid=team-limits]")).to_contain_text("120")
    expect(page.locator("[data-testid=team-limits]")).to_contain_text(MODEL)
    expect(page.locator("[data-testid=team-spend]")).to_contain_text("$50.00")
    expect(page.locator("[data-testid=team-spend]")).to_contain_text("monthly")
    members = page.locator("[data-testid=team-members]")
    expect(members.locator(f"tr[data-user-id='{ada['id']}']")).to_contain_text(ada["email"])
    expect(members.locator(f"tr[data-user-id='{ada['id']}'] [data-testid=member-role]")).to_have_text("Team admin")
    expect(members.locator(f"tr[data-user-id='{bob['id']}']")).to_have_count(0)
    expect(page.locator(f"[data-testid=team-keys] tr[data-key-id='{key['id']}']")).to_contain_text(f"bot-{tag}")

    # Add Bob on the page: the server has him as a member.
    form = page.locator("form[data-testid=team-member-add]")
    form.locator("select[name=user_id]").select_option(bob["id"])
    form.locator("button[type=submit]").click()
    expect(members.locator(f"tr[data-user-id='{bob['id']}'] [data-testid=member-role]")).to_have_text("Member")
    status, _, detail = stack.call(f"/admin/teams/{team['id']}")
    assert status == 200, detail
    assert {"user_id": bob["id"], "role": "member"} in [{k: m[k] for k in ("user_id", "role")} for m in detail["members"]], detail
    shot(page, "team")

    # Users: both, with their names and roles.
    page.click("[data-testid=nav-users]")
    ada_row = page.locator(f"[data-testid=users-table] tr[data-user-id='{ada['id']}']")
    expect(ada_row).to_contain_text(ada["email"])
    expect(ada_row).to_contain_text("Ada Lovelace")
    expect(ada_row.locator("[data-testid=user-role]")).to_have_text("Team admin")
    expect(page.locator(f"[data-testid=users-table] tr[data-user-id='{bob['id']}'] [data-testid=user-role]")).to_have_text("Member")
    shot(page, "users")

    # Keys: the key's owner and team by email and name.
    page.click("[data-testid=nav-keys]")
    owner = page.locator(f"[data-testid=keys-table] tr[data-key-id='{key['id']}'] [data-testid=key-owner-cell]")
    expect(owner).to_contain_text(ada["email"])
    expect(owner).to_contain_text(f"research-{tag}")

    # The audit log: each change, newest first, the console's own marked as the console's.
    page.click("[data-testid=nav-audit]")
    log = page.locator("[data-testid=audit-table]")
    for action, target in [("team.create", team["id"]), ("user.create", ada["id"]), ("user.create", bob["id"]),
                           ("team.member.put", team["id"]), ("key.create", key["id"])]:
        expect(log.locator(f"tr[data-action='{action}']", has_text=target).first).to_be_visible()
    newest = log.locator("tr[data-seq]").first
    expect(newest).to_have_attribute("data-action", "team.member.put")
    expect(newest).to_contain_text(team["id"])
    expect(newest).to_contain_text(re.compile("console"))
    # A row opens the record before and after.
    log.locator("tr[data-action='team.create']", has_text=team["id"]).click()
    diff = page.locator("[data-testid=audit-diff]")
    expect(diff.locator("tr[data-field=name]")).to_contain_text(f"research-{tag}")
    expect(diff.locator("tr[data-field=rpm]")).to_contain_text("120")
    newest.click()
    expect(page.locator("[data-testid=audit-diff] tr[data-field=user_id]")).to_contain_text(bob["id"])
    shot(page, "audit")


def test_the_audit_log_pages_back_to_its_start(page: Page, stack: Stack) -> None:
    tag = uuid.uuid4().hex[:6]
    first = created(stack, "/admin/users", {"email": f"first-{tag}@example.com"})
    for i in range(55):  # more than one page of 50
        created(stack, "/admin/users", {"email": f"filler-{i}-{tag}@example.com"})
    page.goto(stack.url + "/ui#/audit")
    rows = page.locator("[data-testid=audit-table] tr[data-seq]")
    expect(rows).to_have_count(50)
    expect(rows.first).to_have_attribute("data-action", "user.create")
    older = page.locator("[data-testid=audit-next]")
    # Page back until the first user's entry shows (it is more than 50 entries old).
    target = page.locator("[data-testid=audit-table] tr[data-action='user.create']", has_text=first["id"])
    for _ in range(20):
        if target.count():
            break
        expect(older).to_be_visible()
        before = rows.count()
        older.click()
        expect(rows).not_to_have_count(before)
    expect(target).to_have_count(1)
    assert rows.count() > 50
    seqs = rows.evaluate_all("rs => rs.map(r => Number(r.dataset.seq))")
    assert seqs == sorted(seqs, reverse=True) and len(set(seqs)) == len(seqs), seqs


def test_a_member_sees_only_what_the_role_can_use_and_a_refusal_renders_cleanly(page: Page, stack: Stack) -> None:
    tag = uuid.uuid4().hex[:6]
    mine = created(stack, "/admin/teams", {"name": f"mine-{tag}"})
    created(stack, "/admin/teams", {"name": f"theirs-{tag}"})
    me = {
        "role": "member", "master": False,
        "user": {"id": f"u_{tag}", "email": f"carol-{tag}@example.com", "name": "Carol"},
        "teams": [{"id": mine["id"], "name": mine["name"], "role": "member"}],
    }

    def as_member(route: Route) -> None:
        route.fulfill(status=200, content_type="application/json", body=json.dumps(me))

    page.route("**/ui/api/me", as_member)
    page.goto(stack.url + "/ui/?member#/overview")
    # Overview is not a member's page: the app lands on Usage instead.
    expect(page).to_have_url(re.compile(r"#/usage"))
    expect(page.locator("[data-testid=whoami-name]")).to_have_text(me["user"]["email"])
    expect(page.locator("[data-testid=whoami-role]")).to_have_text("Member")
    for name in ["usage", "requests", "keys", "teams", "playground"]:
        expect(page.locator(f"[data-testid=nav-{name}]")).to_be_visible()
    for name in ["overview", "users", "audit", "backends", "mcp"]:
        expect(page.locator(f"[data-testid=nav-{name}]")).to_be_hidden()
    page.goto(stack.url + "/ui/?member#/audit")
    expect(page).to_have_url(re.compile(r"#/usage"))

    # Keys: a team picker of their own teams only, and no owner picker (the key is theirs).
    page.click("[data-testid=nav-keys]")
    form = page.locator("form[data-testid=key-create]")
    options = form.locator("select[name=team_id] option")
    expect(options).to_have_count(1)
    expect(options.first).to_have_text(mine["name"])
    expect(page.locator("[data-testid=key-owner]")).to_be_hidden()
    expect(form).to_contain_text("The key will be yours.")

    # Teams: no create form, and a refusal from the server is an error message, not a broken page.
    def refuse(route: Route) -> None:
        body = {"error": {"message": "the `member` role may not GET /ui/api/teams", "type": "invalid_request_error", "code": "forbidden"}}
        route.fulfill(status=403, content_type="application/json", body=json.dumps(body))

    page.route("**/ui/api/teams", refuse)
    page.click("[data-testid=nav-teams]")
    expect(page.locator("[data-testid=error-banner]")).to_contain_text("the `member` role may not GET /ui/api/teams")
    expect(page.locator("[data-testid=teams-table]")).to_contain_text("Could not load teams")
    expect(page.locator("form[data-testid=team-create]")).to_have_count(0)
    shot(page, "member-refused")


def test_single_sign_on_stays_hidden_when_it_is_not_configured(browser: Browser, stack: Stack) -> None:
    context = browser.new_context()
    page = context.new_page()
    page.goto(stack.url + "/ui/login")
    expect(page.locator("input[name=key]")).to_be_visible()
    expect(page.locator("[data-testid=sso-login]")).to_have_count(1)
    expect(page.locator("[data-testid=sso-login]")).to_be_hidden()
    context.close()
