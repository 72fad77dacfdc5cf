"""Stage 02 (build indexes): BM25 on disk, embeddings cached, one Qdrant collection filled. The stage's face is
:mod:`rerankeval.index`; notebook 02::

    result = index.run(dp, index.Params.of(globals()), settings)   # builds what is missing; no manifest yet
    index.write(dp, result)                                         # dp.index_manifest, last: a complete build

Everything is keyed by content (:func:`rerankeval.index.manifest.index_corpus_hash` of the chunk table, the BM25
parameters and analyser, the embedding model): a second run with the same inputs computes nothing, and stage 03
refuses indexes built from another chunk table (:func:`rerankeval.index.manifest.load_index_info`).

The Qdrant side is filled by the backend ``settings.qdrant_backend`` names (``RERANKEVAL_QDRANT_BACKEND``;
:func:`rerankeval.index.qdrant.edge.backend`): ``client`` (qdrant-client's local mode, or the server at
``QDRANT_URL``) or ``edge`` (:mod:`rerankeval.index.qdrant.edge`, Qdrant's engine in-process); the manifest
records it with the collection, and a collection counts as built only by the backend the manifest names: one
built by the other backend is rebuilt, with a message (``actions["backend switch"]``, and a logged warning).

The manifest's ``dense_search`` (:class:`rerankeval.index.qdrant.recall.DenseSearch`) says how stage 03's dense
search runs (exact below Qdrant's indexing threshold, HNSW above) and its recall@10 against exact search on a
sample of the dataset's queries (:meth:`Result.messages` words it for notebook 02).

The encoder is :func:`rerankeval.index.encoder.open_embedder`'s (an embeddings server when ``EMBED_BASE_URL`` is
set, else the in-process model); the manifest's ``embedder`` records which.
"""

from __future__ import annotations

import dataclasses
import functools
import logging
import shutil
import time
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd

from rerankeval.core.ioutil import atomic_write_json
from rerankeval.core.paths import DEFAULT_DATASET, DatasetPaths
from rerankeval.core.settings import Settings
from rerankeval.corpus import contract as corpus
from rerankeval.corpus.contract import StageMissing
from rerankeval.index import bm25 as bm25mod
from rerankeval.index.embed import CachedEncoder
from rerankeval.index.encoder import embedder_record, open_embedder
from rerankeval.index.manifest import IndexInfo, index_corpus_hash, read_manifest
from rerankeval.index.qdrant import edge as qdrant_edge
from rerankeval.index.qdrant import recall
from rerankeval.index.qdrant import store as qdrant_store
from rerankeval.index.terms import SparseRows

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Params:
    """Stage 02's parameters, the one home of their defaults: notebook 02's parameters cell has the same names and
    defaults (a test checks) and builds them in one line, ``Params.of(globals())``."""

    dataset: str = DEFAULT_DATASET  # the caller resolves it to the DatasetPaths given to run()
    k1: float = 1.2  # BM25 term-frequency saturation (rank-bm25 BM25Okapi)
    b: float = 0.75  # BM25 length normalisation, from 0 (none) to 1 (full)
    embedding_model: str = ""  # local sentence-transformers folder; empty: the bundled all-MiniLM-L6-v2
    force_rebuild: bool = False  # rebuild BM25 and re-upsert every point (embeddings still come from the cache)

    @classmethod
    def of(cls, values: Params | Mapping[str, Any]) -> Params:
        """From a mapping (e.g. the notebook's ``globals()``): the names of the fields are taken, the rest ignored."""
        if isinstance(values, cls):
            return values
        names = {f.name for f in dataclasses.fields(cls)}
        return cls(**{k: v for k, v in dict(values).items() if k in names})

    @property
    def model(self) -> str | None:
        """The local model to encode with (None: the bundled one)."""
        return self.embedding_model or None


@dataclass
class Result:
    """What :func:`run` built (``info``, the manifest :func:`write` saves) and what notebook 02 shows of it."""

    info: IndexInfo
    dense_exact: bool  # settings.dense_exact: stage 03 searches exactly whatever the manifest's dense_search says

    @property
    def cold(self) -> bool:
        """True if anything had to be computed (not just found in caches)."""
        return any(a not in ("loaded", "reused", "cached") for a in self.info.actions.values())

    def messages(self) -> list[str]:
        """What notebook 02 prints: an encoder or backend switch (if any) and how dense search runs, with its
        recall@10."""
        out = [self.info.actions[k] for k in ("embedder switch", "backend switch") if k in self.info.actions]
        if self.info.dense_search:
            out.append(recall.DenseSearch(**self.info.dense_search).describe(exact_in_03=self.dense_exact))
        return out

    def timings(self) -> pd.DataFrame:
        return pd.DataFrame(
            [
                {"step": k, "action": self.info.actions.get(k, ""), "seconds": round(v, 2)}
                for k, v in self.info.seconds.items()
            ]
        )


@dataclass
class _Build:
    """The state one :func:`run` passes between its steps."""

    dp: DatasetPaths
    settings: Settings
    actions: dict[str, str] = field(default_factory=dict)
    seconds: dict[str, float] = field(default_factory=dict)

    def step(self, name: str, t0: float, action: str) -> None:
        self.seconds[name] = time.perf_counter() - t0
        self.actions[name] = action

    def reused(self, name: str) -> None:
        self.seconds[name] = 0.0
        self.actions[name] = "reused"


@dataclass
class _Fill:
    """What the Qdrant step fills a collection with (either backend)."""

    name: str
    emb: CachedEncoder
    ids: list[str]
    texts: Mapping[str, str]
    unit_of: Mapping[str, str]
    index: bm25mod.BM25Index
    old: dict | None  # the previous manifest
    force: bool
    progress: bool
    queries: Mapping[str, str] = field(default_factory=dict)  # the dataset's queries (for the recall check)

    def built_by(self, backend: str) -> bool:
        """The previous manifest records this collection, built by ``backend``."""
        return (
            self.old is not None
            and self.old.get("collection") == self.name
            and self.old.get("backend", qdrant_edge.CLIENT) == backend
        )

    def switched_from(self, backend: str) -> str | None:
        """The other backend, when the previous manifest records this very collection as built by it."""
        if self.old is None or self.old.get("collection") != self.name:
            return None
        before = self.old.get("backend", qdrant_edge.CLIENT)
        return before if before != backend else None

    @functools.cached_property
    def sparse(self) -> SparseRows:
        return self.index.sparse_doc_vectors()

    @property
    def sparse_points(self) -> int:
        """Chunks with a sparse vector (a chunk without BM25 terms has none)."""
        return self.sparse.nonempty()


def _bm25_step(
    b: _Build, ids: list[str], texts: Mapping[str, str], chash: str, params: bm25mod.BM25Params, force: bool
) -> tuple[bm25mod.BM25Index, str, bm25mod.Analyzer]:
    """Build or load the BM25 index; delete the indexes of older corpora or parameters."""
    t = time.perf_counter()
    analyzer = bm25mod.Analyzer()
    index, built = bm25mod.build_or_load(
        b.dp.bm25_dir, ids, [texts[i] for i in ids], corpus_hash=chash, params=params, analyzer=analyzer, force=force
    )
    key = bm25mod.index_key(chash, params, analyzer)
    for other in b.dp.bm25_dir.iterdir():
        if other.is_dir() and other.name != key:
            shutil.rmtree(other, ignore_errors=True)
    b.step("bm25", t, "built" if built else "loaded")
    return index, key, analyzer


def _encode(b: _Build, f: _Fill):
    """The chunk vectors, from the embedding cache where possible."""
    t = time.perf_counter()
    vectors = f.emb.encode([f.texts[i] for i in f.ids], desc=f"embedding {b.dp.name}")
    st = f.emb.stats
    b.step("embeddings", t, "cached" if st.encoded == 0 else f"encoded {st.encoded}, cached {st.cached}")
    return vectors


def _check_count(n: int, f: _Fill) -> None:
    if n != len(f.ids):
        raise RuntimeError(
            f"Qdrant collection {f.name} holds {n} points after upserting {len(f.ids)}: "
            "re-run the 02-build-indexes stage with force_rebuild=True."
        )


def _qdrant_step(b: _Build, client, f: _Fill) -> int:
    """Encode (from the cache where possible) and upsert every chunk; return the vector dimension."""
    vectors = _encode(b, f)
    dim = int(vectors.shape[1])
    t = time.perf_counter()
    qdrant_store.ensure_collection(client, f.name, dim)
    qdrant_store.upsert_chunks(
        client, f.name, f.ids, [f.unit_of[i] for i in f.ids], vectors, f.sparse, progress=f.progress
    )
    _check_count(qdrant_store.point_count(client, f.name), f)
    b.step("qdrant", t, "upserted")
    return dim


def _note_switch(b: _Build, f: _Fill, backend: str) -> None:
    """Say so when this collection was built by the other backend (it is rebuilt by ``backend``)."""
    before = f.switched_from(backend)
    if before is None:
        return
    msg = (
        f"The Qdrant collection {f.name} was built by the {before!r} backend, and RERANKEVAL_QDRANT_BACKEND "
        f"now selects {backend!r}: rebuilding it with {backend!r} (set RERANKEVAL_QDRANT_BACKEND={before} "
        "to go back; that rebuilds it again)."
    )
    log.warning(msg)
    b.actions["backend switch"] = msg


def _kept_check(f: _Fill, reused: bool) -> dict | None:
    """The previous manifest's dense-search record, when the collection it describes is reused as is."""
    if reused and f.old is not None and f.old.get("dense_search"):
        return dict(f.old["dense_search"])  # no step: nothing was done
    return None


def _dense_check(b: _Build, f: _Fill, search, *, backend: str, dim: int, hnsw: int | None) -> dict:
    """Measure the approximate dense search's recall@10 against exact search on sampled queries."""
    t = time.perf_counter()
    found = recall.check(search, f.queries, f.emb, f.ids, backend=backend, dim=dim, hnsw=hnsw)
    b.step("recall check", t, "measured")
    return found.record()


def _client_check(b: _Build, f: _Fill, client, loc, dim: int) -> dict:
    """Local mode scores every point (nothing to measure); a server is measured (stage 03 asks it for exact)."""
    if loc.url:
        return _dense_check(
            b,
            f,
            functools.partial(qdrant_store.search_dense, client, f.name),
            backend=qdrant_edge.CLIENT,
            dim=dim,
            hnsw=None,
        )
    return recall.DenseSearch(
        qdrant_edge.CLIENT,
        recall.EXACT,
        len(f.ids),
        None,
        None,
        None,
        0,
        reason="qdrant-client's local mode scores every point, always",
    ).record()


def _client_store(b: _Build, f: _Fill) -> tuple[int, str, dict]:
    """Fill (or find complete) the qdrant-client collection; return (dim, where it lives, its dense search)."""
    with qdrant_store.open_client(b.dp, settings=b.settings) as client:
        loc = qdrant_store.location(b.dp, settings=b.settings)
        complete = qdrant_store.point_count(client, f.name) == len(f.ids) and f.built_by(qdrant_edge.CLIENT)
        if complete and not f.force:
            b.reused("embeddings")
            b.reused("qdrant")
            dim = int(f.old["dim"])
        else:
            _note_switch(b, f, qdrant_edge.CLIENT)
            dim = _qdrant_step(b, client, f)
        dense = _kept_check(f, complete and not f.force) or _client_check(b, f, client, loc, dim)
        stale = qdrant_store.drop_stale(client, b.dp.name, keep=f.name)
    if stale:
        b.actions["dropped stale collections"] = ", ".join(stale)
    return dim, loc.describe(), dense


def _edge_complete(path: Path, f: _Fill) -> bool:
    if f.force or not f.built_by(qdrant_edge.EDGE) or not path.is_dir():
        return False
    with qdrant_edge.open_shard(path, int(f.old["dim"])) as shard:
        return qdrant_edge.point_count(shard) == len(f.ids)


def _edge_check(b: _Build, f: _Fill, shard, dim: int) -> dict:
    return _dense_check(
        b,
        f,
        functools.partial(qdrant_edge.search_dense, shard),
        backend=qdrant_edge.EDGE,
        dim=dim,
        hnsw=qdrant_edge.hnsw_points(shard, f.sparse_points),
    )


def _edge_store(b: _Build, f: _Fill) -> tuple[int, str, dict]:
    """Fill (or find complete) the qdrant-edge shard; return (dim, where it lives, its dense search)."""
    path = qdrant_edge.shard_path(b.dp, f.name)
    reused = _edge_complete(path, f)
    if reused:
        b.reused("embeddings")
        b.reused("qdrant")
        dim = int(f.old["dim"])
        dense = _kept_check(f, True)
        if dense is None:
            with qdrant_edge.open_shard(path, dim) as shard:
                dense = _edge_check(b, f, shard, dim)
    else:
        _note_switch(b, f, qdrant_edge.EDGE)
        vectors = _encode(b, f)
        dim = int(vectors.shape[1])
        t = time.perf_counter()
        with qdrant_edge.open_shard(path, dim) as shard:
            qdrant_edge.upsert_chunks(shard, f.ids, [f.unit_of[i] for i in f.ids], vectors, f.sparse)
            _check_count(qdrant_edge.point_count(shard), f)
            b.step("qdrant", t, "upserted")
            dense = _edge_check(b, f, shard, dim)
    stale = qdrant_edge.drop_stale(b.dp, keep=f.name)
    if stale:
        b.actions["dropped stale collections"] = ", ".join(stale)
    return dim, f"edge shard {path}", dense


def run(dp: DatasetPaths, params: Params, settings: Settings, *, embedder: CachedEncoder | None = None) -> Result:
    """Build (or find up to date) the BM25 index, the embeddings and the Qdrant collection of ``dp``; the manifest
    is :func:`write`'s.

    Everything is keyed by content: a second run with the same corpus and parameters computes nothing
    (``force_rebuild`` rebuilds BM25 and re-upserts every point; embeddings still come from the cache).
    ``settings`` name the Qdrant backend and store, the encoder (``embedder``, else
    :func:`rerankeval.index.encoder.open_embedder`'s) and whether progress is shown (``RERANKEVAL_PROGRESS``).
    """
    t_all = t = time.perf_counter()
    st = _Build(dp, settings)
    chunks = corpus.load_chunks(dp)
    texts = corpus.chunk_texts(dp, chunks)
    unit_of = dict(zip(chunks.chunk_id, chunks.unit_id, strict=True))
    ids = sorted(texts)
    chash = index_corpus_hash(texts, unit_of)
    st.step("read chunks", t, "loaded")
    bm25_params = bm25mod.BM25Params(k1=params.k1, b=params.b)
    index, bm25_key, analyzer = _bm25_step(st, ids, texts, chash, bm25_params, params.force_rebuild)

    progress = settings.progress != "off"
    emb = embedder or open_embedder(params.model, settings=settings, progress=progress, cache=dp.roots.cache)
    name = qdrant_store.collection_name(dp.name, model_key=emb.key, corpus_hash=chash, bm25_key=bm25_key)
    backend = qdrant_edge.backend(settings)
    old = read_manifest(dp)
    _note_new_embedder(st, old, emb)
    fill = _Fill(name, emb, ids, texts, unit_of, index, old, params.force_rebuild, progress, _queries(dp))
    dim, where, dense = (_edge_store if backend == qdrant_edge.EDGE else _client_store)(st, fill)
    st.seconds["total"] = time.perf_counter() - t_all
    info = IndexInfo(
        dataset=dp.name,
        collection=name,
        qdrant=where,
        model_source=params.model,
        model_id=emb.model_id,
        model_key=emb.key,
        dim=dim,
        corpus_hash=chash,
        n_chunks=len(ids),
        bm25_dir=str((dp.bm25_dir / bm25_key).relative_to(dp.root)),
        bm25_params=asdict(bm25_params),
        analyzer=analyzer.spec(),
        vocab_size=len(index.vocab),
        backend=backend,
        actions=st.actions,
        seconds=st.seconds,
        dense_search=dense,
        embedder=embedder_record(emb),
    )
    return Result(info, dense_exact=settings.dense_exact)


def write(dp: DatasetPaths, result: Result) -> Path:
    """Write the manifest (``dp.index_manifest``), the mark of a complete build that stage 03 reads
    (:func:`rerankeval.index.manifest.load_index_info`); the file written."""
    return atomic_write_json(dp.index_manifest, asdict(result.info))


def _note_new_embedder(b: _Build, old: dict | None, emb: CachedEncoder) -> None:
    """Say so when the previous index was built by another encoder (this build makes a new collection)."""
    if not old or old.get("model_key") in (None, emb.key):
        return
    before = (old.get("embedder") or {}).get("describe") or f"{old.get('model_id')} (in-process)"
    now = embedder_record(emb)["describe"]
    msg = (
        f"the previous index was built with {before}; encoding with {now} now, into a new collection "
        "(the old one is dropped; set EMBED_BASE_URL / EMBED_MODEL back to return to it)."
    )
    log.warning(msg)
    b.actions["embedder switch"] = msg


def _queries(dp: DatasetPaths) -> dict[str, str]:
    """The dataset's queries for the recall check ({} when stage 01 wrote none)."""
    try:
        return corpus.load_queries(dp)
    except (StageMissing, OSError):
        return {}
