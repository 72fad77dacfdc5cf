"""Stage 01's figures as notebook tables: the corpus summary and the pages that have no text."""

from __future__ import annotations

import pandas as pd

from rerankeval.core.paths import DatasetPaths
from rerankeval.corpus.contract import read_table
from rerankeval.corpus.stage import Result


def summary_table(report: Result) -> pd.DataFrame:
    """The corpus figures as a two-column table for the notebook and the report."""
    s = report.stats
    rows = [
        ("dataset", s["dataset"]),
        ("kind", s["kind"]),
        ("relevance unit", s["unit"]),
        ("files", s["files"]),
        ("files skipped", s["files_skipped"]),
        ("pages", s["pages"]),
        ("pages without text", s["pages_without_text"]),
        ("units", s["units"]),
        ("chunks", s["chunks"]),
        ("chunk length (chars) median / max", f"{s['chunk_chars']['median']:.0f} / {s['chunk_chars']['max']}"),
        ("queries evaluated", s["queries"]),
        ("queries per slice", _slices(s["queries_per_slice"])),
        ("judgments", s["judgments"]),
        ("judgments per grade", ", ".join(f"grade {g}: {n}" for g, n in s["judgments_per_grade"].items())),
        ("warnings", s["warnings"]),
        ("corpus hash", s["corpus_hash"][:16]),
        ("reused from a previous run", "yes" if report.reused else "no"),
    ]
    return pd.DataFrame([(k, "\u2013" if v is None else str(v)) for k, v in rows], columns=["figure", "value"])


def _slices(per_slice: dict) -> str:
    """``{"answers": {"multi": 57, "single": 3}}`` -> ``answers: multi 57, single 3`` (no dict repr on the page)."""

    def counts(v: object) -> str:
        return ", ".join(f"{k} {n}" for k, n in v.items()) if isinstance(v, dict) else str(v)

    return "; ".join(f"{k}: {counts(v)}" for k, v in per_slice.items()) or "\u2013"


PAGE_COLUMNS = ["file", "page", "unit_id", "chars", "note"]


def empty_pages(dp: DatasetPaths) -> pd.DataFrame:
    """Pages with no extractable text, PDF datasets only, each with why (``note``: form fields or annotations
    only, images only, blank; see :func:`rerankeval.corpus.pdf.no_text_note`)."""
    path = dp.pages_csv
    if not path.exists():
        return pd.DataFrame(columns=PAGE_COLUMNS)
    df = read_table(path, ids=("file", "unit_id", "note"))
    df = df.reindex(columns=PAGE_COLUMNS, fill_value="")  # pages.csv of an older run has no note
    return df[df.chars == 0].reset_index(drop=True)


def no_text_lines(dp: DatasetPaths) -> list[str]:
    """One line per page without text: ``x.pdf p3: no text layer (only form fields/annotations: ...)``."""
    return [f"{r.file} p{r.page}: {r.note or 'no text layer'}" for r in empty_pages(dp).itertuples()]
