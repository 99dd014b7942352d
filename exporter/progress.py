"""The exporter's progress over its steps: a bar on a terminal, one line per step elsewhere.

``Steps(label, enabled, total)`` is used as ``with steps("save"): ...``; each
step that finishes advances it. On a terminal (or in a notebook, where tqdm
draws a widget) it is a tqdm bar. When the stream is not a terminal (a CI log,
a file, a pipe) a bar would write ``\\r`` frames into it, so each finished step
prints one line instead: ``export NAME: step 3/9 save (1.2 s)``.
"""
from __future__ import annotations

import contextlib
import sys
import time
from typing import Iterator, Optional, TextIO

from tqdm import notebook as tqdm_notebook
from tqdm import std as tqdm_std
from tqdm.auto import tqdm

__all__ = ["Steps"]


class Steps:
    """Progress over ``total`` steps on ``stream`` (stderr by default); ``enabled=False`` prints nothing."""

    def __init__(self, label: str, enabled: bool, total: int, stream: Optional[TextIO] = None) -> None:
        self.label, self.total, self.done = label, total, 0
        self.stream = sys.stderr if stream is None else stream
        self.enabled = enabled
        self.bar: Optional[tqdm_std.tqdm] = None
        if enabled and _draws_a_bar(self.stream):
            self.bar = tqdm(total=total, desc=f"export {label}", unit="step", file=self.stream)

    @contextlib.contextmanager
    def __call__(self, step: str) -> Iterator[None]:
        start = time.monotonic()
        if self.bar is not None:
            self.bar.set_postfix_str(step)
        yield
        self.done += 1
        if self.bar is not None:
            self.bar.update()
        elif self.enabled:
            print(f"export {self.label}: step {self.done}/{self.total} {step} ({time.monotonic() - start:.1f} s)",
                  file=self.stream, flush=True)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()


def _draws_a_bar(stream: TextIO) -> bool:
    """A terminal, or a notebook (``tqdm.auto`` chose its widget, which writes no ``\\r`` frames)."""
    isatty = getattr(stream, "isatty", None)
    return bool(isatty and isatty()) or issubclass(tqdm, tqdm_notebook.tqdm)
