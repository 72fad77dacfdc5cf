"""The two Qdrant backends of the index: qdrant-client (store) and qdrant-edge shards (edge).
May import what rerankeval.index may import (corpus, core)."""
