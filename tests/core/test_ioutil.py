"""Issue 32 defect 3 and its weak spots: one lock for every writer of a dataset-folder file.

Drafting appended by read-then-replace without the lock a reviewer takes (127 of 200 appended drafts lost); a
read-only folder or a filesystem without ``flock`` gave a raw ``OSError`` naming a hidden lock file; a filesystem
whose ``flock`` silently does nothing lost 15 of 40 review decisions. Each test builds its input (a dataset folder
by hand: five one-page chunks, drafts, human questions so that no stage-01 refresh runs) and drives the writers.
"""

from __future__ import annotations

import builtins
import errno
import fcntl
import threading

import pytest

from promote_data import UNITS, _dataset
from rerankeval.core import ioutil
from rerankeval.core.errors import ReRankEvalError
from rerankeval.corpus import queryset
from rerankeval.evaluate import judgments
from rerankeval.questions import draft, review

WRITERS, PER_WRITER = 4, 10


def _new(writer: int, i: int) -> queryset.Draft:
    return queryset.Draft(
        f"w{writer}-{i:02d}",
        f"question {i} of writer {writer}",
        {"source_unit": UNITS[i % len(UNITS)], "model": "fake", "status": queryset.DRAFT},
    )


def _write_one(dp, d: queryset.Draft) -> None:
    """What a chain run's 08 does with one new draft (the dataset's own files)."""
    res = draft.QuestionsResult(draft.QuestionsParams(), [], draft.dataset_files(dp), new=[d])
    draft.write(dp, res)


def test_drafting_and_reviewing_at_once_lose_no_draft_and_no_decision(tmp_path):
    dp = _dataset(tmp_path, human=True)  # human questions: 08's write does not refresh stage 01
    pending = [d.qid for d in queryset.read_drafts(dp.source_draft_queries) if d.status == queryset.DRAFT]
    barrier = threading.Barrier(WRITERS + 1)
    errors: list[BaseException] = []

    def writer(w: int) -> None:
        barrier.wait()
        try:
            for i in range(PER_WRITER):
                _write_one(dp, _new(w, i))
        except BaseException as exc:  # noqa: BLE001 (reported by the assertion below)
            errors.append(exc)

    def reviewer() -> None:
        barrier.wait()
        try:
            for _ in range(PER_WRITER):
                for q in pending + ["g-a", "g-b"]:
                    review.review(dp, q, "accept")
        except BaseException as exc:  # noqa: BLE001
            errors.append(exc)

    threads = [threading.Thread(target=writer, args=(w,)) for w in range(WRITERS)]
    threads.append(threading.Thread(target=reviewer))
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    drafts = {d.qid: d for d in queryset.read_drafts(dp.source_draft_queries)}
    written = {f"w{w}-{i:02d}" for w in range(WRITERS) for i in range(PER_WRITER)}
    assert written <= set(drafts), f"{len(written - set(drafts))} of {len(written)} appended drafts were lost"
    assert all(drafts[q].status == queryset.ACCEPTED for q in pending), "a review decision was lost"
    qrels = [line.split("\t")[0] for line in dp.source_draft_qrels.read_text().splitlines()[1:]]
    assert sorted(q for q in qrels if q.startswith("w")) == sorted(written)  # each once: no duplicate line


def test_a_draft_another_run_wrote_meanwhile_is_not_appended_twice(tmp_path):
    dp = _dataset(tmp_path, human=True)
    d = _new(0, 1)
    _write_one(dp, d)
    _write_one(dp, d)  # a second chain run that drafted the same question before the first one wrote it
    assert [x.qid for x in queryset.read_drafts(dp.source_draft_queries)].count(d.qid) == 1
    assert dp.source_draft_qrels.read_text().count(f"{d.qid}\t") == 1


def test_a_flock_that_does_not_exclude_is_refused_before_anything_is_written(tmp_path, monkeypatch):
    dp = _dataset(tmp_path, human=True)
    before = dp.source_draft_queries.read_bytes()
    monkeypatch.setattr(fcntl, "flock", lambda *a, **k: None)  # a filesystem whose flock silently does nothing
    with pytest.raises(ReRankEvalError, match=rf"file locks do not exclude .*{dp.source}.*copy the folder"):
        review.review(dp, "g-d", "accept")
    with pytest.raises(ReRankEvalError, match="do not exclude"):
        _write_one(dp, _new(0, 1))
    assert dp.source_draft_queries.read_bytes() == before


@pytest.mark.parametrize("code", [errno.ENOLCK, errno.EOPNOTSUPP])
def test_a_filesystem_without_flock_says_so_and_the_fix(tmp_path, monkeypatch, code):
    dp = _dataset(tmp_path, human=True)

    def no_lock(*args, **kwargs):
        raise OSError(code, "No locks available")

    monkeypatch.setattr(fcntl, "flock", no_lock)
    with pytest.raises(ReRankEvalError) as exc:
        judgments.record(dp, "dm-001", UNITS[1], 1)
    said = str(exc.value)
    assert "does not support file locks" in said and str(dp.source) in said and "writable local disk" in said
    assert ".lock" not in said  # the hidden lock file is not what the user has to know about


def test_a_read_only_dataset_folder_says_which_folder_and_the_fix(tmp_path, monkeypatch):
    dp = _dataset(tmp_path, human=True)
    real_open = builtins.open

    def read_only(file, mode="r", *args, **kwargs):
        if any(c in mode for c in "wax+") and str(file).startswith(str(dp.source)):
            raise OSError(errno.EROFS, "Read-only file system", str(file))
        return real_open(file, mode, *args, **kwargs)

    monkeypatch.setattr(builtins, "open", read_only)  # as root, chmod would not stop us: the mount refuses
    for write in (
        lambda: review.review(dp, "g-d", "reject"),
        lambda: review.promote(dp),
        lambda: queryset.append_human(dp, [{"_id": None, "text": "new", "metadata": {}}], {None: {UNITS[0]: 2}}),
    ):
        with pytest.raises(
            ReRankEvalError,
            match=rf"cannot write to the dataset folder {dp.source} .*read-only.*"
            "copy the folder to a writable local disk",
        ):
            write()


def test_the_lock_is_re_entrant_in_a_thread_and_excludes_another_thread(tmp_path):
    folder = tmp_path / "ds"
    folder.mkdir()
    order: list[str] = []

    def take() -> None:
        with ioutil.dataset_lock(folder):
            order.append("other")

    with ioutil.dataset_lock(folder):
        with ioutil.dataset_lock(folder):  # promote holds it and appends to the human files, which take it too
            other = threading.Thread(target=take)
            other.start()
            other.join(timeout=0.5)
            assert other.is_alive() and order == []  # waits for the holder
        order.append("holder")
    other.join(timeout=10)
    assert order == ["holder", "other"]
