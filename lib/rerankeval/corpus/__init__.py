"""Stage 01, corpus: the face of the stage. ``from rerankeval import corpus`` then::

    result = corpus.run(dp, corpus.Params.of(globals()), settings)   # checks, extracts, validates; writes nothing
    corpus.write(dp, result)                                         # chunks, queries, qrels, tables, stats.json

:data:`__all__` is the stage's public face: its parameters (``Params``, the one home of their defaults), its
``Result``, ``run(dp, params, settings)``, ``write(dp, result)`` and ``contract``, the module of the readers of the
files it saves (``corpus.contract.load_chunks``, ``load_queries``, ``load_qrels``, ``load_stats``, ...). Behind it,
each name has one home: ``stage`` (run/write, Params, Result), ``extract`` (the folder checked, the documents
chunked: ``pdf``, ``textnorm``, ``beir``), ``queryset`` (human questions, else the drafts), ``snippets`` and
``views`` (plain-text snippets of units, the notebook's tables); import those from their module.

May import rerankeval.core only. The face's names load on first use (PEP 562), so importing one module behind it
(``rerankeval.corpus.contract``: every later stage) does not import the extraction with it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from rerankeval.core.face import lazy

if TYPE_CHECKING:
    from rerankeval.corpus import contract
    from rerankeval.corpus.stage import Params, Result, run, write

__all__ = ["Params", "Result", "contract", "run", "write"]

_HOME = {
    "Params": "rerankeval.corpus.stage",
    "Result": "rerankeval.corpus.stage",
    "run": "rerankeval.corpus.stage",
    "write": "rerankeval.corpus.stage",
}


__getattr__, __dir__ = lazy(__name__, _HOME, submodules=("contract",))
