"""Stage 03 (retrieve): every retrieval variant behind one signature.

Retrieve (notebook 03)::

    with Retriever(dp) as r:
        res = r.search("hybrid", queries, leg_k=100)   # -> Retrieval(variant, run, chunk_run, ...)
    write_runs(dp, res)

or in one call ``retrieve(dp, "hybrid")`` (loads the judged queries, searches, writes both run files).
The indexes come from stage 02 (:mod:`rerankeval.index.build`); the variants are classes in the registry of
:mod:`rerankeval.retrieve.variants` (one shape: a name, its parameters, ``search(queries) -> Run``).

Variants (all chunk-level first, then mapped to relevance units with :func:`rerankeval.core.runs.to_units`):

- ``vector``: dense cosine top-``leg_k`` chunks from Qdrant;
- ``bm25``: BM25 (:mod:`rerankeval.index.bm25`, fast path, rank-bm25 statistics) top-``leg_k`` chunks;
- ``hybrid``: client-side Reciprocal Rank Fusion (Cormack, Clarke & Buettcher, SIGIR 2009) of the two
  legs, ``sum 1/(rrf_k + rank)`` with 1-based ranks and ``rrf_k = 60``; each leg is mapped to units
  *before* fusing, so a page/document never splits its credit across chunks (ties: fused score, best
  single-leg rank, id; see :mod:`rerankeval.retrieve.fusion`);
- ``qdrant_hybrid``: the same fusion done by Qdrant's Query API (prefetch dense + native sparse BM25
  with Qdrant's IDF, ``RrfQuery`` with ``k = rrf_k + 1``); Qdrant fuses chunks, so units are mapped after
  fusing (identical to ``hybrid``'s mapping when chunk = unit, as in BEIR);
- ``hybrid_combsum``, ``hybrid_combmnz``, ``hybrid_dbsf`` (fusion alternatives, not run by default): ``hybrid``'s
  legs and unit mapping fused by min-max CombSUM/CombMNZ or DBSF (:func:`rerankeval.retrieve.fusion.fuse`);
  ``qdrant_dbsf``: ``qdrant_hybrid`` with Qdrant's own DBSF (``docs/CONVENTIONS.md#fusion``);
- ``cross_encoder`` (optional): the top ``pool_k`` units of the ``hybrid`` run reordered by a
  sentence-transformers CrossEncoder scoring (query, the unit's best chunk); the rest keep their fused
  order (the same pool contract as the LLM reranker of stage 04).

Budgets, equal for every variant: ``leg_k`` chunks per leg (so any metric at a cutoff <= ``leg_k``
compares equal budgets); ``pool_k`` fused candidates go to a reranker; ``final_k`` is the cutoff of the
headline metric (nDCG@final_k). Runs are written at full depth, never truncated to ``pool_k`` or
``final_k``: single legs hold up to ``leg_k`` chunks/units, fused runs the union of both legs.
"""

from __future__ import annotations

import math
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from rerankeval.core.ioutil import atomic_write_json, sha256_json
from rerankeval.core.paths import DatasetPaths
from rerankeval.core.runs import Run, ranked, write_trec
from rerankeval.corpus import contract as corpus
from rerankeval.corpus.contract import StageMissing
from rerankeval.index import bm25 as bm25mod
from rerankeval.index.build import load_index_info
from rerankeval.index.embed import Embedder
from rerankeval.index.qdrant import edge as qdrant_edge
from rerankeval.index.qdrant import store as qdrant_store
from rerankeval.retrieve import variants
from rerankeval.retrieve.fusion import RRF_K

VARIANTS = variants.names(variants.RETRIEVE)  # every variant stage 03 can search
BASE_VARIANTS = (variants.VECTOR, variants.BM25, variants.HYBRID, variants.QDRANT_HYBRID)  # need no model


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
    for every variant registered in :mod:`rerankeval.retrieve.variants`; the variants search through the legs below.
    Legs are memoised per (leg, leg_k, queries), so hybrids reuse the single legs. A closed retriever
    reopens Qdrant on its next search (local mode then reloads the stored vectors from disk).
    The Qdrant legs search the backend the index manifest records (``client`` or ``edge``); it must be the
    configured one (``RERANKEVAL_QDRANT_BACKEND``). Dense search is exact on a server and on edge (local
    mode is always exact), so the backends return the same runs.
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
        self._edge = _check_backend(self.info.backend) == qdrant_edge.EDGE
        # servers and edge: exact dense search, not HNSW
        self._exact = self._edge or bool(qdrant_store.location(dp).url)
        self._client = None
        self._client_cm = None
        self._memo: dict = {}

    # -- resources --
    @property
    def client(self):
        """The open store: a ``QdrantClient`` (backend ``client``) or an ``EdgeShard`` (backend ``edge``)."""
        if self._client is None:
            if self._edge:
                path = qdrant_edge.shard_path(self.dp, self.info.collection)
                self._client_cm = qdrant_edge.open_shard(path, self.info.dim)
            else:
                self._client_cm = qdrant_store.open_client(self.dp)
            self._client = self._client_cm.__enter__()
        return self._client

    def _store(self):
        """The backend's module and the leading arguments of its search functions."""
        if self._edge:
            return qdrant_edge, (self.client,)
        return qdrant_store, (self.client, self.info.collection)

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
            mod, head = self._store()
            self._memo[key] = mod.search_dense(*head, list(queries), self._qvecs(queries), k, self._id_to_chunk,
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
            mod, head = self._store()
            self._memo[key] = mod.search_sparse(*head, list(queries), sparse, k, self._id_to_chunk)
        return self._memo[key]

    def qdrant_fused(self, queries: Mapping[str, str], *, leg_k: int, limit: int, rrf_k: int = RRF_K,
                     weights: Sequence[float] | None = None, fusion: str = "rrf") -> Run:
        """Qdrant's own fusion (``rrf`` or ``dbsf``) of its dense and native sparse legs (``leg_k`` each),
        top ``limit`` chunks."""
        sparse = [self.bm25.sparse_query_vector(t) for t in queries.values()]
        mod, head = self._store()
        return mod.search_hybrid(
            *head, list(queries), self._qvecs(queries), sparse, leg_k=leg_k, limit=limit,
            id_to_chunk=self._id_to_chunk, rrf_k=rrf_k, weights=weights, exact=self._exact, fusion=fusion)

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
        stage = variants.get(variant).stage
        if stage != variants.RETRIEVE:
            raise ValueError(f"variant {variant!r} is produced by the {stage} stage, not "
                             f"searched here; stage 03 searches {', '.join(VARIANTS)}")
        if leg_k < 1 or pool_k < 1:
            raise ValueError("leg_k and pool_k must be >= 1")
        t0 = time.perf_counter()
        queries = dict(queries)
        params = variants.Params(leg_k=leg_k, pool_k=pool_k, rrf_k=rrf_k, weights=weights)
        found = variants.create(variant, self, params, cross_encoder=cross_encoder).search_runs(queries)
        run, chunk_run = variants.complete(found, queries)
        return Retrieval(variant, run, chunk_run, time.perf_counter() - t0, params.record())


def _check_backend(built: str) -> str:
    """``built`` (the manifest's backend) if it is the configured one, else an error saying to re-run 02."""
    configured = qdrant_edge.backend()
    if configured != built:
        raise StageMissing(
            f"the Qdrant collection was built by the {built!r} backend but RERANKEVAL_QDRANT_BACKEND is "
            f"{configured!r}: re-run the 02-build-indexes stage (it fills the {configured!r} store), or set "
            f"RERANKEVAL_QDRANT_BACKEND={built}.")
    return built


def write_runs(dp: DatasetPaths, res: Retrieval) -> tuple[Path, Path]:
    """Write ``dp.run_file(variant)`` (units) and ``dp.chunk_run_file(variant)`` (chunks), full depth,
    and the variant's parameters to ``dp.stage_dir("retrieve")/<variant>.json``."""
    a = write_trec(res.run, dp.run_file(res.variant), tag=res.variant)
    b = write_trec(res.chunk_run, dp.chunk_run_file(res.variant), tag=res.variant)
    record = variants.REGISTRY.get(res.variant, variants.Variant).record(res.params)
    atomic_write_json(dp.stage_dir("retrieve") / f"{res.variant}.json", {
        "variant": res.variant, **res.params, **record, "seconds": round(res.seconds, 3), "queries": len(res.run),
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


def overlap_at_k(a: Run, b: Run, k: int) -> dict[str, float]:
    """Per query |top-k(a) ∩ top-k(b)| / k (1.0 = same documents, any order)."""
    out = {}
    for q in sorted(set(a) | set(b)):
        ta = {d for d, _ in ranked(a.get(q, {}))[:k]}
        tb = {d for d, _ in ranked(b.get(q, {}))[:k]}
        out[q] = len(ta & tb) / k if k else math.nan
    return out
