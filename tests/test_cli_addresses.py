"""Every CLI parses ``--grpc HOST:PORT`` and ``--rest URL`` with ``serving.addresses``: one rule, one message.

The parsers are the ones ``test_cli_vocabulary`` walks (every CLI of the
project). Each is fed the same wrong addresses and must refuse each with the
same line, argparse's ``argument --grpc: <the rule>``, exit code 2.
"""
from __future__ import annotations

import pytest

from serving import addresses
from tests.test_cli_vocabulary import PARSERS, _options

WRONG = {
    "--grpc": ["http://127.0.0.1:8501", "127.0.0.1", "127.0.0.1:port", "127.0.0.1:70000"],
    "--rest": ["grpc://127.0.0.1:8500", "127.0.0.1:8501", "ftp://127.0.0.1:8501", "http://127.0.0.1:x"],
}


def _address_flags() -> list[tuple[str, str]]:
    return [(cli, flag) for cli, action in _options() for flag in action.option_strings if flag in WRONG]


def test_every_grpc_and_rest_flag_parses_with_the_one_address_rule():
    found = _address_flags()
    assert {cli for cli, _ in found} >= {"python -m serving.client", "python -m serving.config add",
                                         "python -m serving.rollout status", "python -m loadtest run",
                                         "python -m loadtest sweep", "python -m monitoring.local",
                                         "python -m serving.stack up"}
    rule = {"--grpc": addresses.grpc_address, "--rest": addresses.rest_address}
    wrong = [(cli, action.dest) for cli, action in _options() for flag in action.option_strings
             if flag in rule and action.type is not rule[flag]]
    assert wrong == []


@pytest.mark.parametrize("flag", sorted(WRONG))
def test_every_cli_refuses_a_wrong_address_with_the_same_line(flag, capsys):
    for address in WRONG[flag]:
        expected = f"error: argument {flag}: {_message(flag, address)}"
        for cli, found in _address_flags():
            if found != flag:
                continue
            tool, *subcommand = cli.split(" ")[2:]
            with pytest.raises(SystemExit) as exited:
                PARSERS[f"python -m {tool}"]().parse_args([*subcommand, flag, address])
            last = capsys.readouterr().err.strip().splitlines()[-1]
            assert exited.value.code == 2 and last.endswith(expected), (cli, last)


def _message(flag: str, address: str) -> str:
    with pytest.raises(addresses.AddressError) as refused:
        (addresses.grpc_address if flag == "--grpc" else addresses.rest_address)(address)
    return str(refused.value)


@pytest.mark.parametrize("address, message", [
    ("http://127.0.0.1:8501", "http://127.0.0.1:8501 is a REST URL (http://), not a gRPC address; give it to "
                              "--rest, or give --grpc HOST:PORT (or grpc://HOST:PORT), e.g. 127.0.0.1:8500"),
    ("127.0.0.1", "127.0.0.1 has no port; --grpc takes HOST:PORT (or grpc://HOST:PORT), e.g. 127.0.0.1:8500"),
    ("h:0", "h:0 has an invalid port '0' (a number from 1 to 65535); --grpc takes HOST:PORT"),
    (":8500", ":8500 has no host"),
    ("", "an empty address; --grpc takes"),
])
def test_a_wrong_grpc_address_names_the_rule(address, message):
    assert _message("--grpc", address).startswith(message)


@pytest.mark.parametrize("address, message", [
    ("grpc://127.0.0.1:8500", "grpc://127.0.0.1:8500 is a gRPC address (grpc://), not a REST URL; give it to "
                              "--grpc, or give --rest an http:// or https:// URL, e.g. http://127.0.0.1:8501"),
    ("127.0.0.1:8501", "127.0.0.1:8501 has no scheme; --rest takes an http:// or https:// URL"),
    ("http://127.0.0.1:99999", "http://127.0.0.1:99999 has an invalid port '99999'"),
    ("http://:8501", "http://:8501 has no host"),
])
def test_a_wrong_rest_url_names_the_rule(address, message):
    assert _message("--rest", address).startswith(message)


@pytest.mark.parametrize("address, parsed", [
    ("127.0.0.1:8500", "127.0.0.1:8500"), ("grpc://tfs:8500", "tfs:8500"), ("[::1]:8500", "[::1]:8500"),
    ("unix:///tmp/tfs.sock", "unix:///tmp/tfs.sock"), ("dns:///tfs:8500", "dns:///tfs:8500"),
])
def test_grpc_takes_host_port_and_grpcs_own_targets(address, parsed):
    assert addresses.grpc_address(address) == parsed


@pytest.mark.parametrize("address, parsed", [
    ("http://127.0.0.1:8501/", "http://127.0.0.1:8501"), ("https://tfs.example", "https://tfs.example"),
    ("http://[::1]:8501", "http://[::1]:8501"), ("https://gw.example:443/tfs/", "https://gw.example:443/tfs"),
])
def test_rest_takes_http_and_https_urls_without_a_trailing_slash(address, parsed):
    assert addresses.rest_address(address) == parsed
