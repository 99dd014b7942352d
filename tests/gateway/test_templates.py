"""One template source, two renderings: the pinned image's and the host nginx 1.22's.

The templates are written for nginx >= 1.27.3 (`listen ... ssl;` + `http2 on;`, upstream servers
with `resolve`), which is what the image's envsubst renders and compose runs (the pinned 1.28, the
1.30 stand-in). Debian 12's nginx 1.22 has neither, so `render_templates(..., nginx_version=...)`
moves `http2` into the `listen` lines and drops `resolve` for an older nginx.
"""
from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

from gateway import (
    HTTP2_DIRECTIVE_SINCE,
    TEMPLATES,
    UPSTREAM_RESOLVE_SINCE,
    for_nginx_version,
    parse_nginx_version,
    render_templates,
)
from deploy.images.build import NGINX_IMAGE as STAND_IN_IMAGE
from tests.support.gateway import compose_values, nginx_command

DEPRECATED = 'the "listen ... http2" directive is deprecated'

CONFIG = """\
http {
    map $uri $x {
        default '{"a": "}"}';   # braces in a string and a comment: } {
    }
    server {
        listen 127.0.0.1:1 ssl;
        listen [::1]:1 ssl;   # comment
        http2 on;
        location / { return 200; }
    }
    server {
        listen 127.0.0.1:2;
    }
}
"""


def servers(text: str) -> list[str]:
    """The text of each `server {` block (the templates nest no server block in another)."""
    return re.findall(r"^\s*server\s*\{.*?^    \}", text, re.M | re.S)


def test_an_older_nginx_gets_http2_on_the_listen_lines_of_the_server_that_had_http2_on():
    legacy = for_nginx_version(CONFIG, (1, 22, 1))
    first, second = servers(legacy)
    assert "listen 127.0.0.1:1 ssl http2;" in first and "listen [::1]:1 ssl http2;" in first
    assert "http2 on" not in legacy and "listen 127.0.0.1:2;" in second  # the other server is left alone
    assert legacy.replace(" http2;", ";") == CONFIG.replace("        http2 on;\n", "")
    assert for_nginx_version(CONFIG, HTTP2_DIRECTIVE_SINCE) == CONFIG
    assert for_nginx_version(CONFIG, (1, 28, 0)) == CONFIG


def test_an_nginx_before_1_27_3_gets_the_upstream_servers_without_resolve():
    upstream = "upstream u {\n    zone u 64k;\n    server tfserving:8500 resolve;\n    keepalive 32;\n}\n"
    assert for_nginx_version(upstream, (1, 26, 3)) == upstream.replace(" resolve;", ";")
    assert for_nginx_version(upstream, (1, 22, 1)) == upstream.replace(" resolve;", ";")
    assert for_nginx_version(upstream, UPSTREAM_RESOLVE_SINCE) == upstream


def test_an_http2_directive_without_an_old_form_is_refused_for_an_older_nginx():
    with pytest.raises(ValueError, match="no `http2` directive"):
        for_nginx_version("http {\n    http2 on;\n}\n", (1, 22, 1))
    with pytest.raises(ValueError, match="only `http2 on;`"):
        for_nginx_version("server {\n    listen 1 ssl;\n    http2 off;\n}\n", (1, 22, 1))


def test_the_version_is_read_from_nginx_v():
    assert parse_nginx_version("nginx version: nginx/1.22.1\n") == (1, 22, 1)
    assert parse_nginx_version("nginx version: nginx/1.26.3 (Debian)") == (1, 26, 3)
    with pytest.raises(ValueError, match="nginx -v"):
        parse_nginx_version("command not found")


def modern_rendering(compose_gateway_env, out: Path, **local) -> Path:
    return render_templates(compose_values(compose_gateway_env, **local), out)


def test_the_templates_are_in_the_current_syntax_and_every_tls_server_has_http2_on(compose_gateway_env, tmp_path):
    conf = modern_rendering(compose_gateway_env, tmp_path)
    text = conf.read_text()
    assert not re.search(r"^\s*listen\s[^;]*\bhttp2\b", text, re.M)
    blocks = servers(text)
    assert len(blocks) == 2
    for block in blocks:
        assert re.search(r"^\s*listen\s[^;]*\bssl;", block, re.M) and re.search(r"^\s*http2 on;", block, re.M)
    upstreams = re.findall(r"^\s*server\s+(\S+)\s+resolve;", text, re.M)
    assert upstreams == ["tfserving:8500", "tfserving:8501"]  # looked up again while nginx runs
    # The image renders with plain envsubst: for the pinned nginx nothing is rewritten.
    for name in TEMPLATES:
        rendered = (tmp_path / name.removesuffix(".template")).read_text()
        assert for_nginx_version(rendered, (1, 28, 0)) == rendered


@pytest.fixture
def secrets_values(gateway_secrets, tmp_path) -> dict[str, str]:
    return {"GATEWAY_SECRETS_DIR": str(gateway_secrets.directory), "GATEWAY_RUN_DIR": str(tmp_path)}


def test_the_host_nginx_accepts_its_rendering_and_refuses_the_current_syntax(nginx, nginx_version,
                                                                             compose_gateway_env, tmp_path,
                                                                             secrets_values):
    # IP-literal upstreams, as the host tests run them: an nginx without `resolve` looks names up at start.
    values = compose_values(compose_gateway_env, **secrets_values, GATEWAY_GRPC_UPSTREAM="127.0.0.1:8500",
                            GATEWAY_REST_UPSTREAM="127.0.0.1:8501")
    legacy = render_templates(values, tmp_path / "legacy", nginx_version=nginx_version)
    check = subprocess.run([*nginx_command(nginx, legacy, tmp_path), "-t"], capture_output=True, text=True)
    assert check.returncode == 0 and "[warn]" not in check.stderr, check.stderr
    if nginx_version < HTTP2_DIRECTIVE_SINCE:  # the reason for the second rendering
        modern = render_templates(values, tmp_path / "modern")
        check = subprocess.run([*nginx_command(nginx, modern, tmp_path), "-t"], capture_output=True, text=True)
        # The upstreams come first in the file: 1.22 stops at `resolve` before it reaches `http2 on;`.
        assert check.returncode != 0 and 'invalid parameter "resolve"' in check.stderr, check.stderr
        modern.write_text(for_nginx_version(modern.read_text(), (1, 27, 2)))  # only `resolve` goes
        check = subprocess.run([*nginx_command(nginx, modern, tmp_path), "-t"], capture_output=True, text=True)
        assert check.returncode != 0 and 'unknown directive "http2"' in check.stderr, check.stderr


def stand_in_image_or_skip() -> None:
    try:
        found = subprocess.run(["docker", "image", "inspect", STAND_IN_IMAGE], capture_output=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        found = None
    if found is None or found.returncode != 0:
        pytest.skip(f"image {STAND_IN_IMAGE} is not built (make images)")


def nginx_t_in_stand_in(conf_dir: Path, secrets_dir: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        ["docker", "run", "--rm", "-v", f"{conf_dir}:/t:ro", "-v", f"{secrets_dir}:/etc/nginx/secrets:ro",
         STAND_IN_IMAGE, "nginx", "-t", "-c", "/t/nginx.conf"], capture_output=True, text=True, timeout=120)


@pytest.mark.docker
def test_the_stand_in_nginx_accepts_the_current_syntax_without_a_warning(compose_gateway_env, gateway_secrets,
                                                                         tmp_path):
    stand_in_image_or_skip()
    # Compose's values unchanged: the secrets are mounted where compose mounts them, /tmp is the run dir.
    modern = modern_rendering(compose_gateway_env, tmp_path / "modern").parent
    check = nginx_t_in_stand_in(modern, gateway_secrets.directory)
    assert check.returncode == 0, check.stderr
    assert "[warn]" not in check.stderr and "test is successful" in check.stderr, check.stderr
    # What the check tells apart: the old syntax passes too, with the deprecation warning 1.28 prints
    # (IP-literal upstreams: without `resolve`, nginx would look tfserving up at start, and fail here).
    legacy = render_templates(compose_values(compose_gateway_env, GATEWAY_GRPC_UPSTREAM="127.0.0.1:8500",
                                             GATEWAY_REST_UPSTREAM="127.0.0.1:8501"),
                              tmp_path / "legacy", nginx_version=(1, 22, 1))
    check = nginx_t_in_stand_in(legacy.parent, gateway_secrets.directory)
    assert check.returncode == 0 and DEPRECATED in check.stderr, check.stderr
