"""Rows of stage 05's paired comparisons (``comparisons.csv``) built by hand, for the tests of what the index, the
exports and the plots make of them (evaluate.verdict, report.export, report.compare_plots)."""

from __future__ import annotations


def comparison(
    a: str,
    b: str,
    diff: float,
    p_holm: float,
    wins: int,
    ties: int,
    losses: int,
    *,
    n: int = 20,
    ci: tuple[float, float] | None = None,
    means: tuple[float, float] = (0.0, 0.0),
    spread: bool = True,
) -> dict:
    """``a - b`` on nDCG@10 over ``n`` queries: its CI ``ci`` (by default ``diff`` +- 0.05), the queries on which
    ``a`` wins, ties and loses, p = ``p_holm`` / 3, significant below 0.05; with ``spread``, also the SD of the
    differences (0.1), the MDD (0.05) and no query left out."""
    low, high = ci if ci is not None else (diff - 0.05, diff + 0.05)
    row = {
        "metric": "ndcg@10",
        "a": a,
        "b": b,
        "n": n,
        "mean_a": means[0],
        "mean_b": means[1],
        "diff": diff,
        "diff_ci_low": low,
        "diff_ci_high": high,
        "wins": wins,
        "ties": ties,
        "losses": losses,
        "p": p_holm / 3,
        "p_holm": p_holm,
        "significant": p_holm < 0.05,
    }
    if spread:
        row |= {"sd_diff": 0.1, "mdd": 0.05, "n_left_out": 0}
    return row
