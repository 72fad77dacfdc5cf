"""ReRankEval: does hybrid retrieval plus LLM reranking retrieve better on my documents, and by how much?

The sub-packages are the stages, each a layer importing only the layers below it: apps > report > experiments >
evaluate > rerank | retrieve > llm | index > corpus > core (``.importlinter``, checked by ``make lint`` and
tests/project/test_layers.py). A stage reads the files earlier stages saved (chunk table, run files, records)
through their readers, at the locations of :class:`rerankeval.core.paths.DatasetPaths`. The chain that runs them all is
``python -m rerankeval.apps.chain`` (``make report``). The map: docs/CONTRACTS.md.
"""

__version__ = "0.1.0"
