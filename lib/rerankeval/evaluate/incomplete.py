"""Numbers you can trust with holes in the judgments (issue 34): robust metrics, exact bounds, decided or not, and
the judging queue that settles a comparison. The per-query bounds are :mod:`rerankeval.evaluate.bounds`'s, the
prediction-powered intervals for LLM grades :mod:`rerankeval.evaluate.ppi`'s, the judging queue and the human
sample of the holes :mod:`rerankeval.evaluate.judging_queue`'s.

Every number says which assumption it rests on (:data:`ASSUMPTIONS`):

- **zero-fill** (as today, trec_eval's): an unjudged unit counts as not relevant;
- **condensed** (Sakai, SIGIR 2007, "Alternatives to bpref"): unjudged units are dropped from the run, which is then
  re-ranked and scored as usual (ir_measures' ``nDCG(judged_only=True)`` is the same thing for nDCG);
- **bpref** (Buckley & Voorhees, SIGIR 2004), trec_eval's, by ir_measures: only judged units count;
- **[worst, best]**: the exact minimum and maximum over every *completion*, every way of grading the unjudged units
  of the pool (the union of the given runs' top k of each query) on the dataset's scale 0..top (units outside the
  pool stay not relevant; nDCG's ideal is recomputed for each completion: :mod:`.bounds`). Queries are independent,
  so the bounds of a mean over queries are the means of the per-query bounds.

A comparison A vs B (mean over queries of the per-query difference) is **decided** when its sign holds for every
completion (worst > 0 or best < 0); its bootstrap CI (:func:`rerankeval.evaluate.stats.bootstrap_ci`) is given
under both extremes, and ``significant`` says whether both exclude 0 on the same side. Otherwise it is
**undecided**, and the judging queue (Minimal Test Collections: Carterette, Allan & Sitaraman, SIGIR 2006) orders
the unjudged units by how much their grade can move the open differences: ``top x |discount in A - discount in B|
/ ideal DCG with one more top-graded unit / n queries`` summed over the open comparisons (about how far one
judgment can move the mean difference, in metric units). :func:`expected_judgments` simulates the queue with grades
drawn from the judged units' grades to say how many judgments it is expected to need.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass

import pandas as pd

from rerankeval.core.names import CROSS_ENCODER, HYBRID, HYBRID_RERANK, HYBRID_RERANK_EXPAND
from rerankeval.core.runs import Qrels, Run, strict_order
from rerankeval.evaluate import metrics, stats
from rerankeval.evaluate.bounds import (
    QueryPool,
    family,
    query_bounds,
    query_pool,
    top_k,
    zero_fill,
)
from rerankeval.evaluate.judging_queue import Judging, expected_judgments, moves
from rerankeval.evaluate.judgments import grade_scale
from rerankeval.evaluate.ppi import TooFewHumanGrades, ppi_metric

FIRST_STAGE = {HYBRID_RERANK: HYBRID, HYBRID_RERANK_EXPAND: HYBRID_RERANK, CROSS_ENCODER: HYBRID}
ASSUMPTIONS = {
    "zero_fill": "an unjudged unit counts as not relevant (trec_eval; the numbers of metrics.csv)",
    "condensed": "unjudged units are dropped from the run before scoring (Sakai, SIGIR 2007)",
    "bpref": "only judged units count (Buckley & Voorhees, SIGIR 2004; trec_eval's bpref)",
    "worst_best": "the exact extremes over every grading (0 to the top grade) of the unjudged units in the top k of "
    "the runs shown; units no run ranks in its top k stay not relevant; nDCG's ideal is recomputed "
    "for each grading",
}


# --------------------------------------------------------------------------- many queries
@dataclass
class Pools:
    """The :class:`QueryPool` of every evaluated query for a set of runs, and the scale."""

    metric: str
    top: int
    queries: dict[str, QueryPool]

    @classmethod
    def build(
        cls, runs: Mapping[str, Run], qrels: Qrels, qids: Sequence[str], metric: str, top: int | None = None
    ) -> Pools:
        _, k = family(metric)
        top = grade_scale(qrels) if top is None else int(top)
        return cls(
            metric,
            top,
            {
                q: query_pool({v: top_k(r.get(q, {}), k) for v, r in runs.items()}, qrels.get(q, {}), q, metric)
                for q in qids
            },
        )

    def bounds(self, a: str, b: str | None = None) -> pd.DataFrame:
        """Per query: ``qid, zero_fill, worst, best, exact`` of ``a`` (minus ``b``)."""
        rows = [
            (q, zero_fill(p, self.metric, a, b), *query_bounds(p, self.metric, self.top, a, b))
            for q, p in self.queries.items()
        ]
        return pd.DataFrame(rows, columns=["qid", "zero_fill", "worst", "best", "exact"])

    def unjudged(self, runs: Iterable[str]) -> list[tuple[str, str]]:
        """The (query, unit) pairs unjudged in the top k of any of ``runs``."""
        names = list(runs)
        return [(q, u) for q, p in self.queries.items() for u in p.units if any(u in p.ranks[v] for v in names)]


def _ir_means(runs: Mapping[str, Run], qrels: Qrels, qids: Sequence[str], measure) -> dict[str, float]:
    """variant -> mean of ``measure`` (ir_measures) over ``qids``; a query a run lacks scores 0."""
    import ir_measures

    keep = set(qids)
    sub_qrels = {q: dict(d) for q, d in qrels.items() if q in keep and d}
    out = {}
    for v, run in runs.items():
        sub = strict_order({q: d for q, d in run.items() if q in keep and d})
        got = {m.query_id: float(m.value) for m in ir_measures.iter_calc([measure], sub_qrels, sub)} if sub else {}
        out[v] = float(sum(got.get(q, 0.0) for q in qids) / len(qids)) if qids else math.nan
    return out


def condensed(runs: Mapping[str, Run], qrels: Qrels) -> dict[str, Run]:
    """Each run with its unjudged units dropped (the order of the rest kept): Sakai's condensed list."""
    return {
        v: {q: {d: s for d, s in docs.items() if d in qrels.get(q, {})} for q, docs in run.items()}
        for v, run in runs.items()
    }


def robust_means(runs: Mapping[str, Run], qrels: Qrels, qids: Sequence[str], metric: str = "ndcg@10") -> pd.DataFrame:
    """Per variant (index) the mean over ``qids`` of ``zero_fill``, ``condensed`` and ``bpref`` (ir_measures)."""
    from ir_measures import Bpref

    zero = _ir_means(runs, qrels, qids, metrics.ir_measure(metric))
    cond = _ir_means(condensed(runs, qrels), qrels, qids, metrics.ir_measure(metric))
    bpref = _ir_means(runs, qrels, qids, Bpref(rel=metrics.REL_LEVEL))
    return pd.DataFrame({"zero_fill": zero, "condensed": cond, "bpref": bpref}).rename_axis("variant")


def variant_table(
    runs: Mapping[str, Run],
    qrels: Qrels,
    qids: Sequence[str],
    metric: str = "ndcg@10",
    top: int | None = None,
    pools: Pools | None = None,
) -> pd.DataFrame:
    """Per variant: ``zero_fill``, ``condensed``, ``bpref``, ``worst``, ``best``, ``unjudged_in_top_k`` and
    ``exact`` (the bounds are exact), for ``metric`` over ``qids`` (see :data:`ASSUMPTIONS`)."""
    pools = pools or Pools.build(runs, qrels, qids, metric, top)
    means = robust_means(runs, qrels, qids, metric)
    rows = []
    for v in runs:
        b = pools.bounds(v)
        n_open = sum(1 for p in pools.queries.values() for u in p.units if u in p.ranks[v])
        rows.append(
            {
                "variant": v,
                "metric": metric,
                **means.loc[v].to_dict(),
                "worst": float(b.worst.mean()),
                "best": float(b.best.mean()),
                "unjudged_in_top_k": n_open,
                "exact": bool(b.exact.all()),
            }
        )
    return pd.DataFrame(rows)


# --------------------------------------------------------------------------- comparisons
@dataclass
class Comparison:
    """A vs B on the mean over queries of the per-query difference, with holes in the judgments."""

    a: str
    b: str
    metric: str
    n_queries: int
    zero_fill: float  # the mean difference with unjudged units not relevant (today's number)
    worst: float  # the exact extremes of the mean difference over every completion
    best: float
    ci_worst: tuple[float, float]  # 95% bootstrap CI of the mean difference under the worst completion
    ci_best: tuple[float, float]
    status: str  # decided | undecided | tied | identical
    better: str | None  # the better run when decided
    significant: bool  # both CIs exclude 0 on the same side: significant whatever the completion
    n_unjudged: int  # unjudged units in the top k of a or b: judging them all settles the comparison
    n_moving: int  # of them, the units whose grade changes the difference (not only its scale)
    exact: bool  # every per-query bound is exact (else some are the sound, looser bound)
    expected: float | None = None  # judgments the queue is expected to need (simulated, :func:`expected_judgments`)
    sentence: str = ""

    def describe(self) -> str:
        """One line for the first screen (the status word, the interval and what to do)."""
        head, k = f"{self.a} vs {self.b}", metrics.label(self.metric)
        span = f"\u0394 {k} between {self.worst:+.3f} and {self.best:+.3f} (zero-fill {self.zero_fill:+.3f})"
        if self.status == "identical":
            return (
                f"{head}: identical \u2014 the two runs return the same top k for every query, so there is "
                "nothing to compare (a degenerate comparison); compare two different variants"
            )
        if self.status == "tied":
            return f"{head}: tied \u2014 every unit in their top k is judged and the difference is exactly 0"
        if self.status == "decided":
            holes = (
                f"whatever the {self.n_unjudged} unjudged units turn out to be"
                if self.n_unjudged
                else "with no unjudged unit in their top k (the interval is one point)"
            )
            sig = (
                "; not tested (one query)"
                if self.n_queries < 2
                else "; significant under both extremes"
                if self.significant
                else "; not significant at every extreme"
            )
            return f"{head}: decided \u2014 {self.better} is better {holes}: {span}{sig}"
        exp = "" if self.expected is None else f"; the queue expects about {math.ceil(self.expected)}"
        return (
            f"{head}: undecided \u2014 {_n(self.n_moving, 'unjudged unit')} could reverse it; judge them first "
            f"(at most {_n(self.n_unjudged, 'judgment')} {'decides' if self.n_unjudged == 1 else 'decide'} "
            f"it{exp}): {span}"
        )


def _n(count: int, noun: str) -> str:
    """``1 judgment`` / ``3 judgments``."""
    return f"{count} {noun}{'' if count == 1 else 's'}"


def _status(lo: float, hi: float, identical: bool) -> tuple[str, int]:
    if identical:
        return "identical", 0
    if lo > 0 or hi < 0:
        return "decided", 1 if lo > 0 else -1
    if lo == hi == 0:
        return "tied", 0
    return "undecided", 0


def compare(pools: Pools, a: str, b: str, n_boot: int = 2000, seed: int = 0) -> Comparison:
    """The :class:`Comparison` of runs ``a`` and ``b`` of ``pools`` (both must be among the runs it was built on)."""
    if a == b:
        raise ValueError(f"compare {a!r} with another variant, not with itself (a degenerate comparison)")
    per = pools.bounds(a, b)
    lo, hi = float(per.worst.mean()), float(per.best.mean())
    identical = all(p.ranks[a] == p.ranks[b] for p in pools.queries.values())
    status, sign = _status(lo, hi, identical)
    ci_w = stats.bootstrap_ci(per.worst.to_numpy(), n_boot=n_boot, seed=seed)[1:]
    ci_b = stats.bootstrap_ci(per.best.to_numpy(), n_boot=n_boot, seed=seed)[1:]
    significant = bool((ci_w[0] > 0 and ci_b[0] > 0) or (ci_w[1] < 0 and ci_b[1] < 0))
    pool = pools.unjudged((a, b))
    moving = sum(1 for q, u in pool if moves(pools.queries[q], u, a, b, pools.metric))
    c = Comparison(
        a,
        b,
        pools.metric,
        len(per),
        float(per.zero_fill.mean()),
        lo,
        hi,
        ci_w,
        ci_b,
        status,
        {1: a, -1: b}.get(sign),
        significant,
        len(pool),
        moving,
        bool(per.exact.all()),
    )
    c.sentence = c.describe()
    return c


def default_pairs(variants: Sequence[str], baseline: str) -> list[tuple[str, str]]:
    """Each variant vs the baseline, and each reranker vs its first stage (when both are present)."""
    pairs = [(v, baseline) for v in variants if v != baseline]
    pairs += [(v, f) for v, f in FIRST_STAGE.items() if v in variants and f in variants and (v, f) not in pairs]
    return pairs


# --------------------------------------------------------------------------- the first screen
def first_screen(
    runs: Mapping[str, Run],
    qrels: Qrels,
    qids: Sequence[str],
    baseline: str,
    k: int = 10,
    pairs: Sequence[tuple[str, str]] | None = None,
    queue_rows: int = 20,
    n_sim: int = 3,
    top: int | None = None,
    llm: Qrels | None = None,
    human_sample: Mapping[tuple[str, str], int] | None = None,
) -> dict:
    """Everything the first screen shows about the holes, as a JSON-able dict (nDCG@``k``): ``variants`` (per
    variant: zero-fill, condensed, bpref, [worst, best], unjudged units in its top k), ``comparisons`` (each
    variant vs ``baseline`` and each reranker vs its first stage: the :class:`Comparison` fields and ``sentence``),
    ``queue`` (the first ``queue_rows`` units to judge, with weight and the comparisons they move),
    ``queue_size``, ``assumptions`` and ``top_grade``; with LLM grades (``llm``, the holes' grades) also ``ppi``:
    per variant the prediction-powered estimate and CI from ``human_sample`` ((qid, unit) -> human grade, a random
    sample of the holes: ``explore.next_to_judge(dp, n, mode="sample")``), or why it was refused (too few human
    grades: the bounds stand instead)."""
    metric = f"ndcg@{k}"
    if baseline not in runs:
        raise ValueError(f"baseline {baseline!r} has no run (runs: {', '.join(runs)}); pick one of them")
    pools = Pools.build(runs, qrels, qids, metric, top)
    table = variant_table(runs, qrels, qids, metric, pools=pools)
    pairs = list(pairs) if pairs is not None else default_pairs(list(runs), baseline)
    comps = []
    for a, b in pairs:
        c = compare(pools, a, b)
        if c.status == "undecided" and n_sim:
            c.expected = expected_judgments(runs, qrels, qids, (a, b), metric, pools.top, n_sim=n_sim)
            c.sentence = c.describe()
        comps.append(c)
    open_pairs = [(c.a, c.b) for c in comps if c.status == "undecided"]
    q = Judging(runs, qrels, qids, metric, open_pairs, pools.top).queue() if open_pairs else []
    rows = [
        {"qid": qq, "unit_id": u, "weight": float(w), "comparisons": [f"{a} vs {b}" for a, b in by]}
        for qq, u, w, by in q[:queue_rows]
    ]
    out = {
        "metric": metric,
        "k": k,
        "top_grade": pools.top,
        "n_queries": len(qids),
        "assumptions": ASSUMPTIONS,
        "variants": table.to_dict(orient="records"),
        "comparisons": [asdict(c) for c in comps],
        "queue": rows,
        "queue_size": len(q),
    }
    if llm is not None:
        out["ppi"] = _ppi(runs, qrels, llm, human_sample or {}, qids, metric)
    return out


def _ppi(
    runs: Mapping[str, Run],
    qrels: Qrels,
    llm: Qrels,
    sample: Mapping[tuple[str, str], int],
    qids: Sequence[str],
    metric: str,
) -> dict:
    """Per variant the prediction-powered numbers, or the refusal and the fallback (the bounds)."""
    try:
        return {
            "variants": {v: ppi_metric(r, qrels, llm, sample, qids, metric) for v, r in runs.items()},
            "assumption": "LLM grades fill the holes; a uniform random sample of them graded by a person "
            "corrects their bias (Angelopoulos et al., Science 2023)",
        }
    except TooFewHumanGrades as exc:
        return {"refused": str(exc), "fallback": "the [worst, best] bounds over every completion"}


def review_weights(
    runs: Mapping[str, Run], qrels: Qrels, qids: Sequence[str], baseline: str, k: int = 10
) -> dict[tuple[str, str], tuple[float, str]]:
    """(qid, unit) -> (queue weight, the open comparisons it moves as ``"a vs b; c vs d"``) for ordering
    ``review/unjudged.tsv`` by the judging queue (units that move no open comparison are absent: weight 0)."""
    judging = Judging(runs, qrels, qids, f"ndcg@{k}", default_pairs(list(runs), baseline))
    return {(q, u): (float(w), "; ".join(f"{a} vs {b}" for a, b in by)) for q, u, w, by in judging.queue()}
