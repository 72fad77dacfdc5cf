"""A corpus's term-frequency matrix in one pass, without a Python step per token.

:func:`count_terms` gives exactly what ``BM25Index.from_tokens(ids, [analyzer(t) for t in texts])`` builds
(:mod:`rerankeval.index.bm25`): the sorted vocabulary and the documents x vocabulary matrix of raw counts,
the same arrays and dtypes (``tests/index/test_terms.py``). The analyser's work per text is split in two:

- ``analyzer.raw_tokens(text)``: lowercase and the token regular expression, one C call each per text;
- ``analyzer.terms_of(raw)``: stopwords out and the stemmer, once per *distinct* raw token of the corpus.

Each text's raw tokens are numbered in first-seen order with a C-level dict lookup (``map``; a dict's
``__missing__`` numbers a new one) into one flat array; at the end every distinct raw token is analysed once,
the numbers are mapped to vocabulary columns in one array gather, and SciPy sums the repeats
(``sum_duplicates``: sorted column indices per row, as ``from_tokens`` writes them).

:class:`SparseRows` hands out a matrix's rows as Qdrant's sparse vectors, one at a time.
"""

from __future__ import annotations

from array import array
from collections.abc import Iterable, Sequence
from typing import Protocol

import numpy as np
import scipy.sparse as sp

NO_TERM = -1  # a raw token that yields no index term (a stopword)


class TermSource(Protocol):
    """What :func:`count_terms` needs of an analyser (:class:`rerankeval.index.bm25.Analyzer`)."""

    def raw_tokens(self, text: str) -> list[str]: ...

    def terms_of(self, raw: list[str]) -> list[str | None]: ...


class _FirstSeen(dict):
    """raw token -> its id in first-seen order; an unseen token gets the next id (``__missing__``)."""

    def __missing__(self, raw: str) -> int:
        self[raw] = n = len(self)
        return n


def _codes(analyzer: TermSource, texts: Iterable[str]) -> tuple[np.ndarray, np.ndarray, list[str]]:
    """The id of every raw token of every text, the number of raw tokens per text, the raw tokens by id."""
    ids = _FirstSeen()
    flat, lengths = array("l"), array("l")
    for text in texts:
        toks = analyzer.raw_tokens(text)
        flat.extend(map(ids.__getitem__, toks))
        lengths.append(len(toks))
    return np.frombuffer(flat, dtype=np.int_), np.frombuffer(lengths, dtype=np.int_), list(ids)


def count_terms(analyzer: TermSource, texts: Iterable[str]) -> tuple[list[str], sp.csr_matrix]:
    """(sorted vocabulary, documents x vocabulary float64 counts) of ``texts`` as ``analyzer`` analyses them."""
    codes, lengths, raw = _codes(analyzer, texts)
    terms = analyzer.terms_of(raw)
    vocab = sorted({t for t in terms if t is not None})
    col = {t: i for i, t in enumerate(vocab)}
    column = np.fromiter((NO_TERM if t is None else col[t] for t in terms), dtype=np.int64, count=len(terms))
    cols = column[codes]
    keep = cols != NO_TERM
    rows = np.repeat(np.arange(lengths.size, dtype=np.int64), lengths)[keep]
    cols = cols[keep]
    shape = (lengths.size, len(vocab))
    tf = sp.csr_matrix((np.ones(cols.size, dtype=np.float64), (rows, cols)), shape=shape)
    tf.sum_duplicates()
    # the index dtype from_tokens gets (SciPy picks it from the arrays' contents)
    return vocab, sp.csr_matrix((tf.data, tf.indices, tf.indptr), shape=shape)


class SparseRows(Sequence[tuple[list[int], list[float]]]):
    """The rows of a CSR matrix as (column ids, values) lists, made when asked for: a million documents' rows as
    Python lists would hold about 70 bytes per nonzero (8 GB for SciFact-like text), the matrix holds 12."""

    def __init__(self, m: sp.csr_matrix) -> None:
        self._m = m

    def __len__(self) -> int:
        return int(self._m.shape[0])

    def __getitem__(self, i):  # type: ignore[override]
        if isinstance(i, slice):
            return [self[j] for j in range(*i.indices(len(self)))]
        n = len(self)
        if not -n <= i < n:
            raise IndexError(i)
        a, z = self._m.indptr[i % n], self._m.indptr[i % n + 1]
        return self._m.indices[a:z].tolist(), self._m.data[a:z].tolist()

    def nonempty(self) -> int:
        """Rows with at least one nonzero."""
        return int(np.count_nonzero(np.diff(self._m.indptr)))
