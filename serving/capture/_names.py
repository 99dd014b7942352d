"""Capture file names: ``capture-<origin>-<UTC yyyymmddThhmmssZ>-<seq>.tfrecord`` (``.part`` while open)."""
from __future__ import annotations

import re
import time
from dataclasses import dataclass
from pathlib import Path

__all__ = ["ORIGIN_PATTERN", "PART_SUFFIX", "SUFFIX", "CaptureFileName", "file_name", "parse_file_name"]

SUFFIX = ".tfrecord"
PART_SUFFIX = ".part"
ORIGIN_PATTERN = re.compile(r"[a-z0-9][a-z0-9-]*")
_NAME = re.compile(
    r"capture-(?P<origin>[a-z0-9][a-z0-9-]*)-(?P<stamp>\d{8}T\d{6}Z)-(?P<seq>\d+)\.tfrecord(?P<part>\.part)?")


@dataclass(frozen=True)
class CaptureFileName:
    """The parts of a capture file's name."""

    origin: str
    stamp: str
    seq: int
    part: bool

    @property
    def day(self) -> str:
        """The UTC day the file was opened, ``yyyymmdd``."""
        return self.stamp[:8]


def file_name(origin: str, opened: float, seq: int) -> str:
    """The finished name of a file ``origin`` opened at unix time ``opened``."""
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime(opened))
    return f"capture-{origin}-{stamp}-{seq:06d}{SUFFIX}"


def parse_file_name(path: Path | str) -> CaptureFileName | None:
    """The parts of a capture file's name, or None for any other file."""
    match = _NAME.fullmatch(Path(path).name)
    if match is None:
        return None
    return CaptureFileName(match["origin"], match["stamp"], int(match["seq"]), bool(match["part"]))
