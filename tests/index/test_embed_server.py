"""Embeddings through a real server on this machine (issue 36 item 3): Infinity (``infinity-emb``, installed once by
``make embed-server`` in its own venv) serving the bundled all-MiniLM-L6-v2 folder gives the vectors of the
in-process encoder (cosine >= 0.999 per text) and so the same top 10 per query; skipped, saying how to set it up,
when the server is not installed or does not start."""

from __future__ import annotations

import random

import numpy as np
import pytest

from rerankeval.core.settings import Settings
from rerankeval.index import embed, embed_server
from rerankeval.index.embed_remote import RemoteEmbedder
from roots import env_roots

pytestmark = pytest.mark.slow

WORDS = (
    "package install upgrade remove configure kernel module boot loader grub disk partition mount filesystem "
    "network interface address route firewall service daemon systemd journal log user group password sudo "
    "permission file directory archive mirror repository source key signature release security update"
).split()


def corpus(n: int, seed: int = 7) -> list[str]:
    rng = random.Random(seed)
    return [f"{i}. " + " ".join(rng.choice(WORDS) for _ in range(rng.randint(8, 60))) for i in range(n)]


@pytest.fixture(scope="module")
def server():
    try:
        with embed_server.serve(env_roots().cache) as base_url:
            yield base_url
    except embed_server.EmbedServerUnavailable as exc:
        pytest.skip(f"no local embeddings server: {exc}")


def _top10(q: np.ndarray, d: np.ndarray) -> list[list[int]]:
    return np.argsort(-(q @ d.T), axis=1, kind="stable")[:, :10].tolist()


def test_served_vectors_give_the_in_process_top_10(server, tmp_path):
    docs, queries = corpus(300), [" ".join(random.Random(q).sample(WORDS, 4)) for q in range(40)]
    local = embed.Embedder(cache_root=tmp_path / "local", progress=False)
    s = Settings(embed_base_url=server, embed_model=embed_server.SERVED_NAME, embed_batch=16, embed_concurrency=2)
    remote = RemoteEmbedder(s, progress=False, cache_root=tmp_path / "remote")
    assert remote.dim == local.dim == 384 and remote.key != local.key
    d_local, d_remote = local.encode(docs), remote.encode(docs)
    q_local, q_remote = local.encode(queries), remote.encode(queries)
    cos = np.sum(np.vstack([d_local, q_local]) * np.vstack([d_remote, q_remote]), axis=1)
    assert cos.min() >= 0.999, f"lowest cosine {cos.min():.6f}"
    assert _top10(q_remote, d_remote) == _top10(q_local, d_local)
    assert remote.stats.encoded == len(queries) and RemoteEmbedder(
        s, progress=False, cache_root=tmp_path / "remote"
    ).all_cached(docs)
