"""The HTML report: pages (:mod:`.render`) and the HTML notebooks display (:mod:`.fragments`) from the Jinja
templates in templates/ with one report.css; plots; :func:`.htmlsafe.esc`. Reads the run manifest stage 05
writes (:mod:`rerankeval.evaluate.manifest`). May import experiments and everything below it."""
