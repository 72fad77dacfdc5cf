"""Plain-text snippets of relevance units: the first chunk of a unit, the chunk that brought a unit into a
variant's list, a shortened text and the "source · title · p.N" label of a place.

Text, not HTML: the templates that render a snippet escape it (:mod:`rerankeval.report.fragments`).
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from typing import Any

import pandas as pd

from rerankeval.core.runs import Run, ranked

SNIPPET_CHARS = 220


CID = re.compile(r"\(cid:\d+\)")  # a glyph a PDF's font could not map to a character (pdfminer writes its code)


def shorten(text: Any, limit: int = SNIPPET_CHARS) -> str:
    """``text`` without PDF glyph codes (``(cid:104)``), whitespace collapsed, cut to at most ``limit`` characters
    at a word boundary (an ellipsis marks the cut; a single longer word is cut inside)."""
    s = " ".join(CID.sub("", str(text or "")).split())
    if len(s) <= limit:
        return s
    cut = s[: limit - 1]
    if s[limit - 1] != " " and " " in cut:  # the cut falls inside a word: end before it
        cut = cut.rsplit(" ", 1)[0]
    return cut.rstrip() + "\u2026"


def first_chunks(chunks: pd.DataFrame) -> pd.DataFrame:
    """One row per unit: the chunk table's row of its first chunk (lowest ``start``, ties in table order)."""
    return chunks.sort_values(["unit_id", "start"], kind="stable").drop_duplicates("unit_id")


def place(source: Any, title: Any, page: Any) -> str:
    """``source · title · p.N`` (parts that are missing left out; an integral float page printed as an int)."""
    parts = [str(x) for x in (source, title) if x and not _nan(x)]
    if page is not None and page != "" and not _nan(page):
        if isinstance(page, float) and page.is_integer():
            page = int(page)
        parts.append(f"p.{page}")
    return " \u00b7 ".join(parts)


def _nan(x: Any) -> bool:
    return isinstance(x, float) and math.isnan(x)


class Snippets:
    """Snippet of a unit for a query: the chunk that brought the unit into that variant's list.

    Uses the variant's chunk-level run (``runs/chunks/<variant>.trec``) when given, else the unit's first
    chunk (:func:`first_chunks`) from the chunk table.
    """

    def __init__(self, chunks: pd.DataFrame, chunk_runs: Mapping[str, Run] | None = None):
        df = chunks.copy()
        self._by_chunk = {r.chunk_id: r for r in df.itertuples(index=False)}
        self._unit_of = dict(zip(df.chunk_id, df.unit_id, strict=True))
        self._first = {r.unit_id: r for r in first_chunks(df).itertuples(index=False)}
        self._chunk_runs = dict(chunk_runs or {})
        self._best: dict[tuple[str, str], dict[str, str]] = {}

    def _best_chunks(self, variant: str, qid: str) -> dict[str, str]:
        key = (variant, qid)
        if key not in self._best:
            best: dict[str, str] = {}
            for chunk, _ in ranked(self._chunk_runs.get(variant, {}).get(qid, {})):
                u = self._unit_of.get(chunk)
                if u is not None:
                    best.setdefault(u, chunk)
            self._best[key] = best
        return self._best[key]

    def get(self, variant: str, qid: str, unit: str) -> dict[str, Any]:
        """``text``, ``title``, ``source``, ``page`` and ``chunk_id`` of the unit's snippet (empty if unknown)."""
        chunk = self._best_chunks(variant, qid).get(unit)
        row = self._by_chunk.get(chunk) if chunk else self._first.get(unit)
        if row is None:
            return {"text": "", "title": "", "source": "", "page": None, "chunk_id": None}
        return {
            "text": row.text,
            "title": row.title,
            "source": row.source,
            "page": row.page,
            "chunk_id": row.chunk_id,
        }
