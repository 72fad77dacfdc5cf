"""Every error the package raises on purpose has one base, ReRankEvalError, and keeps its standard base."""

from __future__ import annotations

import importlib
import inspect
import pkgutil

import rerankeval
from rerankeval.core.errors import ReRankEvalError


def _package_exceptions() -> dict[str, type[BaseException]]:
    found = {}
    for mod in pkgutil.walk_packages(rerankeval.__path__, "rerankeval."):
        if mod.name in ("rerankeval.apps.chain.__main__", "rerankeval.llm.xllama_server"):
            continue  # entry points: importing them is harmless, but they define no errors
        module = importlib.import_module(mod.name)
        for name, obj in vars(module).items():
            # errors only: warnings and the chain's KeyboardInterrupt subclass (a stop signal) are not errors
            if (
                inspect.isclass(obj)
                and issubclass(obj, Exception)
                and not issubclass(obj, Warning)
                and obj.__module__ == mod.name
                and not name.startswith("_")
            ):
                found[f"{mod.name}.{name}"] = obj
    return found


def test_every_public_exception_class_is_a_rerankeval_error():
    found = _package_exceptions()
    assert len(found) >= 13, sorted(found)  # the classes this test was written against, at the least
    outside = sorted(name for name, cls in found.items() if not issubclass(cls, ReRankEvalError))
    assert not outside, f"derive these from rerankeval.core.errors.ReRankEvalError too: {outside}"


def test_each_keeps_its_standard_base_so_existing_handlers_still_catch_it():
    from rerankeval.core.paths import DatasetNotFound
    from rerankeval.core.runs import RunContractError
    from rerankeval.corpus.beir import InputError
    from rerankeval.llm.local_server import EndpointError, ServerCrashed

    assert issubclass(InputError, ValueError) and issubclass(RunContractError, ValueError)
    assert issubclass(DatasetNotFound, FileNotFoundError) and issubclass(EndpointError, RuntimeError)
    assert issubclass(ServerCrashed, EndpointError)
    try:
        raise InputError("qrels/test.tsv line 3: ...")
    except ReRankEvalError as exc:
        assert "line 3" in str(exc)
