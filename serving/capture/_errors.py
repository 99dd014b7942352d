"""The one error of capture files: a file that breaks the TFRecord or PredictionLog rules."""
from __future__ import annotations

from pathlib import Path

__all__ = ["CaptureError"]


class CaptureError(ValueError):
    """A capture file or command broke a rule; ``path`` and ``offset`` say where, when known.

    The message names the file and the byte offset of the record that broke
    the rule, so an operator can cut a damaged file at that offset.
    """

    def __init__(self, message: str, *, path: str | Path | None = None, offset: int | None = None):
        where = ""
        if path is not None:
            where = f"{path}: " if offset is None else f"{path}: record at byte offset {offset}: "
        super().__init__(where + message)
        self.path = None if path is None else Path(path)
        self.offset = offset
