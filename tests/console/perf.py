"""How long the console takes to become usable in headless chromium over a large database: the
overview's figures and charts, the usage page's chart and table, and finding one request id.
Not a test (no timed assertions): a measurement for BENCHMARKS.md.

    switchyard seed-usage --storage sqlite:///tmp/big/switchyard.db --records 10000000 --end-ms <next hour, unix ms>
    .venv-console/bin/python tests/console/perf.py sqlite:///tmp/big/switchyard.db bench-0005000000

Each figure is the median of 5 loads, from navigation (or the click) until the page shows the data.
"""

from __future__ import annotations

import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

from playwright.sync_api import sync_playwright

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "conformance"))
from procs import start  # noqa: E402

MASTER = "console-perf-master-key"
RUNS = 5


def main(db: str, request_id: str) -> None:
    work = Path(tempfile.mkdtemp(prefix="switchyard-console-perf-"))
    config = work / "gateway.yaml"
    config.write_text(
        "listen: 127.0.0.1:0\n"
        f"storage: {{url: '{db}', usage_journal_dir: '{work}/usage'}}\n"
        f"auth: {{master_key: {MASTER}, secret: '{'p' * 32}'}}\n"
    )
    gateway = start("gateway", ["serve", "--config", str(config)], work)
    base = gateway.url
    results: dict[str, list[float]] = {"overview": [], "usage (30 days by key)": [], "find one request id": []}
    try:
        with sync_playwright() as p:
            browser = p.chromium.launch(
                executable_path=os.environ.get("SWITCHYARD_TEST_CHROMIUM", "/usr/bin/chromium"), args=["--no-sandbox"]
            )
            page = browser.new_page(viewport={"width": 1440, "height": 900})
            page.goto(base + "/ui")
            page.fill("input[name=key]", MASTER)
            page.click("button[type=submit]")
            page.wait_for_selector("[data-testid=logout]")
            for _ in range(RUNS):
                page.goto("about:blank")
                t = time.monotonic()
                page.goto(base + "/ui#/overview")
                page.wait_for_function(
                    "() => /[1-9]/.test(document.querySelector('[data-testid=stat-requests-today]')?.textContent || '')"
                    " && document.querySelector('[data-testid=chart-rps] canvas')"
                )
                results["overview"].append((time.monotonic() - t) * 1e3)

                page.goto("about:blank")
                t = time.monotonic()
                page.goto(base + "/ui#/usage?range=30d&by=key")
                page.wait_for_selector("[data-testid=usage-table] tbody tr")
                page.wait_for_selector("[data-testid=usage-chart] canvas")
                results["usage (30 days by key)"].append((time.monotonic() - t) * 1e3)

                page.goto(base + "/ui#/requests")
                page.wait_for_selector("[data-testid=requests-table] tr[data-request-id]")
                page.fill("form[data-testid=request-filters] input[name=id]", request_id)
                t = time.monotonic()
                page.click("form[data-testid=request-filters] button[type=submit]")
                page.wait_for_selector(f"[data-testid=requests-table] tr[data-request-id='{request_id}']")
                page.wait_for_function("() => document.querySelectorAll('[data-testid=requests-table] tbody tr').length === 1")
                results["find one request id"].append((time.monotonic() - t) * 1e3)
            browser.close()
    finally:
        gateway.stop()
    for name, times in results.items():
        print(f"{name}: median {statistics.median(times):.0f} ms, max {max(times):.0f} ms over {RUNS} loads")


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
