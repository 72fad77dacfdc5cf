"""The synthetic corpora of ``bench/scale.py``: SciFact repeated and perturbed, text and vector alike; the
embedder that hands out their vectors; the dataset folder stage 02 reads (see ``bench/scale.py``)."""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np

from rerankeval.core import paths
from rerankeval.core.settings import load_settings
from rerankeval.corpus import beir

SEED = 12
SIGMA = 0.35  # noise norm relative to the unit vector, for copies r >= 1


def base_texts(folder: Path) -> tuple[list[str], list[str]]:
    """SciFact (ids, texts) in id order, texts joined as the chunk table joins them (title, newline, body)."""
    docs = beir.read_corpus(beir.find_corpus(folder))
    ids = sorted(docs)
    return ids, [f"{docs[i]['title']}\n{docs[i]['text']}" if docs[i]["title"] else docs[i]["text"] for i in ids]


def pick_base(texts: list[str], limit: int | None, cached: set[str]) -> list[int]:
    """Positions of the base documents: all, or ``limit`` of them, those already embedded first."""
    from rerankeval.core.ioutil import sha256_text

    if limit is None or limit >= len(texts):
        return list(range(len(texts)))
    order = sorted(range(len(texts)), key=lambda i: (sha256_text(texts[i]) not in cached, i))
    return sorted(order[:limit])


def perturb(words: list[str], donor: list[str], rng: np.random.Generator) -> list[str]:
    """Drop ~15% of the words, swap ~10% for the donor's, fuse ~2% with their neighbour (a new term)."""
    u = rng.random(len(words))
    picks = rng.integers(len(donor), size=len(words)) if donor else None
    out = []
    for j, w in enumerate(words):
        if u[j] < 0.15:
            continue
        if u[j] < 0.25 and donor:
            w = donor[picks[j]]
        elif u[j] < 0.27 and j + 1 < len(words):
            w = w + words[j + 1]
        out.append(w)
    return out


def synth_corpus(
    texts: list[str], vecs: np.ndarray, n: int, seed: int = SEED
) -> tuple[list[str], list[str], np.ndarray]:
    """``n`` documents: copy 0 of every base document as is, later copies perturbed (text and vector)."""
    rng = np.random.default_rng(seed)
    nb = len(texts)
    words = [t.split() for t in texts]
    ids, out = [], []
    dense = np.empty((n, vecs.shape[1]), dtype=np.float32)
    for j in range(n):
        src, copy = j % nb, j // nb
        ids.append(f"d{j:07d}")
        if copy == 0:
            out.append(texts[src])
            dense[j] = vecs[src]
            continue
        out.append(" ".join(perturb(words[src], words[int(rng.integers(nb))], rng)))
        v = vecs[src] + SIGMA * rng.standard_normal(vecs.shape[1]).astype(np.float32) / np.sqrt(vecs.shape[1])
        dense[j] = v / np.linalg.norm(v)
    return ids, out, dense


class DerivedEmbedder:
    """The embedder stages 02 and 03 are handed here: the real model's key, each text's vector looked up
    (the derived vectors of the synthetic chunks, the real ones of the queries), so nothing is encoded."""

    def __init__(self, key: str, model_id: str, table: dict[str, np.ndarray]) -> None:
        from rerankeval.index.embed import EncodeStats

        self.key, self.model_id, self._table = key, model_id, table
        self.stats = EncodeStats()

    def encode(self, texts, *, desc: str = "") -> np.ndarray:
        from rerankeval.index.embed import EncodeStats

        self.stats = EncodeStats(texts=len(texts), unique=len(texts), cached=len(texts))
        return np.stack([self._table[t] for t in texts]).astype(np.float32, copy=False)


def write_dataset(folder: Path, ids: list[str], docs: list[str], queries: dict[str, str]):
    """A dataset folder with stage 01's outputs written directly (one chunk per unit; every query judged)."""
    from rerankeval.core.ioutil import atomic_write_jsonl
    from rerankeval.core.runs import write_qrels

    folder.mkdir(parents=True)
    dp = paths.resolve_dataset(folder, load_settings())
    atomic_write_jsonl(
        dp.chunks,
        (
            {"chunk_id": c, "unit_id": c, "source": "synthetic", "page": 1, "start": 0, "title": "", "text": t}
            for c, t in zip(ids, docs, strict=True)
        ),
    )
    atomic_write_jsonl(dp.queries, [{"_id": q, "text": t, "slices": {}} for q, t in queries.items()])
    write_qrels({q: {ids[0]: 1} for q in queries}, dp.qrels)
    return dp


def prepare_base(folder: Path, out: Path, n_queries: int, base_docs: int | None) -> dict:
    """Encode (or read from the embedding cache) the base SciFact documents and the first judged queries."""
    from rerankeval.core.ioutil import sha256_text
    from rerankeval.index.embed import Embedder, embeddings_root

    _, texts = base_texts(folder)
    queries = beir.read_queries(folder / "queries.jsonl")
    judged = beir.read_qrels(folder / "qrels" / "test.tsv")
    qids = [q for q in sorted(queries) if q in judged][:n_queries]
    emb = Embedder(progress=True, cache_root=embeddings_root(paths.Roots.of(load_settings()).cache))
    cached = set(emb.cache.lookup({sha256_text(t) for t in texts}))
    texts = [texts[i] for i in pick_base(texts, base_docs, cached)]
    t = time.perf_counter()
    vecs = emb.encode(texts, desc="embedding SciFact (once, cached)")
    doc_stats = emb.stats
    qvecs = emb.encode([queries[q]["text"] for q in qids], desc="embedding queries")
    np.savez(
        out,
        texts=np.asarray(texts),
        vectors=vecs,
        qids=np.asarray(qids),
        qtexts=np.asarray([queries[q]["text"] for q in qids]),
        qvectors=qvecs,
    )
    return {
        "base_docs": len(texts),
        "queries": len(qids),
        "dim": int(vecs.shape[1]),
        "encode_seconds": time.perf_counter() - t,
        "docs_encoded": doc_stats.encoded,
        "docs_cached": doc_stats.cached,
    }
