"""Conformance: every metric recomputed from the TREC run files by independent evaluators (ranx,
pytrec_eval) and compared with ir_measures' per-query values (:func:`rerankeval.evaluate.metrics.evaluate`).

A run file with no line at all, or without some queries, is legal (a degenerate run): the checkers then
have nothing to compute for those queries and compare against 0 under the ``zero`` policy.

A checker's values are a pure function of the run file's bytes, the judgments of the queries asked, the
metric columns and the checker's version. With ``cache`` (a folder; 05 passes the rerankeval cache), they
are stored under that key and re-used when all of it is unchanged; the comparison with ir_measures' values
runs every time. It spares a re-run the checkers' start-up (ranx compiles its numba functions in every new
process: about 14 of 05's 20 warm seconds).
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Mapping, Sequence
from pathlib import Path

import pandas as pd

from rerankeval.core.errors import ReRankEvalError
from rerankeval.core.ioutil import atomic_write_json, sha256_file, sha256_json
from rerankeval.core.runs import Qrels, Run
from rerankeval.evaluate.metrics import REL_LEVEL, QuerySet, parse_column, ranx_metric

TOLERANCE = 1e-9


class ConformanceError(ReRankEvalError, AssertionError):
    """Two evaluators disagree on a metric by more than the tolerance."""


def _ranx_per_query(run_file: Path, qrels: Qrels, qids: list[str], columns: Sequence[str]) -> dict[str, dict]:
    import ranx

    # the run as the naive reader reads it: ranx's own TREC reader (Run.from_file) compiles with numba in every
    # new process, 8 s of a 05 whose runs changed, for the same dict (a line per query and document)
    rd = _read_plain_trec(run_file)
    present = [q for q in qids if q in rd and rd[q]]
    if not present:
        return {}
    sub_qrels = ranx.Qrels({q: dict(qrels[q]) for q in present})
    sub_run = ranx.Run({q: dict(rd[q]) for q in present})
    metrics = [ranx_metric(c) for c in columns]
    ranx.evaluate(sub_qrels, sub_run, metrics, return_mean=True, save_results_in_run=True)
    # per-query scores keyed by query id (ranx's arrays follow its own sorted query order)
    return {c: {q: float(sub_run.scores[ranx_metric(c)][q]) for q in present} for c in columns}


def warm_up() -> None:
    """Compile ranx's numba kernels for every metric family once, into numba's on-disk cache (``cache=True``).

    ``make setup`` calls it after installing the requirements: in a new venv the first 05 would otherwise
    spend about 40 s compiling them (what numba cannot cache, its typed containers, is still compiled per
    process)."""
    import tempfile
    import warnings

    from rerankeval.core.runs import write_trec
    from rerankeval.evaluate.metrics import DEFAULT_KS, metric_columns

    qrels: Qrels = {"q1": {"a": 1, "b": 2}, "q2": {"c": 1}}
    with tempfile.TemporaryDirectory() as tmp, warnings.catch_warnings():
        warnings.simplefilter("ignore")  # numba's type-safety notes on ranx's kernels say nothing to a user
        path = write_trec({"q1": {"a": 2.0, "x": 1.0}, "q2": {"y": 2.0, "c": 1.0}}, Path(tmp) / "warm.trec", "warm")
        _ranx_per_query(path, qrels, ["q1", "q2"], metric_columns(DEFAULT_KS))


def _read_plain_trec(path: Path) -> Run:
    """A deliberately naive TREC reader (dict overwrite on duplicates), independent of ours."""
    out: Run = {}
    with open(path, encoding="utf-8") as fh:
        for line in fh:
            parts = line.split()
            if len(parts) == 6:
                out.setdefault(parts[0], {})[parts[2]] = float(parts[4])
    return out


def _pytrec_per_query(run_file: Path, qrels: Qrels, qids: list[str], columns: Sequence[str]) -> dict[str, dict]:
    import pytrec_eval

    run = _read_plain_trec(run_file)
    present = [q for q in qids if q in run and run[q]]
    if not present:
        return {}
    sub_qrels = {q: dict(qrels[q]) for q in present}
    out: dict[str, dict] = {c: {} for c in columns}
    base: dict[str, str] = {}
    mrr_cuts: list[int] = []
    for c in columns:
        fam, k = parse_column(c)
        if fam == "map":
            base[c] = "map"
        elif fam == "success":
            base[c] = f"success_{k}"
        elif fam == "ndcg":
            base[c] = f"ndcg_cut_{k}"
        elif fam == "recall":
            base[c] = f"recall_{k}"
        elif fam == "precision":
            base[c] = f"P_{k}"
        else:
            mrr_cuts.append(k)
    if base:
        fams = {"map"} & set(base.values())
        cuts: dict[str, set[int]] = {}
        for c, name in base.items():
            if name != "map":
                fam, k = parse_column(c)
                tre = {"success": "success", "ndcg": "ndcg_cut", "recall": "recall", "precision": "P"}[fam]
                cuts.setdefault(tre, set()).add(k)
        req = set(fams) | {f"{m}.{','.join(map(str, sorted(ks)))}" for m, ks in cuts.items()}
        ev = pytrec_eval.RelevanceEvaluator(sub_qrels, req, relevance_level=REL_LEVEL)
        res = ev.evaluate({q: run[q] for q in present})
        for c, name in base.items():
            out[c] = {q: float(res[q][name]) for q in present}
    for k in mrr_cuts:
        # recip_rank has no cutoff in trec_eval: evaluate the run truncated to its top k by score
        trunc = {q: dict(sorted(run[q].items(), key=lambda kv: (-kv[1], kv[0]))[:k]) for q in present}
        ev = pytrec_eval.RelevanceEvaluator(sub_qrels, {"recip_rank"}, relevance_level=REL_LEVEL)
        res = ev.evaluate(trunc)
        out[f"mrr@{k}"] = {q: float(res[q]["recip_rank"]) if q in res else 0.0 for q in present}
    return out


CHECKERS = {"ranx": _ranx_per_query, "pytrec_eval": _pytrec_per_query}


def _checker_values(
    checker: str,
    run_file: Path,
    qrels: Qrels,
    qids: list[str],
    columns: list[str],
    cache: str | os.PathLike[str] | None,
) -> dict[str, dict]:
    """``CHECKERS[checker]``'s per-query values, from ``cache`` when the same inputs were checked before."""
    fn = CHECKERS[checker]
    if cache is None:
        return fn(run_file, qrels, qids, columns)
    key = sha256_json(
        {
            "checker": checker_versions([checker]),
            "run": sha256_file(run_file),
            "qids": qids,
            "qrels": {q: qrels.get(q, {}) for q in qids},
            "columns": columns,
        }
    )
    path = Path(cache) / f"{key}.json"
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        pass
    got = fn(run_file, qrels, qids, columns)
    atomic_write_json(path, got)
    return got


def checker_versions(checkers: Sequence[str]) -> str:
    from importlib.metadata import PackageNotFoundError, version

    dist = {"ranx": "ranx", "pytrec_eval": "pytrec_eval-terrier"}
    out = []
    for c in checkers:
        try:
            out.append(f"{c} {version(dist[c])}")
        except PackageNotFoundError:
            out.append(c)
    return " and ".join(out)


def _diffs(
    mine: Mapping[tuple[str, str], float], got: Mapping[str, float], metric: str, qs: QuerySet, variant: str
) -> list[float]:
    """|ours - theirs| per evaluated query; a query the file lacks scores 0 (policy "zero", empty runs), else inf."""
    out = []
    for q in qs.qids:
        if q not in got and qs.policy != "zero" and variant not in qs.empty:
            out.append(math.inf)
        else:
            out.append(abs(float(mine[(q, metric)]) - got.get(q, 0.0)))
    return out


def conformance_check(
    run_files: Mapping[str, str | os.PathLike[str]],
    qrels: Qrels,
    per_query: pd.DataFrame,
    qs: QuerySet,
    checkers: Sequence[str] = ("ranx",),
    tol: float = TOLERANCE,
    raise_on_diff: bool = True,
    cache: str | os.PathLike[str] | None = None,
) -> pd.DataFrame:
    """Recompute every metric of every variant from its TREC file with other evaluators and compare.

    ``per_query`` is :func:`evaluate`'s output (ir_measures). Returns ``checker, variant, metric,
    n_queries, max_abs_diff``; raises :class:`ConformanceError` when any difference exceeds ``tol``
    (unless ``raise_on_diff`` is false). ``cache``: a folder for the checkers' values (see the module doc).
    """
    from rerankeval.core.progress import Progress

    columns = list(dict.fromkeys(per_query.metric))
    rows = []
    bad = []
    bar = Progress(len(checkers) * len(run_files), desc="second evaluators", unit="run")  # silent when cached
    for checker in checkers:
        for v, path in run_files.items():
            sub = per_query[per_query.variant == v]
            mine = dict(zip(zip(sub.qid, sub.metric, strict=True), sub.value, strict=True))  # (qid, metric) -> value
            theirs = _checker_values(checker, Path(path), qrels, qs.qids, columns, cache)
            bar.update(1, checker=checker)
            for c in columns:
                diffs = _diffs(mine, theirs.get(c, {}), c, qs, v)
                worst = max(diffs) if diffs else 0.0
                rows.append((checker, v, c, len(diffs), worst))
                if worst > tol:
                    i = diffs.index(worst)
                    bad.append(f"{v} {c} ({checker}): query {qs.qids[i]} differs by {worst:.3g}")
    bar.close()
    out = pd.DataFrame(rows, columns=["checker", "variant", "metric", "n_queries", "max_abs_diff"])
    if bad and raise_on_diff:
        raise ConformanceError(
            f"{len(bad)} metric(s) disagree between ir_measures and {', '.join(checkers)} "
            f"by more than {tol:g}: "
            + "; ".join(bad[:10])
            + ". Check the run files against the run contract (duplicates, ties) and the metric conventions."
        )
    return out
