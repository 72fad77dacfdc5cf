"""Cited answers (rerankeval.apps.ask) against the fake LLM server: checks, repair, cache, and notebook 07."""

from __future__ import annotations

import dataclasses
import json
import math
import os
import re
import subprocess
import sys

import pandas as pd
import pytest

from fakellm import FakeLLM
from rerankeval.apps import ask
from rerankeval.apps.ask.answers import Answer, Asker
from rerankeval.apps.ask.html import answers_html
from rerankeval.apps.ask.inputs import (
    Passage,
    PassageSource,
    Question,
    default_questions,
    resolve_variant,
    to_questions,
)
from rerankeval.core import paths
from rerankeval.core.settings import Settings, load_settings
from rerankeval.llm.cache import LLMCache
from rerankeval.llm.call import CallStats

P1 = Passage(
    "alpha-guide.pdf p.1", "alpha-guide.pdf#p1", "The alpha widget stores its configuration in /etc/alpha/alpha.conf."
)
P2 = Passage("beta-manual.pdf p.2", "beta-manual.pdf#p2", "Beta logs every transaction to /var/log/beta/history.log.")
PASSAGES = [P1, P2]
QRELS = {"t1": {"alpha-guide.pdf#p1": 2}}
QUESTION = Question("where is the alpha configuration file", "t1")


def reply(answer: str, cites: list[tuple[str, str]], nid: bool = False) -> dict:
    body = {"answer": answer, "citations": [{"label": lb, "quote": q} for lb, q in cites], "not_in_documents": nid}
    return {"content": json.dumps(body)}


def settings(fake: FakeLLM) -> Settings:
    return Settings(base_url=fake.base_url, api_key="k", model="fake", timeout=5, max_retries=0)


def run_one(tmp_path, script, question=QUESTION, **kw) -> tuple[Answer, CallStats, FakeLLM]:
    with FakeLLM(script=script) as fake:
        with Asker(settings(fake), ask.Params(**kw), LLMCache(tmp_path / "llm")) as asker:
            got = asker.ask(question, PASSAGES, QRELS)
        return got, asker.stats, fake


def test_a_good_answer_passes_its_checks_and_scores_precision(tmp_path):
    good = reply("In /etc/alpha/alpha.conf.", [("alpha-guide.pdf p.1", "configuration in /etc/alpha/alpha.conf")])
    a, stats, fake = run_one(tmp_path, [good])
    assert (a.status, a.flagged, a.not_in_documents) == ("ok", False, False)
    assert [c.status for c in a.citations] == ["ok"]
    assert (a.precision, a.gold_cited, a.gold_given) == (1.0, True, True)
    body = fake.requests[-1][2]
    assert body["response_format"]["json_schema"]["name"] == "cited_answer"
    assert "[alpha-guide.pdf p.1] The alpha widget" in body["messages"][-1]["content"]


def test_a_fabricated_citation_is_flagged(tmp_path):
    a, _, _ = run_one(tmp_path, [reply("In /etc/alpha.", [("gamma-notes.pdf p.1", "configuration")])])
    assert [c.status for c in a.citations] == ["fabricated"] and a.flagged
    assert (a.precision, a.gold_cited) == (0.0, False)


def test_a_quote_not_in_the_passage_is_flagged(tmp_path):
    a, _, _ = run_one(tmp_path, [reply("In /tmp.", [("alpha-guide.pdf p.1", "stored in /tmp/alpha")])])
    assert [c.status for c in a.citations] == ["quote not found"] and a.flagged
    assert a.gold_cited  # it did cite the gold page, with a wrong quote


@pytest.mark.parametrize("answer,flag", [("not in the documents", False), ("I cannot tell.", True)])
def test_not_in_the_documents_is_recognised(tmp_path, answer, flag):
    a, _, _ = run_one(tmp_path, [reply(answer, [], nid=flag)])
    assert a.not_in_documents and a.status == "ok" and not a.flagged
    assert math.isnan(a.precision) and a.gold_cited is False and a.gold_given  # the gold page was given
    free, _, _ = run_one(tmp_path, [reply(answer, [], nid=flag)], question=Question("free text"))
    assert free.not_in_documents and (free.gold_cited, free.gold_given) == (None, None)


def test_the_cache_makes_a_second_run_free(tmp_path):
    script = [
        reply("In /etc/alpha/alpha.conf.", [("alpha-guide.pdf p.1", "alpha.conf")]),
        {"content": "a different reply that must not be asked for"},
    ]
    got = []
    with FakeLLM(script=script) as fake:
        for _ in range(2):
            with Asker(settings(fake), ask.Params(), LLMCache(tmp_path / "llm")) as asker:
                got.append((asker.ask(QUESTION, PASSAGES, QRELS), asker.stats, fake.count))
    (first, s1, n1), (second, s2, n2) = got
    assert (n1, s1.requests, s1.cache_hits) == (1, 1, 0)
    assert (n2, s2.requests, s2.cache_hits) == (1, 0, 1)
    assert second.cached and (second.answer, second.citations) == (first.answer, first.citations)


def test_an_unusable_reply_is_reasked_with_more_tokens_then_salvaged(tmp_path):
    cut = '{"answer": "In /etc/alpha/alpha.conf", "citations": [{"label": "alpha-guide.pdf p.1", "quote": "alph'
    script = [{"content": cut, "finish_reason": "length"}, {"content": cut, "finish_reason": "length"}]
    a, stats, fake = run_one(tmp_path, script, max_answer_tokens=64)
    assert stats.requests == 2
    assert [r[2]["max_tokens"] for r in fake.requests if r[1].endswith("/chat/completions")] == [64, 128]
    assert (a.status, a.answer, a.citations) == ("repaired", "In /etc/alpha/alpha.conf", [])
    assert a.error == "InvalidJSON;InvalidJSON"


def test_a_failed_reask_still_salvages_the_first_reply(tmp_path):
    cut = '{"answer": "In /etc/alpha/alpha.conf", "citations": [{"label": "alpha-guide.pdf p.1", "quote": "alpha'
    a, _, _ = run_one(tmp_path, [{"content": cut, "finish_reason": "length"}, {"status": 400, "message": "no"}])
    assert (a.status, a.answer) == ("repaired", "In /etc/alpha/alpha.conf")
    assert a.error.startswith("InvalidJSON;BadRequestError")


def test_prose_with_bracketed_labels_is_salvaged_and_checked(tmp_path):
    prose = "The file is /etc/alpha/alpha.conf [alpha-guide.pdf p.1], see also [nowhere.pdf p.9]."
    a, _, _ = run_one(tmp_path, [{"content": prose}, {"content": prose}])
    assert a.status == "repaired" and a.answer == prose
    assert [(c.label, c.status) for c in a.citations] == [
        ("alpha-guide.pdf p.1", "ok"),
        ("nowhere.pdf p.9", "fabricated"),
    ]


def test_an_empty_reply_fails_with_its_reason(tmp_path):
    a, _, _ = run_one(tmp_path, [{"content": '{"relevant": "no"}'}], content_retries=0)
    assert (a.status, a.error, a.answer) == ("failed", "EmptyAnswer", "")


def test_an_unreachable_endpoint_is_a_failed_status_not_an_exception(tmp_path):
    a, _, _ = run_one(tmp_path, [{"status": 400, "message": "bad request"}])
    assert a.status == "failed" and a.error.startswith("BadRequestError")


def test_the_table_escapes_text_and_marks_bad_citations_red(tmp_path):
    a, _, _ = run_one(tmp_path, [reply("<script>alert(1)</script>", [("<b>x</b>", "q")])])
    res = ask.Result([a], "hybrid", 2, ["note"], "fake", "127.0.0.1", {}, CallStats())
    html = answers_html(res)
    assert "<script>alert" not in html and "&lt;script&gt;" in html and "&lt;b&gt;x&lt;/b&gt;" in html
    assert '<tr class="flag">' in html and "fabricated" in html
    assert res.summary()["flagged"] == 1 and res.summary()["citation_checks"]["fabricated"] == 1


def test_the_winner_is_the_best_variant_that_answered_every_query(tiny_pdf):
    from rerankeval.evaluate import analyse
    from rerankeval.evaluate.analysis_records import Summary

    dp = paths.resolve_dataset(tiny_pdf, load_settings())
    assert resolve_variant(dp, "")[0] == "hybrid"  # no analysis yet
    summary = Summary(headline_metric="ndcg@10", missing={"hybrid_rerank": 2})
    table = pd.DataFrame({"variant": ["bm25", "vector", "hybrid_rerank"], "ndcg@10": [0.5, 0.6, 0.9]})
    analyse.write_summary(dp, summary, table=table)
    # a best mean without comparisons is not called the winner (issue 35 item 1)
    assert resolve_variant(dp, "") == (
        "vector",
        "variant vector: the best mean on the headline metric (05-analyse), not distinguishable from the next",
    )
    assert resolve_variant(dp, "bm25")[0] == "bm25"
    before = dp.analyse_winner.read_bytes()
    more = pd.concat([table, pd.DataFrame({"variant": ["hybrid_dbsf"], "ndcg@10": [0.55]})], ignore_index=True)
    analyse.write_summary(dp, summary, table=more)  # a new variant that does not win: 07's input, byte for byte
    assert dp.analyse_winner.read_bytes() == before
    analyse.write_summary(dp, Summary(headline_metric="ndcg@10"), table=table)  # every variant answered all
    assert resolve_variant(dp, "")[0] == "hybrid_rerank"
    dp.analyse_winner.write_text("{not json")
    assert resolve_variant(dp, "")[0] == "hybrid"  # unreadable: as with no analysis


_LABELLED = re.compile(r"^\[([^\]]+)\] (.*)$", re.M)


def cite_first(n: int, body: dict) -> dict:
    """The fake's answer: the first passage, quoting its first four words."""
    found = _LABELLED.findall(body["messages"][-1]["content"])
    label, text = found[0]
    return reply(text[:60], [(label, " ".join(text.split()[:4]))])


def test_notebook_07_answers_judged_and_free_questions(tmp_path, tiny_pdf):
    results = tmp_path / "res"
    env = {
        **os.environ,
        "RERANKEVAL_RESULTS": str(results),
        "RERANKEVAL_QDRANT_PATH": str(results / "qdrant"),
        "PYTHONHASHSEED": "0",
    }
    with FakeLLM(rule=cite_first) as fake:
        env.update(OPENAI_BASE_URL=fake.base_url, OPENAI_API_KEY="k")
        cmd = [
            sys.executable,
            "-m",
            "rerankeval.apps.chain",
            "--dataset",
            str(tiny_pdf),
            "--kernel",
            "python3",
            "--set",
            "leg_k=10",
            "--set",
            "questions=[t2, 'what does beta log']",
            "--set",
            "k=2",
            "--set",
            "variants=[vector, bm25, hybrid]",
        ]  # no hybrid_reformulate: every request here is 07's
        for only in ("01", "02", "03", "07"):
            cmd += ["--only", only]
        r = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=1200)
        assert r.returncode == 0, r.stderr[-3000:]
        assert fake.count == 2
    out = results / "tiny-pdf"
    rows = [json.loads(line) for line in (out / "ask" / "answers.jsonl").read_text().splitlines()]
    assert [(x["qid"], len(x["passages"])) for x in rows] == [("t2", 2), (None, 2)]
    assert all(c["status"] == "ok" for x in rows for c in x["citations"])
    summary = json.loads((out / "ask" / "summary.json").read_text())
    assert (summary["variant"], summary["model"], summary["judged"]) == ("hybrid", "fake-reranker", 1)
    html = (out / "report" / "07-ask.html").read_text()
    assert "citations (checked)" in html and "fake-reranker" in html


def fake_corpus(dp: paths.DatasetPaths) -> None:
    """Stage 01/03/04 outputs by hand: two pages (page 1 in two chunks), queries t1..t3, runs."""
    from rerankeval.core import runs
    from rerankeval.core.ioutil import atomic_write_jsonl

    chunks = [
        ("a#0", "a.pdf#p1", 1, 0, "first chunk of page one"),
        ("a#1", "a.pdf#p1", 1, 500, "second chunk"),
        ("a#2", "a.pdf#p2", 2, 0, "page two text"),
    ]
    atomic_write_jsonl(
        dp.chunks,
        [
            {"chunk_id": c, "unit_id": u, "source": "a.pdf", "page": p, "start": s, "title": "", "text": t}
            for c, u, p, s, t in chunks
        ],
    )
    atomic_write_jsonl(dp.queries, [{"_id": q, "text": f"question {q}", "slices": {}} for q in ("t1", "t2", "t3")])
    runs.write_qrels({"t1": {"a.pdf#p1": 1}, "t2": {"a.pdf#p2": 2}, "t3": {"a.pdf#p2": 0}}, dp.qrels)
    both = {"a.pdf#p2": 2.0, "a.pdf#p1": 1.0}
    runs.write_trec({"t1": both, "t2": both}, dp.run_file("hybrid"), tag="hybrid")
    runs.write_trec(
        {q: {"a#2": 3.0, "a#1": 2.0, "a#0": 1.0} for q in ("t1", "t2")}, dp.chunk_run_file("hybrid"), tag="hybrid"
    )
    runs.write_trec({"t1": {"a.pdf#p1": 1.0, "a.pdf#p2": 0.5}}, dp.run_file("hybrid_rerank"), tag="hybrid_rerank")


def test_passages_come_from_the_saved_run_with_page_labels_and_best_chunks(tiny_pdf):
    dp = paths.resolve_dataset(tiny_pdf, load_settings())
    fake_corpus(dp)
    src = PassageSource(dp, "hybrid_rerank", ask.Params(k=2))
    assert src.judged("t1") == [
        Passage("a.pdf p.1", "a.pdf#p1", "second chunk"),
        Passage("a.pdf p.2", "a.pdf#p2", "page two text"),
    ]
    assert [p.unit for p in src.judged("t2")] == ["a.pdf#p2", "a.pdf#p1"]  # not reranked: hybrid's run
    assert src.notes == ["query t2 is not in the hybrid_rerank run: its passages come from hybrid"]
    assert [(q.qid, q.text) for q in default_questions(dp, 5)] == [("t1", "question t1"), ("t2", "question t2")]
    assert to_questions(dp, ask.Params(questions=["t2", "QUESTION  t1", "anything else"])) == [
        Question("question t2", "t2"),
        Question("question t1", "t1"),
        Question("anything else"),
    ]


def test_07_says_its_plan_before_the_first_call_and_a_final_line_after(tiny_pdf, tmp_path, console):
    dp = paths.resolve_dataset(tiny_pdf, load_settings())
    fake_corpus(dp)
    with FakeLLM(rule=cite_first) as fake:
        ask.run(dp, ask.Params(questions=["t1", "t2"], variant="hybrid", k=2), settings(fake), cache=LLMCache(tmp_path))
        sent = [t for t, path, _ in fake.requests if path.endswith("/chat/completions")]
        assert len(sent) == 2
        plan = [t for t, line in console.lines if "answers: Plan: 2 questions, 2 LLM calls" in line]
        final = [(t, line) for t, line in console.lines if "answers: 2 answered (2 ok" in line]
        assert plan and plan[0] < min(sent)
        assert final and final[0][0] > max(sent) and "2 calls, 0 from the cache" in final[0][1]
        console.lines.clear()
        ask.run(dp, ask.Params(questions=["t1", "t2"], variant="hybrid", k=2), settings(fake), cache=LLMCache(tmp_path))
        assert fake.count == 2 and console.lines == []  # answered from the cache: nothing on the console


def test_the_face_runs_the_stage_from_params_and_answer_is_run_with_the_questions(tiny_pdf, tmp_path, monkeypatch):
    """Stage 07's face (issue 33): Params, Result, run(dp, params, settings), write(dp, result) and answer, the
    free-text entry: the same answers as run with those questions, the other parameters from Params."""
    import inspect

    assert ask.__all__ == ["Params", "Result", "answer", "run", "write"]
    assert list(inspect.signature(ask.run).parameters)[:3] == ["dp", "params", "settings"]
    assert inspect.signature(ask.run).parameters["settings"].default is inspect.Parameter.empty  # never hidden
    monkeypatch.setenv("RERANKEVAL_CACHE", str(tmp_path / "cache"))  # answer() uses the default reply cache
    dp = paths.resolve_dataset(tiny_pdf, load_settings())
    fake_corpus(dp)
    params = ask.Params(variant="hybrid", k=2, questions=["t3"])
    with FakeLLM(rule=cite_first) as fake:
        via_run = ask.run(
            dp, dataclasses.replace(params, questions=("t1", "question t2")), settings(fake), progress=False
        )
        via_answer = ask.answer(dp, ["t1", "question t2"], settings(fake), params)
        assert fake.count == 2  # the second run is answered from the cache: the same calls
    assert [(a.qid, a.answer, a.citations) for a in via_answer.answers] == [
        (a.qid, a.answer, a.citations) for a in via_run.answers
    ] and [a.qid for a in via_run.answers] == ["t1", "t2"]
    assert (via_answer.k, via_answer.variant) == (2, "hybrid")
    written = ask.write(dp, via_answer)
    assert [json.loads(x)["qid"] for x in written["answers"].read_text().splitlines()] == ["t1", "t2"]
    assert json.loads(written["summary"].read_text())["questions"] == 2
