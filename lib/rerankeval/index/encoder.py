"""Which encoder embeds the chunks (stage 02) and the queries (stage 03), and the check that both are the same.

:func:`open_embedder` gives the embeddings server at ``EMBED_BASE_URL`` (:mod:`rerankeval.index.embed_remote`), else
the in-process sentence-transformers model (:mod:`rerankeval.index.embed`); the manifest records which
(:func:`embedder_record`), the collection name hashes its key, and :func:`check_embedder` refuses to search an
index with another encoder's query vectors, naming both.
"""

from __future__ import annotations

from pathlib import Path

from rerankeval.core.errors import ReRankEvalError
from rerankeval.core.settings import Settings
from rerankeval.index.embed import CachedEncoder, Embedder, embeddings_root
from rerankeval.index.embed_remote import RemoteEmbedder
from rerankeval.index.manifest import IndexInfo


class EmbedderMismatch(ReRankEvalError, ValueError):
    """An index searched (or filled) with another encoder's vectors than the one that built it."""


def open_embedder(model: str | None, *, settings: Settings, progress: bool, cache: Path) -> CachedEncoder:
    """The configured encoder: the embeddings server at ``settings.embed_endpoint`` (``EMBED_BASE_URL``), else the
    in-process ``model`` (None: the bundled all-MiniLM-L6-v2). A local ``model`` together with a server is refused.
    Either keeps its vectors in the embeddings cache of the cache folder ``cache`` (``dp.roots.cache``)."""
    if not settings.embed_configured:
        return Embedder(model, progress=progress, cache_root=embeddings_root(cache))
    if model:
        raise EmbedderMismatch(
            f"two encoders given: the local model {model!r} (02's embedding_model) and the embeddings server "
            f"EMBED_BASE_URL={settings.embed_endpoint} (EMBED_MODEL={settings.embed_model!r}); clear one of them"
        )
    return RemoteEmbedder(settings, progress=progress, cache_root=embeddings_root(cache))


def embedder_record(emb: CachedEncoder) -> dict:
    """``emb.record()``; a stand-in that only encodes (a test's, a bench's) counts as an in-process model."""
    record = getattr(emb, "record", None)
    if record is not None:
        return record()
    return {"kind": "in-process", "model": emb.model_id, "key": emb.key, "describe": f"{emb.model_id} (in-process)"}


def check_embedder(info: IndexInfo, emb: CachedEncoder) -> None:
    """Refuse ``emb`` unless it is the encoder that built the index ``info`` describes (its key), naming both."""
    if emb.key == info.model_key:
        return
    now = embedder_record(emb)["describe"]
    raise EmbedderMismatch(
        f"the indexes of {info.dataset} were built with {info.embedder_described()}, and the configured encoder is "
        f"{now}: vectors of two encoders are never mixed. Set EMBED_BASE_URL / EMBED_MODEL back to what built the "
        "index (unset both for the in-process model), or rebuild the index with the new encoder (re-run the "
        "02-build-indexes stage: make report does)."
    )
