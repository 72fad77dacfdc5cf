"""Terminal progress bars that show from inside a papermill kernel (minimal stand-in; helper E1 owns this)."""

from __future__ import annotations

import sys
from collections.abc import Iterable, Iterator
from typing import TypeVar

from tqdm import tqdm

T = TypeVar("T")


def track(iterable: Iterable[T], *, total: int | None = None, desc: str, unit: str = "it") -> Iterator[T]:
    """Yield from ``iterable`` with a progress bar (items done, rate, ETA) on stderr."""
    yield from tqdm(iterable, total=total, desc=desc, unit=unit, mininterval=2.0, file=sys.stderr)
