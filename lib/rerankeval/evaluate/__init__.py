"""Stage 05: metrics and their conformance checks, statistics, judgments, the funnel, known
limitations, costs, the analysis, the verdict, the run manifest and stage 04's quick check. May import
the stages below it (rerank, retrieve, llm, index, corpus, core), reading their outputs through their
published readers; never report (HTML is the report's)."""
