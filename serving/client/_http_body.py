"""A REST answer's body read with bounds: at most ``max_response_bytes`` after decompression, by a deadline.

httpx would hold the whole body (``response.content``) and inflate a gzip
body without a bound: a 1 MiB gzip answer can inflate to gigabytes. Here
the raw body is read chunk by chunk, inflated (gzip, deflate) in pieces of at
most ``_PIECE`` bytes, counted, and refused with ``errors.ResponseTooLarge`` as
soon as it passes the limit; a ``Content-Length`` past the limit is refused
before anything is read. Between chunks the call's deadline is checked.
"""
from __future__ import annotations

import time
import zlib
from typing import Mapping, Optional

from serving import status
from serving.client.errors import ResponseTooLarge

__all__ = ["ACCEPT_ENCODING", "BoundedBody"]

ACCEPT_ENCODING = "gzip, deflate"
"""What the REST clients ask for: the encodings ``BoundedBody`` inflates with a bound."""

_PIECE = 1 << 20
_WBITS = {"gzip": 16 + zlib.MAX_WBITS, "x-gzip": 16 + zlib.MAX_WBITS, "deflate": zlib.MAX_WBITS}


class BoundedBody:
    """The decoded body of one answer, fed raw chunks; refuses past ``limit`` bytes or ``deadline``."""

    def __init__(self, url: str, headers: Mapping[str, str], limit: int, deadline: Optional[float]) -> None:
        self.url, self.limit, self.deadline = url, limit, deadline
        self.parts: list[bytes] = []
        self.size = 0
        self._fed = False
        encodings = [e.strip().lower() for e in headers.get("content-encoding", "").split(",")
                     if e.strip() and e.strip().lower() != "identity"]
        if len(encodings) > 1 or (encodings and encodings[0] not in _WBITS):
            raise status.Internal(f"the answer from {url} has Content-Encoding {headers['content-encoding']!r}; "
                                  f"the client asked for {ACCEPT_ENCODING}")
        self.encoding = encodings[0] if encodings else None
        self._inflater = zlib.decompressobj(_WBITS[self.encoding]) if self.encoding else None
        length = headers.get("content-length")
        if self.encoding is None and length is not None and length.isdigit() and int(length) > limit:
            raise self._too_large(f"its Content-Length is {int(length)} bytes")

    def _too_large(self, why: str) -> ResponseTooLarge:
        return ResponseTooLarge(f"the answer from {self.url} is larger than max_response_bytes={self.limit} "
                                f"bytes ({why}); raise the client's max_response_bytes to accept it")

    def feed(self, chunk: bytes) -> None:
        """Add one raw chunk; ``ResponseTooLarge`` past the limit, ``DeadlineExceeded`` past the deadline."""
        if self.deadline is not None and time.monotonic() > self.deadline:
            raise status.DeadlineExceeded(f"Deadline Exceeded: the answer from {self.url} did not arrive in time")
        if self._inflater is None:
            self._add(chunk)
            return
        self._fed = self._fed or bool(chunk)
        data = chunk
        while True:
            try:
                piece = self._inflater.decompress(data, _PIECE)
            except zlib.error as exc:
                raise status.Internal(f"the {self.encoding} answer from {self.url} is corrupt: {exc}") from exc
            self._add(piece)
            data = self._inflater.unconsumed_tail
            if self._inflater.eof and self._inflater.unused_data and self.encoding in ("gzip", "x-gzip"):
                data = self._inflater.unused_data   # the next gzip member (RFC 1952 allows several)
                self._inflater = zlib.decompressobj(_WBITS["gzip"])
                continue
            if not data and len(piece) < _PIECE:
                return

    def _add(self, piece: bytes) -> None:
        self.size += len(piece)
        if self.size > self.limit:
            raise self._too_large(f"more than {self.limit} bytes" +
                                  (f" once {self.encoding}-decoded" if self.encoding else ""))
        if piece:
            self.parts.append(piece)

    def content(self) -> bytes:
        """The whole decoded body; ``status.Internal`` if a compressed body ended before its end."""
        if self._inflater is not None and self._fed and not self._inflater.eof:
            raise status.Internal(f"the {self.encoding} answer from {self.url} is truncated")
        return b"".join(self.parts)

