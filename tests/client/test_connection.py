"""One way to spell TLS and credentials on every command line: ``serving.client.connection``."""
from __future__ import annotations

import argparse
from pathlib import Path

import pytest

from serving.client import AsyncGrpcClient, AsyncRestClient, Connection, GrpcClient, RestClient
from serving.client import add_connection_arguments, connection_from_args
from serving.client.cli import build_parser

SECRET = "k3y-SECRET-value"


def _parse(*argv: str, environ: dict | None = None) -> Connection:
    parser = argparse.ArgumentParser()
    add_connection_arguments(parser)
    return connection_from_args(parser.parse_args(list(argv)), environ or {})


def test_the_arguments_form_one_group_named_tls_and_credentials():
    parser = argparse.ArgumentParser()
    add_connection_arguments(parser)
    (group,) = [g for g in parser._action_groups if g.title == "TLS and credentials"]
    flags = {flag for action in group._group_actions for flag in action.option_strings}
    assert flags == {"--root-certificates", "--client-certificate", "--client-cert", "--client-key",
                     "--server-name", "--api-key-file", "--api-key", "--bearer-token", "--insecure"}


def test_an_existing_group_takes_the_arguments_itself():
    parser = argparse.ArgumentParser()
    group = parser.add_argument_group("connection")
    add_connection_arguments(group)
    assert not [g for g in parser._action_groups if g.title == "TLS and credentials"]
    assert parser.parse_args(["--insecure"]).insecure is True


def test_nothing_given_is_an_empty_connection():
    connection = _parse()
    assert connection == Connection() and not connection.given
    assert not _parse("--insecure").given


def test_client_kwargs_are_what_every_client_takes(tmp_path):
    connection = _parse("--root-certificates", "ca.pem", "--client-cert", "c.pem", "--client-key", "k.pem",
                        "--server-name", "gw", "--api-key", SECRET, "--bearer-token", "tok", "--insecure")
    assert connection.given
    assert connection.client_kwargs() == {
        "root_certificates": Path("ca.pem"), "client_cert": Path("c.pem"), "client_key": Path("k.pem"),
        "server_name": "gw", "api_key": SECRET, "bearer_token": "tok", "insecure": True}
    import inspect
    for cls in (GrpcClient, RestClient, AsyncGrpcClient, AsyncRestClient):
        assert set(connection.client_kwargs()) <= set(inspect.signature(cls.__init__).parameters), cls


def test_a_key_file_loses_one_line_ending_as_make_certs_writes_it(tmp_path):
    for ending in ("\n", "\r\n", ""):
        (tmp_path / "client.api-key").write_text(SECRET + ending, newline="")
        assert _parse("--api-key-file", str(tmp_path / "client.api-key")).api_key == SECRET


def test_a_flag_beats_the_environment_and_the_file_variable_comes_last(tmp_path):
    key_file = tmp_path / "key"
    key_file.write_text("from-file-env\n")
    env = {"TFS_API_KEY_FILE": str(key_file)}
    assert _parse(environ=env).api_key == "from-file-env"
    assert _parse(environ={**env, "TFS_API_KEY": "from-env\n"}).api_key == "from-env"
    assert _parse("--api-key", "from-flag", environ={**env, "TFS_API_KEY": "from-env"}).api_key == "from-flag"


def test_api_key_and_api_key_file_exclude_each_other(capsys):
    with pytest.raises(SystemExit):
        _parse("--api-key", "a", "--api-key-file", "b")
    assert "not allowed with argument" in capsys.readouterr().err


@pytest.mark.parametrize("bad", [SECRET + "\n\n", SECRET + " ", " " + SECRET, "k3y\tSECRET", "k3y\x00SECRET",
                                 "k3y\x7fSECRET", "k3y-SÉCRET", "\n"])
def test_a_malformed_key_is_refused_without_printing_it(tmp_path, bad):
    key_file = tmp_path / "key"
    key_file.write_bytes(bad.encode())
    with pytest.raises(ValueError) as raised:
        _parse("--api-key-file", str(key_file))
    message = str(raised.value)
    assert "API key" in message and str(key_file) in message
    assert "k3y" not in message and "SECRET" not in message and "CRET" not in message


def test_an_unreadable_key_file_is_a_value_error_naming_it(tmp_path):
    with pytest.raises(ValueError, match="cannot read it"):
        _parse("--api-key-file", str(tmp_path / "missing"))


def test_repr_never_shows_the_key_or_the_token():
    connection = _parse("--api-key", SECRET, "--bearer-token", "tok-SECRET")
    assert SECRET not in repr(connection) and "tok-SECRET" not in repr(connection)
    assert "api_key=<set>" in repr(connection) and "bearer_token=<set>" in repr(connection)


def test_help_says_to_prefer_the_file_or_the_environment_over_api_key(capsys):
    with pytest.raises(SystemExit):
        build_parser().parse_args(["--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert "/proc/PID/cmdline" in text and "prefer --api-key-file or $TFS_API_KEY" in text
    assert "--client-certificate FILE, --client-cert FILE" in text and "--insecure" in text


def test_the_cli_takes_client_cert_as_an_alias_of_client_certificate():
    args = build_parser().parse_args(["status", "--rest", "http://127.0.0.1:1", "--model", "m",
                                      "--client-cert", "c.pem", "--client-key", "k.pem"])
    assert connection_from_args(args, {}).client_cert == Path("c.pem")
