"""``python -m rerankeval.chain``: the chain's entry point, kept where it was; the chain itself is
:mod:`rerankeval.apps.chain`. The only module at the top level besides ``__init__``."""

import sys

from rerankeval.apps.chain import main

if __name__ == "__main__":
    sys.exit(main())
