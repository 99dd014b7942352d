"""Every CLI of the project spells a concept the same way.

A server is ``--grpc HOST:PORT`` / ``--rest URL``, the model repository
``--model-repo DIR``, a version ``--version N`` and a version label
``--label NAME``. Each CLI's argparse parser (and every subcommand's) is
walked; ``python -m serving.server`` is not among them: it takes
``tensorflow_model_server``'s own flags.
"""
from __future__ import annotations

import argparse
import importlib.util
from pathlib import Path
from typing import Callable, Iterator

import pytest

import benchmarks.batching
import benchmarks.capture
import benchmarks.codec
import benchmarks.gpu
import benchmarks.loadgen
import benchmarks.peers
import benchmarks.protocols
import benchmarks.rest_decode
import benchmarks.server
import deploy.k8s.__main__
import exporter.__main__
import loadtest.__main__
import monitoring.local
import serving.capture._cli
from serving.checkout import REPO_ROOT
import serving.client.cli
import serving.config.cli
import serving.rollout.cli
import serving.stack.cli


def _example_parser() -> argparse.ArgumentParser:
    """examples/ is a folder of scripts, not a package: load the training example from its path."""
    spec = importlib.util.spec_from_file_location("train_and_export", REPO_ROOT / "examples" / "train_and_export.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.build_parser()


PARSERS: dict[str, Callable[[], argparse.ArgumentParser]] = {
    "python -m exporter": exporter.__main__.build_parser,
    "python -m serving.client": serving.client.cli.build_parser,
    "python -m serving.config": serving.config.cli.build_parser,
    "python -m serving.rollout": serving.rollout.cli.build_parser,
    "python -m serving.stack": serving.stack.cli.build_parser,
    "python -m loadtest": loadtest.__main__.build_parser,
    "python -m monitoring.local": monitoring.local.build_parser,
    "python -m benchmarks.batching": benchmarks.batching.build_parser,
    "python -m benchmarks.capture": benchmarks.capture.build_parser,
    "python -m serving.capture": serving.capture._cli.build_parser,
    "python -m benchmarks.codec": benchmarks.codec.build_parser,
    "python -m benchmarks.gpu": benchmarks.gpu.build_parser,
    "python -m benchmarks.server": benchmarks.server.build_parser,
    "python -m benchmarks.loadgen": benchmarks.loadgen.build_parser,
    "python -m deploy.k8s": deploy.k8s.__main__.build_parser,
    "python -m benchmarks.peers": benchmarks.peers.build_parser,
    "python -m benchmarks.rest_decode": benchmarks.rest_decode.build_parser,
    "python -m benchmarks.protocols": benchmarks.protocols.build_parser,
    "python examples/train_and_export.py": _example_parser,
}
# The older spellings of the same concepts, which no CLI may take again.
FORBIDDEN = {"--target", "--host", "--tfserving", "--grpc-target", "--rest-url", "--grpc-port", "--rest-port",
             "--models-dir", "--model-version", "--version-label"}
# ``--protocol`` chooses the API(s) a sweep or the tuner measures; it names no server there.
PROTOCOL_CHOICE = {"python -m loadtest sweep", "python -m loadtest tune"}


def _walk(name: str, parser: argparse.ArgumentParser) -> Iterator[tuple[str, argparse.Action]]:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub_name, sub in action.choices.items():
                yield from _walk(f"{name} {sub_name}", sub)
        else:
            yield name, action


def _options() -> list[tuple[str, argparse.Action]]:
    return [item for name, build in PARSERS.items() for item in _walk(name, build())]


def test_no_cli_uses_a_replaced_spelling():
    found = [(cli, flag) for cli, action in _options() for flag in action.option_strings if flag in FORBIDDEN]
    assert found == []


def test_protocol_only_chooses_what_a_sweep_or_the_tuner_measures():
    users = {cli for cli, action in _options() if "--protocol" in action.option_strings}
    assert users == PROTOCOL_CHOICE


def test_a_server_is_named_by_grpc_and_rest_with_their_metavars():
    servers = [(cli, action) for cli, action in _options() if {"--grpc", "--rest"} & set(action.option_strings)]
    assert {cli for cli, _ in servers} >= {"python -m serving.client", "python -m serving.rollout status",
                                           "python -m loadtest run", "python -m loadtest sweep",
                                           "python -m monitoring.local", "python -m serving.stack up"}
    for cli, action in servers:
        assert action.metavar == ("HOST:PORT" if "--grpc" in action.option_strings else "URL"), cli


def test_the_model_repository_is_model_repo_everywhere():
    for cli, action in _options():
        text = f"{action.help or ''} {action.dest}".lower()
        if "repository" in text or action.dest in ("out", "models_dir", "model_repo"):
            if "--out" in action.option_strings:  # an output directory (reports, a rendered file) stays --out
                assert "repository" not in text, cli
            else:
                assert action.option_strings == ["--model-repo"] and action.metavar == "DIR", (cli, action)


def test_versions_and_labels_are_version_and_label():
    for cli, action in _options():
        if action.dest in ("version", "label", "model_version", "version_label"):
            assert action.option_strings == [f"--{action.dest}"], cli
            assert action.metavar == ("N" if action.dest == "version" else "NAME"), cli


@pytest.mark.parametrize("cli", sorted(PARSERS))
def test_default_paths_are_anchored_on_the_checkout(cli):
    for name, action in _walk(cli, PARSERS[cli]()):
        if isinstance(action.default, Path):
            assert action.default.is_absolute() and REPO_ROOT in action.default.parents, (name, action.dest)

