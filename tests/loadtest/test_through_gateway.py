"""``python -m loadtest`` through the real nginx gateway (compose's templates and values) with a LOW rate limit.

The gateway runs in front of the package's digits server with 20 requests a
second and a burst of 5 per client, so an unpaced load meets the limiter.
Its gRPC and REST ports speak TLS only.
"""
from __future__ import annotations

import time

import pytest

from loadtest.__main__ import main
from tests.support.gateway import compose_values, running_gateway, upstream_values

pytestmark = pytest.mark.slow
LOW_RATE, LOW_BURST = "20r/s", "5"
_RUN = ["run", "steady", "--run-time", "60s", "-u", "1"]


@pytest.fixture(scope="module")
def limited_gateway(digits_server, nginx, nginx_version, gateway_secrets, compose_gateway_env, tmp_path_factory):
    values = {**compose_values(compose_gateway_env, **upstream_values(digits_server)),
              "GATEWAY_RATE": LOW_RATE, "GATEWAY_BURST": LOW_BURST}
    with running_gateway(nginx, nginx_version, values, tmp_path_factory.mktemp("loadtest-gateway"),
                         gateway_secrets, digits_server) as gateway:
        yield gateway


def _refused(capsys, argv: list[str]) -> str:
    began = time.monotonic()
    assert main(argv) == 2
    assert time.monotonic() - began < 30  # a preflight, not the 60 s run
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith(f"python -m loadtest {argv[0]}: error: "), err
    return err


def test_grpc_at_a_tls_port_without_a_ca_names_tls(limited_gateway, capsys):
    target = limited_gateway.grpc_target
    err = _refused(capsys, [*_RUN, "--grpc", target])
    assert f"--grpc {target}: this port speaks TLS: pass --root-certificates (make up's stack does this for you)" in err
    assert "HTTP/1.1" not in err


def test_plain_http_at_a_tls_rest_port_names_tls(limited_gateway, capsys):
    url = limited_gateway.rest_url.replace("https://", "http://")
    err = _refused(capsys, [*_RUN, "--rest", url])
    assert "this port speaks TLS: pass --root-certificates" in err and "https:// URL" in err
