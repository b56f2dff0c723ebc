"""Baseline: plain cosine similarity of all-MiniLM-L6-v2 embeddings on pairs.jsonl.

    python tests/semantic/baseline_cosine.py [> tests/semantic/BASELINE.txt]

Embeds both questions of every pair with minilm.py directly (no gateway) and
prints, per split and per kind, the cosine distribution, then a threshold
sweep: false-hit rate (different-meaning pairs with cosine >= t) and
paraphrase hit rate (same-meaning pairs with cosine >= t), and the lowest
threshold with <= 1% false hits. Thresholds are chosen on the tune split and
also reported for holdout. Deterministic: no randomness.
"""

import collections
import json
import os
import sys
import time

# One BLAS thread: on 2-core machines that are also building/running the gateway, multi-threaded
# OpenBLAS spin-waits and gets 2-20x slower (measured); one thread keeps latency steady.
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
os.environ.setdefault("OMP_NUM_THREADS", "1")

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from minilm import MODEL_NAME, get_model  # noqa: E402

KINDS = ("paraphrase", "object", "entity", "direction", "number", "time", "negation", "unrelated")
HARD = ("object", "entity", "direction", "number", "time", "negation")
SWEEP = [0.80, 0.85, 0.88, 0.90, 0.92, 0.94, 0.95, 0.96, 0.97, 0.975, 0.98, 0.985, 0.99, 0.995, 0.998, 0.999]
FINE = list(np.round(np.arange(0.800, 0.9995, 0.001), 3)) + [0.9995, 0.9999]
MAX_FALSE = 0.01


def load_pairs(path):
    with open(path, encoding="utf-8") as f:
        return [json.loads(l) for l in f if l.strip()]


def rates(recs, t):
    neg = [r for r in recs if not r["same"]]
    pos = [r for r in recs if r["same"]]
    fh = sum(r["cos"] >= t for r in neg) / max(1, len(neg))
    ph = sum(r["cos"] >= t for r in pos) / max(1, len(pos))
    return fh, ph


def lowest_ok(recs):
    for t in FINE:
        fh, ph = rates(recs, t)
        if fh <= MAX_FALSE:
            return float(t), fh, ph
    return None, None, None


def main():
    path = sys.argv[1] if len(sys.argv) > 1 else os.path.join(HERE, "pairs.jsonl")
    recs = load_pairs(path)
    m = get_model()
    texts = sorted({q for r in recs for q in (r["a"], r["b"])})
    t0 = time.perf_counter()
    vecs = m.embed(texts)
    dt = time.perf_counter() - t0
    idx = {q: i for i, q in enumerate(texts)}
    for r in recs:
        r["cos"] = float(vecs[idx[r["a"]]] @ vecs[idx[r["b"]]])

    print(f"# Plain-cosine baseline: {MODEL_NAME} (numpy, tests/semantic/minilm.py), mean pooling, L2-normalised")
    print(f"# {len(recs)} pairs from {os.path.relpath(path, os.path.dirname(os.path.dirname(HERE)))}; "
          f"{len(texts)} distinct questions embedded")
    print(f"# (embedding time not part of the result: {dt:.1f} s, {dt / len(texts) * 1000:.1f} ms/question)")
    print()

    splits = {"tune": [r for r in recs if r["split"] == "tune"],
              "holdout": [r for r in recs if r["split"] == "holdout"],
              "all": recs}

    print("## Cosine distribution per split and kind")
    print(f"{'split':8s} {'kind':11s} {'n':>4s} {'min':>7s} {'p10':>7s} {'median':>7s} {'p90':>7s} {'max':>7s}")
    for sname, srecs in splits.items():
        by = collections.defaultdict(list)
        for r in srecs:
            by[r["kind"]].append(r["cos"])
        by["ALL-HARD"] = [r["cos"] for r in srecs if r["kind"] in HARD]
        for k in KINDS + ("ALL-HARD",):
            c = np.array(by.get(k, []))
            if not len(c):
                continue
            print(f"{sname:8s} {k:11s} {len(c):4d} {c.min():7.4f} {np.percentile(c, 10):7.4f} "
                  f"{np.median(c):7.4f} {np.percentile(c, 90):7.4f} {c.max():7.4f}")
        print()

    print("## Threshold sweep (hit = cosine >= t)")
    print("false-hit = share of different-meaning pairs that would be served from cache;")
    print("para-hit  = share of same-meaning pairs that would be served from cache.")
    hdr = f"{'t':>6s} " + " ".join(f"{s + ' false':>13s} {s + ' para':>12s}" for s in splits)
    print(hdr)
    for t in SWEEP:
        cells = []
        for s in splits.values():
            fh, ph = rates(s, t)
            cells.append(f"{fh:13.1%} {ph:12.1%}")
        print(f"{t:6.3f} " + " ".join(cells))
    print()

    print("## False-hit rate per negative kind at each threshold (all splits)")
    print(f"{'t':>6s} " + " ".join(f"{k:>9s}" for k in HARD + ("unrelated",)))
    for t in SWEEP:
        row = []
        for k in HARD + ("unrelated",):
            ks = [r for r in recs if r["kind"] == k]
            row.append(f"{sum(r['cos'] >= t for r in ks) / len(ks):9.1%}")
        print(f"{t:6.3f} " + " ".join(row))
    print()

    print(f"## Lowest threshold (grid 0.800..0.999 step 0.001, then 0.9995, 0.9999) with <= {MAX_FALSE:.0%} false hits")
    for sname, srecs in splits.items():
        t, fh, ph = lowest_ok(srecs)
        if t is None:
            print(f"{sname:8s}: none up to 0.9999 (false hits at 0.9999: {rates(srecs, 0.9999)[0]:.1%})")
        else:
            print(f"{sname:8s}: t = {t:.4f}  false-hit {fh:.1%}  paraphrase hit {ph:.1%}")
    t, _, _ = lowest_ok(splits["tune"])
    if t is not None:
        fh, ph = rates(splits["holdout"], t)
        print(f"tune's t = {t:.4f} applied to holdout: false-hit {fh:.1%}  paraphrase hit {ph:.1%}")
        hits = [r for r in recs if r["same"] and r["cos"] >= t]
        print(f"paraphrases still hitting at t = {t:.4f} ({len(hits)}):")
        for r in sorted(hits, key=lambda r: -r["cos"]):
            print(f"  {r['id']} {r['cos']:.4f}  {r['a']!r} / {r['b']!r}")
    print()

    print(f"## Per negative kind alone (tune split): lowest t with <= {MAX_FALSE:.0%} false hits among that kind")
    pos = [r for r in splits["tune"] if r["same"]]
    for k in HARD + ("unrelated",):
        sub = [r for r in splits["tune"] if r["kind"] == k] + pos
        t, fh, ph = lowest_ok(sub)
        if t is None:
            print(f"{k:10s}: none up to 0.9999 (false hits at 0.9999: {rates(sub, 0.9999)[0]:.1%})")
        else:
            print(f"{k:10s}: t = {t:.4f}  paraphrase hit {ph:.1%}")
    print()

    print("## Hardest negatives (highest cosine, all splits)")
    for r in sorted((r for r in recs if not r["same"]), key=lambda r: -r["cos"])[:15]:
        print(f"  {r['id']} {r['kind']:9s} {r['cos']:.4f}  {r['a']!r} / {r['b']!r}")
    print("## Hardest paraphrases (lowest cosine, all splits)")
    for r in sorted((r for r in recs if r["same"]), key=lambda r: r["cos"])[:10]:
        print(f"  {r['id']} {r['cos']:.4f}  {r['a']!r} / {r['b']!r}")


if __name__ == "__main__":
    main()
