"""The sweep's legs on disk (experiments.legcache): read back when every input is unchanged, searched again (and
re-saved) when the chunk table, the indexes, the queries, the BM25 parameters or the code differ, or the file is
damaged; a sweep reading them back gives the same table."""

from __future__ import annotations

import gzip
import json

import pandas as pd
import pytest

from rerankeval.core import paths
from rerankeval.core.settings import load_settings
from rerankeval.experiments import grid as gridmod
from rerankeval.experiments import legcache
from rerankeval.retrieve import codeversion
from roots import env_roots
from sweep_data import QRELS, QUERIES, FakeSource


@pytest.fixture
def dp(tmp_path):
    d = paths.DatasetPaths("docs", tmp_path / "src", tmp_path / "results" / "docs", env_roots())
    d.chunks.parent.mkdir(parents=True)
    d.chunks.write_text('{"chunk_id": "c1.0"}\n', encoding="utf-8")
    d.index_manifest.parent.mkdir(parents=True)
    d.index_manifest.write_text(json.dumps({"collection": "x", "seconds": 1.0}), encoding="utf-8")
    return d


def _engine(dp, src, queries=QUERIES):
    eng = gridmod.Engine(src, queries, max_leg_k=5)
    eng.leg_cache = legcache.LegCache(dp, queries, load_settings())
    return eng


def _score(eng):
    points = gridmod.Grid(method=["rrf", "dbsf"], leg_k=[2, 5], bm25=[[2.0, 0.3]]).points(gridmod.Point(leg_k=5))
    return gridmod.score_points(eng, points, list(QUERIES), QRELS, gridmod.columns(3, [3]))[0]


def test_a_second_engine_reads_its_legs_back_and_scores_the_same(dp):
    first, second = FakeSource(), FakeSource()
    a = _score(_engine(dp, first))
    eng = _engine(dp, second)
    b = _score(eng)
    assert first.calls == [("dense", 5), ("bm25", 5)] and second.calls == []  # nothing searched the second time
    assert eng.leg_cache.hits == 3 and eng.leg_cache.misses == 0  # dense, bm25, and the k1/b point's bm25
    pd.testing.assert_frame_equal(a, b, check_exact=True)
    assert eng.leg("dense", gridmod.Point()).seconds_per_query >= 0


@pytest.mark.parametrize("change", ["chunks", "index", "queries", "code"])
def test_a_changed_input_searches_again(dp, change, monkeypatch):
    _score(_engine(dp, FakeSource()))
    queries = dict(QUERIES)
    if change == "chunks":
        dp.chunks.write_text('{"chunk_id": "c1.0", "text": "new"}\n', encoding="utf-8")
    elif change == "index":
        dp.index_manifest.write_text(json.dumps({"collection": "y", "seconds": 1.0}), encoding="utf-8")
    elif change == "queries":
        queries["q1"] = "another text"
    else:
        real = codeversion.code_parts
        monkeypatch.setattr(codeversion, "code_parts", lambda v, cache: {**real(v, cache), "modules": {"changed": "1"}})
    src = FakeSource()
    eng = _engine(dp, src, queries)
    eng.leg("dense", gridmod.Point())
    assert src.calls == [("dense", 5)] and eng.leg_cache.reasons == ["dense: no saved leg"]


def test_bm25_parameters_are_part_of_the_key(dp):
    _engine(dp, FakeSource()).leg("bm25", gridmod.Point())
    c = legcache.LegCache(dp, QUERIES, load_settings())
    assert c.get("bm25", 5, (1.2, 0.75)) is not None and c.get("bm25", 5, (2.0, 0.3)) is None
    assert c.get("bm25", 4, (1.2, 0.75)) is None  # another depth


def test_a_damaged_or_foreign_entry_is_ignored_and_rebuilt(dp):
    _engine(dp, FakeSource()).leg("dense", gridmod.Point())
    c = legcache.LegCache(dp, QUERIES, load_settings())
    (path,) = c.dir.glob("dense-*.json.gz")
    path.write_bytes(b"not gzip")
    src = FakeSource()
    eng = _engine(dp, src)
    eng.leg("dense", gridmod.Point())
    assert src.calls == [("dense", 5)] and "is damaged" in eng.leg_cache.reasons[0]
    assert legcache.LegCache(dp, QUERIES, load_settings()).get("dense", 5, None) is not None  # re-saved by the search
    entry = json.loads(gzip.decompress(path.read_bytes()))
    path.write_bytes(gzip.compress(json.dumps({**entry, "key": "0" * 64}).encode()))
    c = legcache.LegCache(dp, QUERIES, load_settings())
    assert c.get("dense", 5, None) is None and "holds another key" in c.reasons[0]


def test_without_a_chunk_table_nothing_is_cached(tmp_path):
    bare = paths.DatasetPaths("bare", tmp_path / "s", tmp_path / "r", env_roots())
    c = legcache.LegCache(bare, QUERIES, load_settings())
    c.put("dense", 5, None, {"q1": {"d1": 1.0}}, 0.1)
    assert not c.usable and c.get("dense", 5, None) is None and not c.dir.exists()
