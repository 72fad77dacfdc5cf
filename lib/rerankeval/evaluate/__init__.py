"""Stage 05: metrics and their conformance checks, statistics, judgments, the funnel, known
limitations, costs, the analysis and the verdict. May import the stages below it (rerank,
retrieve, llm, index, corpus, core), reading their outputs through their published readers."""
