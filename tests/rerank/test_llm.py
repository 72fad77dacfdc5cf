"""Integration with the real local llama-server (built once, cached): ``pytest -m llm``."""

from __future__ import annotations

import pytest

from rerank_data import rerank_made
from rerankeval.core.settings import Settings, load_settings
from rerankeval.llm import server as llm_server
from rerankeval.llm.cache import LLMCache
from rerankeval.rerank.config import Params

pytestmark = pytest.mark.llm

QUERY = "Which file holds the configuration of the alpha service?"
PASSAGES = {
    "p1": "Beta logs every transaction to /var/log/beta/history.log so administrators can audit upgrades.",
    "p2": "The alpha service reads its configuration from /etc/alpha/alpha.conf; edit it and restart alpha.",
    "p3": "Gamma uses a pool of worker threads set by the GAMMA_WORKERS environment variable.",
    "p4": "Alpha keeps regenerable data in /var/cache/alpha, which can be deleted at any time.",
}


@pytest.fixture(scope="module")
def endpoint():
    with llm_server.ensure_endpoint(load_settings()) as env:
        yield env if isinstance(env, Settings) else load_settings(env)


@pytest.mark.parametrize(
    "mode, extra",
    [
        ("listwise", {}),
        ("pointwise", {"batch_size": 4}),
        ("yesno", {"yesno_json": True}),
        ("yesno", {"yesno_json": False}),
    ],
)
def test_real_model_reranks_with_json_schema(endpoint, tmp_path, mode, extra):
    fused = {"q1": {d: 1.0 / (i + 1) for i, d in enumerate(PASSAGES)}}
    params = Params(mode=mode, alpha=1.0, pool_k=4, **{"yesno_json": True, **extra})

    def run():
        return rerank_made(
            tmp_path / "ds", fused, {"q1": QUERY}, {"q1": PASSAGES}, params, endpoint, LLMCache(tmp_path / "llm")
        )

    res = run()
    row = res.ledger.iloc[0]
    assert sorted(res.run["q1"]) == sorted(PASSAGES)
    assert row.status in ("ok", "repaired"), row.to_dict()
    assert row.requests >= 1 and row.prompt_tokens > 0
    assert row.response_format == ("none" if extra.get("yesno_json") is False else "json_schema")
    assert row.model == "qwen2.5-coder-0.5b-instruct"
    if mode == "yesno":
        s = res.candidates.set_index("docid").llm_score
        assert s.notna().all() and ((s > 0) & (s < 1)).all()  # real probabilities, not 0/1 answers
    again = run()
    assert again.run == res.run and again.ledger.iloc[0].requests == 0


def test_real_model_answers_setwise_with_a_label(endpoint, tmp_path):
    """Setwise (Zhuang et al. 2024) on the real model: each call's reply reads as a label of the set (JSON schema),
    the pool comes back as a permutation, and a second run is served from the cache."""
    from rerankeval.llm.call import CallStats
    from rerankeval.rerank.config import Candidate
    from rerankeval.rerank.reranker import Reranker

    pool = [Candidate(d, t, 1.0 / (i + 1), i) for i, (d, t) in enumerate(PASSAGES.items())]
    cfg = Params(mode="setwise", alpha=1.0, set_size=4).config()
    with Reranker(cfg, endpoint, cache=LLMCache(tmp_path)) as rr:
        stats = CallStats()
        scores, counts = rr.calls.scores(QUERY, pool, [c.text for c in pool], stats)
        assert stats.calls == 3 and stats.failed == 0 and stats.requests >= 3  # heap sort of 4 in sets of 4
        assert sorted(scores) == [0.0, 1 / 3, 2 / 3, 1.0]
        again = CallStats()
        assert rr.calls.scores(QUERY, pool, [c.text for c in pool], again)[0] == scores and again.requests == 0
