"""Messy inputs of issue 19 for extraction, the analysis and the sweep: nothing is dropped or hidden silently.

Each test builds its own small input; the comment above each says what happened before the fix.
"""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest

from builders import extract_corpus, write_pdf
from rerankeval.core import paths
from rerankeval.core.settings import load_settings
from rerankeval.corpus import views as corpus_views
from rerankeval.evaluate import analyse, analysis_records, limitations
from rerankeval.experiments import grid as gridmod
from rerankeval.experiments import replay, splits, sweep
from roots import env_embeddings, env_roots


def build(folder: Path, **kw):
    dp = paths.resolve_dataset(folder, load_settings())
    return dp, extract_corpus(dp, **kw)


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
    field = w.add_annotation(
        2,
        DictionaryObject(
            {
                NameObject("/Subtype"): NameObject("/Widget"),
                NameObject("/FT"): NameObject("/Tx"),
                NameObject("/T"): TextStringObject("owner"),
                NameObject("/V"): TextStringObject("delta administrator"),
                NameObject("/Rect"): RectangleObject([50, 700, 300, 720]),
            }
        ),
    )
    w.root_object[NameObject("/AcroForm")] = DictionaryObject(
        {NameObject("/Fields"): ArrayObject([field.indirect_reference])}
    )
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
    lines = corpus_views.no_text_lines(dp)
    assert "form.pdf p2: no text layer (only form fields/annotations: 1 FreeText annotation)" in lines[1]
    assert "form.pdf p3: no text layer (only form fields/annotations: 1 form field)" in lines[2]
    assert lines[0].startswith("beta-manual.pdf p3: no text layer (blank page)") and len(lines) == 3
    pages = corpus_views.empty_pages(dp)
    assert list(pages.unit_id) == ["beta-manual.pdf#p3", "form.pdf#p2", "form.pdf#p3"]
    assert rep.stats["pages_without_text"] == 3
    w = rep.warnings[rep.warnings.kind == "qrels names a page without text"].to_dict("records")
    assert [(r["query-id"], r["corpus-id"]) for r in w] == [("t1", "form.pdf#p3")]
    assert "no variant can retrieve it" in w[0]["detail"] and "form field" in w[0]["detail"]


def test_a_scanned_page_is_named_as_images_only(tmp_path):
    from fpdf import FPDF
    from PIL import Image

    folder = tmp_path / "scans"
    write_pdf(folder / "text.pdf", ["some words about alpha"])
    pdf = FPDF()
    pdf.add_page()
    pdf.image(Image.new("RGB", (40, 40), "gray"), x=10, y=10, w=50)
    pdf.output(str(folder / "scan.pdf"))
    (folder / "queries.jsonl").write_text('{"_id": "q", "text": "alpha"}\n', encoding="utf-8")
    (folder / "qrels").mkdir()
    (folder / "qrels" / "test.tsv").write_text("q\ttext.pdf#p1\t2\n", encoding="utf-8")
    dp, _ = build(folder)
    assert corpus_views.no_text_lines(dp) == [
        "scan.pdf p1: no text layer (images only: a scan?); OCR it (e.g. ocrmypdf) to make it searchable"
    ]


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


# --------------------------------------------------------------------------- the sweep (stage 06)
@pytest.fixture(scope="module")
def model():
    from rerankeval.index import embed

    return embed.load_sentence_transformer(str(embed.bundled_model_path()), "cpu")


def _built(folder: Path, qrels: str, model):
    """The tiny BEIR dataset with ``qrels`` as its test judgments, through stages 01 and 02."""
    from builders import tiny_beir_dataset
    from indexing import build_index
    from rerankeval.index import embed

    tiny_beir_dataset(folder)
    (folder / "qrels" / "test.tsv").write_text("query-id\tcorpus-id\tscore\n" + qrels, encoding="utf-8")
    dp = paths.resolve_dataset(folder, load_settings())
    extract_corpus(dp)  # 01 accepts each of these
    build_index(dp, embedder=embed.Embedder(model_obj=model, progress=False, cache_root=env_embeddings()))
    return dp


# before: "k-fold needs 2 <= k <= 1" (one judged query), "nothing to choose from: no ndcg@10 values" (no
# query with a relevant unit, or the only other query graded 0 throughout): 06 failed, `make report` exited
# 1 and 07 never ran
@pytest.mark.parametrize(
    "qrels,n",
    [("q1\td0\t1\n", 1), ("q1\td0\t0\n", 0), ("q1\td0\t1\nq2\td2\t0\n", 1)],
    ids=["one-judged", "none-relevant", "other-graded-0"],
)
def test_a_sweep_with_fewer_than_two_judged_queries_finishes_with_a_note(tmp_path, model, qrels, n):
    dp = _built(tmp_path / "few", qrels, model)
    for stale in (dp.sweep_dir / "folds.csv", dp.figures_dir / "06-lines.png"):  # an earlier sweep's files
        stale.parent.mkdir(parents=True, exist_ok=True)
        stale.write_text("old", encoding="utf-8")
    params = sweep.SweepParams(grid="small", leg_k=4, final_k=3, stats_seed=0, n_boot=50, write_tuned=True)
    res = sweep.run(dp, params, load_settings())
    assert res.tuning is None
    assert (
        f"the sweep needs at least 2 judged queries (each with a relevant unit, grade >= 1) to choose a "
        f"setting on some and report it on others; this dataset has {n}: add judgments" in res.skipped
    )
    assert "qrels/test.tsv" in res.skipped and sweep.describe(res) == [res.skipped]
    out = sweep.write(dp, res)
    summary = json.loads(out["summary"].read_text(encoding="utf-8"))
    assert summary["skipped"] == res.skipped and summary["chosen"] == {} and summary["protocol"] is None
    table = pd.read_csv(out["sweep_csv"])
    assert table.empty and list(table.columns) == sweep.table_columns(3)
    assert not (dp.sweep_dir / "folds.csv").exists() and not (dp.figures_dir / "06-lines.png").exists()
    assert not dp.run_file(sweep.TUNED_VARIANT).exists()


def test_a_train_split_without_a_relevant_judgment_falls_back_to_kfold(tmp_path, model):
    dp = _built(tmp_path / "kf", "q1\td0\t1\nq2\td2\t1\n", model)
    (dp.source / "qrels" / "train.tsv").write_text("query-id\tcorpus-id\tscore\nq3\td4\t0\n", encoding="utf-8")
    assert splits.train_split(dp) is None  # before: an empty train split, and "nothing to choose from"
    params = sweep.SweepParams(grid=gridmod.Grid(rrf_k=[1, 60]), leg_k=4, final_k=3, stats_seed=0, n_boot=50)
    res = sweep.run(dp, params, load_settings())
    assert not res.skipped and res.tuning.protocol == "k-fold" and len(res.tuning.chosen) == 2


# --------------------------------------------------------------------------- ids pandas reads as missing
MISSING_LOOKING = ("NA", "null")  # with q3: pandas' default read turns the first two into NaN


def _rerank_dataset(tmp_path: Path, qids: tuple[str, ...]):
    """Stage 03's outputs for ``qids`` on the stage-04 test's hand-made chunks (tests/support/rerank_data.py)."""
    from rerank_data import hand_made_hybrid

    return hand_made_hybrid(tmp_path / "ids", qids)


# before: candidates.csv was read with pandas' default missing values: the LLM scores of the queries "NA"
# and "null" were keyed by NaN, so the sweep silently replayed no rerank for them
def test_query_ids_that_look_missing_survive_the_sweep_replay(tmp_path):
    from fakellm import FakeLLM
    from rerank_data import run_cached
    from rerankeval import rerank
    from rerankeval.core.settings import Settings
    from rerankeval.llm.cache import LLMCache
    from rerankeval.rerank.config import Params

    dp = _rerank_dataset(tmp_path, (*MISSING_LOOKING, "q3"))
    with FakeLLM() as f:
        s = Settings(base_url=f.base_url, api_key="k", model="fake-reranker", timeout=2, max_retries=0)
        params = Params(mode="yesno", yesno_json=True, pool_k=3)
        res = run_cached(dp, params, s, LLMCache(tmp_path / "llm"))
        rerank.write(dp, res)
        fused = res.inputs.fused
    llm, why = replay.recorded_llm(dp)
    assert set(llm.scores) == {"NA", "null", "q3"} and "3 queries" in why
    assert sorted(replay.replay(fused, llm, 3)) == ["NA", "null", "q3"]


# before: the previous per_query.csv was read with "NA" / "null" as missing, so a known limitation with such
# an id lost its previous result and was reported as "now succeeds" although it succeeded before too
def test_query_ids_that_look_missing_keep_their_previous_run_in_known_limitations(tmp_path):
    src = tmp_path / "ds"
    src.mkdir()
    (src / "queries.jsonl").write_text(
        "".join(
            json.dumps({"_id": q, "text": f"hard {q}", "metadata": {"known_limitation": "vocabulary"}}) + "\n"
            for q in MISSING_LOOKING
        ),
        encoding="utf-8",
    )
    dp = paths.DatasetPaths("ds", src, tmp_path / "results" / "ds", env_roots())
    dp.root.mkdir(parents=True)
    pd.DataFrame(
        [{"variant": "hybrid", "qid": q, "metric": "success@3", "value": 1.0} for q in MISSING_LOOKING]
    ).to_csv(dp.per_query_csv, index=False)
    runs = {"hybrid": {q: {"G": 2.0, "X": 1.0} for q in MISSING_LOOKING}}
    t = limitations.analyse(dp, runs, {q: {"G": 1} for q in MISSING_LOOKING}, {q: f"hard {q}" for q in MISSING_LOOKING})
    assert dict(zip(t.qid, t.status, strict=True)) == {q: limitations.SUCCEEDS for q in MISSING_LOOKING}
    limitations.write(dp, t)
    assert list(limitations.read(dp).qid) == list(MISSING_LOOKING)


# before: comparisons.csv was read back with pandas' defaults: a variant (an external run file) named "None"
# or "NA" came back as NaN and dropped out of the verdict
def test_variant_names_that_look_missing_survive_the_comparisons_file(tmp_path):
    dp = paths.DatasetPaths("ds", tmp_path / "src", tmp_path / "results" / "ds", env_roots())
    cmp = pd.DataFrame({"metric": ["ndcg@10"], "a": ["None"], "b": ["NA"], "n": [3], "p": [float("nan")]})
    analyse.write_summary(dp, analyse.Summary(), cmp)
    back = analysis_records.read_comparisons(dp)
    assert (back.a[0], back.b[0]) == ("None", "NA") and back.p.isna().all() and back.n[0] == 3
