"""The gateway routes on the engines' KV-cache events (issue 54), against vLLM's and SGLang's own
publisher code in every encoding they ship (see conftest.VARIANTS): each prompt goes to the
backend whose events hold its longest prefix, removals and clears are followed, a stretch lost on
the PUB socket is recovered through the replay socket (and counted), mid-stream and before the
first live batch of a fresh engine, a gateway started after the engines learns what they hold on
connect, and blocks offloaded to the engine's CPU tier are known as such.

The engines are warmed directly (POST to the emulator, never through the gateway), so the gateway
can know where a document is only from the events; `x-switchyard-route` must say `events: N
blocks on B`, with N the full blocks the prompt shares with what B holds, by the engine's own
tokenization."""

from __future__ import annotations

import itertools
from pathlib import Path

import pytest

from conftest import ENGINES, Stack, direct
from stack import Gateway, Routed, continuation, document, shared_blocks, start_gateway, wait_for

_tags = itertools.count()


def doc(stack: Stack, what: str) -> list[dict]:
    return document(f"{stack.variant.id}-{what}-{next(_tags)}")


def assert_events_route(routed: Routed, engine: str, blocks: int) -> None:
    assert routed.status == 200, routed.body
    assert routed.backend == engine, f"went to {routed.backend}, not {engine}; route: {routed.route}"
    assert routed.events == (blocks, engine), f"route {routed.route!r}: expected `events: {blocks} blocks on {engine}`"


def test_prompt_goes_where_the_events_hold_its_prefix(stack: Stack) -> None:
    gw = stack.gateway
    docs = {name: doc(stack, f"prefix-{name}") for name in ENGINES}
    for name, messages in docs.items():
        stack.warm(name, messages)
    for name in ENGINES:
        gw.wait_blocks(name, stack.engines[name])
    for name, messages in docs.items():
        cont = continuation(messages, f"What does the document say about the {name} harbour?")
        expected = shared_blocks(stack.engines[name], messages, cont)
        assert expected >= 20
        routed = gw.chat(cont)
        assert_events_route(routed, name, expected)
        # the engine reused what the events said it held
        assert routed.cached_tokens == expected * 16


def test_clear_is_followed(stack: Stack) -> None:
    gw, emu = stack.gateway, stack.engines["e2"]
    messages = doc(stack, "clear")
    stack.warm("e2", messages)
    gw.wait_blocks("e2", emu)
    assert gw.blocks("e2") > 0

    emu.clear()  # AllBlocksCleared
    gw.wait_blocks("e2", emu)
    assert gw.blocks("e2") == 0
    routed = gw.chat(continuation(messages, "Anything about quarries?"))
    assert routed.status == 200, routed.body
    events = routed.events
    assert events is None or events[1] != "e2" or events[0] == 0, f"e2 was cleared, yet: {routed.route}"


def test_evictions_are_followed(stack: Stack) -> None:
    gw, emu = stack.gateway, stack.engines["e3"]
    messages = doc(stack, "evicted")
    stack.warm("e3", messages)
    gw.wait_blocks("e3", emu)
    cont = continuation(messages, "Anything about falcons?")

    # other documents push it out (BlockRemoved), least recently used first
    for i in range(20):
        if emu.lookup({"messages": cont})["cached_blocks"] == 0:
            break
        stack.warm("e3", doc(stack, f"filler{i}"))
    else:
        pytest.fail("the engine never evicted the document")
    gw.wait_blocks("e3", emu)
    routed = gw.chat(cont)
    assert routed.status == 200, routed.body
    events = routed.events
    assert events is None or events[1] != "e3" or events[0] == 0, f"e3 evicted the document, yet: {routed.route}"


def lose_three_then_send_one(stack_warm, emu, make_doc) -> list[list[dict]]:
    """Three batches lost on the PUB socket (numbered, in the replay buffer), then one sent: the
    subscriber sees the sequence skip three. Returns the three lost documents."""
    emu.drop(3)
    lost = [make_doc(f"lost{i}") for i in range(3)]
    for messages in lost:
        stack_warm(messages)
    # the publisher's thread sends (here: loses) them after the requests were answered
    wait_for("the engine's publisher to lose three batches", lambda: emu.blocks()["dropped"], lambda n: n == 3)
    stack_warm(make_doc("after-gap"))
    return lost


def assert_gap_recovered(gw: Gateway, emu, backend: str, lost: list[list[dict]], gaps: float, replays: float) -> None:
    gw.wait_blocks(backend, emu)
    assert gw.counter("switchyard_kv_event_gaps_total", backend) > gaps
    assert gw.counter("switchyard_kv_event_replays_total", backend) > replays
    wait_for(f"switchyard_kv_events_live{{backend={backend}}} back to 1",
             lambda: gw.metrics().get("switchyard_kv_events_live", backend=backend), lambda v: v == 1)
    cont = continuation(lost[1], "Which cedar?")
    assert_events_route(gw.chat(cont), backend, shared_blocks(emu, lost[1], cont))


def test_gap_is_recovered_through_replay(stack: Stack) -> None:
    gw, emu = stack.gateway, stack.engines["e1"]
    stack.warm("e1", doc(stack, "before-gap"))  # the feed has a history: the gap is mid-stream
    gw.wait_blocks("e1", emu)
    gaps = gw.counter("switchyard_kv_event_gaps_total", "e1")
    replays = gw.counter("switchyard_kv_event_replays_total", "e1")
    lost = lose_three_then_send_one(lambda m: stack.warm("e1", m), emu, lambda what: doc(stack, what))
    assert_gap_recovered(gw, emu, "e1", lost, gaps, replays)


@pytest.mark.parametrize("engine", ["vllm", "sglang"])
def test_gap_before_the_first_live_batch_is_recovered(engine: str, emulator_factory, tokenizer_dir: Path, tmp_path: Path) -> None:
    """A fresh engine whose very first batches (seq 0, 1, 2) are lost: the gateway's replay on
    connect found nothing, so the first batch it sees live, seq 3, is already past a gap."""
    emu = emulator_factory(engine=engine, name="e1")
    gw = start_gateway("fresh-gateway", tmp_path, tokenizer_dir, {"e1": emu})
    try:
        gaps = gw.counter("switchyard_kv_event_gaps_total", "e1")
        replays = gw.counter("switchyard_kv_event_replays_total", "e1")
        tags = itertools.count()
        lost = lose_three_then_send_one(lambda m: direct(emu, m), emu,
                                        lambda what: document(f"fresh-{engine}-{what}-{next(tags)}"))
        assert_gap_recovered(gw, emu, "e1", lost, gaps, replays)
    except AssertionError as e:
        raise AssertionError(f"{e}\n--- gateway log ---\n{gw.log_tail()}") from None
    finally:
        gw.stop()


def test_late_gateway_learns_through_replay(stack: Stack) -> None:
    emu = stack.engines["e2"]
    messages = doc(stack, "late")
    stack.warm("e2", messages)
    stack.gateway.wait_blocks("e2", emu)  # published (the first gateway has it)

    late = start_gateway("late-gateway", stack.log_dir, stack.tokenizer_dir, stack.engines)
    try:
        for name in ENGINES:
            late.wait_blocks(name, stack.engines[name])
        cont = continuation(messages, "Summarise it in a line.")
        routed = late.chat(cont)
        assert_events_route(routed, "e2", shared_blocks(emu, messages, cont))
    except AssertionError as e:
        raise AssertionError(f"{e}\n--- late gateway log ---\n{late.log_tail()}") from None
    finally:
        late.stop()


def test_cpu_tier_is_known_and_still_routes(stack: Stack) -> None:
    gw, emu = stack.gateway, stack.engines["e3"]
    messages = doc(stack, "offloaded")
    stack.warm("e3", messages)
    gw.wait_blocks("e3", emu)
    emu.offload()  # BlockStored on the engine's CPU medium, BlockRemoved on the GPU
    gw.wait_blocks("e3", emu)
    assert gw.blocks("e3", tier="cpu") == emu.blocks()["cpu"] > 0
    assert gw.blocks("e3", tier="gpu") == 0

    cont = continuation(messages, "And the walnut?")
    routed = gw.chat(cont)
    assert routed.status == 200, routed.body
    assert routed.backend == "e3", f"only e3 holds it (on its CPU tier), yet: {routed.route}"
    assert routed.events is not None and routed.events[1] == "e3", routed.route
