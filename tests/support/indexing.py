"""Stage 02 for tests that need built indexes: through the stage's face, as notebook 02 runs it."""

from __future__ import annotations

from rerankeval import index
from rerankeval.core.paths import DatasetPaths
from rerankeval.core.settings import Settings, load_settings
from rerankeval.index.embed import CachedEncoder


def build_index(
    dp: DatasetPaths,
    params: index.Params | None = None,
    *,
    embedder: CachedEncoder | None = None,
    settings: Settings | None = None,
) -> index.Result:
    """``index.run`` then ``index.write`` (the manifest). ``params``: None for the stage's defaults; ``settings``:
    None for the environment's (what a test set with ``monkeypatch.setenv``); progress is off either way."""
    settings = (settings if settings is not None else load_settings()).model_copy(update={"progress": "off"})
    result = index.run(dp, params if params is not None else index.Params(), settings, embedder=embedder)
    index.write(dp, result)
    return result
