"""What to judge next (issue 34 item 2): the explorer's judging queue and the status of each comparison, from the
saved runs and the qrels with the explorer's judgments, without re-running the chain. Part of
:mod:`rerankeval.apps.explore` (call it as ``explore.next_to_judge``); the bounds, the decision and the weights are
:mod:`rerankeval.evaluate.incomplete`'s.

- ``mode="queue"``: the unjudged units that move an open (undecided) comparison most, heaviest first (Minimal Test
  Collections' weight: the difference of the discounted gain a unit can give the two runs, summed over the open
  comparisons), each with why it matters;
- ``mode="sample"``: the next units of a seeded uniform random sample of the unjudged pool (every variant's top k),
  to grade whatever they are: prediction-powered intervals for LLM grades need such a sample
  (:func:`rerankeval.evaluate.ppi.ppi_metric`, at least :data:`~rerankeval.evaluate.ppi.PPI_MIN_HUMAN`).
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import pandas as pd

from rerankeval.core.names import VECTOR
from rerankeval.core.runs import Qrels, Run
from rerankeval.evaluate import incomplete, judging_queue, judgments, metrics
from rerankeval.evaluate.analysis_records import read_summary
from rerankeval.evaluate.ppi import PPI_MIN_HUMAN

MODES = ("queue", "sample")
COLUMNS = ["qid", "query", "unit_id", "weight", "why", "where", "snippet"]


@dataclass
class NextUnits:
    """The units to judge next (:data:`COLUMNS`), one status line per comparison, and what was noticed."""

    mode: str
    units: pd.DataFrame
    status: list[str]
    notes: list[str] = field(default_factory=list)
    seconds: float = 0.0

    def lines(self) -> list[str]:
        """The notes, then the status lines (what the widget and the notebook print)."""
        return [*self.notes, *self.status]

    def __repr__(self) -> str:
        table = self.units[["qid", "unit_id", "weight", "why"]].to_string(index=False) if len(self.units) else ""
        return "\n".join([*self.lines(), table]).rstrip()


def evaluated(runs: Mapping[str, Run], qrels: Qrels, queries: Sequence[str]) -> list[str]:
    """The queries 05 evaluates: at least one relevant unit, in queries.jsonl (a run lacking one scores 0)."""
    return metrics.query_set(runs, qrels, queries, policy="zero").qids


def comparisons(dp: Any, variants: Sequence[str]) -> tuple[list[tuple[str, str]], int]:
    """The first screen's comparisons (each variant vs the baseline 05 recorded, else vector, else the first
    variant; each reranker vs its first stage) and the headline cutoff k."""
    summary = read_summary(dp)
    base = (
        summary.baseline if summary and summary.baseline in variants else VECTOR if VECTOR in variants else variants[0]
    )
    return incomplete.default_pairs(list(variants), base), int(summary.k) if summary else 10


def _done(dp: Any, judging: judging_queue.Judging, pair: tuple[str, str]) -> int:
    """Grades of the judgments file for units in the top k of either run of ``pair`` (evaluated queries)."""
    rows = judgments.read_judgments(dp.judgments(judgments.split_of(dp)))
    return sum(1 for q, u, _, _ in rows if q in judging.tops and any(u in judging.tops[q][v] for v in pair))


def status_line(judging: judging_queue.Judging, pair: tuple[str, str], done: int) -> str:
    """``hybrid vs vector: undecided — at most 23 judgments could decide it; 6 done`` (or decided, tied, identical)."""
    a, b = pair
    lo, hi = judging.interval(pair)
    left = sum(1 for q, p in judging.pools.items() for u in p.units if u in p.ranks[a] or u in p.ranks[b])
    span = f"\u0394 {metrics.label(judging.metric)} {lo:+.3f} to {hi:+.3f}"
    if all(t[a] == t[b] for t in judging.tops.values()):
        return (
            f"{a} vs {b}: identical \u2014 the same top {judging.k} for every query, nothing to compare "
            f"(a degenerate comparison); {done} done"
        )
    if lo > 0 or hi < 0:
        return (
            f"{a} vs {b}: decided \u2014 {a if lo > 0 else b} is better whatever the {left} unjudged units "
            f"turn out to be ({span}); {done} done"
        )
    if lo == hi:
        return f"{a} vs {b}: tied \u2014 every unit of their top {judging.k} is judged; {done} done"
    return f"{a} vs {b}: undecided \u2014 at most {left} judgments could decide it ({span}); {done} done"


def _why(by: Mapping[tuple[str, str], float], label: str) -> str:
    return "; ".join(
        f"moves {a} vs {b} by up to {w:.3f} {label}" for (a, b), w in sorted(by.items(), key=lambda kv: -kv[1]) if w > 0
    )


def next_units(ex: Any, n: int = 5, mode: str = "queue", seed: int = 0) -> NextUnits:
    """The next ``n`` units to judge on the explorer ``ex`` (see the module); the status of every comparison."""
    t0 = time.perf_counter()
    if mode not in MODES:
        raise ValueError(f"mode must be one of {', '.join(MODES)}, got {mode!r}")
    if int(n) < 1:
        raise ValueError(f"n must be at least 1 (the number of units to show), got {n!r}")
    notes = list(ex.take_notes()) if hasattr(ex, "take_notes") else []
    qrels = ex.qrels
    qids = evaluated(ex.runs, qrels, list(ex.table))
    pairs, k = comparisons(ex.dp, list(ex.runs))
    judging = judging_queue.Judging(ex.runs, qrels, qids, f"ndcg@{k}", pairs)
    status = [status_line(judging, p, _done(ex.dp, judging, p)) for p in pairs]
    if mode == "queue":
        picked = [(q, u, w, _why(by, metrics.label(judging.metric))) for q, u, w, by in judging.queue()]
        empty = "every comparison is decided, tied or identical: no unjudged unit can change one"
        which = "unjudged units can move an open comparison"
    else:
        picked, drawn = _sample(ex.runs, ex.original_qrels, qrels, qids, k, seed)
        status.append(
            f"random sample: {drawn[0]} of its first {drawn[1]} units graded; prediction-powered intervals "
            f"need at least {PPI_MIN_HUMAN}"
        )
        empty = "every unit of the pool is judged: there is nothing left to sample"
        which = "units of the sample are still unjudged"
    if len(picked) < n:
        notes.append(
            f"asked for {n} units, but only {len(picked)} {which}: all {len(picked)} are shown" if picked else empty
        )
    rows = [_row(ex, q, u, w, why) for q, u, w, why in picked[: int(n)]]
    return NextUnits(mode, pd.DataFrame(rows, columns=COLUMNS), status, notes, time.perf_counter() - t0)


def _sample(
    runs: Mapping[str, Run], original: Qrels, qrels: Qrels, qids: Sequence[str], k: int, seed: int
) -> tuple[list[tuple[str, str, float, str]], tuple[int, int]]:
    """The sample: the holes of the dataset's own qrels in every variant's top k, in a seeded random order (fixed:
    grading does not reshuffle it). Returns its ungraded units in that order, and (graded, drawn): the graded units
    before the first ungraded one, and that prefix's length with the next unit."""
    pool = judging_queue.sample_order(runs, original, qids, k, seed)
    out, graded = [], 0
    for i, (q, u) in enumerate(pool, start=1):
        if u in qrels.get(q, {}):
            graded += not out
            continue
        out.append((q, u, 0.0, f"random sample item {i} of {len(pool)}: grade it whatever it is"))
    return out, (graded, graded + (1 if out else 0))


def _row(ex: Any, q: str, u: str, w: float, why: str) -> list[Any]:
    text = ex.table.get(q, "")
    chunk = next((ex._best(v).get(q, {}).get(u) for v in ex.runs if ex._best(v).get(q, {}).get(u)), None)
    hit = ex.texts.hit(0, u, 0.0, chunk, ex.texts.terms(text))
    return [q, text, u, round(float(w), 6), why, hit.where, hit.snippet]


def retrieved_by(runs: Mapping[str, Run], qid: str, unit: str) -> list[str]:
    """The variants whose saved run retrieved ``unit`` for ``qid`` (at any depth)."""
    return [v for v, r in runs.items() if unit in r.get(qid, {})]


def unretrieved_note(runs: Mapping[str, Run], qid: str, unit: str) -> str:
    """Said after a grade for a unit no saved run retrieved for the query (the grade is kept), else ""."""
    if retrieved_by(runs, qid, unit):
        return ""
    return (
        f"note: no saved run retrieved {unit} for {qid}; the grade is kept and counts in the query's ideal (a "
        "relevant unit nobody found lowers every run's nDCG), but it moves no comparison"
    )


def judgments_signature(dp: Any) -> tuple[int, int] | None:
    """(modification time in ns, size) of the dataset's judgments file, None when there is none."""
    try:
        st = dp.judgments(judgments.split_of(dp)).stat()
    except OSError:
        return None
    return (st.st_mtime_ns, st.st_size)


def changed_note(dp: Any) -> str:
    """What the explorer says when the judgments file changed on disk since it was read."""
    path = dp.judgments(judgments.split_of(dp))
    n = len(judgments.read_judgments(path))
    return (
        f"the judgments file {path} changed on disk since the explorer read it (another explorer, a process or "
        f"an edit): re-read, {n} grades in it now; nothing was lost (each grade is recorded under a lock)"
    )
