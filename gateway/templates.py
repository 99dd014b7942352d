"""The gateway's nginx templates and how they are rendered.

The compose ``gateway`` service mounts ``nginx.conf.template`` and
``routes.conf.template`` into the nginx image's ``/etc/nginx/templates``; the
image's entrypoint runs ``envsubst`` on them with only the ``GATEWAY_*``
variables (``NGINX_ENVSUBST_FILTER``) into ``NGINX_ENVSUBST_OUTPUT_DIR``, and
nginx starts with ``-c <that dir>/nginx.conf``. :func:`render_template` does
the same substitution (``${GATEWAY_X}`` and ``$GATEWAY_X``, nothing else), but
refuses a variable without a value where envsubst would leave it empty.
"""
from __future__ import annotations

import re
from pathlib import Path
from typing import Mapping

__all__ = ["TEMPLATE_DIR", "TEMPLATES", "SECRET_FILES", "UnsetVariable",
           "template_variables", "render_template", "render_templates"]

TEMPLATE_DIR = Path(__file__).resolve().parent
# Rendered next to each other: nginx.conf includes routes.conf by a relative path.
TEMPLATES = ("nginx.conf.template", "routes.conf.template")
# What nginx reads from ${GATEWAY_SECRETS_DIR} (make certs writes them; gateway/README.md).
SECRET_FILES = ("ca.crt", "server.crt", "server.key", "api-keys.map")

_VARIABLE = re.compile(r"\$(?:\{(GATEWAY_[A-Z0-9_]+)\}|(GATEWAY_[A-Z0-9_]+))")


class UnsetVariable(KeyError):
    """A template names a ``GATEWAY_*`` variable that has no value."""


def template_variables(text: str) -> set[str]:
    """The ``GATEWAY_*`` variables ``text`` names."""
    return {braced or bare for braced, bare in _VARIABLE.findall(text)}


def render_template(text: str, values: Mapping[str, str]) -> str:
    """``text`` with each ``${GATEWAY_X}`` replaced by ``values["GATEWAY_X"]`` (as envsubst does)."""
    missing = sorted(template_variables(text) - set(values))
    if missing:
        raise UnsetVariable(f"no value for {', '.join(missing)}")
    return _VARIABLE.sub(lambda m: str(values[m.group(1) or m.group(2)]), text)


def render_templates(values: Mapping[str, str], out_dir: Path, template_dir: Path = TEMPLATE_DIR) -> Path:
    """Render every template of :data:`TEMPLATES` into ``out_dir``; the path of ``nginx.conf``."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    for name in TEMPLATES:
        text = (Path(template_dir) / name).read_text()
        (out_dir / name.removesuffix(".template")).write_text(render_template(text, values))
    return out_dir / "nginx.conf"
