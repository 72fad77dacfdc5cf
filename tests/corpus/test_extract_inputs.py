"""Messy real dataset folders (issue 14): nothing is lost silently, and bad inputs stop early and clearly.

Each test builds its own small folder; the comment above each says what happened before the fix.
"""

from __future__ import annotations

import gzip
import json

import pytest

from builders import TINY_QUERIES, extract_corpus, write_corpus, write_pdf, write_pdf_bytes_name, write_queries
from rerankeval.core import paths
from rerankeval.core.settings import load_settings
from rerankeval.corpus import contract as corpus
from rerankeval.corpus import extract
from rerankeval.corpus.beir import InputError


def build(folder, **kw):
    dp = paths.resolve_dataset(folder, load_settings())
    return dp, extract_corpus(dp, **kw)


@pytest.fixture
def no_extraction(monkeypatch):
    """Fail the test if any PDF page is extracted (the check under test must come first)."""

    def boom(*a, **kw):
        raise AssertionError("a PDF was extracted before the inputs were checked")

    monkeypatch.setattr(extract, "iter_pages", boom)


def _append_qrels(folder, *lines: str) -> None:
    with open(folder / "qrels" / "test.tsv", "a", encoding="utf-8") as fh:
        fh.writelines(line + "\n" for line in lines)


# -- PDF file names --


def test_two_pdfs_mapping_to_one_page_id_are_an_error_naming_both(tiny_pdf, no_extraction):
    # before: both became 'a_b.pdf#p1'; one judgment and one Qdrant point silently lost
    write_pdf(tiny_pdf / "a b.pdf", ["first file"])
    write_pdf(tiny_pdf / "a_b.pdf", ["second file"])
    with pytest.raises(InputError, match=r"a b\.pdf and .*a_b\.pdf.*rename one of them"):
        build(tiny_pdf)


def test_pdf_name_that_is_not_utf8_is_indexed_under_an_escaped_id(tiny_pdf):
    # before: UnicodeEncodeError in the input hash, naming no file; the whole run stopped
    write_pdf_bytes_name(tiny_pdf, b"caf\xe9.pdf", ["The cafe menu lists espresso and croissants."])
    write_queries(tiny_pdf, TINY_QUERIES + [("t5", "what does the cafe serve", "lexical", {"caf\\xe9.pdf#p1": 2})])
    dp, rep = build(tiny_pdf)
    chunks = corpus.load_chunks(dp)
    assert "caf\\xe9.pdf#p1" in set(chunks.unit_id) and "caf\\xe9.pdf" in set(chunks.source)
    assert rep.stats["files"] == 4 and rep.stats["pages"] == 7  # the other files proceed
    assert corpus.load_qrels(dp)["t5"] == {"caf\\xe9.pdf#p1": 2}
    w = rep.warnings[rep.warnings.kind == "file name is not valid UTF-8"].to_dict("records")
    assert [r["corpus-id"] for r in w] == ["caf\\xe9.pdf"] and "caf\\xe9.pdf#p<page>" in w[0]["detail"]
    assert build(tiny_pdf)[1].reused  # the input hash works on the name too


# -- BEIR corpora --


def test_beir_corpus_with_pyserini_contents_field_is_read(tiny_beir):
    # before: accepted as six empty documents, with no warning
    write_corpus(tiny_beir, [{"_id": f"d{i}", "contents": f"text of document {i}"} for i in range(6)])
    dp, rep = build(tiny_beir)
    assert corpus.chunk_texts(dp)["d2"] == "text of document 2"


def test_beir_corpus_without_a_known_text_field_lists_fields_found_and_accepted(tiny_beir):
    # before: accepted as empty documents
    write_corpus(tiny_beir, [{"_id": "d0", "title": "T", "body": "the text"}])
    with pytest.raises(
        InputError,
        match=r"corpus.jsonl:1: no text field: the document has '_id', 'title', "
        r"'body'; accepted are 'text' \(BEIR\) or 'contents'",
    ):
        build(tiny_beir)


def test_beir_corpus_of_empty_documents_is_an_error(tiny_beir):
    # before: accepted; stages 02-04 ran on nothing and 05 crashed
    write_corpus(tiny_beir, [{"_id": f"d{i}", "title": "", "text": ""} for i in range(6)])
    with pytest.raises(InputError, match=r"corpus.jsonl: all 6 documents are empty"):
        build(tiny_beir)


def test_truncated_gzip_corpus_names_the_file_and_the_fix(tiny_beir):
    # before: EOFError naming no file
    path = write_corpus(tiny_beir, [{"_id": f"d{i}", "text": f"document {i} " * 50} for i in range(60)], gz=True)
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])
    with pytest.raises(InputError, match=r"corpus.jsonl.gz: the compressed file is truncated or corrupt.*gzip -t"):
        build(tiny_beir)


def test_intact_gzip_corpus_is_read(tiny_beir):
    write_corpus(tiny_beir, [{"_id": f"d{i}", "text": f"document {i}"} for i in range(3)], gz=True)
    dp, rep = build(tiny_beir)
    assert rep.stats["chunks"] == 3 and gzip.decompress((tiny_beir / "corpus.jsonl.gz").read_bytes())


# -- queries and qrels --


def test_byte_order_mark_in_queries_and_qrels_is_ignored(tiny_beir):
    # before: "malformed JSON" / "grade 'score' is not an integer" (the BOM hid the header)
    for name in ("queries.jsonl", "qrels/test.tsv"):
        p = tiny_beir / name
        p.write_text(p.read_text(encoding="utf-8"), encoding="utf-8-sig")
    dp, rep = build(tiny_beir)
    assert corpus.load_qrels(dp) == {"q1": {"d0": 1}, "q2": {"d2": 1}}


def test_qrels_trailing_tab_is_accepted(tiny_beir):
    # before: "expected 3 tab-separated columns, got 4: 'q3\td1\t1'" (the tab is invisible in the message)
    (tiny_beir / "qrels" / "test.tsv").write_text("query-id\tcorpus-id\tscore\t\nq1\td0\t1\t\nq2\td2\t1\n")
    dp, rep = build(tiny_beir)
    assert corpus.load_qrels(dp) == {"q1": {"d0": 1}, "q2": {"d2": 1}}


def test_negative_grade_is_judged_non_relevant_with_a_warning(tiny_beir):
    # before: -1 accepted silently and passed on to the evaluation
    _append_qrels(tiny_beir, "q1\td3\t-1")
    dp, rep = build(tiny_beir)
    assert corpus.load_qrels(dp)["q1"] == {"d0": 1, "d3": 0}
    w = rep.warnings[rep.warnings.kind == "negative grades read as 0"].to_dict("records")
    assert len(w) == 1 and "lines 4 of test.tsv" in w[0]["detail"] and "<= 0" in w[0]["detail"]


@pytest.mark.parametrize("second", ["q1\td0\t2", "q1\td0 \t0"])
def test_same_pair_graded_twice_differently_names_both_lines(tiny_beir, second):
    # before: the last line won silently
    _append_qrels(tiny_beir, second)
    with pytest.raises(InputError, match=r"test.tsv:2 and .*test.tsv:4 judge query 'q1' / 'd0' differently"):
        build(tiny_beir)


def test_page_ids_that_normalise_to_one_unit_graded_differently_are_an_error(tiny_pdf):
    # before: 'beta manual.pdf#p1' and 'beta_manual.pdf#p1' both became one unit; the last grade won
    write_pdf(tiny_pdf / "beta manual.pdf", ["beta manual page"])
    _append_qrels(tiny_pdf, "t1\tbeta manual.pdf#p1\t2", "t1\tbeta_manual.pdf#p1\t1")
    with pytest.raises(InputError, match=r"test.tsv:7 and .*test.tsv:8 judge query 't1' / 'beta_manual.pdf#p1'"):
        build(tiny_pdf)


def test_same_pair_graded_twice_alike_is_kept_once_with_a_warning(tiny_beir):
    # before: kept once, silently
    _append_qrels(tiny_beir, "q1\td0\t1")
    dp, rep = build(tiny_beir)
    assert corpus.load_qrels(dp)["q1"] == {"d0": 1}
    w = rep.warnings[rep.warnings.kind == "judgment repeated"].to_dict("records")
    assert [(r["query-id"], r["corpus-id"]) for r in w] == [("q1", "d0")] and "lines 2 and 4" in w[0]["detail"]


# -- the dataset folder --


@pytest.mark.parametrize("inside", ["queries.jsonl", "alpha-guide.pdf", "qrels/test.tsv"])
def test_dataset_pointing_at_a_file_names_the_folder_meant(tiny_pdf, inside):
    # before: "Dataset ... not found" although the file exists
    with pytest.raises(paths.DatasetNotFound, match=rf"is a file .* a dataset is a folder. Did you mean {tiny_pdf}\?"):
        paths.resolve_dataset(tiny_pdf / inside, load_settings())


@pytest.mark.parametrize(
    "spoil,missing",
    [
        (lambda f: (f / "queries.jsonl").unlink(), "missing: queries.jsonl. Nothing was extracted"),
        (lambda f: (f / "qrels" / "test.tsv").unlink(), "missing: qrels/test.tsv"),
    ],
)
def test_missing_required_file_stops_before_any_pdf_is_extracted(tiny_pdf, no_extraction, spoil, missing):
    # before: every PDF was extracted, then the missing file was reported
    spoil(tiny_pdf)
    with pytest.raises(InputError, match=rf"(?s){missing}.*Expected layout:\n.*queries.jsonl"):
        build(tiny_pdf)


def test_bad_judgment_line_stops_before_any_pdf_is_extracted(tiny_pdf, no_extraction):
    _append_qrels(tiny_pdf, "t1\talpha-guide.pdf#p1\thigh")
    with pytest.raises(InputError, match=r"test.tsv:7: relevance grade 'high'"):
        build(tiny_pdf)


def test_second_folder_with_the_same_name_is_refused_naming_both(tmp_path):
    # before: the second run silently replaced the first one's results/<name>/
    first, second = (write_pdf(tmp_path / side / "docs" / "a.pdf", ["alpha text"]).parent for side in ("x", "y"))
    for folder in (first, second):
        write_queries(folder, [("q", "alpha", "lexical", {"a.pdf#p1": 2})])
    dp, _ = build(first)
    assert json.loads(dp.source_record.read_text()) == {"source": str(first)}
    before = dp.chunks.read_bytes()
    with pytest.raises(paths.DatasetNameClash, match=rf"holds the results of another .*{first}.*{second}.*rename"):
        paths.resolve_dataset(second, load_settings())
    with pytest.raises(paths.DatasetNameClash):  # also when the paths are built by hand
        extract_corpus(paths.DatasetPaths("docs", second, dp.root, dp.roots))
    assert dp.chunks.read_bytes() == before
    assert build(first)[1].reused  # the owner itself runs on


def test_chain_stops_at_once_with_the_message_and_exit_2(tmp_path, capsys):
    from rerankeval.apps import chain

    first, second = (write_pdf(tmp_path / side / "docs" / "a.pdf", ["alpha text"]).parent for side in ("x", "y"))
    for folder in (first, second):
        write_queries(folder, [("q", "alpha", "lexical", {"a.pdf#p1": 2})])
    build(first)
    assert chain.main(["--dataset", str(second)]) == 2
    assert f"holds the results of another dataset folder with the same name, {first}" in capsys.readouterr().err
    assert chain.main(["--dataset", str(first / "queries.jsonl")]) == 2
    assert f"a dataset is a folder. Did you mean {first}?" in capsys.readouterr().err
    assert not paths.resolve_dataset(first, load_settings()).executed_dir.exists()  # no notebook ran
