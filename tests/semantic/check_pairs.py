"""Validate tests/semantic/pairs.jsonl and print its counts.

    python tests/semantic/check_pairs.py [PATH]

Exit status 1 (with the problems listed) when the file breaks a rule:
fields and types, unique ids, a != b, no duplicate pair (order and case
ignored), kind consistent with `same`, minimum counts per kind, ~30% holdout
spread over kinds and domains.
"""

import collections
import json
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
HARD_KINDS = ("object", "entity", "direction", "number", "time", "negation")
KINDS = ("paraphrase",) + HARD_KINDS + ("unrelated",)
FIELDS = {"id": str, "a": str, "b": str, "same": bool, "kind": str, "domain": str, "split": str}

MIN_TOTAL = 460
MIN_DOMAINS = 15
MIN_PARAPHRASE = 190
MIN_HARD_EACH = 35
MAX_UNRELATED = 20
HOLDOUT_RANGE = (0.25, 0.36)


def norm(s: str) -> str:
    return " ".join(s.lower().split())


def load(path):
    rows, errors = [], []
    with open(path, encoding="utf-8") as f:
        for ln, line in enumerate(f, 1):
            if not line.strip():
                errors.append(f"line {ln}: blank line")
                continue
            try:
                rows.append((ln, json.loads(line)))
            except json.JSONDecodeError as e:
                errors.append(f"line {ln}: bad JSON: {e}")
    return rows, errors


def check(path):
    rows, errors = load(path)
    ids, pairs = set(), {}
    for ln, r in rows:
        where = f"line {ln} ({r.get('id', '?')})"
        if set(r) != set(FIELDS):
            errors.append(f"{where}: fields {sorted(r)} != {sorted(FIELDS)}")
            continue
        for k, t in FIELDS.items():
            if not isinstance(r[k], t):
                errors.append(f"{where}: {k} is not {t.__name__}")
        if r["id"] in ids:
            errors.append(f"{where}: duplicate id")
        ids.add(r["id"])
        if r["kind"] not in KINDS:
            errors.append(f"{where}: unknown kind {r['kind']!r}")
        if r["split"] not in ("tune", "holdout"):
            errors.append(f"{where}: bad split {r['split']!r}")
        if r["same"] != (r["kind"] == "paraphrase"):
            errors.append(f"{where}: same={r['same']} but kind={r['kind']}")
        a, b = r["a"].strip(), r["b"].strip()
        if not a or not b:
            errors.append(f"{where}: empty question")
        if r["a"] == r["b"]:
            errors.append(f"{where}: a == b")
        if r["kind"] != "paraphrase" and norm(a) == norm(b):
            errors.append(f"{where}: negative differs only in case/space")
        key = frozenset((norm(a), norm(b)))
        if key in pairs:
            errors.append(f"{where}: duplicate pair of {pairs[key]}")
        pairs[key] = r["id"]

    recs = [r for _, r in rows if set(r) == set(FIELDS)]
    by_kind = collections.Counter(r["kind"] for r in recs)
    by_kind_split = collections.Counter((r["kind"], r["split"]) for r in recs)
    domains = collections.Counter(r["domain"] for r in recs)
    hold = sum(1 for r in recs if r["split"] == "holdout")

    if len(recs) < MIN_TOTAL:
        errors.append(f"only {len(recs)} pairs (< {MIN_TOTAL})")
    if len(set(domains) - {"mixed"}) < MIN_DOMAINS:
        errors.append(f"only {len(domains)} domains (< {MIN_DOMAINS})")
    if by_kind["paraphrase"] < MIN_PARAPHRASE:
        errors.append(f"only {by_kind['paraphrase']} paraphrases (< {MIN_PARAPHRASE})")
    for k in HARD_KINDS:
        if by_kind[k] < MIN_HARD_EACH:
            errors.append(f"kind {k}: {by_kind[k]} pairs (< {MIN_HARD_EACH})")
    if by_kind["unrelated"] > MAX_UNRELATED:
        errors.append(f"{by_kind['unrelated']} unrelated pairs (> {MAX_UNRELATED})")
    frac = hold / max(1, len(recs))
    if not HOLDOUT_RANGE[0] <= frac <= HOLDOUT_RANGE[1]:
        errors.append(f"holdout fraction {frac:.2f} outside {HOLDOUT_RANGE}")
    for k in KINDS:
        if by_kind[k] and not by_kind_split[(k, "holdout")]:
            errors.append(f"kind {k} has no holdout pairs")
    hold_domains = {r["domain"] for r in recs if r["split"] == "holdout"}
    if len(hold_domains) < min(MIN_DOMAINS, len(domains)):
        errors.append(f"holdout covers only {len(hold_domains)} domains")

    # counts
    print(f"{path}: {len(recs)} pairs, {sum(r['same'] for r in recs)} same, "
          f"{sum(not r['same'] for r in recs)} different, {len(domains)} domains, "
          f"holdout {hold} ({frac:.0%})")
    print(f"{'kind':12s} {'tune':>5s} {'holdout':>8s} {'total':>6s}")
    for k in KINDS:
        print(f"{k:12s} {by_kind_split[(k, 'tune')]:5d} {by_kind_split[(k, 'holdout')]:8d} {by_kind[k]:6d}")
    print("domains: " + ", ".join(f"{d}={n}" for d, n in sorted(domains.items())))
    lower = sum(1 for r in recs for q in (r["a"], r["b"]) if q == q.lower())
    print(f"all-lowercase questions: {lower} "
          f"(in paraphrases {sum(1 for r in recs if r['same'] for q in (r['a'], r['b']) if q == q.lower())}, "
          f"in negatives {sum(1 for r in recs if not r['same'] for q in (r['a'], r['b']) if q == q.lower())})")
    return errors


def main():
    path = sys.argv[1] if len(sys.argv) > 1 else os.path.join(HERE, "pairs.jsonl")
    errors = check(path)
    if errors:
        print(f"\n{len(errors)} problem(s):")
        for e in errors:
            print("  " + e)
        sys.exit(1)
    print("OK")


if __name__ == "__main__":
    main()
