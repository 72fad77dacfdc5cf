"""Sentinel secrets passed in code (Settings built in code, not the environment) never reach an output."""

from __future__ import annotations

import pytest

from fakellm import FakeLLM, make_inputs
from rerankeval import rerank
from rerankeval.core.paths import resolve_dataset
from rerankeval.core.settings import Settings, redact
from rerankeval.evaluate import manifest
from rerankeval.index.qdrant import store as qdrant_store

KEY = "sk-SENTINEL-llm-key-0123456789"
QD_PASSWORD = "SENTINEL-qdrant-password-42"
QD_KEY = "SENTINEL-qdrant-key-77"
QD_TOKEN = "SENTINEL-qdrant-token-99"
SENTINELS = (KEY, QD_PASSWORD, QD_KEY, QD_TOKEN, "SENTINEL")


def _settings(base_url: str) -> Settings:
    return Settings(base_url=base_url, api_key=KEY, model="fake-reranker", timeout=2, max_retries=0,
                    qdrant_url=f"http://admin:{QD_PASSWORD}@qdrant.test:6333/?token={QD_TOKEN}",
                    qdrant_api_key=QD_KEY)


def _clean(text: str) -> None:
    assert not [s for s in SENTINELS if s in text], text


@pytest.mark.filterwarnings("ignore:Api key is used with an insecure connection")
def test_sentinels_in_code_reach_no_output(tmp_path):
    echo = {"status": 401, "message": f"invalid key {KEY} for {QD_PASSWORD}"}  # an endpoint echoing secrets
    with FakeLLM(rule=lambda n, b: echo) as fake:
        s = _settings(fake.base_url)
        fused, queries, texts = make_inputs(n_queries=2, n_docs=6, gold=(2,))
        result = rerank.rerank_run(fused, queries, texts, rerank.RerankConfig(mode="listwise", window=5, step=5),
                                   pool_k=5, settings=s, cache=rerank.LLMCache(tmp_path / "llm"), progress=False)
    (tmp_path / "ds").mkdir()
    dp = resolve_dataset(str(tmp_path / "ds"))
    written = rerank.write_outputs(dp, result, s)
    man = manifest.build_manifest(dp, settings=s)
    written["manifest"] = manifest.write_manifest(dp, man, s)
    assert man["qdrant"]["url"] == "http://qdrant.test:6333/?token=[REDACTED]"
    loc = qdrant_store.location(dp, settings=s)
    texts_out = [p.read_text(encoding="utf-8") for p in written.values()]
    texts_out += [repr(s), str(s), loc.describe(), repr(loc), result.ledger.to_csv()]
    texts_out.append(redact(f"an executed notebook echoing {s.qdrant_url}, {KEY}, {QD_KEY}"))
    with pytest.raises(qdrant_store.QdrantUnavailable) as err:
        with qdrant_store.open_client(dp, settings=s, timeout=1):
            pass
    texts_out.append(str(err.value))
    for text in texts_out:
        _clean(text)
    assert "qdrant.test:6333" in str(err.value) and "qdrant.test:6333" in loc.describe()
