"""Sweeps (rerankeval.experiments.sweep) and honest tuning (rerankeval.experiments.splits): cache re-use, train/test
separation, k-fold determinism, outputs. Closed-form cases on hand-built legs; one end-to-end run on a tiny BEIR set."""

from __future__ import annotations

import json
from collections.abc import Mapping

import pandas as pd
import pytest

from rerankeval.core import paths
from rerankeval.core.runs import read_trec, to_units, truncate
from rerankeval.core.settings import load_settings
from rerankeval.experiments import grid as gridmod
from rerankeval.experiments import replay, splits, sweep
from rerankeval.index import bm25 as bm25mod
from rerankeval.retrieve.fusion import fuse, rrf
from roots import env_embeddings, env_roots
from sweep_data import DENSE, LEX, QRELS, QUERIES, UNIT_OF, FakeSource


def test_legs_are_searched_once_and_cut_for_every_fusion_point():
    src = FakeSource()
    eng = gridmod.Engine(src, QUERIES, max_leg_k=5)
    grid = gridmod.Grid(
        method=["rrf", "combsum_minmax", "dbsf"],
        rrf_k=[1, 10, 60],
        weights=[[1, 1], [1, 0.5]],
        leg_k=[2, 3, 5],
        pool_k=[2, 3],
    )
    points = grid.points(gridmod.Point(leg_k=5))
    # rrf_k is crossed for rrf only; the default is in the product
    assert points[0] == gridmod.Point(leg_k=5) and len(points) == 1 + (3 + 1 + 1) * 2 * 3 - 1
    pq, secs = gridmod.score_points(eng, points, list(QUERIES), QRELS, gridmod.columns(3, grid.pool_k))
    assert src.calls == [("dense", 5), ("bm25", 5)]
    assert set(pq.point) == {p.name for p in points} and set(secs) == set(pq.point)
    for p in points:  # a cut of the deepest leg is the leg searched at that depth (closed form: stage 03's hybrid)
        want = fuse(
            [to_units(truncate(DENSE, p.leg_k), UNIT_OF), to_units(truncate(LEX, p.leg_k), UNIT_OF)],
            p.method,
            k=p.rrf_k,
            weights=p.weights,
        )
        got, _ = eng.run(p, list(QUERIES))
        assert {q: list(d) for q, d in got.items()} == {q: list(d) for q, d in want.items()}, p.name
        # the sweep fuses only as deep as its deepest cutoff (3): the metrics are those of the full run
        full = gridmod.evaluate_run(want, QRELS, list(QUERIES), gridmod.columns(3, grid.pool_k))
        mine = pq[pq.point == p.name].pivot(index="qid", columns="metric", values="value")
        pd.testing.assert_frame_equal(mine[full.columns], full, check_names=False)


def test_default_point_matches_stage_03_exactly():
    eng = gridmod.Engine(FakeSource(), QUERIES, max_leg_k=5)
    got, _ = eng.run(gridmod.Point(leg_k=3), list(QUERIES))
    want = rrf([to_units(truncate(DENSE, 3), UNIT_OF), to_units(truncate(LEX, 3), UNIT_OF)], k=60)
    assert got == want  # same scores, same order: weights (1, 1) are sent as None


def test_bm25_points_reweight_the_stored_counts():
    docs = [["apt", "install", "apt"], ["network", "apt"], ["grub", "boot", "boot", "boot"]]
    idx = bm25mod.BM25Index.from_tokens(["a", "b", "c"], docs)
    again = gridmod.reweighted(idx, 1.2, 0.75)
    assert (again.scores_tokens(["apt"]) == idx.scores_tokens(["apt"])).all()
    other = gridmod.reweighted(idx, 2.0, 0.3)
    ref = bm25mod.BM25Index.from_tokens(["a", "b", "c"], docs, params=bm25mod.BM25Params(k1=2.0, b=0.3))
    assert other.tf is idx.tf and (other.scores_tokens(["apt", "boot"]) == ref.scores_tokens(["apt", "boot"])).all()


def test_mean_metrics_are_closed_form():
    eng = gridmod.Engine(FakeSource(), QUERIES, max_leg_k=5)
    p = gridmod.Point(leg_k=1)  # q1: dense d1, lex d2 -> d1 (tie, rank 1 each: id order) then d2
    run, _ = eng.run(p, list(QUERIES))
    assert list(run["q1"]) == ["d1", "d2"]
    pq, _ = gridmod.score_points(eng, [p], ["q1"], QRELS, ["mrr@10", "recall@1"])
    vals = pq.set_index("metric").value
    assert vals["mrr@10"] == pytest.approx(0.5) and vals["recall@1"] == 0.0


# --------------------------------------------------------------------------- honest tuning
class GuardedQrels(dict):
    """Train qrels that fail loudly if the code asks them about any query of ``forbidden``."""

    def __init__(self, data: Mapping, forbidden: set[str]) -> None:
        super().__init__(data)
        self.forbidden = forbidden

    def _check(self, q) -> None:
        if q in self.forbidden:
            raise AssertionError(f"the chooser looked up the held-out query {q!r}")

    def __getitem__(self, q):
        self._check(q)
        return super().__getitem__(q)

    def __contains__(self, q) -> bool:
        self._check(q)
        return super().__contains__(q)


def _points():
    grid = gridmod.Grid(rrf_k=[1, 60], weights=[[1, 1], [0.5, 1], [1, 0.5]], leg_k=[1, 3, 5])
    return grid.points(gridmod.Point(leg_k=5))


def test_the_chooser_never_sees_test_qrels(monkeypatch):
    seen: list[set[str]] = []
    real = splits.choose
    monkeypatch.setattr(splits, "choose", lambda pq, *a: seen.append(set(pq.qid)) or real(pq, *a))
    train = splits.Split(
        "train", {"q1": "one", "q2": "two"}, GuardedQrels({q: QRELS[q] for q in ("q1", "q2")}, forbidden={"q3"})
    )
    test = splits.Split("test", {"q3": "three"}, {"q3": QRELS["q3"]})
    eng = gridmod.Engine(FakeSource(), QUERIES, max_leg_k=5)
    t = splits.train_test(eng, _points(), train, test, ["ndcg@3", "mrr@3"], "ndcg@3", n_boot=200)
    assert seen == [{"q1", "q2"}]
    assert set(t.per_query.qid) == {"q3"} and set(t.per_query.variant) == {splits.DEFAULT, splits.TUNED}
    assert set(t.run) == {"q3"} and t.protocol == "train/test"
    assert [name for name, *_ in t.scored] == ["train", "test"]


def test_kfold_chooses_each_fold_without_its_queries(monkeypatch):
    seen: list[set[str]] = []
    real = splits.choose
    monkeypatch.setattr(splits, "choose", lambda pq, *a: seen.append(set(pq.qid)) or real(pq, *a))
    eng = gridmod.Engine(FakeSource(), QUERIES, max_leg_k=5)
    split = splits.Split("test", dict(QUERIES), QRELS)
    t = splits.kfold(eng, _points(), split, ["ndcg@3"], "ndcg@3", k=3, seed=7, n_boot=200)
    assert len(seen) == 3
    for f, chooser_qids in enumerate(seen):
        held = {q for q, i in t.folds.items() if i == f}
        assert chooser_qids == set(QUERIES) - held  # everything but the fold it answers
    # the out-of-fold tuned values are the chosen point's values on the held-out queries
    tuned = t.per_query[(t.per_query.variant == splits.TUNED)].set_index("qid").value
    assert set(tuned.index) == set(QUERIES) and set(t.run) == set(QUERIES)


def test_kfold_is_deterministic_and_seeded():
    qids = [f"q{i}" for i in range(23)]
    a, b = splits.folds(qids, 5, seed=3), splits.folds(list(reversed(qids)), 5, seed=3)
    assert a == b and sorted(pd.Series(a).value_counts()) == [4, 4, 5, 5, 5]
    assert splits.folds(qids, 5, seed=4) != a
    eng = gridmod.Engine(FakeSource(), QUERIES, max_leg_k=5)
    split = splits.Split("test", dict(QUERIES), QRELS)
    one, two = (splits.kfold(eng, _points(), split, ["ndcg@3"], "ndcg@3", k=3, seed=1, n_boot=100) for _ in "ab")
    assert one.chosen == two.chosen and one.folds == two.folds
    pd.testing.assert_frame_equal(one.per_query, two.per_query)
    with pytest.raises(ValueError, match="k-fold needs"):
        splits.folds(qids[:2], 3, 0)


def test_ties_go_to_the_default_then_grid_order():
    pq = pd.DataFrame({"point": ["b", "a", "c"], "qid": "q", "metric": "m", "value": [0.5, 0.5, 0.4]})
    assert splits.choose(pq, "m", ["a", "b", "c"]) == "a"
    assert splits.choose(pq, "m", ["b", "a", "c"]) == "b"


def test_grid_file_and_errors(tmp_path):
    for name in ("small", "large"):
        g = gridmod.load_grid(name)
        assert g.points()[0] == gridmod.Point() and len(g.points()) > 1
    bad = tmp_path / "g.yaml"
    bad.write_text("x:\n  rrf: [1]\n", encoding="utf-8")
    with pytest.raises(ValueError, match="unknown axes"):
        gridmod.load_grid("x", bad)
    with pytest.raises(ValueError, match="no grid 'y'"):
        gridmod.load_grid("y", bad)
    bad.write_text("x:\n  method: [nope]\n", encoding="utf-8")
    with pytest.raises(ValueError, match="unknown fusion method"):
        gridmod.load_grid("x", bad)


def test_chunking_points_use_a_scratch_dataset(tmp_path):
    dp = paths.DatasetPaths("docs", tmp_path / "src", tmp_path / "results" / "docs", env_roots())
    s = gridmod.scratch_dataset(dp, 500, 100)
    assert s.root.is_relative_to(dp.sweep_dir) and s.name != dp.name and s.qdrant_path != dp.qdrant_path
    assert s.source == dp.source
    pdf_points = gridmod.Grid(chunking=[[500, 100]]).points(pdf=True)
    assert pdf_points[-1].chunking == (500, 100) and len(gridmod.Grid(chunking=[[500, 100]]).points()) == 1


# --------------------------------------------------------------------------- end to end on a tiny BEIR dataset
@pytest.fixture
def tiny_built(tiny_beir):
    from builders import extract_corpus
    from indexing import build_index
    from rerankeval.index import embed

    (tiny_beir / "qrels" / "train.tsv").write_text("query-id\tcorpus-id\tscore\nq3\td4\t1\n", encoding="utf-8")
    dp = paths.resolve_dataset(tiny_beir, load_settings())
    extract_corpus(dp)
    model = embed.load_sentence_transformer(str(embed.bundled_model_path()), "cpu")
    build_index(dp, embedder=embed.Embedder(model_obj=model, progress=False, cache_root=env_embeddings()))
    return dp, model


def test_a_sweep_encodes_nothing_after_the_legs_and_never_calls_the_llm(tiny_built, monkeypatch):
    from fakellm import FakeLLM
    from rerankeval.core.settings import load_settings
    from rerankeval.index import embed
    from rerankeval.retrieve.retriever import Retriever

    dp, model = tiny_built
    encoded: list[int] = []
    real = embed.Embedder.encode
    monkeypatch.setattr(
        embed.Embedder, "encode", lambda self, texts, **kw: encoded.append(len(texts)) or real(self, texts, **kw)
    )
    grid = gridmod.Grid(rrf_k=[1, 60], weights=[[1, 1], [1, 0.5]], leg_k=[2, 4], pool_k=[2, 3], bm25=[[2.0, 0.3]])
    with FakeLLM() as llm:
        monkeypatch.setenv("OPENAI_BASE_URL", llm.base_url)
        split = splits.eval_split(dp)
        train = splits.train_split(dp)
        assert train is not None and set(train.queries) == {"q3"} and set(split.queries) == {"q1", "q2"}
        with Retriever(
            dp,
            load_settings(),
            embedder=embed.Embedder(model_obj=model, progress=False, cache_root=env_embeddings()),
            progress=False,
        ) as r:
            eng = gridmod.Engine(r, {**train.queries, **split.queries}, max_leg_k=4)
            params = sweep.SweepParams(
                grid=grid, leg_k=4, pool_k=2, final_k=2, stats_seed=0, n_boot=200, write_tuned=True
            )
            res = sweep.run(dp, params, load_settings(), engine=eng)
            after_legs = list(encoded)
            more = gridmod.Grid(rrf_k=[5, 20, 80], weights=[[0.25, 1]], leg_k=[1, 3]).points(gridmod.Point(leg_k=4))
            gridmod.score_points(eng, more, split.qids, split.qrels, gridmod.columns(2, [2]))
        assert llm.count == 0, "a sweep must never call the LLM"
    assert after_legs == [3] and encoded == after_legs  # the 3 queries, once; fusion points encode nothing
    assert res.tuning.protocol == "train/test"
    assert set(res.table.split) == {"train", "test"}
    assert set(res.table[res.table.split == "test"].point) == {res.default.name, *res.tuning.chosen.values()}
    assert {"seconds_per_query", "llm_tokens_per_query", "pool_ceiling", "pool_k"} <= set(res.table.columns)
    assert (res.table.llm_tokens_per_query == 0).all()
    out = sweep.write(dp, res)
    assert pd.read_csv(out["sweep_csv"]).shape[0] == len(res.table)
    tuned = read_trec(dp.run_file(sweep.TUNED_VARIANT))
    assert set(tuned) <= set(split.queries)  # the tuned run answers only the queries that did not choose it
    record = json.loads(dp.variant_record(sweep.TUNED_VARIANT).read_text())
    assert "pool_k" not in record and record["setting"]["train"]["leg_k"] in (2, 4)


def test_the_stage_shape_and_what_notebook_06_shows(tiny_built):
    from dataclasses import replace

    from rerankeval.core.settings import load_settings

    dp, _ = tiny_built
    params = sweep.SweepParams(dataset=str(dp.source), leg_k=20, pool_k=3, final_k=2, n_boot=100, write_tuned=True)
    res = sweep.run(dp, params, load_settings())
    assert res.params == params and res.grid.pool_k == [3, *gridmod.load_grid("small").pool_k]  # and the chain's
    assert res.default == gridmod.Point(leg_k=20) and res.tuning.protocol == "train/test"
    written = sweep.write(dp, res)
    assert {"sweep_csv", "summary", "run", "record"} <= set(written) and dp.run_file(sweep.TUNED_VARIANT).exists()
    head = sweep.header(dp, res, written).splitlines()
    assert head[0].startswith(f"Dataset {dp.name}: grid 'small', {len(res.points)} points (method: rrf")
    assert "[" not in head[0] and "weights: 1:1" in head[0]  # values for people, not a list's repr
    assert head[1:] == [f"Wrote {', '.join(str(p.relative_to(dp.root)) for p in written.values())}."]
    view = sweep.overview(res.table, 2)
    rrf, depth = sweep.two_axis_views(view[view.pool_k == 3], res.default)
    assert set(rrf.method) == {"rrf"} and set(rrf.leg_k) == {20} and set(rrf.bm25) == {"1.2/0.75"} and len(rrf) > 1
    assert set(depth.weights) == {"1/1"} and set(depth.rrf_k) == {60}
    assert set(depth.chunking) == {sweep.DEFAULT_CHUNKING}
    timing = sweep.timing_note(res, True).splitlines()
    assert timing[0].startswith("legs ") and "point x split evaluations in" in timing[0]
    assert timing[1].startswith("The tuned run was written as runs/hybrid_tuned.trec")
    assert sweep.timing_note(res, False).endswith("`make sweep` writes runs/hybrid_tuned.trec for 05.")
    skipped = replace(res, skipped="too few")
    assert sweep.timing_note(skipped, True).startswith("Nothing was swept or tuned (see above)")
    assert sweep.header(dp, skipped, {}).splitlines()[-1] == "Skipped: too few"


def test_a_grid_of_your_own_is_said_so(tmp_path):
    grid = gridmod.Grid(rrf_k=[1, 60])
    res = sweep.SweepResult(
        pd.DataFrame(), None, grid.points(), grid, "ndcg@10", {}, params=sweep.SweepParams(grid=grid)
    )
    dp = paths.DatasetPaths("docs", tmp_path / "src", tmp_path / "results" / "docs", env_roots())
    head = sweep.header(dp, res, {})
    assert head.startswith(f"Dataset docs: a grid of your own, {len(res.points)} points (method: rrf; rrf_k: 1, 60;")


def test_pareto_front_is_closed_form():
    assert sweep.pareto_front([0.5, 0.6, 0.55, 0.6], [1, 2, 3, 2.5]) == [True, True, False, False]
    assert sweep.pareto_front([0.5, 0.5], [1, 1]) == [True, True]  # equal points do not dominate each other


def test_views_and_plots_of_a_kfold_table():
    import matplotlib

    matplotlib.use("Agg")
    from rerankeval.report import sweep_plots

    eng = gridmod.Engine(FakeSource(), QUERIES, max_leg_k=5)
    points = _points()
    t = splits.kfold(
        eng,
        points,
        splits.Split("test", dict(QUERIES), QRELS),
        gridmod.columns(3, [2, 3]),
        "ndcg@3",
        k=3,
        seed=0,
        n_boot=100,
    )
    table = pd.concat([gridmod.summarise(pq, points, secs, n, 3, [2, 3]) for n, pq, secs in t.scored])
    view = sweep.overview(table, 3)
    assert set(view.n_queries) == {3} and len(view) == 2 * len(points)  # folds pooled: every query once
    one = sweep.one_at_a_time(view, points[0], "rrf_k", 2)
    assert list(one.rrf_k) == [1, 60] and set(one.weights) == {"1/1"} and set(one.leg_k) == {5}
    fig = sweep_plots.sweep_lines(
        {"rrf_k": one, "leg_k": sweep.one_at_a_time(view, points[0], "leg_k", 2)}, ["ndcg@3", "pool_ceiling"]
    )
    assert len(fig.axes) >= 2
    at = view[view.pool_k == 2]
    sweep_plots.sweep_pareto(
        at,
        "ndcg@3",
        sweep.pareto_front(at["ndcg@3"].tolist(), at.seconds_per_query.tolist()),
        {points[0].name: "default"},
    )
    sweep_plots.sweep_heatmap(at[at.method == "rrf"], "ndcg@3", "rrf_k", "weights")
    assert "frontier" in sweep.frontier_sentence(at, "ndcg@3")


@pytest.mark.parametrize("alpha", [0.1, 1.0])
def test_replayed_rerank_equals_stage_04(tmp_path, alpha):
    """The sweep reorders a pool from stage 04's recorded yes/no scores exactly as stage 04 did, never calling
    the LLM again, and skips the queries whose pool was not (wholly) scored."""
    from fakellm import FakeLLM
    from rerank_data import make_dataset, run_cached
    from rerankeval import rerank
    from rerankeval.core.settings import Settings
    from rerankeval.llm.cache import LLMCache
    from rerankeval.rerank.config import Params

    _, dp = make_dataset(tmp_path)
    with FakeLLM() as f:
        s = Settings(base_url=f.base_url, api_key="k", model="fake-reranker", timeout=2, max_retries=0)
        params = Params(mode="yesno", yesno_json=True, alpha=alpha, pool_k=3, max_queries=2)
        res = run_cached(dp, params, s, LLMCache(tmp_path / "llm"))
        rerank.write(dp, res)
        fused = res.inputs.fused
        calls = f.count
        llm, why = replay.recorded_llm(dp)
        replayed = replay.replay(fused, llm, 3)
        assert f.count == calls and "no LLM call" in why
    want = read_trec(dp.run_file("hybrid_rerank"))
    assert sorted(replayed) == ["q1", "q2"]  # q3 was not reranked: skipped, never sent
    assert {q: list(d) for q, d in replayed.items()} == {q: list(want[q]) for q in replayed}
    assert replay.replay(fused, llm, 4) == {}  # a deeper pool was never scored: nothing to replay
    assert llm.tokens_per_candidate > 0


def test_a_chunking_point_re_extracts_and_re_indexes_in_a_scratch_folder(tiny_pdf):
    from builders import extract_corpus
    from indexing import build_index
    from rerankeval.core.settings import load_settings
    from rerankeval.corpus import contract as corpus

    dp = paths.resolve_dataset(tiny_pdf, load_settings())
    extract_corpus(dp, chunk_size=120, chunk_overlap=30)
    build_index(dp)
    main_chunks = dp.chunks.read_bytes()
    params = sweep.SweepParams(grid=gridmod.Grid(chunking=[[60, 10]]), leg_k=10, final_k=3, stats_seed=0, n_boot=50)
    res = sweep.run(dp, params, load_settings())
    point = res.table[res.table.chunk_size == 60]
    assert len(point) and point["ndcg@3"].between(0, 1).all()  # scored on the main dataset's qrels
    assert dp.chunks.read_bytes() == main_chunks  # the main results are untouched
    scratch = corpus.load_stats(gridmod.scratch_dataset(dp, 60, 10))
    assert scratch["params"]["chunk_size"] == 60 and scratch["chunks"] > corpus.load_stats(dp)["chunks"]
