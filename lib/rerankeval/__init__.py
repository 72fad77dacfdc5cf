"""ReRankEval: does hybrid retrieval plus LLM reranking retrieve better on my documents, and by how much?

Stages flow one way: corpus -> index -> retrieve -> rerank -> evaluate -> report. Each stage reads the
previous stage's saved output (chunk table, TREC run files) through :mod:`rerankeval.core.paths`.
"""

__version__ = "0.1.0"
