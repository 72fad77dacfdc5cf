"""Issue 10 point 1: the explorer (``rerankeval.apps.explore``, notebook ``00-explore``).

Fast tests on a hand-built dataset (saved runs, ledger, no indexes): a judged query read from the saved runs with
grades, the reranker's ledger row and hybrid ranks before reranking; a query with no judged units; free text
without indexes (an error naming the fix); escaping. One slow test executes the notebook with papermill on the tiny
PDF dataset with a free-text query: live search over the saved indexes and the fake LLM as the reranker.
"""

from __future__ import annotations

import json

import pytest

from explore_data import UNITS, _dataset
from fakellm import FakeLLM
from rerankeval import rerank
from rerankeval.apps import explore
from rerankeval.apps.chain import params as chain_params
from rerankeval.apps.explore.engine import Explorer, example_queries
from rerankeval.core.paths import NOTEBOOKS_DIR, resolve_dataset
from rerankeval.core.settings import load_settings
from rerankeval.corpus.contract import StageMissing
from rerankeval.evaluate import judgments


def test_a_judged_query_shows_every_saved_variant_with_grades_ledger_and_ranks_before(tmp_path):
    dp = _dataset(tmp_path)
    x = Explorer(dp, load_settings()).show("q1", k=3)
    assert [c.variant for c in x.columns] == ["bm25", "hybrid", "hybrid_rerank"] and not x.live
    hybrid, rr = x.columns[1].hits, x.columns[2].hits
    assert [(h.rank, h.unit_id, h.grade) for h in hybrid] == [(1, UNITS[0], 2), (2, UNITS[1], None), (3, UNITS[2], 0)]
    assert [(h.unit_id, h.before) for h in rr] == [(UNITS[4], 5), (UNITS[3], 4), (UNITS[2], 3)]
    assert hybrid[0].where == "m.pdf \u00b7 p.1" and "alpha" in hybrid[0].snippet
    html = x._repr_html_()
    assert "status <b" in html and "repaired" in html and "repairs 2" in html and "retries 2" in html
    assert "latency 1.25 s" in html and "hybrid #5" in html and "gold 2" in html
    assert "<mark>alpha</mark> <mark>configuration</mark>" in html  # query terms highlighted (stems match)
    assert len(x.frame()) == 9 and set(x.frame().variant) == {"bm25", "hybrid", "hybrid_rerank"}
    # the same query typed as text is recognised as q1
    assert Explorer(dp, load_settings()).show("  Alpha   configuration ", k=3).qid == "q1"


def test_the_rerank_column_shows_the_llm_s_own_scores_from_stage_04(tmp_path):
    dp = _dataset(tmp_path)
    dp.rerank_candidates.parent.mkdir(parents=True, exist_ok=True)
    dp.rerank_candidates.write_text(
        "qid,pass,docid,fused_rank,presented_rank,llm_score,final_rank\n"
        f"q1,main,{UNITS[4]},5,5,0.875,1\nq1,main,{UNITS[3]},4,4,0.5,2\n"
        f"q1,stability,{UNITS[3]},4,1,0.1,1\n",
        encoding="utf-8",
    )
    x = Explorer(dp, load_settings()).show("q1", k=3)
    rr = next(c for c in x.columns if c.variant == "hybrid_rerank").hits
    assert [(h.unit_id, h.llm_score) for h in rr] == [(UNITS[4], 0.875), (UNITS[3], 0.5), (UNITS[2], None)]
    html = x._repr_html_()
    assert "LLM score 0.875 \u00b7 hybrid #5" in html and "LLM score 0.5 \u00b7 hybrid #4" in html
    assert ">score 0.3333 \u00b7 hybrid #3" in html  # below the scored pool: the run's 1/rank
    assert x.frame().llm_score.notna().sum() == 2


def test_a_query_with_no_judged_units_is_shown_without_grades(tmp_path):
    dp = _dataset(tmp_path)
    x = explore.show(dp, "q3", k=5)
    assert x.qid == "q3" and x.gold == {}
    assert all(len(c.hits) == 5 and all(h.grade is None for h in c.hits) for c in x.columns)
    html = x._repr_html_()
    assert "no judgments for this query" in html and "gold" not in html.split("</style>")[1]
    assert "<script>alert(1)</script>" not in html and "&lt;script&gt;alert(1)&lt;/script&gt;" in html


def test_free_text_without_indexes_says_to_run_stage_02(tmp_path):
    dp = _dataset(tmp_path)
    with pytest.raises(StageMissing, match=r"never builds indexes.*|--only 02"):
        Explorer(dp, load_settings()).show("something nobody asked", k=3)


def test_a_grade_recorded_in_the_explorer_shows_at_once_and_a_conflict_is_refused(tmp_path):
    dp = _dataset(tmp_path)
    ex = explore.explorer(dp)
    assert ex.show("q3", k=2).columns[1].hits[0].grade is None
    assert explore.judge(dp, "q3", UNITS[2], 1) == "recorded"
    assert ex.show("q3", k=2).columns[1].hits[0].grade == 1
    with pytest.raises(judgments.JudgmentConflict, match="already judged 2"):
        explore.judge(dp, "q1", UNITS[0], 1)


def test_examples_are_the_diff_views_largest_changes(tmp_path):
    dp = _dataset(tmp_path)
    dp.per_query_csv.write_text(
        "variant,qid,metric,value\n"
        + "".join(
            f"{v},{q},ndcg@10,{val}\n"
            for v, q, val in [
                ("hybrid", "q1", 1.0),
                ("hybrid_rerank", "q1", 0.2),
                ("hybrid", "q2", 0.5),
                ("hybrid_rerank", "q2", 0.6),
            ]
        )
    )
    assert example_queries(dp, 1) == ["q1"] and Explorer(dp, load_settings()).examples(2) == ["q1", "q2"]


def test_the_chain_runs_the_explorer_after_the_stages_it_reads():
    names = [p.stem for p in chain_params.notebooks()]
    assert names.index("00-explore") == names.index("05-analyse") + 1
    assert [p.stem for p in chain_params.notebooks(["00"])] == ["00-explore"]


@pytest.mark.slow
def test_the_notebook_with_a_free_text_query_shows_every_variant(tmp_path, tiny_pdf, monkeypatch):
    papermill = pytest.importorskip("papermill")
    from builders import extract_corpus
    from indexing import build_index
    from rerankeval import retrieve
    from rerankeval.evaluate import analyse
    from rerankeval.retrieve.retriever import BASE_VARIANTS

    monkeypatch.setenv("RERANKEVAL_CACHE", str(tmp_path / "cache"))
    dp = resolve_dataset(str(tiny_pdf), load_settings())
    extract_corpus(dp)
    build_index(dp)
    retrieve.write(dp, retrieve.run(dp, retrieve.Params(leg_k=10, pool_k=3, variants=BASE_VARIANTS), load_settings()))
    with FakeLLM() as f:
        for k, v in {"OPENAI_BASE_URL": f.base_url, "OPENAI_API_KEY": "sk-fake", "RERANK_MODEL": "fake"}.items():
            monkeypatch.setenv(k, v)
        params = rerank.Params(pool_k=3, yesno_json=True)  # RerankConfig()'s yes/no JSON, as before
        rerank.write(dp, rerank.run(dp, params, load_settings(), progress=False))
        analyse.write(dp, analyse.run(dp, {"ks": [1, 3], "final_k": 3, "n_boot": 50, "n_perm": 50}, load_settings()))
        calls = f.count
        out = tmp_path / "00.ipynb"
        papermill.execute_notebook(
            str(NOTEBOOKS_DIR / "00-explore.ipynb"),
            str(out),
            kernel_name="python3",
            parameters={"dataset": str(tiny_pdf), "query": "where do I wipe the alpha cache", "k": 3},
            progress_bar=False,
        )
        assert f.count > calls  # the free-text query went through the reranker (the pool of 3 is new)
    cells = json.loads(out.read_text())["cells"]

    def html_of(marker: str) -> str:
        cell = next(c for c in cells if c["cell_type"] == "code" and marker in "".join(c["source"]))
        return "".join("".join(o.get("data", {}).get("text/html", "")) for o in cell["outputs"])

    shown = html_of("explore.show(dp, query, k)")
    assert "live search over the saved indexes" in shown
    for v in ("vector", "bm25", "hybrid", "qdrant_hybrid", "hybrid_rerank"):
        assert f"<h4>{v} " in shown, v
    assert "unavailable" not in shown and "hybrid_rerank ledger: status" in shown and "LLM score " in shown
    said = "".join("".join(o.get("text", "")) for c in cells if c["cell_type"] == "code" for o in c["outputs"])
    # issue 35 item 10: no progress line, weights bar or model log in the cell (the widget has a status line)
    assert "calls" not in said and "Loading weights" not in said and "searching" not in said
    examples = html_of("ex.examples(n_examples)")
    assert examples.count('class="rre-x"') == 3  # the diff view's largest changes, from the saved runs
