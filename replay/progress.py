"""The one progress display of ttc's long commands.

In a terminal it is a rich bar (done / total, time left) that disappears when the work ends; when the output is a
file or a pipe (a batch job, CI, `ttc ... | tee log`) a bar would fill the log with control codes, so it becomes a
plain line on stderr at most every `every_s` seconds (and a last one at the end, if any was printed), with the time
left, and nothing at all for work that ends within the first interval. Either way the caller only calls
`advance(k)`; `rates=("responses", "tokens")` adds running rates of amounts passed as `advance(k, responses=...)`.
Used by every long command: replay, bench, harvest, grading, PRM scoring."""
from __future__ import annotations

import sys
import threading
import time


def _duration(s: float) -> str:
    s = int(round(s))
    if s < 60:
        return f"{s} s"
    if s < 3600:
        return f"{s // 60} min {s % 60:02d} s"
    return f"{s // 3600} h {s % 3600 // 60:02d} min"


class progress:  # noqa: N801 (used as a context manager, like open)
    """`with progress(total, "replaying", "seeds") as p: ... p.advance(k)`."""

    def __init__(self, total: int, label: str, unit: str = "", console=None, enabled: bool = True,
                 every_s: float = 10.0, stream=None, rates: tuple[str, ...] = ()):
        self.total, self.label, self.unit = int(total), label, unit
        self.console, self.enabled, self.every_s = console, enabled and total > 0, every_s
        self.stream = stream if stream is not None else sys.stderr
        self.done = 0
        self.rates = tuple(rates)
        self.amounts = dict.fromkeys(self.rates, 0)
        self._bar = None
        self._printed = False
        self._lock = threading.Lock()  # workers' threads advance it (the code sandbox)

    def __enter__(self) -> "progress":
        self.t0 = self._last = time.perf_counter()
        if not self.enabled:
            return self
        terminal = self.console.is_terminal if self.console is not None else self.stream.isatty()
        if terminal:
            from rich.console import Console
            from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

            columns = [TextColumn(self.label), BarColumn(), MofNCompleteColumn()]
            if self.unit:
                columns.append(TextColumn(self.unit))
            if self.rates:
                columns.append(TextColumn("{task.fields[rates]}"))
            self._bar = Progress(*columns, TimeRemainingColumn(), transient=True,
                                 console=self.console or Console(stderr=True))
            self._bar.__enter__()
            self._task = self._bar.add_task(self.label, total=self.total, rates="")
        return self

    def rate_text(self) -> str:
        dt = max(time.perf_counter() - self.t0, 1e-9)
        return ", ".join(f"{self.amounts[r] / dt:,.1f} {r}/s" for r in self.rates)

    def advance(self, k: int = 1, **amounts):
        with self._lock:
            self._advance(k, amounts)

    def _advance(self, k: int, amounts: dict):
        self.done += k
        for name, v in amounts.items():
            self.amounts[name] = self.amounts.get(name, 0) + v
        if not self.enabled:
            return
        if self._bar is not None:
            self._bar.update(self._task, advance=k, rates=self.rate_text())
            return
        now = time.perf_counter()
        end = self.done >= self.total
        if (now - self._last >= self.every_s and not end) or (end and self._printed):
            self._last, self._printed = now, True
            elapsed = now - self.t0
            left = elapsed * (self.total - self.done) / max(self.done, 1)
            unit = f" {self.unit}" if self.unit else ""
            rates = f", {self.rate_text()}" if self.rates else ""
            print(f"{self.label}: {self.done:,}/{self.total:,}{unit} ({self.done / self.total:.0%}){rates}, "
                  f"{_duration(elapsed)} elapsed, about {_duration(left)} left", file=self.stream, flush=True)

    def __exit__(self, *exc):
        if self._bar is not None:
            self._bar.__exit__(*exc)
        return False
