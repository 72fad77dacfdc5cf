"""Stage 01: a dataset folder (PDFs or BEIR) turned into the corpus contract (chunk table, queries,
qrels) and its readers. May import rerankeval.core only."""
