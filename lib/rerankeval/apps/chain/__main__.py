"""``python -m rerankeval.apps.chain``: the chain's entry point (:func:`rerankeval.apps.chain.runner.main`)."""

import sys

from rerankeval.apps.chain.runner import main

if __name__ == "__main__":
    sys.exit(main())
