"""The deciding rank's progress display.

On a terminal: a live panel (rich) redrawn about twice a second. Elsewhere (CI, a log
file, mpiexec's forwarded output): one plain line per metrics row. ``--quiet``: nothing.
Both show env steps, fps, the mean return, policy lag, the time left to the run's limit,
and which ranks rank 0 has heard from recently (:func:`ranks_heard`).
"""

from __future__ import annotations

import sys
import time
from dataclasses import dataclass
from typing import Any, TextIO

LIVE_REFRESH_S = 0.5
_SHOWN: set[Progress] = set()  # live panels on screen, stopped by close_all()


@dataclass(frozen=True)
class RanksHeard:
    """The peers rank 0 receives from, and those silent for longer than ``window_s``."""

    peers: tuple[int, ...]
    silent: tuple[int, ...]
    window_s: float

    def __str__(self) -> str:
        heard = len(self.peers) - len(self.silent)
        out = f"{heard}/{len(self.peers)}"
        if self.silent:
            out += f" (silent >{self.window_s:.0f}s: {','.join(map(str, self.silent))})"
        return out


def ranks_heard(last_heard: dict[int, float], window_s: float,
                now: float | None = None) -> RanksHeard:
    """Which of the peers in ``last_heard`` (peer -> monotonic time of its last message)
    were silent for more than ``window_s``."""
    now = time.monotonic() if now is None else now
    peers = tuple(sorted(last_heard))
    silent = tuple(p for p in peers if now - last_heard[p] > window_s)
    return RanksHeard(peers, silent, window_s)


def time_left(elapsed_s: float, time_limit_s: float | None, env_steps: int,
              total_steps: int | None, fps: float) -> tuple[float, str] | None:
    """Seconds to the nearest limit and which one ('time' or 'steps'), if any is known."""
    left = []
    if time_limit_s is not None:
        left.append((max(0.0, time_limit_s - elapsed_s), "time"))
    if total_steps is not None and fps > 0:
        left.append((max(0.0, (total_steps - env_steps) / fps), "steps"))
    return min(left) if left else None


def fmt_duration(seconds: float) -> str:
    s = int(round(seconds))
    if s < 60:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m{s % 60:02d}s"
    return f"{s // 3600}h{s % 3600 // 60:02d}m"


def _fields(row: dict[str, Any], left: tuple[float, str] | None,
            ranks: RanksHeard | None) -> list[tuple[str, str]]:
    """(name, value) pairs of one progress report, in display order."""
    ret = row.get("mean_return_100")
    lag = row.get("policy_lag")
    out = [("t", f"{row['time_s']:.1f}s"), ("steps", f"{row['env_steps']:,}"),
           ("fps", f"{row['fps']:,.0f}"), ("episodes", f"{row['episodes']:,}"),
           ("return100", "-" if ret is None else f"{ret:.1f}")]
    if row.get("eval_mean_return") is not None:
        out.append(("eval", f"{row['eval_mean_return']:.1f}"))
    out += [("updates", f"{row['learner_updates']:,}"),
            ("lag", "-" if lag is None else f"{lag:.2f}")]
    if left is not None:
        out.append(("left", f"{fmt_duration(left[0])} ({left[1]})"))
    if ranks is not None and ranks.peers:
        out.append(("ranks", str(ranks)))
    return out


class Progress:
    """Shows the deciding rank's progress: ``live`` on a terminal, else plain lines."""

    def __init__(self, label: str, quiet: bool = False, stream: TextIO | None = None,
                 live: bool | None = None) -> None:
        self.label, self.quiet = label, quiet
        self.stream = stream or sys.stdout
        self.live = (not quiet) and (self.stream.isatty() if live is None else live)
        self._live: Any = None
        self._last_draw = 0.0

    def row(self, row: dict[str, Any], extra: dict[str, Any], left: tuple[float, str] | None,
            ranks: RanksHeard | None) -> None:
        """A new metrics row: one line, or a redraw of the live panel."""
        if self.quiet:
            return
        fields = _fields(row, left, ranks) + [(k, str(v)) for k, v in extra.items()
                                               if v is not None]
        if self.live:
            self._draw(fields)
        else:
            print(f"[{self.label}] " + " ".join(f"{k}={v}" for k, v in fields),
                  file=self.stream, flush=True)

    def tick(self, row: dict[str, Any], left: tuple[float, str] | None,
             ranks: RanksHeard | None) -> None:
        """Between rows: redraw the live panel at most every ``LIVE_REFRESH_S``."""
        if self.live and time.monotonic() - self._last_draw >= LIVE_REFRESH_S:
            self._draw(_fields(row, left, ranks))

    def _draw(self, fields: list[tuple[str, str]]) -> None:
        from rich.console import Console
        from rich.live import Live
        from rich.table import Table

        table = Table.grid(padding=(0, 2))
        table.add_row(*(f"[dim]{k}[/]" for k, _ in fields))
        table.add_row(*(f"[bold]{v}[/]" for _, v in fields))
        table.title = self.label
        if self._live is None:
            self._live = Live(table, console=Console(file=self.stream), auto_refresh=False,
                              redirect_stdout=False, redirect_stderr=False)
            self._live.start()
            _SHOWN.add(self)
        self._live.update(table, refresh=True)
        self._last_draw = time.monotonic()

    def close(self) -> None:
        if self._live is not None:
            self._live.stop()  # the cursor comes back, the last panel stays on screen
            self._live = None
        _SHOWN.discard(self)


def close_all() -> None:
    """Stop every live panel (a rank that ends early must not leave the cursor hidden)."""
    for p in list(_SHOWN):
        p.close()
