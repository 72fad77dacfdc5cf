"""The programs people run: the notebook chain (``python -m rerankeval.chain``), the explorer (the ``explore``
sub-package), the cited answers (the ``ask`` sub-package, stage 07) and JupyterLab (lab). The top layer: may import
everything; nothing imports it but the rerankeval.chain shim."""
