"""The embedded server's log output: TF Serving's text lines, or one JSON object per line (``--log_format``).

``text`` (the default) keeps the shape of TF Serving's log lines
(``2026-01-01 12:00:00.123 I serving.server] message``). ``json`` is for a log
stack (Kubernetes' container logs into Loki, Elasticsearch, ...): each record
is one line holding one JSON object with ``time`` (RFC 3339, UTC, ms),
``level``, ``logger`` and ``message``; ``request_id`` when the record carries
one (``serving.status.internal_error`` logs the id it hands the client), and
``exception`` with the traceback when there is one. Python warnings are routed
through logging too. TensorFlow's and gRPC's C++ code write to file
descriptor 2 themselves: ``NativeStderrAsJson`` points it at a pipe and logs
each line it reads as a record of logger ``native`` (level and ``source`` from
the ``E1201 01:17:35.073265 4414 file.cc:186]`` prefix when there is one), so
every line the process writes is JSON.
"""
from __future__ import annotations

import json
import logging
import os
import re
import sys
import threading
import time
from typing import IO, Optional

__all__ = ["LOG_FORMATS", "JsonFormatter", "NativeStderrAsJson", "text_formatter", "configure_logging"]

LOG_FORMATS = ("text", "json")
_MARK = "_serving_server_log_handler"


class JsonFormatter(logging.Formatter):
    """One JSON object per record, on one line (newlines in the message are escaped by JSON)."""

    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, object] = {
            "time": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created))
                    + f".{int(record.msecs):03d}Z",
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
        }
        for key in ("request_id", "source"):
            value = getattr(record, key, None)
            if value is not None:
                entry[key] = value
        if record.exc_info:
            entry["exception"] = self.formatException(record.exc_info)
        elif record.exc_text:
            entry["exception"] = record.exc_text
        return json.dumps(entry, ensure_ascii=False)


def text_formatter() -> logging.Formatter:
    """TF Serving's line shape: date, time with ms, one-letter level, logger, message."""
    return logging.Formatter("%(asctime)s.%(msecs)03d %(levelname).1s %(name)s] %(message)s",
                             datefmt="%Y-%m-%d %H:%M:%S")


def configure_logging(log_format: str = "text", stream: Optional[IO[str]] = None) -> None:
    """Send the root logger's INFO and above to ``stream`` (stderr by default) in ``log_format``.

    Replaces the handler an earlier call installed (and only that one), so it
    can be called again once the flags are parsed. An unknown format falls back
    to text (the flag check then refuses it with a message).
    """
    handler = logging.StreamHandler(stream)
    handler.setFormatter(JsonFormatter() if log_format == "json" else text_formatter())
    setattr(handler, _MARK, True)
    root = logging.getLogger()
    for old in [h for h in root.handlers if getattr(h, _MARK, False)]:
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(logging.INFO)
    logging.captureWarnings(log_format == "json")


_NATIVE_LINE = re.compile(r"([IWEF])\d{4} \d\d:\d\d:\d\d\.\d+\s+\d+ ([^\s\]]+)\] ?(.*)")
_NATIVE_LEVELS = {"I": logging.INFO, "W": logging.WARNING, "E": logging.ERROR, "F": logging.CRITICAL}


class NativeStderrAsJson:
    """File descriptor 2 through a pipe whose lines are logged as records of logger ``native``.

    A context manager: on entry it returns a stream on the original stderr for
    the log handler; on exit fd 2 is restored, the pipe closes and the reader
    thread logs what was left. Lines in absl/glog's shape keep their level and
    source; any other line (a Python traceback printed by the interpreter,
    say) is logged at WARNING, one record per line.
    """

    def __init__(self) -> None:
        self._logger = logging.getLogger("native")
        self._saved: Optional[int] = None
        self._thread: Optional[threading.Thread] = None

    def __enter__(self) -> IO[str]:
        sys.stderr.flush()
        self._saved = os.dup(2)
        read_fd, write_fd = os.pipe()
        os.dup2(write_fd, 2)
        os.close(write_fd)
        self._thread = threading.Thread(target=self._pump, args=(read_fd,), name="native-stderr", daemon=True)
        self._thread.start()
        return os.fdopen(os.dup(self._saved), "w", buffering=1, encoding="utf-8", errors="replace")

    def _pump(self, read_fd: int) -> None:
        with os.fdopen(read_fd, "r", encoding="utf-8", errors="replace") as pipe:
            for raw in pipe:
                line = raw.rstrip("\n")
                if not line.strip():
                    continue
                match = _NATIVE_LINE.match(line)
                if match:
                    self._logger.log(_NATIVE_LEVELS[match.group(1)], "%s", match.group(3),
                                     extra={"source": match.group(2)})
                else:
                    self._logger.warning("%s", line)

    def __exit__(self, *exc: object) -> None:
        sys.stderr.flush()
        assert self._saved is not None and self._thread is not None
        os.dup2(self._saved, 2)  # closes the pipe's write end: the reader sees the end of the file
        os.close(self._saved)
        self._thread.join(timeout=5.0)
