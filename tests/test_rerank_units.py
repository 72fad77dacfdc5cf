"""Pure functions of the rerank package: repair, parsing, windows, blending, tau, yes/no probability."""

from __future__ import annotations

import math

import pytest

from rerankeval import rerank
from rerankeval.llm import schemas
from rerankeval.llm.client import Reply
from rerankeval.rerank import prompts
from rerankeval.rerank.core import minmax


def test_repair_order_rules():
    order, c = rerank.repair_order([2, "x", 2, 7, 1.5, True, 1], 3)
    assert order == [1, 0, 2]
    assert (c.n_invalid, c.n_duplicate, c.n_missing) == (4, 1, 1)


def test_repair_scores_and_order():
    vals, c = rerank.repair_scores([(1, 5), (3, 5), (3, 1), (4, 2), (2, -1)], 3)
    assert vals == [5.0, None, 5.0] and (c.n_invalid, c.n_duplicate, c.n_missing) == (2, 1, 1)
    assert rerank.order_by_scores(vals) == [0, 1, 2]  # tie 0/2 in input order, 1 back at its place
    assert rerank.order_by_scores([1.0, None, 3.0, None]) == [2, 1, 0, 3]


def test_parse_salvage_and_errors():
    obj, salvaged = rerank.parse('{"ranking": [3, 1, 2]}', schemas.ListwiseReply, "ranking")
    assert obj.ranking == [3, 1, 2] and not salvaged
    obj, salvaged = rerank.parse('{"ranking": [3, 1, 1', schemas.ListwiseReply, "ranking")
    assert obj.ranking == [3, 1] and salvaged
    obj, _ = rerank.parse('{"scores": [{"id": 1, "score": 4}, {"id": 2, "sc', schemas.PointwiseBatchReply, "scores")
    assert [(i.id, i.score) for i in obj.scores] == [(1, 4)]
    for bad, cls in [
        ("", "EmptyContent"),
        ("no", "InvalidJSON"),
        ('{"x": 1}', "WrongShape"),
        ("[1,2]", "WrongShape"),
    ]:
        with pytest.raises(rerank.Unusable) as e:
            rerank.parse(bad, schemas.ListwiseReply, "ranking")
        assert e.value.error_class == cls


def test_sliding_windows():
    assert rerank.sliding_windows(20, 20, 10) == [(0, 20)]
    assert rerank.sliding_windows(5, 20, 10) == [(0, 5)]
    assert rerank.sliding_windows(30, 20, 10) == [(10, 30), (0, 20)]
    assert rerank.sliding_windows(25, 10, 5) == [(15, 25), (10, 20), (5, 15), (0, 10)]
    assert rerank.sliding_windows(0, 10, 5) == []


def test_kendall_tau_and_minmax():
    a = ["a", "b", "c", "d"]
    assert rerank.kendall_tau(a, a) == 1.0
    assert rerank.kendall_tau(a, a[::-1]) == -1.0
    assert rerank.kendall_tau(a, ["b", "a", "c", "d"]) == pytest.approx(4 / 6)
    assert minmax([2.0, 4.0, 3.0]) == [0.0, 1.0, 0.5] and minmax([1.0, 1.0]) == [0.0, 0.0]


def _lp(tokens, top):
    return [
        {"token": t, "logprob": 0.0, "top": (top if t.strip(' "') in ("yes", "no") else [[t, 0.0]])} for t in tokens
    ]


def test_yes_prob_finds_answer_token_after_json_prefix():
    top = [["yes", math.log(0.3)], ["no", math.log(0.6)], ["Yes", math.log(0.1)]]
    r = Reply(content='{"relevant": "no"}', logprobs=_lp(['{"', "relevant", '":', ' "', "no", '"}'], top))
    assert rerank.yes_prob(r, True) == pytest.approx(0.4)
    r = Reply(content='{"relevant": "yes"}', logprobs=None)
    assert rerank.yes_prob(r, True) == 1.0
    assert rerank.yes_prob(Reply(content="No."), False) == 0.0
    with pytest.raises(rerank.Unusable):
        rerank.yes_prob(Reply(content="maybe"), False)


def test_blend_alpha(tmp_path):
    # alpha 0 keeps the fused order whatever the LLM says; alpha 1 is the LLM order
    from fakellm import FakeLLM, make_inputs

    fused, queries, texts = make_inputs(n_queries=2, n_docs=10, gold=(7,))
    with FakeLLM() as f:
        s = rerank.Settings(base_url=f.base_url, api_key="k", model="m", timeout=2, max_retries=0)
        out = {}
        for a in (0.0, 0.5, 1.0):
            cfg = rerank.RerankConfig(mode="pointwise", alpha=a)
            res = rerank.rerank_run(
                fused,
                queries,
                texts,
                cfg,
                pool_k=10,
                settings=s,
                cache=rerank.LLMCache(tmp_path),
                progress=False,
            )
            out[a] = list(res.run["q0000"])
    assert out[0.0] == list(fused["q0000"])
    assert out[1.0][0] == "d07"
    assert out[0.5][0] == "d07"  # .5 * 1 + .5 * minmax(fused at rank 8) ~ .6 beats d00: .5 * 0 + .5 * 1
    assert sorted(out[0.5]) == sorted(fused["q0000"])


def test_schemas_are_strict():
    s = schemas.json_schema(schemas.listwise_model(3))
    assert s["additionalProperties"] is False and s["required"] == ["ranking"]
    assert s["properties"]["ranking"]["items"]["enum"] == [1, 2, 3]
    p = schemas.json_schema(schemas.pointwise_model(2))
    assert "$defs" in p and schemas.schema_hash(schemas.pointwise_model(2)) != schemas.schema_hash(
        schemas.pointwise_model(3)
    )
    assert schemas.json_schema(schemas.YesNoStrict)["properties"]["relevant"]["enum"] == ["yes", "no"]


def test_prompts_clip_and_order():
    assert prompts.clip("a  b\n c", 0) == "a b c"
    assert prompts.clip("word " * 50, 20).endswith(" ...") and len(prompts.clip("word " * 50, 20)) <= 24
    msgs = prompts.yesno("Q?", "P.")
    assert msgs[1]["content"].index("Q?") < msgs[1]["content"].index("P.")  # query first: prefix caching
    assert "[2] y" in prompts.listwise("q", ["x", "y"])[1]["content"]


def test_config_validation():
    with pytest.raises(ValueError):
        rerank.RerankConfig(mode="pairwise")
    with pytest.raises(ValueError):
        rerank.RerankConfig(alpha=1.5)
    with pytest.raises(ValueError):
        rerank.RerankConfig(window=10, step=11)
