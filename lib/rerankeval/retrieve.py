"""Stages 02 (build indexes) and 03 (retrieve): every retrieval variant behind one signature.

Build (notebook 02)::

    info = build_indexes(dp)            # BM25 on disk, embeddings cached, Qdrant collection filled

Retrieve (notebook 03)::

    with Retriever(dp) as r:
        res = r.search("hybrid", queries, leg_k=100)   # -> Retrieval(variant, run, chunk_run, ...)
    write_runs(dp, res)

or in one call ``retrieve(dp, "hybrid")`` (loads the judged queries, searches, writes both run files).

Variants (all chunk-level first, then mapped to relevance units with :func:`rerankeval.runs.to_units`):

- ``vector``: dense cosine top-``leg_k`` chunks from Qdrant;
- ``bm25``: BM25 (:mod:`rerankeval.bm25`, fast path, rank-bm25 statistics) top-``leg_k`` chunks;
- ``hybrid``: client-side Reciprocal Rank Fusion (Cormack, Clarke & Buettcher, SIGIR 2009) of the two
  legs, ``sum 1/(rrf_k + rank)`` with 1-based ranks and ``rrf_k = 60``; each leg is mapped to units
  *before* fusing, so a page/document never splits its credit across chunks (ties: fused score, best
  single-leg rank, id; see :mod:`rerankeval.fusion`);
- ``qdrant_hybrid``: the same fusion done by Qdrant's Query API (prefetch dense + native sparse BM25
  with Qdrant's IDF, ``RrfQuery`` with ``k = rrf_k + 1``); Qdrant fuses chunks, so units are mapped after
  fusing (identical to ``hybrid``'s mapping when chunk = unit, as in BEIR);
- ``cross_encoder`` (optional): the top ``pool_k`` units of the ``hybrid`` run reordered by a
  sentence-transformers CrossEncoder scoring (query, the unit's best chunk); the rest keep their fused
  order (the same pool contract as the LLM reranker of stage 04).

Budgets, equal for every variant: ``leg_k`` chunks per leg (so any metric at a cutoff <= ``leg_k``
compares equal budgets); ``pool_k`` fused candidates go to a reranker; ``final_k`` is the cutoff of the
headline metric (nDCG@final_k). Runs are written at full depth, never truncated to ``pool_k`` or
``final_k``: single legs hold up to ``leg_k`` chunks/units, fused runs the union of both legs.
"""

from __future__ import annotations

import json
import math
import shutil
import time
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path

import pandas as pd

from . import bm25 as bm25mod
from . import corpus, qdrant_store
from .corpus import StageMissing
from .embed import Embedder
from .fusion import RRF_K, rrf
from .ioutil import atomic_write_json, sha256_json
from .paths import DatasetPaths
from .runs import Run, best_chunks, ranked, to_units, write_trec

VARIANTS = ("vector", "bm25", "hybrid", "qdrant_hybrid", "cross_encoder")
BASE_VARIANTS = ("vector", "bm25", "hybrid", "qdrant_hybrid")
MANIFEST_VERSION = 2


def index_corpus_hash(texts: Mapping[str, str], unit_of: Mapping[str, str]) -> str:
    """Hash of what the indexes depend on: every chunk's id, unit and indexed text."""
    return sha256_json([[c, unit_of[c], texts[c]] for c in sorted(texts)])


def manifest_path(dp: DatasetPaths) -> Path:
    return dp.index_dir / "manifest.json"


@dataclass
class IndexInfo:
    """What :func:`build_indexes` built (also ``dp.index_dir/manifest.json``)."""

    dataset: str
    collection: str
    qdrant: str  # where the collection lives (embedded path or server URL)
    model_source: str | None  # None = bundled all-MiniLM-L6-v2, else the local folder / name given
    model_id: str
    model_key: str
    dim: int
    corpus_hash: str
    n_chunks: int
    bm25_dir: str
    bm25_params: dict
    analyzer: dict
    vocab_size: int
    actions: dict = field(default_factory=dict)  # step -> what happened ("built", "loaded", ...)
    seconds: dict = field(default_factory=dict)  # step -> wall seconds
    version: int = MANIFEST_VERSION

    @property
    def cold(self) -> bool:
        """True if anything had to be computed (not just found in caches)."""
        return any(a not in ("loaded", "reused", "cached") for a in self.actions.values())

    def timings(self) -> pd.DataFrame:
        return pd.DataFrame(
            [{"step": k, "action": self.actions.get(k, ""), "seconds": round(v, 2)}
             for k, v in self.seconds.items()]
        )


def build_indexes(
    dp: DatasetPaths,
    *,
    model: str | None = None,
    k1: float = 1.2,
    b: float = 0.75,
    force: bool = False,
    embedder: Embedder | None = None,
    progress: bool = True,
) -> IndexInfo:
    """Build (or find up to date) the BM25 index, the embeddings and the Qdrant collection of ``dp``.

    Everything is keyed by content: a second call with the same corpus and parameters computes nothing
    (``force=True`` rebuilds BM25 and re-upserts every point; embeddings still come from the cache).
    """
    t_all = time.perf_counter()
    actions: dict[str, str] = {}
    seconds: dict[str, float] = {}

    t = time.perf_counter()
    chunks = corpus.load_chunks(dp)
    texts = corpus.chunk_texts(dp)
    unit_of = dict(zip(chunks.chunk_id, chunks.unit_id, strict=True))
    ids = sorted(texts)
    chash = index_corpus_hash(texts, unit_of)
    seconds["read chunks"] = time.perf_counter() - t
    actions["read chunks"] = "loaded"

    t = time.perf_counter()
    params = bm25mod.BM25Params(k1=k1, b=b)
    analyzer = bm25mod.Analyzer()
    index, built = bm25mod.build_or_load(dp.index_dir / "bm25", ids, [texts[i] for i in ids],
                                         corpus_hash=chash, params=params, analyzer=analyzer, force=force)
    bm25_key = bm25mod.index_key(chash, params, analyzer)
    for other in (dp.index_dir / "bm25").iterdir():  # indexes of older corpora or parameters
        if other.is_dir() and other.name != bm25_key:
            shutil.rmtree(other, ignore_errors=True)
    seconds["bm25"] = time.perf_counter() - t
    actions["bm25"] = "built" if built else "loaded"

    emb = embedder or Embedder(model, progress=progress)
    name = qdrant_store.collection_name(dp.name, model_key=emb.key, corpus_hash=chash, bm25_key=bm25_key)
    old = _read_manifest(dp)
    with qdrant_store.open_client(dp) as client:
        loc = qdrant_store.location(dp)
        complete = qdrant_store.point_count(client, name) == len(ids) and old is not None and old.get(
            "collection") == name
        if complete and not force:
            seconds["embeddings"] = 0.0
            actions["embeddings"] = "reused"
            seconds["qdrant"] = 0.0
            actions["qdrant"] = "reused"
            dim = int(old["dim"])
        else:
            t = time.perf_counter()
            vectors = emb.encode([texts[i] for i in ids], desc=f"embedding {dp.name}")
            seconds["embeddings"] = time.perf_counter() - t
            st = emb.stats
            actions["embeddings"] = (
                "cached" if st.encoded == 0 else f"encoded {st.encoded}, cached {st.cached}")
            dim = int(vectors.shape[1])
            t = time.perf_counter()
            qdrant_store.ensure_collection(client, name, dim)
            qdrant_store.upsert_chunks(client, name, ids, [unit_of[i] for i in ids], vectors,
                                       index.sparse_doc_vectors(), progress=progress)
            n = qdrant_store.point_count(client, name)
            if n != len(ids):
                raise RuntimeError(f"Qdrant collection {name} holds {n} points after upserting {len(ids)}")
            seconds["qdrant"] = time.perf_counter() - t
            actions["qdrant"] = "upserted"
        stale = qdrant_store.drop_stale(client, dp.name, keep=name)
        if stale:
            actions["dropped stale collections"] = ", ".join(stale)
    seconds["total"] = time.perf_counter() - t_all
    info = IndexInfo(
        dataset=dp.name,
        collection=name,
        qdrant=loc.describe(),
        model_source=None if model is None else str(model),
        model_id=emb.model_id,
        model_key=emb.key,
        dim=dim,
        corpus_hash=chash,
        n_chunks=len(ids),
        bm25_dir=str((dp.index_dir / "bm25" / bm25_key).relative_to(dp.root)),
        bm25_params=asdict(params),
        analyzer=analyzer.spec(),
        vocab_size=len(index.vocab),
        actions=actions,
        seconds=seconds,
    )
    atomic_write_json(manifest_path(dp), asdict(info))
    return info


def _read_manifest(dp: DatasetPaths) -> dict | None:
    try:
        return json.loads(manifest_path(dp).read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError):
        return None


def load_index_info(dp: DatasetPaths) -> IndexInfo:
    """The manifest of the indexes, checked against the current chunk table."""
    m = _read_manifest(dp)
    if m is None:
        raise StageMissing(f"{manifest_path(dp)} is missing: run the 02-build-indexes stage first.")
    if m.get("version") != MANIFEST_VERSION:
        raise StageMissing(f"{manifest_path(dp)} was written by another version of the index stage: "
                           "re-run the 02-build-indexes stage.")
    info = IndexInfo(**m)
    chunks = corpus.load_chunks(dp)
    now = index_corpus_hash(corpus.chunk_texts(dp), dict(zip(chunks.chunk_id, chunks.unit_id, strict=True)))
    if now != info.corpus_hash:
        raise StageMissing(
            f"the indexes in {dp.index_dir} were built from another version of the chunk table: "
            "re-run the 02-build-indexes stage."
        )
    return info


@dataclass
class Retrieval:
    """One variant's result: ``run`` over relevance units and ``chunk_run`` over chunks, both full depth."""

    variant: str
    run: Run
    chunk_run: Run
    seconds: float
    params: dict


class Retriever:
    """The built indexes of one dataset, ready to search; use as a context manager (closes Qdrant).

    ``search(variant, queries, *, leg_k, pool_k, rrf_k, weights, cross_encoder)`` is the one entry point
    for every variant. Legs are memoised per (leg, leg_k, queries), so hybrids reuse the single legs.
    """

    def __init__(self, dp: DatasetPaths, *, embedder: Embedder | None = None, progress: bool = True):
        self.dp = dp
        self.info = load_index_info(dp)
        self.texts = corpus.chunk_texts(dp)
        self.unit_of = corpus.unit_of(dp)
        self.bm25 = bm25mod.BM25Index.load(dp.root / self.info.bm25_dir)
        self.embedder = embedder or Embedder(self.info.model_source, progress=progress)
        if self.embedder.key != self.info.model_key:
            raise ValueError(
                f"the embedding model {self.embedder.model_id!r} is not the one the index was built with "
                f"({self.info.model_id!r}); rebuild the indexes or pass the same model"
            )
        self.progress = progress
        self._id_to_chunk = {qdrant_store.point_id(c): c for c in self.texts}
        self._exact = bool(qdrant_store.location(dp).url)  # servers: exact dense search, not HNSW
        self._client = None
        self._client_cm = None
        self._memo: dict = {}

    # -- resources --
    @property
    def client(self):
        if self._client is None:
            self._client_cm = qdrant_store.open_client(self.dp)
            self._client = self._client_cm.__enter__()
        return self._client

    def close(self) -> None:
        if self._client_cm is not None:
            self._client_cm.__exit__(None, None, None)
        self._client = self._client_cm = None

    def __enter__(self) -> Retriever:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # -- legs (chunk level) --
    def _key(self, queries: Mapping[str, str]) -> str:
        return sha256_json(sorted(queries.items()))

    def _qvecs(self, queries: Mapping[str, str]):
        key = ("qvec", self._key(queries))
        if key not in self._memo:
            self._memo[key] = self.embedder.encode(list(queries.values()), desc="embedding queries")
        return self._memo[key]

    def dense_leg(self, queries: Mapping[str, str], k: int) -> Run:
        key = ("dense", k, self._key(queries))
        if key not in self._memo:
            self._memo[key] = qdrant_store.search_dense(self.client, self.info.collection, list(queries),
                                                        self._qvecs(queries), k, self._id_to_chunk,
                                                        exact=self._exact)
        return self._memo[key]

    def bm25_leg(self, queries: Mapping[str, str], k: int) -> Run:
        key = ("bm25", k, self._key(queries))
        if key not in self._memo:
            self._memo[key] = self.bm25.search(queries, k)
        return self._memo[key]

    def sparse_leg(self, queries: Mapping[str, str], k: int) -> Run:
        """Qdrant's native sparse BM25 leg (diagnostics: how it differs from :meth:`bm25_leg`)."""
        key = ("sparse", k, self._key(queries))
        if key not in self._memo:
            sparse = [self.bm25.sparse_query_vector(t) for t in queries.values()]
            self._memo[key] = qdrant_store.search_sparse(self.client, self.info.collection, list(queries),
                                                         sparse, k, self._id_to_chunk)
        return self._memo[key]

    # -- the one entry point --
    def search(
        self,
        variant: str,
        queries: Mapping[str, str],
        *,
        leg_k: int = 100,
        pool_k: int = 20,
        rrf_k: int = RRF_K,
        weights: Sequence[float] | None = None,
        cross_encoder=None,
    ) -> Retrieval:
        """Run ``variant`` for ``queries`` (qid -> text).

        ``leg_k``: chunks per leg; ``pool_k``: hybrid units the ``cross_encoder`` variant reorders;
        ``rrf_k``: the RRF constant (paper convention); ``weights`` = (dense, bm25) for the hybrids;
        ``cross_encoder``: a loaded ``sentence_transformers.CrossEncoder`` (or a local path/name).
        """
        if variant not in VARIANTS:
            raise ValueError(f"unknown variant {variant!r}; choose from {', '.join(VARIANTS)}")
        if leg_k < 1 or pool_k < 1:
            raise ValueError("leg_k and pool_k must be >= 1")
        t0 = time.perf_counter()
        queries = dict(queries)
        if variant == "vector":
            chunk_run = self.dense_leg(queries, leg_k)
            run = to_units(chunk_run, self.unit_of)
        elif variant == "bm25":
            chunk_run = self.bm25_leg(queries, leg_k)
            run = to_units(chunk_run, self.unit_of)
        elif variant == "hybrid":
            dense, lex = self.dense_leg(queries, leg_k), self.bm25_leg(queries, leg_k)
            chunk_run = rrf([dense, lex], k=rrf_k, weights=weights)
            run = rrf([to_units(dense, self.unit_of), to_units(lex, self.unit_of)], k=rrf_k, weights=weights)
        elif variant == "qdrant_hybrid":
            sparse = [self.bm25.sparse_query_vector(t) for t in queries.values()]
            chunk_run = qdrant_store.search_hybrid(
                self.client, self.info.collection, list(queries), self._qvecs(queries), sparse,
                leg_k=leg_k, limit=2 * leg_k, id_to_chunk=self._id_to_chunk, rrf_k=rrf_k, weights=weights,
                exact=self._exact)
            run = to_units(chunk_run, self.unit_of)
        else:  # cross_encoder
            from . import cross_encoder as ce

            model = cross_encoder
            if not hasattr(model, "predict"):
                model = ce.load_cross_encoder(cross_encoder)
            base = self.search("hybrid", queries, leg_k=leg_k, rrf_k=rrf_k, weights=weights)
            best = best_chunks(base.chunk_run, self.unit_of)
            heads = {q: [best[q][u] for u in list(base.run[q])[:pool_k]] for q in base.run}
            scored = ce.rerank(model, queries, heads, self.texts, progress=self.progress)
            run, chunk_run = {}, {}
            for q in base.run:
                head = list(scored[q])
                in_head = set(head)
                units = [self.unit_of[c] for c in head] + list(base.run[q])[len(head):]
                chunks = head + [c for c in base.chunk_run[q] if c not in in_head]
                run[q] = _rank_scores(units)
                chunk_run[q] = _rank_scores(chunks)
        chunk_run = {q: chunk_run.get(q, {}) for q in queries}  # every query, possibly with an empty list
        run = {q: run.get(q, {}) for q in queries}
        params = {"leg_k": leg_k, "pool_k": pool_k, "rrf_k": rrf_k,
                  "weights": list(weights) if weights else None}
        return Retrieval(variant, run, chunk_run, time.perf_counter() - t0, params)


def _rank_scores(items: Sequence[str]) -> dict[str, float]:
    """A ranking as a run: score = n - rank + 1 (the order is what matters; scores strictly decrease)."""
    n = len(items)
    return {d: float(n - i) for i, d in enumerate(items)}


def write_runs(dp: DatasetPaths, res: Retrieval) -> tuple[Path, Path]:
    """Write ``dp.run_file(variant)`` (units) and ``dp.chunk_run_file(variant)`` (chunks), full depth,
    and the variant's parameters to ``dp.stage_dir("retrieve")/<variant>.json``."""
    a = write_trec(res.run, dp.run_file(res.variant), tag=res.variant)
    b = write_trec(res.chunk_run, dp.chunk_run_file(res.variant), tag=res.variant)
    atomic_write_json(dp.stage_dir("retrieve") / f"{res.variant}.json", {
        "variant": res.variant, **res.params, "rrf_formula": "sum w / (rrf_k + rank), rank 1-based",
        "qdrant_rrf_k": res.params["rrf_k"] + 1 if res.variant == "qdrant_hybrid" else None,
        "seconds": round(res.seconds, 3), "queries": len(res.run),
    })
    return a, b


def retrieve(
    dp: DatasetPaths,
    variant: str,
    queries: Mapping[str, str] | None = None,
    *,
    leg_k: int = 100,
    pool_k: int = 20,
    rrf_k: int = RRF_K,
    weights: Sequence[float] | None = None,
    cross_encoder=None,
    write: bool = True,
    retriever: Retriever | None = None,
) -> Retrieval:
    """One call per variant: search ``queries`` (default: the judged queries of ``dp``) and write the runs."""
    queries = corpus.load_queries(dp) if queries is None else queries
    if retriever is None:
        with Retriever(dp) as r:
            res = r.search(variant, queries, leg_k=leg_k, pool_k=pool_k, rrf_k=rrf_k, weights=weights,
                           cross_encoder=cross_encoder)
    else:
        res = retriever.search(variant, queries, leg_k=leg_k, pool_k=pool_k, rrf_k=rrf_k, weights=weights,
                               cross_encoder=cross_encoder)
    if write:
        write_runs(dp, res)
    return res


# ---- quick looks for notebook 03 (stage 05 does the real evaluation) ----
def evaluate_runs(dp: DatasetPaths, variants: Sequence[str], *, final_k: int = 10, recall_k: int = 100,
                  ) -> pd.DataFrame:
    """nDCG@final_k and Recall@recall_k of the written unit-level run files, via ir_measures."""
    import ir_measures

    qrels = corpus.load_qrels(dp)
    ms = [ir_measures.parse_measure(f"nDCG@{final_k}"), ir_measures.parse_measure(f"R@{recall_k}")]
    rows = []
    for v in variants:
        path = dp.run_file(v)
        if not path.exists():
            continue
        agg = ir_measures.calc_aggregate(ms, qrels, ir_measures.read_trec_run(str(path)))
        rows.append({"variant": v, **{str(m): float(agg[m]) for m in ms}})
    return pd.DataFrame(rows)


def per_query_ndcg(dp: DatasetPaths, variant: str, k: int = 10) -> dict[str, float]:
    """nDCG@k per judged query of the written run (0 for a query with no results)."""
    import ir_measures

    m = ir_measures.parse_measure(f"nDCG@{k}")
    qrels = corpus.load_qrels(dp)
    out = {q: 0.0 for q in qrels}
    for r in ir_measures.iter_calc([m], qrels, ir_measures.read_trec_run(str(dp.run_file(variant)))):
        out[r.query_id] = float(r.value)
    return out


def overlap_at_k(a: Run, b: Run, k: int) -> dict[str, float]:
    """Per query |top-k(a) ∩ top-k(b)| / k (1.0 = same documents, any order)."""
    out = {}
    for q in sorted(set(a) | set(b)):
        ta = {d for d, _ in ranked(a.get(q, {}))[:k]}
        tb = {d for d, _ in ranked(b.get(q, {}))[:k]}
        out[q] = len(ta & tb) / k if k else math.nan
    return out
