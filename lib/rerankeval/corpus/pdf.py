"""PDF page extraction with pdfplumber: streamed page by page, failures reported, never fatal."""

from __future__ import annotations

import logging
import os
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from rerankeval.core.errors import ReRankEvalError
from rerankeval.corpus.textnorm import normalise

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Page:
    source: str  # file name relative to the dataset folder (posix)
    page: int  # 1-based, as pdfplumber enumerates pages
    text: str  # normalised text ("" when the page has no extractable text)
    note: str = ""  # why a page has no text (see :func:`no_text_note`); "" for a page with text


class PdfSkipped(ReRankEvalError):
    """A PDF that cannot be read; ``reason`` says why and what to do."""

    def __init__(self, source: str, reason: str):
        super().__init__(f"{source}: {reason}")
        self.source = source
        self.reason = reason


def source_name(rel_path: str) -> str:
    """The name a PDF goes by in ids and tables: its posix path relative to the dataset folder.

    A file name that is not valid UTF-8 (Python hands it over with surrogate escapes) keeps its valid
    characters and shows each invalid byte as ``\\xNN``: ``caf\\xe9.pdf`` for latin-1 ``café.pdf``.
    Valid names are returned unchanged.
    """
    return os.fsencode(rel_path).decode("utf-8", "backslashreplace")


def page_id(source: str, page: int) -> str:
    """The relevance unit of a PDF dataset: ``<file>#p<page>`` (white space in names becomes ``_``)."""
    return f"{'_'.join(source.split())}#p{page}"


def _classify(source: str, path: Path, exc: BaseException) -> PdfSkipped:
    # pdfplumber wraps pdfminer's errors (PdfminerException(PDFPasswordIncorrect())): look inside
    inner: BaseException = exc
    while inner.args and isinstance(inner.args[0], BaseException):
        inner = inner.args[0]
    inner = inner.__cause__ or inner
    name = type(inner).__name__
    msg = str(inner) or name
    if "Password" in name or "Encrypt" in name or "password" in msg.lower() or "encrypt" in msg.lower():
        return PdfSkipped(source, "encrypted: a password is needed to read it; save an unencrypted copy")
    with open(path, "rb") as fh:
        head = fh.read(1024)
    if not head.lstrip().startswith(b"%PDF"):
        return PdfSkipped(source, "not a PDF (no %PDF header); remove it or convert it to PDF")
    return PdfSkipped(source, f"corrupt or truncated PDF ({name}: {msg[:160]}); re-export or re-download it")


def _subtype(annot: dict) -> str:
    sub = (annot.get("data") or {}).get("Subtype")
    name = getattr(sub, "name", sub)  # pdfminer's PSLiteral, or bytes/str in odd files
    return name.decode("latin-1") if isinstance(name, bytes) else str(name or "annotation")


def no_text_note(page) -> str:
    """Why a pdfplumber page has no text layer: form fields/annotations only (their text is not part of the
    page's content, so it is not indexed), images only (a scan), or nothing at all (a blank page)."""
    try:
        annots, images = page.annots, page.images
    except Exception:  # a broken annotation or image dictionary: the page is still just without text
        return "no text layer"
    if annots:
        kinds = Counter("form field" if _subtype(a) == "Widget" else f"{_subtype(a)} annotation" for a in annots)
        found = ", ".join(f"{n} {k}{'s' if n > 1 else ''}" for k, n in sorted(kinds.items()))
        if images:
            return (
                f"no text layer (images and form fields/annotations: {found}; a scanned form?); OCR and "
                f"flatten it to make it searchable"
            )
        return (
            f"no text layer (only form fields/annotations: {found}); their text is not indexed: flatten the "
            f"form or print the page to PDF to make it searchable"
        )
    if images:
        return "no text layer (images only: a scan?); OCR it (e.g. ocrmypdf) to make it searchable"
    return "no text layer (blank page)"


def iter_pages(path: Path, source: str, *, x_tolerance: float = 1.5) -> Iterator[Page]:
    """Yield the pages of one PDF in order, releasing each page's objects after use (bounded memory).

    Raises :class:`PdfSkipped` (before the first page, or mid-file for a truncated PDF) when the file
    cannot be read. ``x_tolerance`` below pdfplumber's default of 3 keeps the word spaces of tightly
    set manuals (the Debian FAQ reads "Thecurrentrelease" at 3).
    """
    import pdfplumber

    if path.stat().st_size == 0:
        raise PdfSkipped(source, "empty file (0 bytes); remove it or replace it with the real PDF")
    try:
        pdf = pdfplumber.open(path)
    except Exception as exc:  # pdfminer raises many unrelated types for broken files
        raise _classify(source, path, exc) from exc
    try:
        try:
            n = len(pdf.pages)
        except Exception as exc:
            raise _classify(source, path, exc) from exc
        if n == 0:
            raise PdfSkipped(
                source, "no pages (a 0-page PDF): nothing to extract; re-export it with its pages or remove it"
            )
        for i in range(n):
            try:
                page = pdf.pages[i]
                text = normalise(page.extract_text(x_tolerance=x_tolerance) or "")
                note = "" if text else no_text_note(page)
                page.close()
            except Exception as exc:
                raise _classify(source, path, exc) from exc
            yield Page(source, i + 1, text, note)
    finally:
        pdf.close()
