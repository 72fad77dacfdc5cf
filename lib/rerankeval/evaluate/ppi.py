"""LLM grades with honest intervals (issue 34 item 4): prediction-powered inference in its mean-estimation form
(Angelopoulos, Bates, Fannjiang, Jordan and Zrnic, Science 2023, "Prediction-powered inference"; ARES uses it). A
capable LLM grades the holes of the judgments; a person grades a uniform random sample of them; the rectified
estimate corrects the LLM's bias and its interval is valid whatever the LLM's quality. Refused
(:class:`TooFewHumanGrades`) with fewer than :data:`PPI_MIN_HUMAN` human grades: the bounds of
:mod:`rerankeval.evaluate.incomplete` stand instead.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

import numpy as np

from rerankeval.core.errors import ReRankEvalError
from rerankeval.core.runs import Qrels, Run
from rerankeval.evaluate import stats
from rerankeval.evaluate.bounds import LINEAR, denominators, discounts, family, gains, top_k

PPI_MIN_HUMAN = 10  # fewer human-graded sampled pairs: prediction-powered intervals are refused


class TooFewHumanGrades(ReRankEvalError, ValueError):
    """Prediction-powered inference was asked for with too few human grades on the random sample."""


def ppi_mean(
    pred_all: Sequence[float],
    pred_sample: Sequence[float],
    human_sample: Sequence[float],
    confidence: float = stats.CONFIDENCE,
    population: bool = False,
) -> dict[str, float]:
    """Prediction-powered estimate of a mean and its CI (Angelopoulos et al., Science 2023, mean estimation):
    ``mean(predictions on all N) + mean(human - prediction on the n sampled)``, half-width ``z sqrt(var_f / N +
    var_rectifier / n)``; ``population=True`` when the N items are the whole population (no ``var_f / N`` term).

    Refuses (:class:`TooFewHumanGrades`) with fewer than :data:`PPI_MIN_HUMAN` human grades."""
    from scipy.stats import norm

    f_all, f_s, y_s = (np.asarray(x, dtype=float) for x in (pred_all, pred_sample, human_sample))
    if f_s.shape != y_s.shape:
        raise ValueError("pred_sample and human_sample must pair up: one prediction per human grade")
    if y_s.size < PPI_MIN_HUMAN:
        raise TooFewHumanGrades(
            f"prediction-powered intervals need at least {PPI_MIN_HUMAN} human grades on the random sample, got "
            f"{y_s.size}: grade more of it (explore.next_to_judge(dp, n, mode='sample')); until then the report "
            "shows the bounds over every completion instead"
        )
    rect = y_s - f_s
    est = float(f_all.mean() + rect.mean())
    var = float(rect.var(ddof=1)) / y_s.size + (0.0 if population else float(f_all.var(ddof=1)) / f_all.size)
    half = float(norm.ppf(0.5 + confidence / 2)) * math.sqrt(var)
    return {
        "estimate": est,
        "ci_low": est - half,
        "ci_high": est + half,
        "n_human": int(y_s.size),
        "n_pool": int(f_all.size),
        "llm_only": float(f_all.mean()),
    }


def ppi_metric(
    run: Run,
    qrels: Qrels,
    llm: Qrels,
    human_sample: Mapping[tuple[str, str], int],
    qids: Sequence[str],
    metric: str = "ndcg@10",
) -> dict[str, float]:
    """A run's mean ``metric`` with the human holes filled by LLM grades, rectified by human grades on a random
    sample of those holes (:func:`ppi_mean` over the pool, the whole population).

    The metric is written as ``base + sum_i c_i gain_i`` over the holes i of the run's top k (``c_i`` = the rank's
    discount / the query's denominator / n queries), the denominator (nDCG's ideal, recall's relevant count) taken
    from the human grades plus the LLM's: that is the assumption this number rests on. Linear metrics only."""
    fam, k = family(metric)
    if fam not in LINEAR:
        raise ValueError(f"prediction-powered intervals are computed for {', '.join(LINEAR)}, not {metric!r}")
    disc, base, items = discounts(fam, k), 0.0, []
    for q in qids:
        judged, holes = qrels.get(q, {}), {}
        full = {**{u: g for u, g in llm.get(q, {}).items() if u not in judged}, **judged}
        den = denominators(fam, np.array(list(full.values()), dtype=float), np.zeros((1, 0)), k)[0]
        for r, u in enumerate(top_k(run.get(q, {}), k), start=1):
            c = disc[r - 1] / den / len(qids) if den > 0 else 0.0
            if u in judged:
                base += c * float(gains(fam, np.array([judged[u]]))[0])
            else:
                holes[(q, u)] = c
        items += [(key, c) for key, c in holes.items()]
    n = len(items)
    pred = [n * c * float(gains(fam, np.array([llm.get(q, {}).get(u, 0)]))[0]) for (q, u), c in items]
    sampled = [i for i, (key, _) in enumerate(items) if key in human_sample]
    human = [n * items[i][1] * float(gains(fam, np.array([human_sample[items[i][0]]]))[0]) for i in sampled]
    out = ppi_mean(pred, [pred[i] for i in sampled], human, population=True) if n else None
    if out is None:
        return {"estimate": base, "ci_low": base, "ci_high": base, "n_human": 0, "n_pool": 0, "llm_only": base}
    return {**out, **{key: out[key] + base for key in ("estimate", "ci_low", "ci_high", "llm_only")}}
