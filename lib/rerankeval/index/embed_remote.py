"""Embeddings from an OpenAI-compatible ``/v1/embeddings`` server (``EMBED_BASE_URL``), through the same cache.

Any server that speaks OpenAI's embeddings API works: vLLM, Text Embeddings Inference, Infinity, Ollama, OpenAI.
:class:`RemoteEmbedder` is a :class:`~rerankeval.index.embed.CachedEncoder`: texts already in the embedding cache
are never sent; the others go out in batches of ``EMBED_BATCH`` texts, ``EMBED_CONCURRENCY`` requests at a time
(threads), with the progress bar the in-process encoder shows. The ``openai`` client retries 408/409/429/5xx,
timeouts and refused connections ``EMBED_MAX_RETRIES`` times with exponential backoff, honouring ``Retry-After``.

**Identity.** On opening, one probe request (one short text) learns the dimension. The cache key hashes the model
name (``EMBED_MODEL``), the URL without credentials and that dimension, so a server's vectors never mix with the
in-process model's or another server's. The cache folder's ``model.json`` keeps the probe's vector; when the same
name at the same URL later answers the probe with another vector (cosine below :data:`SAME_MODEL_COSINE`) the
model was changed behind the name, and encoding is refused before anything is written.

**Refused, with the setting to fix named:** a server that cannot be reached, a refused key, an unknown model,
fewer (or more) vectors than texts, a vector of another dimension than the probe's (or ``EMBED_DIM``), a
non-finite or zero vector. A batch that fails leaves the index untouched (stage 02 upserts only once every text
is encoded); the batches that succeeded stay in the cache, so the next run sends only the rest. Vectors are
L2-normalised here (cosine = dot product), as the in-process encoder's are.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from concurrent.futures import FIRST_EXCEPTION, Future, ThreadPoolExecutor, wait
from pathlib import Path
from typing import Any

import numpy as np

from rerankeval.core.errors import ReRankEvalError
from rerankeval.core.ioutil import atomic_write_json, sha256_json
from rerankeval.core.progress import Progress
from rerankeval.core.settings import Settings, redact
from rerankeval.index.embed import CACHE_FORMAT, CachedEncoder, EmbeddingCache, EncodeStats

PROBE_TEXT = "ReRankEval embedding probe: which model answers?"
SAME_MODEL_COSINE = 0.999  # a probe vector at least this close to the recorded one is the same model


class EmbeddingServerError(ReRankEvalError, RuntimeError):
    """The embeddings server could not be used; the message names the setting to fix."""


class RemoteEmbedder(CachedEncoder):
    """Encode texts with the model ``settings.embed_model`` served at ``settings.embed_base_url``, through the cache.

    ``client``: an ``openai.OpenAI`` to use instead of one made from the settings (tests).
    """

    kind = "server"

    def __init__(
        self,
        settings: Settings,
        *,
        progress: bool = True,
        shard_size: int = 256,
        cache_root: str | Path,
        client: Any = None,
    ):
        if not settings.embed_base_url:
            raise EmbeddingServerError(
                "no embeddings server configured: set EMBED_BASE_URL (and EMBED_MODEL) in "
                ".env or the environment, or leave both unset to encode in-process"
            )
        if not settings.embed_model:
            raise EmbeddingServerError(
                f"EMBED_BASE_URL is set ({settings.embed_endpoint}) but EMBED_MODEL is not: set EMBED_MODEL to the "
                f"name the server serves the model under (GET {settings.embed_endpoint}/models lists them)"
            )
        self.settings = settings
        self.progress = progress
        self.shard_size = shard_size
        self.model_id = settings.embed_model
        self.endpoint = settings.embed_endpoint
        self._client = client
        self._lock = threading.Lock()
        self.stats = EncodeStats()
        probe = self._request([PROBE_TEXT], expect_dim=settings.embed_dim)[0]
        self._dim = int(probe.shape[0])
        self._ident = {
            "kind": self.kind,
            "model": self.model_id,
            "endpoint": self.endpoint,
            "dim": self._dim,
            "normalize": True,
            "format": CACHE_FORMAT,
        }
        self.key = sha256_json(self._ident)[:20]
        self._ident["probe"] = probe.tolist()
        root = Path(cache_root)
        self.cache = EmbeddingCache(root / self.key)
        self._check_same_model(probe)

    # -- what the cache and the manifest know --
    @property
    def loaded(self) -> bool:
        return True  # nothing to load: the probe has answered

    @property
    def dim(self) -> int:
        return self._dim

    @property
    def model(self) -> Any:
        """The ``openai`` client (what a caller that pre-loads an in-process model touches: nothing to load here)."""
        return self.client

    def describe(self) -> str:
        return f"{self.model_id} served at {self.endpoint} (EMBED_BASE_URL)"

    def record(self) -> dict:
        return {**super().record(), "endpoint": self.endpoint, "dim": self._dim}

    def _check_same_model(self, probe: np.ndarray) -> None:
        """Refuse a model changed behind the same name since the cache was filled (its probe vector differs)."""
        import json

        try:
            before = json.loads((self.cache.root / "model.json").read_text(encoding="utf-8")).get("probe")
        except (OSError, ValueError):
            return
        if before is None or len(before) != len(probe):
            return
        cos = float(np.dot(np.asarray(before, dtype=np.float32), probe))
        if cos < SAME_MODEL_COSINE:
            raise EmbeddingServerError(
                f"the model changed between runs: EMBED_MODEL={self.model_id!r} at EMBED_BASE_URL={self.endpoint} "
                f"now answers the probe text with another vector than when the embedding cache {self.cache.root} "
                f"was filled (cosine {cos:.4f} < {SAME_MODEL_COSINE}). Serve the new model under its own name and "
                "set EMBED_MODEL to it, or delete that cache folder to re-encode everything with the new model."
            )

    # -- requests --
    @property
    def client(self) -> Any:
        """The ``openai`` client, made on first use (``openai`` is imported only when a server is configured)."""
        with self._lock:
            if self._client is None:
                import openai

                s = self.settings
                self._client = openai.OpenAI(
                    base_url=s.embed_base_url,
                    api_key=s.embed_api_key or "sk-no-key",
                    timeout=s.embed_timeout,
                    max_retries=s.embed_max_retries,
                )
            return self._client

    def _request(self, texts: Sequence[str], *, expect_dim: int | None) -> np.ndarray:
        """One embeddings request: the vectors of ``texts`` in order, checked and L2-normalised."""
        try:
            resp = self.client.embeddings.create(model=self.model_id, input=list(texts), encoding_format="float")
        except Exception as exc:  # noqa: BLE001 - every client error becomes one message naming the setting
            raise EmbeddingServerError(self._explain(exc)) from None
        data = sorted(getattr(resp, "data", None) or [], key=lambda d: d.index)
        if len(data) != len(texts):
            raise EmbeddingServerError(
                f"the embeddings server at EMBED_BASE_URL={self.endpoint} returned {len(data)} vectors for "
                f"{len(texts)} texts (EMBED_MODEL={self.model_id!r}): a server that caps the inputs per request "
                f"needs a smaller EMBED_BATCH (now {self.settings.embed_batch}); nothing was written to the index"
            )
        vecs = _matrix([d.embedding for d in data], self, expect_dim)
        norms = np.linalg.norm(vecs, axis=1, keepdims=True)
        if not np.isfinite(vecs).all() or (norms == 0).any():
            raise EmbeddingServerError(
                f"the embeddings server at EMBED_BASE_URL={self.endpoint} returned a non-finite or all-zero vector "
                f"(EMBED_MODEL={self.model_id!r}): check the server's model; nothing was written to the index"
            )
        return (vecs / norms).astype(np.float32)

    def _explain(self, exc: Exception) -> str:
        """What went wrong with a request, naming the setting that fixes it (credentials redacted)."""
        import openai

        where = f"the embeddings server at EMBED_BASE_URL={self.endpoint}"
        status = getattr(exc, "status_code", None)
        tries = f"after {self.settings.embed_max_retries} retries (EMBED_MAX_RETRIES)"
        if isinstance(exc, openai.APITimeoutError):
            msg = (
                f"{where} did not answer within EMBED_TIMEOUT={self.settings.embed_timeout:g} s {tries}: start or "
                "scale the server, or raise EMBED_TIMEOUT / lower EMBED_BATCH"
            )
        elif isinstance(exc, openai.APIConnectionError):
            msg = (
                f"{where} cannot be reached {tries} ({type(exc).__name__}: {exc}): start the server, or fix "
                "EMBED_BASE_URL in .env or the environment, or unset it to encode in-process"
            )
        elif status in (401, 403):
            msg = f"{where} refused the key (HTTP {status}): fix EMBED_API_KEY in .env or the environment"
        elif status in (400, 404, 422):
            msg = (
                f"{where} refused the request for EMBED_MODEL={self.model_id!r} (HTTP {status}: {exc}): set "
                f"EMBED_MODEL to a model the server serves (GET {self.endpoint}/models lists them)"
            )
        elif status is not None:
            msg = f"{where} answered HTTP {status} {tries} ({exc}): check the server's log"
        else:
            msg = f"{where} gave an unusable answer ({type(exc).__name__}: {exc}): check EMBED_BASE_URL"
        return redact(msg + "; nothing was written to the index.", [self.settings.embed_api_key])

    # -- encoding --
    def _encode_missing(self, missing: dict[str, str], have: dict[str, np.ndarray], desc: str) -> None:
        """Send the missing texts in batches, ``EMBED_CONCURRENCY`` at a time; cache each shard as it completes."""
        atomic_write_json(self.cache.root / "model.json", self._ident)  # the probe, before any shard it vouches for
        order = sorted(missing, key=lambda h: -len(missing[h]))  # similar lengths share a batch (less padding)
        size = self.settings.embed_batch
        batches = [order[i : i + size] for i in range(0, len(order), size)]
        done: list[str] = []
        mode = None if self.progress else "off"
        with (
            Progress(len(order), desc=desc, unit="text", mode=mode) as bar,
            ThreadPoolExecutor(self.settings.embed_concurrency, thread_name_prefix="embed") as pool,
        ):
            futures: dict[Future, list[str]] = {
                pool.submit(self._request, [missing[h] for h in b], expect_dim=self._dim): b for b in batches
            }
            pending = set(futures)
            try:
                while pending:
                    finished, pending = wait(pending, return_when=FIRST_EXCEPTION)
                    failed = [f for f in finished if f.exception() is not None]
                    for fut in finished - set(failed):
                        batch = futures[fut]
                        have.update(zip(batch, fut.result(), strict=True))
                        done.extend(batch)
                        bar.update(len(batch))
                    done = self._store_full_shards(done, have)
                    if failed:
                        raise failed[0].exception()
            finally:
                for fut in pending:
                    fut.cancel()
                if done:  # what succeeded is kept: the next run sends only the rest
                    self.cache.store(done, np.stack([have[h] for h in done]))

    def _store_full_shards(self, done: list[str], have: dict[str, np.ndarray]) -> list[str]:
        """Store every full shard of ``done``; return what is left over."""
        while len(done) >= self.shard_size:
            shard, done = done[: self.shard_size], done[self.shard_size :]
            self.cache.store(shard, np.stack([have[h] for h in shard]))
        return done


def _matrix(rows: list[Any], emb: RemoteEmbedder, expect_dim: int | None) -> np.ndarray:
    """The reply's vectors as one float32 matrix, each of the expected dimension (else a message naming it)."""
    dims = sorted({len(r) for r in rows})
    want = expect_dim if expect_dim is not None else dims[0] if dims else 0
    if dims and dims != [want]:
        because = (
            "EMBED_DIM"
            if emb.settings.embed_dim and expect_dim == emb.settings.embed_dim
            else "the dimension of its first reply"
        )
        raise EmbeddingServerError(
            f"the embeddings server at EMBED_BASE_URL={emb.endpoint} returned vectors of dimension "
            f"{', '.join(map(str, dims))} for EMBED_MODEL={emb.model_id!r}, expected {want} ({because}): the server "
            "serves another model than before, or EMBED_DIM is wrong; fix EMBED_MODEL / EMBED_DIM. Nothing was "
            "written to the index."
        )
    return np.asarray(rows, dtype=np.float32).reshape(len(rows), want)
