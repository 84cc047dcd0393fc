"""Thread and queue plumbing of a run: stage threads joined by bounded queues, whose errors reach the caller and
which all end once the run stops, wherever they are waiting.

A stage thread is a `Worker`; `produce` fills a queue from an iterator, `drain` is the other end (an iterator
again), `consume` runs a function on each item, `HandOff` is a function run on its own thread behind a queue.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable, Iterable, Iterator
from typing import Any

# The item that ends a queue's stream.
END = object()
# How often a thread waiting on a queue looks whether the run has stopped, seconds.
_POLL_S = 0.1


class Worker:
    """A daemon thread whose exception is re-raised in the caller by `join` or `check`."""

    def __init__(self, name: str, target: Callable[[], None]) -> None:
        self.error: BaseException | None = None
        self.thread = threading.Thread(target=self._run, args=(target,), name=f"facestudio-{name}", daemon=True)
        self.thread.start()

    def _run(self, target: Callable[[], None]) -> None:
        try:
            target()
        except BaseException as exc:  # re-raised in the main thread, where the job's error handling lives
            self.error = exc

    def check(self) -> None:
        if self.error is not None:
            raise self.error

    def join(self) -> None:
        self.thread.join()
        self.check()


def put(q: queue.Queue[Any], item: Any, stop: threading.Event, worker: Worker | None = None) -> None:
    """Put `item` in `q`, waiting for room until `stop` is set; `worker`'s error (the consumer's) is raised here."""
    while not stop.is_set():
        if worker is not None:
            worker.check()
        try:
            q.put(item, timeout=_POLL_S)
            return
        except queue.Full:
            continue


def produce(items: Iterator[Any], q: queue.Queue[Any], stop: threading.Event) -> None:
    """Put every item of `items` in `q`, then END; returns early once `stop` is set."""
    for item in items:
        put(q, item, stop)
        if stop.is_set():  # checked before asking `items` for more: that may block (a queue) or compute (faces)
            return
    put(q, END, stop)


def consume(q: queue.Queue[Any], use: Callable[[Any], None], stop: threading.Event) -> None:
    """Call `use` on each item of `q` until END or `stop`."""
    while not stop.is_set():
        try:
            item = q.get(timeout=_POLL_S)
        except queue.Empty:
            continue
        if item is END:
            return
        use(item)


def drain(q: queue.Queue[Any], producer: Worker, stop: threading.Event) -> Iterator[Any]:
    """The producer's items, in order, until its end marker; the producer's error is raised here. Ends early once
    `stop` is set (the run is over or failed: a thread still pulling must not wait for items that never come)."""
    while True:
        try:
            item = q.get(timeout=_POLL_S)
        except queue.Empty:
            producer.check()
            if stop.is_set():
                return
            continue
        if item is END:
            producer.check()
            return
        yield item


def chunks(items: Iterable[Any], size: int) -> Iterator[list[Any]]:
    """`items` in lists of `size` (the last one shorter)."""
    chunk: list[Any] = []
    for item in items:
        chunk.append(item)
        if len(chunk) == size:
            yield chunk
            chunk = []
    if chunk:
        yield chunk


class HandOff:
    """`use` run on its own thread: `put(*args)` hands it arguments through a queue of `size`, `finish` waits until
    every one is used (raising its error, if any)."""

    def __init__(self, name: str, use: Callable[..., None], size: int, stop: threading.Event) -> None:
        self.queue: queue.Queue[Any] = queue.Queue(maxsize=size)
        self.stop = stop
        self.worker = Worker(name, lambda: consume(self.queue, lambda args: use(*args), stop))

    def put(self, *args: Any) -> None:
        put(self.queue, args, self.stop, self.worker)

    def finish(self) -> None:
        put(self.queue, END, self.stop, self.worker)
        self.worker.join()
