"""``python -m serving.rollout analyze`` through the real nginx gateway with a LOW rate limit.

The gateway (compose's values, the repository's templates) lets the client
key through at 20 requests a second with a burst of 5, far below what one
sequential caller sends on this machine, so an unpaced analysis meets the
limiter on most calls. The embedded server serves digits 1 (``stable``), 2 (an
identical copy) and 3 (classes shuffled, ``tests.rollout.v2_models``); the
analysis goes over REST through the gateway with the client's key. Paced and
resending the limiter's refusals, analyze PASSes the copy and FAILs the
shuffled one, and the limiter's refusals are reported apart from the sides'
errors.
"""
from __future__ import annotations

import contextlib
import io
import json
import shutil

import pytest

from serving.rollout.cli import main
from tests.rollout.v2_models import build_wrapped
from tests.support.canary_stack import MODEL, canary_server
from tests.support.gateway import compose_values, running_gateway, upstream_values

pytestmark = pytest.mark.slow
LOW_RATE, LOW_BURST = "20r/s", "5"
IDENTICAL, SHUFFLED = 2, 3


@pytest.fixture(scope="module")
def limited(model_repo, nginx, nginx_version, gateway_secrets, compose_gateway_env, tmp_path_factory):
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
        with running_gateway(nginx, nginx_version, values, root / "gateway", gateway_secrets, server) as gateway:
            yield repo, work, server, gateway


def rollout(limited, command, *args):
    repo, work, server, gateway = limited
    where = ["--grpc", server.grpc_target, "--config-file", str(work / "models.config"), "--model-repo", str(repo)]
    if command == "analyze":
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
    assert report["verdict"] == "PASS", table
    assert code == 0
    assert refusals(report) > 0, "the limiter never refused: the rate is not low enough to test anything"
    assert report["errors"]["stable"]["errors"] == report["errors"]["canary"]["errors"] == 0


def test_analyze_fails_a_shuffled_version_through_a_low_rate_limit(limited, tmp_path):
    code, table, report = analysis(limited, tmp_path, SHUFFLED)
    assert report["verdict"] == "FAIL", table
    assert code == 1
    failed = {c["name"] for c in report["checks"] if c["verdict"] == "FAIL"}
    assert any(name.startswith("agreement:") for name in failed), table
    assert "errors" not in failed
