"""The polled --model_config_file is read with bounds: a regular file of at most 16 MiB, never blocking.

Fast: ``read_config_text`` on a real FIFO, a symlink to /dev/zero and an oversized
file. Slow: a real server polling its config file while an attacker swaps it for
those, then a valid file that is applied on the next poll, with the server's RSS bounded.
"""
from __future__ import annotations

import os
import threading
import time
from pathlib import Path

import pytest

from serving.config.files import model_config_text
from serving.server.config_file import MAX_CONFIG_FILE_BYTES, ConfigFileRefused, read_config_text
from serving.launcher import ServerProcess, model_available
from tests.support.models import export_tiny


def _read_within(path: Path, seconds: float = 5.0) -> BaseException:
    """``read_config_text(path)`` on a thread: the error it raised, failing the test if it blocks."""
    outcome: list[BaseException] = []

    def read() -> None:
        try:
            read_config_text(str(path))
        except BaseException as exc:   # noqa: BLE001 - handed to the test
            outcome.append(exc)

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    reader.join(seconds)
    assert not reader.is_alive(), f"reading {path} blocked"
    assert outcome, f"{path} was read"
    return outcome[0]


def test_a_fifo_is_refused_without_blocking(tmp_path):
    os.mkfifo(tmp_path / "models.config")
    error = _read_within(tmp_path / "models.config")
    assert isinstance(error, ConfigFileRefused) and "a FIFO" in str(error) and "regular file" in str(error)


def test_a_symlink_to_dev_zero_is_refused_as_a_device(tmp_path):
    os.symlink("/dev/zero", tmp_path / "models.config")
    error = _read_within(tmp_path / "models.config")
    assert isinstance(error, ConfigFileRefused) and "character device" in str(error)


def test_a_file_over_the_limit_is_refused_naming_it(tmp_path):
    big = tmp_path / "models.config"
    with open(big, "wb") as handle:
        handle.truncate(MAX_CONFIG_FILE_BYTES + 1)
    error = _read_within(big)
    assert isinstance(error, ConfigFileRefused) and str(MAX_CONFIG_FILE_BYTES) in str(error)


def test_a_symlink_to_a_regular_file_is_read(tmp_path):
    (tmp_path / "real.config").write_text("model_config_list {}\n")
    os.symlink(tmp_path / "real.config", tmp_path / "models.config")
    assert read_config_text(str(tmp_path / "models.config")) == "model_config_list {}\n"


def _rss_mib(pid: int, field: str = "VmRSS") -> float:
    with open(f"/proc/{pid}/status") as status_file:
        for line in status_file:
            if line.startswith(field + ":"):
                return int(line.split()[1]) / 1024
    raise AssertionError(field)


def _wait_for_log(server: ServerProcess, text: str, count: int = 1, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while server.log_tail(2000).count(text) < count:
        assert time.monotonic() < deadline, f"no {text!r} in the log:\n{server.log_tail(30)}"
        assert server.running(), server.log_tail(30)
        time.sleep(0.2)


@pytest.mark.slow   # starts a server and waits for its polls
def test_a_polled_config_swapped_for_dev_zero_or_a_fifo_is_refused_and_a_valid_one_is_applied_next(tmp_path):
    export_tiny(tmp_path / "models" / "first" / "1")
    export_tiny(tmp_path / "models" / "second" / "1")
    config = tmp_path / "models.config"
    config.write_text(model_config_text({"first": tmp_path / "models" / "first"}))
    with ServerProcess([f"--model_config_file={config}", "--model_config_file_poll_wait_seconds=1"],
                       wait_for=["first"], log_path=tmp_path / "server.log") as server:
        before = _rss_mib(server.pid)
        config.unlink()
        os.symlink("/dev/zero", config)
        _wait_for_log(server, "is not a regular file (a character device)", count=2)
        config.unlink()
        os.mkfifo(config)
        _wait_for_log(server, "is not a regular file (a FIFO)", count=2)
        peak = _rss_mib(server.pid, "VmHWM")
        config.unlink()
        config.write_text(model_config_text({"first": tmp_path / "models" / "first",
                                             "second": tmp_path / "models" / "second"}))
        deadline = time.monotonic() + 60
        while not model_available(server.rest_url, "second"):
            assert time.monotonic() < deadline, server.log_tail(30)
            time.sleep(0.2)
        assert model_available(server.rest_url, "first")
    print(f"\nRSS before {before:.0f} MiB, peak while refusing {peak:.0f} MiB")
    assert peak - before < 64
