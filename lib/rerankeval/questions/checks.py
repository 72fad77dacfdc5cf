"""The checks a drafted question passes before it is kept (:func:`check`), and its lexical overlap with a passage."""

from __future__ import annotations

import re
from collections.abc import Iterable

from rerankeval.corpus.textnorm import norm_quote, norm_text

MAX_WORDS, MAX_CHARS = 40, 300  # a longer "question" is a passage, not a query
NEAR_DUPLICATE = 0.8  # word-set Jaccard at or above which two questions are the same question
MIN_KNOWN_WORDS = 0.5  # share of a question's words the corpus must know, else it is in another language
MIN_VOCABULARY = 2000  # distinct corpus words below which the language check is not made (too few to tell)
_WORD = re.compile(r"[^\W\d_]{3,}")
REASONS = ("no_reply", "empty", "too_long", "quote_not_in_passage", "other_language", "repeats_human_query",
           "duplicate", "near_duplicate")


def words(text: str) -> set[str]:
    return set(_WORD.findall(norm_text(text)))


def overlap(question: str, passage: str) -> float:
    """Share of the question's words (3+ letters) that occur in the passage: 1.0 = copied from it."""
    q = words(question)
    return round(len(q & words(passage)) / len(q), 3) if q else 0.0


def _key(text: str) -> str:
    """A question as compared for duplicates: its words in order, case and punctuation aside."""
    return " ".join(re.findall(r"\w+", norm_text(text)))


def _same(a: set[str], b: set[str]) -> bool:
    return bool(a or b) and len(a & b) / len(a | b) >= NEAR_DUPLICATE


def check(question: str, quote: str, passage: str, kept: Iterable[str], human: Iterable[str],
          vocabulary: set[str]) -> str:
    """The reason a drafted question is dropped (one of :data:`REASONS`), or "" when it is kept."""
    q = " ".join(question.split())
    if not q:
        return "empty"
    if len(q) > MAX_CHARS or len(q.split()) > MAX_WORDS:
        return "too_long"
    quote_n = norm_quote(quote)
    if not quote_n or quote_n not in norm_text(passage):
        return "quote_not_in_passage"
    qw = words(q)
    if vocabulary and qw and len(qw & vocabulary) / len(qw) < MIN_KNOWN_WORDS:
        return "other_language"
    norm = _key(q)
    for others, exact, near in ((human, "repeats_human_query", "repeats_human_query"),
                                (kept, "duplicate", "near_duplicate")):
        for other in others:
            if _key(other) == norm:
                return exact
            if _same(qw, words(other)):
                return near
    return ""
