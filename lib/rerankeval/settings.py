"""Endpoint settings for the LLM reranker, read from the environment and ``<repo>/.env``.

Variables (environment wins over ``.env``; see ``.env.example``):

- ``OPENAI_BASE_URL``: any OpenAI-compatible endpoint, e.g. ``https://api.openai.com/v1`` or a vLLM /
  llama-server URL ending in ``/v1``. Unset: :mod:`rerankeval.llm_server` starts the local llama-server.
- ``OPENAI_API_KEY``: the endpoint's key (a dummy value is fine for a local server). Never printed:
  pass any text that may contain it through :func:`redact`.
- ``RERANK_MODEL``: the model name sent with each request (and the label of the reranker in reports).
- ``RERANK_ENDPOINT_ID``: optional stable identity of the endpoint for the reply cache; defaults to the
  base URL (the local server sets it, because its port changes on every start).
- ``RERANK_TIMEOUT`` (seconds per request, default 120) and ``RERANK_MAX_RETRIES`` (default 3): passed to
  the ``openai`` client, whose retries back off exponentially and honour ``Retry-After``.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from dotenv import dotenv_values

from .paths import ROOT

ENV_FILE = ROOT / ".env"
ENV_KEYS = (
    "OPENAI_BASE_URL",
    "OPENAI_API_KEY",
    "RERANK_MODEL",
    "RERANK_ENDPOINT_ID",
    "RERANK_TIMEOUT",
    "RERANK_MAX_RETRIES",
)
REDACTED = "[REDACTED]"
_MIN_SECRET_LEN = 4  # shorter "keys" (e.g. "x") are placeholders; replacing them would mangle text


@dataclass(frozen=True)
class Settings:
    base_url: str | None = None
    api_key: str | None = field(default=None, repr=False)
    model: str | None = None
    endpoint_id: str | None = None
    timeout: float = 120.0
    max_retries: int = 3

    @property
    def configured(self) -> bool:
        """True when an endpoint is given (otherwise the local llama-server is started)."""
        return bool(self.base_url)

    @property
    def cache_endpoint(self) -> str:
        """What identifies the endpoint in cache keys."""
        return self.endpoint_id or (self.base_url or "").rstrip("/")

    def env(self) -> dict[str, str]:
        """These settings as environment variables (e.g. for notebook kernels)."""
        out = {
            "OPENAI_BASE_URL": self.base_url or "",
            "OPENAI_API_KEY": self.api_key or "",
            "RERANK_MODEL": self.model or "",
            "RERANK_TIMEOUT": repr(float(self.timeout)),
            "RERANK_MAX_RETRIES": str(int(self.max_retries)),
        }
        if self.endpoint_id:
            out["RERANK_ENDPOINT_ID"] = self.endpoint_id
        return {k: v for k, v in out.items() if v}


def _raw(environ: Mapping[str, str] | None, env_file: str | os.PathLike[str] | None) -> dict[str, str]:
    path = Path(env_file) if env_file is not None else ENV_FILE
    values: dict[str, str] = {}
    if path.is_file():
        values.update({k: v for k, v in dotenv_values(path).items() if v is not None})
    env = os.environ if environ is None else environ
    values.update({k: env[k] for k in ENV_KEYS if env.get(k)})
    return values


def load_settings(environ: Mapping[str, str] | None = None, env_file: str | os.PathLike[str] | None = None) -> Settings:
    """Settings from ``env_file`` (default ``<repo>/.env``) overridden by ``environ`` (default os.environ)."""
    v = _raw(environ, env_file)

    def num(key: str, default: float, cast):
        raw = v.get(key, "").strip()
        if not raw:
            return default
        try:
            return cast(raw)
        except ValueError as exc:
            raise ValueError(f"{key}={raw!r} is not a number") from exc

    return Settings(
        base_url=(v.get("OPENAI_BASE_URL") or "").strip() or None,
        api_key=(v.get("OPENAI_API_KEY") or "").strip() or None,
        model=(v.get("RERANK_MODEL") or "").strip() or None,
        endpoint_id=(v.get("RERANK_ENDPOINT_ID") or "").strip() or None,
        timeout=float(num("RERANK_TIMEOUT", 120.0, float)),
        max_retries=int(num("RERANK_MAX_RETRIES", 3, int)),
    )


def redact(text: object, secrets: list[str | None] | None = None) -> str:
    """``str(text)`` with the configured API key (and any extra ``secrets``) replaced by ``[REDACTED]``.

    Use it on anything that may echo a request: exception messages, logs, ledger error columns.
    """
    s = str(text)
    keys = list(secrets or [])
    try:
        keys.append(load_settings().api_key)
    except ValueError:  # a malformed number in .env must not stop redaction
        keys.append(os.environ.get("OPENAI_API_KEY"))
    for key in sorted({k for k in keys if k and len(k) >= _MIN_SECRET_LEN}, key=len, reverse=True):
        s = s.replace(key, REDACTED)
    return s
