"""The explorer's snippets: each unit's text around the query's terms, and those terms marked (by stem, as BM25
reads them)."""

from __future__ import annotations

import re
from typing import Any

from rerankeval.apps.explore.view import Hit
from rerankeval.core.paths import DatasetPaths
from rerankeval.corpus import contract as corpus
from rerankeval.corpus.snippets import SNIPPET_CHARS, first_chunks, place

_WORD = re.compile(r"\w+")


class Texts:
    """Chunk texts and places, the first chunk of each unit, and the query-term analyser (stems)."""

    def __init__(self, dp: DatasetPaths):
        from rerankeval.index.bm25 import Analyzer

        df = corpus.load_chunks(dp)
        self.rows = {r.chunk_id: r for r in df.itertuples(index=False)}
        self.unit_of = dict(zip(df.chunk_id, df.unit_id, strict=True))
        first = first_chunks(df)
        self.first = dict(zip(first.unit_id, first.chunk_id, strict=True))
        self.analyzer = Analyzer()
        self._stems: dict[str, str | None] = {}

    def terms(self, text: str) -> frozenset[str]:
        return frozenset(self.analyzer(text))

    def stem(self, word: str) -> str | None:
        w = word.lower()
        if w not in self._stems:
            got = self.analyzer(w)
            self._stems[w] = got[0] if got else None
        return self._stems[w]

    def hit(self, rank: int, unit: str, score: float, chunk: str | None, terms: frozenset[str]) -> Hit:
        row = self.rows.get(chunk or self.first.get(unit, ""))
        if row is None:
            return Hit(rank, unit, score, None, "", "")
        return Hit(rank, unit, score, None, self.window(row.text, terms), where(row))

    def window(self, text: str, terms: frozenset[str], limit: int = SNIPPET_CHARS) -> str:
        """About ``limit`` characters of ``text`` around its first query term (whitespace collapsed)."""
        s = " ".join(str(text or "").split())
        first = next((m.start() for m in _WORD.finditer(s) if self.stem(m.group()) in terms), 0)
        start = 0 if first < limit // 3 else s.rfind(" ", 0, first - limit // 4) + 1
        out = s[start:]
        out = out if len(out) <= limit else out[: limit - 1].rstrip() + "\u2026"
        return ("\u2026" if start else "") + out

    def marked(self, text: str, terms: frozenset[str]) -> list[tuple[str, bool]]:
        """``text`` cut into (piece, is a query term): the words whose stem is a query term stand alone (the
        template marks them; every piece is escaped there)."""
        parts, pos = [], 0
        for m in _WORD.finditer(text):
            if self.stem(m.group()) in terms:
                parts += [(text[pos : m.start()], False), (m.group(), True)]
                pos = m.end()
        return [p for p in [*parts, (text[pos:], False)] if p[0]]


def where(row: Any) -> str:
    return place(row.source, row.title, row.page)
