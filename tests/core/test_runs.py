import pytest

from rerankeval.core.runs import read_qrels, read_trec, strictly_decreasing, to_units, truncate, write_qrels, write_trec


def test_trec_round_trip_keeps_order_with_ties(tmp_path):
    run = {"q1": {"b": 0.5, "a": 0.5, "c": 0.1}, "q2": {"x": 3.0}}
    write_trec(run, tmp_path / "r.trec", "t")
    lines = (tmp_path / "r.trec").read_text().splitlines()
    assert [line.split()[2] for line in lines[:3]] == ["b", "a", "c"]  # tie kept in insertion order
    scores = [float(line.split()[4]) for line in lines[:3]]
    assert scores[0] > scores[1] > scores[2]  # strictly decreasing on disk
    back = read_trec(tmp_path / "r.trec")
    assert list(back["q1"]) == ["b", "a", "c"]
    assert back["q2"] == {"x": 3.0}


def test_ir_measures_sees_the_intended_order_on_ties(tmp_path):
    import ir_measures
    from ir_measures import RR

    # "a" sorts after "z" by id descending (trec_eval's tie rule): without the nudge RR would be 0.5
    run = {"q": {"a": 1.0, "z": 1.0}}
    write_trec(run, tmp_path / "r.trec", "t")
    qrels = list(ir_measures.read_trec_qrels("q 0 a 1\n"))
    res = ir_measures.calc_aggregate([RR], qrels, list(ir_measures.read_trec_run(str(tmp_path / "r.trec"))))
    assert res[RR] == 1.0


def test_strictly_decreasing_rejects_nan():
    with pytest.raises(ValueError):
        strictly_decreasing([("a", float("nan"))])


def test_to_units_first_occurrence_wins_before_cutoff():
    run = {"q": {"p1#c0": 0.9, "p1#c5": 0.8, "p2#c0": 0.7, "p3#c0": 0.6}}
    unit_of = {"p1#c0": "p1", "p1#c5": "p1", "p2#c0": "p2", "p3#c0": "p3"}
    units = to_units(run, unit_of)
    assert units == {"q": {"p1": 0.9, "p2": 0.7, "p3": 0.6}}
    assert list(truncate(units, 2)["q"]) == ["p1", "p2"]


def test_to_units_unknown_chunk_is_a_clear_error():
    with pytest.raises(KeyError, match="not in the chunk table"):
        to_units({"q": {"zz": 1.0}}, {})


def test_bad_ids_and_tags(tmp_path):
    with pytest.raises(ValueError):
        write_trec({"q": {"a b": 1.0}}, tmp_path / "r", "t")
    with pytest.raises(ValueError):
        write_trec({"q": {"a": 1.0}}, tmp_path / "r", "two words")


def test_qrels_round_trip(tmp_path):
    q = {"q2": {"d": 1}, "q1": {"b": 2, "a": 0}}
    write_qrels(q, tmp_path / "q.tsv")
    assert read_qrels(tmp_path / "q.tsv") == q
    assert (tmp_path / "q.tsv").read_text().splitlines()[1] == "q1\ta\t0"
