"""Foundations every stage shares: paths (:class:`.paths.DatasetPaths`, the map of every file), settings (the
environment and .env, :mod:`.envfile`), atomic I/O and hashes (:mod:`.ioutil`), the run type and TREC files
(:mod:`.runs`), the catalogue of variant names (:mod:`.names`), progress lines and the package's log (:mod:`.log`);
settings are the one reader of the environment (progress mode and stage included). The bottom layer: it imports
nothing of rerankeval."""
