"""Stage 03: the retrieval variants (legs, fusion, query reformulation, cross-encoder) and the stage
that writes their runs. May import llm, index, corpus and core; never rerank (they meet only
through run files)."""
