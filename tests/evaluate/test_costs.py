"""A variant's cost per query leaves out the one-off model load its stage-03 record counts (issue 35 item 12)."""

from __future__ import annotations

import json

import pytest

from rerankeval.evaluate import costs


def _record(d, variant, seconds, queries, **extra):
    (d / f"{variant}.json").write_text(
        json.dumps({"variant": variant, "seconds": seconds, "queries": queries, **extra})
    )


def test_the_model_load_is_not_a_cost_per_query(tmp_path):
    _record(tmp_path, "vector", 12.4, 20, model_load_seconds=12.0)  # 12 s loading the encoder, 0.4 s searching
    _record(tmp_path, "bm25", 0.2, 20)
    _record(tmp_path, "hybrid", 0.02, 20)
    per_query = costs.retrieval_seconds(tmp_path, iter(["vector", "bm25", "hybrid"]))  # any iterable, once
    assert per_query == pytest.approx({"vector": 0.02, "bm25": 0.01, "hybrid": 0.001})
    assert costs.model_load_seconds(tmp_path, ["vector", "bm25"]) == {"vector": 12.0}
    table = costs.cost_table(["vector", "bm25", "hybrid"], retrieval_s=per_query).set_index("variant")
    assert table.at["hybrid", "retrieval_seconds_per_query"] == pytest.approx(0.031)  # its legs, no load either


def test_a_record_without_a_load_or_with_a_broken_one_keeps_its_seconds(tmp_path):
    _record(tmp_path, "vector", 2.0, 20)
    _record(tmp_path, "bm25", 1.0, 10, model_load_seconds="n/a")
    _record(tmp_path, "hybrid", 1.0, 10, model_load_seconds=5.0)  # more than its seconds: never negative
    assert costs.retrieval_seconds(tmp_path, ["vector", "bm25", "hybrid", "missing"]) == pytest.approx(
        {"vector": 0.1, "bm25": 0.1, "hybrid": 0.0}
    )
    assert costs.model_load_seconds(tmp_path, ["bm25", "missing"]) == {}
