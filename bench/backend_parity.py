"""Benchmark: the two Qdrant backends' top 10, variant by variant, on every dataset here.

For each dataset (the default ``data/debian-manuals``, ``../shared/data/scifact``, ``../shared/data/cranfield``
and the tiny PDF and BEIR sets of ``tests/support/builders.py``), stage 01 and 02 run into a scratch results root
(``--work``; the embedding cache is the shared one, so nothing is encoded twice), once with
``RERANKEVAL_QDRANT_BACKEND=client`` (qdrant-client's local mode) and once with ``edge`` (Qdrant's engine
in-process). Every variant that uses the dense leg (``vector``, the five hybrids) is searched through
:class:`rerankeval.retrieve.retriever.Retriever` for every judged query, plus the dense leg itself at ``leg_k``
(Qdrant's default search, as stage 03 runs it on edge, and ``exact=True``) and Qdrant's sparse leg (an input of
``qdrant_hybrid`` and ``qdrant_dbsf``). Their top 10 (units and chunks; the whole leg for the legs) are compared
between backends: equal, or each difference explained and printed with its scores:

- ``tie``: the two entries have the same score in one backend's list, or each list has its own entry at this
  rank with the same score (a tie at the cut of a leg: each engine kept a different one of the tied entries);
- ``float order``: their scores differ by less than 1e-5 relative (float32 arithmetic in two engines);
- ``from the legs``: a fused list differs where one of its legs differs by a tie or float order, or where an
  entry is tied inside one of its Qdrant legs (runs order ties by chunk id, but Qdrant's fusion ranks a leg's
  tied entries in the engine's own order, so the same leg yields different fused ranks);
- anything else is ``unexplained`` (and the exit status is 1).

``cross_encoder`` is not run (no cross-encoder weights are needed for this check): it reorders the hybrid's top
``pool_k`` units, so it is equal wherever the hybrid's top ``pool_k`` is; the JSON counts those queries.
``hybrid_reformulate`` without an LLM keeps every query's hybrid result.

    nice -n 10 python bench/backend_parity.py [--datasets debian-manuals,scifact,...] [--work DIR]

Writes results/bench/backend_parity.json and prints ``unexplained_differences=<n>`` last.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

from rerankeval.core.settings import load_settings

ROOT = Path(__file__).resolve().parents[1]
DENSE_VARIANTS = ("vector", "hybrid", "hybrid_combsum", "hybrid_combmnz", "hybrid_dbsf", "qdrant_hybrid", "qdrant_dbsf")
QDRANT_FUSED = ("qdrant_hybrid", "qdrant_dbsf")
BACKENDS = ("client", "edge")
DATASETS = ("debian-manuals", "scifact", "cranfield", "tiny-pdf", "tiny-beir")
TOP = 10
RTOL = 1e-5


def sources(names: list[str], scratch: Path) -> dict[str, Path]:
    """Dataset name -> its source folder (the tiny sets written by tests/support/builders.py into ``scratch``)."""
    from rerankeval.core import paths

    sys.path.insert(0, str(ROOT / "tests" / "support"))
    import builders

    out = {}
    for n in names:
        if n == "tiny-pdf":
            out[n] = builders.tiny_pdf_dataset(scratch / "src" / "tiny-pdf")
        elif n == "tiny-beir":
            out[n] = builders.tiny_beir_dataset(scratch / "src" / "tiny-beir")
        elif n == paths.DEFAULT_DATASET:
            out[n] = paths.DATA_DIR / n
        else:
            out[n] = paths.SHARED_DATA_DIR / n
    return out


def near(a: float | None, b: float | None) -> bool:
    return a is not None and b is not None and abs(a - b) <= RTOL * max(abs(a), abs(b)) + 1e-9


def explain(a: dict[str, float], b: dict[str, float], k: int | None = TOP) -> list[dict]:
    """The positions where ranking ``a`` (client) and ``b`` (edge) differ in their first ``k``, with scores and
    a cause: ``tie`` / ``float order`` when the two entries score (nearly) alike in either list."""
    la, lb = list(a)[:k], list(b)[:k]
    out = []
    for i in range(max(len(la), len(lb))):
        x, y = (la[i] if i < len(la) else None), (lb[i] if i < len(lb) else None)
        if x == y:
            continue
        # the two entries in one list, and each list's own entry at this rank (a tie at the cut of a leg keeps
        # a different one of the tied entries in each list)
        pairs = [(a.get(x), a.get(y)), (b.get(x), b.get(y))]
        if y not in a and x not in b:
            pairs.append((a.get(x), b.get(y)))
        cause = (
            "tie"
            if any(p == q and p is not None for p, q in pairs)
            else "float order"
            if any(near(p, q) for p, q in pairs)
            else "unexplained"
        )
        out.append(
            {
                "rank": i + 1,
                "client": x,
                "edge": y,
                "client_scores": [a.get(x), a.get(y)],
                "edge_scores": [b.get(x), b.get(y)],
                "cause": cause,
            }
        )
    return out


def max_rel_diff(a: dict[str, float], b: dict[str, float], k: int | None) -> float:
    """Largest relative score difference over ``a``'s first ``k`` entries that ``b`` also holds."""
    both = [d for d in list(a)[:k] if d in b]
    return max((abs(a[d] - b[d]) / max(abs(a[d]), abs(b[d]), 1e-12) for d in both), default=0.0)


def _from_legs(found: list[dict], legs: set[str] | bool) -> None:
    """Mark as ``from the legs`` the unexplained differences of a fused list whose leg differs here by ties or
    float order (``legs`` True) or whose entries are tied inside a leg (``legs`` holds them)."""
    for d in found:
        if d["cause"] == "unexplained" and (legs is True or (legs and {d["client"], d["edge"]} & legs)):
            d["cause"] = "from the legs"


def compare(client: dict, edge: dict, k: int | None = TOP, legs_explain: dict | None = None) -> dict:
    """One list's parity over every query: equal queries (first ``k``, and at full depth), the differences
    in the first ``k`` and their causes, and the scores' agreement there."""
    diffs, worst, full = {}, 0.0, 0
    for q in client:
        b = edge.get(q, {})
        worst = max(worst, max_rel_diff(client[q], b, k))
        full += list(client[q]) == list(b)
        found = explain(client[q], b, k)
        if found and legs_explain is not None:
            _from_legs(found, legs_explain.get(q, set()))
        if found:
            diffs[q] = found
    causes: dict[str, int] = {}
    for found in diffs.values():
        for d in found:
            causes[d["cause"]] = causes.get(d["cause"], 0) + 1
    return {
        "queries": len(client),
        "equal": len(client) - len(diffs),
        "differing": len(diffs),
        "equal_full_depth": full,
        "causes": causes,
        "max_rel_score_diff": worst,
        "differences": diffs,
    }


def search_backend(dp, backend: str, emb, queries: dict, leg_k: int, pool_k: int) -> dict:
    """Stage 02 with ``backend``, then every dense variant and the Qdrant legs through the Retriever."""
    from rerankeval import index
    from rerankeval.index.qdrant import edge as qdrant_edge
    from rerankeval.retrieve.params import Params
    from rerankeval.retrieve.retriever import Retriever

    os.environ["RERANKEVAL_QDRANT_BACKEND"] = backend
    t = time.perf_counter()
    result = index.run(dp, index.Params(), load_settings().model_copy(update={"progress": "off"}), embedder=emb)
    index.write(dp, result)  # the backend: RERANKEVAL_QDRANT_BACKEND set just above
    info = result.info
    out = {
        "build_seconds": time.perf_counter() - t,
        "dense_search": info.dense_search,
        "switch": info.actions.get("backend switch"),
        "runs": {},
    }
    t = time.perf_counter()
    with Retriever(dp, load_settings(), embedder=emb, progress=False) as r:  # the backend set just above
        for v in DENSE_VARIANTS:
            res = r.search(v, queries, leg_k=leg_k, pool_k=pool_k, rrf_k=Params().rrf_k)
            out["runs"][v] = {"units": res.run, "chunks": res.chunk_run}
        out["runs"]["dense_leg"] = {"chunks": r.dense_leg(queries, leg_k)}
        out["runs"]["sparse_leg"] = {"chunks": r.sparse_leg(queries, leg_k)}
        if backend == qdrant_edge.EDGE:  # Qdrant's own choice (exact below its threshold), and exact on demand
            qv = r._qvecs(queries)
            for name, exact in (("dense_leg_default", False), ("dense_leg_exact", True)):
                out["runs"][name] = {
                    "chunks": qdrant_edge.search_dense(r.client, list(queries), qv, leg_k, r._id_to_chunk, exact=exact)
                }
    out["search_seconds"] = time.perf_counter() - t
    return out


def _tied(ranking: dict[str, float]) -> set[str]:
    """The entries of a ranking whose score equals, or nearly equals, a neighbour's."""
    items = list(ranking.items())
    return {
        d for i in range(len(items) - 1) if near(items[i][1], items[i + 1][1]) for d in (items[i][0], items[i + 1][0])
    }


def leg_ties(client: dict, edge: dict, legs: tuple[str, ...]) -> dict[str, set[str] | bool]:
    """Per query, what a fused list's difference can come from in the Qdrant ``legs``: True when a leg differs
    between backends only by ties or float order, else the set of entries tied inside a leg (the runs order
    ties by chunk id, but a fusion ranks a leg's tied entries in the engine's own order)."""
    out: dict[str, set[str] | bool] = {}
    for leg in legs:
        a, b = client["runs"][leg]["chunks"], edge["runs"][leg]["chunks"]
        for q in a:
            found = explain(a[q], b.get(q, {}), None)
            if found and all(d["cause"] != "unexplained" for d in found):
                out[q] = True
            elif out.get(q) is not True:
                out[q] = out.get(q, set()) | _tied(a[q]) | _tied(b.get(q, {}))
    return out


def dataset_parity(name: str, source: Path, leg_k: int, pool_k: int) -> dict:
    """Stage 01 once, then both backends; the comparison of every dense variant and leg."""
    from rerankeval import corpus
    from rerankeval.core import paths
    from rerankeval.index.embed import Embedder, embeddings_root

    settings = load_settings()
    dp = paths.resolve_dataset(source, settings)
    t = time.perf_counter()
    corpus.write(dp, corpus.run(dp, corpus.Params(), settings))
    queries = corpus.contract.load_queries(dp)
    emb = Embedder(progress=True, cache_root=embeddings_root(dp.roots.cache))
    per = {b: search_backend(dp, b, emb, queries, leg_k, pool_k) for b in BACKENDS}
    c, e = per["client"], per["edge"]
    ties = {"hybrid": leg_ties(c, e, ("dense_leg",)), "qdrant": leg_ties(c, e, ("dense_leg", "sparse_leg"))}
    lists = {}
    for v in DENSE_VARIANTS:
        fused_legs = None if v == "vector" else ties["qdrant" if v in QDRANT_FUSED else "hybrid"]
        for level in ("units", "chunks"):
            lists[f"{v}/{level}"] = compare(c["runs"][v][level], e["runs"][v][level], TOP, fused_legs)
    for leg in ("dense_leg", "sparse_leg"):
        lists[f"{leg}@{leg_k}"] = compare(c["runs"][leg]["chunks"], e["runs"][leg]["chunks"], None)
    for leg in ("dense_leg_default", "dense_leg_exact"):
        lists[f"edge {leg}@{leg_k} vs client dense_leg"] = compare(
            c["runs"]["dense_leg"]["chunks"], e["runs"][leg]["chunks"], None
        )
    hyb_c, hyb_e = c["runs"]["hybrid"]["units"], e["runs"]["hybrid"]["units"]
    ce_equal = sum(list(hyb_c[q])[:pool_k] == list(hyb_e.get(q, {}))[:pool_k] for q in hyb_c)
    return {
        "dataset": name,
        "source": str(source),
        "chunks": len(corpus.contract.load_chunks(dp)),
        "queries": len(queries),
        "leg_k": leg_k,
        "pool_k": pool_k,
        "wall_seconds": time.perf_counter() - t,
        "backends": {b: {k: v for k, v in per[b].items() if k != "runs"} for b in BACKENDS},
        "cross_encoder_inputs_equal": {"queries": len(hyb_c), "hybrid_top_pool_k_equal": ce_equal},
        "lists": lists,
    }


def summary(report: list[dict]) -> dict:
    """Totals over datasets and lists: queries compared, equal, and differences per cause."""
    tot = {"lists": 0, "query_lists": 0, "equal": 0, "causes": {}}
    for d in report:
        for r in d["lists"].values():
            tot["lists"] += 1
            tot["query_lists"] += r["queries"]
            tot["equal"] += r["equal"]
            for c, n in r["causes"].items():
                tot["causes"][c] = tot["causes"].get(c, 0) + n
    tot["unexplained"] = tot["causes"].get("unexplained", 0)
    return tot


def print_dataset(d: dict, show: int) -> None:
    ds = d["backends"]["edge"]["dense_search"]
    print(
        f"\n{d['dataset']}: {d['chunks']} chunks, {d['queries']} queries; edge dense search {ds.get('mode')}, "
        f"recall@10 {ds.get('recall_at_10')}; {d['wall_seconds']:.0f} s",
        flush=True,
    )
    for name, r in d["lists"].items():
        print(
            f"  {name:<46} equal {r['equal']:>4}/{r['queries']:<4} (full depth {r['equal_full_depth']:>4}) "
            f"causes {r['causes'] or '-'}; max rel score diff {r['max_rel_score_diff']:.1e}"
        )
        for q, found in list(r["differences"].items())[:show]:
            for x in found[:3]:
                print(
                    f"      {q} rank {x['rank']}: client {x['client']} edge {x['edge']}  client scores "
                    f"{x['client_scores']}  edge scores {x['edge_scores']}  -> {x['cause']}"
                )
    ce = d["cross_encoder_inputs_equal"]
    print(f"  cross_encoder input (hybrid top pool_k) equal for {ce['hybrid_top_pool_k_equal']}/{ce['queries']}")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--datasets", default=",".join(DATASETS), help="comma-separated: " + ", ".join(DATASETS))
    ap.add_argument("--work", type=Path, default=None, help="scratch results root (default: a temporary folder)")
    ap.add_argument("--leg-k", type=int, default=100)
    ap.add_argument("--pool-k", type=int, default=20)
    ap.add_argument("--show", type=int, default=3, help="differing queries printed per list (all in the JSON)")
    ap.add_argument("--out", type=Path, default=None, help="default results/bench/backend_parity.json")
    args = ap.parse_args(argv)
    from rerankeval.core import paths

    out = args.out or paths.Roots.of(load_settings()).results / "bench" / "backend_parity.json"
    with tempfile.TemporaryDirectory(prefix="rerankeval-parity-") as tmp:
        work = args.work or Path(tmp)
        os.environ.update({"RERANKEVAL_RESULTS": str(work / "results"), "RERANKEVAL_QDRANT_PATH": str(work / "qdrant")})
        os.environ.pop("QDRANT_URL", None)
        t0 = time.perf_counter()
        report = []
        for name, src in sources([n for n in args.datasets.split(",") if n], work).items():
            if not src.is_dir():
                print(f"SKIP {name}: {src} is absent")
                continue
            report.append(dataset_parity(name, src, args.leg_k, args.pool_k))
            print_dataset(report[-1], args.show)
    tot = summary(report)
    meta = {"loadavg": os.getloadavg(), "wall_seconds": time.perf_counter() - t0, "rtol": RTOL, "top": TOP}
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({**meta, "summary": tot, "datasets": report}, indent=1) + "\n", encoding="utf-8")
    print(f"\n{tot['equal']}/{tot['query_lists']} query lists equal over {tot['lists']} lists; causes {tot['causes']}")
    print(f"wrote {out}")
    print(f"unexplained_differences={tot['unexplained']}")
    return 1 if tot["unexplained"] else 0


if __name__ == "__main__":
    sys.exit(main())
