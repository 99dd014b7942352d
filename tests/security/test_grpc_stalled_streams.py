"""Stalled gRPC streams and idle connections cannot starve the server.

A stream that sends HEADERS and never its message holds no worker thread
and no admission slot, and is ended by the server after
``--grpc_read_timeout_seconds`` (2 s here; 30 s by default); one
connection holds at most ``--grpc_max_concurrent_streams`` of them; the
port holds at most ``--grpc_max_connections`` connections, and idle ones are
closed after the read timeout. Meanwhile a good request every 50 ms is
answered within 1 s, and the server's descriptors and RSS come back.
Attack helpers: ``tests.support.security.grpc_stall`` (raw HTTP/2 frames).
"""
from __future__ import annotations

import os
import threading
import time
from pathlib import Path
from typing import Iterator

import grpc
import pytest

from serving import wire
from serving.launcher import ServerProcess
from tests.support.security.attacks import GoodProbe, ServerMemory, Stub, good_request, python_internals, start_server
from tests.support.security.grpc_stall import StalledConnection, idle_connections

pytestmark = pytest.mark.slow   # a server start and a few read timeouts

READ_TIMEOUT_S = 2
MAX_CONNECTIONS = 64
MAX_STREAMS = 128
FLAGS = (f"--grpc_read_timeout_seconds={READ_TIMEOUT_S}", f"--grpc_max_connections={MAX_CONNECTIONS}",
         f"--grpc_max_concurrent_streams={MAX_STREAMS}")
THREADS = 8          # the server's --grpc_max_threads on this 2-core host (4 x CPUs)
FD_SLACK = 8         # descriptors the server may open meanwhile (a log rotation, a model file)
RSS_LIMIT_KB = 100 * 1024


@pytest.fixture(scope="module")
def guarded(napping: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    process = start_server(napping, tmp_path_factory.mktemp("grpc-stall"), FLAGS)
    yield process
    process.stop()


def _port(server: ServerProcess) -> int:
    return int(server.grpc_target.rsplit(":", 1)[1])


def _fds(server: ServerProcess) -> int:
    return len(os.listdir(f"/proc/{server.pid}/fd"))


def _wait_for(condition, timeout: float) -> bool:
    """Until ``condition()`` holds (checked every 50 ms); False after ``timeout`` s."""
    end = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > end:
            return False
        time.sleep(0.05)
    return True


def _stalled_call(channel: grpc.Channel, sent: threading.Event, release: threading.Event) -> grpc.Future:
    """A real gRPC client's Predict whose message never comes: headers go out, the iterator blocks."""
    def messages():
        sent.set()
        release.wait(60)
        return
        yield b""   # a generator that yields nothing

    return channel.stream_unary(wire.PREDICT).future(messages())


def test_stalled_streams_hold_no_thread_and_end_after_the_read_timeout(guarded):
    memory = ServerMemory(guarded.pid)
    with grpc.insecure_channel(guarded.grpc_target) as channel:
        stub = Stub(channel)
        with GoodProbe(stub) as probe:
            fds_before, rss_before = _fds(guarded), memory.field("VmRSS")
            with StalledConnection("127.0.0.1", _port(guarded)) as stalled:
                stalled.open_streams(2 * THREADS)
                sent, release = threading.Event(), threading.Event()
                stalled_call = _stalled_call(channel, sent, release)
                assert sent.wait(10)
                answered_while_held = len(probe.outcomes)
                started = time.monotonic()
                assert stalled.wait_ended(2 * THREADS, READ_TIMEOUT_S + 5), stalled.ended
                error = stalled_call.exception(READ_TIMEOUT_S + 5)
                ended_after = time.monotonic() - started
                release.set()
                assert len(probe.outcomes) > answered_while_held, "no good request was answered while held"
            assert _wait_for(lambda: _fds(guarded) <= fds_before + FD_SLACK, 10), (fds_before, _fds(guarded))
    assert guarded.running()
    assert set(stalled.ended.values()) == {"status"}, stalled.ended   # answered with trailers, not reset
    assert ended_after < READ_TIMEOUT_S + 3
    assert error is not None and error.code() == grpc.StatusCode.DEADLINE_EXCEEDED, error
    assert "--grpc_read_timeout_seconds" in error.details() and not python_internals(error.details())
    assert not probe.failures, probe.failures[:3]
    assert memory.field("VmRSS") - rss_before < RSS_LIMIT_KB


def test_300_stalled_streams_take_no_admission_slot(guarded):
    """The issue's 300 streams over 3 connections (100 each, under the per-connection limit)."""
    with grpc.insecure_channel(guarded.grpc_target) as channel:
        with GoodProbe(Stub(channel)) as probe:
            connections = [StalledConnection("127.0.0.1", _port(guarded)) for _ in range(3)]
            try:
                for connection in connections:
                    connection.open_streams(100)
                seen = len(probe.outcomes)
                assert _wait_for(lambda: len(probe.outcomes) >= seen + 5, 10), "good requests stopped"
                assert all(c.wait_ended(100, READ_TIMEOUT_S + 5) for c in connections)
            finally:
                for connection in connections:
                    connection.close()
    assert guarded.running()
    assert not probe.failures, probe.failures[:3]


def test_one_connection_holds_at_most_max_concurrent_streams(guarded):
    with StalledConnection("127.0.0.1", _port(guarded)) as stalled:
        stalled.open_streams(MAX_STREAMS + 20)
        assert stalled.wait_ended(20, 5), stalled.ended   # the streams past the limit are reset at once
        refused = [how for how in stalled.ended.values() if how.startswith("rst")]
    assert len(refused) == 20, stalled.ended


def test_connections_are_capped_and_idle_ones_closed(guarded):
    memory = ServerMemory(guarded.pid)
    with grpc.insecure_channel(guarded.grpc_target) as channel:
        with GoodProbe(Stub(channel)) as probe:   # its connection is open before the flood
            fds_before, rss_before = _fds(guarded), memory.field("VmRSS")
            sockets = idle_connections("127.0.0.1", _port(guarded), MAX_CONNECTIONS + 50)
            try:
                peak = _fds(guarded)
                assert peak <= fds_before + MAX_CONNECTIONS + FD_SLACK, (fds_before, peak)
                # idle connections are closed after the read timeout: the descriptors come back
                assert _wait_for(lambda: _fds(guarded) <= fds_before + FD_SLACK, READ_TIMEOUT_S + 10), _fds(guarded)
            finally:
                for sock in sockets:
                    sock.close()
        with grpc.insecure_channel(guarded.grpc_target) as fresh:   # a new channel connects again
            Stub(fresh).Predict(good_request(), timeout=5)
    assert guarded.running()
    assert not probe.failures, probe.failures[:3]
    assert memory.field("VmRSS") - rss_before < RSS_LIMIT_KB

