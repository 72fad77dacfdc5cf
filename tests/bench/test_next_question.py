"""bench/next_question.py's last line: warm 03 is the median of its forced runs, and each follow-up has its CPU
seconds beside its wall seconds (known inputs, no chain run)."""

from __future__ import annotations

import importlib.util

from rerankeval.core import paths


def _bench():
    spec = importlib.util.spec_from_file_location("next_question", paths.ROOT / "bench" / "next_question.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_the_headline_takes_the_median_warm_03_and_the_cpu_seconds_of_each_follow_up():
    bench = _bench()
    alone = [{"notebooks_s": {"03-retrieve": s}, "cpu_s": c} for s, c in ((3.4, 6.0), (2.9, 5.5), (5.0, 7.5))]
    out = {
        "warm_up": {"warm": {"wall_s": 12.0}, "warm_03_alone": alone},
        "rrf_k": {"minimal": {"wall_s": 17.4, "cpu_s": 15.7}},
        "judgment": {"wall_s": 14.9, "cpu_s": 12.8},
    }
    line = bench.headline(out)
    assert line["warm_03_s"] == 3.4 and line["warm_report_s"] == 12.0  # the median, not the fastest run
    assert line["rrf_k_minimal_s"] == 17.4 and line["rrf_k_minimal_cpu_s"] == 15.7
    assert line["judgment_s"] == 14.9 and line["judgment_cpu_s"] == 12.8
    out["warm_up"]["warm_03_alone"] = [{"notebooks_s": {}}]  # 03 failed: no figure rather than a wrong one
    assert bench.headline(out)["warm_03_s"] is None
