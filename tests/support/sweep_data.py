"""Hand-built chunk-level legs over three queries and a stand-in for a Retriever serving them, shared by the
sweep's tests (experiments.grid, .blend, .legcache, .fastsweep)."""

from __future__ import annotations

from collections.abc import Mapping

from rerankeval.core.runs import truncate
from rerankeval.index import bm25 as bm25mod

# chunk-level legs over 3 queries; chunks c<unit>.<n> belong to unit d<unit>
DENSE = {
    "q1": {"c1.0": 0.9, "c2.0": 0.8, "c3.0": 0.7, "c1.1": 0.6, "c4.0": 0.5},
    "q2": {"c2.0": 0.9, "c4.0": 0.8, "c1.0": 0.7, "c3.0": 0.6, "c2.1": 0.5},
    "q3": {"c3.0": 0.9, "c3.1": 0.8, "c4.0": 0.7, "c1.0": 0.6, "c2.0": 0.5},
}
LEX = {
    "q1": {"c2.0": 9.0, "c1.1": 8.0, "c4.0": 7.0, "c3.0": 6.0, "c1.0": 5.0},
    "q2": {"c4.0": 9.0, "c2.1": 8.0, "c3.0": 7.0, "c1.0": 6.0, "c2.0": 5.0},
    "q3": {"c1.0": 9.0, "c3.0": 8.0, "c2.0": 7.0, "c4.0": 6.0, "c3.1": 5.0},
}
UNIT_OF = {c: "d" + c[1] for q in DENSE for c in [*DENSE[q], *LEX[q]]}
QUERIES = {"q1": "one", "q2": "two", "q3": "three"}
QRELS = {"q1": {"d2": 1}, "q2": {"d4": 1}, "q3": {"d1": 1, "d3": 1}}


class FakeSource:
    """Hand-built legs with call counters (a stand-in for a Retriever)."""

    def __init__(self) -> None:
        self.unit_of = UNIT_OF
        self.bm25 = bm25mod.BM25Index.from_tokens(["x"], [["a"]])
        self.calls: list[tuple[str, int]] = []

    def dense_leg(self, queries: Mapping[str, str], k: int):
        self.calls.append(("dense", k))
        return truncate({q: DENSE[q] for q in queries}, k)

    def bm25_leg(self, queries: Mapping[str, str], k: int):
        self.calls.append(("bm25", k))
        return truncate({q: LEX[q] for q in queries}, k)
