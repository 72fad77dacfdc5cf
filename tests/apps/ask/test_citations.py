"""Citation checks: fabricated labels, quotes not in the passage, "not in the documents", precision."""

import math

from rerankeval.apps.ask import citations as c

LABELS = {"guide.pdf p.1": "guide.pdf#p1", "guide.pdf p.2": "guide.pdf#p2", "notes.pdf p.7": "notes.pdf#p7"}
TEXTS = {
    "guide.pdf#p1": "The alpha widget stores its configuration in /etc/alpha/alpha.conf.",
    "guide.pdf#p2": "Alpha keeps regenerable data in\n/var/cache/alpha.",
    "notes.pdf#p7": "Gamma uses four worker threads.",
}
QRELS = {"guide.pdf#p1": 2, "notes.pdf#p7": 0}


def check(label, quote=None):
    return c.check_citation(label, quote, LABELS, TEXTS)


def test_a_citation_of_a_given_passage_with_its_quote_is_ok():
    got = check("guide.pdf p.1", "stores its configuration in /etc/alpha/alpha.conf")
    assert (got.status, got.unit) == (c.OK, "guide.pdf#p1")


def test_label_forms_that_name_the_same_passage_are_accepted():
    for label in ("[guide.pdf p.1]", "Guide.PDF  p. 1", "guide.pdf#p1", " 'guide.pdf p.1' "):
        assert check(label).status == c.OK, label


def test_a_label_the_model_was_not_given_is_fabricated():
    for label in ("guide.pdf p.3", "other.pdf p.1", "1", ""):
        got = check(label, "stores its configuration")
        assert (got.status, got.unit) == (c.FABRICATED, None), label


def test_a_quote_not_in_the_cited_passage_is_flagged():
    got = check("guide.pdf p.2", "stores its configuration")  # it is in p.1, not in p.2
    assert (got.status, got.unit) == (c.QUOTE_NOT_FOUND, "guide.pdf#p2")
    assert c.flagged([got]) and not c.flagged([check("guide.pdf p.1")])


def test_quotes_match_across_white_space_case_quote_marks_and_ellipses():
    assert check("guide.pdf p.2", "REGENERABLE   data in /var/cache/alpha").status == c.OK
    assert check("guide.pdf p.2", "\u201cdata in /var/cache/alpha...\u201d").status == c.OK
    assert check("guide.pdf p.2", "").status == c.OK  # no quote: nothing to check


def test_quotes_match_across_pdf_ligatures_and_typographic_quotes():
    texts = {**TEXTS, "notes.pdf#p7": "Gamma\u2019s \ufb01le is \u201cgamma.conf\u201d."}
    assert c.check_citation("notes.pdf p.7", 'Gamma\'s file is "gamma.conf"', LABELS, texts).status == c.OK


def test_not_in_the_documents_is_recognised_by_flag_or_phrase():
    assert c.says_not_in_documents("", flag=True)
    assert c.says_not_in_documents("Not in the documents.")
    assert c.says_not_in_documents("The answer is not found in the provided passages")
    assert not c.says_not_in_documents("It is in /etc/alpha/alpha.conf")


def test_citation_precision_counts_distinct_citations_and_fabricated_ones_as_wrong():
    cited = [
        check("guide.pdf p.1"),
        check("guide.pdf#p1"),
        check("notes.pdf p.7"),
        check("made-up p.9"),
        check("Made-up p. 9"),
    ]
    # distinct: guide p1 (relevant), notes p7 (grade 0), one fabricated label -> 1/3
    assert math.isclose(c.citation_precision(cited, QRELS), 1 / 3)
    assert c.gold_cited(cited, QRELS)
    assert not c.gold_cited([check("notes.pdf p.7")], QRELS)
    assert math.isnan(c.citation_precision([], QRELS))
