"""A tiny dependency-free progress bar for the command line, and a ticker that redraws it.

Shown only on a terminal: silent when ``enabled=False`` (``--quiet``) or when
the stream is not a TTY (pipes, files, CI logs, tests), so redirected output
stays clean. Writes to ``stderr`` by default so that ``stdout`` stays
machine-readable.

Example::

    >>> with Progress(total=3, desc="replicates") as bar:
    ...     for _ in range(3):
    ...         bar.update()
"""

from __future__ import annotations

import sys
import threading
import time

__all__ = ["Progress", "Ticker", "progress_enabled"]


def progress_enabled(stream=None, quiet: bool = False) -> bool:
    """True when a progress bar should be drawn: not ``quiet`` and ``stream`` is a TTY."""
    if quiet:
        return False
    stream = sys.stderr if stream is None else stream
    isatty = getattr(stream, "isatty", None)
    try:
        return bool(isatty and isatty())
    except (ValueError, OSError):  # closed stream
        return False


class Progress:
    """``[#####.....] 5/10 stage  2.1s`` on one line, redrawn in place.

    Args:
        total: number of steps (``None`` or 0 for an unknown total: no bar).
        desc: label shown after the counter.
        enabled: draw at all (default: :func:`progress_enabled` on ``stream``).
        stream: where to draw (default ``sys.stderr``).
        width: bar width in characters.
    """

    def __init__(
        self, total: int | None = None, desc: str = "", *, enabled: bool | None = None, stream=None, width: int = 30
    ):
        self.stream = sys.stderr if stream is None else stream
        self.enabled = progress_enabled(self.stream) if enabled is None else bool(enabled)
        self.total = int(total) if total else 0
        self.desc = desc
        self.width = int(width)
        self.count = 0
        self._start = time.perf_counter()
        self._last_len = 0

    def _render(self) -> str:
        elapsed = time.perf_counter() - self._start
        if self.total:
            frac = min(self.count / self.total, 1.0)
            filled = int(round(frac * self.width))
            bar = "#" * filled + "." * (self.width - filled)
            return f"[{bar}] {self.count}/{self.total} {self.desc}  {elapsed:.1f}s"
        return f"{self.count} {self.desc}  {elapsed:.1f}s"

    def _draw(self):
        if not self.enabled:
            return
        line = self._render()
        pad = " " * max(self._last_len - len(line), 0)
        self.stream.write("\r" + line + pad)
        self.stream.flush()
        self._last_len = len(line)

    def set_description(self, desc: str):
        """Change the label (e.g. the current stage) and redraw."""
        self.desc = desc
        self._draw()

    def update(self, n: int = 1, desc: str | None = None):
        """Advance by ``n`` steps (optionally relabel) and redraw."""
        self.count += int(n)
        if desc is not None:
            self.desc = desc
        self._draw()

    def close(self):
        """Finish the line (nothing is written when disabled)."""
        if self.enabled and self._last_len:
            self.stream.write("\n")
            self.stream.flush()
            self._last_len = 0

    def __enter__(self) -> Progress:
        self._draw()
        return self

    def __exit__(self, *exc):
        self.close()
        return False


class Ticker:
    """Redraw a :class:`Progress` line every ``interval`` seconds while a long call runs.

    The knockoff filter batches all replicates into one ``vmap``-ed call, so
    there is no per-replicate event to count; on a terminal the elapsed time
    is shown instead and the bar advances by stage.
    """

    def __init__(self, bar: Progress, interval: float = 0.25):
        self.bar, self.interval = bar, interval
        self._stop = threading.Event()
        self._thread = None

    def __enter__(self):
        if self.bar.enabled:
            self._thread = threading.Thread(target=self._run, daemon=True)
            self._thread.start()
        return self

    def _run(self):
        while not self._stop.wait(self.interval):
            self.bar._draw()

    def __exit__(self, *exc):
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        return False
