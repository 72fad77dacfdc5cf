"""Stage 03 as one library call (issue 20) through its face (issue 33): run(dp, Params, settings) -> Result,
write(dp, result); the rewrite step composed with the hybrid; the parameters cell of notebook 03 against Params;
the stage's import closure."""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from dataclasses import fields

import pytest

from builders import manual_dataset
from fakellm import FakeLLM
from indexing import build_index
from rerankeval import retrieve
from rerankeval.core import paths
from rerankeval.core.runs import read_trec
from rerankeval.core.settings import Settings, load_settings
from rerankeval.index import embed
from rerankeval.llm.cache import LLMCache
from rerankeval.retrieve import reformulate, search, variants
from rerankeval.retrieve.retriever import Retriever
from roots import env_embeddings, roots_under

QUERIES = {"q1": "install a package with apt", "q2": "where do network settings live", "q3": "grub boot loader"}
VARIANTS = ["vector", "bm25", "hybrid", "qdrant_hybrid", "cross_encoder", "hybrid_reformulate"]


@pytest.fixture
def tiny(tmp_path, monkeypatch):
    roots_under(monkeypatch, tmp_path)
    monkeypatch.delenv("QDRANT_URL", raising=False)
    monkeypatch.delenv("RERANKEVAL_QDRANT_BACKEND", raising=False)
    monkeypatch.setenv("RERANKEVAL_CROSS_ENCODER", str(tmp_path / "no-such-model"))  # skipped: no weights
    dp = manual_dataset(tmp_path / "src" / "tiny", QUERIES)
    build_index(
        dp, embedder=embed.Embedder(str(embed.bundled_model_path()), progress=False, cache_root=env_embeddings())
    )
    return dp


def _rewrite(n, body):
    return {"content": json.dumps({"query": "network interfaces configuration file"})}


def test_run_then_write_is_the_variants_one_by_one(tiny, tmp_path):
    dp = tiny
    settings = Settings(base_url=None)  # hybrid_reformulate without an endpoint: hybrid's result, llm_failed
    params = retrieve.Params(
        leg_k=5, pool_k=3, final_k=2, variants=VARIANTS, explain_queries=2, reformulate_threshold=1.0
    )  # every query is weak
    result = retrieve.run(dp, params, settings, cache=LLMCache(tmp_path / "llm"))
    assert list(result.retrievals) == [v for v in VARIANTS if v != "cross_encoder"]
    assert "no cross-encoder weights" in result.skipped["cross_encoder"]
    assert not dp.run_file("hybrid").exists()  # run writes nothing
    written = retrieve.write(dp, result)
    assert dp.stage_dir("retrieve") / reformulate.LEDGER in written
    with Retriever(dp, settings) as r:
        for v in ("vector", "bm25", "hybrid", "qdrant_hybrid"):
            alone = r.search(v, QUERIES, leg_k=5, pool_k=3, rrf_k=60)
            assert result.retrievals[v].run == alone.run == read_trec(dp.run_file(v))
            assert result.retrievals[v].chunk_run == alone.chunk_run
    assert result.retrievals["hybrid_reformulate"].run == result.retrievals["hybrid"].run  # fell back
    assert set(result.ledger.status) == {reformulate.LLM_FAILED}
    assert all(e.startswith("NoEndpoint: ") for e in result.ledger.error)
    record = json.loads(dp.variant_record("hybrid_reformulate").read_text())
    assert {k: record[k] for k in ("threshold", "guard_k", "rewritten", "kept", "leg_k", "pool_k", "rrf_k")} == {
        "threshold": 1.0,
        "guard_k": 10,
        "rewritten": 0,
        "kept": 0,
        "leg_k": 5,
        "pool_k": 3,
        "rrf_k": 60,
    }
    table = result.table(dp)
    assert list(table.variant) == list(result.retrievals) and table["run file"][0] == "runs/vector.trec"


def test_the_qdrant_comparison_and_its_summary(tiny):
    import pandas as pd

    params = retrieve.Params(leg_k=5, final_k=2, variants=["hybrid", "qdrant_hybrid"], explain_queries=2)
    result = retrieve.run(tiny, params, load_settings())
    c = result.qdrant
    assert (c.final_k, c.leg_k, c.sample) == (2, 5, 2) and 0 <= c.overlap_final <= 1
    ndcg = pd.DataFrame({"hybrid": [0.5, 1.0, 0.0], "qdrant_hybrid": [0.5, 0.5, 0.0]}, index=["q1", "q2", "q3"])
    summary = c.summary(ndcg)
    assert list(summary.index) == [
        "overlap@2: hybrid vs qdrant_hybrid",
        "overlap@5: hybrid vs qdrant_hybrid",
        "nDCG@2 qdrant_hybrid - hybrid (mean)",
        "queries with a different nDCG",
        "overlap@2: our RRF of Qdrant's legs vs qdrant_hybrid (2 queries)",
        "overlap@2: Qdrant's sparse leg vs our BM25 leg (2 queries)",
    ]
    assert summary.value.iloc[3] == 1 and summary.value.iloc[2] == pytest.approx(-0.5 / 3)
    assert retrieve.run(tiny, retrieve.Params(leg_k=5, variants=["bm25"]), load_settings()).qdrant is None


def test_hybrid_reformulate_is_the_rewrite_step_after_the_hybrid(tiny, tmp_path):
    dp = tiny
    with FakeLLM(rule=_rewrite) as f, Retriever(dp, load_settings()) as r:
        settings = Settings(base_url=f.base_url, api_key="sk-test", model="fake", timeout=2.0, max_retries=0)
        res, ledger = search.search_reformulated(
            r,
            QUERIES,
            leg_k=5,
            pool_k=10,
            rrf_k=60,
            threshold=1.0,
            guard_k=2,
            settings=settings,
            cache=LLMCache(tmp_path / "llm"),
        )
        hybrid = r.search("hybrid", QUERIES, leg_k=5, pool_k=10, rrf_k=60)
        with reformulate.open_rewriter(settings, LLMCache(tmp_path / "llm")) as (rewriter, _):
            step = reformulate.Reformulate(rewriter, threshold=1.0, guard_k=2)
            direct = step.apply(r, QUERIES, (hybrid.run, hybrid.chunk_run), leg_k=5, rrf_k=60)
        # the explorer's live search: no rewrite step
        no_llm = r.search("hybrid_reformulate", QUERIES, leg_k=5, pool_k=10, rrf_k=60)
    assert (res.run, res.chunk_run) == direct
    cols = ["qid", "status", "rewrite", "agreement", "rewrite_agreement", "top", "rewrite_top"]
    assert ledger[cols].equals(step.ledger[cols]) and bool(step.ledger.cache_hit.all())  # asked once, then cached
    assert set(ledger.status) <= {reformulate.KEPT, reformulate.REVERTED, reformulate.NOT_REWRITTEN}
    assert res.params["rewritten"] == 3 and res.params["kept"] == int((ledger.status == reformulate.KEPT).sum())
    assert (no_llm.run, no_llm.chunk_run) == (hybrid.run, hybrid.chunk_run)
    with Retriever(dp, load_settings()) as r, pytest.raises(ValueError, match="produced by the rerank stage"):
        r.search("hybrid_rerank_expand", QUERIES, leg_k=5, pool_k=10, rrf_k=60)


def _parameters_cell(nb) -> dict:
    cells = json.loads(nb.read_text(encoding="utf-8"))["cells"]
    src = "".join(next(c for c in cells if c["cell_type"] == "code")["source"])
    return {n.target.id: ast.literal_eval(n.value) for n in ast.parse(src).body}


def test_notebook_03_parameters_are_the_dataclass_defaults():
    declared = _parameters_cell(paths.NOTEBOOKS_DIR / "03-retrieve.ipynb")
    defaults = retrieve.Params()
    assert list(declared) == [f.name for f in fields(retrieve.Params)]
    for name, value in declared.items():
        got = getattr(defaults, name)
        assert (list(got) if isinstance(value, list) else got) == value, name


def test_stage_03_imports_no_reranker_and_no_llm_module():
    """Notebook 03's library closure: the LLM modules load only when hybrid_reformulate asks the LLM."""
    code = "import sys, rerankeval.retrieve.stage; print(sorted(m for m in sys.modules if m.startswith('rerankeval.')))"
    loaded = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert "rerankeval.retrieve.stage" in loaded
    assert "rerankeval.rerank" not in loaded and "rerankeval.llm" not in loaded
    assert variants.REGISTRY  # the registry is filled by variants itself


def test_a_modules_tree_hash_is_kept_by_its_text_and_a_bad_file_is_rebuilt(tmp_path, monkeypatch):
    """stage 03's code version parses each module once per text (issue 24: ~0.3 s a warm 03): a second process reads
    the syntax-tree hash from <cache>/code-trees.json; a file that does not read is ignored and written again."""
    from rerankeval.retrieve import codeversion

    cache = tmp_path / "cache"
    mod = tmp_path / "m.py"
    mod.write_text("x = 1  # a comment\n", encoding="utf-8")
    monkeypatch.setattr(codeversion, "_trees", {})
    codeversion._tree_hash.cache_clear()
    first = codeversion.source_hash(mod, cache)
    kept = json.loads((tmp_path / "cache" / codeversion.TREES).read_text(encoding="utf-8"))
    assert list(kept.values()) == [first]
    # another process (nothing in memory) that cannot parse: served from the file, the same hash
    monkeypatch.setattr(codeversion, "_trees", {})
    codeversion._tree_hash.cache_clear()
    with monkeypatch.context() as m:
        m.setattr(codeversion.ast, "parse", lambda *a, **k: pytest.fail("parsed although the text's hash was kept"))
        assert codeversion.source_hash(mod, cache) == first
    # only the syntax tree counts, as before: a new comment is a new text with the same tree
    mod.write_text("x = 1  # another comment\n", encoding="utf-8")
    assert codeversion.source_hash(mod, cache) == first and len(codeversion._known_trees(cache)) == 2
    (tmp_path / "cache" / codeversion.TREES).write_text("{not json", encoding="utf-8")
    monkeypatch.setattr(codeversion, "_trees", {})
    codeversion._tree_hash.cache_clear()
    mod.write_text("x = 2\n", encoding="utf-8")
    assert codeversion.source_hash(mod, cache) != first
    assert len(json.loads((tmp_path / "cache" / codeversion.TREES).read_text(encoding="utf-8"))) == 1


def test_no_hub_cache_means_no_cross_encoder_without_importing_the_hubs_downloader(tmp_path):
    """Every 03 run asks whether cross-encoder weights are on disk; without a Hugging Face cache folder the answer
    is no, without importing huggingface_hub.file_download (~0.1 s, issue 24)."""
    code = (
        "import sys; from rerankeval.retrieve import cross_encoder as c; "
        "print(c.find_cross_encoder(c.DEFAULT_CROSS_ENCODER, None), 'huggingface_hub.file_download' in sys.modules)"
    )
    env = {
        "PYTHONPATH": str(paths.ROOT / "lib"),
        "PATH": "/usr/bin:/bin",
        "HF_HUB_OFFLINE": "1",
        "HF_HOME": str(tmp_path / "hf"),
        "RERANKEVAL_CACHE": str(tmp_path / "cache"),
    }
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, env=env)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.split() == ["None", "False"]


def test_notebook_03_builds_its_params_in_one_line_from_its_parameters():
    """Params.of takes the parameters cell's names from the notebook's globals and ignores the rest (issue 33)."""
    nb = paths.NOTEBOOKS_DIR / "03-retrieve.ipynb"
    declared = _parameters_cell(nb)
    got = retrieve.Params.of({**declared, "leg_k": 7, "dp": object(), "queries": {}, "retrieve": retrieve})
    assert got == retrieve.Params(**{**declared, "leg_k": 7}) and retrieve.Params.of(got) is got
    code = "".join("".join(c["source"]) for c in json.loads(nb.read_text(encoding="utf-8"))["cells"])
    assert "retrieve.Params.of(globals())" in code and "retrieve.run(dp, params, " in code
