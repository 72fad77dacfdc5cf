"""Stage 06: the parameter sweep and its train/test or k-fold splits. May import evaluate and
everything below it."""
