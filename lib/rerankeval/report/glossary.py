"""One-line definitions of the variants for the report's readers (the index's "variants" list).

:data:`DEFINITIONS` says in plain words what each name of :mod:`rerankeval.core.names` is; a name it lacks falls
back to the catalogue's technical description (:func:`rerankeval.core.names.describe`), and a run file from another
system is said to be one. The catalogue stays the one list of names; these are the words the page uses for them.
"""

from __future__ import annotations

from collections.abc import Iterable

from rerankeval.core import names as N

RRF = "Reciprocal Rank Fusion (Cormack, Clarke and Büttcher, SIGIR 2009)"
DEFINITIONS: dict[str, str] = {
    N.VECTOR: "dense retrieval: chunks whose embedding (all-MiniLM-L6-v2) is closest to the question's, in Qdrant",
    N.BM25: "keyword retrieval: BM25 over the analysed words of each chunk",
    N.HYBRID: f"vector and bm25 combined by {RRF}: a unit scores the sum of 1/(rrf_k + its rank) over the "
    "two lists (rrf_k = 60 by default)",
    N.QDRANT_HYBRID: "the same fusion (RRF) computed by Qdrant's own Query API over its dense and sparse BM25 search",
    N.HYBRID_COMBSUM: "vector and bm25 combined by adding their min-max normalised scores (CombSUM)",
    N.HYBRID_COMBMNZ: "CombSUM multiplied by the number of lists that found the unit (CombMNZ)",
    N.HYBRID_DBSF: "vector and bm25 combined by distribution-based score fusion (each list's scores standardised, "
    "then added), as Qdrant's DBSF",
    N.QDRANT_DBSF: "distribution-based score fusion computed by Qdrant's own Query API",
    N.CROSS_ENCODER: "hybrid's top pool_k units reordered by a local cross-encoder model (question and passage "
    "read together)",
    N.HYBRID_REFORMULATE: "hybrid, where a question with a weak top score is rewritten by the LLM and the rewrite's "
    "results fused in, unless a judgment-free check says the rewrite retrieves worse",
    N.HYBRID_RERANK: "hybrid's top pool_k units reordered by the LLM reranker (stage 04)",
    N.HYBRID_RERANK_EXPAND: "hybrid_rerank with each candidate shown to the LLM together with its neighbouring "
    "chunks of the same page",
    N.HYBRID_TUNED: "hybrid with the fusion setting a sweep chose on other queries (06-sweep), measured only on the "
    "queries that did not choose it",
}
EXTERNAL = "a run file from another system (runs/{name}.trec), evaluated as trec_eval would"


def define(name: str) -> str:
    """The one-line definition of ``name`` (:data:`DEFINITIONS`, else the catalogue's, else an external run)."""
    return DEFINITIONS.get(name) or N.describe().get(name) or EXTERNAL.format(name=name)


def variants(shown: Iterable[str]) -> list[dict[str, str]]:
    """``[{"name", "text"}]`` for the variants ``shown`` on a page, in that order, each once."""
    return [{"name": v, "text": define(v)} for v in dict.fromkeys(shown)]
