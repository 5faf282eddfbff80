"""Progress of long work on the CPU (the interpreter's checks, compiling for a GPU target):
what runs, how far along it is and about how long is left, so that nothing is silent for long.

    with Progress(total=len(ops), stream=sys.stdout, expected=30.0) as progress:
        for op in ops:
            with progress.step(f"checking {op}"):
                ...

Whenever `heartbeat` seconds pass without a line (from `say` or from the progress itself)
while a step runs, a line says what runs, for how long, and about how long is left (from a
daemon thread: the work itself need not report). Estimates of what is left come from
the steps done so far, and before any is done from `expected`, the caller's estimate. A step
may weigh more than one (`step(label, weight)`, `total` their sum), so that a long step among
short ones counts as the work it is.
"""

from __future__ import annotations

import sys
import threading
import time
from contextlib import contextmanager
from typing import IO, Iterator

HEARTBEAT_S = 8.0


def duration(seconds: float) -> str:
    """A duration as a person reads it: '5 s', '40 s', '2 min'."""
    if seconds < 90:
        return f"{max(1, round(seconds))} s"
    return f"{round(seconds / 60)} min"


class Progress:
    def __init__(self, total: float, stream: IO[str] | None = None, expected: float | None = None,
                 heartbeat: float = HEARTBEAT_S, enabled: bool = True):
        """enabled=False: the same calls, nothing said (for callers whose caller asked for quiet)."""
        self.total, self.expected, self.heartbeat, self.enabled = total, expected, heartbeat, enabled
        self.stream = stream if stream is not None else sys.stderr
        self.done, self.spent = 0, 0.0
        self._label: str | None = None
        self._started = self._last = time.monotonic()
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._beat, name="tritonkit-progress", daemon=True)

    def __enter__(self) -> Progress:
        if self.enabled:
            self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        if self.enabled:
            self._stop.set()
            self._thread.join()

    def say(self, text: str) -> None:
        if not self.enabled:
            return
        with self._lock:
            print(text, file=self.stream, flush=True)
            self._last = time.monotonic()

    @contextmanager
    def step(self, label: str, weight: float = 1) -> Iterator[None]:
        with self._lock:   # silence is counted from the last line said, not from the step's start
            self._label, self._started = label, time.monotonic()
        try:
            yield
        finally:
            with self._lock:
                self.done += weight
                self.spent += time.monotonic() - self._started
                self._label = None

    def left(self, running: float = 0.0) -> float | None:
        """Seconds of work left (a step running for `running` s counted in), or None if unknown."""
        if self.done and self.spent:
            each = self.spent / self.done
        elif self.expected is not None:
            each = self.expected / max(self.total, 1)
        else:
            return None
        return max(each * (self.total - self.done) - running, 0.0)

    def _beat(self) -> None:
        while not self._stop.wait(min(1.0, self.heartbeat / 4)):
            with self._lock:
                label, now = self._label, time.monotonic()
                if label is None or now - self._last < self.heartbeat:
                    continue
                running = now - self._started
                left = self.left(running)
                where = [f"{100 * self.done / self.total:.0f}% done"] if self.total > 1 else []
                where += [f"about {duration(left)} left"] if left else []
                print(f"   ... {label}: {duration(running)} so far" + (f" ({', '.join(where)})" if where else ""),
                      file=self.stream, flush=True)
                self._last = now
