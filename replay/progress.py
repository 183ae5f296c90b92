"""The one progress display of ttc's long commands.

In a terminal it is a rich bar (done / total, time elapsed, time left) that disappears when the work ends; when the
output is a file or a pipe (a batch job, CI, `ttc ... | tee log`) a bar would fill the log with control codes, so it
becomes a plain line on stderr at most every `every_s` seconds, and at least that often while the work goes on
(a heartbeat thread: a step that takes minutes, a first compile, is not silence), plus a last one at the end if any
was printed; nothing at all for work that ends within the first interval. Either way the caller only calls
`advance(k)`; `rates=("responses", "tokens")` adds running rates of amounts passed as `advance(k, responses=...)`;
`note` says what happens before the first step ("compiling the engine once (about 20 s)").

The time left is honest (issue 28): none until the work since the first step is enough to measure a rate
(`estimate`), and the rate excludes everything before the first step (the start-up, numba's compile, a warm-up
whose cost is not the steps'), which had made the first estimate of a replay "about 2 min 15 s" a second before it
ended. Used by every long command: replay, tune, compare, signals, bench, harvest, grading, PRM scoring."""
from __future__ import annotations

import sys
import threading
import time

MIN_SHARE = 0.05  # an estimate needs this share of the work done since the first step ...
MIN_SECONDS = 2.0  # ... and this long since it


def _duration(s: float) -> str:
    s = int(round(s))
    if s < 60:
        return f"{s} s"
    if s < 3600:
        return f"{s // 60} min {s % 60:02d} s"
    return f"{s // 3600} h {s % 3600 // 60:02d} min"


def estimate(total: int, done: int, first_done: int, since_first: float) -> float | None:
    """Seconds left from the rate since the first step, or None while it rests on too little: under MIN_SHARE of
    the work (and at least one step) or MIN_SECONDS since the first step."""
    steps = done - first_done
    if steps < max(1, MIN_SHARE * total) or since_first < MIN_SECONDS or done >= total:
        return None if done < total else 0.0
    return since_first * (total - done) / steps


class progress:  # noqa: N801 (used as a context manager, like open)
    """`with progress(total, "replaying", "runs") as p: ... p.advance(k)`."""

    def __init__(self, total: int, label: str, unit: str = "", console=None, enabled: bool = True,
                 every_s: float = 10.0, stream=None, rates: tuple[str, ...] = (), note: str = ""):
        self.total, self.label, self.unit, self.note = int(total), label, unit, note
        self.console, self.enabled, self.every_s = console, enabled and total > 0, every_s
        self.stream = stream if stream is not None else sys.stderr
        self.done = 0
        self.rates = tuple(rates)
        self.amounts = dict.fromkeys(self.rates, 0)
        self._bar = None
        self._printed = False
        self._lock = threading.Lock()  # workers' threads advance it (the code sandbox)
        self._first: tuple[float, int] | None = None  # (time, done) at the first step
        self._stop = threading.Event()
        self._beat = None

    def __enter__(self) -> "progress":
        self.t0 = self._last = time.perf_counter()
        if not self.enabled:
            return self
        terminal = self.console.is_terminal if self.console is not None else self.stream.isatty()
        if terminal:
            from rich.console import Console
            from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

            columns = [TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn()]
            if self.unit:
                columns.append(TextColumn(self.unit))
            if self.rates:
                columns.append(TextColumn("{task.fields[rates]}"))
            columns += [TimeElapsedColumn(), TextColumn("{task.fields[left]}")]
            self._bar = Progress(*columns, transient=True, console=self.console or Console(stderr=True))
            self._bar.__enter__()
            self._task = self._bar.add_task(self._description(), total=self.total, rates="", left="")
        else:
            if self.note:
                print(f"{self.label}: {self.note}", file=self.stream, flush=True)
                self._printed = True
            if self.every_s > 0:
                self._beat = threading.Thread(target=self._heartbeat, daemon=True)
                self._beat.start()
        return self

    def _description(self) -> str:
        return f"{self.label} ({self.note})" if self.note and self._first is None else self.label

    def rate_text(self) -> str:
        dt = max(time.perf_counter() - self.t0, 1e-9)
        return ", ".join(f"{self.amounts[r] / dt:,.1f} {r}/s" for r in self.rates)

    def left(self, now: float | None = None) -> float | None:
        if self._first is None:
            return None
        now = time.perf_counter() if now is None else now
        return estimate(self.total, self.done, self._first[1], now - self._first[0])

    def advance(self, k: int = 1, **amounts):
        with self._lock:
            self._advance(k, amounts)

    def _advance(self, k: int, amounts: dict):
        now = time.perf_counter()
        if self._first is None and k > 0:
            # the rate is measured from the end of the first step: what came before it (start-up, compile) is not
            # what the remaining steps cost
            self._first = (now, self.done + k)
        self.done += k
        for name, v in amounts.items():
            self.amounts[name] = self.amounts.get(name, 0) + v
        if not self.enabled:
            return
        if self._bar is not None:
            left = self.left(now)
            self._bar.update(self._task, advance=k, rates=self.rate_text(), description=self._description(),
                             left="" if left is None or self.done >= self.total else f"about {_duration(left)} left")
            return
        end = self.done >= self.total
        if (now - self._last >= self.every_s and not end) or (end and self._printed):
            self._line(now)

    def _line(self, now: float):
        self._last, self._printed = now, True
        elapsed = now - self.t0
        left = self.left(now)
        unit = f" {self.unit}" if self.unit else ""
        rates = f", {self.rate_text()}" if self.rates else ""
        tail = ("" if self.done >= self.total else f", about {_duration(left)} left" if left is not None else
                f"; {self.note}" if self.note and self._first is None else "")
        print(f"{self.label}: {int(self.done):,}/{self.total:,}{unit} ({self.done / self.total:.0%}){rates}, "
              f"{_duration(elapsed)} elapsed{tail}", file=self.stream, flush=True)

    def _heartbeat(self):
        """A line at least every every_s while the work goes on, whether or not a step ended."""
        while not self._stop.wait(min(1.0, self.every_s)):
            with self._lock:
                now = time.perf_counter()
                if now - self._last >= self.every_s and self.done < self.total:
                    self._line(now)

    def __exit__(self, *exc):
        self._stop.set()
        if self._beat is not None:
            self._beat.join()
        if self._bar is not None:
            self._bar.__exit__(*exc)
        return False
