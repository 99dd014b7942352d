"""The gateway's nginx templates and how they are rendered.

The compose ``gateway`` service mounts ``nginx.conf.template`` and
``routes.conf.template`` into the nginx image's ``/etc/nginx/templates``; the
image's entrypoint runs ``envsubst`` on them with only the ``GATEWAY_*``
variables (``NGINX_ENVSUBST_FILTER``) into ``NGINX_ENVSUBST_OUTPUT_DIR``, and
nginx starts with ``-c <that dir>/nginx.conf``. :func:`render_template` does
the same substitution (``${GATEWAY_X}`` and ``$GATEWAY_X``, nothing else), but
refuses a variable without a value where envsubst would leave it empty.

One source, two renderings. The templates are written for the pinned image's
nginx (``listen ADDR ssl;`` plus ``http2 on;`` in the server block, the form
since nginx 1.25.1, which deprecates ``listen ... http2``); that is what the
image's envsubst produces. An older nginx (Debian 12's 1.22, which the tests
run on the host) has no ``http2`` directive: ``render_templates(...,
nginx_version=installed_nginx_version())`` moves each server's ``http2 on;``
into its ``listen`` lines, and an nginx older than 1.27.3 gets the upstreams'
``server ADDR resolve;`` without ``resolve`` (it looks the name up once, at
start; the host tests' upstreams are IP literals) (:func:`for_nginx_version`).
"""
from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path
from typing import Mapping, Optional

__all__ = ["TEMPLATE_DIR", "TEMPLATES", "SECRET_FILES", "HTTP2_DIRECTIVE_SINCE", "UPSTREAM_RESOLVE_SINCE", "NginxVersion", "UnsetVariable",
           "template_variables", "render_template", "render_templates", "for_nginx_version",
           "installed_nginx_version", "parse_nginx_version"]

TEMPLATE_DIR = Path(__file__).resolve().parent
# Rendered next to each other: nginx.conf includes routes.conf by a relative path, and routes.conf
# capture-${GATEWAY_CAPTURE}.conf (on: copy inference requests to the capture service; off: nothing).
TEMPLATES = ("nginx.conf.template", "routes.conf.template", "capture-on.conf.template", "capture-off.conf.template")
# What nginx reads from ${GATEWAY_SECRETS_DIR} (make certs writes them; gateway/README.md). `access` is a
# folder (api-keys.map, revoked-serials.map), mounted whole: `gateway.certs rotate` replaces its files by
# rename, which a single-file bind mount would never show the container.
SECRET_FILES = ("ca.crt", "server.crt", "server.key", "access")

NginxVersion = tuple[int, int, int]
# The first nginx with the `http2` directive; from it on, `listen ... http2` is deprecated (a warning).
HTTP2_DIRECTIVE_SINCE: NginxVersion = (1, 25, 1)
# The first nginx (open source) whose upstream `server` takes `resolve` (a name looked up again while it runs).
UPSTREAM_RESOLVE_SINCE: NginxVersion = (1, 27, 3)

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


def render_templates(values: Mapping[str, str], out_dir: Path, template_dir: Path = TEMPLATE_DIR,
                     nginx_version: Optional[NginxVersion] = None) -> Path:
    """Render every template of :data:`TEMPLATES` into ``out_dir``; the path of ``nginx.conf``.

    ``nginx_version`` None renders what the image's envsubst renders (the templates' own, current
    syntax); a version renders for that nginx (:func:`for_nginx_version`).
    """
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    for name in TEMPLATES:
        text = render_template((Path(template_dir) / name).read_text(), values)
        if nginx_version is not None:
            text = for_nginx_version(text, nginx_version)
        (out_dir / name.removesuffix(".template")).write_text(text)
    return out_dir / "nginx.conf"


_HTTP2_ON = re.compile(r"^[ \t]*http2[ \t]+on[ \t]*;[ \t]*(#[^\n]*)?\n?", re.M)
_LISTEN = re.compile(r"^(\s*listen\s[^;#]*?)\s*;", re.M)
_SERVER_OPEN = re.compile(r"^\s*server\s*\{")
_SERVER_RESOLVE = re.compile(r"^(\s*server\s+[^;#]*?)\s+resolve(\s*;)", re.M)
_QUOTED_OR_COMMENT = re.compile(r"'(?:[^'\\]|\\.)*'|\"(?:[^\"\\]|\\.)*\"|#.*")


def for_nginx_version(text: str, version: NginxVersion) -> str:
    """``text`` (a config or template in the current syntax) as ``version`` of nginx accepts it.

    Before :data:`UPSTREAM_RESOLVE_SINCE`, an upstream's ``server ADDR resolve;`` loses
    ``resolve``. Before :data:`HTTP2_DIRECTIVE_SINCE`, each server block's ``http2 on;`` becomes
    ``http2`` on every ``listen`` line of that block (the old way to enable HTTP/2); an ``http2``
    directive elsewhere (``http2 off;``, or at the ``http`` level) has no old form and is refused.
    """
    if tuple(version) < UPSTREAM_RESOLVE_SINCE:
        text = _SERVER_RESOLVE.sub(r"\1\2", text)
    if tuple(version) >= HTTP2_DIRECTIVE_SINCE:
        return text
    out: list[str] = []
    block: Optional[list[str]] = None
    depth = 0
    for line in text.splitlines(keepends=True):
        code = _QUOTED_OR_COMMENT.sub("", line)
        if block is None and _SERVER_OPEN.match(code):
            block, depth = [], 0
        if block is None:
            if re.match(r"\s*http2\s", code):
                raise ValueError(f"nginx {_dotted(version)} has no `http2` directive and this one has "
                                 f"no old form (only `http2 on;` inside a server block has): {line.strip()}")
            out.append(line)
            continue
        block.append(line)
        depth += code.count("{") - code.count("}")
        if depth == 0:
            out.append(_listen_http2("".join(block), version))
            block = None
    if block is not None:
        raise ValueError("a server block is not closed")
    return "".join(out)


def _listen_http2(server: str, version: NginxVersion) -> str:
    without = _HTTP2_ON.sub("", server)
    if re.search(r"^\s*http2\s", _QUOTED_OR_COMMENT.sub("", without), re.M):
        raise ValueError(f"nginx {_dotted(version)} has no `http2` directive: only `http2 on;` has an old "
                         "form (`listen ... http2`)")
    if without == server:
        return server
    return _LISTEN.sub(lambda m: m.group(0) if re.search(r"\shttp2\b", m.group(1)) else f"{m.group(1)} http2;",
                       without)


def _dotted(version: NginxVersion) -> str:
    return ".".join(str(part) for part in version)


def parse_nginx_version(text: str) -> NginxVersion:
    """The version in ``nginx -v``'s output (``nginx version: nginx/1.22.1``, or ``.../1.22.1 (Debian)``)."""
    match = re.search(r"nginx version: [^/\s]+/(\d+)\.(\d+)\.(\d+)", text)
    if not match:
        raise ValueError(f"not the output of `nginx -v` (no `nginx version: nginx/X.Y.Z`): {text.strip()!r}")
    return tuple(int(part) for part in match.groups())  # type: ignore[return-value]


def installed_nginx_version(nginx: str = "nginx") -> NginxVersion:
    """The version of the ``nginx`` binary (a path or a name looked up on PATH, then /usr/sbin)."""
    path = shutil.which(nginx) or shutil.which(nginx, path="/usr/sbin:/sbin")
    if not path:
        raise FileNotFoundError(f"no nginx binary {nginx!r} on PATH or in /usr/sbin")
    result = subprocess.run([path, "-v"], capture_output=True, text=True, timeout=30)
    return parse_nginx_version(result.stderr + result.stdout)  # nginx -v prints to stderr
