"""Stage 05 reads no hidden settings: the manifest records the settings given to ``analyse.run``, not the
environment's (the face every stage has: ``run(dp, params, settings)``, ``write(dp, result)``)."""

from __future__ import annotations

import inspect
import json

from handmade import dataset_in, write_documents
from rerankeval.core import runs
from rerankeval.core.settings import Settings
from rerankeval.evaluate import analyse, manifest

FAST = {"ks": [1, 3], "final_k": 3, "pool_k": 2, "n_boot": 20, "n_perm": 20, "verify_with": ["pytrec_eval"]}


def _dataset(tmp_path, monkeypatch):
    dp = dataset_in(tmp_path, monkeypatch)
    write_documents(dp, ["d1", "d2", "d3"], ("q1", "q2"), {"q1": {"d1": 1}, "q2": {"d2": 1}})
    runs.write_trec({"q1": {"d1": 3.0, "d2": 2.0}, "q2": {"d1": 3.0, "d2": 2.0}}, dp.run_file("bm25"), "bm25")
    return dp


def test_the_manifest_records_the_settings_given_not_the_environment(tmp_path, monkeypatch):
    dp = _dataset(tmp_path, monkeypatch)
    monkeypatch.setenv("RERANK_MODEL", "model-of-the-environment")
    monkeypatch.setenv("QDRANT_URL", "http://env-qdrant:6333")
    given = Settings(model="model-given", base_url="http://given:8080/v1")
    analyse.write(dp, analyse.run(dp, FAST, given))
    back = json.loads(dp.manifest.read_text(encoding="utf-8"))
    assert back["llm"]["model"] == "model-given" and back["llm"]["endpoint"] == "http://given:8080/v1"
    assert back["qdrant"]["mode"].startswith("embedded") and back["qdrant"]["url"] is None  # not the env's server
    assert "model-of-the-environment" not in json.dumps(back)


def test_settings_are_never_hidden_in_stage_05():
    for fn in (analyse.run, manifest.build_manifest):
        params = inspect.signature(fn).parameters
        assert "settings" in params and params["settings"].default is inspect.Parameter.empty, fn.__name__
    assert list(inspect.signature(analyse.run).parameters)[:3] == ["dp", "params", "settings"]
    assert list(inspect.signature(analyse.write).parameters) == ["dp", "a"]
