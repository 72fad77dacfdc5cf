import pytest

from rerankeval.corpus.textnorm import chunk_text, normalise


def test_control_characters_become_spaces():
    assert normalise("a\x07b\x00c") == "a b c"


def test_line_end_hyphenation_joined_only_before_lower_case():
    assert normalise("pack-\nage and GNU-\nLinux") == "package and GNU- Linux"


def test_ligatures_soft_hyphens_and_whitespace():
    assert normalise("  ﬁle  sys\u00adtem\n\n\tok ") == "file system ok"


def test_chunks_cover_text_with_overlap_and_offsets():
    text = " ".join(f"w{i:03d}" for i in range(200))  # 999 chars
    spans = chunk_text(text, size=100, overlap=20)
    assert spans[0].start == 0
    for s in spans:
        assert text[s.start : s.start + len(s.text)] == s.text  # offsets point into the page text
        assert len(s.text) <= 100
        assert not s.text.startswith(" ") and not s.text.endswith(" ")
    for a, b in zip(spans, spans[1:], strict=False):
        assert b.start > a.start  # always progresses
        assert b.start < a.start + len(a.text)  # overlaps the previous chunk
    assert spans[-1].start + len(spans[-1].text) == len(text)  # reaches the end


def test_chunks_are_deterministic_and_no_overlap_mode():
    text = "abc " * 300
    assert chunk_text(text, 50, 10) == chunk_text(text, 50, 10)
    spans = chunk_text(text.strip(), 40, 0)
    assert "".join(s.text + " " for s in spans).strip() == text.strip()


def test_short_and_empty_text():
    assert chunk_text("", 100, 10) == []
    assert [s.text for s in chunk_text("one two", 100, 10)] == ["one two"]


@pytest.mark.parametrize("size,overlap", [(0, 0), (10, 10), (10, -1)])
def test_bad_chunk_parameters(size, overlap):
    with pytest.raises(ValueError):
        chunk_text("x", size, overlap)
