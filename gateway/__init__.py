"""The authenticating nginx gateway in front of TF Serving (compose service ``gateway``).

- ``gateway/nginx.conf.template`` and ``gateway/routes.conf.template``: the
  nginx configuration. The nginx image renders them at start with
  ``envsubst`` (only ``${GATEWAY_*}`` variables; nginx's own ``$variables``
  stay); the tests render the same files with :func:`render_template`.
- :mod:`gateway.certs` (``make certs``): a local CA, the gateway's server
  certificate, client, admin and loadtest credentials (rotate, revoke), into a
  git-ignored folder that compose mounts read-only.

Importing this package has no side effects.
"""
from __future__ import annotations

from gateway.templates import (
    HTTP2_DIRECTIVE_SINCE,
    SECRET_FILES,
    TEMPLATE_DIR,
    TEMPLATES,
    UPSTREAM_RESOLVE_SINCE,
    NginxVersion,
    UnsetVariable,
    for_nginx_version,
    installed_nginx_version,
    parse_nginx_version,
    render_template,
    render_templates,
    template_variables,
)

__all__ = [
    "HTTP2_DIRECTIVE_SINCE",
    "SECRET_FILES",
    "TEMPLATE_DIR",
    "TEMPLATES",
    "UPSTREAM_RESOLVE_SINCE",
    "NginxVersion",
    "UnsetVariable",
    "for_nginx_version",
    "installed_nginx_version",
    "parse_nginx_version",
    "render_template",
    "render_templates",
    "template_variables",
]
