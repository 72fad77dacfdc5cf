"""The programs people run: the notebook chain (the ``chain`` sub-package, ``python -m rerankeval.apps.chain``),
the explorer (the ``explore`` sub-package), the cited answers (the ``ask`` sub-package, stage 07) and JupyterLab
(lab). The top layer: may import everything; nothing imports it."""
