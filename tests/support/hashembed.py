"""A deterministic stand-in for the sentence embedder and a small chunk table with queries, for the tests of the
Qdrant backends (index.qdrant), stage 02's face and the quiet console (also imported by a child script)."""

from __future__ import annotations

import hashlib

import numpy as np

from rerankeval.index.embed import EncodeStats

DIM = 16
CHUNKS = [
    (f"m.pdf#p{i}:0", f"m.pdf#p{i}", f"page {i} about topic{i % 4} and word{i % 7} or term{i % 3}")
    for i in range(1, 41)
]
QUERIES = {f"q{i}": f"topic{i % 4} word{i % 7}" for i in range(12)}


class HashEmbedder:
    """A deterministic stand-in for the sentence embedder: a unit vector seeded by each text's hash."""

    key = "hash-embedder-test"
    model_id = "hash-embedder"

    def __init__(self) -> None:
        self.stats = EncodeStats()

    def encode(self, texts, *, desc: str = "") -> np.ndarray:
        rows = [
            np.random.default_rng(int(hashlib.sha256(t.encode()).hexdigest()[:12], 16)).normal(size=DIM) for t in texts
        ]
        out = np.asarray(rows, dtype=np.float32).reshape(len(texts), DIM)
        self.stats = EncodeStats(texts=len(texts), unique=len(set(texts)), encoded=len(texts))
        return out / np.linalg.norm(out, axis=1, keepdims=True)
