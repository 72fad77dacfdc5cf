"""experiments.validate: the system rankings of a generated set against the human one (Kendall tau)."""

from __future__ import annotations

import json

import pandas as pd
import pytest

from builders import extract_corpus, tiny_pdf_dataset
from fakellm import FakeLLM
from rerankeval.core import paths
from rerankeval.core.settings import Settings, load_settings
from rerankeval.experiments import validate
from rerankeval.llm.cache import LLMCache
from rerankeval.questions import draft


@pytest.fixture
def built(tmp_path):
    from indexing import build_index

    root = tmp_path
    dp = paths.resolve_dataset(tiny_pdf_dataset(root / "human"), load_settings())
    extract_corpus(dp)
    build_index(dp)
    return dp, root


def test_a_set_ranks_systems_exactly_as_itself(built):
    dp, _ = built
    human = validate.human_set(dp)
    check = validate.validate(dp, human, human, settings=load_settings())
    points = [p for p in validate.load_grid("small").points(validate.Point(leg_k=100), pdf=True) if not p.chunk_size]
    assert len(check.table) == check.tau["n_systems"] == len(points) > 10
    assert check.tau["n_pairs"] == len(points) * (len(points) - 1) // 2
    assert (check.table.human == check.table.generated).all()
    if check.tau["tau"] is not None:  # all systems tied on a 4-query set leaves tau undefined, and it says so
        assert check.tau["tau"] == pytest.approx(1.0)
    assert "Kendall" in check.sentence()


def test_a_drafted_validation_set_stays_in_the_results_and_is_compared(built):
    dp, root = built
    before = {p: p.read_bytes() for p in (dp.source_queries, dp.source_qrels())}
    settings = Settings(base_url="", api_key="test-key-not-a-secret-0001", model="fake", timeout=2, max_retries=0)
    with FakeLLM() as f:
        params = draft.QuestionsParams(n_questions=3, draft_min_chars=50, validate_drafts=True)
        res = draft.run(
            dp,
            params,
            Settings(**{**settings.__dict__, "base_url": f.base_url}),
            LLMCache(root / "llm"),
            files=draft.validation_files(dp),
        )
        draft.write(dp, res)
    files = res.files
    assert len(res.new) == 3 and files.queries.is_relative_to(dp.root) and not dp.source_draft_queries.exists()
    assert {p: p.read_bytes() for p in before} == before  # no human file touched
    assert json.loads(dp.corpus_stats.read_text())["queries_source"] == "human"
    check = validate.validate(
        dp, validate.human_set(dp), validate.draft_set(files.queries, files.qrels), settings=load_settings()
    )
    assert check.n_queries == {"human": 4, "generated": 3}
    assert isinstance(check.table, pd.DataFrame) and set(check.table.columns) == {"point", "human", "generated"}


def test_tau_of_two_rankings_that_swap_one_pair_is_two_thirds(monkeypatch, tmp_path):
    scores = {
        "human": pd.Series([0.1, 0.2, 0.3, 0.4], index=list("abcd"), name="ndcg@10"),
        "generated": pd.Series([0.1, 0.2, 0.4, 0.3], index=list("abcd"), name="ndcg@10"),
    }
    monkeypatch.setattr(validate, "system_scores", lambda dp, queries, qrels, **kw: scores[queries["which"]])
    human = ({"which": "human"}, {"which": {"u": 1}})
    gen = ({"which": "generated"}, {"which": {"u": 1}})
    check = validate.validate(None, human, gen)
    # 6 pairs of systems: 5 concordant, 1 discordant
    assert check.tau["tau"] == pytest.approx(4 / 6, abs=1e-4) and check.tau["n_pairs"] == 6
    assert "Below .9" in check.sentence() and list(check.table.point) == list("abcd")


# -- human vs human+LLM qrels (notebook 09) ---------------------------------------------------------------------
SYSTEMS = {
    "A": {"q1": {"u1": 3.0, "u3": 2.0, "u4": 1.0}},  # the human-relevant u1 first
    "B": {"q1": {"u2": 3.0, "u1": 2.0, "u4": 1.0}},  # u2 (only the LLM judges it) first, u1 second
    "C": {"q1": {"u3": 3.0, "u4": 2.0, "u1": 1.0}},
}  # u1 third


def _qrels_dataset(tmp_path, llm_lines: str | None):
    """Human qrels q1: u1 = 1 and u9 = 2 (the scale's top; no system finds u9), an index manifest, and the LLM's
    grades ``llm_lines`` in qrels/llm-fake.tsv (none when None)."""
    from builders import hand_made_stages
    from rerankeval.core import runs

    dp = hand_made_stages(tmp_path / "ds", {"m.pdf#p1": ["Apt."], "m.pdf#p2": ["Grub."]}, ["q1"])
    runs.write_qrels({"q1": {"u1": 1, "u9": 2}}, dp.qrels)
    (dp.source / "qrels").mkdir()
    (dp.source / "queries.jsonl").write_text(json.dumps({"_id": "q1", "text": "question q1"}) + "\n")
    (dp.source / "qrels" / "test.tsv").write_text("query-id\tcorpus-id\tscore\nq1\tu1\t1\nq1\tu9\t2\n")
    dp.index_manifest.parent.mkdir(parents=True, exist_ok=True)
    dp.index_manifest.write_text("{}")
    if llm_lines is not None:
        (dp.source / "qrels" / "llm-fake.tsv").write_text("query-id\tcorpus-id\tscore\n" + llm_lines)
    return dp


def _hand_scores(seen: list):
    """scores_by_qrels over the hand-built SYSTEMS (real nDCG@10 of each qrels set), recording the sets."""
    from rerankeval.experiments.grid import evaluate_run

    def scores(dp, queries, qrels_sets, **kw):
        seen.append(qrels_sets)
        out = {
            name: pd.Series(
                {
                    s: float(evaluate_run(run, qrels, sorted(queries), ["ndcg@10"])["ndcg@10"].mean())
                    for s, run in SYSTEMS.items()
                }
            )
            for name, qrels in qrels_sets.items()
        }
        return validate._frame(out, "ndcg@10")

    return scores


def test_llm_grades_that_reverse_two_systems_give_a_tau_of_one_third_and_never_replace_a_human_grade(
    tmp_path, monkeypatch
):
    # the LLM grades u2 3 (capped at the human top, 2) and u1 0, where a human said 1: that 0 must not count
    dp = _qrels_dataset(tmp_path, "q1\tu2\t3\nq1\tu1\t0\n")
    seen: list = []
    monkeypatch.setattr(validate, "scores_by_qrels", _hand_scores(seen))
    check = validate.qrels_validation(dp)
    human, merged = seen[0]["human"], seen[0]["human+llm"]
    assert human == {"q1": {"u1": 1, "u9": 2}} and merged == {"q1": {"u1": 1, "u9": 2, "u2": 2}}
    t = check.table.set_index("point")
    assert list(t["human"].sort_values(ascending=False).index) == ["A", "B", "C"]
    assert list(t["human+llm"].sort_values(ascending=False).index) == ["B", "A", "C"]
    # 3 pairs of systems: (A, C) and (B, C) concordant, (A, B) discordant: (2 - 1) / 3
    assert check.tau["tau"] == pytest.approx(1 / 3, abs=1e-4) and check.tau["n_pairs"] == 3
    text = check.sentence()
    assert "3 systems (3 pairs" in text and "1 human questions" in text and "1 LLM grades from llm-fake.tsv" in text
    assert "Below .9" in text and check.labels() == ("ndcg@10 with the human qrels", "ndcg@10 with human + LLM qrels")
    written = validate.write_qrels_validation(dp, check)
    saved = json.loads((dp.stage_dir("assess") / "qrels_validation.json").read_text())
    assert saved["tau"]["tau"] == pytest.approx(1 / 3, abs=1e-4) and saved["tau"]["n_systems"] == 3
    assert saved["llm_added"] == 1 and saved["sentence"] == text and not saved["skipped"]
    assert pd.read_csv(written["csv"]).set_index("point").round(6).equals(t.round(6))


def test_without_an_llm_file_the_qrels_comparison_is_skipped_and_says_why(tmp_path, monkeypatch):
    dp = _qrels_dataset(tmp_path, None)
    monkeypatch.setattr(validate, "scores_by_qrels", lambda *a, **k: pytest.fail("searched without LLM grades"))
    stale = dp.stage_dir("assess") / "qrels_validation.csv"
    stale.parent.mkdir(parents=True, exist_ok=True)
    stale.write_text("point,human,human+llm\nA,1,1\n")  # an earlier run's table no longer holds
    check = validate.qrels_validation(dp)
    assert check.skipped and check.table.empty
    assert check.sentence().startswith(
        "Human vs human+LLM qrels: skipped, no LLM grades (qrels/llm-<model>-<hash>.tsv)"
    )
    assert "assess=true" in check.sentence()
    validate.write_qrels_validation(dp, check)
    assert not stale.exists()
    assert json.loads((dp.stage_dir("assess") / "qrels_validation.json").read_text())["skipped"] == check.skipped


def test_the_qrels_comparison_searches_the_human_questions_once_and_scores_them_twice(built, monkeypatch):
    dp, _ = built
    # a relevant unit no system can find (not in the corpus): every system's nDCG on t1 drops under these qrels
    (dp.source / "qrels" / "llm-fake.tsv").write_text("query-id\tcorpus-id\tscore\nt1\tnowhere.pdf#p9\t3\n")
    opened = []

    class Counting(validate.Engine):
        @classmethod
        def open(cls, dp, queries, max_leg_k, *args, **kw):
            opened.append(sorted(queries))
            return super().open(dp, queries, max_leg_k, *args, **kw)

    monkeypatch.setattr(validate, "Engine", Counting)
    check = validate.qrels_validation(dp, settings=load_settings())
    points = [p for p in validate.load_grid("small").points(validate.Point(leg_k=100), pdf=True) if not p.chunk_size]
    assert opened == [["t1", "t2", "t3", "t4"]]  # one search of the human questions for both qrels
    assert len(check.table) == check.tau["n_systems"] == len(points) and check.record["llm_added"] == 1
    assert list(check.table.columns) == ["point", "human", "human+llm"] and not check.skipped
    assert (check.table["human+llm"] < check.table["human"]).all()  # scored with the second qrels, not the first
    assert f"{len(points)} systems" in check.sentence()


def test_llm_grades_of_1_add_no_relevant_unit_and_change_no_system_score(tmp_path, monkeypatch):
    # issue 32 defect 5: a judge that grades every pair 1 ("related, does not answer") must not make them relevant
    dp = _qrels_dataset(tmp_path, "q1\tu2\t1\nq1\tu3\t1\nq1\tu4\t1\n")
    seen: list = []
    monkeypatch.setattr(validate, "scores_by_qrels", _hand_scores(seen))
    check = validate.qrels_validation(dp)
    merged = seen[0]["human+llm"]
    assert {u: g for u, g in merged["q1"].items() if g > 0} == {"u1": 1, "u9": 2} and check.record["llm_added"] == 3
    t = check.table.set_index("point")
    assert (t["human"] == t["human+llm"]).all()
