"""Progress bars for Job.wait, uploads and exports: tqdm when installed, a plain one otherwise."""

from __future__ import annotations

import importlib.util
import sys
import time
from typing import IO, Any, Optional, Union

ProgressMode = Union[bool, str, None]

BAR_WIDTH = 30


def _format_seconds(seconds: float) -> str:
    seconds = max(0, int(round(seconds)))
    hours, rest = divmod(seconds, 3600)
    minutes, secs = divmod(rest, 60)
    return "%d:%02d:%02d" % (hours, minutes, secs) if hours else "%02d:%02d" % (minutes, secs)


def resolve_mode(progress: ProgressMode) -> Optional[str]:
    """The bar to draw for a `progress` argument: None (none), "tqdm" or "plain".

    True picks tqdm when it can be imported, else the plain bar; "tqdm" and "plain" force one;
    False and None draw nothing."""
    if progress is None or progress is False:
        return None
    if progress == "plain":
        return "plain"
    if progress is True or progress == "tqdm":
        if importlib.util.find_spec("tqdm") is not None:
            return "tqdm"
        if progress == "tqdm":
            raise ImportError("progress='tqdm' needs tqdm: pip install tqdm")
        return "plain"
    raise ValueError("progress = %r is invalid: allowed True, False, 'tqdm', 'plain'" % (progress,))


class Progress:
    """A bar from 0 to `total` (units done), with a text after it (state, samples, server ETA).

    The tqdm bar estimates the time left from the rate so far; the plain bar shows the ETA given
    to update() (the server's estimate for jobs) or one from the rate. On a terminal the plain bar
    redraws one line; elsewhere (logs, CI) it prints a line when the text changes or every 10 %."""

    def __init__(self, total: float, description: str, mode: str, file: Optional[IO[str]] = None,
                 bytes_unit: bool = False) -> None:
        self.total = float(total) if total else 1.0
        self.description = description
        self.mode = mode
        self.file = file if file is not None else sys.stderr
        self.bytes_unit = bytes_unit
        self.start = time.monotonic()
        self.done = 0.0
        self._last_line = None
        self._bar: Any = None
        if mode == "tqdm":
            import tqdm
            if bytes_unit:
                self._bar = tqdm.tqdm(total=int(self.total), desc=description, unit="B", unit_scale=True,
                                      unit_divisor=1024, file=self.file, leave=True, dynamic_ncols=True)
            else:
                self._bar = tqdm.tqdm(total=int(self.total), desc=description, file=self.file, leave=True,
                                      dynamic_ncols=True,
                                      bar_format="{desc}: {percentage:5.1f}%|{bar}| "
                                                 "[{elapsed}<{remaining}{postfix}]")

    def update(self, done: float, text: str = "", eta_seconds: Optional[float] = None) -> None:
        """Moves the bar to `done` units (it never moves back) with `text` after it."""
        done = max(self.done, min(float(done), self.total))
        if self._bar is not None:
            step = int(done) - self._bar.n
            if text:
                self._bar.set_postfix_str(text, refresh=False)
            if step > 0:
                self._bar.update(step)
            else:
                self._bar.refresh()
            self.done = done
            return
        self.done = done
        fraction = done / self.total
        if eta_seconds is None and 0 < fraction < 1:
            elapsed = time.monotonic() - self.start
            eta_seconds = elapsed * (1 - fraction) / fraction
        filled = int(round(fraction * BAR_WIDTH))
        line = "%s [%s%s] %5.1f %%" % (self.description, "#" * filled, "." * (BAR_WIDTH - filled), 100 * fraction)
        if text:
            line += "  " + text
        if eta_seconds is not None and fraction < 1:
            line += "  ETA " + _format_seconds(eta_seconds)
        if self.file.isatty() if hasattr(self.file, "isatty") else False:
            self.file.write("\r" + line + "\x1b[K")
            self.file.flush()
            self._last_line = line
            return
        decile = int(fraction * 10)
        key = (text.split("  ETA")[0], decile)
        if key != self._last_line:
            self.file.write(line + "\n")
            self.file.flush()
            self._last_line = key

    def close(self) -> None:
        """Ends the bar (a newline after a redrawn plain bar)."""
        if self._bar is not None:
            self._bar.close()
            self._bar = None
        elif isinstance(self._last_line, str):
            self.file.write("\n")
            self.file.flush()
        self._last_line = None
