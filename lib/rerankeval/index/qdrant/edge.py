"""An in-process Qdrant backend on ``qdrant-edge-py`` (Qdrant's own Rust engine: HNSW, sparse index
with IDF, RRF fusion), with the operations the retriever needs, mirroring :mod:`rerankeval.index.qdrant.store`.

One shard is one folder holding one collection's points: the same named vectors (``dense``, cosine;
``bm25``, sparse with ``Modifier.Idf``), the same point ids (``uuid5`` of the chunk id) and payload
(``chunk_id``, ``unit_id``), the same run convention (ties ordered by chunk id) as the qdrant-client
store, so a run from either backend can be compared line by line (``tests/index/qdrant/test_edge.py``).

Differences from qdrant-client's local mode: upserts are applied by Rust (no per-point pickling, no write-ahead log),
:func:`upsert_chunks` ends with ``optimize()``, which builds the HNSW graph once the segment passes
Qdrant's indexing threshold (``indexing_threshold_kb``, 10,000 KB by default: about 6,500 vectors of 384
dimensions); below it every point is scored (exact search), above it dense search is approximate, as on a
server (``exact=True`` asks for an exhaustive search; stage 02 measures what HNSW costs in recall@10,
:mod:`rerankeval.index.qdrant.recall`), and the sparse leg uses an inverted index instead of a scan of every point.

    with open_shard(folder, dim=384) as shard:
        upsert_chunks(shard, ids, unit_ids, vectors, sparse)
        run = search_dense(shard, qids, qvecs, 100, id_to_chunk)

Stages 02 and 03 use it when :func:`backend` of their settings says ``edge`` (``RERANKEVAL_QDRANT_BACKEND``;
``QDRANT_URL`` means a server, so the qdrant-client backend, unless ``edge`` is set explicitly, which is refused):
the shard of collection ``name`` lives in :func:`shard_path` (``<qdrant_path>/edge/<name>``), the index manifest
records the backend.
"""

from __future__ import annotations

import os
import re
import shutil
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path

import numpy as np

from rerankeval.core.paths import DatasetPaths
from rerankeval.core.runs import Run
from rerankeval.core.settings import Settings, scrub_url
from rerankeval.index.qdrant.rrf import RRF_K, qdrant_k
from rerankeval.index.qdrant.store import (
    DENSE,
    QUERY_BATCH,
    SPARSE,
    check_fusion,
    collection_prefix,
    point_id,
)

Sparse = tuple[list[int], list[float]]
CLIENT = "client"  # qdrant-client: its local mode, or the server at QDRANT_URL
EDGE = "edge"  # this module: Qdrant's engine in-process (local only)
INDEXING_THRESHOLD_KB: int | None = None  # of new shards; None: Qdrant's default (tests lower it to get HNSW)
EDGE_UPSERT_BATCH = 1024  # points per update call (in-process: no request size to respect)


def backend(settings: Settings) -> str:
    """The backend ``settings`` configure, ``RERANKEVAL_QDRANT_BACKEND`` (:data:`CLIENT` or :data:`EDGE`).

    ``QDRANT_URL`` means a server, so with it the backend is :data:`CLIENT` unless ``edge`` is set
    explicitly, which is an error (edge runs in-process)."""
    if settings.qdrant_backend not in (CLIENT, EDGE):  # settings built without validation (model_copy, construct)
        raise ValueError(
            f"unknown Qdrant backend {settings.qdrant_backend!r}: set RERANKEVAL_QDRANT_BACKEND to "
            f"{CLIENT!r} or {EDGE!r}"
        )
    if not settings.qdrant_url:
        return settings.qdrant_backend
    if settings.qdrant_backend == EDGE and "qdrant_backend" in settings.model_fields_set:
        raise ValueError(
            f"RERANKEVAL_QDRANT_BACKEND=edge runs Qdrant in-process and cannot use the server at "
            f"QDRANT_URL={scrub_url(settings.qdrant_url)}: unset QDRANT_URL to use the edge store, or unset "
            "RERANKEVAL_QDRANT_BACKEND (or set it to client) to use the server."
        )
    return CLIENT


def shard_path(dp: DatasetPaths, name: str) -> Path:
    """The folder of collection ``name``'s shard: ``<dp.qdrant_path>/edge/<name>``."""
    return dp.qdrant_path / EDGE / name


def drop_stale(dp: DatasetPaths, keep: str) -> list[str]:
    """Delete this dataset's shards other than ``keep`` (as :func:`rerankeval.index.qdrant.store.drop_stale`)."""
    prefix = collection_prefix(dp.name)
    root = dp.qdrant_path / EDGE
    gone = []
    for d in sorted(root.iterdir()) if root.is_dir() else []:
        ours = d.name.startswith(prefix) and re.fullmatch(r"[0-9a-f]{16}", d.name[len(prefix) :])
        if ours and d.name != keep and d.is_dir():
            shutil.rmtree(d)
            gone.append(d.name)
    return gone


def _edge():
    try:
        import qdrant_edge
    except ImportError as exc:
        raise ImportError(
            "the qdrant-edge backend needs the package qdrant-edge-py: "
            "`pip install qdrant-edge-py==0.9.0` into the project venv, or use the qdrant-client store "
            "(rerankeval.index.qdrant.store)"
        ) from exc
    return qdrant_edge


def config(dim: int, indexing_threshold_kb: int | None = None, *, wal: bool | None = None):
    """The shard layout of :func:`rerankeval.index.qdrant.store.ensure_collection`: dense cosine + sparse IDF.

    ``indexing_threshold_kb``: the segment size above which Qdrant builds the HNSW graph (None: Qdrant's
    default, :data:`rerankeval.index.qdrant.recall.INDEXING_THRESHOLD_KB`; tests lower it). ``wal``: whether
    updates go through a write-ahead log, fixed when a shard is created (None: the shard's own setting when
    it is loaded, Qdrant's default, on, when it is created)."""
    qe = _edge()
    optimizers = (
        None
        if indexing_threshold_kb is None
        else qe.EdgeOptimizersConfig(indexing_threshold=int(indexing_threshold_kb))
    )
    return qe.EdgeConfig(
        vectors={DENSE: qe.EdgeVectorParams(size=int(dim), distance=qe.Distance.Cosine)},
        sparse_vectors={SPARSE: qe.EdgeSparseVectorParams(modifier=qe.Modifier.Idf)},
        optimizers=optimizers,
        wal_enabled=wal,
    )


@contextmanager
def open_shard(path: str | os.PathLike[str], dim: int, *, indexing_threshold_kb: int | None = None) -> Iterator:
    """An ``EdgeShard`` in ``path`` (created if the folder holds none), closed on exit.

    ``indexing_threshold_kb`` (default :data:`INDEXING_THRESHOLD_KB`) applies to a new shard (an existing one
    keeps the threshold it was created with)."""
    qe = _edge()
    path = Path(path)
    if path.is_dir() and any(path.iterdir()):
        shard = qe.EdgeShard.load(str(path), config(dim))
    else:
        kb = INDEXING_THRESHOLD_KB if indexing_threshold_kb is None else indexing_threshold_kb
        # no write-ahead log: a shard is filled once and flushed (upsert_chunks), and one left incomplete by a
        # crash is rebuilt (stage 02 counts its points, and its manifest, written last, marks a complete build)
        shard = qe.EdgeShard.create(str(path), config(dim, kb, wal=False))
    try:
        yield shard
    finally:
        shard.close()


def point_count(shard) -> int:
    return int(shard.info().points_count)


def hnsw_points(shard, sparse_points: int) -> int:
    """Dense vectors in an HNSW graph: the shard's indexed vectors less the sparse ones (Qdrant indexes every
    sparse vector in its inverted index, so ``indexed_vectors_count`` counts each once)."""
    return max(int(shard.info().indexed_vectors_count) - int(sparse_points), 0)


def upsert_chunks(
    shard,
    chunk_ids: Sequence[str],
    unit_ids: Sequence[str],
    dense: np.ndarray,
    sparse: Sequence[Sparse],
    *,
    batch_size: int = EDGE_UPSERT_BATCH,
    optimize: bool = True,
) -> int:
    """Upsert one point per chunk (idempotent ids), then build the index (``optimize``) and flush."""
    qe = _edge()
    n = len(chunk_ids)
    if not (len(unit_ids) == len(dense) == len(sparse) == n):
        raise ValueError("chunk_ids, unit_ids, dense and sparse must have the same length")
    for a in range(0, n, batch_size):
        pts = []
        for i, row in enumerate(np.asarray(dense[a : a + batch_size]).tolist(), start=a):
            vec = {DENSE: row}
            if sparse[i][0]:  # like the qdrant-client store: a chunk with no terms has no sparse vector
                vec[SPARSE] = qe.SparseVector(indices=list(sparse[i][0]), values=list(sparse[i][1]))
            pts.append(
                qe.Point(
                    id=point_id(chunk_ids[i]), vector=vec, payload={"chunk_id": chunk_ids[i], "unit_id": unit_ids[i]}
                )
            )
        shard.update(qe.UpdateOperation.upsert_points(pts))
    if optimize:
        shard.optimize()
    shard.flush()
    return n


def _to_run(qids: Sequence[str], responses, id_to_chunk: Mapping[str, str]) -> Run:
    """Scored points -> a run; ties ordered by chunk id (the qdrant-client store's convention)."""
    run: Run = {}
    for q, points in zip(qids, responses, strict=True):
        items = [(id_to_chunk[str(p.id)], float(p.score)) for p in points]
        items.sort(key=lambda kv: (-kv[1], kv[0]))
        run[q] = dict(items)
    return run


def _batched(shard, qids: Sequence[str], requests: list, id_to_chunk: Mapping[str, str]) -> Run:
    qe = _edge()
    run: Run = {}
    for a in range(0, len(requests), QUERY_BATCH):
        resp = shard.query_batch(qe.QueryBatchRequest(requests[a : a + QUERY_BATCH]))
        run.update(_to_run(qids[a : a + QUERY_BATCH], resp, id_to_chunk))
    return run


def _params(exact: bool):
    return _edge().SearchParams(exact=True) if exact else None


def _dense_query(v: np.ndarray):
    return _edge().Query.Nearest([float(x) for x in v], using=DENSE)


def _sparse_query(s: Sparse):
    qe = _edge()
    return qe.Query.Nearest(qe.SparseVector(indices=list(s[0]), values=[float(x) for x in s[1]]), using=SPARSE)


def search_dense(
    shard, qids: Sequence[str], vectors: np.ndarray, limit: int, id_to_chunk: Mapping[str, str], *, exact: bool = False
) -> Run:
    """Cosine top-``limit`` chunks per query (HNSW once indexed; ``exact`` for an exhaustive search)."""
    qe = _edge()
    reqs = [
        qe.QueryRequest(limit=limit, query=_dense_query(v), params=_params(exact), with_payload=False) for v in vectors
    ]
    return _batched(shard, qids, reqs, id_to_chunk)


def search_sparse(
    shard, qids: Sequence[str], sparse: Sequence[Sparse], limit: int, id_to_chunk: Mapping[str, str]
) -> Run:
    """Qdrant's sparse BM25 (IDF modifier) top-``limit`` chunks; a query with no known term gets []."""
    qe = _edge()
    run: Run = {q: {} for q in qids}
    keep = [i for i, s in enumerate(sparse) if s[0]]
    reqs = [qe.QueryRequest(limit=limit, query=_sparse_query(sparse[i]), with_payload=False) for i in keep]
    run.update(_batched(shard, [qids[i] for i in keep], reqs, id_to_chunk))
    return run


def search_hybrid(
    shard,
    qids: Sequence[str],
    vectors: np.ndarray,
    sparse: Sequence[Sparse],
    *,
    leg_k: int,
    limit: int,
    id_to_chunk: Mapping[str, str],
    rrf_k: int = RRF_K,
    weights: Sequence[float] | None = None,
    exact: bool = False,
    fusion: str = "rrf",
) -> Run:
    """Prefetch dense and sparse (``leg_k`` each), fuse with RRF (``k = rrf_k + 1``, Qdrant's convention)
    or DBSF (``fusion="dbsf"``), as :func:`rerankeval.index.qdrant.store.search_hybrid` does."""
    qe = _edge()
    check_fusion(fusion, weights)
    reqs = []
    for v, s in zip(vectors, sparse, strict=True):
        pre = [qe.Prefetch(limit=leg_k, query=_dense_query(v), params=_params(exact))]
        w = [float(weights[0])] if weights is not None else None
        if s[0]:  # a query with no known term has no sparse leg
            pre.append(qe.Prefetch(limit=leg_k, query=_sparse_query(s)))
            w = [float(x) for x in weights] if weights is not None else None
        query = qe.Fusion.Dbsf() if fusion == "dbsf" else qe.Fusion.Rrf(k=qdrant_k(rrf_k), weights=w)
        reqs.append(qe.QueryRequest(limit=limit, prefetches=pre, query=query, with_payload=False))
    return _batched(shard, qids, reqs, id_to_chunk)
