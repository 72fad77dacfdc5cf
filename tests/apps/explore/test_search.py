"""Issue 35 item 10: the explorer's first free-text search shows no "Loading weights" bar nor model logs in the
cell (the model libraries are silenced while the encoder loads, then set back), and says what it is doing."""

from __future__ import annotations

import logging

import pytest

from rerankeval.apps.explore.search import LiveSearch, quiet_models


def _bar() -> None:
    """What transformers prints while it loads a model's weights (its own tqdm), and a log line."""
    from transformers.utils import logging as tlog

    for _ in tlog.tqdm(range(3), desc="Loading weights"):
        pass
    tlog.get_logger("transformers.modeling_utils").warning("Some weights were not used")


def test_the_weights_bar_and_model_logs_are_silenced_inside_and_restored_after(capsys):
    pytest.importorskip("transformers")
    from huggingface_hub import utils as hub
    from transformers.utils import logging as tlog

    _bar()
    shown = capsys.readouterr().err
    assert "Loading weights" in shown  # what leaks into the cell (the warning too, wherever logging sends it)
    st = logging.getLogger("sentence_transformers")
    before = (tlog.is_progress_bar_enabled(), hub.are_progress_bars_disabled(), tlog.get_verbosity(), st.level)
    with quiet_models():
        _bar()
        st.warning("No sentence-transformers model found")
    got = capsys.readouterr()
    assert got.err == "" and got.out == ""
    assert (tlog.is_progress_bar_enabled(), hub.are_progress_bars_disabled(), tlog.get_verbosity(), st.level) == before
    _bar()
    assert "Loading weights" in capsys.readouterr().err  # set back after the block


class _Encoder:
    kind, model_id = "in-process", "all-MiniLM-L6-v2"

    def __init__(self, loaded: bool, cached: bool) -> None:
        self.loaded, self.cached = loaded, cached

    def all_cached(self, texts) -> bool:
        return self.cached


@pytest.mark.parametrize(
    ("loaded", "cached", "quiet"), [(False, False, True), (True, False, False), (False, True, False)]
)
def test_the_search_is_quiet_and_says_so_only_when_it_loads_the_encoder(loaded, cached, quiet):
    live = LiveSearch.__new__(LiveSearch)
    said: list[str] = []
    live.say = said.append
    live.retriever = type("R", (), {"embedder": _Encoder(loaded, cached)})()
    got = live._loading("vector", "where is the alpha configuration")
    assert (type(got).__name__ != "nullcontext") is quiet
    assert bool(said) is quiet and (not said or "loading the encoder all-MiniLM-L6-v2" in said[0])
    assert type(live._loading("bm25", "x")).__name__ == "nullcontext"  # BM25 loads no model
