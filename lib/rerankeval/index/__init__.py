"""Stage 02: the BM25, dense-embedding and Qdrant indexes built from the chunk table, and their
manifest. May import rerankeval.corpus and rerankeval.core."""
