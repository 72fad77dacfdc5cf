"""The variant registry: one name list, one shape, new variants plug in by registering a class."""

from __future__ import annotations

import pytest

from rerankeval import retrieve, variants


def test_every_variant_name_is_registered_once_with_its_stage():
    assert variants.names() == ("vector", "bm25", "hybrid", "qdrant_hybrid", "cross_encoder", "hybrid_rerank",
                                "hybrid_rerank_expand", "hybrid_reformulate")
    assert variants.names(variants.RETRIEVE) == retrieve.VARIANTS == (*variants.names()[:5], "hybrid_reformulate")
    assert variants.get(variants.HYBRID_RERANK).stage == variants.RERANK
    assert variants.get("hybrid_rerank_expand").stage == variants.RERANK
    assert set(variants.REPORT_ORDER) == set(variants.names()) and set(variants.LEGS) < set(retrieve.BASE_VARIANTS)
    assert all(variants.describe().values())
    with pytest.raises(ValueError, match="unknown variant 'nope'; choose from vector, bm25"):
        variants.get("nope")


def test_register_refuses_a_taken_or_blank_name(monkeypatch):
    monkeypatch.setattr(variants, "REGISTRY", dict(variants.REGISTRY))

    class Again(variants.Variant):
        name = variants.HYBRID

        def search_runs(self, queries):
            return variants.Runs({}, {})

    with pytest.raises(ValueError, match="already registered"):
        variants.register(Again)
    assert variants.register(Again, replace=True) is Again and variants.get("hybrid") is Again

    class Blank(Again):
        name = "two words"

    with pytest.raises(ValueError, match="non-empty word"):
        variants.register(Blank)


def test_create_passes_only_the_options_a_variant_takes():
    ce = variants.create(variants.CROSS_ENCODER, None, variants.Params(pool_k=3), cross_encoder="m")
    assert ce.cross_encoder == "m" and ce.params.pool_k == 3 and ce.params.leg_k == 100
    hybrid = variants.create(variants.HYBRID, None, cross_encoder="m")  # one call shape for every variant
    assert hybrid.params == variants.Params() and not hasattr(hybrid, "cross_encoder")


def test_params_record_and_the_rrf_facts_written_with_them():
    p = variants.Params(leg_k=7, pool_k=3, rrf_k=60, weights=(0.5, 2))
    assert p.record() == {"leg_k": 7, "pool_k": 3, "rrf_k": 60, "weights": [0.5, 2]}
    assert variants.get("qdrant_hybrid").record(p.record())["qdrant_rrf_k"] == 61
    assert variants.get("hybrid").record(p.record())["qdrant_rrf_k"] is None


def test_complete_and_rank_scores():
    runs = variants.Runs({"b": {"u": 1.0}}, {"b": {"c": 1.0}})
    assert variants.complete(runs, {"a": "x", "b": "y"}) == ({"a": {}, "b": {"u": 1.0}}, {"a": {}, "b": {"c": 1.0}})
    assert variants.rank_scores(["x", "y", "z"]) == {"x": 3.0, "y": 2.0, "z": 1.0}
