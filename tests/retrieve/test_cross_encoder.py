"""The cross-encoder code path with a tiny randomly initialised BERT the test builds itself (no weights
are downloaded or needed)."""

from __future__ import annotations

import pytest

from rerankeval.core.paths import Roots
from rerankeval.core.settings import Settings, load_settings
from rerankeval.retrieve import cross_encoder as ce

WORDS = "the a cat dog sat on mat ran fast slow red blue apt package network grub".split()


@pytest.fixture(scope="module")
def tiny_model_dir(tmp_path_factory):
    import torch
    from tokenizers import Tokenizer, models, pre_tokenizers, processors
    from transformers import BertConfig, BertForSequenceClassification, PreTrainedTokenizerFast

    folder = tmp_path_factory.mktemp("tiny-cross-encoder")
    specials = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
    vocab = {w: i for i, w in enumerate(specials + WORDS)}
    tok = Tokenizer(models.WordLevel(vocab=vocab, unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    tok.post_processor = processors.TemplateProcessing(
        single="[CLS] $A [SEP]",
        pair="[CLS] $A [SEP] $B:1 [SEP]:1",
        special_tokens=[("[CLS]", vocab["[CLS]"]), ("[SEP]", vocab["[SEP]"])],
    )
    PreTrainedTokenizerFast(
        tokenizer_object=tok,
        unk_token="[UNK]",
        pad_token="[PAD]",
        cls_token="[CLS]",
        sep_token="[SEP]",
        mask_token="[MASK]",
        model_max_length=64,
    ).save_pretrained(folder)
    torch.manual_seed(0)
    cfg = BertConfig(
        vocab_size=len(vocab),
        hidden_size=16,
        num_hidden_layers=1,
        num_attention_heads=2,
        intermediate_size=32,
        max_position_embeddings=64,
        num_labels=1,
    )
    BertForSequenceClassification(cfg).save_pretrained(folder)
    return folder


def test_load_from_a_local_folder_and_rerank(tiny_model_dir):
    model = ce.load_cross_encoder(tiny_model_dir, None)
    queries = {"q1": "cat sat", "q2": "apt package"}
    texts = {"d1": "the cat sat on the mat", "d2": "a dog ran fast", "d3": "red blue network", "d4": "grub"}
    cands = {"q1": ["d1", "d2", "d3"], "q2": ["d4", "d3"]}
    run = ce.rerank(model, queries, cands, texts, progress=False)
    assert {q: set(d) for q, d in run.items()} == {q: set(d) for q, d in cands.items()}
    for q, docs in cands.items():
        expect = model.predict([(queries[q], texts[d]) for d in docs], show_progress_bar=False)
        scores = dict(zip(docs, map(float, expect), strict=True))
        assert run[q] == pytest.approx(scores, abs=1e-6)
        assert list(run[q]) == sorted(docs, key=lambda d: -scores[d])


def test_ties_keep_the_first_stage_order():
    class Constant:
        def predict(self, pairs, **kw):
            return [0.5] * len(pairs)

    texts = {"a": "", "b": "", "c": ""}
    run = ce.rerank(Constant(), {"q": "x"}, {"q": ["c", "a", "b"]}, texts, progress=False)
    assert list(run["q"]) == ["c", "a", "b"]
    assert ce.rerank(Constant(), {"q": "x"}, {"q": []}, {}, progress=False) == {"q": {}}


def test_missing_weights_are_reported_never_downloaded(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    assert ce.find_cross_encoder(tmp_path / "nowhere", tmp_path) is None
    assert ce.find_cross_encoder("nobody/no-such-cross-encoder", tmp_path) is None
    with pytest.raises(ce.CrossEncoderUnavailable, match="nothing is downloaded"):
        ce.load_cross_encoder("nobody/no-such-cross-encoder", tmp_path)


def test_model_found_in_the_rerankeval_model_cache(tiny_model_dir, tmp_path, monkeypatch):
    import shutil

    monkeypatch.setenv("RERANKEVAL_CACHE", str(tmp_path))
    cache = Roots.of(load_settings()).cache  # the cache folder of the settings, as the stages pass it (dp.roots)
    shutil.copytree(tiny_model_dir, tmp_path / "models" / "me--tiny")
    assert ce.find_cross_encoder("me/tiny", cache) == tmp_path / "models" / "me--tiny"
    assert ce.find_cross_encoder("me/tiny", None) is None  # no cache folder given: not looked in
    monkeypatch.setenv(ce.ENV_VAR, str(tiny_model_dir))  # the configured one, read by the settings given
    assert ce.find_cross_encoder(ce.model_name(None, load_settings()), cache) == tiny_model_dir
    assert ce.find_cross_encoder(ce.model_name("me/tiny", load_settings()), cache) == tmp_path / "models" / "me--tiny"
    assert ce.model_name(None, Settings(cross_encoder="")) == ce.DEFAULT_CROSS_ENCODER
