"""Benchmark: Qdrant local mode (qdrant-client's embedded store) — upserts and queries, batched vs one by one.

Measures, on one corpus:

- upsert seconds per 1,000 points: one point per request; batches of 256 committed point by point (what
  qdrant-client's local mode does by itself, the code before issue 12); batches of 256 with one SQLite
  commit per call (:func:`rerankeval.index.qdrant.store.upsert_chunks` today);
- query latency (mean, p50, p95) and throughput, one ``query_points`` call per query vs
  ``query_batch_points`` (:func:`rerankeval.index.qdrant.store.search_dense` / ``search_hybrid``), for the dense
  leg and for Qdrant's RRF hybrid; the runs of both ways must be identical (same points, scores, ties);
- the time to reopen the store (a warm notebook's first step).

Corpus: the default dataset's chunks when stage 01 has run and every chunk's embedding is in the cache
(real vectors, the BM25 index's sparse vectors and the judged queries); otherwise a synthetic corpus of the
same size (random unit vectors, random sparse vectors), so it runs from a fresh clone in about a minute.
Writes ``results/bench/dense.json``; the last line printed is the headline ``upsert_speedup=<x>``.

    python bench/dense.py [--dataset debian-manuals] [--n 3204] [--queries 60] [--sample 500] [--synthetic]
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

import numpy as np

from rerankeval.core import paths
from rerankeval.core.ioutil import atomic_write_json, sha256_text
from rerankeval.core.settings import load_settings
from rerankeval.index.qdrant import store as qs

NAME = "bench-0123456789abcdef"


def real_corpus(dataset: str) -> dict | None:
    """Chunks, cached vectors, sparse vectors and queries of ``dataset``, or None if anything is missing."""
    from rerankeval.corpus import contract as corpus
    from rerankeval.index import bm25
    from rerankeval.index.embed import Embedder, embeddings_root

    try:
        dp = paths.resolve_dataset(dataset, load_settings())
        texts, queries = corpus.chunk_texts(dp), corpus.load_queries(dp)
    except Exception as exc:  # noqa: BLE001 - no stage-01 output: fall back to synthetic data
        print(f"no stage-01 output for {dataset} ({type(exc).__name__}): using a synthetic corpus")
        return None
    ids = sorted(texts)
    emb = Embedder(progress=False, cache_root=embeddings_root(dp.roots.cache))
    want = [sha256_text(texts[i]) for i in ids] + [sha256_text(t) for t in queries.values()]
    have = emb.cache.lookup(set(want))
    if len(have) < len(set(want)):
        print(f"{len(set(want)) - len(have)} embeddings of {dataset} are not cached: using a synthetic corpus")
        return None
    index = bm25.BM25Index.build(ids, [texts[i] for i in ids])
    vecs = np.stack([have[h] for h in want]).astype(np.float32)
    return {
        "source": f"{dp.name} (cached embeddings)",
        "ids": ids,
        "dense": vecs[: len(ids)],
        "sparse": index.sparse_doc_vectors(),
        "qids": list(queries),
        "qvecs": vecs[len(ids) :],
        "qsparse": [index.sparse_query_vector(t) for t in queries.values()],
    }


def synthetic_corpus(n: int, n_queries: int, dim: int = 384, vocab: int = 20000, seed: int = 0) -> dict:
    """Random unit vectors and Zipf-like sparse vectors of realistic length (30 terms per chunk, 4 per query)."""
    rng = np.random.default_rng(seed)

    def unit(k: int) -> np.ndarray:
        v = rng.standard_normal((k, dim)).astype(np.float32)
        return v / np.linalg.norm(v, axis=1, keepdims=True)

    def sparse(k: int, terms: int) -> list[tuple[list[int], list[float]]]:
        out = []
        for _ in range(k):
            idx = np.unique(np.minimum(rng.zipf(1.3, terms), vocab) - 1)
            out.append((idx.tolist(), rng.uniform(0.5, 2.0, len(idx)).round(4).tolist()))
        return out

    return {
        "source": f"synthetic ({n} random unit vectors, dim {dim})",
        "ids": [f"c{i:06d}" for i in range(n)],
        "dense": unit(n),
        "sparse": sparse(n, 30),
        "qids": [f"q{i}" for i in range(n_queries)],
        "qvecs": unit(n_queries),
        "qsparse": sparse(n_queries, 4),
    }


def time_upserts(folder: Path, c: dict, sample: int) -> dict:
    """Seconds per 1,000 points for the three ways of writing points."""
    from qdrant_client import models

    ids, dense, sparse = c["ids"], c["dense"], c["sparse"]

    def point(i: int):
        vec = {qs.DENSE: dense[i].tolist()}
        if sparse[i][0]:
            vec[qs.SPARSE] = models.SparseVector(indices=sparse[i][0], values=sparse[i][1])
        return models.PointStruct(id=qs.point_id(ids[i]), vector=vec, payload={"chunk_id": ids[i], "unit_id": ids[i]})

    m = min(sample, len(ids))
    out = {}
    with qs.open_client(path=folder / "upsert", url="") as client:
        for way in ("one_by_one", "batched_commit_per_point", "batched_one_commit"):
            qs.ensure_collection(client, way, dense.shape[1])
            count = len(ids) if way == "batched_one_commit" else m
            t = time.perf_counter()
            if way == "one_by_one":
                for i in range(m):
                    client.upsert(way, points=[point(i)], wait=True)
            elif way == "batched_commit_per_point":
                for a in range(0, m, qs.UPSERT_BATCH):
                    client.upsert(way, points=[point(i) for i in range(a, min(a + qs.UPSERT_BATCH, m))], wait=True)
            else:
                qs.upsert_chunks(client, way, ids, ids, dense, sparse, progress=False)
            out[way] = {"points": count, "s_per_1k": round((time.perf_counter() - t) / count * 1000, 3)}
            print(f"upsert {way}: {out[way]['s_per_1k']:.2f} s per 1k points ({count} points)")
    out["speedup"] = round(out["batched_commit_per_point"]["s_per_1k"] / out["batched_one_commit"]["s_per_1k"], 1)
    return out


def _summary(seconds: list[float], total: float) -> dict:
    ms = sorted(s * 1000 for s in seconds)
    return {
        "queries": len(ms),
        "mean_ms": round(statistics.fmean(ms), 2),
        "p50_ms": round(ms[len(ms) // 2], 2),
        "p95_ms": round(ms[min(len(ms) - 1, int(0.95 * len(ms)))], 2),
        "qps": round(len(ms) / total, 1),
    }


def time_queries(store: Path, c: dict, leg_k: int = 100) -> dict:
    """One call per query vs batched calls, dense and Qdrant's hybrid; the runs must not differ.

    Each way starts from a freshly opened store: local mode re-normalises its stored vectors in place at
    every dense query, so scores can move in the last float32 bits with the queries run before (the
    same sequence of queries gives the same scores)."""
    id_to_chunk = {qs.point_id(i): i for i in c["ids"]}
    qids, qvecs, qsparse = c["qids"], c["qvecs"], c["qsparse"]

    def search(client, kind: str, i: slice):
        if kind == "dense":
            return qs.search_dense(client, NAME, qids[i], qvecs[i], leg_k, id_to_chunk)
        return qs.search_hybrid(
            client, NAME, qids[i], qvecs[i], qsparse[i], leg_k=leg_k, limit=2 * leg_k, id_to_chunk=id_to_chunk
        )

    out = {}
    for kind in ("dense", "hybrid"):
        one, lat = {}, []
        with qs.open_client(path=store, url="") as client:
            t0 = time.perf_counter()
            for i in range(len(qids)):
                t = time.perf_counter()
                one.update(search(client, kind, slice(i, i + 1)))
                lat.append(time.perf_counter() - t)
            total_one = time.perf_counter() - t0
        with qs.open_client(path=store, url="") as client:
            t0 = time.perf_counter()
            batch = search(client, kind, slice(None))
            total_batch = time.perf_counter() - t0
        if [list(batch[q].items()) for q in qids] != [list(one[q].items()) for q in qids]:
            raise AssertionError(f"{kind}: the batched run differs from the one-by-one run")
        out[kind] = {
            "one_by_one": _summary(lat, total_one),
            "batch": {
                "queries": len(qids),
                "mean_ms": round(total_batch / len(qids) * 1000, 2),
                "qps": round(len(qids) / total_batch, 1),
            },
            "identical_runs": True,
        }
        print(
            f"{kind} queries: one by one {out[kind]['one_by_one']['qps']} q/s "
            f"(p50 {out[kind]['one_by_one']['p50_ms']} ms), batched {out[kind]['batch']['qps']} q/s"
        )
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dataset", default=paths.DEFAULT_DATASET, help="dataset whose cached vectors to use")
    ap.add_argument("--synthetic", action="store_true", help="always use the synthetic corpus")
    ap.add_argument("--n", type=int, default=3204, help="synthetic corpus size (the default dataset's)")
    ap.add_argument("--queries", type=int, default=60, help="synthetic queries (the default dataset's)")
    ap.add_argument("--sample", type=int, default=500, help="points written by the two slow upsert ways")
    args = ap.parse_args(argv)

    c = None if args.synthetic else real_corpus(args.dataset)
    c = c or synthetic_corpus(args.n, args.queries)
    print(f"corpus: {c['source']}: {len(c['ids'])} points, {len(c['qids'])} queries")
    with tempfile.TemporaryDirectory(prefix="rerankeval-dense-") as tmp:
        folder = Path(tmp)
        upsert = time_upserts(folder, c, args.sample)
        with qs.open_client(path=folder / "store", url="") as client:
            qs.ensure_collection(client, NAME, c["dense"].shape[1])
            qs.upsert_chunks(client, NAME, c["ids"], c["ids"], c["dense"], c["sparse"], progress=False)
        t = time.perf_counter()
        with qs.open_client(path=folder / "store", url="") as client:
            reopen = time.perf_counter() - t
        queries = time_queries(folder / "store", c)
    out = {
        "corpus": c["source"],
        "points": len(c["ids"]),
        "dim": int(c["dense"].shape[1]),
        "queries": len(c["qids"]),
        "upsert": upsert,
        "reopen_s": round(reopen, 2),
        "query": queries,
    }
    path = atomic_write_json(paths.Roots.of(load_settings()).results / "bench" / "dense.json", out)
    print(f"reopen the store: {reopen:.2f} s; wrote {path}")
    print(f"upsert_speedup={upsert['speedup']}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
