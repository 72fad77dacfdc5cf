"""Stage 03, retrieve: the face of the stage. ``from rerankeval import retrieve`` then::

    result = retrieve.run(dp, retrieve.Params.of(globals()), settings)   # searches (or reads back), writes nothing
    retrieve.write(dp, result)                                          # run files, records, the rewrite ledger

:data:`__all__` is the stage's public face: its parameters (``Params``, the one home of their defaults), its
``Result``, ``run(dp, params, settings)``, ``write(dp, result)`` and the reader of the file it saves that others
read (``read_ledger``: the rewrite ledger). Behind it, each name has one home: ``stage`` (run/write; each variant
fetched: read back when its key did not change, else searched), ``params``, ``runkey`` (the key of a variant's run:
its inputs, parameters, model), ``codeversion`` (the code version in that key), ``runstore`` (the key files: saved
runs read back and vouched for), ``search`` (one variant searched), ``qdrant_compare`` (Qdrant's own fusion against
ours), ``retriever`` (the built indexes searched; ``Retriever``, ``VARIANTS``, ``BASE_VARIANTS``, ``REWRITES``),
``variants`` (the registry of the variants that search, their ``Budget``), ``reformulate`` (the LLM query-rewriting
step in front of the hybrid), ``fusion``, ``cross_encoder`` and ``source`` (the protocol the variants search
through); import those from their module. Names come from the catalogue, rerankeval.core.names. May import llm
(lazily: only the rewrite step asks a model), index, corpus and core; never rerank (they meet only through run
files). The face's names load on first use (PEP 562), so importing one module behind it
(``rerankeval.retrieve.fusion``, ``.variants``) does not import the stage.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from rerankeval.core.face import lazy

if TYPE_CHECKING:
    from rerankeval.retrieve.params import Params
    from rerankeval.retrieve.reformulate import read_ledger
    from rerankeval.retrieve.stage import Result, run, write

__all__ = ["Params", "Result", "read_ledger", "run", "write"]

_HOME = {
    "Params": "rerankeval.retrieve.params",
    "Result": "rerankeval.retrieve.stage",
    "run": "rerankeval.retrieve.stage",
    "write": "rerankeval.retrieve.stage",
    "read_ledger": "rerankeval.retrieve.reformulate",
}


__getattr__, __dir__ = lazy(__name__, _HOME)
