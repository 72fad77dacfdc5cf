"""Stage 01: a dataset folder (PDFs or BEIR) turned into the corpus contract (chunk table, queries, qrels, stats) by
:mod:`.extract` (:mod:`.pdf`, :mod:`.textnorm`, :mod:`.beir`), its readers (:mod:`.contract`) and plain-text
snippets of its units (:mod:`.snippets`). May import rerankeval.core only."""
