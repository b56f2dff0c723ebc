"""Switchyard as the Gateway API Inference Extension's Endpoint Picker, called by real Envoy 1.40
over ext_proc (issue 55), end to end: every request must land on the endpoint the EPP picked
(the x-gateway-destination-endpoint header and envoy.lb metadata it returns, as the pod and
Envoy's access log see them) with its body intact; conversations stick to a pod; the subset hint
bounds the pick; nothing eligible is a 503 from the EPP; the served endpoint Envoy reports is
counted; gRPC health answers; a streamed answer comes back whole and as it is produced.

Most tests run on both data planes of envoy.yaml.in: `original-dst`, the inference extension's own
config (an ORIGINAL_DST cluster routed by the x-gateway-destination-endpoint header, which must
then hold one `ip:port`), and `override-host`, Envoy's override_host load balancing policy routed
by the envoy.lb metadata, which also reports x-gateway-destination-endpoint-served back to the EPP.
"""

from __future__ import annotations

import json
import random
import time

import pytest

from mocks import MODEL, completion_text
from procs import wait_until
from stack import (
    DATAPLANES, DESTINATION, EXT_PROC_SERVICE, OVERRIDE_HOST, POOL, Reply, Stack, chat_body, check_config,
    new_id,
)

EXT_PROC_MSGS = "http.http-vllm.ext_proc.stream_msgs_sent"

_WORDS = (
    "harbour lantern orchard granite meadow quarry ledger compass velvet thimble anchor willow furnace "
    "saddle beacon marble cinder pigeon canyon timber parcel ribbon glacier hazel tundra mantle ferry "
    "cobalt prism walnut falcon ember basalt cedar raven copper lagoon summit juniper spindle orbit"
).split()


def prose(seed: str, n_bytes: int) -> str:
    rng = random.Random(seed)
    out: list[str] = []
    size = 0
    while size < n_bytes:
        w = rng.choice(_WORDS)
        out.append(w)
        size += len(w) + 1
    return " ".join(out)[:n_bytes]


def endpoints(value: str | None) -> list[str]:
    return [e.strip() for e in (value or "").split(",") if e.strip()]


def assert_landed(stack: Stack, reply: Reply, sent: bytes | None, *, dataplane: str) -> str:
    """`reply` came from the one pod the EPP picked, which got `sent` byte for byte; the header the
    pod saw, the envoy.lb metadata and the host Envoy connected to agree. Returns the pod."""
    if reply.status != 200:
        entries = [e for e in stack.envoy.access_log() if e.get("test_id") == reply.test_id]
        raise AssertionError(f"{reply.test_id} ({dataplane}): status {reply.status}: {reply.text[:300]!r}; "
                             f"envoy's access log: {json.dumps(entries)}")
    rec = stack.served_one(reply)
    pod = rec.served_by
    if sent is not None:
        assert rec.body == sent, f"body changed on the way: sent {len(sent)} bytes, the pod got {len(rec.body)}"
    else:
        assert rec.body == b""
    picked = endpoints(rec.header(DESTINATION))
    assert picked, f"the pod got no {DESTINATION} header: {rec.headers}"
    assert picked[0] == pod, f"the EPP picked {picked} but {pod} served it"
    assert reply.body == rec.response, "the response body changed on the way back"
    (entry,) = stack.envoy.access_entries(reply.test_id)
    assert entry["upstream_host"] == pod, entry
    assert entry["header_endpoint"] == rec.header(DESTINATION), entry
    assert entry["metadata_endpoint"] == entry["header_endpoint"], (
        f"the envoy.lb metadata and the header differ: {entry}")
    if dataplane == OVERRIDE_HOST:
        assert entry["upstream_cluster"] == "override_host_cluster", entry
        assert entry["metadata_served"] == pod, entry
    else:
        assert entry["upstream_cluster"] == "original_destination_cluster", entry
    return pod


# --- 1. the pick, on the body path and the headers-only path -------------------------------------

@pytest.mark.parametrize("dataplane", DATAPLANES)
def test_chat_with_a_1kb_body_lands_on_the_pick_intact(stack: Stack, dataplane: str) -> None:
    seen = set()
    for i in range(6):
        msgs = [{"role": "system", "content": f"conversation {new_id()}"},
                {"role": "user", "content": prose(f"small-{i}-{time.time()}", 1000)}]
        sent, reply = stack.chat(msgs, dataplane=dataplane)
        assert 900 < len(sent) < 1300
        pod = assert_landed(stack, reply, sent, dataplane=dataplane)
        assert reply.json()["choices"][0]["message"]["content"] == completion_text(pod)
        assert reply.json()["usage"]["total_tokens"] > 0
        seen.add(pod)
    assert seen <= set(stack.addresses)


@pytest.mark.parametrize("dataplane", DATAPLANES)
def test_a_200kb_body_streamed_in_chunks_lands_on_the_pick_intact(stack: Stack, dataplane: str) -> None:
    msgs = [{"role": "user", "content": prose(f"large-{new_id()}", 200_000)}]
    before = stack.envoy.stat(EXT_PROC_MSGS) or 0
    sent, reply = stack.chat(msgs, dataplane=dataplane)
    assert len(sent) > 200_000
    assert_landed(stack, reply, sent, dataplane=dataplane)
    (entry,) = stack.envoy.access_entries(reply.test_id)
    assert int(entry["bytes_received"]) == len(sent)
    # The listener's 32 KiB buffer limit makes Envoy hand the EPP the body in several chunks:
    # request headers + >= 6 body messages + response headers and body.
    sent_msgs = (stack.envoy.stat(EXT_PROC_MSGS) or 0) - before
    assert sent_msgs >= 8, f"envoy sent the EPP only {sent_msgs} messages for a 200 KB body"


@pytest.mark.parametrize("dataplane", DATAPLANES)
def test_a_chunked_upload_lands_on_the_pick_intact(stack: Stack, dataplane: str) -> None:
    msgs = [{"role": "user", "content": prose(f"chunked-{new_id()}", 60_000)}]
    body = chat_body(msgs)
    pieces = [body[i:i + 7000] for i in range(0, len(body), 7000)]
    reply = stack.request("POST", "/v1/chat/completions", pieces,
                          headers={"content-type": "application/json"}, dataplane=dataplane)
    assert_landed(stack, reply, body, dataplane=dataplane)


@pytest.mark.parametrize("dataplane", DATAPLANES)
def test_headers_only_request_lands_on_the_pick(stack: Stack, dataplane: str) -> None:
    for _ in range(4):
        reply = stack.request("GET", "/v1/models", dataplane=dataplane)
        pod = assert_landed(stack, reply, None, dataplane=dataplane)
        doc = reply.json()
        assert [m["id"] for m in doc["data"]] == [MODEL]
        assert doc["data"][0]["served_by"] == pod


@pytest.mark.parametrize("dataplane", DATAPLANES)
def test_a_client_cannot_pick_its_own_endpoint(stack: Stack, dataplane: str) -> None:
    """A client's own x-gateway-destination-endpoint is replaced by the pick, not appended to."""
    target = stack.addresses[2]
    other = stack.addresses[0]
    sent, reply = stack.chat([{"role": "user", "content": f"spoof {new_id()}"}],
                             headers={DESTINATION: other, "x-test-subset": target}, dataplane=dataplane)
    assert assert_landed(stack, reply, sent, dataplane=dataplane) == target
    assert stack.served_one(reply).header(DESTINATION) == target


# --- 2. cache-aware: a conversation sticks, conversations spread ---------------------------------

@pytest.mark.parametrize("dataplane", DATAPLANES)
def test_a_conversation_sticks_to_one_pod_and_conversations_spread(stack: Stack, dataplane: str) -> None:
    firsts = []
    for c in range(6):
        tag = new_id(f"conv{c}")
        msgs = [{"role": "system", "content": f"You are assistant {tag}. " + prose(tag, 2500)},
                {"role": "user", "content": f"Question one of {tag}: " + prose(tag + "q1", 300)}]
        pods = []
        for turn in range(4):
            sent, reply = stack.chat(msgs, dataplane=dataplane)
            pod = assert_landed(stack, reply, sent, dataplane=dataplane)
            pods.append(pod)
            answer = reply.json()["choices"][0]["message"]["content"]
            msgs = [*msgs, {"role": "assistant", "content": answer},
                    {"role": "user", "content": f"Follow-up {turn} of {tag}: " + prose(f"{tag}f{turn}", 400)}]
        assert len(msgs[0]["content"]) + sum(len(m["content"]) for m in msgs[1:]) > 3000
        assert len(set(pods)) == 1, f"conversation {tag} moved between pods: {pods}"
        firsts.append(pods[0])
    assert len(set(firsts)) >= 2, f"six different conversations all went to {firsts[0]}"


# --- 3. the subset hint -------------------------------------------------------------------------

@pytest.mark.parametrize("dataplane", DATAPLANES)
@pytest.mark.parametrize("shape", ["list", "string"])
def test_picks_stay_in_the_subset_hint(stack: Stack, shape: str, dataplane: str) -> None:
    a = stack.addresses
    for subset in ([a[1]], [a[0], a[2]]):
        hs = {"x-test-subset": ",".join(subset)}
        if shape == "string":
            hs["x-test-subset-shape"] = "string"
        landed = set()
        for i in range(6):
            if i % 2:
                reply = stack.request("GET", "/v1/models", headers=hs, dataplane=dataplane)
                sent = None
            else:
                sent, reply = stack.chat([{"role": "user", "content": f"subset {i} {new_id()}"}], headers=hs,
                                         dataplane=dataplane)
            pod = assert_landed(stack, reply, sent, dataplane=dataplane)
            picked = endpoints(stack.served_one(reply).header(DESTINATION))
            assert set(picked) <= set(subset), f"the EPP named {picked} outside the subset {subset}"
            (entry,) = stack.envoy.access_entries(reply.test_id)
            hint = entry["subset_hint"]
            assert (hint if shape == "list" else hint.split(",")) == subset, entry
            landed.add(pod)
        assert landed <= set(subset)


@pytest.mark.parametrize("case", ["unknown-endpoint", "empty-list", "unknown-endpoint-string"])
def test_a_subset_with_no_eligible_endpoint_is_a_503_from_the_epp(stack: Stack, case: str) -> None:
    hs = {"x-test-subset": "127.0.0.9:1"}  # nothing listens there, and it is no pool member
    if case == "empty-list":
        hs = {"x-test-subset-empty": "1"}
    elif case == "unknown-endpoint-string":
        hs["x-test-subset-shape"] = "string"
    for method in ("POST", "GET"):
        if method == "POST":
            _, reply = stack.chat([{"role": "user", "content": "nowhere"}], headers=hs)
        else:
            reply = stack.request("GET", "/v1/models", headers=hs)
        assert reply.status == 503, f"{case} {method}: {reply.status} {reply.text[:300]}"
        assert stack.received(reply.test_id) == [], "a pod got a request the EPP should have refused"
        (entry,) = stack.envoy.access_entries(reply.test_id)
        assert entry["upstream_host"] is None, f"envoy went upstream: {entry}"
        assert entry["flags"] in ("-", None), f"an Envoy failure, not the EPP's answer: {entry}"
        if case == "empty-list":
            assert entry["subset_hint"] == [], entry


# --- 4. nothing eligible ------------------------------------------------------------------------

def test_an_unknown_model_is_refused_by_the_epp(stack: Stack) -> None:
    body = json.dumps({"model": "no-such-model", "messages": [{"role": "user", "content": "hi"}]}).encode()
    reply = stack.request("POST", "/v1/chat/completions", body, headers={"content-type": "application/json"})
    assert reply.status == 404, f"{reply.status} {reply.text[:300]}"
    assert stack.received(reply.test_id) == []
    (entry,) = stack.envoy.access_entries(reply.test_id)
    assert entry["upstream_host"] is None, entry


@pytest.mark.parametrize("dataplane", DATAPLANES)
def test_all_pods_down_is_a_503_from_the_epp_until_they_return(stack_factory, dataplane: str) -> None:
    st: Stack = stack_factory()
    sent, reply = st.chat([{"role": "user", "content": "before"}], dataplane=dataplane)
    assert_landed(st, reply, sent, dataplane=dataplane)
    for p in st.pods:
        p.stop()
    last: dict = {}

    def refused_by_epp() -> bool:
        nonlocal last
        _, r = st.chat([{"role": "user", "content": "while down"}], dataplane=dataplane)
        (last,) = st.envoy.access_entries(r.test_id)
        # Until Switchyard has seen the pods down, Envoy may still be sent to one (a UF 503).
        return r.status == 503 and last["upstream_host"] is None

    wait_until(refused_by_epp, 15, "a 503 from the EPP with every pod down", lambda: json.dumps(last))
    for p in st.pods:
        p.start()

    def back() -> bool:
        _, r = st.chat([{"role": "user", "content": "after"}], dataplane=dataplane)
        return r.status == 200

    wait_until(back, 15, "a 200 once the pods are back", st.diagnostics, 0.1)


# --- 5. the served endpoint, read back ----------------------------------------------------------

def test_the_served_endpoint_envoy_reports_is_counted(stack: Stack) -> None:
    name = "switchyard_epp_served_total"
    before = stack.switchyard.metrics().by(name, "endpoint", pool=POOL)
    counts: dict[str, int] = {}
    for i in range(12):
        if i % 3 == 0:
            reply = stack.request("GET", "/v1/models", dataplane=OVERRIDE_HOST)
            sent = None
        else:
            sent, reply = stack.chat([{"role": "system", "content": f"served {i} {new_id()}"},
                                      {"role": "user", "content": prose(str(i), 500)}],
                                     stream=i % 3 == 2, dataplane=OVERRIDE_HOST)
        pod = assert_landed(stack, reply, sent, dataplane=OVERRIDE_HOST)
        counts[pod] = counts.get(pod, 0) + 1
    delta: dict[str, float] = {}

    def counted() -> bool:
        nonlocal delta
        now = stack.switchyard.metrics().by(name, "endpoint", pool=POOL)
        delta = {k: v - before.get(k, 0.0) for k, v in now.items() if v - before.get(k, 0.0)}
        return delta == counts

    wait_until(counted, 5, f"{name} to count {counts}", lambda: f"counted {delta}")


# --- 6. gRPC health -----------------------------------------------------------------------------

def test_grpc_health(stack: Stack) -> None:
    sy = stack.switchyard
    for service in ("liveness", "readiness", EXT_PROC_SERVICE):
        assert sy.health(service) == "SERVING", service
    # As the inference extension's EPP does, the ext_proc port also answers health for the
    # ExternalProcessor service: the Envoy config's gRPC health check of the ext_proc cluster.
    assert sy.health(EXT_PROC_SERVICE, port=sy.epp_port) == "SERVING"

    def healthy() -> bool:
        clusters = stack.envoy.admin("/clusters")
        return any(line.startswith(f"ext_proc::127.0.0.1:{sy.epp_port}::health_flags::healthy")
                   for line in clusters.splitlines())

    wait_until(healthy, 5, "envoy's health check of the EPP to pass",
               lambda: "\n".join(l for l in stack.envoy.admin("/clusters").splitlines() if l.startswith("ext_proc")))


def test_switchyard_check_accepts_the_config(stack: Stack) -> None:
    r = check_config(stack.switchyard.config_path)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "config OK" in r.stdout


# --- 7. streaming -------------------------------------------------------------------------------

@pytest.mark.parametrize("dataplane", DATAPLANES)
def test_a_streamed_answer_arrives_whole_and_as_it_is_produced(stack: Stack, dataplane: str) -> None:
    sent, reply = stack.chat([{"role": "user", "content": f"stream please {new_id()}"}], stream=True,
                             headers={"x-mock-delay": "0.15"}, dataplane=dataplane)
    pod = assert_landed(stack, reply, sent, dataplane=dataplane)
    assert reply.headers.get("content-type", "").startswith("text/event-stream")
    assert reply.body.endswith(b"data: [DONE]\n\n")
    text = ""
    events = [e for e in reply.body.split(b"\n\n") if e]
    for e in events[:-1]:
        chunk = json.loads(e.removeprefix(b"data: "))
        text += chunk["choices"][0]["delta"].get("content") or ""
    assert text == completion_text(pod)
    assert json.loads(events[-2].removeprefix(b"data: "))["usage"]["total_tokens"] > 0
    rec = stack.served_one(reply)
    # The first events reached the client while the pod was still producing the rest (the EPP
    # streams the response body back chunk by chunk, not once the whole answer is in).
    assert reply.first_byte_at is not None and rec.done_at is not None
    assert reply.first_byte_at < rec.done_at - 0.3, (
        f"the first bytes came {reply.first_byte_at - rec.done_at:+.2f}s after the pod finished")
