"""Small datasets the tests build themselves: PDFs (fpdf2), BEIR files, broken files."""

from __future__ import annotations

import gzip
import json
import os
import time
from pathlib import Path

TINY_PAGES = {
    "alpha-guide.pdf": [
        "The alpha widget stores its configuration in /etc/alpha/alpha.conf. Edit that file and restart "
        "the service to apply changes.",
        "Alpha keeps regenerable data in /var/cache/alpha. The cache can be deleted at any time without "
        "losing information, because alpha rebuilds it on demand.",
    ],
    "beta-manual.pdf": [
        "To upgrade beta packages run the command beta-upgrade --all. It downloads new versions and "
        "installs them in dependency order.",
        "Beta logs every transaction to /var/log/beta/history.log so administrators can audit upgrades "
        "later. The log rotates weekly.",
        "",  # a page with no text
    ],
    "gamma-notes.pdf": [
        "Gamma uses a pool of worker threads. The number of workers is set by the GAMMA_WORKERS "
        "environment variable and defaults to four.",
    ],
}

TINY_QUERIES = [
    ("t1", "where is the alpha configuration file", "lexical", {"alpha-guide.pdf#p1": 2}),
    ("t2", "which folder can I wipe safely because the program recreates it", "paraphrase", {"alpha-guide.pdf#p2": 2}),
    ("t3", "how do I upgrade all beta packages", "lexical", {"beta-manual.pdf#p1": 2, "beta-manual.pdf#p2": 1}),
    ("t4", "how many background threads does gamma start", "paraphrase", {"gamma-notes.pdf#p1": 2}),
]


def write_pdf(path: Path, pages: list[str]) -> Path:
    from fpdf import FPDF

    pdf = FPDF(format="A4")
    pdf.set_auto_page_break(auto=False)
    for text in pages:
        pdf.add_page()
        if text:
            pdf.set_font("Helvetica", size=11)
            pdf.multi_cell(0, 6, text)
    path.parent.mkdir(parents=True, exist_ok=True)
    pdf.output(str(path))
    return path


def write_queries(folder: Path, queries) -> None:
    with open(folder / "queries.jsonl", "w", encoding="utf-8") as fh:
        for qid, text, slice_, _ in queries:
            fh.write(json.dumps({"_id": qid, "text": text, "metadata": {"slice": slice_}}) + "\n")
    (folder / "qrels").mkdir(exist_ok=True)
    with open(folder / "qrels" / "test.tsv", "w", encoding="utf-8") as fh:
        fh.write("query-id\tcorpus-id\tscore\n")
        for qid, _, _, rels in queries:
            for did, g in rels.items():
                fh.write(f"{qid}\t{did}\t{g}\n")


def tiny_pdf_dataset(folder: Path, pages: dict[str, list[str]] | None = None, queries=None) -> Path:
    """A three-PDF dataset with four judged queries (two lexical, two paraphrase)."""
    folder.mkdir(parents=True, exist_ok=True)
    for name, texts in (pages or TINY_PAGES).items():
        write_pdf(folder / name, texts)
    write_queries(folder, queries or TINY_QUERIES)
    return folder


def tiny_beir_dataset(folder: Path, n_docs: int = 6) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    topics = [
        "solar panels convert light",
        "wind turbines spin",
        "batteries store charge",
        "hydro dams hold water",
        "geothermal heat pumps",
        "nuclear fission reactors",
    ]
    with open(folder / "corpus.jsonl", "w", encoding="utf-8") as fh:
        for i in range(n_docs):
            fh.write(json.dumps({"_id": f"d{i}", "title": f"Doc {i}", "text": topics[i % len(topics)]}) + "\n")
    with open(folder / "queries.jsonl", "w", encoding="utf-8") as fh:
        fh.write(json.dumps({"_id": "q1", "text": "how do solar panels work"}) + "\n")
        fh.write(json.dumps({"_id": "q2", "text": "storing electric charge"}) + "\n")
        fh.write(json.dumps({"_id": "q3", "text": "an unjudged query"}) + "\n")
    (folder / "qrels").mkdir(exist_ok=True)
    (folder / "qrels" / "test.tsv").write_text("query-id\tcorpus-id\tscore\nq1\td0\t1\nq2\td2\t1\n", encoding="utf-8")
    return folder


def write_pdf_bytes_name(folder: Path, name: bytes, pages: list[str]) -> Path:
    """A PDF whose file name is raw bytes (e.g. latin-1 ``caf\\xe9.pdf``, not valid UTF-8)."""
    tmp = write_pdf(folder / ".tmp-build.pdf", pages)
    target = os.path.join(os.fsencode(folder), name)
    os.rename(os.fsencode(tmp), target)
    return Path(os.fsdecode(target))


def write_corpus(folder: Path, rows: list[dict], *, gz: bool = False) -> Path:
    """A BEIR corpus of the given JSON rows, as corpus.jsonl or corpus.jsonl.gz (the other one removed)."""
    text = "".join(json.dumps(r) + "\n" for r in rows).encode("utf-8")
    for old in ("corpus.jsonl", "corpus.jsonl.gz"):
        (folder / old).unlink(missing_ok=True)
    path = folder / ("corpus.jsonl.gz" if gz else "corpus.jsonl")
    path.write_bytes(gzip.compress(text, mtime=0) if gz else text)
    return path


# the chunks of test_variants' and test_retrieve_stage's end-to-end retrieval cases: several chunks per page
# (unit = page), so the unit mapping matters; no two chunks share a text
MANUAL_CHUNKS = [
    ("m.pdf#p1:0", "m.pdf#p1", "Install packages with apt-get install; apt downloads and unpacks them."),
    ("m.pdf#p1:300", "m.pdf#p1", "apt-get resolves package dependencies before it installs a package."),
    ("m.pdf#p2:0", "m.pdf#p2", "Configure the network interfaces in the file /etc/network/interfaces."),
    ("m.pdf#p2:300", "m.pdf#p2", "Network configuration with ifupdown: static addresses and DHCP."),
    ("m.pdf#p3:0", "m.pdf#p3", "The kernel is started by the bootloader, GRUB, at boot time."),
    ("m.pdf#p4:0", "m.pdf#p4", "Debian policy requires a copyright file in every binary package."),
    ("m.pdf#p5:0", "m.pdf#p5", "Mail transfer agents such as exim deliver local mail to users."),
]


def manual_dataset(folder: Path, queries: dict[str, str]):
    """A new dataset folder holding :data:`MANUAL_CHUNKS` and ``queries`` (q1-q3, judged on pages 1-3 in order), as
    stage 01 leaves them."""
    from handmade import dataset_at, write_chunks, write_questions
    from rerankeval.core.runs import write_qrels

    dp = dataset_at(folder)
    write_chunks(dp, [(c, u, int(u[-1]), t) for c, u, t in MANUAL_CHUNKS])
    write_questions(dp, queries)
    write_qrels({"q1": {"m.pdf#p1": 1}, "q2": {"m.pdf#p2": 1}, "q3": {"m.pdf#p3": 1}}, dp.qrels)
    return dp


def extract_corpus(dp, *, force: bool = False, **params):
    """Stage 01 through its face: ``corpus.run`` with ``corpus.Params(**params)`` (the rest at their defaults),
    then ``corpus.write``; the run's result."""
    from rerankeval import corpus
    from rerankeval.core.settings import load_settings

    result = corpus.run(dp, corpus.Params(**params), load_settings(), force=force)
    corpus.write(dp, result)
    return result


def hand_made_stages(folder: Path, page_text: dict[str, list[str]], qids: list[str]):
    """Stage 01-03 outputs written by hand, for the LLM stages' tests: the chunks of each page (``page_text``,
    pages in order, ``<unit>#c<j>``), queries ``question <qid>`` all judged on the second page, and a hybrid run
    (chunk and unit level) in which each query ranks the pages rotated by its position, each by its first chunk."""
    from handmade import dataset_at, write_questions, write_rotated_runs
    from rerankeval.core import runs
    from rerankeval.core.ioutil import atomic_write_json, atomic_write_jsonl

    dp = dataset_at(folder)
    units = list(page_text)
    chunks, start = [], {}
    for i, u in enumerate(units):
        for j, text in enumerate(page_text[u]):
            chunks.append(
                {
                    "chunk_id": f"{u}#c{j}",
                    "unit_id": u,
                    "source": "m.pdf",
                    "page": i + 1,
                    "start": start.setdefault(u, 0),
                    "title": "",
                    "text": text,
                }
            )
            start[u] += len(text) + 1
    atomic_write_jsonl(dp.chunks, chunks)
    write_questions(dp, qids)
    runs.write_qrels({q: {units[1]: 1} for q in qids}, dp.qrels)
    atomic_write_json(dp.corpus_stats, {"unit": "page"})
    write_rotated_runs(dp, qids, units, ("hybrid",))
    return dp


class Console:
    """A stand-in for the chain's terminal that remembers when each line was written."""

    def __init__(self) -> None:
        self.lines: list[tuple[float, str]] = []

    def write(self, text: str) -> int:
        self.lines.extend((time.monotonic(), t) for t in text.splitlines() if t.strip())
        return len(text)

    def flush(self) -> None:
        pass

    def isatty(self) -> bool:
        return False

    def first(self, needle: str) -> float:
        return min(t for t, line in self.lines if needle in line)
