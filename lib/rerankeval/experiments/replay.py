"""Stage 04's recorded LLM scores, replayed on other pools: a sweep point's rerank without an LLM call.

Only for modes whose score of a candidate does not depend on the other candidates (:data:`REPLAYABLE`).
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from rerankeval.core.paths import DatasetPaths
from rerankeval.core.runs import Run, ranked
from rerankeval.corpus.contract import read_table

REPLAYABLE = ("yesno",)  # modes whose score of a candidate does not depend on the other candidates


@dataclass
class RecordedLLM:
    """Stage 04's LLM score per (query, unit), its blend weight ``alpha``, and the LLM cost per candidate
    (tokens and seconds, cached replies at their original cost)."""

    scores: dict[str, dict[str, float]]
    alpha: float
    tokens_per_candidate: float
    seconds_per_candidate: float


def recorded_llm(dp: DatasetPaths) -> tuple[RecordedLLM | None, str]:
    """The LLM scores stage 04 recorded, when its mode scores each candidate on its own; else None, and why."""
    from rerankeval.rerank.config import MAIN_PASS
    from rerankeval.rerank.ledger import read_ledger

    if not (dp.rerank_summary.is_file() and dp.rerank_candidates.is_file()):
        return None, "no rerank stage output (run 04-rerank): reranked results are skipped"
    cfg = json.loads(dp.rerank_summary.read_text(encoding="utf-8")).get("config", {})
    if cfg.get("mode") not in REPLAYABLE:
        return None, (
            f"the rerank mode {cfg.get('mode')!r} scores candidates jointly, so other pools cannot be "
            f"replayed from its replies (only {', '.join(REPLAYABLE)}): reranked results are skipped"
        )
    cands = read_table(dp.rerank_candidates, ids=("qid", "docid"))  # "NA", "null" ... are ids, not missing
    cands = cands[(cands["pass"] == MAIN_PASS) & cands.llm_score.notna()]
    ledger = read_ledger(dp.ledger, missing_ok=True)
    main = ledger[ledger["pass"] == MAIN_PASS] if ledger is not None and len(ledger) else None
    n = max(1, len(cands))
    tokens = (
        0.0
        if main is None
        else float(
            main[["prompt_tokens", "completion_tokens", "saved_prompt_tokens", "saved_completion_tokens"]]
            .to_numpy()
            .sum()
        )
        / n
    )
    seconds = 0.0 if main is None else float(main["llm_seconds"].sum()) / n
    scores: dict[str, dict[str, float]] = {}
    for q, d, s in zip(cands.qid, cands.docid, cands.llm_score, strict=True):
        scores.setdefault(q, {})[d] = float(s)
    why = f"reranked from the {len(cands)} LLM scores stage 04 recorded ({len(scores)} queries); no LLM call"
    return RecordedLLM(scores, float(cfg.get("alpha", 1.0)), tokens, seconds), why


def replay(run: Run, llm: RecordedLLM, pool_k: int) -> Run:
    """Stage 04's reorder of each query's top ``pool_k`` from the recorded scores (blend ``alpha`` of the
    min-max LLM and fused scores, as :mod:`rerankeval.rerank.core`), for the queries whose whole pool was
    scored; the rest of the list keeps its fused order."""
    from rerankeval.llm.repair import order_by_scores
    from rerankeval.rerank.scores import minmax

    out: Run = {}
    for q, docs in run.items():
        items = ranked(docs)
        pool, rest = items[:pool_k], items[pool_k:]
        got = llm.scores.get(q, {})
        if not pool or any(d not in got for d, _ in pool):
            continue
        blend = [
            llm.alpha * a + (1 - llm.alpha) * b
            for a, b in zip(minmax([got[d] for d, _ in pool]), minmax([s for _, s in pool]), strict=True)
        ]
        order = [pool[i][0] for i in order_by_scores(blend)] + [d for d, _ in rest]
        out[q] = {d: float(len(order) - i) for i, d in enumerate(order)}
    return out
