"""Resumability: a run killed mid-way resumes from what it finished, and never uses a partial artefact.

Real processes for the two expensive caches: a child process encodes texts through the embedding cache
(or reranks queries against the fake LLM server) and is SIGKILLed once its first cache entries are on
disk; the re-run must reuse exactly those entries, compute only the rest, and end with the same output as
an uninterrupted run. In-process crashes (a ``BaseException`` raised between two writes) cover the index
and corpus stages, and monkeypatched failures cover ``rerankeval.core.ioutil.atomic_write_*``.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from builders import extract_corpus, tiny_pdf_dataset
from fakellm import FakeLLM, make_inputs
from indexing import build_index
from rerank_data import rerank_made
from rerankeval.core import ioutil, paths, runs
from rerankeval.core.ioutil import sha256_file, sha256_text
from rerankeval.core.settings import Settings, load_settings
from rerankeval.corpus import contract as corpus
from rerankeval.corpus import stage as corpus_stage
from rerankeval.index import embed
from rerankeval.index.qdrant import store as qdrant_store
from rerankeval.llm.cache import LLMCache
from rerankeval.rerank.config import Params
from roots import env_embeddings, env_roots

SUPPORT = Path(__file__).resolve().parents[2] / "support"  # tests/support, for the child process
SHARD = 8
N_TEXTS = 48  # six shards of eight
ENTRY = re.compile(r"^[0-9a-f]{32}\.npz$")  # an embedding shard, as EmbeddingCache.store names it
WORDS = (
    "apt dpkg kernel grub network mail cache log upgrade config service daemon socket "
    "package mirror release security backport firmware driver"
).split()


class Crash(BaseException):
    """Stands for the process dying between two writes (not an Exception: nothing may swallow it)."""


@pytest.fixture(scope="module")
def minilm():
    """The bundled all-MiniLM-L6-v2, loaded once in this process (memoised by rerankeval.index.embed)."""
    return embed.load_sentence_transformer(str(embed.bundled_model_path()), "cpu")


def _texts() -> list[str]:
    # distinct lengths: the encode order (longest first) and so the shards are fully determined
    return [f"passage {i}: " + " ".join(WORDS[(i + j) % len(WORDS)] for j in range(3 + i)) for i in range(N_TEXTS)]


def _child_env(cache: Path) -> dict[str, str]:
    env = dict(os.environ)
    env.update(
        {
            "RERANKEVAL_CACHE": str(cache),
            "HF_HUB_OFFLINE": "1",
            "TOKENIZERS_PARALLELISM": "false",
            "PYTHONUNBUFFERED": "1",
            "OMP_NUM_THREADS": "1",
        }
    )
    return env


def _kill_when(proc: subprocess.Popen, ready, what: str, timeout: float = 120.0):
    """Poll until ``ready()`` is truthy, then SIGKILL the child; returns what ``ready`` returned."""
    t_end = time.monotonic() + timeout
    while time.monotonic() < t_end:
        got = ready()
        if got:
            proc.send_signal(signal.SIGKILL)
            proc.wait(timeout=30)
            return got
        if proc.poll() is not None:
            out, err = proc.communicate()
            pytest.fail(f"the child finished before {what} (rc {proc.returncode}):\n{out}\n{err[-3000:]}")
        time.sleep(0.005)
    proc.kill()
    proc.wait()
    pytest.fail(f"timed out waiting for {what}")


# --------------------------------------------------------------------------- embeddings
EMBED_CHILD = r"""
import sys, time
from rerankeval.core.paths import Roots
from rerankeval.core.settings import load_settings
from rerankeval.index import embed
model = embed.load_sentence_transformer(str(embed.bundled_model_path()), "cpu")
encode = model.encode
def slow_encode(*a, **kw):  # a slow model: each shard takes a while, so the kill lands mid-run
    out = encode(*a, **kw)
    time.sleep(0.4)
    return out
model.encode = slow_encode
texts = [line.rstrip("\n") for line in open(sys.argv[1], encoding="utf-8")]
cache, shard = embed.embeddings_root(Roots.of(load_settings()).cache), int(sys.argv[2])
e = embed.Embedder(model_obj=model, progress=False, shard_size=shard, batch_size=shard, cache_root=cache)
e.encode(texts)
print("DONE", flush=True)
"""


def test_embedding_cache_survives_sigkill_and_resumes(tmp_path, monkeypatch, minilm):
    cache = tmp_path / "cache"
    monkeypatch.setenv("RERANKEVAL_CACHE", str(cache))
    texts = _texts()
    (tmp_path / "texts.txt").write_text("".join(t + "\n" for t in texts), encoding="utf-8")
    root = embed.Embedder(
        progress=False, cache_root=env_embeddings()
    ).cache.root  # <cache>/embeddings/<model key>; nothing loaded
    proc = subprocess.Popen(
        [sys.executable, "-c", EMBED_CHILD, str(tmp_path / "texts.txt"), str(SHARD)],
        env=_child_env(cache),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    _kill_when(proc, lambda: list(root.glob("*.npz")), "the first embedding shard was written")
    out, _ = proc.communicate()
    assert proc.returncode == -signal.SIGKILL and "DONE" not in out

    # what the killed run left: complete, verified shards only (the reader's own check deletes bad ones)
    before = {p.name: p.stat().st_mtime_ns for p in root.glob("*.npz")}
    assert 1 <= len(before) < N_TEXTS // SHARD, before
    hashes = [sha256_text(t) for t in texts]
    done = embed.EmbeddingCache(root).lookup(set(hashes))
    assert {p.name for p in root.glob("*.npz")} == set(before)  # none was corrupt
    assert len(done) == SHARD * len(before)
    assert not (root / "model.json").exists()  # written only after a complete encode

    # a temp file as a kill in the middle of atomic_write_bytes would leave it: half an entry
    shard0 = root / sorted(before)[0]
    stray = root / f".{shard0.name}.k1ll3d.tmp"
    stray.write_bytes(shard0.read_bytes()[: shard0.stat().st_size // 2])

    # (a) the re-run completes, (b) encodes only what the killed run had not stored
    e = embed.Embedder(progress=False, shard_size=SHARD, batch_size=SHARD, cache_root=env_embeddings())
    v = e.encode(texts)
    assert (e.stats.cached, e.stats.encoded) == (len(done), N_TEXTS - len(done))
    for name, mtime in before.items():  # reused as they were, not rewritten
        assert (root / name).stat().st_mtime_ns == mtime

    # (c) the same vectors as an uninterrupted run in a fresh cache
    clean = embed.Embedder(cache_root=tmp_path / "fresh", progress=False, shard_size=SHARD, batch_size=SHARD)
    ref = clean.encode(texts)
    assert clean.stats.encoded == N_TEXTS
    assert v.shape == ref.shape == (N_TEXTS, 384)
    np.testing.assert_allclose(v, ref, atol=1e-6)

    # (d) no file a reader could take for an entry: entries, model.json, and hidden *.tmp the glob skips
    for p in root.iterdir():
        hidden_tmp = p.name.startswith(".") and p.name.endswith(".tmp")
        assert ENTRY.match(p.name) or p.name == "model.json" or hidden_tmp, p
    assert all(ENTRY.match(p.name) for p in root.glob("*.npz"))
    assert len(list(root.glob("*.npz"))) == N_TEXTS // SHARD

    # a truncated entry (a disk that lost the tail of a file) is recomputed, not a crash
    victim = root / sorted(before)[-1]
    victim.write_bytes(victim.read_bytes()[: victim.stat().st_size // 2])
    again = embed.Embedder(progress=False, shard_size=SHARD, batch_size=SHARD, cache_root=env_embeddings())
    v3 = again.encode(texts)
    assert (again.stats.cached, again.stats.encoded) == (N_TEXTS - SHARD, SHARD)
    np.testing.assert_allclose(v3, ref, atol=1e-6)
    with np.load(victim) as z:  # rewritten whole under the same name (same texts)
        assert len(z["hashes"]) == SHARD


# --------------------------------------------------------------------------- LLM reranking
N_QUERIES = 30
RERANK_CHILD = r"""
import sys
sys.path.insert(0, sys.argv[1])
from pathlib import Path
from fakellm import make_inputs
from rerank_data import stage03
from rerankeval import rerank
from rerankeval.core import runs
from rerankeval.core.settings import Settings
from rerankeval.rerank.config import Params
fused, queries, texts = make_inputs(n_queries=int(sys.argv[3]), n_docs=8, gold=(3,))
dp = stage03(Path(sys.argv[4]).parent / "child-ds", fused, queries, texts)
s = Settings(base_url=sys.argv[2], api_key="k", model="fake-reranker", timeout=10, max_retries=0)
res = rerank.run(dp, Params(mode="listwise", alpha=1.0, window=5, step=5, pool_k=5), s, progress=False)
runs.write_trec(res.run, sys.argv[4], "hybrid_rerank")
print("DONE", flush=True)
"""


def _rerank_in_process(fake: FakeLLM, cache: LLMCache):
    fused, queries, texts = make_inputs(n_queries=N_QUERIES, n_docs=8, gold=(3,))
    s = Settings(base_url=fake.base_url, api_key="k", model="fake-reranker", timeout=10, max_retries=0)
    params = Params(mode="listwise", alpha=1.0, window=5, step=5, pool_k=5)
    return rerank_made(cache.root.parent / "ds", fused, queries, texts, params, s, cache)


def _settled_count(fake: FakeLLM, quiet: float = 0.5) -> int:
    """The fake's request count once it has not changed for ``quiet`` seconds."""
    n, since = fake.count, time.monotonic()
    while time.monotonic() - since < quiet:
        time.sleep(0.05)
        if fake.count != n:
            n, since = fake.count, time.monotonic()
    return n


def _entries(root: Path) -> list[Path]:
    return [p for p in root.glob("*/*.json") if not p.name.startswith(".")]


def test_rerank_survives_sigkill_and_makes_only_the_remaining_calls(tmp_path, monkeypatch):
    cache = tmp_path / "cache"
    monkeypatch.setenv("RERANKEVAL_CACHE", str(cache))
    llm_root = LLMCache.under(env_roots().cache).root  # what the child's stage 04 uses: <RERANKEVAL_CACHE>/llm
    assert llm_root == cache / "llm"
    killed_out = tmp_path / "killed.trec"
    delay = {"s": 0.15}  # per request, so the run is slow enough to be killed mid-way
    with FakeLLM(rule=lambda n, body: {"delay": delay["s"]}) as fake:
        args = [str(SUPPORT), fake.base_url, str(N_QUERIES), str(killed_out)]
        proc = subprocess.Popen(
            [sys.executable, "-c", RERANK_CHILD, *args],
            env=_child_env(cache),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        _kill_when(proc, lambda: len(_entries(llm_root)) >= 5, "five LLM replies were cached")
        out, _ = proc.communicate()
        assert proc.returncode == -signal.SIGKILL and "DONE" not in out
        assert not killed_out.exists()  # no partial run file: outputs are written at the end, atomically

        entries = _entries(llm_root)
        assert 5 <= len(entries) < N_QUERIES
        for p in entries:  # every entry on disk is complete and is its key's
            assert json.loads(p.read_text(encoding="utf-8"))["key"] == p.stem
        sent_before = _settled_count(fake)  # a request already in a socket buffer is still counted
        assert sent_before >= len(entries)  # a request in flight at the kill has no entry: it is asked again

        delay["s"] = 0.0
        resumed = _rerank_in_process(fake, LLMCache(llm_root))
        made = fake.count - sent_before
        assert made == N_QUERIES - len(entries)  # only the remaining calls
        led = resumed.ledger
        assert int(led.cache_hits.sum()) == len(entries) and int(led.requests.sum()) == made
        assert set(led.status) == {"ok"}

        n = fake.count
        clean = _rerank_in_process(fake, LLMCache(tmp_path / "fresh" / "llm"))
        assert fake.count - n == N_QUERIES
    a = runs.write_trec(resumed.run, tmp_path / "resumed.trec", "hybrid_rerank")
    b = runs.write_trec(clean.run, tmp_path / "clean.trec", "hybrid_rerank")
    assert a.read_bytes() == b.read_bytes()
    assert len(_entries(llm_root)) == N_QUERIES
    stray = [p for p in llm_root.rglob("*") if p.is_file() and not p.name.endswith(".json")]
    assert all(p.name.startswith(".") and p.name.endswith(".tmp") for p in stray)  # never read as entries


# --------------------------------------------------------------------------- index stage (in-process crash)
def test_index_stage_crash_mid_upsert_resumes_from_finished_steps(tmp_path, monkeypatch, minilm):
    monkeypatch.setenv("RERANKEVAL_CACHE", str(tmp_path / "cache"))
    monkeypatch.delenv("QDRANT_URL", raising=False)
    monkeypatch.setenv("RERANKEVAL_QDRANT_BACKEND", "client")  # the crash is injected into the client store's upsert
    dp = paths.resolve_dataset(tiny_pdf_dataset(tmp_path / "tiny"), load_settings())
    extract_corpus(dp, chunk_size=120, chunk_overlap=30)
    real = qdrant_store.upsert_chunks

    def upsert_then_die(client, name, ids, units, dense, sparse, **kw):
        half = len(ids) // 2
        real(client, name, ids[:half], units[:half], dense[:half], sparse[:half], **kw)
        raise Crash

    monkeypatch.setattr(qdrant_store, "upsert_chunks", upsert_then_die)
    with pytest.raises(Crash):
        build_index(dp)
    assert not dp.index_manifest.exists()  # the completion marker is written last
    monkeypatch.setattr(qdrant_store, "upsert_chunks", real)

    info = build_index(dp).info
    # BM25 and the embeddings finished before the crash: reused; the half-filled collection is completed
    assert info.actions["bm25"] == "loaded" and info.actions["embeddings"] == "cached"
    assert info.actions["qdrant"] == "upserted"
    with qdrant_store.open_client(dp, settings=load_settings()) as client:
        assert qdrant_store.point_count(client, info.collection) == info.n_chunks
        # a collection that lost points under a complete manifest is detected and refilled
        gone = [qdrant_store.point_id(c) for c in sorted(corpus.chunk_texts(dp))[:3]]
        client.delete(info.collection, points_selector=gone, wait=True)
        assert qdrant_store.point_count(client, info.collection) == info.n_chunks - 3
    again = build_index(dp).info
    assert again.actions["qdrant"] == "upserted" and again.actions["embeddings"] == "cached"
    with qdrant_store.open_client(dp, settings=load_settings()) as client:
        assert qdrant_store.point_count(client, again.collection) == again.n_chunks
    assert not build_index(dp).cold


# --------------------------------------------------------------------------- corpus stage (in-process crash)
def test_corpus_crash_between_writes_never_reuses_a_mixed_corpus(tiny_pdf, monkeypatch):
    dp = paths.resolve_dataset(tiny_pdf, load_settings())
    first = extract_corpus(dp)
    good = dp.chunks.read_bytes()
    real = corpus_stage.write_qrels

    def die(*a, **kw):
        raise Crash

    monkeypatch.setattr(corpus_stage, "write_qrels", die)
    with pytest.raises(Crash):  # new chunks.jsonl written, then the process dies before stats.json
        extract_corpus(dp, chunk_size=100, chunk_overlap=10)
    monkeypatch.setattr(corpus_stage, "write_qrels", real)
    assert dp.chunks.read_bytes() != good  # the half-finished run replaced the chunk table

    rep = extract_corpus(dp)  # back to the parameters stats.json describes
    assert rep.stats["corpus_hash"] == sha256_file(dp.chunks), "stats.json does not describe chunks.jsonl"
    assert dp.chunks.read_bytes() == good and rep.stats["chunks"] == first.stats["chunks"]


# --------------------------------------------------------------------------- atomic writes
WRITERS = [
    (ioutil.atomic_write_bytes, b"new bytes"),
    (ioutil.atomic_write_text, "new text"),
    (ioutil.atomic_write_json, {"new": 1}),
    (ioutil.atomic_write_jsonl, [{"new": 1}, {"new": 2}]),
]
IDS = ["bytes", "text", "json", "jsonl"]


def _boom(*a, **kw):
    raise OSError(28, "No space left on device (injected)")


@pytest.mark.parametrize("fail_at", ["os.replace", "os.fsync"])
@pytest.mark.parametrize(("writer", "payload"), WRITERS, ids=IDS)
def test_atomic_write_failure_keeps_the_old_file_and_no_temp(tmp_path, monkeypatch, writer, payload, fail_at):
    target = tmp_path / "out" / "artefact.dat"
    target.parent.mkdir()
    target.write_bytes(b"OLD complete content\n")
    fresh = tmp_path / "out" / "never-written.dat"
    with monkeypatch.context() as mp:
        mp.setattr(f"rerankeval.core.ioutil.{fail_at}", _boom)  # fsync: after the bytes went to the temp file
        with pytest.raises(OSError, match="injected"):
            writer(target, payload)
        with pytest.raises(OSError, match="injected"):
            writer(fresh, payload)
    assert target.read_bytes() == b"OLD complete content\n"
    assert sorted(p.name for p in target.parent.iterdir()) == ["artefact.dat"]  # no temp file, no new file
    writer(target, payload)  # and the same call succeeds once the fault is gone
    assert target.read_bytes() != b"OLD complete content\n"
    assert sorted(p.name for p in target.parent.iterdir()) == ["artefact.dat"]


def test_atomic_write_interrupted_mid_write_and_bad_rows(tmp_path, monkeypatch):
    target = tmp_path / "rows.jsonl"
    ioutil.atomic_write_jsonl(target, [{"a": 1}])
    old = target.read_bytes()

    # a row that cannot be serialised: nothing is written at all
    with pytest.raises(TypeError):
        ioutil.atomic_write_jsonl(target, [{"a": 2}, {"b": object()}])

    # a kill-like interrupt (BaseException) while the bytes are being written
    real_fdopen = os.fdopen

    class HalfWriter:
        def __init__(self, fh):
            self.fh = fh

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            self.fh.close()

        def write(self, data):
            self.fh.write(data[: len(data) // 2])
            raise Crash

    with monkeypatch.context() as mp, pytest.raises(Crash):
        mp.setattr(ioutil.os, "fdopen", lambda fd, mode: HalfWriter(real_fdopen(fd, mode)))
        ioutil.atomic_write_text(target, '{"a": 3}\n' * 100)
    assert target.read_bytes() == old and ioutil.read_jsonl(target) == [{"a": 1}]
    assert [p.name for p in tmp_path.iterdir()] == ["rows.jsonl"]
