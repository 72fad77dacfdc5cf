"""The variant registry: one name list, one shape, new variants plug in by registering a class."""

from __future__ import annotations

import json

import pytest

from builders import manual_dataset
from indexing import build_index
from rerankeval.core import names
from rerankeval.core.runs import assert_run_contract, read_run_checked, to_units
from rerankeval.core.settings import load_settings
from rerankeval.corpus import contract as corpus
from rerankeval.index import embed
from rerankeval.index.qdrant.rrf import RRF_K
from rerankeval.retrieve import retriever, stage, variants
from rerankeval.retrieve.fusion import fuse
from roots import env_embeddings, roots_under


def test_one_catalogue_of_names_and_a_registry_of_the_variants_that_search():
    assert names.names() == (
        "vector",
        "bm25",
        "hybrid",
        "qdrant_hybrid",
        "hybrid_combsum",
        "hybrid_combmnz",
        "hybrid_dbsf",
        "qdrant_dbsf",
        "cross_encoder",
        "hybrid_rerank",
        "hybrid_tuned",
        "hybrid_rerank_expand",
        "hybrid_reformulate",
    )
    assert variants.names() == names.names()[:9]  # only variants that search are registered
    assert names.names(names.RETRIEVE) == retriever.VARIANTS == (*variants.names(), "hybrid_reformulate")
    assert retriever.REWRITES == {"hybrid_reformulate": "hybrid"}  # a rewrite step in front of the hybrid
    assert names.FUSION_VARIANTS == variants.names()[4:8] and names.REPORT_ORDER[4:8] == names.FUSION_VARIANTS
    assert names.names(names.RERANK) == ("hybrid_rerank", "hybrid_rerank_expand")
    assert names.names(names.SWEEP) == ("hybrid_tuned",) and names.stage_of("hybrid_tuned") == names.SWEEP
    assert names.stage_of("someone_elses_run") is None
    assert set(names.REPORT_ORDER) == set(names.names()) and set(names.LEGS) < set(retriever.BASE_VARIANTS)
    assert all(names.describe().values()) and all(variants.describe().values())
    assert variants.describe() == {n: names.describe()[n] for n in variants.names()}  # classes read the catalogue
    assert variants.get("hybrid_combsum").description == names.CATALOGUE["hybrid_combsum"].description
    with pytest.raises(ValueError, match="unknown variant 'nope'; choose from vector, bm25"):
        variants.get("nope")
    for later in ("hybrid_rerank", "hybrid_tuned", "hybrid_rerank_expand", "hybrid_reformulate"):
        with pytest.raises(ValueError, match="unknown variant"):
            variants.get(later)


def test_the_registry_does_not_import_the_rewrite_step_or_the_stage():
    """variants -> reformulate -> stage was a cycle (issue 20): the registry imports neither."""
    import subprocess
    import sys

    code = (
        "import sys, rerankeval.retrieve.variants; print(sorted(m for m in sys.modules if m.startswith('rerankeval.')))"
    )
    loaded = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert "reformulate" not in loaded and "retrieve.stage" not in loaded and "rerankeval.llm" not in loaded


def test_register_refuses_a_taken_or_blank_name(monkeypatch):
    monkeypatch.setattr(variants, "REGISTRY", dict(variants.REGISTRY))

    class Again(variants.Variant):
        name = names.HYBRID

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
    budget = variants.Budget(leg_k=100, pool_k=3, rrf_k=RRF_K)
    ce = variants.create(names.CROSS_ENCODER, None, budget, cross_encoder="m")
    assert ce.cross_encoder == "m" and ce.budget.pool_k == 3 and ce.budget.leg_k == 100
    hybrid = variants.create(names.HYBRID, None, budget, cross_encoder="m")  # one call shape for every variant
    assert hybrid.budget == budget and not hasattr(hybrid, "cross_encoder")


def test_the_budget_has_no_defaults_of_its_own():
    """Stage 03's Params is the one home of the defaults: a budget states every number (issue 33)."""
    with pytest.raises(TypeError, match="pool_k"):
        variants.Budget(leg_k=100, rrf_k=RRF_K)  # type: ignore[call-arg]


def test_params_record_and_the_rrf_facts_written_with_them():
    p = variants.Budget(leg_k=7, pool_k=3, rrf_k=60, weights=(0.5, 2))
    assert p.record() == {"leg_k": 7, "pool_k": 3, "rrf_k": 60, "weights": [0.5, 2]}
    assert variants.get("qdrant_hybrid").record(p.record())["qdrant_rrf_k"] == 61
    assert variants.get("hybrid").record(p.record())["qdrant_rrf_k"] is None
    assert "fusion" not in variants.get("hybrid").record(p.record())  # today's hybrid.json is unchanged
    assert variants.get("hybrid_combsum").record(p.record()) == {
        "rrf_formula": None,
        "qdrant_rrf_k": None,
        "fusion": "combsum_minmax",
    }
    assert {variants.get(v).fusion for v in ("hybrid", "hybrid_combmnz", "hybrid_dbsf")} == {
        "rrf",
        "combmnz_minmax",
        "dbsf",
    }
    assert variants.get("qdrant_dbsf").record(p.record())["fusion"] == "dbsf"


def test_complete_and_rank_scores():
    runs = variants.Runs({"b": {"u": 1.0}}, {"b": {"c": 1.0}})
    assert variants.complete(runs, {"a": "x", "b": "y"}) == ({"a": {}, "b": {"u": 1.0}}, {"a": {}, "b": {"c": 1.0}})
    assert variants.rank_scores(["x", "y", "z"]) == {"x": 3.0, "y": 2.0, "z": 1.0}


# --------------------------------------------------------------------------- the fusion variants, end to end
QUERIES = {"q1": "install a package with apt", "q2": "network configuration file", "q3": "grub boot loader"}


def _tiny_index(tmp, monkeypatch, backend):
    roots_under(monkeypatch, tmp)
    monkeypatch.delenv("QDRANT_URL", raising=False)
    monkeypatch.setenv("RERANKEVAL_QDRANT_BACKEND", backend)
    dp = manual_dataset(tmp / "src" / "tiny", QUERIES)
    emb = embed.Embedder(str(embed.bundled_model_path()), progress=False, cache_root=env_embeddings())
    build_index(dp, embedder=emb)
    return dp, emb


@pytest.mark.parametrize("backend", ["client", "edge"])
def test_fusion_variants_run_in_stage_03_and_keep_the_run_contract(tmp_path, monkeypatch, backend):
    """Each fusion variant is searched and written by stage 03 like any other: its unit run is ``fuse`` of the
    hybrid's unit-mapped legs, qdrant_dbsf is Qdrant's DBSF of its own legs, and the files pass the contract."""
    if backend == "edge":
        pytest.importorskip("qdrant_edge", reason="qdrant-edge-py is not installed (pip install qdrant-edge-py==0.9.0)")
    dp, emb = _tiny_index(tmp_path, monkeypatch, backend)
    fused = (names.HYBRID, *names.FUSION_VARIANTS)
    with retriever.Retriever(dp, load_settings(), embedder=emb, progress=False) as r:
        res = {v: r.search(v, QUERIES, leg_k=5, pool_k=10, rrf_k=RRF_K) for v in fused}
        stage.write(dp, stage.Result(retrievals=res))
        dense, lex, sparse = r.dense_leg(QUERIES, 5), r.bm25_leg(QUERIES, 5), r.sparse_leg(QUERIES, 5)
        with pytest.raises(ValueError, match="Qdrant's DBSF takes no weights"):
            r.search(names.QDRANT_DBSF, QUERIES, leg_k=5, pool_k=10, rrf_k=RRF_K, weights=(1, 2))
    unit_of = corpus.unit_of(dp)
    legs = [to_units(dense, unit_of), to_units(lex, unit_of)]
    for v in fused[:-1]:
        method = variants.get(v).fusion
        assert res[v].run == fuse(legs, method) and res[v].chunk_run == fuse([dense, lex], method)
    assert res[names.HYBRID_COMBSUM].run != res[names.HYBRID].run  # scores, not 1/(60 + rank)
    # Qdrant's DBSF (local mode: qdrant-client's Python; edge: Qdrant's Rust) of its dense and sparse legs
    qdbsf = res[names.QDRANT_DBSF].chunk_run
    ours = fuse([dense, sparse], "dbsf")
    for q in QUERIES:
        assert qdbsf[q] == pytest.approx(ours[q], rel=1e-5, abs=1e-6)
    assert res[names.QDRANT_DBSF].run == to_units(qdbsf, unit_of)
    checks = [read_run_checked(dp.run_file(v), v)[1] for v in fused]
    assert_run_contract(checks)
    assert all(c.ok for c in checks)
    record = json.loads((dp.stage_dir("retrieve") / "hybrid_dbsf.json").read_text())
    assert record["fusion"] == "dbsf" and record["leg_k"] == 5 and record["rrf_formula"] is None


def test_qdrant_fuses_only_rrf_and_unweighted_dbsf():
    from rerankeval.index.qdrant.store import check_fusion

    check_fusion("rrf", (1, 2))
    check_fusion("dbsf", None)
    with pytest.raises(ValueError, match="Qdrant fuses with rrf or dbsf, not 'combsum_minmax'"):
        check_fusion("combsum_minmax", None)
    with pytest.raises(ValueError, match="Qdrant's DBSF takes no weights"):
        check_fusion("dbsf", (1, 1))
    with pytest.raises(ValueError, match=r"weights must be \(dense, sparse\)"):
        check_fusion("rrf", (1, 2, 3))
