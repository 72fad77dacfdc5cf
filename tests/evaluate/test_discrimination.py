"""The reranker's own quality (issue 22 item 1): ROC AUC of an LLM's scores, relevant vs non-relevant candidates,
per query and macro-averaged with a bootstrap CI, on fake scorers whose AUC is known in closed form (perfect 1,
inverted 0, random ~0.5), cross-checked against sklearn.metrics.roc_auc_score and scipy's Mann-Whitney U; the
verdict's wording for each; undefined cases (NaN scores, one score for the whole pool, nothing judged) said."""

from __future__ import annotations

import json
import math

import numpy as np
import pandas as pd
import pytest
from scipy.stats import mannwhitneyu
from sklearn.metrics import roc_auc_score

from handmade import dataset_in
from rerankeval.core.ioutil import atomic_write_json
from rerankeval.evaluate import discrimination as D
from rerankeval.evaluate import stats

MODEL = "fake-scorer-7b"
N_REL, N_NON = 3, 5


def _pool(n_queries: int, scorer, unjudged: int = 0, seed: int = 0):
    """``n_queries`` queries of N_REL relevant (grades 1, 2) + N_NON judged non-relevant (grade 0) + ``unjudged``
    unjudged candidates, scored by ``scorer(relevant: bool, i, rng)``; returns (candidates, qrels)."""
    rng = np.random.default_rng(seed)
    rows, qrels = [], {}
    for qi in range(n_queries):
        q = f"q{qi:02d}"
        grades = [1 + i % 2 for i in range(N_REL)] + [0] * N_NON + [None] * unjudged
        qrels[q] = {}
        for i, g in enumerate(grades):
            d = f"{q}-d{i}"
            if g is not None:
                qrels[q][d] = g
            rows.append(
                {
                    "qid": q,
                    "pass": "main",
                    "docid": d,
                    "fused_rank": i + 1,
                    "presented_rank": i + 1,
                    "llm_score": scorer(bool(g), i, rng),
                    "final_rank": i + 1,
                }
            )
    return pd.DataFrame(rows), qrels


def _perfect(rel, i, rng):
    return 0.9 - 0.01 * i if rel else 0.2 - 0.01 * i


def _inverted(rel, i, rng):
    return 1.0 - _perfect(rel, i, rng)


def _random(rel, i, rng):
    return float(rng.uniform())


def test_closed_form_with_ties_matches_sklearn_and_scipy():
    # rel [0.8, 0.5] vs non [0.5, 0.2, 0.9]: pairs won 1+1+0 + 0.5+1+0 = 3.5 of 6
    rel, non = np.array([0.8, 0.5]), np.array([0.5, 0.2, 0.9])
    assert D.auc_mann_whitney(rel, non) == pytest.approx(3.5 / 6, abs=1e-15)
    assert roc_auc_score([1, 1, 0, 0, 0], [*rel, *non]) == pytest.approx(3.5 / 6, abs=1e-15)
    assert D.auc_mann_whitney(np.array([0.3, 0.3]), np.array([0.3])) == 0.5  # all tied: 1/2 each
    assert math.isnan(D.auc_mann_whitney(rel, np.array([])))


def test_a_perfect_scorer_has_auc_1_and_is_called_informative():
    cands, qrels = _pool(8, _perfect)
    d = D.measure(cands, qrels, model=MODEL, n_boot=500)
    assert (d.auc, d.ci_low, d.ci_high) == (1.0, 1.0, 1.0)
    assert d.status == D.INFORMATIVE and d.n_defined == 8 and d.negatives == "judged"
    assert (d.n_relevant, d.n_non_relevant, d.n_unjudged, d.n_one_class) == (8 * N_REL, 8 * N_NON, 0, 0)
    s = D.sentence(d)
    assert f"({MODEL})" in s and "better than chance" in s and "ROC AUC 1.000 (95% CI 1.000\u20131.000" in s
    assert "no reranking gain" not in s and "OPENAI_BASE_URL" not in s


def test_an_inverted_scorer_has_auc_0_and_is_called_inverted():
    cands, qrels = _pool(8, _inverted)
    d = D.measure(cands, qrels, model=MODEL, n_boot=500)
    assert (d.auc, d.ci_low, d.ci_high) == (0.0, 0.0, 0.0) and d.status == D.INVERTED
    s = D.sentence(d)
    assert "scores non-relevant candidates above relevant ones" in s and "inverted" in s and "can only hurt" in s
    assert "right way round" in s and "LOCAL_MODEL=qwen2.5-coder-1.5b" in s


def test_a_random_scorer_is_near_chance_its_ci_includes_half_and_the_verdict_says_no_gain():
    cands, qrels = _pool(40, _random, seed=3)
    d = D.measure(cands, qrels, model=MODEL, n_boot=2000, seed=1)
    assert abs(d.auc - 0.5) < 0.1 and d.ci_low < 0.5 < d.ci_high and d.status == D.UNINFORMATIVE
    s = D.sentence(d)
    assert f"({MODEL}) cannot tell relevant from non-relevant candidates" in s and "the CI includes 0.5" in s
    assert "its judgments are uninformative and no reranking gain can be expected from it" in s
    assert "a stronger model behind OPENAI_BASE_URL" in s and "LOCAL_MODEL=qwen2.5-coder-1.5b" in s
    # reference: the per-query AUCs are sklearn's and scipy's; the CI is stats.bootstrap_ci of them
    groups = [(g.llm_score, g.docid.map(qrels[q]) > 0) for q, g in cands.groupby("qid")]
    ref = [roc_auc_score(rel, s) for s, rel in groups]
    u = [mannwhitneyu(s[rel], s[~rel]).statistic / (N_REL * N_NON) for s, rel in groups]
    assert list(d.per_query.auc) == pytest.approx(ref, abs=1e-12)
    assert list(d.per_query.auc) == pytest.approx(u, abs=1e-12)
    assert (d.auc, d.ci_low, d.ci_high) == pytest.approx(stats.bootstrap_ci(ref, n_boot=2000, seed=1), abs=1e-12)
    assert d.verified_against.startswith("sklearn ") and d.max_abs_diff < 1e-12


def test_unjudged_unscored_and_one_class_queries_are_left_out_and_counted():
    cands, qrels = _pool(5, _perfect, unjudged=2)
    cands.loc[cands.index[:2], "llm_score"] = math.nan  # q00's first two candidates: a fallback, no score
    qrels["q04"] = {d: 1 for d in qrels["q04"]}  # q04: every judged candidate relevant
    d = D.measure(cands, qrels, model=MODEL, n_boot=200)
    assert (d.n_candidates, d.n_unscored, d.n_unjudged) == (5 * 10, 2, 10)
    assert (d.n_queries, d.n_defined, d.n_one_class) == (5, 4, 1) and d.auc == 1.0
    pq = d.per_query.set_index("qid")
    assert pq.at["q00", "n_relevant"] == N_REL - 2 and math.isnan(pq.at["q04", "auc"])
    cov = D.coverage(d)
    assert "10 unjudged left out, 2 without a score left out" in cov and "1 of 5 queries had one class only" in cov


def test_qrels_without_any_judged_non_relevant_count_the_unjudged_as_non_relevant_and_say_so():
    cands, qrels = _pool(4, _perfect, unjudged=0)
    positives = {q: {d: g for d, g in j.items() if g > 0} for q, j in qrels.items()}  # like debian-manuals
    d = D.measure(cands, positives, n_boot=200)
    assert d.negatives == "unjudged" and d.n_non_relevant == 4 * N_NON and d.auc == 1.0
    assert "counted as non-relevant" in D.coverage(d)
    strict = D.measure(cands, positives, unjudged="leave_out", n_boot=200)
    assert strict.status == D.UNDEFINED and "no query has both" in strict.reason and math.isnan(strict.auc)
    with pytest.raises(ValueError, match="unjudged must be"):
        D.measure(cands, positives, unjudged="zero")


@pytest.mark.parametrize(
    "case, reason, words",
    [
        ("nan", "none of the 32 candidates has a score", "could not be measured (ROC AUC undefined)"),
        ("constant", "gave all 32 judged candidates the same score (0.7)", "no reranking gain can be expected"),
        ("unjudged", "none of the 32 scored candidates is judged", "judge more of its candidates"),
        ("empty", "the pool has no candidate", "could not be measured"),
        ("few", "only 2 queries have both relevant and non-relevant", "could not be measured"),
    ],
)
def test_undefined_auc_is_said_not_crashed(case, reason, words):
    cands, qrels = _pool(4, _perfect)
    if case == "nan":
        cands["llm_score"] = math.nan
    elif case == "constant":
        cands["llm_score"] = 0.7
    elif case == "unjudged":
        qrels = {}
    elif case == "empty":
        cands = cands.iloc[:0]
    else:
        cands = cands[cands.qid.isin(["q00", "q01"])]
    d = D.measure(cands, qrels, model=MODEL, n_boot=200)
    assert d.status == D.UNDEFINED and reason in d.reason and math.isnan(d.ci_low)
    s = D.sentence(d)
    assert f"({MODEL})" in s and words in s
    assert math.isnan(d.auc) if case != "few" else d.auc == 1.0
    json.dumps(d.to_dict(), allow_nan=False)  # NaN written as null


def test_a_query_with_one_score_for_all_counts_half_by_the_tie_rule():
    cands, qrels = _pool(4, _perfect)
    cands.loc[cands.qid == "q00", "llm_score"] = 0.5
    d = D.measure(cands, qrels, n_boot=200)
    assert d.n_constant == 1 and d.auc == pytest.approx((0.5 + 3 * 1.0) / 4)
    assert "1 had one score for every candidate (AUC 0.5 by the tie rule)" in D.coverage(d)


def test_rank_shift_closed_form():
    cands = pd.DataFrame(
        {
            "qid": ["q"] * 4,
            "docid": list("abcd"),
            "llm_score": [0.1, 0.9, 0.8, 0.2],
            "fused_rank": [1, 2, 3, 4],
            "final_rank": [3, 1, 2, 4],
        }
    )
    d = D.measure(cands, {"q": {"a": 1, "b": 1, "c": 0, "d": 0}}, n_boot=100)
    rel, non = d.shift["relevant"], d.shift["non_relevant"]
    assert rel == {"n": 2, "mean_abs_change": 1.5, "up": 0.5, "down": 0.5, "same": 0.0}  # a 1->3, b 2->1
    assert non == {"n": 2, "mean_abs_change": 0.5, "up": 0.5, "down": 0.0, "same": 0.5}  # c 3->2, d 4->4
    assert "2 relevant: 50% moved up, 50% down, mean |rank change| 1.50" in D.shift_sentence(d)


def test_round_trip_through_json_gives_the_same_sentence():
    cands, qrels = _pool(40, _random, seed=3)
    d = D.measure(cands, qrels, model=MODEL, n_boot=300)
    back = json.loads(json.dumps(d.to_dict(), allow_nan=False))
    assert D.sentence(back) == D.sentence(d) and D.coverage(back) == D.coverage(d)
    assert D.sentence(None) is None and D.sentence({}) is None


def test_the_reranker_pool_is_read_from_stage_04s_files(tmp_path, monkeypatch):
    dp = dataset_in(tmp_path, monkeypatch)
    cands, qrels = _pool(6, _perfect)
    assert D.reranker(dp, qrels) is None  # stage 04 has not run
    dp.rerank_dir.mkdir(parents=True)
    cands.to_csv(dp.rerank_candidates, index=False)
    atomic_write_json(dp.rerank_summary, {"model": MODEL})
    d = D.reranker(dp, qrels, ["q00", "q01", "q02"], n_boot=100)
    assert d.model == MODEL and d.n_queries == 3 and d.auc == 1.0
    assert D.write(dp, d)["discrimination"].read_text().startswith("qid,n_relevant,n_non_relevant,auc")
    cands.drop(columns="llm_score").to_csv(dp.rerank_candidates, index=False)
    broken = D.reranker(dp, qrels)  # said, and the analysis goes on
    assert broken.status == D.UNDEFINED and "rerank/candidates.csv lacks the column(s) ['llm_score']" in broken.reason
    assert "re-run 04-rerank" in D.sentence(broken) and f"({MODEL}) could not be measured" in D.sentence(broken)
    dp.rerank_candidates.write_bytes(b"\xff\xfe\x00garbage")
    assert "cannot be read" in D.reranker(dp, qrels).reason


def test_the_first_stages_own_auc_stands_beside_the_models_on_the_same_candidates():
    """The pool's fused ranks put the relevant candidates first (first-stage AUC 1): a random model is below it and
    the sentence says blending is unlikely to help; with the fused ranks reversed (AUC 0) a perfect model is above."""
    cands, qrels = _pool(40, _random, seed=3)
    d = D.measure(cands, qrels, model=MODEL, n_boot=2000, seed=1)
    assert (d.first_stage_auc, d.first_stage_ci_low, d.first_stage_ci_high) == (1.0, 1.0, 1.0)
    assert d.vs_first_stage == pytest.approx(d.auc - 1.0) and d.vs_first_stage_ci_high < 0
    s = D.sentence(d)
    assert "first stage's own order of the same candidates (their fused rank) separates them at ROC AUC 1.000" in s
    assert "the model is below it" in s and "unlikely to raise the ranking" in s
    assert D.sentence(D.Discrimination.from_dict(json.loads(json.dumps(d.to_dict())))) == s  # kept in the summary

    good, qrels = _pool(8, _perfect)
    good["fused_rank"] = N_REL + N_NON + 1 - good["fused_rank"]  # the first stage puts every relevant one last
    g = D.measure(good, qrels, model=MODEL, n_boot=500)
    assert (g.auc, g.first_stage_auc, g.vs_first_stage) == (1.0, 0.0, 1.0)
    assert "the model is above it (+1.000, 95% CI +1.000 to +1.000)" in D.sentence(g)

    same, qrels = _pool(8, _perfect)
    assert "not distinguishable from it" in D.sentence(D.measure(same, qrels, model=MODEL, n_boot=500))
    unranked = D.measure(same.drop(columns="fused_rank"), qrels, model=MODEL, n_boot=500)
    assert math.isnan(unranked.first_stage_auc) and "first stage" not in D.sentence(unranked)
