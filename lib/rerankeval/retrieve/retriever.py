"""The built indexes of one dataset, ready to search (:class:`Retriever`), and what a search returns
(:class:`Retrieval`); stage 03's variants, budgets and conventions are described in :mod:`rerankeval.retrieve.stage`.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from rerankeval.core import names
from rerankeval.core.ioutil import sha256_json
from rerankeval.core.paths import DatasetPaths
from rerankeval.core.runs import Run
from rerankeval.core.settings import Settings
from rerankeval.corpus import contract as corpus
from rerankeval.corpus.contract import StageMissing
from rerankeval.retrieve import cross_encoder as ce
from rerankeval.retrieve import variants

if TYPE_CHECKING:  # the indexes' modules (BM25 with scipy, Qdrant, the embedder) are imported when a Retriever opens
    from rerankeval.index.embed import CachedEncoder
    from rerankeval.retrieve.reformulate import Reformulate

REWRITES = {names.HYBRID_REFORMULATE: names.HYBRID}  # variant -> the variant a query-rewriting step follows
VARIANTS = (*variants.names(), *REWRITES)  # every variant stage 03 can search (names.names(names.RETRIEVE))
BASE_VARIANTS = (names.VECTOR, names.BM25, names.HYBRID, names.QDRANT_HYBRID)  # need no model
MODEL_LOAD = "model_load_seconds"  # a record's one-off model load (evaluate.costs.MODEL_LOAD reads the same key)


@dataclass
class Retrieval:
    """One variant's result: ``run`` over relevance units and ``chunk_run`` over chunks, both full depth; ``params``:
    the budget, and :data:`MODEL_LOAD` when the search loaded the embedding model (inside its ``seconds``)."""

    variant: str
    run: Run
    chunk_run: Run
    seconds: float
    params: dict


class Retriever:
    """The built indexes of one dataset, ready to search; use as a context manager (closes Qdrant).

    ``settings`` (:class:`~rerankeval.core.settings.Settings`, given by the caller: nothing here reads the
    environment) say whether dense search is forced exact and which cross-encoder is configured.
    ``search(variant, queries, *, leg_k, pool_k, rrf_k, weights, cross_encoder, rewrite)`` is the one entry point
    for every variant registered in :mod:`rerankeval.retrieve.variants` and each one of :data:`REWRITES` (a
    query-rewriting step after a registered one); the variants search through the legs below (a
    :class:`~rerankeval.retrieve.source.Source`).
    Legs are memoised per (leg, leg_k, queries), so hybrids reuse the single legs. A closed retriever
    reopens Qdrant on its next search (local mode then reloads the stored vectors from disk).
    The Qdrant legs search the backend the index manifest records (``client`` or ``edge``); it must be the
    configured one (``RERANKEVAL_QDRANT_BACKEND``). Dense search is exact on a server and in local mode; on
    edge exact below Qdrant's indexing threshold and HNSW above it (recall@10 in the manifest's ``dense_search``),
    so on every dataset here the backends return the same runs (``bench/backend_parity.py``).
    """

    def __init__(
        self, dp: DatasetPaths, settings: Settings, *, embedder: CachedEncoder | None = None, progress: bool = True
    ):
        from rerankeval.index import bm25 as bm25mod
        from rerankeval.index.encoder import check_embedder, open_embedder
        from rerankeval.index.manifest import load_index_info
        from rerankeval.index.qdrant import edge as qdrant_edge
        from rerankeval.index.qdrant import store as qdrant_store

        self.dp, self.settings = dp, settings
        self.info = load_index_info(dp)
        self.texts = corpus.chunk_texts(dp)
        self.unit_of = corpus.unit_of(dp)
        self.bm25 = bm25mod.BM25Index.load(dp.root / self.info.bm25_dir)
        self.embedder = embedder or open_embedder(
            self.info.model_source, progress=progress, settings=settings, cache=dp.roots.cache
        )
        check_embedder(self.info, self.embedder)
        self.progress = progress
        self._id_to_chunk = {qdrant_store.point_id(c): c for c in self.texts}
        self._edge = _check_backend(self.info.backend, settings) == qdrant_edge.EDGE
        # a server: exact dense search; local mode is exact anyway; edge: exact below Qdrant's indexing threshold,
        # HNSW above it (stage 02 measures its recall@10 against exact search: the manifest's dense_search), or
        # exact there too when RERANKEVAL_DENSE_EXACT is set
        self._exact = bool(qdrant_store.location(dp, settings=settings).url) or settings.dense_exact
        self._client = None
        self._client_cm = None
        self._memo: dict = {}

    # -- resources --
    @property
    def client(self):
        """The open store: a ``QdrantClient`` (backend ``client``) or an ``EdgeShard`` (backend ``edge``)."""
        from rerankeval.index.qdrant import edge as qdrant_edge
        from rerankeval.index.qdrant import store as qdrant_store

        if self._client is None:
            if self._edge:
                path = qdrant_edge.shard_path(self.dp, self.info.collection)
                self._client_cm = qdrant_edge.open_shard(path, self.info.dim)
            else:
                self._client_cm = qdrant_store.open_client(self.dp, settings=self.settings)
            self._client = self._client_cm.__enter__()
        return self._client

    def _store(self):
        """The backend's module and the leading arguments of its search functions."""
        from rerankeval.index.qdrant import edge as qdrant_edge
        from rerankeval.index.qdrant import store as qdrant_store

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
            self._memo[key] = mod.search_dense(
                *head, list(queries), self._qvecs(queries), k, self._id_to_chunk, exact=self._exact
            )
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

    def qdrant_fused(
        self,
        queries: Mapping[str, str],
        *,
        leg_k: int,
        limit: int,
        rrf_k: int,
        weights: Sequence[float] | None = None,
        fusion: str = "rrf",
    ) -> Run:
        """Qdrant's own fusion (``rrf`` or ``dbsf``) of its dense and native sparse legs (``leg_k`` each),
        top ``limit`` chunks."""
        sparse = [self.bm25.sparse_query_vector(t) for t in queries.values()]
        mod, head = self._store()
        return mod.search_hybrid(
            *head,
            list(queries),
            self._qvecs(queries),
            sparse,
            leg_k=leg_k,
            limit=limit,
            id_to_chunk=self._id_to_chunk,
            rrf_k=rrf_k,
            weights=weights,
            exact=self._exact,
            fusion=fusion,
        )

    # -- the one entry point --
    def search(
        self,
        variant: str,
        queries: Mapping[str, str],
        *,
        leg_k: int,
        pool_k: int,
        rrf_k: int,
        weights: Sequence[float] | None = None,
        cross_encoder=None,
        rewrite: Reformulate | None = None,
    ) -> Retrieval:
        """Run ``variant`` for ``queries`` (qid -> text).

        ``leg_k``: chunks per leg; ``pool_k``: hybrid units the ``cross_encoder`` variant reorders;
        ``rrf_k``: the RRF constant (paper convention); ``weights`` = (dense, bm25) for the hybrids;
        ``cross_encoder``: a loaded ``sentence_transformers.CrossEncoder`` (or a local path/name; None: the one
        ``settings`` configure);
        ``rewrite``: the query-rewriting step of a variant in :data:`REWRITES` (default: one without an LLM,
        which keeps every query's result; its ``ledger`` says what it did).
        """
        _check_searchable(variant)
        if leg_k < 1 or pool_k < 1:
            raise ValueError("leg_k and pool_k must be >= 1")
        t0, loaded = time.perf_counter(), _load_seconds(self.embedder)
        queries = dict(queries)
        budget = variants.Budget(leg_k=leg_k, pool_k=pool_k, rrf_k=rrf_k, weights=weights)
        searched = REWRITES.get(variant, variant)
        model = cross_encoder if cross_encoder is not None else ce.model_name(None, self.settings)
        found = variants.create(searched, self, budget, cross_encoder=model, cache=self.dp.roots.cache).search_runs(
            queries
        )
        if variant in REWRITES:
            found = variants.Runs(
                *_rewrite_step(rewrite).apply(
                    self, queries, variants.complete(found, queries), leg_k=leg_k, rrf_k=rrf_k
                )
            )
        run, chunk_run = variants.complete(found, queries)
        return Retrieval(
            variant,
            run,
            chunk_run,
            time.perf_counter() - t0,
            {**budget.record(), **_model_load(_load_seconds(self.embedder) - loaded)},
        )


def _check_searchable(variant: str) -> None:
    """Refuse a name stage 03 does not search: a later stage's (saying which) or an unknown one."""
    if variant in variants.REGISTRY or variant in REWRITES:
        return
    stage = names.stage_of(variant)
    if stage is not None and stage != names.RETRIEVE:
        raise ValueError(
            f"variant {variant!r} is produced by the {stage} stage, not "
            f"searched here; stage 03 searches {', '.join(VARIANTS)}"
        )
    variants.get(variant)  # raises: unknown variant


def _load_seconds(embedder: CachedEncoder) -> float:
    """The encoder's model-load seconds so far (0 for a stand-in without :attr:`CachedEncoder.load_seconds`)."""
    return float(getattr(embedder, "load_seconds", 0.0))


def _model_load(seconds: float) -> dict[str, float]:
    """``{MODEL_LOAD: seconds}`` when this search loaded the embedding model (a one-off counted in its seconds, which
    stage 05's cost per query leaves out: :func:`rerankeval.evaluate.costs.retrieval_seconds`), else nothing."""
    seconds = round(seconds, 3)
    return {MODEL_LOAD: seconds} if seconds > 0 else {}


def _rewrite_step(rewrite: Reformulate | None) -> Reformulate:
    from rerankeval.retrieve.reformulate import Reformulate

    return rewrite if rewrite is not None else Reformulate()


def _check_backend(built: str, settings: Settings) -> str:
    """``built`` (the manifest's backend) if it is the configured one, else an error saying to re-run 02."""
    from rerankeval.index.qdrant import edge as qdrant_edge

    configured = qdrant_edge.backend(settings)
    if configured != built:
        raise StageMissing(
            f"the Qdrant collection was built by the {built!r} backend but RERANKEVAL_QDRANT_BACKEND is "
            f"{configured!r}: re-run the 02-build-indexes stage (it fills the {configured!r} store), or set "
            f"RERANKEVAL_QDRANT_BACKEND={built}."
        )
    return built
