"""Fixtures for the console's browser tests: a mock backend and a gateway with a master key (the real
`switchyard` binary, started as in tests/conformance), and Debian's chromium driven by Playwright for
Python through `executable_path` ($SWITCHYARD_TEST_CHROMIUM, else /usr/bin/chromium).

Screenshots of every page land in target/console-screenshots/ (the README shows them).
"""

from __future__ import annotations

import json
import os
import sys
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

import pytest
from playwright.sync_api import Browser, Page, sync_playwright

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "conformance"))
from procs import REPO_ROOT, Proc, start  # noqa: E402

MASTER = "console-browser-master-key"
MODEL = "m"
SHOTS = REPO_ROOT / "target" / "console-screenshots"


@dataclass
class Stack:
    mock: Proc
    gateway: Proc

    @property
    def url(self) -> str:
        return self.gateway.url

    def call(
        self, path: str, body: dict | None = None, key: str = MASTER, headers: dict | None = None
    ) -> tuple[int, dict, dict]:
        """A request to the gateway as a client would send it: (status, headers, JSON body or {})."""
        data = json.dumps(body).encode() if body is not None else None
        req = urllib.request.Request(self.url + path, data=data, method="POST" if data else "GET")
        req.add_header("authorization", f"Bearer {key}")
        for name, value in (headers or {}).items():
            req.add_header(name, value)
        if data:
            req.add_header("content-type", "application/json")
        try:
            with urllib.request.urlopen(req, timeout=10) as resp:
                return resp.status, dict(resp.headers), json.loads(resp.read() or b"{}")
        except urllib.error.HTTPError as e:
            return e.code, dict(e.headers), json.loads(e.read() or b"{}")

    def chat(self, model: str = MODEL, key: str = MASTER) -> tuple[int, str]:
        """One chat request; its status and request id."""
        status, headers, _ = self.call(
            "/v1/chat/completions", {"model": model, "messages": [{"role": "user", "content": "hello"}]}, key
        )
        return status, headers.get("x-request-id", "")


@pytest.fixture(scope="session")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    logs = tmp_path_factory.mktemp("console")
    mock = start("mock", ["mock", "--listen", "127.0.0.1:0", "--models", MODEL, "--chunk-delay-ms", "40"], logs)
    data = logs / "data"
    data.mkdir()
    config = logs / "gateway.yaml"
    # A calibration as `switchyard cache calibrate --write` leaves it (its figures are the cache
    # page's to show; tests/semantic checks the command itself).
    calibration = logs / "calibration.json"
    calibration.write_text(json.dumps({
        "pairs": 482, "same": 214, "target": 0.01, "configured_threshold": 0.8, "calibrated_ms": 1796000000000,
        "rows": [
            {"threshold": 0.75, "false_hit_rate": 0.0112, "hit_rate": 0.47, "plain_false_hit_rate": 0.74, "plain_hit_rate": 0.97},
            {"threshold": 0.8, "false_hit_rate": 0.0056, "hit_rate": 0.462, "plain_false_hit_rate": 0.715, "plain_hit_rate": 0.93},
        ],
        "recommended": {"threshold": 0.8, "false_hit_rate": 0.0056, "hit_rate": 0.462},
    }))
    config.write_text(
        "listen: 127.0.0.1:0\n"
        f"storage: {{url: 'sqlite://{data}/switchyard.db', usage_journal_dir: '{data}/usage'}}\n"
        f"auth: {{master_key: {MASTER}}}\n"
        "aliases: {fast: m}\n"
        # Cache-aware, so the backends page has cached blocks to show (the gateway's estimate).
        "routing: {strategy: cache-aware}\n"
        f"prices: {{{MODEL}: {{input_per_million: 3.0, output_per_million: 15.0}}}}\n"
        f"backends:\n  - {{name: b0, url: '{mock.url}'}}\n"
        # A guard no request gets unless its key or team names it (the keys page's guardrails field).
        "guardrails: {blocker: {type: keywords, keywords: [nightingale], action: block}}\n"
        # A stdio MCP server, so the MCP page has servers, tools and calls to show.
        f"mcp: {{servers: [{{name: files, command: ['{sys.executable}', '{Path(__file__).with_name('mock_mcp.py')}']}}]}}\n"
        # The cache only for requests that ask for it (the other tests count their requests), with
        # its semantic layer on the mock's embeddings, so the cache page has both layers to show.
        f"cache: {{opt_in: true, semantic: {{embedding_model: {MODEL}, threshold: 0.8, threshold_header: true, calibration: '{calibration}'}}}}\n"
        # An experiment on a name only its own test asks for (the others count their requests).
        f"experiments: {{trial: {{model: trial, unit: user, metrics: [thumbs], variants: {{a: {{model: {MODEL}}}, b: {{model: fast}}}}}}}}\n"
    )
    gateway = start("gateway", ["serve", "--config", str(config)], logs)
    yield Stack(mock, gateway)
    gateway.stop()
    mock.stop()


@pytest.fixture(scope="session")
def browser() -> Iterator[Browser]:
    executable = os.environ.get("SWITCHYARD_TEST_CHROMIUM", "/usr/bin/chromium")
    if not Path(executable).is_file():
        pytest.fail(f"no chromium at {executable}: run scripts/chromium")
    with sync_playwright() as p:
        # --no-sandbox: CI runs as root, where chromium's sandbox will not start.
        b = p.chromium.launch(executable_path=executable, args=["--no-sandbox"])
        yield b
        b.close()


def log_in(page: Page, stack: Stack) -> None:
    page.goto(stack.url + "/ui")
    page.fill("input[name=key]", MASTER)
    page.click("button[type=submit]")
    page.wait_for_selector("[data-testid=logout]")


@pytest.fixture()
def page(browser: Browser, stack: Stack) -> Iterator[Page]:
    """A logged-in page at 1280 x 800 whose JavaScript errors fail the test."""
    context = browser.new_context(viewport={"width": 1280, "height": 800})
    page = context.new_page()
    errors: list[str] = []
    page.on("pageerror", lambda e: errors.append(str(e)))
    # A refused request (the 404 the tests provoke, a 401 after logging out) is the network's, not the app's.
    page.on(
        "console",
        lambda m: errors.append(m.text)
        if m.type == "error" and not m.text.startswith("Failed to load resource")
        else None,
    )
    log_in(page, stack)
    yield page
    context.close()
    assert not errors, f"errors in the browser: {errors}"


def shot(page: Page, name: str) -> None:
    SHOTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(SHOTS / f"{name}.png"))
