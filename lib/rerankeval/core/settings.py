"""The one settings object: every variable the project reads, from the environment and ``<repo>/.env``.

Variables (the environment wins over ``.env``; an empty value counts as unset; see ``.env.example``):

- ``OPENAI_BASE_URL``: any OpenAI-compatible endpoint, e.g. ``https://api.openai.com/v1`` or a vLLM /
  llama-server URL ending in ``/v1``. Unset: :mod:`rerankeval.llm.server` starts the local llama-server.
- ``OPENAI_API_KEY``: the endpoint's key (a dummy value is fine for a local server).
- ``RERANK_MODEL``: the model name sent with each request (and the label of the reranker in reports).
- ``RERANK_ENDPOINT_ID``: optional stable identity of the endpoint for the reply cache; defaults to the
  base URL (the local server sets it, because its port changes on every start).
- ``RERANK_TIMEOUT`` (seconds per request, default 120) and ``RERANK_MAX_RETRIES`` (default 3): passed to
  the ``openai`` client, whose retries back off exponentially and honour ``Retry-After``.
- ``QDRANT_URL`` / ``QDRANT_API_KEY``: a Qdrant server instead of the embedded store.
- ``RERANKEVAL_LLAMA_THREADS``: threads of the local llama-server (default 2).
- ``RERANKEVAL_CROSS_ENCODER``: folder or cached model name of the cross-encoder.
- ``RERANKEVAL_CACHE``, ``RERANKEVAL_RESULTS``, ``RERANKEVAL_QDRANT_PATH``: where caches, results and the
  embedded Qdrant store live (:func:`Settings.roots` gives them with their defaults).
- ``RERANKEVAL_QDRANT_BACKEND``: the embedded store's engine, ``edge`` (qdrant-edge-py, Qdrant's own engine
  in-process, the default; its top 10s equal the client's on every dataset here: ``bench/backend_parity.py``) or
  ``client`` (qdrant-client's local mode); ``QDRANT_URL`` means a server (the client backend) unless ``edge`` is
  set explicitly, which is refused.
- ``RERANKEVAL_DENSE_EXACT``: ``true`` makes stage 03 score every dense vector on the edge backend too (unset or
  ``false``: Qdrant's HNSW above its indexing threshold, whose recall@10 stage 02 measures). A server and
  qdrant-client's local mode search exactly anyway.
- ``JUDGE_MODEL``, ``JUDGE_BASE_URL``, ``JUDGE_API_KEY``: the LLM assessor's model and endpoint (09-assess);
  unset, it asks the reranker's endpoint and model.
- ``EMBED_BASE_URL``, ``EMBED_API_KEY``, ``EMBED_MODEL``: an OpenAI-compatible ``/v1/embeddings`` endpoint (vLLM, Text
  Embeddings Inference, Infinity, Ollama, OpenAI) that encodes stage 02's chunks and stage 03's queries instead of
  the in-process sentence-transformers model (:mod:`rerankeval.index.embed_remote`); unset: in-process.
  ``EMBED_BATCH`` (texts per request, default 64), ``EMBED_CONCURRENCY`` (requests in flight, default 4),
  ``EMBED_TIMEOUT`` (seconds per request, default 60), ``EMBED_MAX_RETRIES`` (default 3; the ``openai`` client backs
  off on 429, 5xx, timeouts and refused connections) and ``EMBED_DIM`` (the dimension the model must return; unset:
  whatever its first reply has).
- ``RERANKEVAL_LLAMA_BACKEND``: how the local server is obtained, ``build`` (llama-server compiled for this CPU,
  the default; the prebuilt server stands in when it cannot be built or started) or ``wheel`` (the prebuilt,
  portable xllamacpp server: no compiler, slower prompts); the Makefile reads the same value.
- ``LOCAL_MODEL``: which local model the local server runs when ``OPENAI_BASE_URL`` is unset, one of
  :data:`LOCAL_MODELS` (default ``qwen2.5-coder-0.5b``); ``scripts/llama_setup.sh`` assembles and caches each.
- ``RERANKEVAL_PROGRESS``: how progress is shown on the terminal, ``bar``, ``plain`` or ``off``; unset, chosen
  from the stream (a program's entry point gives it to :func:`rerankeval.core.progress.configure`).
- ``RERANKEVAL_STAGE``: the notebook a chain kernel runs (set by the chain, not by hand): the explorer draws no
  interactive UI there (the chain also starts the kernel with it as its progress lines' prefix).

Code builds a :class:`Settings` with :func:`load_settings` (environment + ``.env``) or directly
(``Settings(base_url=..., api_key=...)`` reads nothing else) and passes it to what needs it. ``.env`` is read
by :mod:`rerankeval.core.envfile`, the one reader the Makefile also calls (``RERANKEVAL_CACHE=/x   # note`` is
``/x`` for both).

Secrets (API keys, passwords and tokens in URLs) never reach an output: pass any text that may hold one
through :func:`redact`. It scrubs the secrets of every :class:`Settings` built in this process, those of
the current environment and ``.env``, credentials in URLs, secret-looking query parameters and
well-known key shapes (``sk-...``, ``Bearer ...``).
"""

from __future__ import annotations

import functools
import os
import re
import threading
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any, Literal
from urllib.parse import unquote, urlsplit, urlunsplit

from pydantic import Field, ValidationError, ValidationInfo, field_validator
from pydantic_settings import BaseSettings, PydanticBaseSettingsSource, SettingsConfigDict

from rerankeval.core.credentials import scrub_basic, url_credential_forms
from rerankeval.core.envfile import read_env_file

ROOT = Path(__file__).resolve().parents[3]  # the repository (as rerankeval.core.paths.ROOT; no import cycle)
ENV_FILE = ROOT / ".env"
REDACTED = "[REDACTED]"
DEFAULT_LLAMA_THREADS = 2  # the 2-core reference machine; see rerankeval.llm.server
# the local models scripts/llama_setup.sh knows (its LOCAL_MODELS table; tests/llm/test_local_model.py keeps both equal)
LOCAL_MODELS = ("qwen2.5-coder-0.5b", "qwen2.5-coder-1.5b")
DEFAULT_LOCAL_MODEL = "qwen2.5-coder-0.5b"
_MIN_SECRET_LEN = 4  # shorter "keys" (e.g. "x") are placeholders; replacing them would mangle text
_URL_FIELDS = ("base_url", "qdrant_url", "judge_base_url", "embed_base_url")  # may hold user:password@
_KEY_FIELDS = ("api_key", "qdrant_api_key", "judge_api_key", "embed_api_key")

# field -> environment variable
FIELDS_ENV = {
    "base_url": "OPENAI_BASE_URL",
    "api_key": "OPENAI_API_KEY",
    "model": "RERANK_MODEL",
    "endpoint_id": "RERANK_ENDPOINT_ID",
    "timeout": "RERANK_TIMEOUT",
    "max_retries": "RERANK_MAX_RETRIES",
    "qdrant_url": "QDRANT_URL",
    "qdrant_api_key": "QDRANT_API_KEY",
    "llama_threads": "RERANKEVAL_LLAMA_THREADS",
    "cross_encoder": "RERANKEVAL_CROSS_ENCODER",
    "cache": "RERANKEVAL_CACHE",
    "results": "RERANKEVAL_RESULTS",
    "qdrant_path": "RERANKEVAL_QDRANT_PATH",
    "qdrant_backend": "RERANKEVAL_QDRANT_BACKEND",
    "dense_exact": "RERANKEVAL_DENSE_EXACT",
    "llama_backend": "RERANKEVAL_LLAMA_BACKEND",
    "local_model": "LOCAL_MODEL",
    "judge_model": "JUDGE_MODEL",
    "judge_base_url": "JUDGE_BASE_URL",
    "judge_api_key": "JUDGE_API_KEY",
    "progress": "RERANKEVAL_PROGRESS",
    "stage": "RERANKEVAL_STAGE",
    "embed_base_url": "EMBED_BASE_URL",
    "embed_api_key": "EMBED_API_KEY",
    "embed_model": "EMBED_MODEL",
    "embed_batch": "EMBED_BATCH",
    "embed_concurrency": "EMBED_CONCURRENCY",
    "embed_timeout": "EMBED_TIMEOUT",
    "embed_max_retries": "EMBED_MAX_RETRIES",
    "embed_dim": "EMBED_DIM",
}
ENV_KEYS = tuple(FIELDS_ENV.values())
# what a malformed value should look like, for the message that refuses it
HINTS = {
    "RERANK_TIMEOUT": "seconds per LLM request, a number > 0 (default 120)",
    "RERANK_MAX_RETRIES": "retries per LLM request, a whole number >= 0 (default 3)",
    "RERANKEVAL_LLAMA_THREADS": "threads of the local llama-server, a whole number >= 1 (default 2)",
    "RERANKEVAL_QDRANT_BACKEND": "client or edge",
    "RERANKEVAL_DENSE_EXACT": "true or false (default false: HNSW above Qdrant's indexing threshold)",
    "RERANKEVAL_LLAMA_BACKEND": "build (compile llama-server, the default) or wheel (the prebuilt server)",
    "RERANKEVAL_PROGRESS": "bar, plain or off (unset: bar on a terminal, plain otherwise)",
    "LOCAL_MODEL": f"one of the local models {', '.join(LOCAL_MODELS)} (default {DEFAULT_LOCAL_MODEL})",
    "EMBED_BATCH": "texts per embeddings request, a whole number >= 1 (default 64)",
    "EMBED_CONCURRENCY": "embeddings requests in flight, a whole number >= 1 (default 4)",
    "EMBED_TIMEOUT": "seconds per embeddings request, a number > 0 (default 60)",
    "EMBED_MAX_RETRIES": "retries per embeddings request, a whole number >= 0 (default 3)",
    "EMBED_DIM": "the embedding dimension the model returns, a whole number >= 1 (unset: not checked)",
}
LLM_ENV_KEYS = ENV_KEYS[:6]  # what Settings.env() hands to notebook kernels and subprocesses


def _var(field: str, default: Any = None, **kw: Any) -> Any:
    return Field(default, validation_alias=FIELDS_ENV[field], **kw)


class Settings(BaseSettings):
    """Every setting the project reads. Built in code (by field name) it reads nothing else;
    :func:`load_settings` reads the environment and ``.env``."""

    model_config = SettingsConfigDict(
        frozen=True,
        extra="ignore",
        str_strip_whitespace=True,
        case_sensitive=True,
        env_ignore_empty=True,
        env_file=None,
        populate_by_name=True,
    )

    base_url: str | None = _var("base_url")
    api_key: str | None = _var("api_key", repr=False)
    model: str | None = _var("model")
    endpoint_id: str | None = _var("endpoint_id")
    timeout: float = _var("timeout", 120.0, gt=0)
    max_retries: int = _var("max_retries", 3, ge=0)
    qdrant_url: str | None = _var("qdrant_url")
    qdrant_api_key: str | None = _var("qdrant_api_key", repr=False)
    llama_threads: int = _var("llama_threads", DEFAULT_LLAMA_THREADS, ge=1)
    cross_encoder: str | None = _var("cross_encoder")
    cache: Path | None = _var("cache")
    results: Path | None = _var("results")
    qdrant_path: Path | None = _var("qdrant_path")
    qdrant_backend: Literal["client", "edge"] = _var("qdrant_backend", "edge")  # parity: bench/backend_parity.py
    dense_exact: bool = _var("dense_exact", False)  # exhaustive dense search on edge above the threshold too
    llama_backend: Literal["build", "wheel"] = _var("llama_backend", "build")  # see rerankeval.llm.server
    local_model: str = _var("local_model", DEFAULT_LOCAL_MODEL)  # one of LOCAL_MODELS
    judge_model: str | None = _var("judge_model")  # the LLM assessor's model (09-assess); unset: the reranker's
    judge_base_url: str | None = _var("judge_base_url")  # the assessor's own endpoint; unset: the reranker's
    judge_api_key: str | None = _var("judge_api_key", repr=False)
    progress: Literal["bar", "plain", "off"] | None = _var("progress")  # None: chosen from the stream
    stage: str | None = _var("stage")  # the chain's notebook (its kernels' environment)
    embed_base_url: str | None = _var("embed_base_url")  # an embeddings server; unset: in-process encoding
    embed_api_key: str | None = _var("embed_api_key", repr=False)
    embed_model: str | None = _var("embed_model")  # the model name the embeddings server serves
    embed_batch: int = _var("embed_batch", 64, ge=1)
    embed_concurrency: int = _var("embed_concurrency", 4, ge=1)
    embed_timeout: float = _var("embed_timeout", 60.0, gt=0)
    embed_max_retries: int = _var("embed_max_retries", 3, ge=0)
    embed_dim: int | None = _var("embed_dim", ge=1)

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        """Only what is passed (load_settings passes the environment's variables and ``.env``'s, read by
        :mod:`rerankeval.core.envfile`); never os.environ or a file behind the caller's back."""
        return (init_settings,)

    @field_validator("*", mode="before")
    @classmethod
    def _empty_is_unset(cls, v: Any, info: ValidationInfo) -> Any:
        """An empty value counts as unset: the field's default."""
        return cls.model_fields[info.field_name].default if isinstance(v, str) and not v.strip() else v

    @field_validator("progress", mode="before")
    @classmethod
    def _lower_mode(cls, v: Any) -> Any:
        return v.strip().lower() if isinstance(v, str) and v.strip() else v

    @field_validator("local_model")
    @classmethod
    def _known_local_model(cls, v: str) -> str:
        if v not in LOCAL_MODELS:
            raise ValueError(f"unknown local model {v!r}")
        return v

    def model_post_init(self, context: Any) -> None:
        _remember(secrets_of(self))

    def __repr_args__(self) -> Iterable[tuple[str | None, Any]]:
        """repr/str without secrets: keys are left out (repr=False), URLs lose their credentials."""
        for name, value in super().__repr_args__():
            yield name, (scrub_url(value) if name in _URL_FIELDS and value else value)

    @property
    def configured(self) -> bool:
        """True when an endpoint is given (otherwise the local llama-server is started)."""
        return bool(self.base_url)

    @property
    def cache_endpoint(self) -> str:
        """What identifies the endpoint in cache keys: ``RERANK_ENDPOINT_ID``, else the base URL without its
        ``user:password@`` and secret query values (cache keys and fingerprints are written to disk)."""
        return self.endpoint_id or scrub_url(self.base_url or "").rstrip("/")

    @property
    def embed_configured(self) -> bool:
        """True when an embeddings server is given (``EMBED_BASE_URL``); otherwise encoding runs in-process."""
        return bool(self.embed_base_url)

    @property
    def embed_endpoint(self) -> str:
        """The embeddings server's URL as it may be written down: without credentials, no trailing slash."""
        return scrub_url(self.embed_base_url or "").rstrip("/")

    def env(self) -> dict[str, str]:
        """The LLM endpoint's settings as environment variables (e.g. for notebook kernels)."""
        out = {
            "OPENAI_BASE_URL": self.base_url or "",
            "OPENAI_API_KEY": self.api_key or "",
            "RERANK_MODEL": self.model or "",
            "RERANK_TIMEOUT": repr(float(self.timeout)),
            "RERANK_MAX_RETRIES": str(int(self.max_retries)),
            "RERANK_ENDPOINT_ID": self.endpoint_id or "",
        }
        return {k: v for k, v in out.items() if v}

    def roots(self) -> dict[str, Path]:
        """``results``, ``cache`` and ``qdrant`` folders, absolute, with their defaults filled in."""
        return {
            "results": (self.results or ROOT / "results").expanduser().resolve(),
            "cache": (self.cache or Path.home() / ".cache" / "rerankeval").expanduser().resolve(),
            "qdrant": (self.qdrant_path or ROOT / "data" / ".qdrant").expanduser().resolve(),
        }


def load_settings(environ: Mapping[str, str] | None = None, env_file: str | os.PathLike[str] | None = None) -> Settings:
    """Settings from ``env_file`` (default ``<repo>/.env``) overridden by ``environ`` (default os.environ).

    Raises ValueError naming the variable when a value is malformed (e.g. ``RERANK_TIMEOUT=soon``).
    """
    env = os.environ if environ is None else environ
    path = Path(env_file) if env_file is not None else ENV_FILE
    given = {k: env[k] for k in ENV_KEYS if (env.get(k) or "").strip()}
    from_file = {k: v for k, v in read_env_file(path, env).items() if k in ENV_KEYS and v.strip()}
    try:
        return Settings(**{**from_file, **given})
    except ValidationError as exc:
        bad = []
        for e in exc.errors():
            var = ".".join(map(str, e["loc"]))
            where = "in the environment" if var in given else f"in {path}"
            hint = f"; expected {HINTS[var]}" if var in HINTS else ""
            bad.append(f"{var}={e.get('input')!r} ({where}): {e['msg']}{hint}")
        raise ValueError(f"malformed setting: {'; '.join(bad)}. Fix or unset it (see .env.example).") from None


# -- redaction --
_KNOWN: set[str] = set()  # secrets of every Settings built in this process
_KNOWN_LOCK = threading.Lock()
_SECRET_WORDS = {
    "secret",
    "secrets",
    "password",
    "passwd",
    "pwd",
    "passphrase",
    "auth",
    "authorization",
    "credential",
    "credentials",
    "bearer",
    "cookie",
    "apikey",
    "signature",
}
_KEY_QUALIFIERS = {"api", "access", "secret", "private", "auth", "signing", "encryption", "client", "session"}
_SECRET_VALUE = re.compile(
    r"(?:\bsk-[A-Za-z0-9_\-]{12,}|\bhf_[A-Za-z0-9]{16,}|\bgh[pousr]_[A-Za-z0-9]{20,}|\bxox[abpr]-[A-Za-z0-9\-]{10,}"
    r"|\bAKIA[0-9A-Z]{16}\b|(?i:bearer)\s+[A-Za-z0-9._\-+/=]{8,})"
)
_URL = re.compile(r"[a-zA-Z][a-zA-Z0-9+.\-]*://[^\s\"'<>]+")


def looks_secret(key: str) -> bool:
    """True for names of a key/token/secret/password (``api_key``, ``OPENAI_API_KEY``, ``hfToken``).

    ``key`` counts only when qualified (``api_key``, ``private_key``; a bare ``key`` too); ``token`` when
    it is the last word (``hf_token``, ``access_token``). Counts and settings such as ``prompt_tokens``,
    ``max_tokens``, ``token_pattern``, ``tokenizer``, ``model_key`` or ``cache_key`` are not secrets.
    """
    s = re.sub(r"([a-z0-9])([A-Z])", r"\1_\2", str(key))
    ws = [w for w in re.split(r"[^a-z0-9]+", s.lower()) if w]
    if not ws:
        return False
    if any(w in _SECRET_WORDS for w in ws) or "".join(ws) in {"apikey", "accesskey", "secretkey", "privatekey"}:
        return True
    if "key" in ws and (ws == ["key"] or any(w in _KEY_QUALIFIERS for w in ws)):
        return True
    return ws[-1] == "token"


def _scrub_query_piece(piece: str) -> str:
    key, eq, value = piece.partition("=")
    return f"{key}={REDACTED}" if eq and value and looks_secret(unquote(key)) else piece


def scrub_url(url: str) -> str:
    """``url`` without its ``user:password@`` and with secret-looking query values replaced; a URL with
    neither is returned unchanged."""
    try:
        parts = urlsplit(url)
    except ValueError:
        return url
    if not parts.scheme or not parts.netloc:
        return url
    query = "&".join(_scrub_query_piece(p) for p in parts.query.split("&"))
    if "@" not in parts.netloc and query == parts.query:
        return url
    return urlunsplit((parts.scheme, parts.netloc.rsplit("@", 1)[-1], parts.path, query, parts.fragment))


def _url_secrets(url: str | None) -> list[str]:
    """The password (or lone user token) and secret query values of a URL."""
    try:
        parts = urlsplit(url or "")
    except ValueError:
        return []
    out = [parts.password or parts.username or ""] if "@" in parts.netloc else []
    for piece in parts.query.split("&"):
        k, _, v = piece.partition("=")
        if v and looks_secret(unquote(k)):
            out.append(v)
    return [s for s in out + [unquote(s) for s in out] + url_credential_forms(parts) if s]


def secrets_of(settings: Settings) -> set[str]:
    """The literal secrets a Settings holds: API keys, URL passwords and URL tokens."""
    found = [getattr(settings, f) for f in _KEY_FIELDS]
    found += [s for f in _URL_FIELDS for s in _url_secrets(getattr(settings, f))]
    return {s for s in found if s and len(s) >= _MIN_SECRET_LEN}


def _remember(secrets: Iterable[str]) -> None:
    with _KNOWN_LOCK:
        _KNOWN.update(secrets)


def _current_secrets() -> set[str]:
    """The secrets of the current environment and ``.env``: read again only when either changed (a manifest's
    redaction asks hundreds of times, and each :func:`load_settings` builds a Settings)."""
    try:
        st = ENV_FILE.stat()
        stamp: tuple[Any, ...] = (str(ENV_FILE), st.st_mtime_ns, st.st_size)
    except OSError:
        stamp = (str(ENV_FILE), None)
    return set(_secrets_for(frozenset(os.environ.items()), stamp))


@functools.lru_cache(maxsize=8)
def _secrets_for(environ: frozenset[tuple[str, str]], env_file: tuple[Any, ...]) -> frozenset[str]:
    env = dict(environ)
    try:
        return frozenset(secrets_of(load_settings(environ=env, env_file=env_file[0])))
    except ValueError:  # a malformed .env must not stop redaction: fall back to the raw variables
        raw = [env.get(FIELDS_ENV[f]) for f in _KEY_FIELDS]
        raw += [s for f in _URL_FIELDS for s in _url_secrets(env.get(FIELDS_ENV[f]))]
        return frozenset(s for s in raw if s and len(s) >= _MIN_SECRET_LEN)


def redact(text: object, secrets: Iterable[str | None] | None = None) -> str:
    """``str(text)`` with every known secret replaced by ``[REDACTED]``.

    Known: ``secrets``, those of every :class:`Settings` built in this process and of the current
    environment and ``.env``; plus credentials in URLs, secret query values and well-known key shapes.
    Use it on anything that may echo a request or a setting: messages, logs, ledgers, notebooks, HTML.
    """
    s = str(text)
    if "://" in s:
        s = _URL.sub(lambda m: scrub_url(m.group(0)), s)
    with _KNOWN_LOCK:
        known = set(_KNOWN)
    known |= _current_secrets() | {k for k in (secrets or []) if k and len(k) >= _MIN_SECRET_LEN}
    for key in sorted(known, key=len, reverse=True):
        s = s.replace(key, REDACTED)
    return scrub_basic(_SECRET_VALUE.sub(REDACTED, s), REDACTED)
