"""Load commands check before they run: one metadata call, one line and exit 2 for a wrong address,
protocol or model; a sweep's level time must hold its stable windows; the stack's metrics page by default."""
from __future__ import annotations

from pathlib import Path

import pytest

from loadtest import preflight
from serving.config.served_config import STATE_FILE, StackState, write_state
from tests.support.cli import loadtest_refused
from tests.support.pki import make_pki
from tests.support.ports import free_port

_RUN = ["run", "steady", "--run-time", "60s", "-u", "1"]



def _port(address: str) -> str:
    return address.rsplit(":", 1)[1]


def test_a_sweep_level_time_that_cannot_hold_its_windows_is_refused_naming_the_numbers(capsys):
    err = loadtest_refused(capsys, ["sweep", "--grpc", "127.0.0.1:1", "--max-level-time", "5", "--warmup", "1"])
    assert ("--max-level-time 5 s cannot hold 3 stable windows of 2 s after a warmup of 1 s: needs at least 7 s"
            in err)


def test_nothing_listening_is_refused_before_the_run(capsys):
    err = loadtest_refused(capsys, [*_RUN, "--grpc", f"127.0.0.1:{free_port()}"])
    assert "no server answers there (UNAVAILABLE" in err


@pytest.mark.slow
def test_grpc_at_the_rest_port_is_refused_before_the_run(digits_server, capsys):
    rest_port = _port(digits_server.rest_url)
    err = loadtest_refused(capsys, [*_RUN, "--grpc", f"127.0.0.1:{rest_port}"])
    assert (f"--grpc 127.0.0.1:{rest_port}: this port answers HTTP/1.1 (a REST port), not gRPC; "
            f"load it with --rest http://127.0.0.1:{rest_port}") in err


@pytest.mark.slow
def test_rest_at_the_grpc_port_is_refused_before_the_sweep(digits_server, capsys):
    grpc_port = _port(digits_server.grpc_target)
    err = loadtest_refused(capsys, ["sweep", "--rest", f"http://127.0.0.1:{grpc_port}", "--concurrency", "1"])
    assert f"this port answers gRPC, not REST; load it with --grpc 127.0.0.1:{grpc_port}" in err


@pytest.mark.slow
@pytest.mark.parametrize("flags, rule", [
    (["--model", "ghost"], "model 'ghost' is not served there: Servable not found for request: Latest(ghost)"),
    (["--version", "7"], "model 'digits' version 7 is not served there"),
    (["--label", "canary"], "model 'digits' label 'canary' is not served there"),
    (["--signature", "nope"], "model 'digits' has no signature 'nope'; its signatures: "),
])
def test_a_model_version_label_or_signature_not_served_is_refused(digits_server, capsys, flags, rule):
    assert rule in loadtest_refused(capsys, [*_RUN, "--grpc", digits_server.grpc_target, *flags])
    assert rule in loadtest_refused(capsys, ["sweep", "--rest", digits_server.rest_url, "--concurrency", "1", *flags])


def _state(work: Path, grpc: str, rest: str) -> Path:
    write_state(StackState("embedded", work / "models.config", grpc, rest, work / "models"), work / STATE_FILE)
    return work


def test_the_stacks_metrics_page_is_the_default_for_its_own_server(tmp_path):
    work = _state(tmp_path, "127.0.0.1:8500", "http://127.0.0.1:8501")
    page = "http://127.0.0.1:8501/monitoring/prometheus/metrics"
    assert preflight.stack_metrics_url("127.0.0.1:8500", None, work) == page
    assert preflight.stack_metrics_url(None, "http://127.0.0.1:8501", work) == page
    assert preflight.stack_metrics_url("127.0.0.1:9500", None, work) is None  # another server: none
    assert preflight.stack_metrics_url("127.0.0.1:8500", None, tmp_path / "no-stack") is None


@pytest.mark.slow
def test_tls_arguments_at_a_plaintext_grpc_port_are_one_clear_error(digits_server, capsys, tmp_path):
    """The stack's CA and key given to a plaintext server: the handshake's own sentence, not a traceback (the
    probe for a REST port got the gRPC port's HTTP/2 bytes and raised http.client.BadStatusLine)."""
    ca = make_pki(tmp_path).ca
    key = tmp_path / "client.api-key"
    key.write_text("k" * 64 + "\n")
    err = loadtest_refused(capsys, [*_RUN, "--grpc", digits_server.grpc_target, "--root-certificates", str(ca),
                            "--api-key-file", str(key)])
    assert "the server does not speak TLS on this port" in err and "k" * 64 not in err
