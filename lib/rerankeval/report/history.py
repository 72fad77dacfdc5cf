"""This run against the previous one, on the index: "hybrid_rerank nDCG@10 0.642 → 0.651 (+0.009) since the run of
2026-12-02 12:49 UTC", or "first run" when there is none.

Kept on the report's side (the analysis overwrites ``metrics.csv``): each :func:`remember` call keys the metrics
by the manifest's ``created_utc`` (when 05-analyse ran). Two slots in ``dp.report_dir``: ``.last_metrics.csv``
(the analysis the index shows) and ``.previous_metrics.csv`` (the one before it), each with a ``.json`` saying
when it ran. A new analysis moves the last slot to the previous one; rendering the index twice for the same
analysis changes nothing, so the line survives a re-render.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Mapping
from typing import Any

import pandas as pd

from rerankeval.core.ioutil import atomic_write_json, atomic_write_text
from rerankeval.core.paths import DatasetPaths
from rerankeval.evaluate.metrics import label

LAST, PREVIOUS = ".last_metrics", ".previous_metrics"
FIRST_RUN = "First run: no earlier analysis of this dataset to compare with."


def _slot(dp: DatasetPaths, name: str) -> tuple[Any, Any]:
    return dp.report_dir / f"{name}.csv", dp.report_dir / f"{name}.json"


def _when(dp: DatasetPaths, name: str) -> str | None:
    _, meta = _slot(dp, name)
    try:
        return str(json.loads(meta.read_text(encoding="utf-8")).get("created_utc") or "") or None
    except (OSError, ValueError, AttributeError):
        return None


def remember(dp: DatasetPaths, created_utc: str | None) -> None:
    """Keep ``metrics.csv`` as the last analysis (keyed by ``created_utc``), the former last one as previous."""
    if not created_utc or not dp.metrics_csv.is_file() or _when(dp, LAST) == created_utc:
        return
    last_csv, last_meta = _slot(dp, LAST)
    prev_csv, prev_meta = _slot(dp, PREVIOUS)
    dp.report_dir.mkdir(parents=True, exist_ok=True)
    if last_csv.is_file() and last_meta.is_file():
        shutil.copyfile(last_csv, prev_csv)
        shutil.copyfile(last_meta, prev_meta)
    atomic_write_text(last_csv, dp.metrics_csv.read_text(encoding="utf-8"))
    atomic_write_json(last_meta, {"created_utc": created_utc})


def _previous(dp: DatasetPaths) -> tuple[pd.DataFrame, str] | None:
    csv, _ = _slot(dp, PREVIOUS)
    when = _when(dp, PREVIOUS)
    if not (csv.is_file() and when):
        return None
    try:
        return pd.read_csv(csv, dtype={"variant": str}), when
    except (OSError, ValueError):
        return None


def change_line(now: pd.DataFrame, before: pd.DataFrame, when: str, metric: str) -> str:
    """One sentence: each variant of both runs, its ``metric`` then → now (difference); new and gone variants."""
    fmt = "{:.3f}".format
    a = before.set_index("variant")[metric] if metric in before else pd.Series(dtype=float)
    b = now.set_index("variant")[metric] if metric in now else pd.Series(dtype=float)
    both = [v for v in b.index if v in a.index and not (pd.isna(a[v]) or pd.isna(b[v]))]
    stamp = when[:16].replace("T", " ") + " UTC"
    parts = [f"{v} {fmt(a[v])} \u2192 {fmt(b[v])} ({b[v] - a[v]:+.3f})" for v in both]
    new = [v for v in b.index if v not in a.index]
    gone = [v for v in a.index if v not in b.index]
    tail = ([f"new: {', '.join(new)}"] if new else []) + ([f"no longer run: {', '.join(gone)}"] if gone else [])
    if not parts:
        return f"No variant's {label(metric)} can be compared with the run of {stamp}" + (
            f" ({'; '.join(tail)})." if tail else ".")
    same = all(abs(b[v] - a[v]) < 5e-4 for v in both)
    head = (f"{label(metric)} unchanged since the run of {stamp}: " if same
            else f"{label(metric)} since the run of {stamp}: ")
    return head + "; ".join(parts) + (f"; {'; '.join(tail)}" if tail else "") + "."


def since_previous(dp: DatasetPaths, manifest: Mapping[str, Any] | None, metric: str) -> str | None:
    """Remember this analysis, then the "this run vs the previous run" line (:data:`FIRST_RUN` without one);
    None before any analysis."""
    if not dp.metrics_csv.is_file():
        return None
    remember(dp, str((manifest or {}).get("created_utc") or "") or None)
    prev = _previous(dp)
    if prev is None:
        return FIRST_RUN
    try:
        now = pd.read_csv(dp.metrics_csv, dtype={"variant": str})
    except (OSError, ValueError):
        return None
    return change_line(now, prev[0], prev[1], metric)
