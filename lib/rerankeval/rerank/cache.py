"""Content-addressed cache of LLM replies under ``paths.cache_dir() / "llm"``.

The key is the sha256 of everything the reply depends on (model, endpoint, prompt-template hash, schema
hash, generation parameters, query text, candidate ids and text hashes, attempt number). One JSON file
per key, written atomically; an unreadable or mismatching entry counts as a miss and is overwritten.
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
