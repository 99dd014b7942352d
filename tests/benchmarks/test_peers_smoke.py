"""Each peer of ``benchmarks.peers`` answers one real Predict, and agrees with the embedded server.

Which peers run here, and why. The benchmark installs each peer into its own venv under
``.cache/peers/`` with TensorFlow (about 600 MB installed, 1-3 minutes each with a warm pip
cache, much longer from a cold one), and ``make test`` must stay well under 20 minutes on a
clean clone. So this test:

- builds ONE peer venv for real, Flask + gunicorn (the lightest framework), through the
  benchmark's own installer (``ensure_venv``), so the install path is tested too; a clean
  clone pays for it once, later runs reuse it;
- checks FastAPI and KServe only where their venvs already exist with the current pins (built
  by ``python -m benchmarks.peers``), and skips each otherwise, saying how to build it.

The embedded server (the real one, through ``serving.launcher``) answers the same body
first; each peer's outputs must equal its outputs within the model's manifest tolerance. One
short ``--quick`` run of the whole benchmark (digits, the Flask peer) checks its wiring, and
checks the Flask peer's answer that way: the benchmark times a peer only after its answer agreed
with the embedded server's, which answers first in the first round (a peer that differs is
skipped, and the test asserts it was not), so Flask is not started a second time here.
Timed targets are the benchmark's business, not this test's: nothing here is timed.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from benchmarks.peers import (
    PEERS,
    VENV_ROOT,
    answers_agree,
    ensure_venv,
    launch_peer,
    wait_for_answer,
)
from exporter.manifest import load_manifest
from serving import codec
from serving.checkout import REPO_ROOT
from serving.launcher import ServerProcess

pytestmark = pytest.mark.slow

BUILT_HERE = "flask-1w"


@pytest.fixture(scope="module")
def digits(model_repo: Path, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, bytes, bytes]:
    """(version dir, REST body of one example, the embedded server's answer to it)."""
    version_dir = model_repo / "digits" / "1"
    body = codec.inputs_to_rest_request(load_manifest(version_dir).sample_inputs(batch_size=1))
    workdir = tmp_path_factory.mktemp("embedded")
    with ServerProcess.for_models({"digits": model_repo / "digits"}, workdir=workdir) as server:
        answer = wait_for_answer(server.rest_url, "digits", body, 60, server.running)
    return version_dir, body, answer


def _venv_ready(name: str) -> bool:
    spec = PEERS[name]
    stamp = VENV_ROOT / spec.venv / "peer-requirements.txt"
    return stamp.exists() and stamp.read_text() == spec.pinned()


@pytest.mark.parametrize("name", ["fastapi", "kserve"])
def test_peer_answers_one_predict_like_the_embedded_server(name: str, request: pytest.FixtureRequest,
                                                           tmp_path: Path):
    if not _venv_ready(name):
        pytest.skip(f"no venv for {name} in {VENV_ROOT} (python -m benchmarks.peers --peers {name} builds it; "
                    f"this test builds only {BUILT_HERE}'s, to keep make test short)")
    version_dir, body, reference = request.getfixturevalue("digits")  # the embedded server, only when needed
    peer, _ = launch_peer(name, "digits", version_dir, tmp_path)
    try:
        answer = wait_for_answer(peer.rest_url, "digits", body, 300, peer.running)
    except (RuntimeError, TimeoutError) as error:
        pytest.fail(f"{name} did not answer: {error}\n{peer.log_tail()}")
    finally:
        peer.stop()
    tolerance = load_manifest(version_dir).tolerance
    assert answers_agree(reference, answer, tolerance["atol"], tolerance["rtol"]) is None
    assert codec.rest_response_to_outputs(answer)  # a real output, not an empty list


def test_a_quick_run_measures_every_figure_the_report_needs(model_repo: Path, tmp_path: Path):
    """The whole benchmark, once, short (``--quick``), on digits with the one peer built above: the
    measurements it records are the ones ``render`` reads. Its exit status is the targets', which a
    short run on a shared machine may miss either way: only 0 or 1 is asserted."""
    ensure_venv(PEERS[BUILT_HERE])
    out = tmp_path / "peers.json"
    done = subprocess.run([sys.executable, "-m", "benchmarks.peers", "--quick", "--models", "digits",
                           "--peers", BUILT_HERE, "--model-repo", str(model_repo), "--json", str(out)],
                          cwd=REPO_ROOT, env={**os.environ, "PYTHONPATH": str(REPO_ROOT)},
                          capture_output=True, text=True, timeout=900)
    assert done.returncode in (0, 1), done.stdout[-3000:] + done.stderr[-3000:]
    measured = json.loads(out.read_text())
    servers = measured["servers"]["digits"]
    assert set(servers) == {"embedded", "embedded+batching", BUILT_HERE}, measured.get("skipped")
    assert {"rest c=1", "rest c=32", "grpc c=1", "grpc c=32", "sdk-grpc c=32", "sdk-rest c=32"} \
        == set(servers["embedded"]["points"])
    assert f"{BUILT_HERE}/digits" not in measured["skipped"]   # its answer agreed with the embedded server's
    assert set(servers[BUILT_HERE]["points"]) == {"rest c=1", "rest c=32"}   # timed only after it agreed
    for entry in servers.values():
        assert entry["cold_start_s"][0] > 0 and entry["rss_mb"][0] > 100
        for (point,) in entry["points"].values():
            assert point["requests"] > 0 and point["cpu_ms"] > 0, point
    assert set(measured["in_process"]["digits"]) == {"b1 t1", f"b1 t{measured['machine']['cores']}",
                                                    "b8 t1", f"b8 t{measured['machine']['cores']}"}
    assert f"embedded / peer, rest c=1 (req/s): {BUILT_HERE}" in done.stdout
