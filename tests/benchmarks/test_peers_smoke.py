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

The embedded server (the real one, through ``serving.server.launcher``) answers the same body
first; each peer's outputs must equal its outputs within the model's manifest tolerance.
Timed targets are the benchmark's business, not this test's: nothing here is timed.
"""
from __future__ import annotations

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
from serving.server.launcher import ServerProcess

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


@pytest.mark.parametrize("name", [BUILT_HERE, "fastapi", "kserve"])
def test_peer_answers_one_predict_like_the_embedded_server(name: str, digits, tmp_path: Path):
    if name == BUILT_HERE:
        ensure_venv(PEERS[name])
    elif not _venv_ready(name):
        pytest.skip(f"no venv for {name} in {VENV_ROOT} (python -m benchmarks.peers --peers {name} builds it; "
                    f"this test builds only {BUILT_HERE}'s, to keep make test short)")
    version_dir, body, reference = digits
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
