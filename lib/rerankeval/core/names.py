"""The variant names, defined once (a leaf module: :mod:`rerankeval.retrieve.variants` holds the registry of their
classes, and every other module, including :mod:`rerankeval.core.runs` below it, uses these constants)."""

VECTOR = "vector"
BM25 = "bm25"
HYBRID = "hybrid"
QDRANT_HYBRID = "qdrant_hybrid"
HYBRID_COMBSUM = "hybrid_combsum"  # the hybrid's legs fused by min-max CombSUM
HYBRID_COMBMNZ = "hybrid_combmnz"  # ... by min-max CombMNZ
HYBRID_DBSF = "hybrid_dbsf"  # ... by distribution-based score fusion, client-side
QDRANT_DBSF = "qdrant_dbsf"  # qdrant_hybrid's legs fused by Qdrant's own DBSF
FUSION_VARIANTS = (HYBRID_COMBSUM, HYBRID_COMBMNZ, HYBRID_DBSF, QDRANT_DBSF)  # fusion alternatives (not run by default)
CROSS_ENCODER = "cross_encoder"
HYBRID_RERANK = "hybrid_rerank"
HYBRID_REFORMULATE = "hybrid_reformulate"  # hybrid with an LLM rewrite of weak queries, kept only if better
HYBRID_RERANK_EXPAND = "hybrid_rerank_expand"  # hybrid_rerank with neighbouring chunks attached to each candidate
HYBRID_TUNED = "hybrid_tuned"  # the fusion setting a sweep chose on other queries (06-sweep, make sweep)
LEGS = (VECTOR, BM25)  # the single legs every hybrid fuses
REPORT_ORDER = (BM25, VECTOR, HYBRID, QDRANT_HYBRID, *FUSION_VARIANTS, HYBRID_REFORMULATE, CROSS_ENCODER, HYBRID_RERANK,
                HYBRID_RERANK_EXPAND, HYBRID_TUNED)  # tables and plots
