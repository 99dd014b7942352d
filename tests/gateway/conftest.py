"""Debian's nginx with the repository's gateway templates, in front of the embedded server (``nginx``,
``nginx_version``, ``gateway_secrets`` and ``compose_gateway_env`` are tests/conftest.py's: the rollout tests use them too).

- ``nginx``: the binary ``make debs`` installs (Debian's ``nginx``); a test that
  takes it fails, not skips, where it is missing.
- ``gateway_secrets``: a CA, server, client and admin certificates and API keys
  made by :mod:`gateway.certs` (openssl) for this session, plus two clients of
  their own for the rate-limit tests.
- ``gateway``: nginx as a child process (``daemon off;`` from the template,
  this user, a prefix, pid and temp paths in tmp) with ``gateway/*.template``
  rendered by :func:`gateway.render_templates` for the host nginx's version
  (Debian 12's 1.22: ``http2`` on the ``listen`` lines) with the compose ``gateway``
  service's own environment (Compose's model), where only the listen
  addresses (free 127.0.0.1 ports), the upstreams (the embedded server) and
  the paths change. Its access log is nginx's stdout, its error log stderr.
- ``rate_gateway``: the same with a refill of one request a minute, for the
  rate-limit tests (compose's burst, a rate no machine's speed can outrun).
"""
from __future__ import annotations

from pathlib import Path
from typing import Iterator

import pytest

from gateway.certs import Credentials, init_secrets
from serving.launcher import ServerProcess
from tests.support.gateway import (
    MODEL,
    SLOW_REFILL,
    Gateway,
    compose_values,
    running_gateway,
    upstream_values,
)


@pytest.fixture(scope="session")
def foreign_secrets(tmp_path_factory) -> Credentials:
    """Another CA's certificates: a server the clients must not trust, clients the gateway must refuse."""
    return init_secrets(tmp_path_factory.mktemp("foreign-secrets"))


@pytest.fixture(scope="session")
def tf_serving(model_repo: Path, tmp_path_factory) -> Iterator[ServerProcess]:
    """The embedded server with ``digits`` on free loopback ports."""
    work = tmp_path_factory.mktemp("tf-serving")
    with ServerProcess.for_models({MODEL: model_repo / MODEL}, workdir=work) as server:
        yield server


@pytest.fixture(scope="session")
def gateway(nginx, nginx_version, gateway_secrets, compose_gateway_env, tf_serving,
            tmp_path_factory) -> Iterator[Gateway]:
    values = compose_values(compose_gateway_env, **upstream_values(tf_serving))
    with running_gateway(nginx, nginx_version, values, tmp_path_factory.mktemp("gateway"), gateway_secrets,
                         tf_serving) as gateway:
        yield gateway


@pytest.fixture(scope="session")
def rate_gateway(nginx, nginx_version, gateway_secrets, compose_gateway_env, tf_serving,
                 tmp_path_factory) -> Iterator[Gateway]:
    """The gateway with compose's values, burst included, but :data:`SLOW_REFILL` for its rate."""
    values = {**compose_values(compose_gateway_env, **upstream_values(tf_serving)), "GATEWAY_RATE": SLOW_REFILL}
    with running_gateway(nginx, nginx_version, values, tmp_path_factory.mktemp("rate-gateway"), gateway_secrets,
                         tf_serving) as gateway:
        yield gateway
