"""Stage 04's quick look, before stage 05: how the reranked run compares with the hybrid on the judged queries
it reranked, and how the LLM scored relevant candidates against the others (notebook 04 shows both).

Measuring is stage 05's: the reranker (:mod:`rerankeval.rerank`) never imports evaluate.
"""

from __future__ import annotations

import pandas as pd

from rerankeval.core import runs
from rerankeval.core.names import HYBRID, HYBRID_RERANK
from rerankeval.core.paths import DatasetPaths
from rerankeval.corpus import contract as corpus
from rerankeval.evaluate import metrics
from rerankeval.rerank.config import MAIN_PASS
from rerankeval.rerank.core import Result


def quick_check(
    dp: DatasetPaths, fused: runs.Run, result: Result, qids: list[str]
) -> tuple[pd.DataFrame, pd.DataFrame] | None:
    """nDCG@10 and MRR@10 of the hybrid and the reranked run on the reranked judged queries (variant x metric),
    and the LLM's scores of relevant vs other candidates (``describe()`` by ``relevant``). None when no
    reranked query is judged."""
    qrels = corpus.load_qrels(dp)
    judged = [q for q in qids if q in qrels]
    if not judged:
        return None
    found = {
        HYBRID: {q: fused[q] for q in judged},
        HYBRID_RERANK: {q: result.run[q] for q in judged if q in result.run},
    }
    qs = metrics.query_set(found, qrels, judged, policy="zero")
    cols = [c for c in metrics.metric_columns([10], ["ndcg", "mrr"]) if c != "map"]
    table = metrics.evaluate(found, qrels, qs, cols).pivot_table(
        index="variant", columns="metric", values="value", sort=False
    )
    c = result.candidates[result.candidates["pass"] == MAIN_PASS]
    relevant = [qrels.get(q, {}).get(d, 0) > 0 for q, d in zip(c.qid, c.docid, strict=True)]
    return table, c.assign(relevant=relevant).groupby("relevant")["llm_score"].describe()
