"""How far to trust a generated question set: does it rank systems the way the human set does?

A synthetic test collection is trusted in IR research when it orders systems as the human judgments do: the
system-ranking correlation, Kendall's tau (Voorhees, "Variations in relevance judgments and the measurement of
retrieval effectiveness", SIGIR 1998, where tau >= .9 counts as the same ranking; Buckley and Voorhees 2004).
The systems here are the sweep grid's points (fusion method, its k or weights, leg depth, BM25 parameters;
chunking points are left out, they re-index), each scored by mean nDCG@``final_k`` on the human questions with
the human qrels and on a drafted set with its qrels (the source unit of each question). The legs are searched
once per question set (:class:`rerankeval.experiments.grid.Engine`); nothing calls an LLM.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd

from rerankeval.core.paths import DatasetPaths
from rerankeval.core.runs import Qrels, read_qrels
from rerankeval.corpus import contract as corpus
from rerankeval.corpus import queryset
from rerankeval.evaluate.agreement import kendall_tau
from rerankeval.experiments.grid import Engine, Point, load_grid, score_points

HUMAN, GENERATED = "human", "generated"


@dataclass
class Validation:
    """The two system rankings, side by side (``table``: point, human, generated), and their Kendall tau."""

    table: pd.DataFrame
    tau: dict[str, Any] = field(default_factory=dict)  # tau, p_value, n_systems, n_pairs, note
    n_queries: dict[str, int] = field(default_factory=dict)
    metric: str = "ndcg@10"

    def sentence(self) -> str:
        t = self.tau
        if t.get("tau") is None:
            return f"No Kendall tau: {t.get('note') or 'too few systems'}."
        return (f"Kendall's tau between the system rankings on the human questions ({self.n_queries.get(HUMAN, 0)}) "
                f"and on the generated ones ({self.n_queries.get(GENERATED, 0)}): {t['tau']:.3f} over "
                f"{t['n_systems']} systems ({t['n_pairs']} pairs; p = {t['p_value']:.2g}). "
                + ("At or above .9 the two sets rank systems alike." if t["tau"] >= 0.9 else
                   "Below .9 (Voorhees' bar for the same ranking): the generated set orders these systems "
                   "differently from your questions, so read its comparisons with care."))


def human_set(dp: DatasetPaths) -> tuple[dict[str, str], Qrels]:
    """The questions and qrels stage 01 evaluates (the human ones on a dataset that has them)."""
    return corpus.load_queries(dp), corpus.load_qrels(dp)


def draft_set(queries: Path, qrels: Path) -> tuple[dict[str, str], Qrels]:
    """A drafted set's questions (every status but rejected) and qrels."""
    drafts = queryset.draft_queries(queries)
    return {q: v["text"] for q, v in drafts.items()}, (read_qrels(qrels) if qrels.is_file() else {})


def system_scores(dp: DatasetPaths, queries: Mapping[str, str], qrels: Qrels, *, grid: str = "small",
                  leg_k: int = 100, final_k: int = 10) -> pd.Series:
    """Mean ``ndcg@final_k`` of every non-chunking point of ``grid`` over the judged ``queries``."""
    g = load_grid(grid)
    points = [p for p in g.points(Point(leg_k=leg_k), pdf=corpus.load_stats(dp).get("kind") == "pdf")
              if not p.chunk_size]
    qids = sorted(q for q in queries if any(v > 0 for v in qrels.get(q, {}).values()))
    col = f"ndcg@{final_k}"
    with Engine.open(dp, {q: queries[q] for q in qids}, max(g.max_leg_k, leg_k)) as eng:
        per_query, _ = score_points(eng, points, qids, qrels, [col])
    values = per_query[per_query.metric == col]
    return values.groupby("point").value.mean().rename(col)


def validate(dp: DatasetPaths, human: tuple[Mapping[str, str], Qrels], generated: tuple[Mapping[str, str], Qrels],
             **kw: Any) -> Validation:
    """Both sets' system scores and the Kendall tau between their rankings (``kw``: :func:`system_scores`')."""
    a = system_scores(dp, *human, **kw)
    b = system_scores(dp, *generated, **kw)
    table = pd.DataFrame({HUMAN: a, GENERATED: b}).dropna().rename_axis("point").reset_index()
    n = {HUMAN: sum(1 for q in human[0] if q in human[1]), GENERATED: sum(1 for q in generated[0] if q in generated[1])}
    return Validation(table, kendall_tau(a.to_dict(), b.to_dict()), n, str(a.name))
