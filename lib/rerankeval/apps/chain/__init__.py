"""The notebook chain: run the numbered notebooks in order with papermill and render the HTML report (what
``make report`` runs)::

    python -m rerankeval.apps.chain --dataset NAME_OR_PATH [--set key=value ...] [--only NN] [--force]
    rerankeval-chain --dataset ...                      # the same, the console command pyproject.toml installs

:func:`main` is the chain's entry point and the one place it reads the settings (environment and ``.env``); it
hands them to :func:`run_chain`, which checks, runs and reports (see :mod:`~rerankeval.apps.chain.runner`).

:data:`__all__` is the chain's public face. Behind it each name has one home; import those from their module:
``runner`` (the run: ``main``, ``run_chain``, ``run_notebook``, ``Freshness``, the exit statuses); ``params`` (the
notebooks in chain order, their parameters and the type checks, ``PreflightError``); ``preflight`` (the checks before
the run, the endpoint, the fallback verdict); ``signals`` (Ctrl-C and SIGTERM, the kernel manager); ``files``
(atomic saves, OS errors as the user reads them, the index's page records, the fingerprints of up-to-date
notebooks). The face's names load on first use (PEP 562): a kernel's start-up line imports
``rerankeval.apps.chain.files`` without the rest.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from rerankeval.core.face import lazy

if TYPE_CHECKING:
    from rerankeval.apps.chain.params import PreflightError
    from rerankeval.apps.chain.runner import EXIT_FAILED, EXIT_PREFLIGHT, KERNEL, main, run_chain

__all__ = ["EXIT_FAILED", "EXIT_PREFLIGHT", "KERNEL", "PreflightError", "main", "run_chain"]

_RUNNER = ("EXIT_FAILED", "EXIT_PREFLIGHT", "KERNEL", "main", "run_chain")
_HOME = {
    **dict.fromkeys(_RUNNER, "rerankeval.apps.chain.runner"),
    "PreflightError": "rerankeval.apps.chain.params",
}


__getattr__, __dir__ = lazy(__name__, _HOME)
