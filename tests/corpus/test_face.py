"""Stage 01's face (issue 33 items 1-3): ``corpus.run`` computes and writes nothing, ``corpus.write`` writes the
corpus contract; ``corpus.Params`` is the one home of the stage's defaults (a chunking point of the sweep starts
from the parameters stage 01 recorded)."""

import inspect

from rerankeval import corpus
from rerankeval.core import paths
from rerankeval.core.ioutil import sha256_file
from rerankeval.core.settings import load_settings
from rerankeval.corpus import extract
from rerankeval.experiments import grid


def _files(folder):
    return {p.name: p.read_bytes() for p in folder.iterdir()} if folder.is_dir() else {}


def test_run_writes_nothing_and_write_writes_the_corpus(tiny_pdf):
    dp = paths.resolve_dataset(tiny_pdf, load_settings())
    result = corpus.run(dp, corpus.Params(chunk_size=120, chunk_overlap=30), load_settings())
    assert _files(dp.corpus_dir) == {} and not dp.source_record.exists()  # run only computed
    assert result.stats["chunks"] == len(result.docs.chunks) and not result.reused
    written = corpus.write(dp, result)
    assert {p.name for p in written} == set(_files(dp.corpus_dir)) and written[-1] == dp.corpus_stats
    assert result.stats["corpus_hash"] == sha256_file(dp.chunks) == corpus.contract.load_stats(dp)["corpus_hash"]
    assert corpus.contract.load_stats(dp)["params"] == {
        "split": "test",
        "chunk_size": 120,
        "chunk_overlap": 30,
        "x_tolerance": 1.5,
    }
    before = _files(dp.corpus_dir)
    again = corpus.run(dp, corpus.Params(chunk_size=120, chunk_overlap=30), load_settings())
    assert again.reused and corpus.write(dp, again) == [] and _files(dp.corpus_dir) == before


def test_params_are_the_one_home_of_the_defaults():
    """Below the face, stage 01's functions take its parameters without defaults of their own."""
    for fn in (extract.check_inputs, extract.extract_docs):
        defaulted = [n for n, p in inspect.signature(fn).parameters.items() if p.default is not inspect.Parameter.empty]
        assert defaulted == [], f"{fn.__name__} defaults {defaulted}: the defaults live in corpus.Params"
    assert corpus.Params.of({"chunk_size": 300, "unrelated": 1}) == corpus.Params(chunk_size=300)


def test_a_chunking_point_keeps_the_recorded_stage_01_parameters(tiny_beir):
    dp = paths.resolve_dataset(tiny_beir, load_settings())
    corpus.write(dp, corpus.run(dp, corpus.Params(x_tolerance=2.5), load_settings()))
    point = grid.chunking_params(dp, 60, 10)
    assert point == corpus.Params(split="test", chunk_size=60, chunk_overlap=10, x_tolerance=2.5)
