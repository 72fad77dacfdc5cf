"""Stage 06: the parameter sweep. :mod:`.grid` (points, grids, the engine that searches each leg once, scores)
and :mod:`.replay` (stage 04's recorded LLM scores) are the layer :mod:`.splits` (honest train/test or k-fold
choosing) builds on; :mod:`.sweep` (sweep, tune, write, the notebook's views) sits on top. May import evaluate
and everything below it."""
