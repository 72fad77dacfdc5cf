"""bench/scale.py's arithmetic: the fit's edge cases, the prediction from the sizes done, and
when a size is not run (time budget, share of the memory available); the derived corpus keeps copy 0 as is."""

from __future__ import annotations

import importlib
import sys
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def scale():
    sys.path.insert(0, str(ROOT / "bench"))
    try:
        yield importlib.import_module("scale")
    finally:
        sys.path.remove(str(ROOT / "bench"))


def _run(n: int, wall: float, peak: float) -> dict:
    return {"n": n, "stages": {}, "child_wall_seconds": wall, "process_peak_mib": peak}


def test_the_fit_needs_two_positive_points(scale):
    # the exact power law itself: tests/bench/test_backend_parity.py
    assert scale.exponent([5_000], [1.0]) is None
    assert scale.exponent([5_000, 10_000], [0.0, 2.0]) is None  # a non-positive point is left out
    assert scale.extrapolate([5_000], [1.0]) == {}


def test_predict_follows_the_fit_of_the_sizes_done(scale):
    assert scale.predict([], 10, lambda r: r["child_wall_seconds"]) is None
    done = [_run(1_000, 1.0, 1), _run(4_000, 8.0, 1)]  # exponent 1.5
    assert scale.predict(done, 16_000, lambda r: r["child_wall_seconds"]) == pytest.approx(64.0)


def test_a_size_is_skipped_past_the_budget_or_the_memory_share(scale, monkeypatch):
    monkeypatch.setattr(scale, "_mem_available_mib", lambda: 1_000.0)
    done = [_run(1_000, 10.0, 100.0)]  # linear: 10k -> 100 s, 1,000 MiB
    assert scale._stop_reason(done, 5_000, 0.0, 900.0, 0.6)[0] is None  # 50 s, 500 MiB <= 600 MiB
    reason, pred = scale._stop_reason(done, 10_000, 0.0, 900.0, 0.6)
    assert "1000 MiB, more than 60% of the 1000 MiB available" in reason
    assert pred == {"n": 10_000, "predicted_wall_seconds": 100.0, "predicted_peak_mib": 1000.0}
    reason, _ = scale._stop_reason(done, 5_000, 880.0, 900.0, 0.6)  # 880 s spent + 50 s > 900 s
    assert "past the 900 s budget" in reason


def test_the_derived_corpus_keeps_copy_zero_and_perturbs_the_others(scale):
    from scale_corpus import synth_corpus

    texts = ["alpha beta gamma delta", "epsilon zeta eta theta iota"]
    vecs = np.eye(2, 4, dtype=np.float32)
    ids, docs, dense = synth_corpus(texts, vecs, 5)
    assert ids == [f"d{j:07d}" for j in range(5)] and docs[:2] == texts
    np.testing.assert_array_equal(dense[:2], vecs)
    np.testing.assert_allclose(np.linalg.norm(dense, axis=1), 1.0, rtol=1e-6)
    assert not np.array_equal(dense[2], vecs[0])
    again = synth_corpus(texts, vecs, 5)  # seeded
    assert again[1] == docs and np.array_equal(again[2], dense)


def test_the_graph_regime_has_its_own_exponent(scale):
    """Below Qdrant's threshold nothing is built (exact search): the step to the graph regime is not its growth."""

    def run(n, secs, mode):
        return {
            "n": n,
            "stages": {"index": {"seconds": secs, "cpu_seconds": secs, "peak_mib": 1.0}},
            "queries": 1,
            "process_peak_mib": 1.0,
            "disk_mib": 1.0,
            "dense_search": {"mode": mode},
        }

    ok = [run(5_000, 1.0, "exact"), run(10_000, 10.0, "hnsw"), run(40_000, 40.0, "hnsw")]
    s = scale.summarise(ok)
    assert s["graph_sizes"] == [10_000, 40_000]
    assert s["time_exponent_graph"]["index"] == pytest.approx(1.0)  # x4 size, x4 time
    assert s["time_exponent"]["index"] > 1.5  # the step from 1 s (exact) to 10 s (graph) dominates the fit
    assert scale.summarise(ok[:2])["time_exponent_graph"]["index"] is None  # one graph size: no slope
