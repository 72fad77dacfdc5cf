"""Every figure the notebooks save has a caption; per-comparison stems are matched by pattern."""

from __future__ import annotations

import json
import re
from pathlib import Path

from rerankeval.report.captions import CAPTIONS, caption_for

ROOT = Path(__file__).resolve().parents[2]


def test_fixed_and_patterned_stems():
    assert "baseline" in caption_for("05-forest")
    text = caption_for("05-delta-hybrid_rerank-vs-hybrid")
    assert "hybrid_rerank minus hybrid" in text and "{" not in text
    assert caption_for("05-delta-hybrid-vs-bm25").startswith("hybrid minus bm25")
    assert caption_for("05-no-such-figure") == "" and caption_for("") == ""
    assert caption_for("05-delta-hybrid") == ""  # no pair: no caption


def figure_stems() -> set[str]:
    """The stems of the figures the notebooks save: plots.show(..., "<name>"[, notebook="NN"]) and file names."""
    stems = set()
    for nb in (ROOT / "notebooks").glob("*.ipynb"):
        code = "\n".join("".join(c["source"]) for c in json.loads(nb.read_text(encoding="utf-8"))["cells"])
        for m in re.finditer(r'dp\.figures_dir,\s*"([a-z0-9-]+)"(?:,\s*notebook="(\d\d)")?', code):
            stems.add(f"{m.group(2) or nb.name[:2]}-{m.group(1)}")
        stems |= set(re.findall(r'"(\d\d-[a-z0-9-]+)(?:\.png)?"', code))
    return stems


def test_every_figure_a_notebook_saves_has_a_caption():
    stems = figure_stems()
    assert {
        "05-forest",
        "05-metric-bars",
        "05-rank-shift",
        "06-pareto",
        "06-pool-ceiling",
        "03-variants",
        "01-chunk-lengths",
    } <= stems
    missing = sorted(n for n in stems if not caption_for(n))
    assert not missing, f"figures without a caption in rerankeval.report.captions.CAPTIONS: {missing}"


def test_captions_are_sentences():
    assert all(c.endswith(".") and len(c) < 320 for c in CAPTIONS.values())
