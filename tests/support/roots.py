"""The results, cache and Qdrant folders of the test's environment (``tests/conftest.py`` moves results and Qdrant
under tmp), as a program's entry point would pass them down: for a test that builds a ``DatasetPaths`` or an encoder
itself rather than through ``resolve_dataset(name, load_settings())``."""

from __future__ import annotations

from pathlib import Path

from rerankeval.core.paths import Roots
from rerankeval.core.settings import load_settings


def roots_under(monkeypatch, tmp: Path) -> None:
    """The environment's results, Qdrant and cache folders moved to ``tmp`` (``results``, ``qdrant``, ``cache``)."""
    for k, sub in (
        ("RERANKEVAL_RESULTS", "results"),
        ("RERANKEVAL_QDRANT_PATH", "qdrant"),
        ("RERANKEVAL_CACHE", "cache"),
    ):
        monkeypatch.setenv(k, str(tmp / sub))


def env_roots() -> Roots:
    """``Roots.of(load_settings())``: ``RERANKEVAL_RESULTS``, ``_CACHE`` and ``_QDRANT_PATH`` as the test set them."""
    return Roots.of(load_settings())


def env_embeddings() -> Path:
    """The embeddings cache of :func:`env_roots` (an encoder's ``cache_root``)."""
    from rerankeval.index.embed import embeddings_root

    return embeddings_root(env_roots().cache)
