"""``python -m loadtest`` through the real nginx gateway (compose's templates and values) with a LOW rate limit.

The gateway runs in front of the package's digits server with 20 requests a
second and a burst of 5 per client, so an unpaced load meets the limiter. Its
gRPC and REST ports speak TLS only. A ``stack.json`` in a work directory of
the test's own records the gateway as compose's ``make up`` does (its
addresses, CA and secrets directory), so ``run`` with no address and no
credential loads it the way a user's ``python -m loadtest run steady --model
digits`` loads the compose stack.
"""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from gateway.certs import Credentials, init_secrets
from serving.config.served_config import STATE_FILE, StackState, write_state
from tests.support.cli import loadtest_refused, run_loadtest
from tests.support.gateway import compose_values, running_gateway, upstream_values

pytestmark = pytest.mark.slow
LOW_RATE, LOW_BURST = "20r/s", "5"
_RUN = ["run", "steady", "--run-time", "60s", "-u", "1"]


@pytest.fixture(scope="module")
def secrets(tmp_path_factory) -> Credentials:
    """make certs' secrets: the CA, the gateway's certificate, and client, admin and loadtest credentials."""
    return init_secrets(tmp_path_factory.mktemp("loadtest-secrets"))


@pytest.fixture(scope="module")
def limited_gateway(digits_server, nginx, nginx_version, secrets, compose_gateway_env, tmp_path_factory):
    values = {**compose_values(compose_gateway_env, **upstream_values(digits_server)),
              "GATEWAY_RATE": LOW_RATE, "GATEWAY_BURST": LOW_BURST}
    with running_gateway(nginx, nginx_version, values, tmp_path_factory.mktemp("loadtest-gateway"),
                         secrets, digits_server) as gateway:
        yield gateway


@pytest.fixture(scope="module")
def work_dir(limited_gateway, model_repo, tmp_path_factory) -> Path:
    """A work directory whose stack.json records the gateway as compose's make up records its own."""
    work = tmp_path_factory.mktemp("loadtest-work")
    secrets = limited_gateway.secrets
    write_state(StackState("compose-cpu", work / "models.config", limited_gateway.grpc_target,
                           limited_gateway.rest_url, model_repo, {"/models": model_repo},
                           root_certificates=secrets.ca_cert, admin_key_file=secrets.path("admin.api-key")),
                work / STATE_FILE)
    return work



def test_grpc_at_a_tls_port_without_a_ca_names_tls(limited_gateway, capsys):
    target = limited_gateway.grpc_target
    err = loadtest_refused(capsys, [*_RUN, "--grpc", target])
    assert f"--grpc {target}: this port speaks TLS: pass --root-certificates (make up's stack does this for you)" in err
    assert "HTTP/1.1" not in err


def test_plain_http_at_a_tls_rest_port_names_tls(limited_gateway, capsys):
    url = limited_gateway.rest_url.replace("https://", "http://")
    err = loadtest_refused(capsys, [*_RUN, "--rest", url])
    assert "this port speaks TLS: pass --root-certificates" in err and "https:// URL" in err


def _identities(gateway, uri_part: str) -> set[str]:
    return {(e.get("role"), e.get("client")) for e in gateway.access_entries() if uri_part in e.get("uri", "")}


@pytest.mark.parametrize("protocol", ["grpc", "rest"])
def test_run_with_no_flags_loads_the_stack_through_the_gateway_with_the_loadtest_key_unlimited(
        limited_gateway, work_dir, model_repo, tmp_path, protocol):
    """The loadtest credential has limits of its own (GATEWAY_LOADTEST_*, high): the load measures the server."""
    where = ["--rest", limited_gateway.rest_url] if protocol == "rest" else []  # gRPC is the default
    out = run_loadtest("run", "steady", "--model", "digits", "--model-repo", str(model_repo), "--work-dir",
                       str(work_dir), *where, "--run-time", "4s", "-u", "2", "--out", str(tmp_path))
    print(out.stdout, out.stderr)
    assert out.returncode == 0, out.stdout + out.stderr
    summary = json.loads((tmp_path / f"steady_{protocol}_summary.json").read_text())
    # Two unpaced users: the client key meets the limiter at once (the next test); the loadtest key does not.
    assert summary["requests"] > 0, summary
    assert summary["failures"] == 0 and summary["failures_by_class"] == {"gateway_limited": 0, "server": 0}
    assert "the loadtest key" in out.stdout and "the gateway limited" not in out.stdout
    uri = "/tensorflow.serving.PredictionService/Predict" if protocol == "grpc" else ":predict"
    assert {client for _, client in _identities(limited_gateway, uri)} == {"loadtest"}
    key = limited_gateway.secrets.path("loadtest.api-key").read_text().strip()
    assert key not in out.stdout + out.stderr
    assert key not in (tmp_path / f"steady_{protocol}.log").read_text(errors="replace")


def _client_key(gateway) -> list[str]:
    return ["--root-certificates", str(gateway.secrets.ca_cert),
            "--api-key-file", str(gateway.secrets.path("client.api-key"))]


@pytest.mark.parametrize("protocol", ["grpc", "rest"])
def test_run_with_the_client_key_names_the_limiter_apart_from_the_servers_failures(
        limited_gateway, model_repo, tmp_path, protocol):
    where = (["--grpc", limited_gateway.grpc_target] if protocol == "grpc" else ["--rest", limited_gateway.rest_url])
    out = run_loadtest("run", "steady", "--model", "digits", "--model-repo", str(model_repo), *where,
                       *_client_key(limited_gateway), "--run-time", "4s", "-u", "2", "--out", str(tmp_path),
                       "--max-failure-ratio", "1")
    print(out.stdout, out.stderr)
    assert out.returncode == 0, out.stdout + out.stderr
    summary = json.loads((tmp_path / f"steady_{protocol}_summary.json").read_text())
    limited = summary["failures_by_class"]["gateway_limited"]
    assert summary["requests"] > 0 and limited > 0, summary
    assert summary["failures_by_class"]["server"] == 0, summary["failures_by_error"]
    assert summary["failures"] == limited
    assert (f"the gateway limited {100.0 * limited / summary['requests']:.1f} % of requests: this measured "
            "GATEWAY_RATE (use the loadtest credential, or raise GATEWAY_LOADTEST_RATE)") in out.stdout
    assert f"failures by class: gateway limited {limited}, server 0" in out.stdout


def test_a_sweep_through_the_limiter_marks_where_it_began(limited_gateway, model_repo, tmp_path):
    out = run_loadtest("sweep", "--model", "digits", "--model-repo", str(model_repo), "--grpc",
                       limited_gateway.grpc_target, *_client_key(limited_gateway), "--concurrency", "1,4",
                       "--window", "0.5", "--stable-windows", "2", "--max-level-time", "3", "--warmup", "0.3",
                       "--out", str(tmp_path))
    print(out.stdout, out.stderr)
    assert out.returncode == 0, out.stdout + out.stderr
    series = json.loads((tmp_path / "sweep.json").read_text())["series"][0]
    began = series["limiter_began_at"]
    assert began is not None and any(level["gateway_limited"] for level in series["levels"])
    assert f"the gateway's limiter began at level {began:g}" in out.stdout


def test_a_locustfile_run_by_hand_reads_its_connection_from_the_environment(limited_gateway, tmp_path):
    """locust -f ... with no payload file and no manifest: the metadata is read over TLS with the key too."""
    import os
    import subprocess
    import sys

    from serving.checkout import REPO_ROOT
    secrets = limited_gateway.secrets
    (tmp_path / "empty-repo").mkdir()
    env = {**os.environ, "LOCUST_ROOT_CERTIFICATES": str(secrets.ca_cert),
           "TFS_API_KEY": secrets.api_key("loadtest"), "PYTHONPATH": str(REPO_ROOT)}
    proc = subprocess.run([sys.executable, "-m", "locust", "-f", "loadtest/locustfiles/steady.py", "--headless",
                           "--host", limited_gateway.grpc_target, "-u", "1", "--run-time", "3s", "--model", "digits",
                           "--model-repo", str(tmp_path / "empty-repo"), "--csv", str(tmp_path / "hand"),
                           "GrpcUser"], cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "synthesized from the metadata" in proc.stderr
    stats = (tmp_path / "hand_stats.csv").read_text().splitlines()
    aggregated = next(line for line in stats if ",Aggregated," in line).split(",")
    assert int(aggregated[2]) > 0 and int(aggregated[3]) == 0  # requests, failures
