"""Text normalisation and page-bounded chunking for extracted PDF text."""

from __future__ import annotations

import re
import unicodedata
from dataclasses import dataclass

_CONTROL = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f]")
_HYPHEN_BREAK = re.compile(r"(?<=[^\W\d_])-\n(?=[a-z])")
_WS = re.compile(r"\s+")
_TYPOGRAPHIC = str.maketrans({"\u2018": "'", "\u2019": "'", "\u201c": '"', "\u201d": '"'})
QUOTE_MARKS = "\"'`\u201c\u201d\u2018\u2019\u00ab\u00bb "


def normalise(text: str) -> str:
    """Normalise extracted text to one line of single-spaced words.

    - Unicode NFKC (ligatures such as "ﬁ" become "fi"), soft hyphens removed;
    - control characters (e.g. ``\\x07``) become spaces;
    - a word hyphenated at a line end is joined when the next line starts in lower case
      ("pack-\\nage" -> "package"; "GNU-\\nLinux" keeps its hyphen);
    - all runs of white space become one space; leading/trailing space is removed.
    """
    text = unicodedata.normalize("NFKC", text).replace("\u00ad", "")
    text = _CONTROL.sub(" ", text)
    text = text.replace("\r\n", "\n").replace("\r", "\n")
    text = _HYPHEN_BREAK.sub("", text)
    return _WS.sub(" ", text).strip()


def norm_text(text: str | None) -> str:
    """Text as compared by checks (quotes of cited answers, drafted questions): NFKC (ligatures apart),
    typographic quotes straightened, white space collapsed, case folded."""
    s = unicodedata.normalize("NFKC", str(text or "")).translate(_TYPOGRAPHIC)
    return " ".join(s.split()).casefold()


def norm_quote(quote: str | None) -> str:
    """A quoted span as compared: :func:`norm_text`, without quote marks or an ellipsis around it."""
    s = norm_text(quote).strip(QUOTE_MARKS)
    for tail in ("...", "\u2026"):
        s = s.removesuffix(tail).rstrip()
    for head in ("...", "\u2026"):
        s = s.removeprefix(head).lstrip()
    return s


@dataclass(frozen=True)
class Span:
    start: int  # character offset in the normalised page text
    text: str


def chunk_text(text: str, size: int = 800, overlap: int = 200) -> list[Span]:
    """Split one page's normalised text into overlapping chunks of at most ``size`` characters.

    Chunk ends are moved back to the last space in their second half so words are not cut, and each
    next chunk starts ``overlap`` characters before the previous end, moved forward to a word start.
    The result depends only on the text and the two parameters, so chunk offsets (and the ids derived
    from them) are stable across runs. A chunk never crosses a page: call this once per page.
    """
    if size <= 0:
        raise ValueError(f"chunk size must be positive, got {size}")
    if not 0 <= overlap < size:
        raise ValueError(f"chunk overlap must be in [0, size), got overlap={overlap}, size={size}")
    n = len(text)
    spans: list[Span] = []
    start = 0
    while start < n:
        end = min(start + size, n)
        if end < n:
            cut = text.rfind(" ", start + size // 2, end + 1)
            if cut > start:
                end = cut
        piece = text[start:end].strip()
        if piece:
            spans.append(Span(start + (len(text[start:end]) - len(text[start:end].lstrip())), piece))
        if end >= n:
            break
        nxt = max(end - overlap, start + 1)
        # move forward to the start of a word
        while nxt < end and nxt > 0 and text[nxt - 1] != " ":
            nxt += 1
        start = nxt if nxt < end else end
        while start < n and text[start] == " ":
            start += 1
    return spans
