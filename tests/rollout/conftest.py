"""The gateway fixtures (Debian's nginx, the session's certificates, compose's gateway values) for rollout tests."""
from tests.gateway.conftest import compose_gateway_env, gateway_secrets, nginx, nginx_version  # noqa: F401
