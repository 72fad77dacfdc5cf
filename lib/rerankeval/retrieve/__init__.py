"""Stage 03: the retrieval variants and the stage that writes their runs. ``stage`` (run/write, the one call per
variant), ``retriever`` (the built indexes, searched), ``variants`` (the registry of the variants that search),
``reformulate`` (the LLM query-rewriting step composed with the hybrid), ``fusion``, ``cross_encoder`` and
``source`` (the protocol the variants search through). Names come from rerankeval.core.names. May import llm,
index, corpus and core; never rerank (they meet only through run files)."""
