"""The model lock: one piece of model work at a time in a process, with room for brief work during a long one.

A job holds the lock for its whole run (one job at a time on the GPU, and the shared runtimes used from one
thread at a time). Single-frame work — a preview, the faces of an uploaded photo, each sampled frame of a people
scan, starting a live stream — takes it with `brief()`. Between two batches a run calls `let_brief()`: the brief
work waiting at that moment goes first, one piece at a time, then the run goes on. So a preview asked for during a
run waits for one batch of it, not for the whole run, and a stream of previews cannot stall the run: brief work
that arrives while others are let in waits for the next batch. Plain `acquire` (another job, a live stream's
frames) waits for `release`, as with `threading.Lock`, and for the brief work already waiting then: a live stream
that releases the lock after each frame cannot take it straight back from a waiting preview, whatever the threads'
timing.

The run's own helper threads (face detection ahead of the batch, identity QA, the encoder) go on while brief work
runs: they use the face analyser, which serialises its own calls, and never the processors' models.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass


@dataclass(frozen=True)
class Turn:
    """How a piece of brief work got the lock: `waited` seconds, and whether it waited for a job (a plain holder)
    rather than only for other brief work: what a preview tells its user when it was slow to come."""

    waited: float
    behind_job: bool


class ModelLock:
    """A lock for model work with brief turns between a long holder's batches (see the module docstring).

    Not re-entrant: a thread holding it must not ask again (it raises RuntimeError instead of deadlocking).
    `clock`: seconds, what a `Turn`'s wait is measured with (`time.monotonic`)."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self.clock = clock
        self._cond = threading.Condition()
        self._owner: int | None = None  # thread id of the holder
        self._owner_brief = False  # whether the holder is brief work
        self._lender: int | None = None  # the holder that let brief work in (`let_brief`) and waits to go on
        self._tickets = 0
        self._waiting: set[int] = set()  # tickets of brief work waiting
        self._serving = -1  # while lent: brief work with a ticket up to this goes first

    def acquire(self, blocking: bool = True, timeout: float = -1) -> bool:
        """Take the lock (as `threading.Lock.acquire`): True once held; False when `timeout` seconds (≥ 0) or a
        non-blocking try passed without it."""
        me = self._not_mine()
        with self._cond:
            got = self._cond.wait_for(self._free, None if timeout < 0 else timeout) if blocking else self._free()
            if got:
                self._owner, self._owner_brief = me, False
            return got

    def release(self) -> None:
        with self._cond:
            if self._owner != threading.get_ident():
                raise RuntimeError("release of a model lock this thread does not hold")
            self._owner = None
            self._cond.notify_all()

    def __enter__(self) -> ModelLock:
        self.acquire()
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()

    @contextmanager
    def brief(self) -> Iterator[Turn]:
        """Hold the lock for one short piece of work: at once when it is free, else at the holder's next
        `let_brief` (or its release). Gives the `Turn`: how long it waited, and whether for a job."""
        me = self._not_mine()
        asked = self.clock()
        with self._cond:
            behind_job = self._lender is not None or (self._owner is not None and not self._owner_brief)
            ticket = self._tickets
            self._tickets += 1
            self._waiting.add(ticket)
            try:
                self._cond.wait_for(lambda: self._owner is None and (self._lender is None or ticket <= self._serving))
            finally:
                self._waiting.discard(ticket)
            self._owner, self._owner_brief = me, True
        try:
            yield Turn(self.clock() - asked, behind_job)
        finally:
            with self._cond:
                self._owner, self._owner_brief = None, False
                self._cond.notify_all()

    def let_brief(self) -> int:
        """Called by the holder between two batches: the brief work waiting now runs first, then the holder has
        the lock again. Returns how many pieces went (0 at once when none waits, or when the caller does not hold
        the lock: a one-shot process has no one to share with)."""
        me = threading.get_ident()
        with self._cond:
            if self._owner != me or not self._waiting:
                return 0
            served = len(self._waiting)
            self._serving = max(self._waiting)
            self._lender, self._owner = me, None
            self._cond.notify_all()
            self._cond.wait_for(lambda: self._owner is None and not any(t <= self._serving for t in self._waiting))
            self._lender, self._owner, self._owner_brief = None, me, False
            return served

    @property
    def brief_waiting(self) -> int:
        """How many pieces of brief work wait for the lock now."""
        with self._cond:
            return len(self._waiting)

    def _free(self) -> bool:
        """Free for a plain `acquire`: no holder, and no brief work waiting (it goes first)."""
        return self._owner is None and self._lender is None and not self._waiting

    def _not_mine(self) -> int:
        me = threading.get_ident()
        if self._owner == me or self._lender == me:
            raise RuntimeError("this thread already holds the model lock")
        return me
