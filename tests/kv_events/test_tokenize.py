"""Conformance of the gateway's tokenizer with vLLM's (issue 54): `switchyard tokenize` against
tests/kv_events/reference.py on the corpus of tests/kv_events/corpus.py.

For each tokenizer in `reference.TOKENIZER_NAMES` the gateway binary (`$SWITCHYARD_BIN`, else
target/debug/switchyard) runs once as `switchyard tokenize --tokenizer DIR` with the whole corpus on
stdin, one request body per line, and must print one line per request: `{"ids": [...]}` equal to
`reference.render_ids`, or `{"error": "..."}` exactly where the chat template rejects the request.

Files left for diffing by hand: target/kv-engines/corpus.jsonl (the input),
expected-<name>.jsonl (the reference) and got-<name>.jsonl (the gateway's answer).
A mismatch report names the request, its kind, the first differing token position, the prompt
text around it, and the tokens on each side.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

import reference
from corpus import corpus_kinds

GATEWAY_TIMEOUT_S = float(os.environ.get("SWITCHYARD_TOKENIZE_TIMEOUT", "600"))
DETAILED_MISMATCHES = 8  # the rest are listed by index and kind
CONTEXT_TOKENS = 6
CONTEXT_CHARS = 120


def switchyard_bin() -> Path:
    """The gateway binary, as tests/conformance finds it: $SWITCHYARD_BIN or target/debug/switchyard."""
    path = Path(os.environ.get("SWITCHYARD_BIN", "target/debug/switchyard"))
    if not path.is_absolute():
        path = reference.REPO_ROOT / path
    if not path.is_file() or not os.access(path, os.X_OK):
        pytest.fail(f"switchyard binary not found or not executable at {path} (run `cargo build` or set SWITCHYARD_BIN)")
    return path


def run_tokenize(tok_dir: Path, lines: list[str]) -> list[dict]:
    """Feed `lines` to `switchyard tokenize --tokenizer tok_dir`; its stdout, one JSON object a line."""
    completed = subprocess.run(
        [str(switchyard_bin()), "tokenize", "--tokenizer", str(tok_dir)],
        input="".join(line + "\n" for line in lines).encode("utf-8"),
        capture_output=True,
        timeout=GATEWAY_TIMEOUT_S,
        check=False,
    )
    stderr = completed.stderr.decode("utf-8", "replace")
    assert completed.returncode == 0, f"switchyard tokenize exited {completed.returncode}:\n{stderr[-4000:]}"
    out = reference.read_jsonl(completed.stdout.decode("utf-8"))
    assert len(out) == len(lines), f"{len(lines)} requests in, {len(out)} lines out; stderr:\n{stderr[-4000:]}"
    return out


@pytest.fixture(scope="module")
def corpus() -> list[dict]:
    return reference.load_corpus()


# --- describing a mismatch -------------------------------------------------------------------


def _first_difference(expected: list[int], got: list[int]) -> int:
    for position, (a, b) in enumerate(zip(expected, got)):
        if a != b:
            return position
    return min(len(expected), len(got))


def _tokens(tokenizer, ids: list[int]) -> str:
    """`[id 'decoded']` for each id; ids the vocabulary does not have are marked."""
    cells = []
    for token_id in ids:
        if 0 <= token_id < len(tokenizer):
            cells.append(f"{token_id} {tokenizer.decode([token_id])!r}")
        else:
            cells.append(f"{token_id} <not in vocabulary>")
    return ", ".join(cells)


def describe_mismatch(name: str, index: int, kind: str, request: dict, expected: dict, got: dict) -> str:
    tok_dir = reference.tokenizer_dir(name)
    tokenizer = reference.load_tokenizer(tok_dir)
    head = f"[{name}] request #{index} ({kind})"
    if "ids" not in expected or "ids" not in got:
        return f"{head}: expected {_short(expected)}, got {_short(got)}\n  request: {_short(request)}"

    want, have = expected["ids"], got["ids"]
    at = _first_difference(want, have)
    text = reference.render_text(tok_dir, request)
    offsets = tokenizer(text, add_special_tokens=False, return_offsets_mapping=True)["offset_mapping"]
    char = offsets[at][0] if at < len(offsets) else len(text)
    lo, hi = max(0, at - CONTEXT_TOKENS), at + CONTEXT_TOKENS
    return "\n".join(
        [
            f"{head}: first difference at token {at} (expected {len(want)} tokens, got {len(have)}), prompt char {char}",
            f"  prompt text before: {text[max(0, char - CONTEXT_CHARS):char]!r}",
            f"  prompt text after:  {text[char:char + CONTEXT_CHARS]!r}",
            f"  expected text from there: {tokenizer.decode(want[at:at + 3 * CONTEXT_TOKENS])!r}",
            f"  got text from there:      {_decode(tokenizer, have[at:at + 3 * CONTEXT_TOKENS])!r}",
            f"  expected tokens {lo}..: {_tokens(tokenizer, want[lo:hi])}",
            f"  got tokens {lo}..:      {_tokens(tokenizer, have[lo:hi])}",
        ]
    )


def _decode(tokenizer, ids: list[int]) -> str:
    return tokenizer.decode([i for i in ids if 0 <= i < len(tokenizer)])


def _short(value: object, limit: int = 400) -> str:
    text = json.dumps(value, ensure_ascii=False)
    return text if len(text) <= limit else text[:limit] + f"... ({len(text)} chars)"


# --- tests -----------------------------------------------------------------------------------


@pytest.mark.parametrize("name", reference.TOKENIZER_NAMES)
def test_reference_is_the_tokenizers_package(name: str, corpus: list[dict]) -> None:
    """transformers' ids (what vLLM uses) equal the plain `tokenizers` package's on tokenizer.json
    for the rendered prompt: so the Rust `tokenizers` crate on the same file is the right tool,
    and any mismatch below is the chat template's or the crate's, not a transformers quirk."""
    tok_dir = reference.tokenizer_dir(name)
    disagree = [
        i for i, request in enumerate(corpus)
        if "ids" in (line := reference.expected_line(tok_dir, request))
        and reference.tokenizers_ids(tok_dir, reference.render_text(tok_dir, request)) != line["ids"]
    ]
    assert not disagree, f"[{name}] transformers and tokenizers disagree on requests {disagree}"


@pytest.mark.parametrize("name", reference.TOKENIZER_NAMES)
def test_tokenize_matches_reference(name: str, corpus: list[dict]) -> None:
    tok_dir = reference.tokenizer_dir(name)
    expected = reference.write_expected(name, corpus)
    got = run_tokenize(tok_dir, [json.dumps(request, ensure_ascii=False) for request in corpus])
    reference.dump_jsonl(reference.KV_ENGINES_DIR / f"got-{name}.jsonl", got)

    kinds = corpus_kinds()

    def agrees(want: dict, have: dict) -> bool:
        return want == have if "ids" in want else "error" in have

    mismatched = [i for i, (want, have) in enumerate(zip(expected, got)) if not agrees(want, have)]
    if not mismatched:
        return
    by_kind: dict[str, list[int]] = {}
    for i in mismatched:
        by_kind.setdefault(kinds[i], []).append(i)
    details = [describe_mismatch(name, i, kinds[i], corpus[i], expected[i], got[i]) for i in mismatched[:DETAILED_MISMATCHES]]
    summary = "; ".join(f"{kind}: {indices}" for kind, indices in sorted(by_kind.items()))
    pytest.fail(
        f"[{name}] {len(mismatched)} of {len(corpus)} requests differ ({summary})\n\n"
        + "\n\n".join(details)
        + f"\n\ndiff by hand: {reference.expected_path(name)} vs {reference.KV_ENGINES_DIR / f'got-{name}.jsonl'}",
        pytrace=False,
    )


def test_tokenize_answers_every_line() -> None:
    """A line that is not a chat request gets an error line of its own; the lines after it still
    get their ids, so answers stay aligned with requests."""
    tok_dir = reference.tokenizer_dir(reference.TOKENIZER_NAMES[0])
    good = {"messages": [{"role": "user", "content": "hello"}]}
    lines = [json.dumps(good), "{not json", json.dumps({"model": "m"}), json.dumps(good)]
    got = run_tokenize(tok_dir, lines)
    assert "error" in got[1] and "error" in got[2], got
    assert got[0] == got[3] == {"ids": reference.render_ids(tok_dir, good)}, got
