"""The two Qdrant backends of the index: qdrant-client (store) and qdrant-edge shards (edge), and the RRF
convention both send to Qdrant (rrf: the paper's k and Qdrant's k + 1; retrieve.fusion re-exports it).
May import what rerankeval.index may import (corpus, core); today only core."""
