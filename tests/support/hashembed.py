"""A deterministic stand-in for the sentence embedder and a small chunk table with queries (and the dataset folder
that holds them), for the tests of the Qdrant backends (index.qdrant), stage 02's face and the quiet console (also
imported by a child script)."""

from __future__ import annotations

import hashlib
from pathlib import Path

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


def hash_dataset(folder: Path):
    """A new dataset folder holding :data:`CHUNKS` (in id order, the page from the unit id) and :data:`QUERIES`, each
    judged on page 1, as stage 01 leaves them."""
    from handmade import dataset_at, write_chunks, write_questions
    from rerankeval.core.runs import write_qrels

    dp = dataset_at(folder)
    write_chunks(dp, [(c, u, int(u.split("#p")[1]), t) for c, u, t in sorted(CHUNKS)])
    write_questions(dp, QUERIES)
    write_qrels({q: {"m.pdf#p1": 1} for q in QUERIES}, dp.qrels)
    return dp
