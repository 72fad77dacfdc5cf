"""Pure functions of the rerank package: repair, parsing, windows, blending, tau, yes/no probability."""

from __future__ import annotations

import math
from dataclasses import replace

import pytest

from rerank_data import stage03
from rerankeval import rerank
from rerankeval.core.settings import Settings
from rerankeval.llm import schemas
from rerankeval.llm.cache import LLMCache
from rerankeval.llm.client import Reply
from rerankeval.llm.repair import Unusable, order_by_scores, parse, repair_order, repair_scores
from rerankeval.rerank import prompts
from rerankeval.rerank.config import Params, RerankConfig
from rerankeval.rerank.scores import kendall_tau, minmax, sliding_windows, yes_prob


def test_repair_order_rules():
    order, c = repair_order([2, "x", 2, 7, 1.5, True, 1], 3)
    assert order == [1, 0, 2]
    assert (c.n_invalid, c.n_duplicate, c.n_missing) == (4, 1, 1)


def test_repair_scores_and_order():
    vals, c = repair_scores([(1, 5), (3, 5), (3, 1), (4, 2), (2, -1)], 3)
    assert vals == [5.0, None, 5.0] and (c.n_invalid, c.n_duplicate, c.n_missing) == (2, 1, 1)
    assert order_by_scores(vals) == [0, 1, 2]  # tie 0/2 in input order, 1 back at its place
    assert order_by_scores([1.0, None, 3.0, None]) == [2, 1, 0, 3]


def test_parse_salvage_and_errors():
    obj, salvaged = parse('{"ranking": [3, 1, 2]}', schemas.ListwiseReply, "ranking")
    assert obj.ranking == [3, 1, 2] and not salvaged
    obj, salvaged = parse('{"ranking": [3, 1, 1', schemas.ListwiseReply, "ranking")
    assert obj.ranking == [3, 1] and salvaged
    obj, _ = parse('{"scores": [{"id": 1, "score": 4}, {"id": 2, "sc', schemas.PointwiseBatchReply, "scores")
    assert [(i.id, i.score) for i in obj.scores] == [(1, 4)]
    for bad, cls in [
        ("", "EmptyContent"),
        ("no", "InvalidJSON"),
        ('{"x": 1}', "WrongShape"),
        ("[1,2]", "WrongShape"),
    ]:
        with pytest.raises(Unusable) as e:
            parse(bad, schemas.ListwiseReply, "ranking")
        assert e.value.error_class == cls


def test_sliding_windows():
    assert sliding_windows(20, 20, 10) == [(0, 20)]
    assert sliding_windows(5, 20, 10) == [(0, 5)]
    assert sliding_windows(30, 20, 10) == [(10, 30), (0, 20)]
    assert sliding_windows(25, 10, 5) == [(15, 25), (10, 20), (5, 15), (0, 10)]
    assert sliding_windows(0, 10, 5) == []


def test_kendall_tau_and_minmax():
    a = ["a", "b", "c", "d"]
    assert kendall_tau(a, a) == 1.0
    assert kendall_tau(a, a[::-1]) == -1.0
    assert kendall_tau(a, ["b", "a", "c", "d"]) == pytest.approx(4 / 6)
    assert minmax([2.0, 4.0, 3.0]) == [0.0, 1.0, 0.5] and minmax([1.0, 1.0]) == [0.0, 0.0]


def _lp(tokens, top):
    return [
        {"token": t, "logprob": 0.0, "top": (top if t.strip(' "') in ("yes", "no") else [[t, 0.0]])} for t in tokens
    ]


def test_yes_prob_finds_answer_token_after_json_prefix():
    top = [["yes", math.log(0.3)], ["no", math.log(0.6)], ["Yes", math.log(0.1)]]
    r = Reply(content='{"relevant": "no"}', logprobs=_lp(['{"', "relevant", '":', ' "', "no", '"}'], top))
    assert yes_prob(r, True) == pytest.approx(0.4)
    r = Reply(content='{"relevant": "yes"}', logprobs=None)
    assert yes_prob(r, True) == 1.0
    assert yes_prob(Reply(content="No."), False) == 0.0
    with pytest.raises(Unusable):
        yes_prob(Reply(content="maybe"), False)


def test_blend_alpha(tmp_path, monkeypatch):
    # alpha 0 keeps the fused order whatever the LLM says; alpha 1 is the LLM order
    from fakellm import FakeLLM, make_inputs

    fused, queries, texts = make_inputs(n_queries=2, n_docs=10, gold=(7,))
    dp = stage03(tmp_path / "ds", fused, queries, texts)
    monkeypatch.setenv("RERANKEVAL_CACHE", str(tmp_path))
    with FakeLLM() as f:
        s = Settings(base_url=f.base_url, api_key="k", model="m", timeout=2, max_retries=0)
        out = {}
        for a in (0.0, 0.5, 1.0):
            res = rerank.run(dp, Params(mode="pointwise", alpha=a, pool_k=10), s, progress=False)
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
        Params(mode="pairwise")
    with pytest.raises(ValueError):
        Params(alpha=1.5)
    with pytest.raises(ValueError):
        Params(window=10, step=11)
    with pytest.raises(ValueError, match="pool_k"):
        Params(pool_k=0)
    with pytest.raises(ValueError, match="stability"):
        Params(stability="sideways")
    with pytest.raises(TypeError):  # the reranker's view has no defaults of its own: it is built from Params
        RerankConfig(mode="yesno")


# --------------------------------------------------------------------------- setwise (Zhuang et al., SIGIR 2024)
@pytest.mark.parametrize("n, children", [(1, 3), (2, 1), (5, 3), (10, 3), (13, 2), (20, 4), (9, 9)])
def test_setwise_heapsort_with_a_perfect_judge_sorts_the_pool(n, children):
    import random

    from rerankeval.rerank.scores import setwise_heapsort

    rel = list(range(n))
    random.Random(n).shuffle(rel)  # hidden relevance of each item
    sets: list[list[int]] = []

    def best(s):
        sets.append(s)
        assert 2 <= len(s) <= children + 1  # a node and at most `children` children
        return max(range(len(s)), key=lambda j: rel[s[j]])

    assert setwise_heapsort(list(range(n)), children, 0, best) == sorted(range(n), key=lambda i: -rel[i])
    assert len(sets) <= n // children + 1 + (n - 1) * max(1, math.ceil(math.log(max(n, 2), children + 1)))
    top3 = setwise_heapsort(list(range(n)), children, 3, best)  # only the top 3 settled
    assert top3[:3] == sorted(range(n), key=lambda i: -rel[i])[:3] and sorted(top3) == list(range(n))


def _llm_rankers_heapsort(arr, num_child, k, compare):
    """A literal port of ielab/llm-rankers' SetwiseLlmRanker.heapify / heapSort (Zhuang et al.'s code), the
    reference: recursive, ``compare(docs)`` returns the index of the best."""

    def heapify(arr, n, i):
        if num_child * i + 1 < n:
            docs = [arr[i]] + arr[num_child * i + 1 : min((num_child * (i + 1) + 1), n)]
            inds = [i] + list(range(num_child * i + 1, min((num_child * (i + 1) + 1), n)))
            largest = inds[compare(docs)]
            if largest != i:
                arr[i], arr[largest] = arr[largest], arr[i]
                heapify(arr, n, largest)

    n = len(arr)
    ranked = 0
    for i in range(n // num_child, -1, -1):
        heapify(arr, n, i)
    for i in range(n - 1, 0, -1):
        arr[i], arr[0] = arr[0], arr[i]
        ranked += 1
        if ranked == k:
            break
        heapify(arr, i, 0)
    return list(reversed(arr))


@pytest.mark.parametrize(
    "n, children, k, seed", [(10, 3, 10, 0), (10, 3, 10, 1), (17, 2, 5, 2), (8, 4, 3, 3), (20, 3, 20, 4), (6, 1, 6, 5)]
)
def test_setwise_heapsort_asks_the_same_sets_as_the_authors_code(n, children, k, seed):
    import random

    from rerankeval.rerank.scores import setwise_heapsort

    rng = random.Random(seed)
    rel = [rng.random() for _ in range(n)]
    ours, ref = [], []

    def judge(log):
        return lambda s: (log.append(list(s)), max(range(len(s)), key=lambda j: rel[s[j]]))[1]

    items = list(range(n))
    rng.shuffle(items)
    assert setwise_heapsort(items, children, k, judge(ours)) == _llm_rankers_heapsort(
        list(items), children, k, judge(ref)
    )
    assert ours == ref


def test_setwise_heapsort_call_count_closed_form():
    """Ten items already in order, set size 4: heapify asks nodes 2, 1, 0 (children 7-9, 4-6, 1-3; no swap); the
    first extraction moves item 9 to the root and sifts it down through nodes 0 and 1 (two calls)."""
    from rerankeval.rerank.scores import setwise_heapsort

    sets = []
    order = setwise_heapsort(list(range(10)), 3, 0, lambda s: (sets.append(list(s)), s.index(min(s)))[1])
    assert order == list(range(10))
    assert sets[:5] == [[2, 7, 8, 9], [1, 4, 5, 6], [0, 1, 2, 3], [9, 1, 2, 3], [9, 4, 5, 6]]
    assert len(sets) == 15  # the count the estimate of a pool of 10 gives below
    never = setwise_heapsort(list(range(10)), 3, 0, lambda s: 0)  # every call failed: the nodes stay
    assert sorted(never) == list(range(10))


@pytest.mark.parametrize(
    "content, m, idx, repaired",
    [
        ('{"most_relevant": "B"}', 4, 1, 0),
        ('{"most_relevant": "Passage C"}', 4, 2, 1),
        ('{"most_relevant": "c"}', 4, 2, 1),
        ('{"most_relevant": 2}', 4, 1, 1),
        ("D", 4, 3, 1),
        ("Passage [A].", 3, 0, 1),
    ],
)
def test_setwise_reply_is_read_and_wrapped_labels_repaired(content, m, idx, repaired):
    from rerankeval.rerank.modes import read_choice

    got, counts = read_choice(content, m)
    assert (got, counts.n_invalid) == (idx, repaired)


@pytest.mark.parametrize(
    "content, m",
    [
        ('{"most_relevant": "E"}', 4),
        ("I think B is best", 4),
        ("", 3),
        ('{"most_relevant": "5"}', 4),
        ('{"best": "A"}', 2),
    ],
)
def test_setwise_reply_without_a_valid_label_is_unusable(content, m):
    from rerankeval.llm.repair import Unusable
    from rerankeval.rerank.modes import read_choice

    with pytest.raises(Unusable):
        read_choice(content, m)


def test_setwise_prompt_schema_and_config():
    from rerankeval.rerank.modes import setwise_model

    msgs = prompts.setwise("Q?", ["x", "y", "z"])
    user = msgs[1]["content"]
    assert user.index("Q?") < user.index("Passage A: x") < user.index("Passage B: y") < user.index("Passage C: z")
    assert "(A, B, C)" in user and '{"most_relevant": "<label>"}' in user
    with pytest.raises(ValueError, match="2 to 10 passages"):
        prompts.setwise("q", ["only one"])
    s = schemas.json_schema(setwise_model(3))
    assert s["additionalProperties"] is False and s["properties"]["most_relevant"]["enum"] == ["A", "B", "C"]
    assert Params(mode="setwise").config().set_size == 4 and Params().config().mode == "yesno"
    for bad in ({"set_size": 1}, {"set_size": 11}, {"setwise_k": -1}):
        with pytest.raises(ValueError, match="set_size"):
            Params(mode="setwise", **bad)


def _setwise_rule(bad: set[int] = frozenset()):
    """A fakellm rule answering setwise prompts: the label of the first GOLD passage (else A); prose for the
    request numbers in ``bad``."""
    import json
    import re

    def rule(n, body):
        if n in bad:
            return {"content": "I cannot decide."}
        user = body["messages"][-1]["content"]
        labels = re.findall(r"^Passage ([A-J]): (.*)$", user, re.M)
        pick = next((lab for lab, text in labels if "GOLD" in text), "A")
        return {"content": json.dumps({"most_relevant": pick})}

    return rule


def _setwise_reranker(tmp_path, f, **cfg):
    from rerankeval.rerank.reranker import Reranker

    s = Settings(base_url=f.base_url, api_key="test-key-not-a-secret-0001", model="m", timeout=2, max_retries=0)
    config = replace(Params(mode="setwise", alpha=1.0, **cfg).config(), content_retries=0)
    return Reranker(config, s, cache=LLMCache(tmp_path / "llm"))


def test_setwise_mode_calls_the_cached_llm_and_puts_gold_first(tmp_path):
    from fakellm import FakeLLM, make_inputs
    from rerankeval.llm.call import CallStats
    from rerankeval.rerank.config import Candidate

    fused, queries, texts = make_inputs(n_queries=1, n_docs=10, gold=(7,))
    pool = [Candidate(d, texts["q0000"][d], s, i) for i, (d, s) in enumerate(fused["q0000"].items())]
    plain = [c.text for c in pool]
    with FakeLLM(rule=_setwise_rule()) as f, _setwise_reranker(tmp_path, f) as rr:
        plan = rr.estimate(queries, [("q0000", "main", pool)])  # cold: as if the model agreed with the fused order
        stats = CallStats()
        scores, counts = rr.calls.scores("query q0000", pool, plain, stats)
        assert scores[7] == 1.0 and sorted(scores) == [i / 9 for i in range(10)] and not counts.repaired
        assert stats.calls == f.count == stats.requests and stats.failed == 0
        assert plan.calls == 15 and plan.fresh_calls == 15  # the closed-form count above (fused order agreed)
        sent = [body["response_format"]["json_schema"]["name"] for _, path, body in f.requests if "chat" in path]
        assert set(sent) == {"setwise_choice"}
        again = CallStats()
        assert rr.calls.scores("query q0000", pool, plain, again)[0] == scores and again.requests == 0  # all cached
        warm = rr.estimate(queries, [("q0000", "main", pool)])
        assert warm.calls == stats.calls and warm.fresh_calls == 0  # the estimate follows the cached replies


def test_setwise_failed_calls_keep_the_node_and_all_failed_fall_back(tmp_path):
    from fakellm import FakeLLM, make_inputs
    from rerankeval.llm.call import CallStats
    from rerankeval.rerank.config import Candidate

    fused, _, texts = make_inputs(n_queries=1, n_docs=6, gold=(4,))
    pool = [Candidate(d, texts["q0000"][d], s, i) for i, (d, s) in enumerate(fused["q0000"].items())]
    plain = [c.text for c in pool]
    with FakeLLM(rule=_setwise_rule(bad=set(range(100)))) as f, _setwise_reranker(tmp_path / "a", f) as rr:
        stats = CallStats()
        assert rr.calls.scores("q", pool, plain, stats)[0] is None and stats.failed == stats.calls > 0
    with FakeLLM(rule=_setwise_rule(bad={0})) as f, _setwise_reranker(tmp_path / "b", f) as rr:
        stats = CallStats()
        scores, _ = rr.calls.scores("q", pool, plain, stats)
        # request 0 asked about node 1 and its children (d01, d04 GOLD, d05): the fused order chose d01, so GOLD
        # stays below it in the heap until d01 is extracted (0 and 1 first), then wins every set it is in
        assert stats.failed == 1 and stats.errors == ["InvalidJSON"] and sorted(scores) == [i / 5 for i in range(6)]
        assert scores[0] == 1.0 and scores[4] == 0.6


def test_setwise_end_to_end_through_rerank_run(tmp_path, monkeypatch):
    from fakellm import FakeLLM, make_inputs

    fused, queries, texts = make_inputs(n_queries=2, n_docs=12, gold=(8,))
    dp = stage03(tmp_path / "ds", fused, queries, texts)
    monkeypatch.setenv("RERANKEVAL_CACHE", str(tmp_path))
    with FakeLLM(rule=_setwise_rule()) as f:
        s = Settings(base_url=f.base_url, api_key="test-key-not-a-secret-0001", model="m", timeout=2, max_retries=0)
        res = rerank.run(dp, Params(mode="setwise", alpha=1.0, pool_k=10), s, progress=False)
        sent = f.count
    assert [list(res.run[q])[0] for q in fused] == ["d08", "d08"]
    led = res.ledger
    assert set(led.status) == {"ok"} and set(led["mode"]) == {"setwise"}
    assert (led.llm_calls == led.requests).all() and led.requests.sum() == sent and 10 <= led.llm_calls.min() <= 25
    assert res.candidates.groupby("qid").llm_score.max().tolist() == [1.0, 1.0]
