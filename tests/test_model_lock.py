"""The model lock: brief work (a preview, a face search) gets in between a run's batches, not after the run; plain
holders (another job, a live stream's frames) wait for the release; brief work cannot stall the run; misuse is an
error, not a deadlock. The studio's preview and a people scan during a run are tested at the end."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import replace
from pathlib import Path

import pytest
from conftest import Clock

from engine import media as video
from engine.media import demo
from engine.serve.model_lock import ModelLock, Turn
from webui.app import Studio
from webui.preview import _waited
from webui.privacy import COOKIE, owner_from


def _until(condition: Callable[[], bool], seconds: float = 10.0) -> None:
    deadline = time.monotonic() + seconds
    while not condition():
        assert time.monotonic() < deadline, "timed out waiting"
        time.sleep(0.001)


def _thread(work: Callable[[], None]) -> threading.Thread:
    thread = threading.Thread(target=work, daemon=True)
    thread.start()
    return thread


def test_brief_work_goes_between_two_batches_of_the_holder() -> None:
    clock = Clock()
    lock, events = ModelLock(clock=clock), []

    turns: list[Turn] = []

    def preview() -> None:
        with lock.brief() as turn:
            turns.append(turn)
            events.append("preview")

    with lock:
        waiter = _thread(preview)
        _until(lambda: lock.brief_waiting == 1)
        events.append("batch 1")
        clock.now += 0.05
        assert lock.let_brief() == 1
        events.append("batch 2")
    waiter.join(5)
    assert events == ["batch 1", "preview", "batch 2"]
    assert turns[0].behind_job and turns[0].waited == pytest.approx(0.05)
    with lock.brief() as turn:  # free: no wait, no job
        assert turn.behind_job is False and turn.waited == 0


class Watched(threading.Condition):
    """A model lock's condition that says when a thread first waits on it (so a test knows a waiter waits)."""

    def __init__(self) -> None:
        super().__init__()
        self.waiting = threading.Event()

    def wait(self, timeout: float | None = None) -> bool:
        self.waiting.set()
        return super().wait(timeout)


def test_plain_acquire_waits_for_the_release_not_for_a_batch() -> None:
    lock, events = ModelLock(), []
    lock._cond = watched = Watched()

    def job() -> None:
        with lock:
            events.append("other job")

    with lock:
        other = _thread(job)
        assert watched.waiting.wait(10)  # the other job is waiting (a plain waiter is not counted as brief)
        assert lock.brief_waiting == 0
        assert lock.let_brief() == 0
        events.append("batch 2")
    other.join(5)
    assert events == ["batch 2", "other job"]


def test_a_plain_acquire_lets_the_brief_work_waiting_go_first() -> None:
    """A holder that releases and asks again at once (a live stream's next frame) waits for the brief work that
    was waiting: it cannot take the lock straight back, whichever thread runs first."""
    lock, events = ModelLock(), []

    def preview() -> None:
        with lock.brief():
            events.append("preview")

    with lock:
        waiter = _thread(preview)
        _until(lambda: lock.brief_waiting == 1)
    with lock:
        events.append("next frame")
    waiter.join(5)
    assert events == ["preview", "next frame"]


def test_brief_work_that_comes_while_others_go_waits_for_the_next_batch() -> None:
    lock, events = ModelLock(), []

    def second() -> None:
        with lock.brief() as turn:
            events.append("second")
            turns.append(turn)

    def first() -> None:
        with lock.brief():
            events.append("first")
            threads.append(_thread(second))
            _until(lambda: lock.brief_waiting == 1)

    threads: list[threading.Thread] = []
    turns: list[Turn] = []
    with lock:
        threads.append(_thread(first))
        _until(lambda: lock.brief_waiting == 1)
        assert lock.let_brief() == 1  # only what waited when the batch ended
        events.append("batch 2")
        assert lock.brief_waiting == 1
        assert lock.let_brief() == 1
        events.append("batch 3")
    for thread in threads:
        thread.join(5)
    assert events == ["first", "batch 2", "second", "batch 3"]
    assert turns[0].behind_job  # it came while brief work held the lock, but waited for the job's next batch


def test_free_lock_timeouts_and_misuse() -> None:
    lock = ModelLock()
    with lock.brief():
        pass  # free: at once
    assert lock.let_brief() == 0  # a thread that does not hold it has no one to let in
    taken = threading.Event()
    release = threading.Event()

    def holder() -> None:
        with lock:
            taken.set()
            release.wait(5)

    thread = _thread(holder)
    taken.wait(5)
    assert lock.acquire(blocking=False) is False
    assert lock.acquire(timeout=0.05) is False
    with pytest.raises(RuntimeError, match="does not hold"):
        lock.release()
    release.set()
    thread.join(5)
    with lock:
        with pytest.raises(RuntimeError, match="already holds"), lock.brief():
            pass
        with pytest.raises(RuntimeError, match="already holds"):
            lock.acquire()
    assert lock.acquire(timeout=0) is True
    lock.release()


class _Asking:
    """A run's progress that, on the first frame done, asks the studio for something (a preview, a people scan)
    from another thread and waits until that waits for the model lock; `answer` is what it got, `done` the frames
    the run has done."""

    def __init__(self, ask: Callable[[], object], lock: ModelLock) -> None:
        self.ask, self.lock, self.done = ask, lock, 0
        self.frames_when_previewed: int | None = None
        self.thread: threading.Thread | None = None
        self.unit = ""

    def stage(self, name: str, total: int | None = None, unit: str = "frame") -> None:
        self.unit = unit

    def advance(self, n: int = 1) -> None:
        if self.unit != "frame" or not n:  # a resumable run first reports the frames it already has (0)
            return
        self.done += n
        if self.thread is None:
            self.thread = _thread(self._ask)
            _until(lambda: self.lock.brief_waiting == 1)

    def _ask(self) -> None:
        self.answer = self.ask()

    def close(self) -> None:
        pass


def test_a_preview_during_a_run_comes_after_one_batch_not_after_the_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    clip = demo.make_clip(tmp_path / "clip.mp4", 160, 90, 8)
    studio = Studio(work_dir=tmp_path / "work")
    session = studio.session(owner_from({COOKIE: "a" * 64}, None))
    # One frame per batch, and the preview shares the run's runtime (the same settings) and its face analyser.
    raw = {"processors": ["face_swapper"], "runtime": {"batch": 1}}
    source = str(demo.source_photo())
    for upload in (clip, source):  # the session's own files, as if it had uploaded them
        studio.guard.allow(session.owner, upload)
    asking = _Asking(lambda: studio.preview(session, raw, str(clip), [source], 3), studio.service.model_lock)
    render = studio.service.preview

    def rendering(*args: object) -> object:  # runs while the preview holds the lock
        asking.frames_when_previewed = asking.done
        return render(*args)  # type: ignore[arg-type]

    monkeypatch.setattr(studio.service, "preview", rendering)
    report, _ = studio.run_for(session, raw, str(clip), [source], asking)  # type: ignore[arg-type]
    assert asking.thread is not None
    asking.thread.join(10)
    assert asking.frames_when_previewed == 1  # the run waited at its first batch's end, for the preview alone
    assert len(asking.answer.rendered.chosen) == 1
    # The page says why this preview was slow to come.
    assert asking.answer.turn.behind_job
    waited = _waited(replace(asking.answer, turn=Turn(0.42, True)))
    assert waited == "; waited 0.4 s for a running job to finish its batch"
    assert _waited(replace(asking.answer, turn=Turn(0.3, False))) == "; waited 0.3 s for another preview"
    assert _waited(replace(asking.answer, turn=Turn(0.05, True))) == ""
    assert report.frames == 8 and report.faces_processed == 8
    assert video.probe(Path(report.output)).frame_count == 8


def test_a_people_scan_during_a_run_goes_between_its_batches_sample_by_sample(tmp_path: Path) -> None:
    from contextlib import contextmanager

    from engine.job.settings import FacesSettings, RuntimeSettings

    clip = demo.make_clip(tmp_path / "clip.mp4", 160, 90, 8)
    other = demo.make_clip(tmp_path / "other.mp4", 160, 90, 12)
    studio = Studio(work_dir=tmp_path / "work")
    session = studio.session(owner_from({COOKIE: "a" * 64}, None))
    for upload in (clip, demo.source_photo()):  # the session's own files, as if it had uploaded them
        studio.guard.allow(session.owner, upload)
    raw = {"processors": ["face_swapper"], "runtime": {"batch": 1}}
    lock = studio.service.model_lock
    frames_at_turns: list[int] = []

    @contextmanager
    def recorded() -> Iterator[object]:
        with lock.brief() as turn:
            frames_at_turns.append(asking.done)  # how far the run is while the scan holds the lock
            yield turn

    every = 12 / 24 / 4  # four samples of the 12-frame, 24 fps clip
    settings = FacesSettings(scan_every=every)
    asking = _Asking(lambda: studio.service.people(other, settings, RuntimeSettings(batch=1), turn=recorded), lock)
    report, _ = studio.run_for(session, raw, str(clip), [str(demo.source_photo())], asking)  # type: ignore[arg-type]
    assert asking.thread is not None
    asking.thread.join(30)
    found = asking.answer
    assert len(found.sampled) == 4 and [p.number for p in found.people] == [0]
    # The analyser's loading, the scan cache and each sample took a turn of their own: the run went on between.
    assert len(frames_at_turns) == 2 + 4 and frames_at_turns[0] == 1
    assert frames_at_turns == sorted(frames_at_turns) and frames_at_turns[-1] > frames_at_turns[0]
    assert report.frames == 8
