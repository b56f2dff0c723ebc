"""The shape of LiteLLM's published proxy load test, against Switchyard: every user posts a chat
completion with a ~6 KB prompt, then waits 0.5-1 s (1,000 users offer ~1,300 requests/s). Each
answer's `server-timing: gateway;dur=` (the gateway's own time, upstream excluded) is collected,
and its percentiles are written to $LOCUST_OVERHEAD_OUT (JSON) when the run ends.

Environment: SWITCHYARD_KEY (the virtual key), LOCUST_MODEL (default llama3)."""

import json
import os
import re

from locust import FastHttpUser, between, events, task

KEY = os.environ.get("SWITCHYARD_KEY", "")
MODEL = os.environ.get("LOCUST_MODEL", "llama3")
PROMPT = ("The quick brown fox jumps over the lazy dog while the gateway routes the request. " * 75)[:6000]
GATEWAY_DUR = re.compile(r"gateway;dur=([0-9.]+)")
overheads_ms = []


class ChatUser(FastHttpUser):
    wait_time = between(0.5, 1)

    @task
    def chat_completion(self):
        body = {"model": MODEL, "messages": [{"role": "user", "content": PROMPT}], "user": "locust-user"}
        with self.client.post(
            "/v1/chat/completions",
            json=body,
            headers={"Authorization": f"Bearer {KEY}"},
            catch_response=True,
        ) as response:
            if response.status_code != 200:
                response.failure(f"status {response.status_code}")
                return
            timing = GATEWAY_DUR.search(response.headers.get("server-timing", ""))
            if timing:
                overheads_ms.append(float(timing.group(1)))


@events.quitting.add_listener
def write_overheads(environment, **_):
    out = os.environ.get("LOCUST_OVERHEAD_OUT")
    if not out or not overheads_ms:
        return
    ordered = sorted(overheads_ms)

    def pct(q):
        return ordered[min(len(ordered) - 1, int(q * len(ordered)))]

    with open(out, "w") as f:
        json.dump({"n": len(ordered), "p50_ms": pct(0.5), "p90_ms": pct(0.9), "p99_ms": pct(0.99), "max_ms": ordered[-1]}, f)
