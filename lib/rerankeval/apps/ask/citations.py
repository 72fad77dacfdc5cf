"""Checks of a cited answer against the passages the model was given (pure functions, no I/O).

- every citation must name a passage the model was given, by its label (``debian-faq.en.pdf p.12`` for
  PDF datasets, the document id for BEIR; brackets, case and white space do not matter, and the unit id
  ``file#p12`` is accepted too): else it is **fabricated**;
- a quoted span must occur in the cited passage after normalising white space and case, Unicode
  compatibility forms (PDF ligatures such as "\ufb01") and typographic quotes, and ignoring surrounding
  quote marks and a leading or trailing ellipsis: else **quote not found**;
- "not in the documents" is recognised from the reply's flag or the phrase in its text;
- for judged questions: **citation precision** = relevant distinct citations / distinct citations (a
  fabricated citation counts as a citation that is not relevant), and whether any gold unit was cited.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from rerankeval.corpus.textnorm import QUOTE_MARKS as _QUOTE_MARKS
from rerankeval.corpus.textnorm import norm_quote, norm_text

OK = "ok"
FABRICATED = "fabricated"
QUOTE_NOT_FOUND = "quote not found"
BAD = (FABRICATED, QUOTE_NOT_FOUND)

NOT_IN_DOCS = re.compile(
    r"\bnot\s+(?:in|found\s+in|mentioned\s+in|covered\s+(?:in|by))\s+the\s+(?:provided\s+|given\s+)?"
    r"(?:documents?|passages?|context)\b",
    re.I,
)
_PAGE = re.compile(r"\bp\.\s*(\d+)\b")


@dataclass(frozen=True)
class Cited:
    """One citation of a reply and its check: ``unit`` is the passage's unit id (None when fabricated)."""

    label: str
    quote: str
    status: str
    unit: str | None


def norm_label(label: str | None) -> str:
    """A label as compared: no brackets or quotes around it, ``p. 3`` = ``p.3``, ``file#p3`` = ``file p.3``."""
    s = norm_text(label).strip("[]() " + _QUOTE_MARKS)
    s = re.sub(r"#p(\d+)$", r" p.\1", s)
    return _PAGE.sub(r"p.\1", s)


def label_index(labels: Mapping[str, str]) -> dict[str, str]:
    """``{normalised label or unit id: unit id}`` from ``{label: unit id}`` of the passages given."""
    out: dict[str, str] = {}
    for label, unit in labels.items():
        out.setdefault(norm_label(label), unit)
        out.setdefault(norm_label(unit), unit)
    return out


def check_citation(label: str, quote: str | None, labels: Mapping[str, str], texts: Mapping[str, str]) -> Cited:
    """Check one citation against ``labels`` (label -> unit id) and ``texts`` (unit id -> passage text)."""
    unit = label_index(labels).get(norm_label(label))
    if unit is None:
        return Cited(label, quote or "", FABRICATED, None)
    q = norm_quote(quote)
    if q and q not in norm_text(texts.get(unit, "")):
        return Cited(label, quote or "", QUOTE_NOT_FOUND, unit)
    return Cited(label, quote or "", OK, unit)


def check_citations(
    cites: Sequence[tuple[str, str | None]], labels: Mapping[str, str], texts: Mapping[str, str]
) -> list[Cited]:
    """:func:`check_citation` for each ``(label, quote)``."""
    return [check_citation(label, quote, labels, texts) for label, quote in cites]


def says_not_in_documents(answer: str | None, flag: bool = False) -> bool:
    """True when the reply says the passages lack the answer: its flag, or the phrase in its text."""
    return bool(flag) or bool(NOT_IN_DOCS.search(str(answer or "")))


def flagged(cited: Sequence[Cited]) -> bool:
    """True when any citation names something the model was not given or quotes what its passage lacks."""
    return any(c.status in BAD for c in cited)


def _distinct(cited: Sequence[Cited]) -> list[str | None]:
    """One entry per distinct cited unit, and one per distinct fabricated label (None)."""
    units = dict.fromkeys(c.unit for c in cited if c.unit is not None)
    fabricated = dict.fromkeys(norm_label(c.label) for c in cited if c.unit is None)
    return [*units, *([None] * len(fabricated))]


def citation_precision(cited: Sequence[Cited], qrels: Mapping[str, int]) -> float:
    """Share of distinct citations whose unit is relevant (grade > 0); NaN when nothing is cited."""
    distinct = _distinct(cited)
    if not distinct:
        return math.nan
    return sum(u is not None and qrels.get(u, 0) > 0 for u in distinct) / len(distinct)


def gold_cited(cited: Sequence[Cited], qrels: Mapping[str, int]) -> bool:
    """True when a cited unit is relevant (grade > 0)."""
    return any(c.unit is not None and qrels.get(c.unit, 0) > 0 for c in cited)
