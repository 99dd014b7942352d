"""TFRecord framing, byte for byte TensorFlow's (``tensorflow/core/lib/io/record_writer.cc``).

Each record is ``length`` (uint64 little-endian), ``masked_crc32c(length)``
(uint32 LE), ``data``, ``masked_crc32c(data)`` (uint32 LE); the mask is
``((crc >> 15) | (crc << 17)) + 0xa282ead8`` (``tensorflow/core/lib/hash/crc32c.h``).
"""
from __future__ import annotations

import struct
from collections.abc import Iterator
from pathlib import Path
from typing import BinaryIO

import google_crc32c

from serving.capture._errors import CaptureError

__all__ = ["FOOTER_BYTES", "HEADER_BYTES", "frame", "framed_size", "iter_records", "masked_crc32c"]

HEADER_BYTES = 12
FOOTER_BYTES = 4
_MASK_DELTA = 0xA282EAD8
_U64 = struct.Struct("<Q")
_U32 = struct.Struct("<I")


def masked_crc32c(data: bytes) -> int:
    """TensorFlow's masked CRC-32C of ``data``."""
    crc = google_crc32c.value(data)
    return ((((crc >> 15) | (crc << 17)) & 0xFFFFFFFF) + _MASK_DELTA) & 0xFFFFFFFF


def framed_size(data_len: int) -> int:
    """Bytes one record of ``data_len`` bytes takes in a file."""
    return HEADER_BYTES + data_len + FOOTER_BYTES


def frame(data: bytes) -> bytes:
    """One TFRecord: header, ``data``, footer."""
    length = _U64.pack(len(data))
    return b"".join((length, _U32.pack(masked_crc32c(length)), data, _U32.pack(masked_crc32c(data))))


def iter_records(stream: BinaryIO, path: Path, *, allow_truncated_tail: bool = False) -> Iterator[tuple[int, bytes]]:
    """Yield ``(offset, data)`` for each record of ``stream``.

    A checksum mismatch is a CaptureError naming ``path`` and the record's
    offset. A record cut short at the end of the stream is one too, unless
    ``allow_truncated_tail`` (a ``.part`` file still being written): then
    reading stops before it.
    """
    offset = 0
    while True:
        header = stream.read(HEADER_BYTES)
        if not header:
            return
        if len(header) < HEADER_BYTES:
            _truncated(path, offset, allow_truncated_tail, "header")
            return
        length_bytes, crc = header[:8], _U32.unpack_from(header, 8)[0]
        if masked_crc32c(length_bytes) != crc:
            raise CaptureError("length checksum mismatch (not a TFRecord file, or corrupt)", path=path, offset=offset)
        (length,) = _U64.unpack(length_bytes)
        data = stream.read(length)
        footer = stream.read(FOOTER_BYTES)
        if len(data) < length or len(footer) < FOOTER_BYTES:
            _truncated(path, offset, allow_truncated_tail, "data")
            return
        if masked_crc32c(data) != _U32.unpack(footer)[0]:
            raise CaptureError("data checksum mismatch (corrupt record)", path=path, offset=offset)
        yield offset, data
        offset += framed_size(length)


def _truncated(path: Path, offset: int, allowed: bool, part: str) -> None:
    if not allowed:
        raise CaptureError(f"file ends inside the record's {part} (truncated file)", path=path, offset=offset)
