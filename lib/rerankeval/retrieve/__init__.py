"""Stage 03: the retrieval variants and the stage that writes their runs. ``stage`` (run/write, the one call per
variant), ``retriever`` (the built indexes, searched; ``REWRITES``: a variant made by a rewrite step after another),
``variants`` (the registry of the variants that search), ``reformulate`` (the LLM query-rewriting step in front of
the hybrid, ``Reformulate.apply``), ``fusion``, ``cross_encoder`` and ``source`` (the protocol the variants search
through). Names come from the catalogue, rerankeval.core.names. May import llm (lazily: only the rewrite step asks
a model), index, corpus and core; never rerank (they meet only through run files)."""
