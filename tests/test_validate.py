"""experiments.validate: the system rankings of a generated set against the human one (Kendall tau)."""

from __future__ import annotations

import json

import pandas as pd
import pytest

from builders import tiny_pdf_dataset
from fakellm import FakeLLM
from rerankeval.core import paths
from rerankeval.core.settings import Settings
from rerankeval.corpus import extract
from rerankeval.experiments import validate
from rerankeval.llm.cache import LLMCache
from rerankeval.questions import draft


@pytest.fixture
def built(tmp_path):
    from rerankeval.index import build as index

    root = tmp_path
    dp = paths.resolve_dataset(tiny_pdf_dataset(root / "human"))
    extract.build_corpus(dp)
    index.build_indexes(dp, progress=False)
    return dp, root


def test_a_set_ranks_systems_exactly_as_itself(built):
    dp, _ = built
    human = validate.human_set(dp)
    check = validate.validate(dp, human, human)
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
        res = draft.run(dp, params, Settings(**{**settings.__dict__, "base_url": f.base_url}),
                        LLMCache(root / "llm"), files=draft.validation_files(dp))
        draft.write(dp, res)
    files = res.files
    assert len(res.new) == 3 and files.queries.is_relative_to(dp.root) and not dp.source_draft_queries.exists()
    assert {p: p.read_bytes() for p in before} == before  # no human file touched
    assert json.loads(dp.corpus_stats.read_text())["queries_source"] == "human"
    check = validate.validate(dp, validate.human_set(dp), validate.draft_set(files.queries, files.qrels))
    assert check.n_queries == {"human": 4, "generated": 3}
    assert isinstance(check.table, pd.DataFrame) and set(check.table.columns) == {"point", "human", "generated"}


def test_tau_of_two_rankings_that_swap_one_pair_is_two_thirds(monkeypatch, tmp_path):
    scores = {"human": pd.Series([0.1, 0.2, 0.3, 0.4], index=list("abcd"), name="ndcg@10"),
              "generated": pd.Series([0.1, 0.2, 0.4, 0.3], index=list("abcd"), name="ndcg@10")}
    monkeypatch.setattr(validate, "system_scores", lambda dp, queries, qrels, **kw: scores[queries["which"]])
    human = ({"which": "human"}, {"which": {"u": 1}})
    gen = ({"which": "generated"}, {"which": {"u": 1}})
    check = validate.validate(None, human, gen)
    # 6 pairs of systems: 5 concordant, 1 discordant
    assert check.tau["tau"] == pytest.approx(4 / 6, abs=1e-4) and check.tau["n_pairs"] == 6
    assert "Below .9" in check.sentence() and list(check.table.point) == list("abcd")
