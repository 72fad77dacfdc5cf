"""This run against the previous one, on the index: "hybrid_rerank nDCG@10 0.642 → 0.651 (+0.009) since the run of
2026-12-02 12:49 UTC", or "first run" when there is none.

Kept on the report's side (the analysis overwrites ``metrics.csv``): each :func:`remember` call keys the metrics
by the manifest's ``created_utc`` (when 05-analyse ran). Two slots in ``dp.report_dir``: ``.last_metrics.csv``
(the analysis the index shows) and ``.previous_metrics.csv`` (the one before it), each with a ``.json`` saying
when it ran and what it rested on (05's ``analyse/inputs.json``: each evaluated question's text and grades, the
judgments merged, the parameters). A new analysis moves the last slot to the previous one; rendering the index twice
for the same analysis changes nothing, so the line survives a re-render.

The line compares like with like (:func:`what_changed`): it names what changed between the two runs besides the
systems (questions added, edited or removed; grades changed, judgments merged; parameters), and it shows no
difference at all when the question sets differ: a mean over other questions says nothing about the systems.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import pandas as pd

from rerankeval.core.ioutil import atomic_write_json, atomic_write_text
from rerankeval.core.paths import DatasetPaths
from rerankeval.evaluate.analysis_records import read_inputs
from rerankeval.evaluate.metrics import label

LAST, PREVIOUS = ".last_metrics", ".previous_metrics"
FIRST_RUN = "First run: no earlier analysis of this dataset to compare with."


def _slot(dp: DatasetPaths, name: str) -> tuple[Any, Any]:
    return dp.report_dir / f"{name}.csv", dp.report_dir / f"{name}.json"


def _meta(dp: DatasetPaths, name: str) -> dict[str, Any]:
    _, meta = _slot(dp, name)
    try:
        got = json.loads(meta.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return got if isinstance(got, dict) else {}


def _when(dp: DatasetPaths, name: str) -> str | None:
    return str(_meta(dp, name).get("created_utc") or "") or None


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
    atomic_write_json(last_meta, {"created_utc": created_utc, "inputs": read_inputs(dp)})


def _previous(dp: DatasetPaths) -> tuple[pd.DataFrame, str] | None:
    csv, _ = _slot(dp, PREVIOUS)
    when = _when(dp, PREVIOUS)
    if not (csv.is_file() and when):
        return None
    try:
        return pd.read_csv(csv, dtype={"variant": str}), when
    except (OSError, ValueError):
        return None


@dataclass
class Changes:
    """What changed between two analyses besides the systems (:func:`what_changed`); ``known``: both recorded it."""

    known: bool = True
    added: list[str] = field(default_factory=list)
    removed: list[str] = field(default_factory=list)
    edited: list[str] = field(default_factory=list)
    grades: list[str] = field(default_factory=list)  # questions (of both runs) whose grades differ
    notes: list[str] = field(default_factory=list)  # judgments merged, the grades' source
    parameters: list[str] = field(default_factory=list)  # "name a → b"

    @property
    def questions(self) -> bool:
        return bool(self.added or self.removed or self.edited)

    def question_words(self) -> str:
        """ "2 added (q7, q8); 1 edited (q3)"."""
        parts = [
            (n, ids) for n, ids in (("added", self.added), ("edited", self.edited), ("removed", self.removed)) if ids
        ]
        return "; ".join(f"{len(ids)} {n} ({_ids(ids)})" for n, ids in parts)

    def cause_words(self) -> str:
        """The grades and parameters that changed, as one clause ("" when none did)."""
        parts = []
        if self.grades:
            parts.append(f"the grades of {len(self.grades)} question(s) changed ({_ids(self.grades)})")
        parts += self.notes
        if self.parameters:
            shown = "; ".join(self.parameters[:5]) + (
                f" and {len(self.parameters) - 5} more" if len(self.parameters) > 5 else ""
            )
            parts.append(f"parameters changed: {shown}")
        return ", ".join(parts)


def _ids(ids: list[str], n: int = 5) -> str:
    return ", ".join(ids[:n]) + (f" and {len(ids) - n} more" if len(ids) > n else "")


def _num(x: Any) -> str:
    return json.dumps(x, default=str)


def what_changed(before: Mapping[str, Any] | None, now: Mapping[str, Any] | None) -> Changes:
    """Questions added/edited/removed, grades changed, judgments merged and parameters between two
    ``analyse/inputs.json`` records (``known`` false when either is missing)."""
    if not before or not now:
        return Changes(known=False)
    qa, qb = before.get("questions") or {}, now.get("questions") or {}
    ga, gb = before.get("grades") or {}, now.get("grades") or {}
    both = [q for q in qb if q in qa]
    notes = []
    ja, jb = int(before.get("judgments_merged") or 0), int(now.get("judgments_merged") or 0)
    if ja != jb:
        notes.append(f"judgments merged {ja} \u2192 {jb}")
    if before.get("qrels_source") != now.get("qrels_source"):
        notes.append(f"grades {before.get('qrels_source')} \u2192 {now.get('qrels_source')}")
    pa, pb = before.get("parameters") or {}, now.get("parameters") or {}
    params = [
        f"{k} {_num(pa.get(k))} \u2192 {_num(pb.get(k))}" for k in sorted(set(pa) | set(pb)) if pa.get(k) != pb.get(k)
    ]
    return Changes(
        added=[q for q in qb if q not in qa],
        removed=[q for q in qa if q not in qb],
        edited=[q for q in both if qa[q] != qb[q]],
        grades=[q for q in both if ga.get(q) != gb.get(q)],
        notes=notes,
        parameters=params,
    )


def _stamp(when: str) -> str:
    return when[:16].replace("T", " ") + " UTC"


def _n_queries(df: pd.DataFrame) -> set[int]:
    return set(pd.to_numeric(df["n_queries"], errors="coerce").dropna().astype(int)) if "n_queries" in df else set()


def _refusal(now: pd.DataFrame, before: pd.DataFrame, changes: Changes, metric: str, stamp: str) -> str | None:
    """The sentence that replaces the differences when the two runs were measured on different questions."""
    if changes.questions:
        why = f"the question set changed ({changes.question_words()})"
    elif not changes.known and _n_queries(now) and _n_queries(before) and _n_queries(now) != _n_queries(before):
        why = (
            f"the number of evaluated questions changed ({'/'.join(map(str, sorted(_n_queries(before))))} "
            f"\u2192 {'/'.join(map(str, sorted(_n_queries(now))))})"
        )
    else:
        return None
    cause = changes.cause_words()
    return (
        f"{label(metric)} is not compared with the run of {stamp}: {why}"
        + (f"; also {cause}" if cause else "")
        + ". A difference between means over different questions "
        "says nothing about the systems; compare runs made on one question set."
    )


def change_line(now: pd.DataFrame, before: pd.DataFrame, when: str, metric: str, changes: Changes | None = None) -> str:
    """One sentence: each variant of both runs, its ``metric`` then → now (difference); new and gone variants; what
    else changed (``changes``, :func:`what_changed`), or why no difference is shown (different question sets)."""
    changes = changes if changes is not None else Changes(known=False)
    stamp = _stamp(when)
    refused = _refusal(now, before, changes, metric, stamp)
    if refused:
        return refused
    fmt = "{:.3f}".format
    a = before.set_index("variant")[metric] if metric in before else pd.Series(dtype=float)
    b = now.set_index("variant")[metric] if metric in now else pd.Series(dtype=float)
    both = [v for v in b.index if v in a.index and not (pd.isna(a[v]) or pd.isna(b[v]))]
    parts = [f"{v} {fmt(a[v])} \u2192 {fmt(b[v])} ({b[v] - a[v]:+.3f})" for v in both]
    new = [v for v in b.index if v not in a.index]
    gone = [v for v in a.index if v not in b.index]
    tail = ([f"new: {', '.join(new)}"] if new else []) + ([f"no longer run: {', '.join(gone)}"] if gone else [])
    if not parts:
        return f"No variant's {label(metric)} can be compared with the run of {stamp}" + (
            f" ({'; '.join(tail)})." if tail else "."
        )
    same = all(abs(b[v] - a[v]) < 5e-4 for v in both)
    head = (
        f"{label(metric)} unchanged since the run of {stamp}: "
        if same
        else f"{label(metric)} since the run of {stamp}: "
    )
    return head + "; ".join(parts) + (f"; {'; '.join(tail)}" if tail else "") + "." + _cause(changes, same)


def _cause(changes: Changes, same: bool) -> str:
    """What the differences rest on, after the line: the grades and parameters that changed, or that none did."""
    cause = changes.cause_words()
    if cause:
        return (
            f" Same questions, but {cause}: part of each difference may come from these, not from the systems."
            if not same
            else f" Same questions; {cause}."
        )
    if changes.known:
        return " Same questions, grades and parameters."
    return ""


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
    changes = what_changed(_meta(dp, PREVIOUS).get("inputs"), _meta(dp, LAST).get("inputs"))
    return change_line(now, prev[0], prev[1], metric, changes)
