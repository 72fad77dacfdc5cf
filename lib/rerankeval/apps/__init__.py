"""The programs people run: the notebook chain, the explorer, the cited answers (ask, citations) and
JupyterLab. The top layer: may import everything; nothing imports it but the rerankeval.chain shim."""
