"""How far to trust a generated question set, or an LLM's grades: do they rank systems the way the human ones do?

A synthetic test collection is trusted in IR research when it orders systems as the human judgments do: the
system-ranking correlation, Kendall's tau (Voorhees, "Variations in relevance judgments and the measurement of
retrieval effectiveness", SIGIR 1998, where tau >= .9 counts as the same ranking; Buckley and Voorhees 2004).
The systems here are the sweep grid's points (fusion method, its k or weights, leg depth, BM25 parameters;
chunking points are left out, they re-index), each scored by mean nDCG@``final_k``. Two comparisons:

- :func:`validate`: the human questions with the human qrels against a drafted set with its qrels (the source
  unit of each question), notebook 08 with ``validate_drafts``;
- :func:`qrels_validation`: the same human questions scored with the human qrels and with human+LLM qrels (the
  LLM assessor's grades for the pairs no human judged, exactly as 05's ``qrels_source = "human+llm"``:
  :func:`rerankeval.evaluate.agreement.analysis_qrels`), notebook 09 after the grades are written. The questions
  are the same, so the legs are searched once and scored twice (:func:`scores_by_qrels`).

The legs are searched once per question set (:class:`rerankeval.experiments.grid.Engine`); nothing calls an LLM.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd

from rerankeval.core.ioutil import atomic_write_json, atomic_write_text
from rerankeval.core.paths import DatasetPaths
from rerankeval.core.runs import Qrels, read_qrels
from rerankeval.core.settings import Settings
from rerankeval.corpus import contract as corpus
from rerankeval.corpus import queryset
from rerankeval.evaluate import agreement, judgments
from rerankeval.evaluate.agreement import kendall_tau
from rerankeval.experiments.grid import Engine, Point, load_grid, score_points

HUMAN, GENERATED, HUMAN_LLM = "human", "generated", "human+llm"
QRELS_VALIDATION = "qrels_validation"  # stage_dir("assess") / qrels_validation.json and .csv (notebook 09)
BAR = 0.9  # Voorhees' bar for "the same ranking"


@dataclass
class Validation:
    """Two system rankings side by side (``table``: point and the two ``columns``) and their Kendall tau;
    ``skipped`` says why there is nothing (then ``table`` is empty)."""

    table: pd.DataFrame
    tau: dict[str, Any] = field(default_factory=dict)  # tau, p_value, n_systems, n_pairs, note
    n_queries: dict[str, int] = field(default_factory=dict)
    metric: str = "ndcg@10"
    columns: tuple[str, str] = (HUMAN, GENERATED)
    record: dict[str, Any] = field(default_factory=dict)  # human+llm: the LLM file and the grades it added
    skipped: str = ""

    def sentence(self) -> str:
        if self.skipped:
            return f"Human vs human+LLM qrels: skipped, {self.skipped}."
        t = self.tau
        what = self._what()
        if t.get("tau") is None:
            return (
                f"No Kendall tau between the system rankings {what}: {t.get('note') or 'too few systems'} "
                f"({t.get('n_systems', 0)} systems, {t.get('n_pairs', 0)} pairs)."
            )
        verdict = (
            "At or above .9 the two rank systems alike."
            if t["tau"] >= BAR
            else "Below .9 (Voorhees' bar for the same ranking): "
            + (
                "the LLM's grades change which systems win, so read the human+llm tables with care."
                if self.columns[1] == HUMAN_LLM
                else "the generated set orders these systems differently "
                "from your questions, so read its comparisons with care."
            )
        )
        return (
            f"Kendall's tau-b between the system rankings {what}: {t['tau']:.3f} over {t['n_systems']} systems "
            f"({t['n_pairs']} pairs; p = {t['p_value']:.2g}). {verdict}"
        )

    def _what(self) -> str:
        n = self.n_queries
        if self.columns[1] != HUMAN_LLM:
            return f"on the human questions ({n.get(HUMAN, 0)}) and on the generated ones ({n.get(GENERATED, 0)})"
        added = self.record.get("llm_added", 0)
        return (
            f"on the {n.get(HUMAN, 0)} human questions scored with the human qrels and with human+LLM qrels "
            f"({added} LLM grades from {self.record.get('llm_file') or 'the LLM file'} for pairs no human judged"
            + ("; none added, so both rankings are the same by construction" if not added else "")
            + ")"
        )

    def labels(self) -> tuple[str, str]:
        """The scatter plot's axis labels."""
        if self.columns[1] == HUMAN_LLM:
            return f"{self.metric} with the human qrels", f"{self.metric} with human + LLM qrels"
        return f"{self.metric} on the human questions", f"{self.metric} on the generated questions"


def human_set(dp: DatasetPaths) -> tuple[dict[str, str], Qrels]:
    """The questions and qrels stage 01 evaluates (the human ones on a dataset that has them)."""
    return corpus.load_queries(dp), corpus.load_qrels(dp)


def draft_set(queries: Path, qrels: Path) -> tuple[dict[str, str], Qrels]:
    """A drafted set's questions (every status but rejected) and qrels."""
    drafts = queryset.draft_queries(queries)
    return {q: v["text"] for q, v in drafts.items()}, (read_qrels(qrels) if qrels.is_file() else {})


def judged(queries: Mapping[str, str], qrels: Qrels) -> list[str]:
    """The questions with at least one relevant unit in ``qrels``, sorted."""
    return sorted(q for q in queries if any(v > 0 for v in qrels.get(q, {}).values()))


def scores_by_qrels(
    dp: DatasetPaths,
    queries: Mapping[str, str],
    qrels_sets: Mapping[str, Qrels],
    *,
    settings: Settings,
    grid: str = "small",
    leg_k: int = 100,
    final_k: int = 10,
) -> pd.DataFrame:
    """Mean ``ndcg@final_k`` of every non-chunking point of ``grid`` over ``queries``, one column per qrels set
    (index: point). The legs are searched once, then every set scores the same runs."""
    g = load_grid(grid)
    points = [
        p for p in g.points(Point(leg_k=leg_k), pdf=corpus.load_stats(dp).get("kind") == "pdf") if not p.chunk_size
    ]
    col, qids = f"ndcg@{final_k}", sorted(queries)
    out = {}
    with Engine.open(dp, dict(queries), max(g.max_leg_k, leg_k), settings) as eng:
        for name, qrels in qrels_sets.items():
            per_query, _ = score_points(eng, points, qids, qrels, [col])
            out[name] = per_query[per_query.metric == col].groupby("point").value.mean()
    return _frame(out, col)


def _frame(out: Mapping[str, pd.Series], col: str) -> pd.DataFrame:
    frame = pd.DataFrame(dict(out)).rename_axis("point")
    frame.attrs["metric"] = col
    return frame


def system_scores(dp: DatasetPaths, queries: Mapping[str, str], qrels: Qrels, **kw: Any) -> pd.Series:
    """Mean ``ndcg@final_k`` of every non-chunking point of ``grid`` over the judged ``queries``."""
    frame = scores_by_qrels(dp, {q: queries[q] for q in judged(queries, qrels)}, {"s": qrels}, **kw)
    return frame["s"].rename(frame.attrs["metric"])


def validate(
    dp: DatasetPaths, human: tuple[Mapping[str, str], Qrels], generated: tuple[Mapping[str, str], Qrels], **kw: Any
) -> Validation:
    """Both sets' system scores and the Kendall tau between their rankings (``kw``: :func:`system_scores`')."""
    a = system_scores(dp, *human, **kw)
    b = system_scores(dp, *generated, **kw)
    table = pd.DataFrame({HUMAN: a, GENERATED: b}).dropna().rename_axis("point").reset_index()
    n = {HUMAN: sum(1 for q in human[0] if q in human[1]), GENERATED: sum(1 for q in generated[0] if q in generated[1])}
    return Validation(table, kendall_tau(a.to_dict(), b.to_dict()), n, str(a.name))


def _skip_reason(dp: DatasetPaths) -> str:
    if not agreement.llm_qrels_files(dp):
        return (
            "no LLM grades (qrels/llm-<model>-<hash>.tsv) in the dataset folder; run 09-assess with assess=true "
            '(make report P="assess=true") to grade the unjudged pool, then this comparison runs'
        )
    if queryset.query_source(dp).kind == queryset.GENERATED:
        return (
            "the dataset's questions are generated (queries.draft.jsonl), not human: there are no human qrels "
            "to compare the LLM's grades with"
        )
    if not dp.index_manifest.is_file():
        return "the indexes are not built (run 02-index first): the systems cannot be searched"
    return ""


def qrels_validation(dp: DatasetPaths, **kw: Any) -> Validation:
    """The systems' scores on the human questions with the human qrels (stage 01's plus the explorer's judgments,
    as 05) and with human+LLM qrels (the newest LLM file's grades for pairs no human judged, as 05's
    ``qrels_source = "human+llm"``), and the Kendall tau between the two rankings (``kw``: :func:`scores_by_qrels`').
    The questions are those with a relevant unit in the human qrels, the same for both. Skipped, saying why,
    without LLM grades, human questions or indexes."""
    cols = (HUMAN, HUMAN_LLM)
    if reason := _skip_reason(dp):
        return Validation(pd.DataFrame(columns=["point", *cols]), columns=cols, skipped=reason)
    queries = corpus.load_queries(dp)
    human = judgments.merged_qrels(dp, corpus.load_qrels(dp))[0]
    merged, rec = agreement.analysis_qrels(dp, human, HUMAN_LLM)
    qids = judged(queries, human)
    record = {"llm_file": rec["llm_file"], "llm_added": rec["llm_added"]}
    if not qids:
        return Validation(
            pd.DataFrame(columns=["point", *cols]),
            columns=cols,
            record=record,
            skipped="no human question has a relevant unit in the qrels",
        )
    frame = scores_by_qrels(dp, {q: queries[q] for q in qids}, {HUMAN: human, HUMAN_LLM: merged}, **kw)
    table = frame.dropna().reset_index()
    tau = kendall_tau(frame[HUMAN].dropna().to_dict(), frame[HUMAN_LLM].dropna().to_dict())
    return Validation(table, tau, {HUMAN: len(qids)}, frame.attrs["metric"], cols, record)


def write_qrels_validation(dp: DatasetPaths, check: Validation) -> dict[str, str]:
    """``assess/qrels_validation.json`` (tau, systems, pairs, queries, the LLM file, the sentence; or why it was
    skipped) and ``.csv`` (the table). A skipped run removes an earlier run's table and figure, which no longer hold."""
    folder = dp.stage_dir("assess")
    folder.mkdir(parents=True, exist_ok=True)
    rec = {
        "columns": list(check.columns),
        "metric": check.metric,
        "tau": check.tau,
        "n_queries": check.n_queries,
        **check.record,
        "skipped": check.skipped,
        "sentence": check.sentence(),
    }
    written = {"json": str(atomic_write_json(folder / f"{QRELS_VALIDATION}.json", rec))}
    csv = folder / f"{QRELS_VALIDATION}.csv"
    if check.skipped:
        csv.unlink(missing_ok=True)
        dp.figure(f"09-{QRELS_VALIDATION.replace('_', '-')}").unlink(missing_ok=True)
    else:
        written["csv"] = str(atomic_write_text(csv, check.table.to_csv(index=False)))
    return written
