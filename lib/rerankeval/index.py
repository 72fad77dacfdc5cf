"""Stage 02 (build indexes): BM25 on disk, embeddings cached, one Qdrant collection filled.

Notebook 02::

    info = build_indexes(dp)            # -> IndexInfo, also written to dp.index_dir/manifest.json

Everything is keyed by content (:func:`index_corpus_hash` of the chunk table, the BM25 parameters and
analyser, the embedding model): a second call with the same inputs computes nothing, and stage 03
(:mod:`rerankeval.retrieve`) refuses indexes built from another chunk table (:func:`load_index_info`).
The manifest is written last, so it marks a complete build.
"""

from __future__ import annotations

import json
import shutil
import time
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path

import pandas as pd

from . import bm25 as bm25mod
from . import corpus, qdrant_store
from .corpus import StageMissing
from .embed import Embedder
from .ioutil import atomic_write_json, sha256_json
from .paths import DatasetPaths

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


@dataclass
class _Build:
    """The state one :func:`build_indexes` call passes between its steps."""

    dp: DatasetPaths
    actions: dict[str, str] = field(default_factory=dict)
    seconds: dict[str, float] = field(default_factory=dict)

    def step(self, name: str, t0: float, action: str) -> None:
        self.seconds[name] = time.perf_counter() - t0
        self.actions[name] = action

    def reused(self, name: str) -> None:
        self.seconds[name] = 0.0
        self.actions[name] = "reused"


def _bm25_step(b: _Build, ids: list[str], texts: Mapping[str, str], chash: str, params: bm25mod.BM25Params,
               force: bool) -> tuple[bm25mod.BM25Index, str, bm25mod.Analyzer]:
    """Build or load the BM25 index; delete the indexes of older corpora or parameters."""
    t = time.perf_counter()
    analyzer = bm25mod.Analyzer()
    index, built = bm25mod.build_or_load(b.dp.index_dir / "bm25", ids, [texts[i] for i in ids],
                                         corpus_hash=chash, params=params, analyzer=analyzer, force=force)
    key = bm25mod.index_key(chash, params, analyzer)
    for other in (b.dp.index_dir / "bm25").iterdir():
        if other.is_dir() and other.name != key:
            shutil.rmtree(other, ignore_errors=True)
    b.step("bm25", t, "built" if built else "loaded")
    return index, key, analyzer


def _qdrant_step(b: _Build, client, name: str, emb: Embedder, ids: list[str], texts: Mapping[str, str],
                 unit_of: Mapping[str, str], index: bm25mod.BM25Index, progress: bool) -> int:
    """Encode (from the cache where possible) and upsert every chunk; return the vector dimension."""
    t = time.perf_counter()
    vectors = emb.encode([texts[i] for i in ids], desc=f"embedding {b.dp.name}")
    st = emb.stats
    b.step("embeddings", t, "cached" if st.encoded == 0 else f"encoded {st.encoded}, cached {st.cached}")
    dim = int(vectors.shape[1])
    t = time.perf_counter()
    qdrant_store.ensure_collection(client, name, dim)
    qdrant_store.upsert_chunks(client, name, ids, [unit_of[i] for i in ids], vectors,
                               index.sparse_doc_vectors(), progress=progress)
    n = qdrant_store.point_count(client, name)
    if n != len(ids):
        raise RuntimeError(f"Qdrant collection {name} holds {n} points after upserting {len(ids)}: "
                           "re-run the 02-build-indexes stage with force_rebuild=True.")
    b.step("qdrant", t, "upserted")
    return dim


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
    t_all = t = time.perf_counter()
    st = _Build(dp)
    chunks = corpus.load_chunks(dp)
    texts = corpus.chunk_texts(dp)
    unit_of = dict(zip(chunks.chunk_id, chunks.unit_id, strict=True))
    ids = sorted(texts)
    chash = index_corpus_hash(texts, unit_of)
    st.step("read chunks", t, "loaded")
    params = bm25mod.BM25Params(k1=k1, b=b)
    index, bm25_key, analyzer = _bm25_step(st, ids, texts, chash, params, force)

    emb = embedder or Embedder(model, progress=progress)
    name = qdrant_store.collection_name(dp.name, model_key=emb.key, corpus_hash=chash, bm25_key=bm25_key)
    old = _read_manifest(dp)
    with qdrant_store.open_client(dp) as client:
        loc = qdrant_store.location(dp)
        complete = (qdrant_store.point_count(client, name) == len(ids) and old is not None
                    and old.get("collection") == name)
        if complete and not force:
            st.reused("embeddings")
            st.reused("qdrant")
            dim = int(old["dim"])
        else:
            dim = _qdrant_step(st, client, name, emb, ids, texts, unit_of, index, progress)
        stale = qdrant_store.drop_stale(client, dp.name, keep=name)
        if stale:
            st.actions["dropped stale collections"] = ", ".join(stale)
    st.seconds["total"] = time.perf_counter() - t_all
    info = IndexInfo(
        dataset=dp.name, collection=name, qdrant=loc.describe(),
        model_source=None if model is None else str(model), model_id=emb.model_id, model_key=emb.key,
        dim=dim, corpus_hash=chash, n_chunks=len(ids),
        bm25_dir=str((dp.index_dir / "bm25" / bm25_key).relative_to(dp.root)),
        bm25_params=asdict(params), analyzer=analyzer.spec(), vocab_size=len(index.vocab),
        actions=st.actions, seconds=st.seconds,
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
