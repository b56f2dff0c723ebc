"""Screenshots of the console for the README (docs/console/*.png), taken from the real binary: a
database seeded with 400,000 generated usage records (enough for the generator to cover all 30 days) ending now (`switchyard seed-usage`), three
mock backends, a few keys with budgets, and live traffic while the pictures are taken.

    .venv-console/bin/python tests/console/screenshots.py   # after `cargo build`
"""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path

from playwright.sync_api import sync_playwright

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "conformance"))
from procs import REPO_ROOT, start, switchyard_bin  # noqa: E402

MASTER = "console-screenshots-master-key"
OUT = REPO_ROOT / "docs" / "console"


def post(url: str, body: dict, key: str = MASTER) -> int:
    req = urllib.request.Request(url, data=json.dumps(body).encode(), method="POST")
    req.add_header("authorization", f"Bearer {key}")
    req.add_header("content-type", "application/json")
    try:
        with urllib.request.urlopen(req, timeout=30) as resp:
            resp.read()
            return resp.status
    except urllib.error.HTTPError as e:
        return e.code


def main() -> None:
    work = Path(tempfile.mkdtemp(prefix="switchyard-shots-"))
    db = f"sqlite://{work}/switchyard.db"
    end_ms = (int(time.time() * 1000) // 3_600_000 + 1) * 3_600_000
    subprocess.run(
        [str(switchyard_bin()), "seed-usage", "--storage", db, "--records", "400000", "--end-ms", str(end_ms)],
        check=True,
        stdout=subprocess.DEVNULL,
    )
    mocks = [
        start(f"mock{i}", ["mock", "--listen", "127.0.0.1:0", "--models", models, "--chunk-delay-ms", str(delay)], work)
        for i, (models, delay) in enumerate([("llama-3.1-8b,qwen2.5-7b", 30), ("llama-3.1-8b", 45), ("llama-3.1-70b", 80)])
    ]
    config = work / "gateway.yaml"
    config.write_text(
        "listen: 127.0.0.1:0\n"
        f"storage: {{url: '{db}', usage_journal_dir: '{work}/usage'}}\n"
        f"auth: {{master_key: {MASTER}}}\n"
        "routing: {strategy: cache-aware}\n"
        "aliases: {fast: llama-3.1-8b, smart: llama-3.1-70b}\n"
        "prices: {llama-3.1-70b: {input_per_million: 0.9, output_per_million: 0.9}, "
        "llama-3.1-8b: {input_per_million: 0.1, output_per_million: 0.1}}\n"
        f"mcp: {{servers: [{{name: files, command: ['{sys.executable}', '{Path(__file__).with_name('mock_mcp.py')}']}}]}}\n"
        "backends:\n"
        + "".join(f"  - {{name: gpu-{i + 1}, url: '{m.url}', max_concurrency: {8 * (i + 1)}}}\n" for i, m in enumerate(mocks))
    )
    gateway = start("gateway", ["serve", "--config", str(config)], work)
    base = gateway.url
    keys = []
    for name, budget, team in [("ci-bot", 50.0, "platform"), ("search-svc", 20.0, "search"), ("notebook", 5.0, "research")]:
        req = urllib.request.Request(
            base + "/admin/keys",
            data=json.dumps({"name": name, "budget_usd": budget, "budget_period": "monthly", "metadata": {"team": team}}).encode(),
            method="POST",
        )
        req.add_header("authorization", f"Bearer {MASTER}")
        req.add_header("content-type", "application/json")
        with urllib.request.urlopen(req) as resp:
            keys.append(json.loads(resp.read())["key"])

    stop = threading.Event()

    def traffic() -> None:
        rnd = random.Random(7)
        while not stop.is_set():
            model = rnd.choice(["fast", "llama-3.1-8b", "qwen2.5-7b", "smart", "fast", "no-such-model" if rnd.random() < 0.03 else "fast"])
            body = {"model": model, "stream": rnd.random() < 0.5, "messages": [{"role": "system", "content": "You are terse."}, {"role": "user", "content": "Question %d" % rnd.randrange(50)}]}
            post(base + "/v1/chat/completions", body, rnd.choice(keys))

    def tool_call(tool: str, arguments: dict) -> None:
        version = "2026-07-28"
        meta = {"io.modelcontextprotocol/protocolVersion": version, "io.modelcontextprotocol/clientCapabilities": {}}
        call = {"name": f"files__{tool}", "arguments": arguments, "_meta": meta}
        req = urllib.request.Request(
            base + "/mcp", data=json.dumps({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": call}).encode()
        )
        for name, value in [("authorization", f"Bearer {MASTER}"), ("content-type", "application/json"),
                            ("accept", "application/json, text/event-stream"), ("mcp-protocol-version", version)]:
            req.add_header(name, value)
        with urllib.request.urlopen(req, timeout=10) as resp:
            resp.read()

    for i in range(12):
        tool_call("read_file" if i % 3 else "list_dir", {"path": f"src/module_{i}.rs"})

    workers = [threading.Thread(target=traffic, daemon=True) for _ in range(4)]
    for w in workers:
        w.start()
    OUT.mkdir(parents=True, exist_ok=True)
    try:
        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path=os.environ.get("SWITCHYARD_TEST_CHROMIUM", "/usr/bin/chromium"), args=["--no-sandbox"])
            page = browser.new_page(viewport={"width": 1440, "height": 900})
            page.goto(base + "/ui")
            page.fill("input[name=key]", MASTER)
            page.click("button[type=submit]")
            page.wait_for_selector("[data-testid=logout]")
            time.sleep(40)  # two dozen samples of live traffic for the charts
            page.screenshot(path=str(OUT / "overview.png"))
            page.goto(base + "/ui#/usage?range=7d&by=model")
            page.wait_for_selector("[data-testid=usage-chart] canvas")
            time.sleep(1)
            page.screenshot(path=str(OUT / "usage.png"))
            page.goto(base + "/ui#/requests")
            page.wait_for_selector("[data-testid=requests-table] tr[data-request-id]")
            page.screenshot(path=str(OUT / "requests.png"))
            page.goto(base + "/ui#/keys")
            page.wait_for_selector("[data-testid=keys-table] tr[data-key-id]")
            page.screenshot(path=str(OUT / "keys.png"))
            page.goto(base + "/ui#/backends")
            page.wait_for_selector("[data-testid=backends-list] [data-backend]")
            page.screenshot(path=str(OUT / "backends.png"))
            page.goto(base + "/ui#/mcp")
            page.wait_for_selector("[data-testid=mcp-calls] tr[data-request-id]")
            page.screenshot(path=str(OUT / "mcp.png"))
            page.goto(base + "/ui#/playground")
            page.select_option("select[name=model]", "llama-3.1-70b")
            page.fill("textarea[name=prompt]", "Why route prompts to the backend that holds their prefix?")
            page.click("[data-testid=send]")
            page.wait_for_selector("[data-testid=answer-stats]")
            time.sleep(1.5)
            page.screenshot(path=str(OUT / "playground.png"))
            browser.close()
    finally:
        stop.set()
        gateway.stop()
        for m in mocks:
            m.stop()
    print(f"screenshots in {OUT}")


if __name__ == "__main__":
    main()
