"""Embeddings from an OpenAI-compatible server (issue 36 item 3): batched, concurrent, retried, cached by the
server's model identity; every bad answer refused naming the setting; an index never searched with another
encoder's vectors. Faults come from tests/support/fakeembed.py; the real server: tests/index/test_embed_server.py."""

from __future__ import annotations

import json
import socket

import numpy as np
import pytest

from builders import extract_corpus, tiny_pdf_dataset
from fakeembed import FakeEmbed, fake_vector
from rerankeval import index
from rerankeval.core import paths
from rerankeval.core.settings import Settings, load_settings
from rerankeval.index import embed
from rerankeval.index.embed_remote import EmbeddingServerError, RemoteEmbedder
from roots import env_embeddings

TEXTS = [f"text number {i} about apt and dpkg" for i in range(10)]


def _settings(fake: FakeEmbed | None = None, **kw) -> Settings:
    base = {
        "embed_base_url": fake.base_url if fake else None,
        "embed_model": "fake-embed",
        "embed_batch": 2,
        "embed_concurrency": 3,
        "embed_max_retries": 2,
        "embed_timeout": 10,
    }
    return Settings(**{**base, **kw})


def _normed(text: str, dim: int = 8, seed: int = 0) -> np.ndarray:
    v = np.asarray(fake_vector(text, dim, seed), dtype=np.float32)
    return v / np.linalg.norm(v)


def test_batched_concurrent_ordered_normalised_and_cached(tmp_path):
    with FakeEmbed(delay=0.2) as fake:
        e = RemoteEmbedder(_settings(fake), progress=False, cache_root=tmp_path)
        v = e.encode([*TEXTS, TEXTS[0]])
        assert v.shape == (11, 8) and v.dtype == np.float32 and e.dim == 8
        np.testing.assert_allclose(v[:10], np.stack([_normed(t) for t in TEXTS]), atol=1e-6)
        np.testing.assert_array_equal(v[0], v[10])
        assert e.stats.encoded == 10 and fake.texts_sent == 1 + 10  # the probe, then each text once
        assert max(len(i) for i in fake.inputs[1:]) == 2 and fake.max_in_flight >= 2  # EMBED_BATCH, EMBED_CONCURRENCY
        again = RemoteEmbedder(_settings(fake), progress=False, cache_root=tmp_path)
        np.testing.assert_array_equal(again.encode(list(reversed(TEXTS))), v[:10][::-1])
        assert again.stats.cached == 10 and fake.texts_sent == 1 + 10 + 1  # only the second probe
        assert again.key == e.key and json.loads((e.cache.root / "model.json").read_text())["endpoint"] == (
            fake.base_url
        )
    local = embed.Embedder(cache_root=tmp_path, progress=False)
    with FakeEmbed(model="other") as other:
        assert (
            len(
                {
                    e.key,
                    local.key,
                    RemoteEmbedder(_settings(other, embed_model="other"), progress=False, cache_root=tmp_path).key,
                }
            )
            == 3
        )


def test_retries_429_and_5xx_then_succeeds(tmp_path):
    script = [None, {"status": 429, "headers": {"Retry-After": "0"}}, {"status": 503, "headers": {"Retry-After": "0"}}]
    with FakeEmbed(script) as fake:
        e = RemoteEmbedder(_settings(fake, embed_concurrency=1), progress=False, cache_root=tmp_path)
        v = e.encode(TEXTS[:2])
        np.testing.assert_allclose(v, np.stack([_normed(t) for t in TEXTS[:2]]), atol=1e-6)
        assert len(fake.inputs) == 4  # probe, 429, 503, success


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_an_endpoint_that_is_down_is_named_without_its_password(tmp_path):
    url = f"http://u:secretpw@127.0.0.1:{_free_port()}/v1"
    with pytest.raises(EmbeddingServerError) as err:
        RemoteEmbedder(_settings(embed_base_url=url, embed_max_retries=0), progress=False, cache_root=tmp_path)
    msg = str(err.value)
    assert "cannot be reached" in msg and "EMBED_BASE_URL=http://127.0.0.1:" in msg and "secretpw" not in msg
    assert "nothing was written to the index" in msg


@pytest.mark.parametrize(
    "action, words",
    [
        ({"fewer": 1}, r"returned 1 vectors for 2 texts .*EMBED_BATCH \(now 2\)"),
        ({"dim": 5}, r"dimension 5 for EMBED_MODEL='fake-embed', expected 8 \(the dimension of its first reply\)"),
        ({"nan": True}, r"non-finite or all-zero vector"),
        ({"status": 404}, r"HTTP 404.*set EMBED_MODEL to a model the server serves"),
        ({"delay": 3}, r"did not answer within EMBED_TIMEOUT=1 s"),
    ],
)
def test_a_bad_batch_is_refused_naming_the_setting_and_nothing_is_half_cached(tmp_path, action, words):
    with FakeEmbed([None, None, action]) as fake:
        e = RemoteEmbedder(
            _settings(fake, embed_concurrency=1, embed_max_retries=0, embed_timeout=1),
            progress=False,
            cache_root=tmp_path,
        )
        with pytest.raises(EmbeddingServerError, match=words):
            e.encode(TEXTS[:4])
        # the first batch succeeded and is kept; the bad one is not cached
        assert e.all_cached(TEXTS[:4]) is False
        assert sum(e.all_cached([t]) for t in TEXTS[:4]) == 2


def test_wrong_key_unknown_model_and_embed_dim_are_named(tmp_path):
    with FakeEmbed(key="ek-right-0001") as fake:
        with pytest.raises(EmbeddingServerError, match=r"refused the key \(HTTP 401\): fix EMBED_API_KEY"):
            RemoteEmbedder(_settings(fake, embed_api_key="ek-wrong-0002"), progress=False, cache_root=tmp_path)
        s = _settings(fake, embed_api_key="ek-right-0001")
        with pytest.raises(EmbeddingServerError, match=r"EMBED_MODEL='nope'.*HTTP 404"):
            RemoteEmbedder(s.model_copy(update={"embed_model": "nope"}), progress=False, cache_root=tmp_path)
        with pytest.raises(EmbeddingServerError, match=r"dimension 8 .*expected 16 \(EMBED_DIM\)"):
            RemoteEmbedder(s.model_copy(update={"embed_dim": 16}), progress=False, cache_root=tmp_path)
    with pytest.raises(EmbeddingServerError, match="EMBED_MODEL is not"):
        RemoteEmbedder(Settings(embed_base_url="http://127.0.0.1:9/v1"), progress=False, cache_root=tmp_path)


@pytest.mark.parametrize("first_run_fails", [False, True])
def test_a_model_changed_between_runs_is_refused(tmp_path, first_run_fails):
    """Also when the first run stopped half-way: its cached batches are the old model's."""
    with FakeEmbed([None, None, {"status": 500}] if first_run_fails else None) as fake:
        first = RemoteEmbedder(
            _settings(fake, embed_concurrency=1, embed_max_retries=0), progress=False, cache_root=tmp_path
        )
        if first_run_fails:
            with pytest.raises(EmbeddingServerError, match="HTTP 500"):
                first.encode(TEXTS[:4])
            assert sum(first.all_cached([t]) for t in TEXTS[:4]) == 2
        else:
            first.encode(TEXTS[:3])
        fake.seed = 1  # the server now serves another model under the same name and dimension
        with pytest.raises(EmbeddingServerError, match=r"the model changed between runs: EMBED_MODEL='fake-embed'"):
            RemoteEmbedder(_settings(fake), progress=False, cache_root=tmp_path)


@pytest.fixture
def tiny(tmp_path, monkeypatch):
    monkeypatch.setenv("RERANKEVAL_CACHE", str(tmp_path / "cache"))
    monkeypatch.delenv("QDRANT_URL", raising=False)
    dp = paths.resolve_dataset(tiny_pdf_dataset(tmp_path / "tiny"), load_settings())
    extract_corpus(dp)
    return dp


def test_index_built_through_the_server_and_mixed_encoders_refused(tiny):
    dp = tiny
    with FakeEmbed(dim=16) as fake:
        s = _settings(fake)
        built = index.run(
            dp, index.Params(), s, embedder=index.open_embedder(None, settings=s, progress=False, cache=dp.roots.cache)
        )
        index.write(dp, built)
        info = built.info
        assert info.dim == 16 and info.embedder["kind"] == "server" and fake.base_url in info.embedder["describe"]
        assert index.load_index_info(dp).model_key == info.model_key
        same = RemoteEmbedder(s, progress=False, cache_root=env_embeddings())
        index.check_embedder(info, same)  # the same encoder: accepted
        local = index.open_embedder(None, settings=Settings(), progress=False, cache=dp.roots.cache)
        with pytest.raises(index.EmbedderMismatch) as err:
            index.check_embedder(index.load_index_info(dp), local)
        msg = str(err.value)
        assert f"fake-embed served at {fake.base_url}" in msg and "all-MiniLM-L6-v2 (in-process)" in msg
        with pytest.raises(index.EmbedderMismatch, match="two encoders given"):
            index.open_embedder("/some/model", settings=s, progress=False, cache=dp.roots.cache)


def test_a_failed_encode_leaves_the_previous_index_whole(tiny):
    dp = tiny
    with FakeEmbed(dim=16) as fake:
        first = index.run(
            dp,
            index.Params(),
            load_settings(),
            embedder=RemoteEmbedder(_settings(fake), progress=False, cache_root=env_embeddings()),
        )
        index.write(dp, first)
        manifest = dp.index_manifest.read_bytes()
    with FakeEmbed(dim=16, model="fake-embed-2", rule=lambda n, body: {"status": 500} if n == 2 else None) as two:
        emb = RemoteEmbedder(
            _settings(two, embed_model="fake-embed-2", embed_max_retries=0), progress=False, cache_root=env_embeddings()
        )
        with pytest.raises(EmbeddingServerError, match="HTTP 500"):
            index.run(dp, index.Params(), load_settings(), embedder=emb)
    assert dp.index_manifest.read_bytes() == manifest  # nothing half-written: the old index still stands
    assert index.load_index_info(dp).collection == first.info.collection


def test_stage_03_encodes_queries_through_the_server_that_built_the_index(tiny, monkeypatch):
    """The retriever opens the configured encoder (rerankeval.index.encoder.open_embedder) and refuses another's."""
    from rerankeval.retrieve.retriever import Retriever

    dp = tiny
    queries = {"n1": "a question never encoded about alpha", "n2": "and one about beta packages"}
    with FakeEmbed(dim=16) as fake:
        monkeypatch.setenv("EMBED_BASE_URL", fake.base_url)
        monkeypatch.setenv("EMBED_MODEL", "fake-embed")
        index.write(dp, index.run(dp, index.Params(), load_settings()))
        sent = fake.texts_sent
        with Retriever(dp, load_settings(), progress=False) as r:
            run = r.dense_leg(queries, 5)
        assert set(run) == set(queries) and all(run.values())
        assert fake.texts_sent == sent + 1 + len(queries)  # the probe, then each query once
        monkeypatch.delenv("EMBED_BASE_URL")
        with pytest.raises(index.EmbedderMismatch, match=r"fake-embed served at .*all-MiniLM-L6-v2 \(in-process\)"):
            Retriever(dp, load_settings(), progress=False)
