"""The console in a real browser (Debian's chromium through Playwright): log in, watch the overview
move with traffic, see the usage chart draw, create a key in the UI and use it, revoke it and see it
refused, find a request by id, filter the request log, stream in the playground, log out and see no
data. Each page is screenshotted into target/console-screenshots/.
"""

from __future__ import annotations

import re
import time

from playwright.sync_api import Browser, Page, expect

from conftest import MODEL, Stack, log_in, shot

REFRESH_S = 2.0


def api(page: Page, path: str) -> tuple[int, dict]:
    """A console API call with the page's own session cookie."""
    resp = page.request.get(page.url.split("/ui")[0] + "/ui/api" + path)
    return resp.status, (resp.json() if resp.headers.get("content-type", "").startswith("application/json") else {})


def wait_for_log(page: Page, query: str, count: int = 1, timeout_s: float = 20) -> list[dict]:
    """Rows of the request log for `query` once there are `count` (the usage writer batches)."""
    deadline = time.monotonic() + timeout_s
    while True:
        status, body = api(page, "/requests?" + query)
        assert status == 200, body
        if len(body["data"]) >= count:
            return body["data"]
        assert time.monotonic() < deadline, f"request log never showed {count} rows for {query}"
        time.sleep(0.1)


def canvas_has_ink(page: Page, selector: str) -> bool:
    """Whether a canvas under `selector` has any non-transparent pixel (a chart that drew)."""
    return page.eval_on_selector(
        selector,
        """el => [...el.querySelectorAll('canvas')].some(c => {
            const d = c.getContext('2d').getImageData(0, 0, c.width, c.height).data;
            for (let i = 3; i < d.length; i += 4) if (d[i] !== 0) return true;
            return false;
        })""",
    )


def test_logged_out_browsers_see_no_data(browser: Browser, stack: Stack) -> None:
    context = browser.new_context()
    page = context.new_page()
    page.goto(stack.url + "/ui#/requests")
    expect(page).to_have_url(re.compile(r"/ui/login"))
    for path in ["/overview", "/requests", "/keys", "/usage?range=24h", "/backends", "/mcp"]:
        status, body = api(page, path)
        assert status == 401 and "data" not in body and "backends" not in body, (path, status, body)
    page.fill("input[name=key]", "a guess")
    page.click("button[type=submit]")
    expect(page.locator("[data-testid=login-error]")).to_be_visible()
    shot(page, "login")
    context.close()


def test_the_overview_moves_with_traffic_and_refreshes_with_one_request(page: Page, stack: Stack) -> None:
    expect(page.locator("[data-testid=backends-table] tr[data-backend=b0]")).to_be_visible()
    calls: list[str] = []
    page.on("request", lambda r: calls.append(r.url) if "/ui/api/" in r.url else None)
    sent = [stack.chat() for _ in range(40)]
    assert all(status == 200 for status, _ in sent)
    # The sampler reads every 2 s and the page polls every 2 s: the tiles move within a few refreshes.
    # (The tiles' labels and units have no digits: a non-zero digit is a non-zero figure.)
    expect(page.locator("[data-testid=stat-rps]")).to_contain_text(re.compile(r"[1-9]"), timeout=15_000)
    expect(page.locator("[data-testid=stat-requests-today]")).to_contain_text(re.compile(r"[1-9]"), timeout=20_000)
    assert canvas_has_ink(page, "[data-testid=chart-rps]")
    # Guardrails are configured here (conftest): their verdicts chart is shown.
    expect(page.locator("[data-testid=chart-guardrails]")).to_be_visible()
    # At most 3 requests per refresh (here: exactly the one overview call each time).
    calls.clear()
    page.wait_for_timeout(3 * REFRESH_S * 1000)
    refreshes = [u for u in calls if "/ui/api/overview" in u]
    assert 2 <= len(refreshes) <= 4 and len(calls) == len(refreshes), calls
    shot(page, "overview")


def test_the_usage_chart_draws(page: Page, stack: Stack) -> None:
    assert stack.chat()[0] == 200
    wait_for_log(page, "model=" + MODEL)
    page.goto(stack.url + "/ui#/usage")
    page.click("button[data-range='7d']")
    page.select_option("select[name=by]", "model")
    expect(page.locator("[data-testid=usage-table]")).to_contain_text(MODEL)
    page.wait_for_function(
        "() => [...document.querySelectorAll('[data-testid=usage-chart] canvas')].length > 0"
    )
    assert canvas_has_ink(page, "[data-testid=usage-chart]")
    href = page.get_attribute("a[data-testid=usage-csv]", "href")
    assert href and "usage.csv" in href
    csv = page.request.get(stack.url + href if href.startswith("/") else href)
    assert csv.status == 200 and csv.text().startswith("group,label,requests"), csv.text()
    shot(page, "usage")


def test_a_key_created_in_the_ui_works_until_revoked_there(page: Page, stack: Stack) -> None:
    page.goto(stack.url + "/ui#/keys")
    form = page.locator("form[data-testid=key-create]")
    form.locator("input[name=name]").fill("made-in-the-browser")
    form.locator("input[name=models]").fill(MODEL)
    form.locator("input[name=rpm]").fill("600")
    form.locator("button[type=submit]").click()
    secret = page.locator("[data-testid=key-secret]")
    expect(secret).to_contain_text("sy-")
    key = next(w for w in secret.inner_text().split() if w.startswith("sy-"))
    assert stack.chat(key=key)[0] == 200
    assert stack.chat(model="fast", key=key)[0] == 200
    shot(page, "keys")
    row = page.locator("[data-testid=keys-table] tr", has_text="made-in-the-browser")
    expect(row.locator("[data-testid=key-status]")).to_contain_text("active")
    row.locator("button[data-action=revoke]").click()
    row.locator("button[data-action=revoke]").click()  # the second click confirms
    expect(row.locator("[data-testid=key-status]")).to_contain_text("revoked")
    assert stack.chat(key=key)[0] == 401


def test_a_key_created_with_guardrails_gets_them(page: Page, stack: Stack) -> None:
    page.goto(stack.url + "/ui#/keys")
    form = page.locator("form[data-testid=key-create]")
    form.locator("input[name=name]").fill("guarded-in-the-browser")
    form.locator("input[name=guardrails]").fill("blocker")
    form.locator("button[type=submit]").click()
    secret = page.locator("[data-testid=key-secret]")
    expect(secret).to_contain_text("sy-")
    key = next(w for w in secret.inner_text().split() if w.startswith("sy-"))
    ask = {"model": MODEL, "messages": [{"role": "user", "content": "about nightingale"}]}
    status, _, body = stack.call("/v1/chat/completions", ask, key)
    assert (status, body["error"]["code"]) == (400, "content_blocked"), body
    # Another key (the master key here) does not get the key's guard.
    assert stack.call("/v1/chat/completions", ask)[0] == 200


def test_find_a_request_by_id_and_filter_the_log(page: Page, stack: Stack) -> None:
    _, wanted = stack.chat()
    status, failed = stack.chat(model="no-such-model")
    assert status == 404
    wait_for_log(page, "id=" + wanted)
    wait_for_log(page, "id=" + failed)
    page.goto(stack.url + "/ui#/requests")
    filters = page.locator("form[data-testid=request-filters]")
    filters.locator("input[name=id]").fill(wanted)
    filters.locator("button[type=submit]").click()
    rows = page.locator("[data-testid=requests-table] tbody tr[data-request-id]")
    expect(rows).to_have_count(1)
    expect(rows.first).to_have_attribute("data-request-id", wanted)
    rows.first.click()
    expect(page.locator("[data-testid=request-detail]")).to_contain_text(wanted)
    shot(page, "request-detail")

    page.goto(stack.url + "/ui#/requests")
    filters.locator("input[name=id]").fill("")
    filters.locator("select[name=status]").select_option("error")
    filters.locator("button[type=submit]").click()
    expect(rows.first).to_be_visible()
    ids = rows.evaluate_all("rs => rs.map(r => r.dataset.requestId)")
    assert failed in ids and wanted not in ids, ids
    expect(page.locator("[data-testid=requests-table]")).to_contain_text("404")
    assert "status=error" in page.url
    shot(page, "requests")


def test_the_playground_streams(page: Page, stack: Stack) -> None:
    page.goto(stack.url + "/ui#/playground")
    page.select_option("select[name=model]", MODEL)
    page.fill("textarea[name=prompt]", "Say something")
    page.click("[data-testid=send]")
    answer = page.locator("[data-testid=answer]")
    # The mock sends a chunk every 40 ms: the first words show before the last have arrived.
    expect(answer).to_contain_text("tok0")
    partial = answer.inner_text()
    expect(answer).to_contain_text("tok4")
    assert "tok4" not in partial, "the answer appeared all at once, not streamed"
    expect(page.locator("[data-testid=answer-stats]")).to_contain_text("ms")
    shot(page, "playground")


def test_backends_page(page: Page, stack: Stack) -> None:
    page.goto(stack.url + "/ui#/backends")
    card = page.locator("[data-testid=backends-list] [data-backend=b0]")
    expect(card).to_be_visible()
    # Its KV-cache blocks, and where the figure comes from: the estimate (b0 publishes no events).
    expect(card).to_contain_text("Cached blocks")
    expect(card.locator("[data-testid=kv-source]")).to_have_attribute("data-source", "estimate")
    expect(page.locator("[data-testid=models-table]")).to_contain_text("fast")
    shot(page, "backends")


def test_the_mcp_page_shows_servers_tools_and_the_tool_call_log(page: Page, stack: Stack) -> None:
    # One tool call through the gateway's MCP endpoint (the stateless revision: no session needed).
    version = "2026-07-28"
    meta = {"io.modelcontextprotocol/protocolVersion": version, "io.modelcontextprotocol/clientCapabilities": {}}
    call = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "tools/call",
        "params": {"name": "files__read_file", "arguments": {"path": "notes.txt"}, "_meta": meta},
    }
    headers = {"mcp-protocol-version": version, "accept": "application/json, text/event-stream"}
    status, answer_headers, body = stack.call("/mcp", call, headers=headers)
    assert status == 200 and body["result"]["content"][0]["text"] == "contents of notes.txt", (status, body)
    request_id = answer_headers.get("x-request-id") or answer_headers.get("X-Request-Id")
    assert request_id
    wait_for_log(page, "id=" + request_id)

    page.goto(stack.url + "/ui#/mcp")
    server = page.locator("[data-testid=mcp-servers] [data-mcp-server=files]")
    expect(server).to_be_visible()
    expect(server).to_have_attribute("data-health", "up")
    expect(server.locator("tr[data-tool=files__list_dir]")).to_contain_text("List the entries of a directory")
    expect(server.locator("tr[data-tool=files__read_file] td").last).to_have_text("1")
    log_row = page.locator(f"[data-testid=mcp-calls] tr[data-request-id='{request_id}']")
    expect(log_row).to_contain_text("read_file")
    expect(log_row).to_contain_text("200")
    shot(page, "mcp")


def test_the_cache_page_shows_both_layers_and_the_calibration(page: Page, stack: Stack) -> None:
    on = {"x-switchyard-cache": "on"}
    ask = lambda q, extra=None: stack.call(  # noqa: E731
        "/v1/chat/completions", {"model": MODEL, "messages": [{"role": "user", "content": q}]}, headers={**on, **(extra or {})})
    status, headers, _ = ask("What is the Rust borrow checker?")
    assert status == 200 and headers.get("x-switchyard-cache") == "miss", headers
    assert ask("What is the Rust borrow checker?")[1].get("x-switchyard-cache") == "exact-hit"
    deadline = time.monotonic() + 10
    while page.request.get(stack.url + "/ui/api/cache").json()["semantic"]["stores"] < 1:
        assert time.monotonic() < deadline, "the answer was never stored in the semantic layer"
        time.sleep(0.05)
    # The mock's embeddings are no model's: with the threshold lowered, the checks alone decide.
    status, headers, _ = ask("what is the rust borrow checker", {"x-switchyard-cache-threshold": "-1"})
    assert status == 200 and headers.get("x-switchyard-cache", "").startswith("semantic-hit"), headers

    page.goto(stack.url + "/ui#/cache")
    expect(page.locator("[data-testid=exact-hits] .v")).to_have_text("1")
    expect(page.locator("[data-testid=semantic-hits] .v")).to_have_text("1")
    expect(page.locator("[data-testid=semantic-saved] .v")).to_contain_text("$")
    expect(page.locator("[data-testid=semantic-saved] .v")).to_contain_text("tokens")
    expect(page.locator("[data-testid=calibration-false-hits] .v")).to_have_text("0.56%")
    expect(page.locator("[data-testid=calibration-hits] .v")).to_have_text("46.2%")
    shot(page, "cache")


def test_logging_out_ends_the_session(page: Page, stack: Stack) -> None:
    page.click("[data-testid=logout]")
    expect(page).to_have_url(re.compile(r"/ui/login"))
    status, body = api(page, "/overview")
    assert status == 401, body
    page.goto(stack.url + "/ui")
    expect(page).to_have_url(re.compile(r"/ui/login"))


def test_the_experiments_page_shows_variants_results_and_intervals(page: Page, stack: Stack) -> None:
    seen: dict[str, int] = {}
    for user in range(12):
        body = {"model": "trial", "user": f"user-{user}", "messages": [{"role": "user", "content": "hi"}]}
        status, headers, _ = stack.call("/v1/chat/completions", body)
        assert status == 200, headers
        variant = headers["x-switchyard-variant"]
        seen[variant] = seen.get(variant, 0) + 1
        feedback = {"request_id": headers["x-request-id"], "name": "thumbs", "value": 1 if variant == "b" else 0}
        assert stack.call("/v1/feedback", feedback)[0] == 200
    assert set(seen) == {"a", "b"}, seen
    deadline = time.monotonic() + 10
    while True:  # the usage records land a moment after the answers
        results = page.request.get(stack.url + "/ui/api/experiments/trial").json()
        if sum(v["metrics"].get("latency", {}).get("count", 0) for v in results["variants"].values()) >= 12:
            break
        assert time.monotonic() < deadline, results
        time.sleep(0.05)
    page.goto(stack.url + "/ui#/experiments")
    card = page.locator("[data-testid=experiment-trial]")
    expect(card).to_contain_text("model trial")
    expect(card.locator("[data-testid=result-row]").first).to_be_visible()
    expect(card.locator("[data-testid=interval-chart-thumbs] circle")).to_have_count(2)
    expect(card.locator("[data-testid=interval-chart-latency]")).to_be_visible()
    expect(card).to_contain_text("a (control)")
    shot(page, "experiments")
