"""The variant names, defined once (a leaf module: :mod:`rerankeval.variants` holds the registry of their
classes, and every other module, including :mod:`rerankeval.runs` below it, uses these constants)."""

VECTOR = "vector"
BM25 = "bm25"
HYBRID = "hybrid"
QDRANT_HYBRID = "qdrant_hybrid"
CROSS_ENCODER = "cross_encoder"
HYBRID_RERANK = "hybrid_rerank"
LEGS = (VECTOR, BM25)  # the single legs every hybrid fuses
REPORT_ORDER = (BM25, VECTOR, HYBRID, QDRANT_HYBRID, CROSS_ENCODER, HYBRID_RERANK)  # tables and plots
HYBRID_REFORMULATE, HYBRID_RERANK_EXPAND = "hybrid_reformulate", "hybrid_rerank_expand"  # issue 11
REPORT_ORDER = (*REPORT_ORDER, HYBRID_REFORMULATE, HYBRID_RERANK_EXPAND)
