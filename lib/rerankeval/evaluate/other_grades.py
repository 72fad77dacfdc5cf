"""The headline table under the other grades (issue 21 item 4): when LLM grades exist
(``qrels/llm-<model>-<hash>.tsv``), 05 evaluates the same runs a second time with the grade source it was not asked
for (``human+llm`` beside the default ``human``, or ``human`` beside ``human+llm``), so the index shows both headline
tables and a reader sees what the LLM's grades change. Never mixed: each file says which grades it rests on (its
``qrels`` column: ``drafts`` and ``drafts+llm`` when an LLM drafted the questions,
:func:`rerankeval.evaluate.agreement.analysis_qrels`)."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pandas as pd

from rerankeval.core.ioutil import atomic_write_json, atomic_write_text
from rerankeval.core.paths import DatasetPaths
from rerankeval.corpus import contract as corpus

OTHER = {"human": "human+llm", "human+llm": "human"}
FILES = ("other_metrics.csv", "other_comparisons.csv", "other_grades.json")


def other_source(grades: Mapping[str, Any]) -> str | None:
    """The grade source (a value of 05's ``qrels_source``) beside the one 05 was asked for, or None when there are
    no LLM grades (nothing to compare). The record's ``qrels_source`` labels what the grades are (``drafts+llm`` on
    a drafted question set), its ``requested`` what 05 was asked for."""
    if not grades.get("llm_file"):
        return None
    return OTHER.get(str(grades.get("requested") or grades.get("qrels_source")))


def paths(dp: DatasetPaths) -> tuple[Path, Path, Path]:
    d = dp.stage_dir("analyse")
    return d / FILES[0], d / FILES[1], d / FILES[2]


def write(dp: DatasetPaths, other: tuple[pd.DataFrame, pd.DataFrame, Mapping[str, Any]] | None) -> dict[str, Path]:
    """Save the other table, its comparisons and its grades record; without one, remove an earlier run's."""
    files = paths(dp)
    if other is None:
        for f in files:
            f.unlink(missing_ok=True)
        return {}
    table, comparisons, rec = other
    return {
        "other_metrics": atomic_write_text(files[0], table.to_csv(index=False)),
        "other_comparisons": atomic_write_text(files[1], comparisons.to_csv(index=False)),
        "other_grades": atomic_write_json(files[2], dict(rec)),
    }


def read(dp: DatasetPaths) -> tuple[pd.DataFrame, pd.DataFrame | None, dict[str, Any]] | None:
    """What :func:`write` saved, or None (no LLM grades, or a file that does not read)."""
    import json

    table_p, comp_p, rec_p = paths(dp)
    try:
        table = pd.read_csv(table_p, dtype={"variant": str})
        comparisons = corpus.read_table(comp_p, ids=("metric", "a", "b")) if comp_p.is_file() else None
        return table, comparisons, json.loads(rec_p.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
