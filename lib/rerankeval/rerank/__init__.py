"""Stage 04, rerank: the face of the stage. ``from rerankeval import rerank`` then::

    result = rerank.run(dp, rerank.Params.of(globals()), settings)   # the LLM reranks the pool; writes nothing
    rerank.write(dp, result)                                         # the run files, ledgers, candidates, summary

:data:`__all__` is the stage's public face: its parameters (``Params``, the one home of their defaults), its
``Result`` (the main arm; the neighbour-expansion arm in ``result.expanded`` when ``expand_compare``),
``run(dp, params, settings)``, ``write(dp, result)`` and the readers of the files it saves that others read
(``read_ledger``: the ledger; ``read_shown``: the expanded texts the LLM was shown). Behind it, each name has one
home: ``config`` (``Params``, the reranker's ``RerankConfig`` derived from it, ``MAIN_PASS``, the per-query
records), ``stage`` (run/write, the summary, what notebook 04 shows), ``core`` (a fused run reranked: ``Result``),
``reranker`` (``Reranker``: one query's pool, many queries, the estimate), ``modes`` (each mode's calls and
replies), ``scores`` (the arithmetic), ``prompts``, ``ledger`` (its columns, readers and why queries fell back) and
``expand`` (neighbour expansion); import those from their module.

Owns stage 04; may import llm, index, corpus and core, never retrieve (they meet only through run files). The
face's names load on first use (PEP 562), so importing one module behind it (``rerankeval.rerank.ledger``: stage
05, the chain) does not import the LLM client and openai with it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from rerankeval.core.face import lazy

if TYPE_CHECKING:
    from rerankeval.rerank.config import Params
    from rerankeval.rerank.core import Result
    from rerankeval.rerank.expand import read_shown
    from rerankeval.rerank.ledger import read_ledger
    from rerankeval.rerank.stage import run, write

__all__ = ["Params", "Result", "read_ledger", "read_shown", "run", "write"]

_HOME = {
    "Params": "rerankeval.rerank.config",
    "Result": "rerankeval.rerank.core",
    "run": "rerankeval.rerank.stage",
    "write": "rerankeval.rerank.stage",
    "read_ledger": "rerankeval.rerank.ledger",
    "read_shown": "rerankeval.rerank.expand",
}


__getattr__, __dir__ = lazy(__name__, _HOME)
