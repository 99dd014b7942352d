"""``serving.stack.endpoint.stack_endpoint``: what the tools reach with no address or credential given.

A ``stack.json`` written here, as each backend of ``make up`` writes it, and the
secrets directory ``make certs`` fills (key files made here; no gateway runs).
"""
from __future__ import annotations

from pathlib import Path

import pytest

from serving.client import Connection
from serving.config.served_config import STATE_FILE, StackState, write_state
from serving.stack.endpoint import stack_endpoint


def _compose(tmp_path: Path, keys: dict[str, str]) -> Path:
    secrets = tmp_path / "secrets"
    secrets.mkdir()
    (secrets / "ca.crt").write_text("-----BEGIN CERTIFICATE-----\n")
    for name, key in keys.items():
        (secrets / f"{name}.api-key").write_text(key)
    work = tmp_path / "work"
    write_state(StackState("compose-cpu", work / "models.config", "127.0.0.1:8500", "https://127.0.0.1:8501",
                           tmp_path / "models", {"/models": tmp_path / "models"},
                           root_certificates=secrets / "ca.crt", admin_key_file=secrets / "admin.api-key"),
                work / STATE_FILE)
    return work


def test_nothing_recorded_is_none(tmp_path):
    assert stack_endpoint(role="loadtest", work_dir=tmp_path) is None


def test_the_embedded_stack_is_plaintext_without_a_key(tmp_path):
    write_state(StackState("embedded", tmp_path / "models.config", "127.0.0.1:8500", "http://127.0.0.1:8501",
                           tmp_path / "models"), tmp_path / STATE_FILE)
    endpoint = stack_endpoint(role="loadtest", work_dir=tmp_path)
    assert (endpoint.grpc, endpoint.rest, endpoint.connection, endpoint.role) == (
        "127.0.0.1:8500", "http://127.0.0.1:8501", Connection(), "")


def test_compose_gives_the_ca_and_the_loadtest_key_stripped_of_its_line_ending(tmp_path):
    work = _compose(tmp_path, {"loadtest": "a" * 64 + "\n", "client": "b" * 64 + "\n", "admin": "c" * 64 + "\n"})
    endpoint = stack_endpoint(role="loadtest", work_dir=work)
    assert endpoint.role == "loadtest" and endpoint.connection.api_key == "a" * 64
    assert endpoint.connection.root_certificates == tmp_path / "secrets" / "ca.crt"
    assert "a" * 64 not in repr(endpoint)
    assert stack_endpoint(work_dir=work).connection.api_key == "b" * 64  # the default role: client


def test_without_a_loadtest_credential_the_client_key_is_used(tmp_path):
    work = _compose(tmp_path, {"client": "b" * 64 + "\n"})
    endpoint = stack_endpoint(role="loadtest", work_dir=work)
    assert (endpoint.role, endpoint.connection.api_key) == ("client", "b" * 64)


def test_a_malformed_key_is_refused_without_showing_it(tmp_path):
    work = _compose(tmp_path, {"loadtest": "hunter2 with spaces\n"})
    with pytest.raises(ValueError) as raised:
        stack_endpoint(role="loadtest", work_dir=work)
    assert "hunter2" not in str(raised.value)
