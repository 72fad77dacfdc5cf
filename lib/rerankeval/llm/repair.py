"""Reading model replies leniently and repairing them, with every repair counted.

Rules (never silent: each is counted in the ledger):

- unknown ids are dropped (``n_invalid``);
- repeated ids keep their first occurrence (``n_duplicate``);
- candidates the reply left out are put back at their input positions (``n_missing``), never scored 0;
- a reply that cannot be read at all raises :class:`Unusable` (the caller retries, then falls back).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel, ValidationError

from rerankeval.core.errors import ReRankEvalError


class Unusable(ReRankEvalError, ValueError):
    """A reply that yields nothing usable; ``error_class`` goes to the ledger."""

    def __init__(self, error_class: str, message: str = ""):
        super().__init__(message or error_class)
        self.error_class = error_class


@dataclass
class Counts:
    n_invalid: int = 0
    n_duplicate: int = 0
    n_missing: int = 0

    def __iadd__(self, other: Counts) -> Counts:
        self.n_invalid += other.n_invalid
        self.n_duplicate += other.n_duplicate
        self.n_missing += other.n_missing
        return self

    @property
    def repaired(self) -> bool:
        return bool(self.n_invalid or self.n_duplicate or self.n_missing)


_FENCE = re.compile(r"^\s*```(?:json)?\s*(.*?)\s*```\s*$", re.S)


def _strip_fence(text: str) -> str:
    m = _FENCE.match(text)
    return m.group(1) if m else text.strip()


def _salvage_array(text: str, key: str) -> list[Any] | None:
    """The complete elements of ``"key": [ ...`` in a reply cut off mid-array (finish_reason=length)."""
    m = re.search(r'"' + re.escape(key) + r'"\s*:\s*\[', text)
    if not m:
        return None
    body = text[m.end() :]
    if key == "ranking":
        closed = "]" in body
        inner = body.split("]")[0]
        # without the closing bracket the last number may be cut (e.g. "1" of "12"): keep only
        # comma-terminated ones
        items = re.findall(r"-?\d+(?=\s*,)" if not closed else r"-?\d+", inner)
        return [int(x) for x in items]
    objs = re.findall(r"\{[^{}]*\}", body)
    out = []
    for o in objs:
        try:
            out.append(json.loads(o))
        except json.JSONDecodeError:
            continue
    return out


def parse(text: str, model: type[BaseModel], array_key: str | None = None) -> tuple[BaseModel, bool]:
    """Parse ``text`` into ``model``; returns (reply, salvaged). Raises :class:`Unusable`.

    ``salvaged`` is True when the JSON was cut off and only the complete leading elements of
    ``array_key`` were recovered (the missing candidates are then counted by the repair).
    """
    body = _strip_fence(text or "")
    if not body:
        raise Unusable("EmptyContent", "the reply is empty")
    try:
        data = json.loads(body)
    except json.JSONDecodeError:
        # JSON cut off mid-array: keep its complete leading elements
        items = _salvage_array(body, array_key) if array_key and body.lstrip().startswith("{") else None
        if not items:
            raise Unusable("InvalidJSON", f"not JSON: {body[:120]!r}") from None
        try:
            return model.model_validate({array_key: items}), True
        except ValidationError:
            raise Unusable("InvalidJSON", f"truncated JSON: {body[:120]!r}") from None
    try:
        return model.model_validate(data), False
    except ValidationError as exc:
        raise Unusable("WrongShape", f"JSON of the wrong shape: {str(exc)[:200]}") from None


def repair_order(returned: list[Any], n: int) -> tuple[list[int], Counts]:
    """A permutation of ``range(n)`` from 1-based ids the model returned.

    Unknown ids are dropped, duplicates keep their first place, and each missing index ``i`` is inserted
    at position ``i`` (its input position) among the ones placed so far, in input order.
    """
    c = Counts()
    seen: set[int] = set()
    order: list[int] = []
    for x in returned:
        try:
            i = int(x) - 1
        except (TypeError, ValueError):
            c.n_invalid += 1
            continue
        if isinstance(x, bool) or not 0 <= i < n or (isinstance(x, float) and not float(x).is_integer()):
            c.n_invalid += 1
        elif i in seen:
            c.n_duplicate += 1
        else:
            seen.add(i)
            order.append(i)
    for i in range(n):
        if i not in seen:
            c.n_missing += 1
            order.insert(min(i, len(order)), i)
    return order, c


def repair_scores(
    items: list[tuple[Any, Any]], n: int, lo: float = 0, hi: float = 10
) -> tuple[list[float | None], Counts]:
    """Scores by 0-based index from ``(id, score)`` pairs with 1-based ids; None = missing (placed later)."""
    c = Counts()
    out: list[float | None] = [None] * n
    seen: set[int] = set()
    for ident, score in items:
        try:
            i = int(ident) - 1
            s = float(score)
        except (TypeError, ValueError):
            c.n_invalid += 1
            continue
        if not 0 <= i < n or not lo <= s <= hi:
            c.n_invalid += 1
        elif i in seen:
            c.n_duplicate += 1
        else:
            seen.add(i)
            out[i] = s
    c.n_missing += sum(v is None for v in out)
    return out, c


def order_by_scores(scores: list[float | None]) -> list[int]:
    """Indices by score descending, ties in input order; unscored indices at their input positions."""
    scored = sorted((i for i, s in enumerate(scores) if s is not None), key=lambda i: (-scores[i], i))
    order = list(scored)
    for i, s in enumerate(scores):
        if s is None:
            order.insert(min(i, len(order)), i)
    return order
