"""The two Qdrant backends of the index: qdrant-client (store) and qdrant-edge shards (edge), the RRF
convention both send to Qdrant (rrf: the paper's k, RRF_K's one home, and Qdrant's k + 1), and
what approximate dense search costs (recall: exact below Qdrant's indexing threshold, HNSW above, recall@10).
May import what rerankeval.index may import (corpus, core); today only core."""
