"""BM25 (rank-bm25's ``BM25Okapi`` statistics) with an explicit analyser and a fast sparse scoring path.

Analyser (:class:`Analyzer`), applied identically to documents and queries:

1. lowercase (``str.lower``);
2. tokenise with the regular expression :data:`TOKEN_PATTERN` = ``\\w+`` (maximal runs of Unicode
   letters, digits and underscore; so "IL-6" -> "il", "6" and "don't" -> "don", "t");
3. drop English stopwords (:data:`STOPWORDS_EN`, the classic NLTK English list, shipped here);
4. stem with PyStemmer's English (Porter 2 / snowball) stemmer.

Scoring is Okapi BM25 exactly as ``rank_bm25.BM25Okapi`` computes it (k1, b, epsilon; defaults
k1 = 1.2, b = 0.75, epsilon = 0.25)::

    idf(t)  = ln(N - df + 0.5) - ln(df + 0.5)            (may be negative)
    idf(t)  = epsilon * mean_t(idf)   if idf(t) < 0       (rank-bm25's floor, mean over the raw idfs)
    w(d, t) = idf(t) * tf (k1 + 1) / (tf + k1 (1 - b + b |d| / avgdl))
    s(d, q) = sum over query tokens t (repeats count again) of w(d, t)

rank-bm25's ``get_scores`` loops over every document in Python for every query token. The fast path
precomputes ``w`` once as a SciPy sparse matrix (documents x vocabulary) from the same statistics, so a
query is one sparse column gather and a mat-vec; scores equal rank-bm25's to 1e-9 (tests).

Only documents with a positive score are returned: a list is never padded with zero-score documents.
Ties are broken by document id (ascending).

For Qdrant's native sparse retrieval, :meth:`BM25Index.sparse_doc_vectors` gives per-document term ids
(from the index's stable, sorted vocabulary) with BM25 tf-saturation values; Qdrant multiplies in its
own IDF (``Modifier.IDF``: ``ln((N - df + 0.5)/(df + 0.5) + 1)``, never negative) at query time.
"""

from __future__ import annotations

import io
import json
import re
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from functools import cached_property
from pathlib import Path

import numpy as np
import scipy.sparse as sp

from rerankeval.core.ioutil import atomic_write_bytes, atomic_write_json, sha256_json
from rerankeval.core.runs import Run
from rerankeval.index.terms import SparseRows, count_terms

TOKEN_PATTERN = r"\w+"

# The classic NLTK English stopword list (179 words; contractions kept for fidelity, harmless after
# tokenisation splits on the apostrophe, whose halves "don", "t", "ll", "ve"... are listed too).
STOPWORDS_EN: frozenset[str] = frozenset(
    """
    i me my myself we our ours ourselves you you're you've you'll you'd your yours yourself yourselves
    he him his himself she she's her hers herself it it's its itself they them their theirs themselves
    what which who whom this that that'll these those am is are was were be been being have has had
    having do does did doing a an the and but if or because as until while of at by for with about
    against between into through during before after above below to from up down in out on off over
    under again further then once here there when where why how all any both each few more most other
    some such no nor not only own same so than too very s t can will just don don't should should've
    now d ll m o re ve y ain aren aren't couldn couldn't didn didn't doesn doesn't hadn hadn't hasn
    hasn't haven haven't isn isn't ma mightn mightn't mustn mustn't needn needn't shan shan't shouldn
    shouldn't wasn wasn't weren weren't won won't wouldn wouldn't
    """.split()
)

FORMAT_VERSION = 2


@dataclass(frozen=True)
class Analyzer:
    """Text -> index terms: lowercase, regex tokens, stopwords out, snowball stem (see module doc)."""

    lowercase: bool = True
    token_pattern: str = TOKEN_PATTERN
    stopwords: str | None = "english"  # "english" (STOPWORDS_EN) or None
    stemmer: str | None = "english"  # a PyStemmer algorithm name or None

    def spec(self) -> dict:
        """What the analyser depends on, for cache keys."""
        d = asdict(self)
        d["stopword_list_sha256"] = sha256_json(sorted(self._stopwords))
        return d

    @cached_property
    def _regex(self) -> re.Pattern[str]:
        return re.compile(self.token_pattern)

    @cached_property
    def _stopwords(self) -> frozenset[str]:
        if self.stopwords is None:
            return frozenset()
        if self.stopwords != "english":
            raise ValueError(f"unknown stopword list {self.stopwords!r}; use 'english' or None")
        return STOPWORDS_EN

    @cached_property
    def _term_cache(self) -> dict[str, str | None]:
        return {}

    @cached_property
    def _stemmer(self):
        if self.stemmer is None:
            return None
        import Stemmer  # PyStemmer

        return Stemmer.Stemmer(self.stemmer, 0)  # no PyStemmer cache: terms_of's callers keep their own

    def raw_tokens(self, text: str) -> list[str]:
        """Steps 1 and 2: the text lowercased (if so configured) and split by the token pattern."""
        return self._regex.findall(text.lower() if self.lowercase else text)

    def terms_of(self, raw: list[str]) -> list[str | None]:
        """Steps 3 and 4 for each raw token: its index term, or None for a stopword."""
        stop = self._stopwords
        keep = [t for t in raw if t not in stop]
        stems = iter(keep if self._stemmer is None else self._stemmer.stemWords(keep))
        return [None if t in stop else next(stems) for t in raw]

    def __call__(self, text: str) -> list[str]:
        toks = self.raw_tokens(text)
        cache = self._term_cache
        missing = list(set(toks).difference(cache))
        if missing:
            cache.update(zip(missing, self.terms_of(missing), strict=True))
        return [term for t in toks if (term := cache[t]) is not None]


@dataclass(frozen=True)
class BM25Params:
    k1: float = 1.2
    b: float = 0.75
    epsilon: float = 0.25  # rank-bm25's floor for negative idf: epsilon * mean idf


@dataclass
class BM25Index:
    """A BM25 index over ``ids``; build with :meth:`build`, query with :meth:`search` or :meth:`scores`."""

    ids: list[str]
    vocab: list[str]  # sorted; a term's position is its stable term id (also Qdrant's sparse index)
    tf: sp.csr_matrix  # documents x vocabulary, raw term frequencies
    params: BM25Params = field(default_factory=BM25Params)
    analyzer: Analyzer = field(default_factory=Analyzer)

    # ---- construction ----
    @classmethod
    def build(
        cls,
        ids: Sequence[str],
        texts: Sequence[str],
        *,
        params: BM25Params | None = None,
        analyzer: Analyzer | None = None,
    ) -> BM25Index:
        """The index of ``texts`` (one per id) analysed by ``analyzer``: ``from_tokens`` of the analysed texts,
        computed in one pass over the corpus (:func:`rerankeval.index.terms.count_terms`)."""
        analyzer = analyzer or Analyzer()
        _check_ids(ids, len(texts))
        vocab, tf = count_terms(analyzer, texts)
        return cls(list(ids), vocab, tf, params or BM25Params(), analyzer)

    @classmethod
    def from_tokens(
        cls,
        ids: Sequence[str],
        docs: Sequence[Sequence[str]],
        *,
        params: BM25Params | None = None,
        analyzer: Analyzer | None = None,
    ) -> BM25Index:
        _check_ids(ids, len(docs))
        vocab = sorted({t for d in docs for t in d})
        tid = {t: i for i, t in enumerate(vocab)}
        indptr = [0]
        indices: list[int] = []
        data: list[int] = []
        for d in docs:
            counts = Counter(tid[t] for t in d)
            for j in sorted(counts):
                indices.append(j)
                data.append(counts[j])
            indptr.append(len(indices))
        tf = sp.csr_matrix(
            (np.asarray(data, dtype=np.float64), np.asarray(indices, dtype=np.int64), np.asarray(indptr)),
            shape=(len(docs), len(vocab)),
        )
        return cls(list(ids), vocab, tf, params or BM25Params(), analyzer or Analyzer())

    # ---- statistics (the same as rank_bm25.BM25Okapi) ----
    @property
    def n_docs(self) -> int:
        return self.tf.shape[0]

    @cached_property
    def term_id(self) -> dict[str, int]:
        return {t: i for i, t in enumerate(self.vocab)}

    @cached_property
    def doc_len(self) -> np.ndarray:
        return np.asarray(self.tf.sum(axis=1)).ravel()

    @cached_property
    def avgdl(self) -> float:
        return float(self.doc_len.sum() / self.n_docs) if self.n_docs else 0.0

    @cached_property
    def df(self) -> np.ndarray:
        return np.diff(self.tf.tocsc().indptr).astype(np.float64)

    @cached_property
    def idf(self) -> np.ndarray:
        """rank-bm25's idf: ln(N-df+.5) - ln(df+.5), negative values floored to epsilon * mean idf."""
        n = self.n_docs
        raw = np.log(n - self.df + 0.5) - np.log(self.df + 0.5)
        if raw.size == 0:
            return raw
        eps = self.params.epsilon * (raw.sum() / raw.size)
        return np.where(raw < 0, eps, raw)

    def _saturation(self) -> sp.csr_matrix:
        """tf (k1+1) / (tf + k1 (1 - b + b |d|/avgdl)) on the nonzeros of tf."""
        k1, b = self.params.k1, self.params.b
        tf = self.tf.tocsr()
        rows = np.repeat(np.arange(self.n_docs), np.diff(tf.indptr))
        if self.avgdl > 0:
            norm = k1 * (1 - b + b * self.doc_len[rows] / self.avgdl)
        else:  # every document is empty: there are no nonzeros anyway
            norm = np.full(rows.size, k1)
        vals = tf.data * (k1 + 1) / (tf.data + norm)
        return sp.csr_matrix((vals, tf.indices.copy(), tf.indptr.copy()), shape=tf.shape)

    @cached_property
    def weights(self) -> sp.csc_matrix:
        """w(d, t) = idf(t) * saturation(d, t), column-major so a query gathers its terms' columns."""
        sat = self._saturation()
        w = sp.csr_matrix((sat.data * self.idf[sat.indices], sat.indices, sat.indptr), shape=sat.shape)
        return w.tocsc()

    # ---- querying ----
    def query_vector(self, tokens: Iterable[str]) -> tuple[np.ndarray, np.ndarray]:
        """Known query terms as (term ids, counts); unknown terms contribute 0, as in rank-bm25."""
        counts = Counter(self.term_id[t] for t in tokens if t in self.term_id)
        ids = np.fromiter(sorted(counts), dtype=np.int64, count=len(counts))
        return ids, np.array([counts[i] for i in ids], dtype=np.float64)

    def scores_tokens(self, tokens: Sequence[str]) -> np.ndarray:
        """Scores of every document for an analysed query (the fast path; equals rank-bm25's get_scores)."""
        tids, counts = self.query_vector(tokens)
        if tids.size == 0:
            return np.zeros(self.n_docs)
        return np.asarray(self.weights[:, tids] @ counts).ravel()

    def scores(self, query: str) -> np.ndarray:
        return self.scores_tokens(self.analyzer(query))

    @cached_property
    def _id_order(self) -> np.ndarray:
        """Position of each document in id order, for the tie policy."""
        order = np.empty(self.n_docs, dtype=np.int64)
        order[np.argsort(np.asarray(self.ids, dtype=object), kind="stable")] = np.arange(self.n_docs)
        return order

    def top_k(self, scores: np.ndarray, k: int) -> list[tuple[str, float]]:
        """The best ``k`` positive-score documents: score descending, then id ascending."""
        cand = np.flatnonzero(scores > 0)
        if cand.size > k:
            # keep everything tied with the k-th score so the id tie-break is exact
            kth = np.partition(scores[cand], cand.size - k)[cand.size - k]
            cand = cand[scores[cand] >= kth]
        order = np.lexsort((self._id_order[cand], -scores[cand]))[:k]
        return [(self.ids[i], float(scores[i])) for i in cand[order]]

    def search(self, queries: Mapping[str, str], k: int) -> Run:
        """Top-``k`` documents per query (fewer if fewer documents share a term with the query)."""
        return {qid: dict(self.top_k(self.scores(text), k)) for qid, text in queries.items()}

    def to_rank_bm25(self, docs: Sequence[Sequence[str]]):
        """The reference ``rank_bm25.BM25Okapi`` over the same analysed documents (tests and bench)."""
        from rank_bm25 import BM25Okapi

        return BM25Okapi(list(docs), k1=self.params.k1, b=self.params.b, epsilon=self.params.epsilon)

    # ---- Qdrant sparse vectors ----
    def sparse_doc_vectors(self) -> SparseRows:
        """Per document: (term ids, BM25 tf-saturation values); Qdrant applies the IDF (Modifier.IDF)."""
        return SparseRows(self._saturation())

    def sparse_query_vector(self, query: str) -> tuple[list[int], list[float]]:
        tids, counts = self.query_vector(self.analyzer(query))
        return tids.tolist(), counts.tolist()

    # ---- persistence ----
    def save(self, folder: str | Path) -> Path:
        folder = Path(folder)
        if any("\n" in i for i in self.ids):
            raise ValueError("document ids must not contain newlines")
        buf = io.BytesIO()
        np.savez(
            buf,
            data=self.tf.data,
            indices=self.tf.indices,
            indptr=self.tf.indptr,
            shape=np.asarray(self.tf.shape),
            vocab=_pack(self.vocab),
            ids=_pack(self.ids),
        )
        atomic_write_bytes(folder / "index.npz", buf.getvalue())
        # written last: its presence marks a complete index
        atomic_write_json(
            folder / "meta.json",
            {
                "format": FORMAT_VERSION,
                "params": asdict(self.params),
                "analyzer": self.analyzer.spec(),
                "n_docs": self.n_docs,
                "vocab_size": len(self.vocab),
                "avgdl": self.avgdl,
            },
        )
        return folder

    @classmethod
    def load(cls, folder: str | Path) -> BM25Index:
        folder = Path(folder)
        meta = json.loads((folder / "meta.json").read_text(encoding="utf-8"))
        if meta.get("format") != FORMAT_VERSION:
            raise ValueError(f"{folder}: BM25 index format {meta.get('format')} != {FORMAT_VERSION}")
        with np.load(folder / "index.npz", allow_pickle=False) as z:
            tf = sp.csr_matrix((z["data"], z["indices"], z["indptr"]), shape=tuple(z["shape"]))
            vocab, ids = _unpack(z["vocab"]), _unpack(z["ids"])
        a = {k: v for k, v in meta["analyzer"].items() if k in Analyzer.__dataclass_fields__}
        idx = cls(ids, vocab, tf, BM25Params(**meta["params"]), Analyzer(**a))
        if idx.n_docs != len(ids) or tf.shape[1] != len(vocab) or meta["n_docs"] != len(ids):
            raise ValueError(f"{folder}: BM25 index files disagree (ids/vocab/matrix sizes)")
        return idx


def _check_ids(ids: Sequence[str], n_docs: int) -> None:
    if len(ids) != n_docs:
        raise ValueError(f"{len(ids)} ids but {n_docs} documents")
    if len(set(ids)) != len(ids):
        raise ValueError("document ids must be unique")


def _pack(strings: Sequence[str]) -> np.ndarray:
    return np.frombuffer("\n".join(strings).encode("utf-8"), dtype=np.uint8)


def _unpack(arr: np.ndarray) -> list[str]:
    text = arr.tobytes().decode("utf-8")
    return text.split("\n") if text else []


def index_key(corpus_hash: str, params: BM25Params, analyzer: Analyzer) -> str:
    return sha256_json(
        {"corpus": corpus_hash, "params": asdict(params), "analyzer": analyzer.spec(), "format": FORMAT_VERSION}
    )[:16]


def build_or_load(
    folder: str | Path,
    ids: Sequence[str],
    texts: Sequence[str],
    *,
    corpus_hash: str,
    params: BM25Params | None = None,
    analyzer: Analyzer | None = None,
    force: bool = False,
) -> tuple[BM25Index, bool]:
    """The index under ``folder/<key>`` (key = corpus hash + params + analyser); build it if absent.

    Returns ``(index, built)``; a damaged index on disk is rebuilt.
    """
    params, analyzer = params or BM25Params(), analyzer or Analyzer()
    target = Path(folder) / index_key(corpus_hash, params, analyzer)
    if not force and (target / "meta.json").exists():
        try:
            idx = BM25Index.load(target)
            if idx.ids == list(ids):
                return idx, False
        except (OSError, ValueError, KeyError, json.JSONDecodeError):
            pass
    idx = BM25Index.build(ids, texts, params=params, analyzer=analyzer)
    idx.save(target)
    return idx, True
