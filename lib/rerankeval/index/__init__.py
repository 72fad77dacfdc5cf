"""Stage 02: the BM25 (:mod:`.bm25`), dense-embedding (:mod:`.embed`) and Qdrant (:mod:`.qdrant`) indexes built from
the chunk table, and their manifest (:mod:`.build`: ``build_indexes``, ``load_index_info``). May import
rerankeval.corpus and rerankeval.core; never retrieve (the RRF constant the backends send is :mod:`.qdrant.rrf`'s)."""
