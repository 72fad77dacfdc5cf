"""The HTML report: pages rendered from the Jinja templates in templates/, plots, HTML-safe helpers (the
diff view included). Reads the run manifest stage 05 writes (:mod:`rerankeval.evaluate.manifest`). May import
experiments and everything below it."""
