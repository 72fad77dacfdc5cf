"""Stage 01: a dataset folder (PDFs or BEIR) turned into the corpus contract (chunk table, queries,
qrels), its readers and plain-text snippets of its units (:mod:`.snippets`). May import rerankeval.core only."""
