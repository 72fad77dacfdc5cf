"""The Qdrant store: one collection per (dataset, model, corpus content, analyser) with a dense and a
sparse (BM25) named vector per chunk.

Where: embedded local mode in ``dp.qdrant_path`` by default; when the settings the caller passes have a
``QDRANT_URL`` (plus ``QDRANT_API_KEY`` if the server needs one; see :mod:`rerankeval.core.settings`) the same code
talks to that server instead. An unreachable server fails at :func:`open_client` with a message naming the URL.

Collection: name ``<dataset>-<hash>`` where the hash covers the model identity, the corpus content,
the BM25 analyser and parameters (:func:`collection_name`), so any change builds a new collection (and
:func:`drop_stale` removes the dataset's older ones). Vectors:

- ``dense``: the normalised sentence embedding, cosine distance;
- ``bm25``: sparse, term ids from the BM25 index's sorted vocabulary, values = BM25 tf saturation;
  the collection applies ``Modifier.IDF`` (Qdrant's ``ln((N - df + 0.5)/(df + 0.5) + 1)``) at query time.

Point ids are ``uuid5(POINT_NAMESPACE, chunk_id)``: re-indexing upserts the same points (idempotent).
Payload: ``chunk_id``, ``unit_id``.

Always use clients as context managers (``with open_client(dp, settings=settings) as client:``): a local client left
open holds the storage folder's lock. One left open anyway (a retriever never closed, a ``with`` block
abandoned) is closed by :func:`close_open_clients` at exit (:mod:`atexit` runs before the interpreter tears
its modules down): otherwise ``QdrantClient.__del__`` and the abandoned block would close it during the teardown
and print two ``ImportError: sys.meta_path is None`` tracebacks.
"""

from __future__ import annotations

import atexit
import os
import re
import sqlite3
import uuid
import weakref
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from rerankeval.core.errors import ReRankEvalError
from rerankeval.core.ioutil import sha256_json
from rerankeval.core.paths import DatasetPaths
from rerankeval.core.runs import Run
from rerankeval.core.settings import Settings, redact, scrub_url
from rerankeval.index.qdrant.rrf import RRF_K, qdrant_k

DENSE = "dense"
SPARSE = "bm25"
POINT_NAMESPACE = uuid.uuid5(uuid.NAMESPACE_URL, "https://github.com/rerankeval/chunk")
SCHEMA_VERSION = 1
UPSERT_BATCH = 256
QUERY_BATCH = 64


class QdrantUnavailable(ReRankEvalError, RuntimeError):
    """The configured Qdrant server (QDRANT_URL) cannot be reached."""


def point_id(chunk_id: str) -> str:
    """Deterministic point id of a chunk: ``uuid5(POINT_NAMESPACE, chunk_id)``."""
    return str(uuid.uuid5(POINT_NAMESPACE, chunk_id))


@dataclass(frozen=True)
class Location:
    """Where the store lives: an embedded folder or a server URL (repr and describe() hide credentials)."""

    path: Path | None
    url: str | None = field(default=None, repr=False)
    api_key: str | None = field(default=None, repr=False)

    def describe(self) -> str:
        return f"server {scrub_url(self.url)}" if self.url else f"embedded store {self.path}"

    def __repr__(self) -> str:
        return f"Location({self.describe()})"


def location(
    dp: DatasetPaths | None = None,
    *,
    path: str | os.PathLike[str] | None = None,
    url: str | None = None,
    settings: Settings | None = None,
) -> Location:
    """``url`` or ``settings.qdrant_url`` (``QDRANT_URL``; server, key ``QDRANT_API_KEY``), else ``path`` or
    ``dp.qdrant_path`` (embedded). Without ``settings`` the location must be explicit: ``url`` (``""``: the
    embedded store at ``path`` or ``dp.qdrant_path``)."""
    if url is None:
        if settings is None:
            raise TypeError(
                "qdrant store location: pass the settings (their QDRANT_URL chooses between a server "
                "and the embedded store), or url='' for the embedded store, or the server's url"
            )
        url = settings.qdrant_url
    if url:
        return Location(None, url, settings.qdrant_api_key if settings is not None else None)
    if path is None:
        if dp is None:
            raise ValueError("give a DatasetPaths or a path for the embedded Qdrant store")
        path = dp.qdrant_path
    return Location(Path(path), None)


@contextmanager
def open_client(
    dp: DatasetPaths | None = None,
    *,
    path: str | os.PathLike[str] | None = None,
    url: str | None = None,
    timeout: int = 10,
    settings: Settings | None = None,
) -> Iterator:
    """A connected ``QdrantClient`` (closed on exit). See :func:`location` for where it points."""
    from qdrant_client import QdrantClient

    loc = location(dp, path=path, url=url, settings=settings)
    if loc.url:
        client = QdrantClient(url=loc.url, api_key=loc.api_key, timeout=timeout, check_compatibility=False)
        try:
            client.get_collections()
        except Exception as exc:  # noqa: BLE001 - any transport error means "unreachable"
            client.close()
            raise QdrantUnavailable(
                redact(
                    f"Cannot reach the Qdrant server at QDRANT_URL={scrub_url(loc.url)} ({type(exc).__name__}: {exc}). "
                    "Start the server (e.g. `docker run -p 6333:6333 qdrant/qdrant`), fix QDRANT_URL / "
                    "QDRANT_API_KEY, or unset QDRANT_URL to use the embedded store under "
                    "RERANKEVAL_QDRANT_PATH (default data/.qdrant).",
                    [loc.api_key],
                )
            ) from exc
    else:
        loc.path.mkdir(parents=True, exist_ok=True)
        try:
            client = QdrantClient(path=str(loc.path))
        except RuntimeError as exc:
            raise RuntimeError(
                f"The embedded Qdrant store {loc.path} is in use by another process ({exc}). Close the other "
                "notebook/kernel using it, or run a Qdrant server and set QDRANT_URL."
            ) from exc
    _OPEN.add(client)
    try:
        yield client
    finally:
        _OPEN.discard(client)
        client.close()


_OPEN: weakref.WeakSet = weakref.WeakSet()  # the clients open_client gave out and has not closed yet


@atexit.register
def close_open_clients() -> None:
    """Close every client :func:`open_client` gave out that is still open (registered with :mod:`atexit`)."""
    for client in list(_OPEN):
        _OPEN.discard(client)
        try:
            client.close()
        except Exception:  # noqa: BLE001 - at exit, a client that cannot close has nothing left to lose
            pass


def _safe(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9_-]+", "_", name).strip("_") or "dataset"


def collection_prefix(dataset: str) -> str:
    return f"{_safe(dataset)}-"


def collection_name(dataset: str, *, model_key: str, corpus_hash: str, bm25_key: str) -> str:
    """``<dataset>-<16 hex>``: a hash of the model, the corpus content and the BM25 analyser/params."""
    h = sha256_json({"model": model_key, "corpus": corpus_hash, "bm25": bm25_key, "schema": SCHEMA_VERSION})
    return collection_prefix(dataset) + h[:16]


def point_count(client, name: str) -> int:
    if not client.collection_exists(name):
        return 0
    return int(client.count(name, exact=True).count)


def ensure_collection(client, name: str, dim: int, *, recreate: bool = False) -> bool:
    """Create the collection (dense cosine + sparse BM25 with IDF modifier) if absent; True if created."""
    from qdrant_client import models

    if client.collection_exists(name):
        if not recreate:
            return False
        client.delete_collection(name)
    client.create_collection(
        name,
        vectors_config={DENSE: models.VectorParams(size=int(dim), distance=models.Distance.COSINE)},
        sparse_vectors_config={SPARSE: models.SparseVectorParams(modifier=models.Modifier.IDF)},
    )
    return True


def drop_stale(client, dataset: str, keep: str) -> list[str]:
    """Delete this dataset's collections other than ``keep`` (built from an older corpus/model)."""
    prefix = collection_prefix(dataset)
    gone = []
    for c in client.get_collections().collections:
        ours = c.name.startswith(prefix) and re.fullmatch(r"[0-9a-f]{16}", c.name[len(prefix) :])
        if ours and c.name != keep:
            client.delete_collection(c.name)
            gone.append(c.name)
    return gone


class _HeldCommits:
    """A SQLite connection whose ``with`` blocks do not commit (every other call goes to the connection)."""

    def __init__(self, conn: sqlite3.Connection):
        self._conn = conn

    def __enter__(self) -> sqlite3.Connection:
        return self._conn

    def __exit__(self, *exc) -> bool:
        return False

    def __getattr__(self, name: str):
        return getattr(self._conn, name)


def _local_persistence(client, name: str):
    """The SQLite persistence of collection ``name`` of a local-mode client, or None (server, in memory)."""
    collection = getattr(getattr(client, "_client", None), "collections", {}).get(name)
    store = getattr(collection, "storage", None)
    return store if isinstance(getattr(store, "storage", None), sqlite3.Connection) else None


@contextmanager
def one_commit(client, name: str) -> Iterator[None]:
    """Commit the points upserted inside the block to local-mode storage once, not one by one.

    qdrant-client's local mode writes each point of an upsert to SQLite in its own transaction (one
    fsync each: the default dataset's 3,204 points took 59 s, 3 s with this; ``bench/dense.py``). Inside
    this block the writes share one transaction, committed on exit (also when an upsert fails, like the
    per-point commits would have).
    Points, their order and the in-memory collection are unchanged. A server client is left alone.
    """
    store = _local_persistence(client, name)
    if store is None:
        yield
        return
    conn = store.storage
    store.storage = _HeldCommits(conn)
    try:
        yield
    finally:
        store.storage = conn
        conn.commit()


def upsert_chunks(
    client,
    name: str,
    chunk_ids: Sequence[str],
    unit_ids: Sequence[str],
    dense: np.ndarray,
    sparse: Sequence[tuple[list[int], list[float]]],
    *,
    batch_size: int = UPSERT_BATCH,
    progress: bool = True,
) -> int:
    """Upsert one point per chunk (deterministic ids, so repeating this is idempotent), ``batch_size``
    points per request and, in local mode, one SQLite commit for all (:func:`one_commit`)."""
    from qdrant_client import models
    from tqdm import tqdm

    n = len(chunk_ids)
    if not (len(unit_ids) == len(dense) == len(sparse) == n):
        raise ValueError("chunk_ids, unit_ids, dense and sparse must have the same length")
    with tqdm(total=n, desc="qdrant upsert", unit="pt", disable=not progress) as bar, one_commit(client, name):
        for a in range(0, n, batch_size):
            pts = []
            for i in range(a, min(a + batch_size, n)):
                idx, val = sparse[i]
                vec = {DENSE: dense[i].tolist()}
                if idx:  # Qdrant rejects an empty sparse vector: a chunk with no terms has none
                    vec[SPARSE] = models.SparseVector(indices=list(idx), values=list(val))
                pts.append(
                    models.PointStruct(
                        id=point_id(chunk_ids[i]),
                        vector=vec,
                        payload={"chunk_id": chunk_ids[i], "unit_id": unit_ids[i]},
                    )
                )
            client.upsert(name, points=pts, wait=True)
            bar.update(len(pts))
    return n


def _to_run(qids: Sequence[str], responses, id_to_chunk: Mapping[str, str]) -> Run:
    """Qdrant responses -> a run; ties ordered by chunk id so results never depend on storage order."""
    run: Run = {}
    for q, resp in zip(qids, responses, strict=True):
        items = [(id_to_chunk[str(p.id)], float(p.score)) for p in resp.points]
        items.sort(key=lambda kv: (-kv[1], kv[0]))
        run[q] = dict(items)
    return run


def _batched(client, name: str, qids: Sequence[str], requests: list, id_to_chunk) -> Run:
    run: Run = {}
    for a in range(0, len(requests), QUERY_BATCH):
        resp = client.query_batch_points(name, requests=requests[a : a + QUERY_BATCH])
        run.update(_to_run(qids[a : a + QUERY_BATCH], resp, id_to_chunk))
    return run


def search_dense(
    client,
    name: str,
    qids: Sequence[str],
    vectors: np.ndarray,
    limit: int,
    id_to_chunk: Mapping[str, str],
    *,
    exact: bool = False,
) -> Run:
    """Cosine top-``limit`` chunks per query (``exact`` asks a server for exact, not HNSW, search;
    local mode is always exact and warns if asked)."""
    from qdrant_client import models

    params = models.SearchParams(exact=True) if exact else None
    reqs = [
        models.QueryRequest(query=v.tolist(), using=DENSE, limit=limit, params=params, with_payload=False)
        for v in vectors
    ]
    return _batched(client, name, qids, reqs, id_to_chunk)


def _sparse(vec: tuple[list[int], list[float]]):
    from qdrant_client import models

    return models.SparseVector(indices=list(vec[0]), values=list(vec[1]))


def search_sparse(
    client,
    name: str,
    qids: Sequence[str],
    sparse: Sequence[tuple[list[int], list[float]]],
    limit: int,
    id_to_chunk: Mapping[str, str],
) -> Run:
    """Qdrant's native sparse BM25 (IDF modifier) top-``limit`` chunks; a query with no known term gets []."""
    from qdrant_client import models

    run: Run = {q: {} for q in qids}
    keep = [i for i, s in enumerate(sparse) if s[0]]
    reqs = [models.QueryRequest(query=_sparse(sparse[i]), using=SPARSE, limit=limit, with_payload=False) for i in keep]
    run.update(_batched(client, name, [qids[i] for i in keep], reqs, id_to_chunk))
    return run


def search_hybrid(
    client,
    name: str,
    qids: Sequence[str],
    vectors: np.ndarray,
    sparse: Sequence[tuple[list[int], list[float]]],
    *,
    leg_k: int,
    limit: int,
    id_to_chunk: Mapping[str, str],
    rrf_k: int = RRF_K,
    weights: Sequence[float] | None = None,
    exact: bool = False,
    fusion: str = "rrf",
) -> Run:
    """Qdrant Query API: prefetch dense and sparse (``leg_k`` each), fuse with ``RrfQuery`` (``fusion="rrf"``)
    or Qdrant's distribution-based score fusion ``FusionQuery(Fusion.DBSF)`` (``fusion="dbsf"``, unweighted).

    ``rrf_k`` is the paper's constant (score ``1/(rrf_k + rank)``); Qdrant is sent ``rrf_k + 1`` because
    it scores ``1/(rank + k - 1)`` (:mod:`rerankeval.index.qdrant.rrf`). ``weights`` = (dense, sparse), in
    Qdrant's own weighting convention. Ties inside a leg are ordered by Qdrant (not by id), so a
    fused list can differ from :func:`rerankeval.retrieve.fusion.rrf` of the legs returned by
    :func:`search_dense`/:func:`search_sparse` when a leg has tied scores.
    """
    from qdrant_client import models

    check_fusion(fusion, weights)
    reqs = []
    for v, s in zip(vectors, sparse, strict=True):
        params = models.SearchParams(exact=True) if exact else None
        pre = [models.Prefetch(query=v.tolist(), using=DENSE, limit=leg_k, params=params)]
        w = [float(weights[0])] if weights is not None else None
        if s[0]:  # a query with no known term has no sparse leg
            pre.append(models.Prefetch(query=_sparse(s), using=SPARSE, limit=leg_k))
            w = [float(x) for x in weights] if weights is not None else None
        query = (
            models.FusionQuery(fusion=models.Fusion.DBSF)
            if fusion == "dbsf"
            else models.RrfQuery(rrf=models.Rrf(k=qdrant_k(rrf_k), weights=w))
        )
        reqs.append(models.QueryRequest(prefetch=pre, query=query, limit=limit, with_payload=False))
    return _batched(client, name, qids, reqs, id_to_chunk)


QDRANT_FUSIONS = ("rrf", "dbsf")  # the fusions Qdrant's Query API runs server-side


def check_fusion(fusion: str, weights: Sequence[float] | None) -> None:
    """Refuse a fusion Qdrant does not run, weights for DBSF, and weights that are not (dense, sparse)."""
    if fusion not in QDRANT_FUSIONS:
        raise ValueError(
            f"Qdrant fuses with {' or '.join(QDRANT_FUSIONS)}, not {fusion!r}; use "
            "rerankeval.retrieve.fusion.fuse for the other methods"
        )
    if weights is not None and fusion == "dbsf":
        raise ValueError(
            "Qdrant's DBSF takes no weights: pass weights=None (or fuse client-side with "
            "rerankeval.retrieve.fusion.fuse(..., 'dbsf', weights=...))"
        )
    if weights is not None and len(weights) != 2:
        raise ValueError(f"weights must be (dense, sparse), got {weights!r}")
