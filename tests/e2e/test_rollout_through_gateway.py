"""The project's own tools against ``make up IMAGES=local``'s compose stack, with no flags beyond the model.

Through the TLS gateway, with the keys and limits of the default ``.env``,
every command finds the stack by itself (``stack.json`` and ``gateway/secrets``,
``serving.stack.endpoint``): ``python -m loadtest run steady`` and ``sweep``
load it with the ``loadtest`` credential (its own limits: the load measures
TF Serving, not the limiter); ``python -m serving.rollout analyze`` PASSes an
identical copy of the stable version and FAILs one with its classes shuffled;
``auto`` promotes the copy and rolls the shuffled one back. The versions are
published into the stack's model repository by ``serving.rollout publish``
(the shuffled one is built with host TensorFlow: ``tests.rollout.v2_models``).

Runs on the session's stack (conftest.py) after tests/e2e/test_compose_stack.py.
"""
from __future__ import annotations

import json
import shutil

import pytest

from serving.client import GrpcClient
from serving.config import load_model_server_config
from serving.config.served_config import STATE_FILE, read_state
from serving.rollout.plan import find_model
from tests.rollout.v2_models import build_wrapped
from tests.support.compose_stack import EXPORTED_IN_CONTAINER, Stack

pytestmark = [pytest.mark.docker, pytest.mark.slow]

MODEL = EXPORTED_IN_CONTAINER


def tool(stack: Stack, module: str, *args: str, timeout: float = 900):
    proc = stack.python("-m", module, *args, timeout=timeout)
    print(f"\n$ python -m {module} {' '.join(args)}  (exit {proc.returncode})\n{proc.stdout}{proc.stderr}")
    return proc


def labels(stack: Stack) -> dict[str, int]:
    state = read_state(stack.work_dir / STATE_FILE)
    return dict(find_model(load_model_server_config(state.models_config), MODEL).version_labels)


def stable_label_version(stack: Stack) -> int:
    """The version behind ``stable``, as the gateway serves it (the SDK, the client key)."""
    with GrpcClient(stack.grpc_target, root_certificates=stack.secrets.ca_cert,
                    api_key=stack.secrets.api_key("client")) as sdk:
        return sdk.metadata(MODEL, label="stable").version


@pytest.fixture(scope="module")
def versions(stack: Stack, tmp_path_factory) -> dict[str, int]:
    """Four new versions of digits in the stack's repository: identical copies of stable and shuffled ones."""
    repo = stack.root / "models" / MODEL
    stable = labels(stack).get("stable") or max(int(p.name) for p in repo.iterdir() if p.name.isdigit())
    built = tmp_path_factory.mktemp("e2e-versions")
    shutil.copytree(repo / str(stable), built / "identical")
    build_wrapped(repo / str(stable), built / "shuffled", "shuffled")
    newest = max(int(p.name) for p in repo.iterdir() if p.name.isdigit())
    numbers = {"analyze identical": newest + 1, "analyze shuffled": newest + 2, "auto shuffled": newest + 3,
               "auto identical": newest + 4}
    for name, number in numbers.items():
        proc = tool(stack, "serving.rollout", "publish", "--from", str(built / name.split()[1]), "--model", MODEL,
                    "--version", str(number))
        assert proc.returncode == 0, proc.stdout + proc.stderr
    return numbers


def test_loadtest_run_with_no_flags_measures_the_server_not_the_limiter(stack, tmp_path):
    proc = tool(stack, "loadtest", "run", "steady", "--model", MODEL, "--run-time", "10s", "--out", str(tmp_path))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    summary = json.loads((tmp_path / "steady_grpc_summary.json").read_text())
    assert summary["requests"] > 0
    assert summary["failures_by_class"] == {"gateway_limited": 0, "server": 0}, summary["failures_by_error"]
    assert "the loadtest key" in proc.stdout
    assert stack.secrets.api_key("loadtest") not in proc.stdout + proc.stderr


def test_loadtest_sweep_with_no_flags_sweeps_the_stack(stack, tmp_path):
    proc = tool(stack, "loadtest", "sweep", "--model", MODEL, "--concurrency", "1,4", "--window", "1",
                "--stable-windows", "2", "--max-level-time", "6", "--out", str(tmp_path))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    series = json.loads((tmp_path / "sweep.json").read_text())["series"]
    assert [s["protocol"] for s in series] == ["grpc"]
    assert series[0]["limiter_began_at"] is None  # the loadtest credential's limit is not reached
    assert all(level["errors"] == 0 for level in series[0]["levels"])


@pytest.mark.parametrize("kind,code,verdict", [("identical", 0, "PASS"), ("shuffled", 1, "FAIL")])
def test_analyze_with_no_flags_judges_the_canary_through_the_gateway(stack, versions, kind, code, verdict):
    version = versions[f"analyze {kind}"]
    stable = labels(stack)["stable"] if "stable" in labels(stack) else None
    assert tool(stack, "serving.rollout", "canary", MODEL, str(version)).returncode == 0
    try:
        proc = tool(stack, "serving.rollout", "analyze", MODEL)
    finally:
        assert tool(stack, "serving.rollout", "rollback", MODEL).returncode == 0
    assert f"{MODEL}: {verdict}" in proc.stdout, proc.stdout + proc.stderr
    assert proc.returncode == code
    assert labels(stack).get("stable") == (stable or labels(stack)["stable"])


def test_auto_with_no_flags_rolls_a_shuffled_version_back(stack, versions):
    stable = stable_label_version(stack)
    proc = tool(stack, "serving.rollout", "auto", MODEL, str(versions["auto shuffled"]))
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert f"{MODEL}: version {versions['auto shuffled']} rolled back" in proc.stdout
    assert stable_label_version(stack) == stable


def test_auto_with_no_flags_promotes_an_identical_copy(stack, versions):
    proc = tool(stack, "serving.rollout", "auto", MODEL, str(versions["auto identical"]), timeout=1200)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert f"{MODEL}: version {versions['auto identical']} promoted" in proc.stdout
    assert stable_label_version(stack) == versions["auto identical"]
