"""The nginx under test runs the repository's templates with compose's values; its logs are JSON."""
from __future__ import annotations

import re
from pathlib import Path

from gateway import TEMPLATE_DIR, TEMPLATES, UnsetVariable, for_nginx_version, render_template
from serving.checkout import REPO_ROOT
from tests.support.compose import dotenv
from tests.support.gateway import LOCAL_VALUES

_VARIABLE = re.compile(r"\$\{(GATEWAY_[A-Z0-9_]+)\}")


def template_pattern(template: str) -> re.Pattern:
    """A regex that matches a render of ``template``: every other character literally."""
    parts, seen, last = [], set(), 0
    for match in _VARIABLE.finditer(template):
        parts.append(re.escape(template[last:match.start()]))
        name = match.group(1)
        parts.append(f"(?P={name})" if name in seen else f"(?P<{name}>[^\\n]*?)")
        seen.add(name)
        last = match.end()
    parts.append(re.escape(template[last:]))
    return re.compile("".join(parts), re.S)


def test_nginx_runs_the_repository_templates_and_only_addresses_ports_and_paths_differ(gateway,
                                                                                      compose_gateway_env):
    assert TEMPLATE_DIR == REPO_ROOT / "gateway"
    title = Path(f"/proc/{gateway.proc.pid}/cmdline").read_bytes().decode()  # nginx's process title
    assert f" -c {gateway.conf_dir / 'nginx.conf'} " in title
    for name in TEMPLATES:
        template = for_nginx_version((REPO_ROOT / "gateway" / name).read_text(), gateway.nginx_version)
        rendered = (gateway.conf_dir / name.removesuffix(".template")).read_text()
        match = template_pattern(template).fullmatch(rendered)
        assert match, f"{name}: the config nginx runs is not a render of gateway/{name}"
        for variable, value in match.groupdict().items():
            if variable not in LOCAL_VALUES:
                assert value == compose_gateway_env[variable], variable
    # Compose's values are .env's: the tests run the limits a compose user gets.
    env = dotenv()
    for knob in ("GATEWAY_RATE", "GATEWAY_BURST", "GATEWAY_CONN_PER_IP", "GATEWAY_MAX_BODY_SIZE"):
        assert compose_gateway_env[knob] == env[knob]


def test_a_template_variable_without_a_value_is_refused_not_left_empty():
    text = (REPO_ROOT / "gateway" / "nginx.conf.template").read_text()
    try:
        render_template(text, {"GATEWAY_RUN_DIR": "/tmp"})
    except UnsetVariable as error:
        assert "GATEWAY_SECRETS_DIR" in str(error)
    else:
        raise AssertionError("rendered with unset variables")
    # nginx's own variables are left for nginx; only ${GATEWAY_*} are the template's.
    assert "$gw_identity" in text and not re.search(r"\$GATEWAY_", text)


def test_nginx_started_without_errors_or_warnings(gateway):
    problems = [line for line in gateway.error_log.read_text().splitlines()
                if re.search(r"\[(emerg|alert|crit|error|warn)\]", line) and "limiting" not in line]
    startup = [line for line in problems if "client" not in line]  # request-time lines name the client
    assert startup == []


def test_access_log_is_one_json_object_per_request_naming_the_client_never_the_key(gateway):
    key = gateway.key()
    with gateway.http() as http:
        assert http.get(f"{gateway.rest_url}/v1/models/digits", headers={"x-api-key": key}).status_code == 200
        assert http.get(f"{gateway.rest_url}/v1/models/digits", headers={"x-api-key": "wrong"}).status_code == 401
    def served_and_refused(entries: list[dict]) -> tuple[list[dict], list[dict]]:
        return ([e for e in entries if e["client"] == "client" and e["status"] == 200],
                [e for e in entries if e["status"] == 401 and e["role"] == ""])

    served, refused = served_and_refused(gateway.access_entries(until=lambda es: all(served_and_refused(es))))
    assert served and refused
    entry = served[-1]
    assert entry["uri"] == "/v1/models/digits" and entry["upstream_status"] == "200"
    assert entry["tls"].startswith("TLSv1.") and len(entry["request_id"]) == 32
    assert isinstance(entry["request_time"], float) and isinstance(entry["status"], int)
    assert refused[-1]["upstream"] == ""  # refused at the gateway: TF Serving never saw it
    text = gateway.access_log.read_text()
    assert key not in text and gateway.key("admin") not in text
