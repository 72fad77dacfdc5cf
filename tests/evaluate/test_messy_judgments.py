"""Issue 19, the red team's inputs for judging and the explorer: concurrent judging, hand-edited judgments files
(a pair graded twice, a unit not in the corpus, a grade off the scale), a page with no text, query ids pandas
reads as missing, grades of other number types, and the explorer used from a plain Python script."""

from __future__ import annotations

import math
import multiprocessing
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

from handmade import dataset_at, write_pages, write_questions, write_rotated_runs
from rerankeval.apps import explore
from rerankeval.apps.explore.engine import Explorer, example_queries
from rerankeval.core import ioutil, runs
from rerankeval.core.ioutil import atomic_write_json, atomic_write_text
from rerankeval.core.paths import resolve_dataset
from rerankeval.core.settings import load_settings
from rerankeval.corpus.beir import InputError
from rerankeval.evaluate import judgments

N_PAGES = 40
FILE = "user guide.pdf"  # a name with a space: its page ids write it as user_guide.pdf
UNITS = [f"user_guide.pdf#p{p}" for p in range(1, N_PAGES + 1)]
NO_TEXT = N_PAGES + 1  # a page stage 01 listed but found no text on (only a form field)
NA_IDS = ["NA", "nan", "null", "N/A", "None"]


def _dataset(tmp_path: Path, qids=("q1", "q2", "q3"), name: str = "mj"):
    """A PDF-like dataset built by hand: one chunk per page of FILE (page NO_TEXT listed in pages.csv with no
    chunk), queries ``qids``, qrels on the first two, and hybrid/bm25 runs over the pages."""
    dp = dataset_at(tmp_path / "src" / name, qrels=True)
    write_pages(dp, UNITS, [f"page {i + 1} about topic {i}" for i in range(N_PAGES)], source=FILE)
    pages = [(FILE, p, u, 20, "") for p, u in enumerate(UNITS, start=1)]
    pages.append((FILE, NO_TEXT, f"user_guide.pdf#p{NO_TEXT}", 0, "no text layer (only form fields: 1 Widget)"))
    atomic_write_text(
        dp.pages_csv, "file,page,unit_id,chars,note\n" + "".join(f"{f},{p},{u},{c},{n}\n" for f, p, u, c, n in pages)
    )
    write_questions(dp, qids)
    runs.write_qrels({qids[0]: {UNITS[0]: 2}, qids[1]: {UNITS[1]: 1}}, dp.qrels)
    atomic_write_json(dp.corpus_stats, {"unit": "page", "split": "test"})
    write_rotated_runs(dp, qids, UNITS, ("hybrid", "bm25"), depth=5)
    return dp


def _hand_edit(dp, *lines: str) -> Path:
    path = dp.judgments("test")
    path.write_text("query-id\tcorpus-id\tscore\n" + "".join(line + "\n" for line in lines), encoding="utf-8")
    return path


# --------------------------------------------------------------------------- bug 1: concurrent judging
def _judge_many(root: str, qid: str, barrier, out) -> None:
    dp = resolve_dataset(root, load_settings())
    barrier.wait()  # both processes start judging at once
    out.put([explore.judge(dp, qid, u, 1 + i % 2) for i, u in enumerate(UNITS[2:32])])


def test_two_processes_judging_at_once_lose_no_grade(tmp_path):
    dp = _dataset(tmp_path)
    ctx = multiprocessing.get_context("spawn")  # a fresh interpreter each, as two notebooks
    barrier, out = ctx.Barrier(2), ctx.Queue()
    procs = [ctx.Process(target=_judge_many, args=(str(dp.source), q, barrier, out)) for q in ("q1", "q2")]
    for p in procs:
        p.start()
    answers = [out.get(timeout=120) for _ in procs]
    for p in procs:
        p.join(timeout=60)
        assert p.exitcode == 0
    assert [[a.split(" ")[0] for a in got] for got in answers] == [["recorded"] * 30] * 2  # notes may follow
    got = judgments.read_judgments(dp.judgments("test"))
    assert len(got) == 60  # the old read-add-rewrite without a lock kept 44 of 60
    assert {(q, u, g) for q, u, g, _ in got} == {
        (q, u, 1 + i % 2) for q in ("q1", "q2") for i, u in enumerate(UNITS[2:32])
    }
    assert (dp.source / ioutil.DATASET_LOCK).is_file()  # the dataset folder's one lock, no lock beside the file
    assert not ioutil.lock_file(dp.judgments("test")).exists()


# --------------------------------------------------------------------------- bug 2: a pair graded twice
def test_a_pair_graded_twice_differently_is_refused_naming_both_lines(tmp_path):
    dp = _dataset(tmp_path)
    path = _hand_edit(dp, f"q1\t{UNITS[2]}\t1", f"q2\t{UNITS[3]}\t2", f"q1\t{UNITS[2]}\t2")
    before = path.read_text()
    pattern = (
        rf"judgments-test.tsv:2 and .*judgments-test.tsv:4 grade q1 / {UNITS[2]} differently \(1 and 2\)"
        r".*keep one of the two lines"
    )
    with pytest.raises(judgments.JudgmentConflict, match=pattern):
        judgments.merged_qrels(dp, runs.read_qrels(dp.qrels))
    for grade in (1, 2):  # the old code answered "unchanged" for the last line's grade
        with pytest.raises(judgments.JudgmentConflict, match=pattern):
            explore.judge(dp, "q1", UNITS[2], grade)
    with pytest.raises(judgments.JudgmentConflict, match=pattern):  # and another pair is not recorded either
        explore.judge(dp, "q3", UNITS[5], 1)
    assert path.read_text() == before


def test_the_same_pair_twice_with_the_same_grade_is_accepted_once(tmp_path):
    dp = _dataset(tmp_path)
    _hand_edit(dp, f"q1\t{UNITS[2]}\t1", f"q1\t{UNITS[2]}\t1")
    merged, rec = judgments.merged_qrels(dp, runs.read_qrels(dp.qrels))
    assert merged["q1"] == {UNITS[0]: 2, UNITS[2]: 1} and rec["merged"] == 1
    assert rec["repeated"] == [f"line 3: q1 / {UNITS[2]} repeats line 2 with the same grade 1 (kept once)"]
    assert explore.judge(dp, "q1", UNITS[2], 1) == "unchanged"


# --------------------------------------------------------------------------- bug 3: a unit not in the corpus
def test_a_unit_not_in_the_corpus_is_refused_with_the_line_and_the_closest_id(tmp_path):
    dp = _dataset(tmp_path)
    _hand_edit(dp, f"q1\t{UNITS[2]}\t1", "q1\td99\t2")
    with pytest.raises(
        InputError,
        match=r"judgments-test.tsv:3: unit 'd99' is not in the corpus of mj.*"
        r"correct or delete line 3",
    ):
        judgments.merged_qrels(dp, runs.read_qrels(dp.qrels))
    _hand_edit(dp, "q1\tuser guide.pdf#p3\t2")  # the space of the file name typed as is
    with pytest.raises(
        InputError,
        match=r"judgments-test.tsv:2: unit 'user guide.pdf#p3' is not in the corpus.*"
        r"did you mean 'user_guide.pdf#p3'",
    ):
        judgments.merged_qrels(dp, runs.read_qrels(dp.qrels))
    _hand_edit(dp, "q1\tuser_guide.pdf#p03x\t2")  # a typo: difflib's closest id
    with pytest.raises(InputError, match=r"did you mean 'user_guide.pdf#p3'"):
        judgments.merged_qrels(dp, runs.read_qrels(dp.qrels))
    _hand_edit(dp, "q1\tuser_guide.pdf#p99\t2")
    with pytest.raises(InputError, match=rf"user guide.pdf has {NO_TEXT} page\(s\), there is no page 99"):
        judgments.merged_qrels(dp, runs.read_qrels(dp.qrels))
    with pytest.raises(ValueError, match=r"did you mean 'user_guide.pdf#p3'.*Judge a unit id the explorer shows"):
        explore.judge(dp, "q1", "user guide.pdf#p3", 2)


def test_an_unknown_unit_stops_the_analysis_instead_of_lowering_recall(tmp_path):
    from rerankeval.core.settings import load_settings
    from rerankeval.evaluate import analyse

    dp = _dataset(tmp_path)
    _hand_edit(dp, "q1\td99\t2")
    with pytest.raises(InputError, match=r"judgments-test.tsv:2: unit 'd99'"):
        analyse.run(
            dp,
            {"ks": [1, 3], "final_k": 3, "pool_k": 3, "n_boot": 20, "n_perm": 20, "verify_with": []},
            load_settings(),
        )


# --------------------------------------------------------------------------- a page with no text
def test_a_judgment_of_a_page_with_no_text_says_the_page_has_no_text(tmp_path):
    dp = _dataset(tmp_path)
    no_text = f"user_guide.pdf#p{NO_TEXT}"
    message = (
        rf"page {NO_TEXT} of user guide.pdf has no text in the corpus \(it was skipped at extraction: "
        r"no text layer \(only form fields"
    )
    with pytest.raises(ValueError, match=message):
        explore.judge(dp, "q1", no_text, 2)
    _hand_edit(dp, f"q1\t{no_text}\t2")
    with pytest.raises(InputError, match=rf"judgments-test.tsv:2: .*{message}"):
        judgments.merged_qrels(dp, runs.read_qrels(dp.qrels))


def test_a_real_pdf_page_with_only_an_annotation_cannot_be_judged(tmp_path):
    from fpdf import FPDF

    from builders import extract_corpus, write_queries

    folder = tmp_path / "annot"
    folder.mkdir()
    pdf = FPDF(format="A4")
    pdf.add_page()
    pdf.set_font("Helvetica", size=11)
    pdf.multi_cell(0, 6, "The alpha widget stores its configuration in alpha.conf.")
    pdf.add_page()
    pdf.text_annotation(20, 20, "Only a note: reset the alpha cache")
    pdf.output(str(folder / "x.pdf"))
    write_queries(folder, [("q1", "where is the alpha configuration", "lexical", {"x.pdf#p1": 2})])
    dp = resolve_dataset(str(folder), load_settings())
    extract_corpus(dp)
    with pytest.raises(ValueError, match=r"page 2 of x.pdf has no text in the corpus \(it was skipped at extraction"):
        judgments.record(dp, "q1", "x.pdf#p2", 1)
    with pytest.raises(ValueError, match=r"x.pdf has 2 page\(s\), there is no page 3"):
        judgments.record(dp, "q1", "x.pdf#p3", 1)


# --------------------------------------------------------------------------- grades and the scale
def test_grades_of_any_whole_number_type_are_accepted_and_the_scale_is_enforced(tmp_path):
    dp = _dataset(tmp_path)
    assert explore.judge(dp, "q1", UNITS[2], np.int64(2)) == "recorded"  # refused by the old check
    assert explore.judge(dp, "q1", UNITS[3], 2.0) == "recorded"
    assert explore.judge(dp, "q1", UNITS[4], np.float32(1.0)) == "recorded"
    assert explore.judge(dp, "q1", UNITS[2], 2.0) == "unchanged"
    assert [g for _, _, g, _ in judgments.read_judgments(dp.judgments("test"))] == [2, 2, 1]
    assert "\t2.0" not in dp.judgments("test").read_text()
    for bad in (999999, 3, -1):
        with pytest.raises(ValueError, match=r"outside the scale: grades are 0-2 on this dataset"):
            explore.judge(dp, "q1", UNITS[5], bad)
    for bad in (1.5, True, "2", math.nan, None):
        with pytest.raises(ValueError, match=r"whole number.*grades are 0-2 on this dataset"):
            explore.judge(dp, "q1", UNITS[5], bad)
    assert len(judgments.read_judgments(dp.judgments("test"))) == 3
    assert judgments.grade_scale(runs.read_qrels(dp.qrels)) == 2
    _hand_edit(dp, f"q1\t{UNITS[2]}\t7")
    with pytest.raises(InputError, match=r"judgments-test.tsv:2: grade 7 .* grades are 0-2 on this dataset"):
        judgments.merged_qrels(dp, runs.read_qrels(dp.qrels))


# --------------------------------------------------------------------------- query ids read as missing
def test_query_ids_pandas_reads_as_missing_are_ids_in_the_explorer(tmp_path):
    dp = _dataset(tmp_path, qids=tuple(NA_IDS))
    change = {"NA": 0.9, "nan": 0.7, "null": 0.5, "N/A": 0.3, "None": 0.1}
    dp.per_query_csv.parent.mkdir(parents=True, exist_ok=True)
    dp.per_query_csv.write_text(
        "variant,qid,metric,value\n"
        + "".join(f"hybrid,{q},ndcg@10,1.0\nhybrid_rerank,{q},ndcg@10,{1.0 - d}\n" for q, d in change.items())
    )
    assert example_queries(dp, 5) == NA_IDS  # the old read made NaN of them: "duplicate entries"
    ex = Explorer(dp, load_settings())
    assert ex.examples(2) == ["NA", "nan"]
    for q in NA_IDS:
        assert ex.show(q, k=2).qid == q
    assert ex.show("NA", k=1).columns[0].hits[0].grade == 2
    assert ex.judge("null", UNITS[7], 1).startswith("recorded")  # a note may follow (apps.explore)
    merged, _ = judgments.merged_qrels(dp, runs.read_qrels(dp.qrels))
    assert merged["null"] == {UNITS[7]: 1} and merged["NA"] == {UNITS[0]: 2}


# --------------------------------------------------------------------------- the explorer from a plain script
SCRIPT = """
import sys
from rerankeval.apps import explore
from rerankeval.core import paths
from rerankeval.core.settings import load_settings
dp = paths.resolve_dataset(sys.argv[1], load_settings())
print(repr(explore.show(dp, "t1", k=3)))
print(repr(explore.show(dp, "where do I wipe the alpha cache", k=3)))
print("shown")
"""


@pytest.mark.slow
def test_explore_show_from_a_plain_script_exits_cleanly(tmp_path, tiny_pdf, monkeypatch):
    from builders import extract_corpus
    from indexing import build_index
    from rerankeval import retrieve
    from rerankeval.core.settings import load_settings
    from rerankeval.retrieve.retriever import BASE_VARIANTS

    monkeypatch.setenv("RERANKEVAL_CACHE", str(tmp_path / "cache"))
    for name in ("OPENAI_BASE_URL", "OPENAI_API_KEY"):
        monkeypatch.delenv(name, raising=False)
    dp = resolve_dataset(str(tiny_pdf), load_settings())
    extract_corpus(dp)
    build_index(dp)
    retrieve.write(dp, retrieve.run(dp, retrieve.Params(leg_k=10, pool_k=3, variants=BASE_VARIANTS), load_settings()))
    script = tmp_path / "show.py"
    script.write_text(textwrap.dedent(SCRIPT))
    done = subprocess.run([sys.executable, str(script), str(tiny_pdf)], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert "Exploration of free text" in done.stdout and "shown" in done.stdout
    # the old explorer left its embedded Qdrant store to QdrantClient.__del__ at shutdown: ImportError traceback
    assert "Traceback" not in done.stderr and "ImportError" not in done.stderr, done.stderr
