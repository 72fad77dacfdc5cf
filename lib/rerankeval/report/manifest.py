"""The run manifest is written by stage 05 (:mod:`rerankeval.evaluate.manifest`); the report only reads it.

Re-exported here so ``from rerankeval.report import manifest`` keeps working.
"""

from rerankeval.evaluate.manifest import (
    LIBRARIES,
    SMALL_JSON,
    build_manifest,
    library_versions,
    read_manifest,
    redact,
    write_manifest,
)

__all__ = ["LIBRARIES", "SMALL_JSON", "build_manifest", "library_versions", "read_manifest", "redact",
           "write_manifest"]
