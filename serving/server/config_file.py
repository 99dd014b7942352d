"""Reading ``--model_config_file`` with bounds: a regular file of at most ``MAX_CONFIG_FILE_BYTES``.

The file is read at start and, with ``--model_config_file_poll_wait_seconds``,
on every poll, so whatever sits at its path is read again and again. Rules:

- it is opened with ``O_NONBLOCK`` and checked with ``fstat`` before one byte is
  read, so a FIFO never blocks the poller;
- it must be a regular file once symlinks are followed (a ConfigMap's symlink to
  a file is fine): a FIFO, a socket, a character or block device (a symlink to
  ``/dev/zero``) or a directory is refused;
- it may hold at most ``MAX_CONFIG_FILE_BYTES`` (16 MiB; a config of ten thousand
  models takes about 1.5 MiB), checked from ``st_size`` and again while reading,
  in case the file grows.

A refused file raises ``ConfigFileRefused`` (an ``OSError``) naming the path and
the rule; the server keeps its current config and reads the file again at the
next poll, so a valid file written afterwards is applied then.
"""
from __future__ import annotations

import os
import stat

__all__ = ["MAX_CONFIG_FILE_BYTES", "ConfigFileRefused", "read_config_text"]

MAX_CONFIG_FILE_BYTES = 16 * 1024 * 1024


class ConfigFileRefused(OSError):
    """The config file breaks a rule of ``read_config_text``; the message names it."""


def read_config_text(path: str, max_bytes: int = MAX_CONFIG_FILE_BYTES) -> str:
    """The UTF-8 text of ``path``; ``ConfigFileRefused`` if it is not a regular file of at most ``max_bytes``.

    Other ``OSError`` (missing file, no permission) and ``UnicodeDecodeError`` pass through.
    """
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise ConfigFileRefused(
                f"{path} is not a regular file ({_kind(info.st_mode)}): a config file must be a regular file "
                "(a FIFO, a device or a socket is never read)")
        if info.st_size > max_bytes:
            raise ConfigFileRefused(f"{path} holds {info.st_size} bytes, more than the {max_bytes} a config file "
                                    "may hold")
        chunks, size = [], 0
        while True:
            chunk = os.read(fd, min(1 << 20, max_bytes + 1 - size))
            if not chunk:
                break
            chunks.append(chunk)
            size += len(chunk)
            if size > max_bytes:
                raise ConfigFileRefused(f"{path} grew past the {max_bytes} bytes a config file may hold")
    finally:
        os.close(fd)
    return b"".join(chunks).decode("utf-8")


def _kind(mode: int) -> str:
    for test, name in ((stat.S_ISFIFO, "a FIFO"), (stat.S_ISCHR, "a character device"),
                       (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket"), (stat.S_ISDIR, "a directory")):
        if test(mode):
            return name
    return "not a regular file"
