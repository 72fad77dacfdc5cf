"""Issue 35 item 14: Cranfield in BEIR format, by the command the missing-dataset message names
(``python -m rerankeval.corpus.cranfield``), checked on built ir_datasets-style records (no download)."""

from __future__ import annotations

import sys
import types
from collections import namedtuple

from rerankeval.core import paths
from rerankeval.core.settings import load_settings
from rerankeval.corpus import cranfield
from rerankeval.corpus.extract import check_inputs

Doc = namedtuple("Doc", "doc_id title text author bib")
Query = namedtuple("Query", "query_id text")
Qrel = namedtuple("Qrel", "query_id doc_id relevance iteration")

DOCS = [
    Doc("1", "wings", "wings . a study of wings in a slipstream", "a", "b"),
    Doc("2", "heat", "heat . heat transfer at high speed", "c", "d"),
    Doc("3", "flutter", "flutter . panel flutter", "e", "f"),
]
QUERIES = [Query("1", "what about wings"), Query("2", "heat transfer"), Query("4", "panel flutter")]  # .I skips 3
QRELS = [Qrel("1", "1", 1, "0"), Qrel("2", "2", 4, "0"), Qrel("2", "1", -1, "0"), Qrel("3", "3", 2, "0")]


def test_the_export_numbers_queries_as_the_qrels_do_and_grades_by_cleverdon(tmp_path, monkeypatch):
    monkeypatch.setenv("RERANKEVAL_RESULTS", str(tmp_path / "results"))
    folder = tmp_path / "cranfield"
    counts = cranfield.write_beir(DOCS, QUERIES, QRELS, folder)
    assert counts == {"docs": 3, "queries": 3, "qrels": 3}  # the -1 row (no interest) dropped
    queries = (folder / "queries.jsonl").read_text(encoding="utf-8")
    assert '"_id": "3", "text": "panel flutter"' in queries  # the third query is qrels' 3, not its .I number 4
    qrels = (folder / "qrels" / "test.tsv").read_text(encoding="utf-8").splitlines()
    assert qrels == ["query-id\tcorpus-id\tscore", "1\t1\t4", "2\t2\t1", "3\t3\t3"]  # grade = 5 - code
    assert "3\t4" in (folder / "qid_map.tsv").read_text(encoding="utf-8")
    check_inputs(paths.resolve_dataset(folder, load_settings()), "test")  # a dataset the chain takes


def test_the_command_writes_the_folder_or_says_how_to_install_ir_datasets(tmp_path, monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "ir_datasets", None)  # not installed
    assert cranfield.main([str(tmp_path / "a")]) == 2
    assert "pip install ir_datasets" in capsys.readouterr().err and not (tmp_path / "a").exists()
    dataset = types.SimpleNamespace(
        docs_iter=lambda: iter(DOCS), queries_iter=lambda: iter(QUERIES), qrels_iter=lambda: iter(QRELS)
    )
    fake = types.ModuleType("ir_datasets")
    fake.load = lambda name: dataset if name == cranfield.IR_DATASETS_NAME else None
    monkeypatch.setitem(sys.modules, "ir_datasets", fake)
    assert cranfield.main([str(tmp_path / "b")]) == 0
    assert "3 documents, 3 queries, 3 judgments" in capsys.readouterr().out
    assert (tmp_path / "b" / "qrels" / "test.tsv").is_file()
