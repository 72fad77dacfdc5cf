"""Content-addressed cache of LLM replies under ``paths.cache_dir() / "llm"``.

The key is the sha256 of everything the reply depends on (model, endpoint, prompt-template hash, schema
hash, generation parameters, query text, candidate ids and text hashes, attempt number). One JSON file
per key, written atomically; an unreadable or mismatching entry counts as a miss and is overwritten.
An entry keeps the reply's original ``latency_s`` and token counts, so a run served from the cache still
reports what the LLM stage costs. ``<root>.rates.json`` next to the root (outside it, so it is never
taken for an entry) keeps each endpoint's measured prompt rate (for the
estimate printed before a run, see :mod:`.budget`).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from ..ioutil import atomic_write_json, sha256_json
from ..paths import cache_dir


def default_root() -> Path:
    return cache_dir() / "llm"


class LLMCache:
    def __init__(self, root: str | Path | None = None, enabled: bool = True):
        self.root = Path(root) if root is not None else default_root()
        self.enabled = enabled

    @staticmethod
    def key(material: dict[str, Any]) -> str:
        return sha256_json(material)

    def path(self, key: str) -> Path:
        return self.root / key[:2] / f"{key}.json"

    def get(self, key: str) -> dict[str, Any] | None:
        """The cached reply dict, or None when absent, unreadable or not this key's."""
        if not self.enabled:
            return None
        p = self.path(key)
        try:
            entry = json.loads(p.read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, json.JSONDecodeError):
            return None
        if not isinstance(entry, dict) or entry.get("key") != key:
            return None
        reply = entry.get("reply")
        if not isinstance(reply, dict) or not isinstance(reply.get("content"), str):
            return None
        return reply

    def put(self, key: str, material: dict[str, Any], reply: dict[str, Any]) -> None:
        if self.enabled:
            atomic_write_json(self.path(key), {"key": key, "material": material, "reply": reply})

    @property
    def rates_path(self) -> Path:
        return self.root.with_name(f"{self.root.name}.rates.json")

    def read_rates(self) -> dict[str, Any] | None:
        """``"endpoint|model" -> {"s_per_token": ...}`` measured by earlier runs (None if none or disabled)."""
        if not self.enabled:
            return None
        try:
            rates = json.loads(self.rates_path.read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, json.JSONDecodeError):
            return None
        return rates if isinstance(rates, dict) else None

    def record_rate(self, endpoint: str, model: str, s_per_token: float) -> None:
        if self.enabled and s_per_token > 0:
            rates = self.read_rates() or {}
            rates[f"{endpoint}|{model}"] = {"s_per_token": s_per_token}
            atomic_write_json(self.rates_path, rates)
