"""Stage 02, build the indexes: the face of the stage. ``from rerankeval import index`` then::

    result = index.run(dp, index.Params.of(globals()), settings)   # BM25, embeddings, the Qdrant collection
    index.write(dp, result)                                         # the manifest, last: a complete build

:data:`__all__` is the stage's public face: its parameters (``Params``, the one home of their defaults), its
``Result``, ``run(dp, params, settings)``, ``write(dp, result)``, the reader of the manifest that later stages use
(``load_index_info`` and its record ``IndexInfo``) and the encoder stage 03 must search with (``open_embedder``,
``check_embedder``, ``EmbedderMismatch``). Behind it, each name has one home: ``build`` (run/write and their
steps), ``manifest`` (the record and its reader), ``encoder`` (which encoder, and the check), ``bm25``, ``embed``
and ``embed_remote`` (the encoders and their cache), ``terms``, ``embed_server`` and ``qdrant/`` (both Qdrant
backends, the RRF constant they send, what approximate dense search costs); import those from their module.
May import rerankeval.corpus and rerankeval.core; never retrieve. The face's names load on first use (PEP 562), so
importing one module behind it (``rerankeval.index.qdrant.rrf``, ``.bm25``) does not import the stage.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from rerankeval.core.face import lazy

if TYPE_CHECKING:
    from rerankeval.index.build import Params, Result, run, write
    from rerankeval.index.encoder import EmbedderMismatch, check_embedder, open_embedder
    from rerankeval.index.manifest import IndexInfo, load_index_info

__all__ = [
    "EmbedderMismatch",
    "IndexInfo",
    "Params",
    "Result",
    "check_embedder",
    "load_index_info",
    "open_embedder",
    "run",
    "write",
]

_HOME = {
    "Params": "build",
    "Result": "build",
    "run": "build",
    "write": "build",
    "IndexInfo": "manifest",
    "load_index_info": "manifest",
    "open_embedder": "encoder",
    "check_embedder": "encoder",
    "EmbedderMismatch": "encoder",
}


__getattr__, __dir__ = lazy(__name__, _HOME)
