"""``python -m serving.server``: the embedded ``tensorflow_model_server``.

Parses TF Serving's flags (``serving.server.flags``), starts ``ModelServer``
and serves until SIGTERM or SIGINT, which drain: the listeners close at once,
running requests finish (up to ``DRAIN_GRACE_SECONDS``), then the process exits 0.

The main thread waits for the signal on a ``signal.set_wakeup_fd`` pipe: the
kernel may deliver a process signal to any thread, and Python runs its handler
only once the main thread runs again, so a main thread sleeping in a timed
wait noticed SIGTERM up to a second late (the listeners stayed open that long).
Before the server is built, ``serving.server.memory`` sets TensorFlow's
environment defaults (no Keras import, oneDNN tensors on malloc), which
TensorFlow reads once, when it loads, limits glibc's malloc arenas and raises
the soft RLIMIT_NOFILE to the hard limit (``serving.server.open_file_limit``).
Exit codes follow ``main.cc``: 0 after ``--version``, ``--help`` or a drain,
255 (``-1``) for a bad flag value or a server that fails to start.
"""
from __future__ import annotations

import logging
import os
import select
import signal
import sys
from importlib import metadata
from typing import Optional, Sequence

from serving import status
from serving.server.open_file_limit import raise_open_file_limit
from serving.server.flags import CommandLine, FlagError, ServerFlags, log_no_effect, parse_flags, usage, validate_flags
from serving.server.logs import NativeStderrAsJson, configure_logging
from serving.server.memory import configure_tensorflow_environment, limit_malloc_arenas
from serving.server.server import ModelServer

__all__ = ["main", "version_text", "DRAIN_GRACE_SECONDS"]

logger = logging.getLogger("serving.server")

DRAIN_GRACE_SECONDS = 30.0
_FAILED = 255


def version_text() -> str:
    """What ``--version`` prints: the TF Serving API and TensorFlow versions this server mirrors."""
    def version_of(*packages: str) -> str:
        for package in packages:
            try:
                return metadata.version(package)
            except metadata.PackageNotFoundError:
                continue
        return "unknown"

    # TensorFlow is the CUDA build (`tensorflow`) or the CPU-only one (`tensorflow-cpu`): same module.
    return (f"TensorFlow ModelServer: {version_of('tensorflow-serving-api')}-embedded (tfs-stack)\n"
            f"TensorFlow Library: {version_of('tensorflow', 'tensorflow-cpu')}\n")


def main(argv: Optional[Sequence[str]] = None) -> int:
    """Run the server; returns the process exit code. Logs go to stderr in ``--log_format`` (text before the
    flags are parsed)."""
    configure_logging("text", sys.stderr)
    arguments = sys.argv[1:] if argv is None else list(argv)
    if "--help" in arguments or "-h" in arguments:
        sys.stdout.write(usage())
        return 0
    try:
        command_line = parse_flags(arguments)
    except FlagError as exc:
        logger.error("%s", exc)
        sys.stdout.write(usage())
        return _FAILED
    if command_line.flags.version:
        sys.stdout.write(version_text())
        return 0
    if command_line.flags.log_format == "json":
        with NativeStderrAsJson() as stream:  # TensorFlow's and gRPC's own stderr lines become JSON too
            configure_logging("json", stream)
            return _run(command_line)
    configure_logging(command_line.flags.log_format, sys.stderr)
    return _run(command_line)


def _run(command_line: CommandLine) -> int:
    for argument in command_line.unknown:
        logger.error("unknown argument: %s", argument)
    log_no_effect(command_line)
    return _serve(command_line.flags)


def _serve(flags: ServerFlags) -> int:
    # Before anything imports TensorFlow, which reads these once, or starts a thread pool (serving.server.memory).
    applied = configure_tensorflow_environment(os.environ)
    if applied:
        logger.info("TensorFlow environment: %s", " ".join(f"{k}={v}" for k, v in applied.items()))
    before, after = raise_open_file_limit()   # the ports' connection caps leave half of it in reserve
    if after != before:
        logger.info("RLIMIT_NOFILE raised from %d to %d", before, after)
    arenas = limit_malloc_arenas(os.environ)
    if arenas is not None:
        logger.info("At most %d malloc arenas (MALLOC_ARENA_MAX overrides)", arenas)
    server = ModelServer(flags)
    _end_at_signal_without_marker(server)
    try:
        validate_flags(flags)
        server.start()
    except Exception as exc:  # noqa: BLE001 - main.cc: "Failed to start server. Error: <status>", exit -1
        detail = exc if isinstance(exc, status.ServingError) else f"{type(exc).__name__}: {exc}"
        logger.error("Failed to start server. Error: %s", detail)
        server.stop(grace=0)
        return _FAILED
    # Waited for once serving: a signal during startup ends the process at once, as it does
    # tensorflow_model_server's (there is nothing to drain yet), once the loading version's crash marker is gone.
    received = _wait_for_stop_signal()
    logger.info("Received %s; draining", received.name)
    server.stop(grace=DRAIN_GRACE_SECONDS)
    logger.info("Server stopped")
    return 0


_STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT)


def _end_at_signal_without_marker(server: ModelServer) -> None:
    """A stop signal during startup still ends the process at once, by that signal, but first removes the
    crash marker of the version loading then: being stopped is not crashing (``core.quarantine``)."""
    def end(signum: int, _frame: object) -> None:
        if server.quarantine is not None:
            server.quarantine.abandon()
        signal.signal(signum, signal.SIG_DFL)
        os.kill(os.getpid(), signum)

    for signum in _STOP_SIGNALS:
        signal.signal(signum, end)


def _wait_for_stop_signal() -> signal.Signals:
    """Block the main thread until SIGTERM or SIGINT arrives, whichever thread the kernel gives it to.

    Python's C-level handler writes each signal's number to the wakeup fd at
    once, on any thread; the main thread reads it there instead of waiting for
    its own Python-level handler to run.
    """
    read_fd, write_fd = os.pipe()
    os.set_blocking(write_fd, False)
    previous_fd = signal.set_wakeup_fd(write_fd)
    for signum in _STOP_SIGNALS:  # the handler only has to exist; a later signal, while draining, is ignored
        signal.signal(signum, _ignore_signal)
    try:
        while True:
            readable, _, _ = select.select([read_fd], [], [], 1.0)
            for number in os.read(read_fd, 64) if readable else b"":
                if number in _STOP_SIGNALS:
                    return signal.Signals(number)
    finally:
        signal.set_wakeup_fd(previous_fd)
        os.close(read_fd)
        os.close(write_fd)


def _ignore_signal(_signum: int, _frame: object) -> None:
    """Installed for SIGTERM/SIGINT so that Python's C-level handler writes to the wakeup fd."""
