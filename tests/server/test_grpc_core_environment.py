"""``python -m serving.server`` runs gRPC core without EventEngine endpoints unless told otherwise.

gRPC core reads ``GRPC_EXPERIMENTS`` when ``grpc`` is first imported, so the
entry point must set it before anything imports ``grpc``.
"""
from __future__ import annotations

import subprocess
import sys

from serving.checkout import REPO_ROOT
from serving.server.__main__ import GRPC_CORE_EXPERIMENTS, grpc_core_environment


def test_the_legacy_poller_is_the_default():
    environ: dict[str, str] = {}
    grpc_core_environment(environ)
    assert environ == {"GRPC_EXPERIMENTS": "-event_engine_listener,-event_engine_for_all_other_endpoints"}
    assert environ["GRPC_EXPERIMENTS"] == GRPC_CORE_EXPERIMENTS


def test_an_empty_setting_asks_for_nothing_and_gets_the_default():
    environ = {"GRPC_EXPERIMENTS": ""}
    grpc_core_environment(environ)
    assert environ == {"GRPC_EXPERIMENTS": GRPC_CORE_EXPERIMENTS}


def test_an_operator_setting_wins():
    environ = {"GRPC_EXPERIMENTS": "event_engine_listener"}
    grpc_core_environment(environ)
    assert environ == {"GRPC_EXPERIMENTS": "event_engine_listener"}


def test_the_entry_point_imports_grpc_only_after_setting_the_environment():
    probe = "import sys, serving.server.__main__; print('grpc' in sys.modules)"
    result = subprocess.run([sys.executable, "-c", probe], cwd=REPO_ROOT, capture_output=True, text=True,
                            timeout=120, check=True)
    assert result.stdout.strip() == "False"
