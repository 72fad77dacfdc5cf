"""Known limitations (issue 11): queries the team knows fail, tracked in their own section.

A query of the dataset's ``queries.jsonl`` may say why it is known to fail::

    {"_id": "q7", "text": "...", "metadata": {"known_limitation": "vocabulary mismatch: ..."}}

The analysis lists those queries with each variant's rank of the first relevant unit, excludes them from
nothing (every average still counts them), and compares with the previous run: a query that no variant
found in the top ``k`` (:data:`K`) before and some variant finds now is reported as ``now succeeds``; the
reverse as ``now fails``. "Before" is the ``per_query.csv`` that the previous stage-05 run wrote: it is
copied to ``dp.stage_dir("analyse") / "previous_per_query.csv"`` before this run overwrites it, so the
comparison can be redone from the files.
"""

from __future__ import annotations

import math
import shutil
from collections.abc import Mapping

import pandas as pd

from rerankeval.core.ioutil import read_jsonl
from rerankeval.core.paths import DatasetPaths
from rerankeval.core.runs import Qrels, Run
from rerankeval.corpus.contract import read_table
from rerankeval.evaluate.funnel import first_relevant_ranks

K = 3  # a known limitation "succeeds" when some variant ranks a relevant unit in its top K (success@K)
PREVIOUS = "previous_per_query.csv"
CSV = "known_limitations.csv"
NOW_SUCCEEDS, NOW_FAILS, STILL_FAILS, SUCCEEDS, NO_PREVIOUS = (
    "now succeeds",
    "now fails",
    "still fails",
    "succeeds (as before)",
    "no previous run",
)


def known(dp: DatasetPaths) -> dict[str, str]:
    """qid -> why it is a known limitation, from the dataset folder's ``queries.jsonl`` metadata."""
    path = dp.source_queries
    if not path.is_file():
        return {}
    out = {}
    for row in read_jsonl(path):
        why = (row.get("metadata") or {}).get("known_limitation") if isinstance(row, dict) else None
        if why:
            out[str(row["_id"])] = str(why)
    return out


def keep_previous(dp: DatasetPaths) -> pd.DataFrame | None:
    """The previous run's per-query table (copied aside first, see the module doc), or None."""
    if not dp.per_query_csv.is_file():
        return None
    copy = dp.stage_dir("analyse") / PREVIOUS
    copy.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(dp.per_query_csv, copy)
    return read_table(copy, ids=("variant", "qid", "metric"))  # a query id "NA" or "null" is an id, not missing


def previous_success(previous: pd.DataFrame | None, k: int = K) -> dict[str, set[str]] | None:
    """qid -> the variants that had success@k in the previous run (None without a previous run)."""
    if previous is None or not {"variant", "qid", "metric", "value"} <= set(previous.columns):
        return None
    hit = previous[(previous.metric == f"success@{k}") & (previous.value > 0)]
    out: dict[str, set[str]] = {q: set() for q in previous.qid.unique()}
    for q, v in zip(hit.qid, hit.variant, strict=True):
        out[q].add(v)
    return out


def status(now: set[str], before: set[str] | None) -> str:
    """What changed for one query: ``now`` / ``before`` are the variants with a relevant unit in the top k."""
    if before is None:
        return NO_PREVIOUS
    if now and not before:
        return NOW_SUCCEEDS
    if before and not now:
        return NOW_FAILS
    return SUCCEEDS if now else STILL_FAILS


def table(
    reasons: Mapping[str, str],
    queries: Mapping[str, str],
    runs: Mapping[str, Run],
    qrels: Qrels,
    before: Mapping[str, set[str]] | None,
    k: int = K,
) -> pd.DataFrame:
    """One row per known limitation: ``qid, query, reason``, each variant's first relevant rank (empty when
    none retrieved), ``status`` (see :func:`status`) and ``detail`` (which variants changed)."""
    qids = [q for q in reasons if q in queries]
    ranks = first_relevant_ranks(runs, qrels, qids)
    rows = []
    for q in qids:
        r = {v: ranks.at[q, v] for v in runs}
        now = {v for v, x in r.items() if not math.isnan(x) and x <= k}
        was = None if before is None else set(before.get(q, set()))
        rows.append(
            {
                "qid": q,
                "query": queries[q],
                "reason": reasons[q],
                **{v: "" if math.isnan(x) else int(x) for v, x in r.items()},
                "status": status(now, was),
                "detail": _detail(now, was, k),
            }
        )
    return pd.DataFrame(rows, columns=["qid", "query", "reason", *runs, "status", "detail"])


def _detail(now: set[str], was: set[str] | None, k: int) -> str:
    if was is None:
        return f"in the top {k}: {', '.join(sorted(now)) or 'no variant'}"
    gained, lost = sorted(now - was), sorted(was - now)
    parts = [f"now in the top {k}: {', '.join(gained)}"] if gained else []
    parts += [f"no longer in the top {k}: {', '.join(lost)}"] if lost else []
    return "; ".join(parts) or "no change"


def analyse(
    dp: DatasetPaths, runs: Mapping[str, Run], qrels: Qrels, queries: Mapping[str, str], k: int = K
) -> pd.DataFrame:
    """Stage 05's known-limitations section (keeps the previous ``per_query.csv`` aside, see the module doc)."""
    reasons = known(dp)
    before = previous_success(keep_previous(dp), k) if reasons else None
    return table(reasons, queries, runs, qrels, before, k)


def write(dp: DatasetPaths, t: pd.DataFrame | None) -> dict:
    """``dp.stage_dir("analyse") / "known_limitations.csv"`` (what the report's section shows); without tagged
    queries nothing is written and an earlier run's file is removed (no stale section)."""
    from rerankeval.core.ioutil import atomic_write_text

    if t is None or not len(t):
        (dp.stage_dir("analyse") / CSV).unlink(missing_ok=True)
        return {}
    return {"known_limitations": atomic_write_text(dp.stage_dir("analyse") / CSV, t.to_csv(index=False))}


def read(dp: DatasetPaths) -> pd.DataFrame | None:
    p = dp.stage_dir("analyse") / CSV
    if not p.is_file():
        return None
    return pd.read_csv(p, dtype=str, keep_default_na=False)


def summary_lines(t: pd.DataFrame | None) -> list[str]:
    """Plain sentences for the report: how many known limitations, and which changed."""
    if t is None or not len(t):
        return []
    n = t.status.value_counts()
    head = f"{len(t)} queries are tagged as known limitations (counted in every average); "
    if int(n.get(NO_PREVIOUS, 0)) == len(t):
        return [head + "there is no previous run to compare them with yet."]
    line = (
        head + f"{int(n.get(NOW_SUCCEEDS, 0))} now succeed and {int(n.get(NOW_FAILS, 0))} now fail compared "
        "with the previous run."
    )
    return [line] + [f"{r.qid} {r.status}: {r.detail}" for r in t.itertuples() if r.status in (NOW_SUCCEEDS, NOW_FAILS)]


def report_values(dp: DatasetPaths) -> dict | None:
    """The report index's section: ``{"lines", "head", "rows"}`` from ``known_limitations.csv``, or None."""
    t = read(dp)
    if t is None or not len(t):
        return None
    return {"lines": summary_lines(t), "head": list(t.columns), "rows": t.to_numpy(dtype=str).tolist()}
