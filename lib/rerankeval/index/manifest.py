"""Stage 02's record (:class:`IndexInfo`, saved as ``dp.index_manifest``) and its reader for later stages
(:func:`load_index_info`, checked against the current chunk table through :func:`index_corpus_hash`).

The manifest is written last by :func:`rerankeval.index.build.write`, so it marks a complete build.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field

from rerankeval.core.ioutil import sha256_json
from rerankeval.core.paths import DatasetPaths
from rerankeval.corpus import contract as corpus
from rerankeval.corpus.contract import StageMissing
from rerankeval.index.qdrant.edge import CLIENT

MANIFEST_VERSION = 2


def index_corpus_hash(texts: Mapping[str, str], unit_of: Mapping[str, str]) -> str:
    """Hash of what the indexes depend on: every chunk's id, unit and indexed text."""
    return sha256_json([[c, unit_of[c], texts[c]] for c in sorted(texts)])


@dataclass
class IndexInfo:
    """What stage 02 built: the manifest (``dp.index_manifest``), one field per key."""

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
    backend: str = CLIENT  # which engine holds the collection (rerankeval.index.qdrant.edge.backend)
    actions: dict = field(default_factory=dict)  # step -> what happened ("built", "loaded", ...)
    seconds: dict = field(default_factory=dict)  # step -> wall seconds
    version: int = MANIFEST_VERSION
    dense_search: dict = field(default_factory=dict)  # recall.DenseSearch.record(): exact or HNSW, recall@10
    embedder: dict = field(default_factory=dict)  # CachedEncoder.record(): in-process or a server, model, key

    def embedder_described(self) -> str:
        """The encoder that built the index, in words (older manifests: the in-process model)."""
        return self.embedder.get("describe") or f"{self.model_id} (in-process)"


def read_manifest(dp: DatasetPaths) -> dict | None:
    """The saved manifest as written, unchecked; None when there is none (or it does not parse)."""
    try:
        return json.loads(dp.index_manifest.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError):
        return None


def load_index_info(dp: DatasetPaths) -> IndexInfo:
    """The manifest of the indexes, checked against the current chunk table."""
    m = read_manifest(dp)
    if m is None:
        raise StageMissing(f"{dp.index_manifest} is missing: run the 02-build-indexes stage first.")
    if m.get("version") != MANIFEST_VERSION:
        raise StageMissing(
            f"{dp.index_manifest} was written by another version of the index stage: re-run the 02-build-indexes stage."
        )
    info = IndexInfo(**m)
    chunks = corpus.load_chunks(dp)
    now = index_corpus_hash(corpus.chunk_texts(dp, chunks), dict(zip(chunks.chunk_id, chunks.unit_id, strict=True)))
    if now != info.corpus_hash:
        raise StageMissing(
            f"the indexes in {dp.index_dir} were built from another version of the chunk table: "
            "re-run the 02-build-indexes stage."
        )
    return info
