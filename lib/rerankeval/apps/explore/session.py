"""One explorer per dataset, kept warm for the session, and the calls a notebook makes on it: :func:`show`,
:func:`judge`, :func:`next_to_judge`, :func:`judging_table` and :func:`widget`."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pandas as pd

from rerankeval.apps.explore import queue, ui
from rerankeval.apps.explore.engine import Explorer
from rerankeval.apps.explore.questions import add_question
from rerankeval.apps.explore.queue import NextUnits
from rerankeval.apps.explore.view import Exploration
from rerankeval.core import runs
from rerankeval.core.paths import DatasetPaths
from rerankeval.core.settings import Settings, load_settings
from rerankeval.evaluate import judgments
from rerankeval.evaluate.analysis_records import read_summary

_EXPLORERS: dict[str, Explorer] = {}


def explorer(dp: DatasetPaths, reload: bool = False, settings: Settings | None = None) -> Explorer:
    """The dataset's explorer, created on first use and kept (warm) for the session; ``reload`` re-reads the
    saved runs (after the chain ran again). ``settings`` (the live search's indexes and LLM endpoint) are those of
    the environment and ``.env``, read once when the explorer opens, unless given: this is the one door of the
    explorer's settings (every call below it is handed them)."""
    key = str(dp.root)
    if reload and key in _EXPLORERS:
        _EXPLORERS.pop(key).close()
    if key not in _EXPLORERS:
        _EXPLORERS[key] = Explorer(dp, settings if settings is not None else load_settings())
    return _EXPLORERS[key]


def show(dp: DatasetPaths, query: str, k: int = 10, say: Callable[[str], None] | None = None) -> Exploration:
    """Every variant's top ``k`` for ``query`` side by side (displays as HTML in a notebook); ``say`` hears each
    step of a live search (e.g. ``say=print``)."""
    return explorer(dp).show(query, k, say)


def judge(dp: DatasetPaths, qid: str, unit_id: str, grade: int, replace: bool = False) -> str:
    """Record ``grade`` for a shown unit into ``dp.judgments(split)``; the next ``make report`` merges it."""
    if str(dp.root) in _EXPLORERS:
        return _EXPLORERS[str(dp.root)].judge(qid, unit_id, grade, replace)
    out = judgments.record(dp, qid, unit_id, grade, replace=replace)
    saved = runs.discover_runs(dp.runs_dir) if dp.runs_dir.is_dir() else {}
    note = queue.unretrieved_note({v: runs.read_trec(p) for v, p in saved.items()}, qid, unit_id)
    return f"{out} ({note})" if note else out


def next_to_judge(dp: DatasetPaths, n: int = 5, mode: str = "queue", seed: int = 0) -> NextUnits:
    """The next ``n`` units to judge, from the saved runs and the qrels with the explorer's judgments (nothing is
    re-run): ``mode="queue"`` the units that move an undecided comparison most (with why), ``"sample"`` the next
    units of a random sample for prediction-powered intervals; and one status line per comparison ("hybrid vs
    vector: undecided — at most 23 judgments could decide it; 6 done"). See :mod:`.queue`."""
    return explorer(dp).next_to_judge(n, mode, seed)


def judging_table(dp: DatasetPaths) -> pd.DataFrame | str:
    """Judged@k per variant and the size of the review pool, as stage 05 recorded them (or why not yet)."""
    summary = read_summary(dp)
    j = summary.judging if summary else {}
    if not j.get("judged_at_k"):
        return "No Judged@k yet: 05-analyse records it (make report)."
    merged = j.get("judgments") or {}
    table = pd.Series(j["judged_at_k"], name=f"Judged@{j['k']}").rename_axis("variant").to_frame()
    table["unjudged units in the pool (all variants)"] = j.get("unjudged_units")
    table["grades merged from the judgments file"] = merged.get("merged", 0)
    return table


def widget(dp: DatasetPaths, k: int = 10) -> Any:
    """The ipywidgets explorer: a text box (and Search), a dropdown of queries, one status line, the view with a
    row of grade buttons (0 to the dataset's top grade) under each hit of a query id, unjudged hits marked, and
    "answers it" under each hit of free text (added as a question). Without ipywidgets (or inside a chain run) a
    Markdown message says how to call :func:`show`."""
    return ui.widget(dp, k, explorer, add_question)
