"""Keys that really rotate: ``python -m gateway.certs rotate|revoke|--force issue`` and a gateway reload
(Debian's nginx with the repository's templates, each test with a secrets folder of its own).

After the change and a reload (SIGHUP, sent here by ``gateway/watch-access.sh`` as the compose gateway's
entrypoint runs it, or by the test), the old key is refused (401) and the new one served (200); an old
admin key can no longer push HandleReloadConfigRequest; a replaced or revoked certificate is refused on
the mTLS port.
"""
from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import threading
import time
from typing import Iterator

import pytest

from gateway.certs import Credentials, edit_key_map, init_secrets, issue_client, main as certs_main, rotate_client
from serving.checkout import REPO_ROOT
from serving.client import NO_RETRY, GrpcClient
from serving.client.errors import PermissionDenied, Unauthenticated
from serving.rollout.traffic import nginx_reloaded, nginx_workers
from tests.support.gateway import MODEL, Gateway, compose_values, running_gateway, served_config, upstream_values

STATUS = f"/v1/models/{MODEL}"
WATCHER = REPO_ROOT / "gateway" / "watch-access.sh"


@pytest.fixture
def secrets(tmp_path) -> Credentials:
    return init_secrets(tmp_path / "secrets")


@pytest.fixture
def keys_gateway(nginx, nginx_version, secrets, compose_gateway_env, tf_serving, tmp_path) -> Iterator[Gateway]:
    values = compose_values(compose_gateway_env, **upstream_values(tf_serving))
    with running_gateway(nginx, nginx_version, values, tmp_path / "gateway", secrets, tf_serving) as gateway:
        yield gateway


@contextlib.contextmanager
def reloaded(gateway: Gateway, timeout: float = 30.0) -> Iterator[None]:
    """Waits, after the block, until nginx runs new workers and no old one accepts (a reload happened)."""
    before = nginx_workers(gateway.proc.pid)
    yield
    deadline = time.monotonic() + timeout
    while not nginx_reloaded(gateway.proc.pid, before):
        assert time.monotonic() < deadline, "nginx did not reload"
        threading.Event().wait(0.02)


def hup(gateway: Gateway) -> None:
    os.kill(gateway.proc.pid, signal.SIGHUP)


def status_code(gateway: Gateway, key: str, url: str | None = None) -> int:
    with gateway.http() as http:
        return http.get((url or gateway.rest_url) + STATUS, headers={"x-api-key": key}).status_code


def test_rotate_then_the_watchers_reload_refuses_the_old_key_and_serves_the_new(keys_gateway, secrets):
    gateway = keys_gateway
    old = secrets.api_key("client")
    assert status_code(gateway, old) == 200
    watcher = subprocess.Popen(["sh", str(WATCHER), str(secrets.access_dir), str(gateway.proc.pid), "0.1"],
                               stderr=subprocess.PIPE, text=True)
    try:
        with reloaded(gateway):
            assert certs_main(["--out", str(secrets.directory), "rotate", "client"]) == 0
            assert "nginx" in watcher.stderr.readline()  # the watcher saw access/ change and sent SIGHUP
    finally:
        watcher.terminate()
        watcher.wait(10)
    new = secrets.api_key("client")
    assert new != old
    assert status_code(gateway, old) == 401
    assert status_code(gateway, new) == 200


def test_a_rotated_admin_key_can_no_longer_reload_the_config(keys_gateway, secrets):
    gateway = keys_gateway
    old = secrets.api_key("admin")
    config = served_config(gateway)

    def reload_config(key: str) -> None:
        with GrpcClient(gateway.grpc_target, credentials=gateway.channel_credentials(),
                        metadata=[("x-api-key", key)], retry=NO_RETRY, timeout=30.0) as admin:
            admin.reload_config(config)

    reload_config(old)
    with reloaded(gateway):
        rotate_client(secrets.directory, "admin")  # one command
        hup(gateway)
    with pytest.raises(Unauthenticated):
        reload_config(old)
    reload_config(secrets.api_key("admin"))
    with pytest.raises(PermissionDenied):  # the role is kept: a client key still may not
        reload_config(secrets.api_key("client"))


def test_force_issue_of_an_existing_name_leaves_the_old_key_invalid(keys_gateway, secrets):
    gateway = keys_gateway
    with reloaded(gateway):
        issue_client(secrets.directory, "alice")
        hup(gateway)
    old = secrets.api_key("alice")
    assert status_code(gateway, old) == 200
    with reloaded(gateway):
        assert certs_main(["--out", str(secrets.directory), "--force", "issue", "alice"]) == 0
        hup(gateway)
    assert status_code(gateway, old) == 401
    assert status_code(gateway, secrets.api_key("alice")) == 200
    assert sum(line.endswith(":alice;\n") for line in secrets.key_map.read_text().splitlines(True)) == 1


def test_a_rotated_certificate_is_refused_on_the_mtls_port_and_the_new_one_served(keys_gateway, secrets, tmp_path):
    gateway = keys_gateway
    kept = tmp_path / "old-client"
    kept.mkdir()
    for name in ("ca.crt", "client.crt", "client.key"):
        (kept / name).write_bytes(secrets.path(name).read_bytes())
    old = Credentials(kept)
    with gateway.http(cert="client", creds=old) as http:
        assert http.get(gateway.mtls_url + STATUS).status_code == 200
    with reloaded(gateway):
        rotate_client(secrets.directory, "client")
        hup(gateway)
    with gateway.http(cert="client", creds=old) as http:
        assert http.get(gateway.mtls_url + STATUS).status_code == 401
    with gateway.http(cert="client") as http:
        assert http.get(gateway.mtls_url + STATUS).status_code == 200


def test_revoke_removes_the_key_the_certificate_and_the_files(keys_gateway, secrets, tmp_path):
    gateway = keys_gateway
    with reloaded(gateway):
        issue_client(secrets.directory, "bob")
        hup(gateway)
    key = secrets.api_key("bob")
    cert = Credentials(tmp_path / "bob")
    cert.directory.mkdir()
    for name in ("bob.crt", "bob.key"):
        (cert.directory / name).write_bytes(secrets.path(name).read_bytes())
    assert status_code(gateway, key) == 200
    with reloaded(gateway):
        assert certs_main(["--out", str(secrets.directory), "revoke", "bob"]) == 0
        hup(gateway)
    assert status_code(gateway, key) == 401
    with gateway.http(cert="bob", creds=cert) as http:
        assert http.get(gateway.mtls_url + STATUS).status_code == 401
    assert not any(secrets.path(f"bob.{suffix}").exists() for suffix in ("api-key", "crt", "key"))
    assert status_code(gateway, secrets.api_key("client")) == 200  # nobody else is touched


def test_rotate_and_revoke_refuse_unknown_and_reserved_names(secrets, capsys):
    assert certs_main(["--out", str(secrets.directory), "rotate", "nobody"]) == 1
    assert "no client 'nobody'" in capsys.readouterr().err
    assert certs_main(["--out", str(secrets.directory), "revoke", "server"]) == 1
    assert certs_main(["--out", str(secrets.directory), "issue", "client"]) == 1
    assert "rotate client" in capsys.readouterr().err


def test_two_operators_changing_the_key_map_at_once_lose_no_line(secrets):
    """One operator's edit holds the map (read, not yet written) while a second issues a client: the second
    waits for the lock, and both changes land. Without the lock the second's line is written in between
    and the first's write, made from what it read, drops it."""
    first_read, release = threading.Event(), threading.Event()
    second_done = threading.Event()
    errors: list[BaseException] = []

    def slow_edit(lines: list[str]) -> list[str]:
        first_read.set()
        assert release.wait(30)
        return [line for line in lines if not line.endswith(":client;\n")] + ["0" * 64 + " client:client;\n"]

    def run(target, *args, done: threading.Event | None = None) -> None:
        try:
            target(*args)
        except BaseException as error:  # reported below
            errors.append(error)
        finally:
            if done:
                done.set()

    first = threading.Thread(target=run, args=(edit_key_map, secrets.directory, slow_edit))
    second = threading.Thread(target=run, args=(issue_client, secrets.directory, "carol"), kwargs={"done": second_done})
    first.start()
    assert first_read.wait(30)
    second.start()
    # The lock holds the second operator back while the first has read the map and not yet written it.
    assert not second_done.wait(1.0), "a second change of the key map went through while the first held it"
    release.set()
    first.join(30)
    second.join(30)
    assert not errors, errors
    lines = secrets.key_map.read_text().splitlines()
    assert f"{secrets.api_key('carol')} client:carol;" in lines
    assert "0" * 64 + " client:client;" in lines
    assert len(lines) == 4  # client (the first's), admin, loadtest, carol: none lost, none doubled


def test_two_rotations_at_once_keep_exactly_one_key_each(secrets):
    threads = [threading.Thread(target=rotate_client, args=(secrets.directory, name)) for name in ("client", "admin")]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    lines = secrets.key_map.read_text().splitlines()
    assert sorted(line.split()[1] for line in lines) == ["admin:admin;", "client:client;", "loadtest:loadtest;"]
    assert {f"{secrets.api_key(n)} {n}:{n};" for n in ("client", "admin")} <= set(lines)
    assert len(secrets.revoked_map.read_text().splitlines()) == 2


def test_make_certs_on_an_older_folder_adds_the_missing_loadtest_credential_and_moves_the_map(secrets):
    # An older `make certs` folder: api-keys.map at the top, no access/, no loadtest credential.
    old_map = secrets.key_map.read_text()
    loadtest_key = secrets.api_key("loadtest")
    secrets.key_map.unlink()
    secrets.revoked_map.unlink()
    secrets.access_dir.rmdir()
    secrets.path("api-keys.map").write_text("".join(entry for entry in old_map.splitlines(True) if "loadtest" not in entry))
    for suffix in ("api-key", "crt", "key"):
        secrets.path(f"loadtest.{suffix}").unlink()
    kept = {name: secrets.path(name).read_bytes() for name in ("ca.crt", "ca.key", "server.crt", "client.api-key")}
    assert certs_main(["--out", str(secrets.directory)]) == 0
    assert {name: secrets.path(name).read_bytes() for name in kept} == kept  # nothing existing touched
    assert not secrets.path("api-keys.map").exists()
    lines = secrets.key_map.read_text().splitlines()
    assert f"{secrets.api_key('client')} client:client;" in lines
    assert f"{secrets.api_key('loadtest')} loadtest:loadtest;" in lines and secrets.api_key("loadtest") != loadtest_key
    assert secrets.revoked_map.exists()


def test_make_certs_issues_a_loadtest_credential_that_is_never_admin(secrets):
    assert f"{secrets.api_key('loadtest')} loadtest:loadtest;" in secrets.key_map.read_text().splitlines()
    subject = subprocess.run(["openssl", "x509", "-noout", "-subject", "-nameopt", "RFC2253", "-in",
                              str(secrets.cert("loadtest"))], capture_output=True, text=True, check=True).stdout
    assert "OU=loadtest" in subject
    for name in ("loadtest.api-key", "loadtest.key"):
        assert secrets.path(name).stat().st_mode & 0o077 == 0


def test_the_loadtest_key_may_not_call_admin_routes(gateway):
    with gateway.http() as http:
        metrics = http.get(gateway.rest_url + "/monitoring/prometheus/metrics",
                           headers={"x-api-key": gateway.key("loadtest")})
        assert metrics.status_code == 403
        assert http.get(gateway.rest_url + STATUS, headers={"x-api-key": gateway.key("loadtest")}).status_code == 200


def test_the_grafana_password_file_is_written_from_the_environment_and_readable_by_grafana_only_through_the_folder(
        secrets, monkeypatch, capsys):
    monkeypatch.delenv("GRAFANA_ADMIN_PASSWORD", raising=False)
    assert certs_main(["--out", str(secrets.directory), "grafana-password"]) == 1
    assert "export GRAFANA_ADMIN_PASSWORD" in capsys.readouterr().err
    monkeypatch.setenv("GRAFANA_ADMIN_PASSWORD", "s3cret pass")
    assert certs_main(["--out", str(secrets.directory), "grafana-password"]) == 0
    path = secrets.path("grafana-admin-password")
    assert path.read_text() == "s3cret pass"  # no line ending: Grafana takes the file's bytes
    assert path.stat().st_mode & 0o777 == 0o644 and secrets.directory.stat().st_mode & 0o077 == 0
    monkeypatch.setenv("GRAFANA_ADMIN_PASSWORD", "two\nlines")
    assert certs_main(["--out", str(secrets.directory), "grafana-password"]) == 1
