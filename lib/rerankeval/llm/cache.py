"""Content-addressed cache of LLM replies, under ``<cache>/llm`` (:meth:`LLMCache.under` the cache folder).

The key is the sha256 of everything the reply depends on (model, endpoint identity, prompt-template hash,
schema hash, generation parameters, query text, candidate ids and text hashes, attempt number). One JSON
file per key, written atomically, holding only the key and the reply (content, logprobs, token counts,
finish reason, format, original ``latency_s``), its text redacted (:mod:`.scrub`): what the key was made of
is not stored, and the endpoint identity never holds a credential (:func:`.scrub.endpoint_identity`).
An unreadable or mismatching entry counts as a miss and is overwritten. An entry keeps the reply's
original ``latency_s`` and token counts, so a run served from the cache still reports what the LLM stage
costs.

Replies that were used are stored: the callers put a reply after reading it. A call that ended without a reply
that reads is stored only as an **outcome record** (:meth:`LLMCache.put_outcome`: the last reply, and whether the
caller repaired it or it failed, with the error classes and how many times it was asked): :meth:`get` never
returns one, so a record is never served as if it were good; :class:`.call.CachedLLM` decides what to do with it
(a repaired reply is repaired again without a request; a failure is re-asked unless the stage keeps failures).
``enabled=False`` (``use_cache=false`` in the notebooks) serves nothing from the cache but still stores the
fresh replies, so it refreshes the cache; ``write=False`` stores nothing.

``<root>.rates.json`` next to the root (outside it, so it is never taken for an entry) keeps each
endpoint's measured prompt and generation rates (for the time printed before a run, see :mod:`.rates`), keyed by
``"<endpoint identity>|<model>"``.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from rerankeval.core.ioutil import atomic_write_json, sha256_json
from rerankeval.core.settings import redact
from rerankeval.llm.scrub import redact_tree


class LLMCache:
    """The reply cache in the folder ``root``; :meth:`under` a cache folder (``dp.roots.cache``) is its ``llm/``."""

    def __init__(self, root: str | Path, enabled: bool = True, write: bool = True):
        self.root = Path(root)
        self.enabled = enabled  # serve replies from the cache
        self.write = write  # store fresh replies (also when not enabled: use_cache=false refreshes)

    @classmethod
    def under(cls, cache: str | Path, enabled: bool = True, write: bool = True) -> LLMCache:
        """The reply cache of the cache folder ``cache`` (``RERANKEVAL_CACHE``: ``dp.roots.cache``, or
        ``Roots.of(settings).cache``): ``<cache>/llm``."""
        return cls(Path(cache) / "llm", enabled=enabled, write=write)

    @staticmethod
    def key(material: dict[str, Any]) -> str:
        return sha256_json(material)

    def path(self, key: str) -> Path:
        return self.root / key[:2] / f"{key}.json"

    def get(self, key: str) -> dict[str, Any] | None:
        """The cached reply dict, or None when absent, unreadable, not this key's, or the cache is not enabled."""
        if not self.enabled:
            return None
        p = self.path(key)
        try:
            entry = json.loads(p.read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, json.JSONDecodeError):
            return None
        if not isinstance(entry, dict) or entry.get("key") != key or "outcome" in entry:
            return None
        return _reply(entry)

    def get_outcome(self, key: str) -> tuple[dict[str, Any], dict[str, Any]] | None:
        """(reply, outcome) of the outcome record under ``key`` (see the module docstring), else None."""
        if not self.enabled:
            return None
        try:
            entry = json.loads(self.path(key).read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, json.JSONDecodeError):
            return None
        if not isinstance(entry, dict) or entry.get("key") != key or not isinstance(entry.get("outcome"), dict):
            return None
        reply = _reply(entry)
        return (reply, entry["outcome"]) if reply is not None else None

    def put_outcome(self, key: str, reply: dict[str, Any], outcome: dict[str, Any]) -> None:
        """Record how a call ended without a reply that read: ``outcome`` holds ``status`` (repaired / failed),
        ``errors`` and ``count`` (times asked)."""
        if self.write:
            atomic_write_json(self.path(key), {"key": key, "reply": redact_tree(reply), "outcome": outcome})

    def put(self, key: str, material: dict[str, Any], reply: dict[str, Any]) -> None:
        """Store a reply that was used (``material`` is what ``key`` was made of: it is not stored)."""
        if self.write:
            atomic_write_json(self.path(key), {"key": key, "reply": redact_tree(reply)})

    @property
    def rates_path(self) -> Path:
        return self.root.with_name(f"{self.root.name}.rates.json")

    def read_rates(self) -> dict[str, Any] | None:
        """``"endpoint|model" -> {"prompt_s", "gen_s", "call_s", "calls", "s_per_token"}`` measured by earlier
        runs (None if none or disabled)."""
        if not self.enabled:
            return None
        try:
            rates = json.loads(self.rates_path.read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, json.JSONDecodeError):
            return None
        return rates if isinstance(rates, dict) else None

    def record_rate(self, endpoint: str, model: str, s_per_token: float) -> None:
        """Keep the combined rate (seconds per processed prompt token, generation included) of ``endpoint`` (an
        identity from :func:`.scrub.endpoint_identity`) beside the rates :meth:`record_rates` keeps."""
        if s_per_token > 0:
            self.record_rates(endpoint, model, {"s_per_token": s_per_token})

    def record_rates(self, endpoint: str, model: str, record: dict[str, Any]) -> None:
        """Merge ``record`` (see :meth:`read_rates`) into the rates kept for ``endpoint`` and ``model``."""
        if not self.write:
            return
        try:
            rates = json.loads(self.rates_path.read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, json.JSONDecodeError):
            rates = {}
        if not isinstance(rates, dict):
            rates = {}
        # an older version keyed this file by the raw URL: drop any key that held a credential
        rates = {k: v for k, v in rates.items() if redact(k) == k}
        name = redact(f"{endpoint}|{model}")
        rates[name] = {**(rates[name] if isinstance(rates.get(name), dict) else {}), **record}
        atomic_write_json(self.rates_path, rates)


def _reply(entry: dict[str, Any]) -> dict[str, Any] | None:
    reply = entry.get("reply")
    if not isinstance(reply, dict) or not isinstance(reply.get("content"), str):
        return None
    return reply
