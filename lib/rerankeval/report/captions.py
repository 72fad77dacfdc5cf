"""One caption per figure, saying what to look for: :func:`caption_for` a figure's stem (``05-forest``).

A leaf module (no imports of ours): notebooks print the caption under the figure (``plots.show``), the report's
index puts it under the image.
"""

from __future__ import annotations

import re

CAPTIONS: dict[str, str] = {
    "01-chunk-lengths": "Chunk lengths in characters: most chunks should sit at the target size (the tall bar); "
    "a long tail of short chunks means page or section ends, or pages with little text.",
    "02-bm25-lengths": "Chunk lengths as BM25 sees them (terms after analysis): BM25's length normalisation "
    "favours short units, so a wide spread or a second peak is worth knowing.",
    "03-variants": "A first look at each variant's mean per metric (no CI yet; 05 adds them): look for the fused "
    "variants above both single legs.",
    "03-reformulate-threshold": "Top hybrid score per query: the queries left of the threshold are the ones the LLM "
    "rewrites; the threshold should cut off the weak tail, not the bulk.",
    "05-forest": "Each variant minus the baseline on the headline metric, with its 95% CI: a bar clear of the zero "
    "line is a difference beyond chance for that pair alone; a filled marker (and *) also survives "
    "Holm correction over all pairs. Right: queries better / tied / worse than the baseline.",
    "05-metric-bars": "Mean per metric with its 95% bootstrap CI, one colour per variant: overlapping intervals "
    "say the means alone cannot separate the variants (the forest plot's paired test can).",
    "05-discrimination": "Left: the reranker model's scores for relevant and non-relevant candidates (the further "
    "apart, the better); right: its ROC AUC per query (0.5 is chance).",
    "05-funnel": "Where each query's relevant units were lost, per cutoff: purple is a hit; dark grey (neither leg "
    "found it) is a retrieval problem, dark brown (lost in fusion) a fusion problem, the lighter oranges "
    "and grey the pool size's or the reranker's.",
    "05-rank-heatmap": "Rank of each query's first relevant unit per variant (dark green = rank 1, grey = not in "
    "the list): rows that are grey for every variant are queries no variant answers.",
    "05-rank-shift": "Each relevant unit of the fused list: its fused rank against its reranked rank; below the "
    "diagonal (purple) the reranker promoted it, above (orange) it demoted it, grey: unchanged; "
    "'none': not in the reranked list.",
    "05-quality-cost": "Headline metric against seconds and LLM tokens per query, one point per variant (the one-off "
    "model load is not counted): a variant up and to the left is better and cheaper; a point far "
    "right must buy its quality.",
    "06-lines": "nDCG and MRR along each swept axis, every other axis at its default: a flat line is a setting "
    "that does not matter on these queries.",
    "06-pool-ceiling": "Recall at the pool size: the most a perfect reranker of the fused pool could find; the "
    "pool size to pick is where the line flattens.",
    "06-heat-k-weights": "RRF's k against the legs' weights (dense/bm25), nDCG at the cutoff: the red box is the "
    "best cell, chosen on all queries (exploration; the honest choice is 06's text).",
    "06-heat-method-depth": "Fusion method against leg depth, nDCG at the cutoff: the red box is the best cell "
    "(exploration, all queries); differences in the third decimal are within noise.",
    "06-pareto": "Quality against cost for every sweep point: the frontier joins the points no other point beats on "
    "both; stars mark the default and the settings each fold (or the train split) chose; when the costs "
    "barely differ the figure says so and shows quality alone.",
    "08-questions-validation": "Each system's score on the human questions against the generated ones: systems in "
    "the same order on both sets (Kendall's tau near 1) mean the generated set ranks "
    "systems as the human one does.",
    "09-qrels-validation": "Each system's score on the human questions with the human qrels against human + LLM "
    "qrels (LLM grades only where no human judged): the same order on both (Kendall's tau "
    "near 1) means the LLM's grades do not change which systems win.",
}

_PATTERNS: list[tuple[re.Pattern[str], str]] = [
    (
        re.compile(r"05-delta-(?P<a>.+)-vs-(?P<b>.+)"),
        "{a} minus {b} per query on the headline metric, sorted: purple bars are queries where {a} is better, orange "
        "where it is worse; a gain carried by a few tall bars is fragile, a broad purple block is not.",
    ),
]


def caption_for(stem: str) -> str:
    """The caption of the figure ``stem`` (its file name without ``.png``); "" for a figure we do not know."""
    if stem in CAPTIONS:
        return CAPTIONS[stem]
    for pattern, text in _PATTERNS:
        m = pattern.fullmatch(stem)
        if m:
            return text.format(**m.groupdict())
    return ""
