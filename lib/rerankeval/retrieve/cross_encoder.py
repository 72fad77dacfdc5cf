"""Optional ``cross_encoder`` variant: rerank a candidate pool with a sentence-transformers CrossEncoder.

Weights are only ever read from local files (``local_files_only=True``): give a local model folder, or a
model name already in the local Hugging Face cache, or set ``RERANKEVAL_CROSS_ENCODER`` to one (in the
environment or ``.env``, see :mod:`rerankeval.core.settings`; :func:`model_name` picks one of them from the
settings it is given). :func:`find_cross_encoder` returns None when nothing local exists, so a notebook can skip
the variant with a plain message instead of downloading; :func:`identity` names the weights found (the files of
their folder), the part of stage 03's run key that says which model reordered a run.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from rerankeval.core.errors import ReRankEvalError
from rerankeval.core.runs import Run
from rerankeval.core.settings import Settings

DEFAULT_CROSS_ENCODER = "cross-encoder/ms-marco-MiniLM-L-6-v2"
ENV_VAR = "RERANKEVAL_CROSS_ENCODER"


NOT_ON_DISK = (
    "no cross-encoder weights on this machine, and nothing is downloaded. Put a CrossEncoder folder on "
    f"disk and set cross_encoder_model or ${ENV_VAR}."
)  # why stage 03 skips the variant


class CrossEncoderUnavailable(ReRankEvalError, RuntimeError):
    pass


def model_name(name_or_path: str | os.PathLike[str] | None, settings: Settings) -> str | os.PathLike[str]:
    """The cross-encoder asked for: ``name_or_path``, else the configured one (``settings.cross_encoder``,
    ``$RERANKEVAL_CROSS_ENCODER``), else :data:`DEFAULT_CROSS_ENCODER`."""
    return name_or_path or settings.cross_encoder or DEFAULT_CROSS_ENCODER


def _candidates(spec: str | os.PathLike[str], cache: Path | None) -> list[Path | str]:
    p = Path(spec).expanduser()
    out: list[Path | str] = []
    if p.is_absolute() or p.exists():
        out.append(p)
    else:
        out += [*([cache / "models" / str(spec).replace("/", "--")] if cache is not None else []), str(spec)]
    return out


def find_cross_encoder(spec: str | os.PathLike[str], cache: Path | None) -> Path | str | None:
    """A local folder or a locally cached model name for the cross-encoder ``spec`` (a path or a name, e.g.
    :func:`model_name`'s), or None if none is on disk.

    Looked up: the given path; ``<cache>/models/<org>--<name>`` in the cache folder ``cache`` (the caller's,
    ``dp.roots.cache``; None: a loaded spec that is a path or a Hugging Face name already); the local Hugging Face
    cache.
    """
    for c in _candidates(spec, cache):
        if isinstance(c, Path):
            if (c / "config.json").is_file():
                return c
            continue
        try:
            from huggingface_hub import constants

            if not Path(constants.HF_HUB_CACHE).is_dir():  # no hub cache at all: skip file_download's ~0.1 s import
                continue
            from huggingface_hub import try_to_load_from_cache

            hit = try_to_load_from_cache(c, "config.json")
        except Exception:  # noqa: BLE001 - an odd name is simply "not available"
            hit = None
        if isinstance(hit, str):
            return c
    return None


def identity(spec: str | os.PathLike[str], cache: Path | None) -> dict[str, Any] | None:
    """The cross-encoder ``spec`` found on disk (:func:`find_cross_encoder`) as its folder's files (name, size,
    modification time; no weights are read), or None when none is on disk: what stage 03's run key holds of it."""
    found = find_cross_encoder(spec, cache)
    if found is None:
        return None
    folder = found if isinstance(found, Path) else _hub_folder(found)
    files = (
        sorted(
            (p.relative_to(folder).as_posix(), p.stat().st_size, p.stat().st_mtime_ns)
            for p in folder.rglob("*")
            if p.is_file()
        )
        if folder is not None
        else None
    )
    return {"model": str(found) if isinstance(found, Path) else found, "files": files}


def _hub_folder(name: str) -> Path | None:
    """The local Hugging Face cache's folder of the model ``name`` (its snapshot), or None."""
    from huggingface_hub import try_to_load_from_cache

    hit = try_to_load_from_cache(name, "config.json")
    return Path(hit).parent if isinstance(hit, str) else None


def load_cross_encoder(spec: str | os.PathLike[str], cache: Path | None, *, device: str = "cpu", max_length: int = 512):
    """Load the CrossEncoder ``spec`` from local files only (looked up as :func:`find_cross_encoder` does);
    :class:`CrossEncoderUnavailable` if none is there."""
    found = find_cross_encoder(spec, cache)
    if found is None:
        tried = ", ".join(str(c) for c in _candidates(spec, cache))
        raise CrossEncoderUnavailable(
            f"no cross-encoder weights on this machine (looked for: {tried}); nothing is downloaded. Put a "
            f"sentence-transformers CrossEncoder folder there or set {ENV_VAR} to one."
        )
    from sentence_transformers import CrossEncoder

    return CrossEncoder(str(found), device=device, local_files_only=True, max_length=max_length)


def load_local(spec: str | os.PathLike[str], cache: Path | None):
    """The loaded cross-encoder ``spec`` when its weights are on disk (:func:`find_cross_encoder`), else None."""
    found = find_cross_encoder(spec, cache)
    return load_cross_encoder(found, None) if found is not None else None


def rerank(
    model,
    queries: Mapping[str, str],
    candidates: Mapping[str, Sequence[str]],
    texts: Mapping[str, str],
    *,
    batch_size: int = 32,
    progress: bool = True,
) -> Run:
    """Score every (query, candidate text) pair; order by score, ties keep the candidate order.

    ``candidates``: qid -> doc/chunk ids in their first-stage order; ``texts``: id -> passage text.
    """
    pairs: list[tuple[str, str]] = []
    owners: list[tuple[str, str]] = []
    for q, docs in candidates.items():
        for d in docs:
            pairs.append((queries[q], texts[d]))
            owners.append((q, d))
    scores = (
        np.asarray(model.predict(pairs, batch_size=batch_size, show_progress_bar=progress), dtype=np.float64).reshape(
            -1
        )
        if pairs
        else np.zeros(0)
    )
    if len(scores) != len(pairs):
        raise ValueError(
            f"the cross-encoder returned {len(scores)} scores for {len(pairs)} pairs "
            "(a multi-label model? use a single-score reranker)"
        )
    by_q: dict[str, list[tuple[int, str, float]]] = {q: [] for q in candidates}
    for i, ((q, d), s) in enumerate(zip(owners, scores, strict=True)):
        by_q[q].append((i, d, float(s)))
    return {q: {d: s for _, d, s in sorted(items, key=lambda t: (-t[2], t[0]))} for q, items in by_q.items()}
