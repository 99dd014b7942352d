"""``python -m serving.rollout analyze`` through the real nginx gateway with a LOW rate limit.

The gateway (compose's values, the repository's templates) lets the client
key through at 20 requests a second with a burst of 5, far below what one
sequential caller sends on this machine, so an unpaced analysis meets the
limiter on most calls. The embedded server serves digits 1 (``stable``), 2 (an
identical copy) and 3 (classes shuffled, ``tests.rollout.v2_models``); the
analysis goes over REST through the gateway with the client's key. Paced and
resending the limiter's refusals, analyze PASSes the copy and FAILs the
shuffled one, and the limiter's refusals are reported apart from the sides'
errors. A ``stack.json`` of the test's own records the gateway as compose's
``make up`` does, so ``analyze digits`` with no flags goes over gRPC through
the gateway with its CA and the ``loadtest`` key.
"""
from __future__ import annotations

import contextlib
import io
import json
import shutil

import pytest

from gateway.certs import init_secrets
from serving.config.served_config import STATE_FILE, StackState, write_state
from serving.rollout.cli import main
from tests.rollout.v2_models import build_wrapped
from tests.support.canary_stack import MODEL, canary_server
from tests.support.gateway import compose_values, running_gateway, upstream_values

pytestmark = pytest.mark.slow
LOW_RATE, LOW_BURST = "20r/s", "5"
IDENTICAL, SHUFFLED = 2, 3


@pytest.fixture(scope="module")
def secrets(tmp_path_factory):
    """make certs' secrets: the CA, the gateway's certificate, and client, admin and loadtest credentials."""
    return init_secrets(tmp_path_factory.mktemp("analyze-secrets"))


@pytest.fixture(scope="module")
def limited(model_repo, nginx, nginx_version, secrets, compose_gateway_env, tmp_path_factory):
    root = tmp_path_factory.mktemp("analyze-limiter")
    repo, work = root / "models", root / "server"
    work.mkdir()
    shutil.copytree(model_repo / MODEL / "1", repo / MODEL / "1")
    shutil.copytree(model_repo / MODEL / "1", repo / MODEL / str(IDENTICAL))
    build_wrapped(model_repo / MODEL / "1", repo / MODEL / str(SHUFFLED), "shuffled")
    labels = {"stable": 1, "canary": IDENTICAL, "shuffled": SHUFFLED}
    with canary_server(repo, work, labels) as server:
        values = {**compose_values(compose_gateway_env, **upstream_values(server)),
                  "GATEWAY_RATE": LOW_RATE, "GATEWAY_BURST": LOW_BURST}
        with running_gateway(nginx, nginx_version, values, root / "gateway", secrets, server) as gateway:
            yield repo, work, server, gateway


def rollout(limited, command, *args, stack_dir=None):
    repo, work, server, gateway = limited
    where = ["--grpc", server.grpc_target, "--config-file", str(work / "models.config"), "--model-repo", str(repo)]
    if stack_dir is not None:
        where = ["--work-dir", str(stack_dir)]
    elif command == "analyze":
        where += ["--rest", gateway.rest_url, "--root-certificates", str(gateway.secrets.ca_cert),
                  "--api-key", gateway.key("client")]
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        code = main([command, *args, *where])
    return code, out.getvalue()


def analysis(limited, tmp_path, version):
    assert rollout(limited, "set-label", MODEL, "--label", "canary", "--version", str(version))[0] == 0
    report_path = tmp_path / f"analyze-{version}.json"
    code, table = rollout(limited, "analyze", MODEL, "--rounds", "2", "--report", str(report_path))
    report = json.loads(report_path.read_text())
    print(f"\n--- analyze, canary = version {version} (exit {code})\n{table}")
    return code, table, report


def refusals(report):
    return sum(report["errors"][side].get("gateway_refusals", 0) for side in ("stable", "canary"))


def test_analyze_passes_an_identical_copy_through_a_low_rate_limit(limited, tmp_path):
    code, table, report = analysis(limited, tmp_path, IDENTICAL)
    assert report["verdict"] == "PASS", (table, report["errors"])
    assert code == 0
    assert refusals(report) > 0, "the limiter never refused: the rate is not low enough to test anything"
    assert report["errors"]["stable"]["errors"] == report["errors"]["canary"]["errors"] == 0


def test_analyze_fails_a_shuffled_version_through_a_low_rate_limit(limited, tmp_path):
    code, table, report = analysis(limited, tmp_path, SHUFFLED)
    assert report["verdict"] == "FAIL", table
    assert code == 1
    failed = {c["name"] for c in report["checks"] if c["verdict"] == "FAIL"}
    # the shuffled version wraps version 1's weights: held to element-wise tolerance (serving.rollout.verdict)
    assert any(name.startswith("tolerance:") for name in failed), table
    assert "errors" not in failed


def test_analyze_with_no_flags_goes_through_the_gateway_with_the_loadtest_key(limited, tmp_path):
    """The loadtest credential's own limits (GATEWAY_LOADTEST_*) are high: the client's 20 r/s does not bind it."""
    repo, work, server, gateway = limited
    secrets = gateway.secrets
    write_state(StackState("compose-cpu", work / "models.config", gateway.grpc_target, gateway.rest_url, repo, {},
                           root_certificates=secrets.ca_cert, admin_key_file=secrets.path("admin.api-key")),
                tmp_path / STATE_FILE)
    assert rollout(limited, "set-label", MODEL, "--label", "canary", "--version", str(IDENTICAL))[0] == 0
    before = len(gateway.access_entries())
    report_path = tmp_path / "analyze.json"
    code, table = rollout(limited, "analyze", MODEL, "--report", str(report_path), stack_dir=tmp_path)
    print(table)
    report = json.loads(report_path.read_text())
    assert (code, report["verdict"]) == (0, "PASS"), table
    predicts = [e for e in gateway.access_entries()[before:] if e["uri"].endswith("/Predict")]
    assert predicts and {e["client"] for e in predicts} == {"loadtest"}


def test_label_moves_push_with_the_connection_arguments_given(limited, capsys):
    """set-label through the gateway's TLS gRPC port: the admin key file is admitted, the client's key is not."""
    repo, work, server, gateway = limited
    secrets = gateway.secrets
    where = ["--grpc", gateway.grpc_target, "--config-file", str(work / "models.config"), "--model-repo", str(repo),
             "--root-certificates", str(secrets.ca_cert)]
    admin, client = ("--api-key-file", str(secrets.path("admin.api-key"))), ("--api-key-file",
                                                                              str(secrets.path("client.api-key")))
    to = {v: ["set-label", MODEL, "--label", "canary", "--version", str(v)] for v in (IDENTICAL, SHUFFLED)}
    assert main([*to[SHUFFLED], *where, *admin]) == 0
    capsys.readouterr()
    assert main([*to[IDENTICAL], *where, *client]) != 0  # a change to push: the client's key may not reload
    assert "PERMISSION_DENIED" in capsys.readouterr().err
    assert main([*to[IDENTICAL], *where, *admin]) == 0
