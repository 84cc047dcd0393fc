"""One job at a time, first come first served, for UI runs and jobs-API jobs alike — with each waiting job's
place in line and a wait estimated from the speed measured on this server.

Speed is measured in seconds per megapixel-frame (frames × input pixels / 10⁶) per processor chain: the running
job reports its progress, finished jobs their totals (an exponential average, so a warm-up run does not weigh
forever). A job's expected time is its megapixel-frames times its chain's speed (any chain's, until this chain
has been measured); the wait is what is left of the running job plus the jobs ahead. Unknown until a first job
has processed frames.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

from engine.core.errors import Cancelled

# Weight of the newest finished job in a chain's speed.
_NEW_WEIGHT = 0.5


@dataclass
class Ticket:
    """A job waiting or running. `megapixel_frames`: frames × input width × height / 10⁶; `chain`: its processor
    ids. `done`/`started`: progress of the running job (frames done, when its frames began)."""

    chain: tuple[str, ...]
    frames: int
    megapixel_frames: float
    cancel: threading.Event = field(default_factory=threading.Event)
    done: int = 0
    started: float | None = None


@dataclass(frozen=True)
class Place:
    """Where a ticket stands: `ahead` jobs before it (0 = it is next or running), `running` whether it runs now,
    `wait` the estimated seconds until it starts (None when nothing has been measured yet)."""

    ahead: int
    running: bool
    wait: float | None


class RunQueue:
    """Serialises jobs; thread-safe. `clock`: seconds, what the jobs' speed is measured with (`time.monotonic`)."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self.clock = clock
        self._cond = threading.Condition()
        self._line: list[Ticket] = []
        self._running: Ticket | None = None
        self._speed: dict[tuple[str, ...], float] = {}

    @contextlib.contextmanager
    def turn(self, ticket: Ticket, poll: float = 0.25) -> Iterator[None]:
        """Wait in line until `ticket`'s turn, then hold the queue for the block. Raises Cancelled (and leaves the
        line) when `ticket.cancel` is set while it waits."""
        with self._cond:
            self._line.append(ticket)
            try:
                while self._running is not None or self._line[0] is not ticket:
                    if ticket.cancel.is_set():
                        raise Cancelled("cancelled while waiting in line; nothing was run")
                    self._cond.wait(poll)
            except BaseException:
                self._line.remove(ticket)
                self._cond.notify_all()
                raise
            self._line.remove(ticket)
            self._running = ticket
        started = self.clock()
        try:
            yield
        finally:
            with self._cond:
                self._learn(ticket, self.clock() - (ticket.started or started))
                self._running = None
                self._cond.notify_all()

    def progress(self, ticket: Ticket, done: int) -> None:
        """The running `ticket` has processed `done` frames (its clock starts at the first report)."""
        with self._cond:
            if ticket.started is None:
                ticket.started = self.clock()
            ticket.done = done

    def place(self, ticket: Ticket) -> Place:
        with self._cond:
            if ticket is self._running:
                return Place(0, True, 0.0)
            ahead = self._line[: self._line.index(ticket)] if ticket in self._line else []
            wait = self._remaining(self._running) if self._running is not None else 0.0
            for other in ahead:
                expected = self._expected(other)
                wait = None if wait is None or expected is None else wait + expected
            return Place(len(ahead) + (self._running is not None), False, wait)

    def seconds_per_megapixel_frame(self, chain: tuple[str, ...]) -> float | None:
        """This chain's measured speed, else the mean of the chains measured so far, else None."""
        with self._cond:
            return self._rate(chain)

    # -- under the lock -----------------------------------------------------------------------------------------
    def _rate(self, chain: tuple[str, ...]) -> float | None:
        if chain in self._speed:
            return self._speed[chain]
        running = self._running_rate()
        if running is not None and self._running is not None and self._running.chain == chain:
            return running
        known = list(self._speed.values()) + ([running] if running is not None else [])
        return sum(known) / len(known) if known else None

    def _running_rate(self) -> float | None:
        ticket = self._running
        if ticket is None or ticket.started is None or ticket.done <= 0 or ticket.frames <= 0:
            return None
        per_frame = (self.clock() - ticket.started) / ticket.done
        return per_frame / (ticket.megapixel_frames / ticket.frames)

    def _expected(self, ticket: Ticket) -> float | None:
        rate = self._rate(ticket.chain)
        return None if rate is None else rate * ticket.megapixel_frames

    def _remaining(self, ticket: Ticket) -> float | None:
        rate = self._running_rate() or self._rate(ticket.chain)
        if rate is None:
            return None
        left = max(ticket.frames - ticket.done, 0) / max(ticket.frames, 1)
        return rate * ticket.megapixel_frames * left

    def _learn(self, ticket: Ticket, seconds: float) -> None:
        if ticket.done <= 0 or ticket.megapixel_frames <= 0:
            return
        rate = seconds / (ticket.megapixel_frames * ticket.done / max(ticket.frames, 1))
        old = self._speed.get(ticket.chain)
        self._speed[ticket.chain] = rate if old is None else old + _NEW_WEIGHT * (rate - old)
