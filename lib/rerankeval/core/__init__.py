"""Foundations every stage shares: repository and dataset paths, settings (the only reader of the
environment), the .env file, atomic I/O, run files, variant names and progress lines. It imports
nothing of rerankeval."""
