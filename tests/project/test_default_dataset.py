"""The default dataset (data/debian-manuals): queries, graded page-level qrels and evidence phrases.

Structure checks are instant. The PDF checks open each manual once, count its pages (every judged page
must exist) and extract only the pages that carry an evidence phrase (grade 2), normalised exactly as
the workbench indexes them (``rerankeval.corpus.textnorm.normalise`` on ``extract_text(x_tolerance=1.5)``,
as in ``rerankeval.corpus.pdf.iter_pages``). No network.
"""

from __future__ import annotations

import json
from collections import Counter, defaultdict
from pathlib import Path

import pytest

from rerankeval.core.paths import DATA_DIR
from rerankeval.corpus.pdf import page_id
from rerankeval.corpus.textnorm import normalise

DS = DATA_DIR / "debian-manuals"
MANUALS = (
    "debian-faq.en.pdf",
    "debian-policy.pdf",
    "debian-reference.en.pdf",
    "developers-reference.pdf",
    "fhs-3.0.pdf",
    "maint-guide.en.pdf",
)
SLICES = {"lexical", "paraphrase"}
X_TOLERANCE = 1.5  # the default of rerankeval.corpus.pdf.iter_pages


def _tsv(path: Path, header: list[str]) -> list[list[str]]:
    lines = path.read_text(encoding="utf-8").splitlines()
    assert lines and lines[0].split("\t") == header, f"{path.name}: header must be {header}"
    rows = [ln.split("\t") for ln in lines[1:] if ln.strip()]
    bad = [r for r in rows if len(r) != len(header)]
    assert not bad, f"{path.name}: rows without {len(header)} tab-separated columns: {bad[:3]}"
    return rows


def _split_unit(unit: str) -> tuple[str, int]:
    source, _, page = unit.rpartition("#p")
    assert source and page.isdigit(), f"malformed page id {unit!r}"
    return source, int(page)


@pytest.fixture(scope="module")
def queries() -> list[dict]:
    with open(DS / "queries.jsonl", encoding="utf-8") as fh:
        return [json.loads(line) for line in fh if line.strip()]


@pytest.fixture(scope="module")
def qrels() -> list[tuple[str, str, int]]:
    rows = _tsv(DS / "qrels" / "test.tsv", ["query-id", "corpus-id", "score"])
    return [(q, d, int(g)) for q, d, g in rows]


@pytest.fixture(scope="module")
def evidence() -> list[tuple[str, str, str]]:
    return [tuple(r) for r in _tsv(DS / "evidence.tsv", ["query-id", "corpus-id", "phrase"])]


@pytest.fixture(scope="module")
def pdf_pages(qrels, evidence):
    """(page counts per manual, normalised text of every page that carries an evidence phrase)."""
    pdfplumber = pytest.importorskip("pdfplumber")
    wanted: dict[str, set[int]] = defaultdict(set)
    for _, unit, _ in evidence:
        source, page = _split_unit(unit)
        wanted[source].add(page)
    counts: dict[str, int] = {}
    texts: dict[str, str] = {}
    for name in sorted({_split_unit(d)[0] for _, d, _ in qrels} | set(wanted)):
        path = DS / name
        assert path.is_file(), f"qrels name {name}, which is not a PDF of the dataset"
        with pdfplumber.open(path) as pdf:
            counts[name] = len(pdf.pages)
            for page in sorted(wanted.get(name, ())):
                if page > counts[name]:
                    continue  # reported by test_every_judged_page_exists
                pg = pdf.pages[page - 1]
                texts[page_id(name, page)] = normalise(pg.extract_text(x_tolerance=X_TOLERANCE) or "")
                pg.close()
    return counts, texts


def test_queries_are_well_formed(queries):
    assert len(queries) >= 50
    ids = [q["_id"] for q in queries]
    assert len(ids) == len(set(ids)), "query ids must be unique"
    for q in queries:
        assert q["_id"].startswith("dm-") and not any(c.isspace() for c in q["_id"])
        assert len(q["text"].split()) >= 4, q
        assert q["metadata"]["slice"] in SLICES, q
    texts = [q["text"].strip().lower() for q in queries]
    assert len(texts) == len(set(texts)), "duplicate query texts"


def test_both_slices_are_at_least_40_percent(queries):
    n = Counter(q["metadata"]["slice"] for q in queries)
    for s in SLICES:
        assert n[s] >= 0.4 * len(queries), dict(n)


def test_qrels_are_consistent(queries, qrels):
    ids = {q["_id"] for q in queries}
    assert {g for _, _, g in qrels} <= {1, 2}, "grades must be 1 or 2"
    pairs = [(q, d) for q, d, _ in qrels]
    assert len(pairs) == len(set(pairs)), "duplicate (query, page) judgments"
    assert {q for q, _, _ in qrels} <= ids, "qrels name unknown queries"
    grade2 = {q for q, _, g in qrels if g == 2}
    assert ids <= grade2, f"queries without a grade-2 page: {sorted(ids - grade2)}"
    for _, unit, _ in qrels:
        source, page = _split_unit(unit)
        assert source in MANUALS and page >= 1 and unit == page_id(source, page), unit


def test_several_queries_have_several_answer_pages(qrels):
    per_query = Counter(q for q, _, _ in qrels)
    assert sum(1 for n in per_query.values() if n >= 2) >= 8
    two_grade2 = Counter(q for q, _, g in qrels if g == 2)
    assert sum(1 for n in two_grade2.values() if n >= 2) >= 8


def test_all_six_manuals_are_covered(queries, qrels):
    primary = Counter(q["metadata"].get("manual") for q in queries)
    judged = defaultdict(set)
    for q, unit, _ in qrels:
        judged[_split_unit(unit)[0]].add(q)
    for m in MANUALS:
        assert primary[m] >= 6, f"{m}: only {primary[m]} queries written for it"
        assert len(judged[m]) >= 6, f"{m}: judged for only {len(judged[m])} queries"


def test_every_grade2_judgment_has_evidence(qrels, evidence):
    grade2 = {(q, d) for q, d, g in qrels if g == 2}
    ev = [(q, d) for q, d, _ in evidence]
    assert len(ev) == len(set(ev)), "one evidence row per grade-2 judgment"
    assert set(ev) == grade2, (
        f"grade-2 without evidence: {sorted(grade2 - set(ev))[:5]}; "
        f"evidence for non-grade-2: {sorted(set(ev) - grade2)[:5]}"
    )
    for q, d, phrase in evidence:
        assert 5 <= len(phrase.split()) <= 15, (q, d, phrase)


def test_every_judged_page_exists(qrels, pdf_pages):
    counts, _ = pdf_pages
    assert set(counts) == set(MANUALS)
    for q, unit, _ in qrels:
        source, page = _split_unit(unit)
        assert page <= counts[source], f"{q}: {unit} but {source} has {counts[source]} pages"


def test_every_evidence_phrase_is_on_its_page(evidence, pdf_pages):
    _, texts = pdf_pages
    missing = []
    for q, unit, phrase in evidence:
        text = " ".join(texts[unit].split())
        if " ".join(phrase.split()) not in text:
            missing.append((q, unit, phrase))
    assert not missing, f"{len(missing)} evidence phrases not found, e.g. {missing[:3]}"


def test_answer_pages_are_not_tables_of_contents(pdf_pages):
    _, texts = pdf_pages
    for unit, text in texts.items():
        assert text.count(". . .") + text.count("....") < 5, f"{unit} looks like a table of contents"
