"""Messy inputs of issue 19 for extraction, the analysis and the sweep: nothing is dropped or hidden silently.

Each test builds its own small input; the comment above each says what happened before the fix.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from builders import write_pdf
from rerankeval import extract, paths


def build(folder: Path, **kw):
    dp = paths.resolve_dataset(folder)
    return dp, extract.build_corpus(dp, **kw)


def write_zero_page_pdf(path: Path) -> Path:
    """A valid PDF without a single page (pypdf writes an empty page tree)."""
    from pypdf import PdfWriter

    PdfWriter().write(path)
    return path


def write_form_pdf(path: Path) -> Path:
    """Three pages: p1 has text, p2 only a FreeText annotation, p3 only a filled-in AcroForm text field."""
    from pypdf import PdfWriter
    from pypdf.annotations import FreeText
    from pypdf.generic import ArrayObject, DictionaryObject, NameObject, RectangleObject, TextStringObject

    base = write_pdf(path.with_name(".base-" + path.name), ["The delta daemon reads /etc/delta.conf at start."])
    w = PdfWriter(clone_from=base)
    base.unlink()
    w.add_blank_page(595, 842)
    w.add_blank_page(595, 842)
    w.add_annotation(1, FreeText(text="delta reviewer note: restart after editing", rect=(50, 700, 400, 760)))
    field = w.add_annotation(2, DictionaryObject({
        NameObject("/Subtype"): NameObject("/Widget"), NameObject("/FT"): NameObject("/Tx"),
        NameObject("/T"): TextStringObject("owner"), NameObject("/V"): TextStringObject("delta administrator"),
        NameObject("/Rect"): RectangleObject([50, 700, 300, 720])}))
    w.root_object[NameObject("/AcroForm")] = DictionaryObject(
        {NameObject("/Fields"): ArrayObject([field.indirect_reference])})
    w.write(path)
    return path


# --------------------------------------------------------------------------- extraction (stage 01)
# before: a 0-page PDF was read as a file with no pages and listed nowhere (the README says it is skipped)
def test_a_zero_page_pdf_is_listed_as_skipped_with_the_reason(tiny_pdf):
    write_zero_page_pdf(tiny_pdf / "zero.pdf")
    dp, rep = build(tiny_pdf)
    recs = rep.skipped.to_dict("records")
    assert [r["file"] for r in recs] == ["zero.pdf"] and "0-page PDF" in recs[0]["reason"]
    assert rep.stats["files_skipped"] == 1 and rep.stats["pages"] == 6  # the rest proceeds
    _, again = build(tiny_pdf)  # and it stays listed when the stage is reused
    assert again.reused and list(again.skipped.file) == ["zero.pdf"]


# before: a page whose only content is an annotation or a form field was counted among "pages without
# text" but never named, and a judgment of it was accepted without a word
def test_pages_with_only_form_fields_or_annotations_are_named(tiny_pdf):
    write_form_pdf(tiny_pdf / "form.pdf")
    with open(tiny_pdf / "qrels" / "test.tsv", "a", encoding="utf-8") as fh:
        fh.write("t1\tform.pdf#p3\t1\n")
    dp, rep = build(tiny_pdf)
    lines = extract.no_text_lines(dp)
    assert "form.pdf p2: no text layer (only form fields/annotations: 1 FreeText annotation)" in lines[1]
    assert "form.pdf p3: no text layer (only form fields/annotations: 1 form field)" in lines[2]
    assert lines[0].startswith("beta-manual.pdf p3: no text layer (blank page)") and len(lines) == 3
    pages = extract.empty_pages(dp)
    assert list(pages.unit_id) == ["beta-manual.pdf#p3", "form.pdf#p2", "form.pdf#p3"]
    assert rep.stats["pages_without_text"] == 3
    w = rep.warnings[rep.warnings.kind == "qrels names a page without text"].to_dict("records")
    assert [(r["query-id"], r["corpus-id"]) for r in w] == [("t1", "form.pdf#p3")]
    assert "no variant can retrieve it" in w[0]["detail"] and "form field" in w[0]["detail"]


# before: the warnings table was read back without dtype, so the query id "1" came back as the number 1
# and "NA" / "null" as missing values
@pytest.mark.parametrize("qid", ["NA", "null", "007"])
def test_reused_warnings_keep_query_ids_as_written(tiny_pdf, qid):
    with open(tiny_pdf / "qrels" / "test.tsv", "a", encoding="utf-8") as fh:
        fh.write(f"{qid}\talpha-guide.pdf#p1\t2\n")  # a query not in queries.jsonl: a warning naming it
    _, first = build(tiny_pdf)
    _, again = build(tiny_pdf)
    assert again.reused
    def named(w):
        return w[w.kind == "qrels query not in queries.jsonl"]["query-id"].tolist()

    assert named(again.warnings) == [qid] == named(first.warnings)
