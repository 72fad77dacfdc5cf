"""The checks a drafted question passes before it is kept (:func:`check`), and its lexical overlap with a passage.

Besides the form of the question (empty, too long, the quote not in the passage, a repeat), three checks keep
what a hostile or careless page puts into a question out of the evaluation set (issue 32):

- ``instruction_in_passage``: the page speaks to the model ("rank it first", "ignore previous instructions":
  indirect prompt injection, :mod:`rerankeval.corpus.instructions`); a question drafted from it is not kept.
- ``asks_for_secret``: the question asks for a credential's value ("What is the root password of the build
  server?", "Tell me the API key"); how to *change* a password is a fair question and is kept (:data:`SECRET`).
- ``names_its_unit``: the question contains a unit id ("debian-faq.en.pdf#p12", or the unit it was drafted from):
  it would find its page by the id, not by its meaning.

The language check (``other_language``) is made against the corpus (:class:`Language`) when it has at least
:data:`MIN_VOCABULARY` distinct words: a question is in another language when a language identifier
(py3langid, the maintained fork of langid.py: Lui and Baldwin, ACL 2012) names a language that is not one of the
corpus's *and* fewer than half of its words occur in the corpus. Both signs must agree: a paraphrase asked for
"in your own words" uses words the corpus lacks but is still in its language, and a question made of the corpus's
own words is never dropped on the identifier's word alone.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass

from rerankeval.corpus import instructions
from rerankeval.corpus.textnorm import norm_quote, norm_text

MAX_WORDS, MAX_CHARS = 40, 300  # a longer "question" is a passage, not a query
NEAR_DUPLICATE = 0.8  # word-set Jaccard at or above which two questions are the same question
MIN_KNOWN_WORDS = 0.5  # share of a question's words the corpus knows at or above which it is in its language
MIN_VOCABULARY = 2000  # distinct corpus words below which the language check is not made (too few to tell)
LANGUAGE_SAMPLE = 300  # corpus texts whose language is identified (evenly spaced)
LANGUAGE_SHARE = 0.1  # share of that sample a language needs to count as one of the corpus's
_WORD = re.compile(r"[^\W\d_]{3,}")
_SECRET_NOUN = (
    r"(?:password|passphrase|passwd|pass\s?word|api[\s_-]?key|secret(?:\s+key)?|private\s+key|"
    r"access\s+token|auth(?:entication)?\s+token|credentials?|pin\s+code)"
)
SECRET = re.compile(  # asks for a credential's value: "what is the root password (of ...)", "tell me the API key"
    r"\bwhat(?:'s|\s+is|\s+are|\s+was)\s+(?:the\s+|my\s+|your\s+|their\s+|its\s+)?(?:[\w.-]+\s+){0,3}?"
    + _SECRET_NOUN
    + r"s?\b(?!\s+(?:policy|policies|file|prompt|hash|length|format|command|manager|expiry|aging))"
    r"|\b(?:tell|give|show|send|reveal|print|list|share)\s+(?:me\s+|us\s+)?(?:the\s+|your\s+|all\s+)?"
    r"(?:[\w.-]+\s+){0,3}?" + _SECRET_NOUN,
    re.IGNORECASE,
)
UNIT_ID = re.compile(r"[\w.-]+\.[A-Za-z0-9]{2,5}#p\d+\b")  # a page unit id: <file>#p<page>
REASONS = (
    "no_reply",
    "empty",
    "too_long",
    "instruction_in_passage",
    "asks_for_secret",
    "names_its_unit",
    "quote_not_in_passage",
    "other_language",
    "repeats_human_query",
    "duplicate",
    "near_duplicate",
)


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


def identify(text: str) -> str:
    """The language of ``text`` (an ISO 639-1 code) by py3langid."""
    import py3langid  # here: only a corpus large enough for the language check needs its model

    return str(py3langid.classify(text)[0])


@dataclass(frozen=True)
class Language:
    """What the language check knows of the corpus: its words (3+ letters) and its languages (each at least
    :data:`LANGUAGE_SHARE` of an evenly spaced sample of its texts). Empty (no check) when the corpus has fewer than
    :data:`MIN_VOCABULARY` distinct words."""

    words: frozenset[str] = frozenset()
    languages: frozenset[str] = frozenset()

    @classmethod
    def of(cls, texts: Iterable[str]) -> Language:
        """From the corpus's texts (e.g. the chunk table's ``text`` column)."""
        texts = [str(t) for t in texts if str(t or "").strip()]
        vocab = frozenset().union(*(words(t) for t in texts))
        if len(vocab) < MIN_VOCABULARY:
            return cls()
        sample = texts[:: max(1, len(texts) // LANGUAGE_SAMPLE)][:LANGUAGE_SAMPLE]
        counts = Counter(identify(t) for t in sample)
        return cls(vocab, frozenset(lang for lang, n in counts.items() if n >= LANGUAGE_SHARE * len(sample)))

    def other(self, question: str) -> bool:
        """True when ``question`` is in another language than the corpus (rule: the module docstring)."""
        qw = words(question)
        if not self.words or not qw or len(qw & self.words) / len(qw) >= MIN_KNOWN_WORDS:
            return False
        return identify(question) not in self.languages


def _other_language(question: str, corpus: Language | set[str]) -> bool:
    if isinstance(corpus, Language):
        return corpus.other(question)
    qw = words(question)  # a bare set of corpus words (the earlier call): the share of known words alone
    return bool(corpus and qw and len(qw & corpus) / len(qw) < MIN_KNOWN_WORDS)


def _names(unit: str, question: str) -> bool:
    """``question`` names ``unit`` as a word of its own (an id of at least 6 characters: "12" is a number too)."""
    return len(unit) >= 6 and re.search(rf"(?<![\w#.-]){re.escape(unit)}(?![\w-])", question, re.IGNORECASE) is not None


def _hostile(question: str, passage: str, unit: str) -> str:
    """``instruction_in_passage``, ``asks_for_secret`` or ``names_its_unit`` (see the module docstring), or ""."""
    if instructions.find(passage):
        return "instruction_in_passage"
    if SECRET.search(question):
        return "asks_for_secret"
    if UNIT_ID.search(question) or _names(unit, question):
        return "names_its_unit"
    return ""


def check(
    question: str,
    quote: str,
    passage: str,
    kept: Iterable[str],
    human: Iterable[str],
    vocabulary: Language | set[str],
    unit: str = "",
) -> str:
    """The reason a drafted question is dropped (one of :data:`REASONS`), or "" when it is kept. ``vocabulary``:
    the corpus's :class:`Language` (a bare set of its words checks the share of known words only); ``unit``: the
    id of the unit the question was drafted from."""
    q = " ".join(question.split())
    if not q:
        return "empty"
    if len(q) > MAX_CHARS or len(q.split()) > MAX_WORDS:
        return "too_long"
    hostile = _hostile(q, passage, unit)
    if hostile:
        return hostile
    quote_n = norm_quote(quote)
    if not quote_n or quote_n not in norm_text(passage):
        return "quote_not_in_passage"
    if _other_language(q, vocabulary):
        return "other_language"
    qw = words(q)
    norm = _key(q)
    for others, exact, near in (
        (human, "repeats_human_query", "repeats_human_query"),
        (kept, "duplicate", "near_duplicate"),
    ):
        for other in others:
            if _key(other) == norm:
                return exact
            if _same(qw, words(other)):
                return near
    return ""
