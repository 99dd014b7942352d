"""Request capture on ``make up IMAGES=local``'s compose stack: the gateway's mirror and the capture service.

A stack of its own (capture is off in the session's stack, as in ``.env``), started as a user starts it
with ``CAPTURE=on CAPTURE_RATE=0.1``: the repository's compose files, the local stand-in images, and the
``capture`` service built by compose from deploy/images/capture/Dockerfile. Traffic goes through the
gateway for 60 s at a stated rate (REST and gRPC Predict of real digits rows, 20 requests/s each, the
loadtest key). Then:

- the records written are within 2 % of 10 % of the Predict requests the gateway's access log counted
  (the systematic sampler keeps floor(n/10) of the n copies it received: exact unless copies were lost);
- every record parses with TF Serving's official ``prediction_log_pb2``, and carries a request id that
  the access log has;
- the capture, replayed by ``python -m serving.rollout analyze --inputs CAPTURE``, FAILs a canary whose
  classes are shuffled and PASSes an identical copy of the stable version.

Runs under ``flock /tmp/tfs-engine.lock`` like every engine test (RULES). TF Serving itself is the embedded
server's stand-in image here: real TF Serving behind the gateway never ran on this machine.
"""
from __future__ import annotations

import json
import math
import shutil
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from benchmarks.capture_gateway import LoadResult, drive
from exporter.manifest import load_manifest
from serving.capture import read_capture
from serving.capture._tfrecord import iter_records
from tests.support.compose_stack import (
    EXPORTED_IN_CONTAINER,
    PROJECT,
    Stack,
    docker,
    running_stack,
    skip_reason,
)

# Minutes on a busy 2-core machine: the image builds, the exports and warmup of make up, then 60 s of load.
pytestmark = [pytest.mark.docker, pytest.mark.slow, pytest.mark.timeout(2400)]

MODEL = EXPORTED_IN_CONTAINER
SECONDS = 60.0
RATE_PER_PROTOCOL = 20.0          # requests/s, REST and gRPC each: 40 requests/s through the gateway
CAPTURE_RATE = 0.1


@pytest.fixture(scope="module")
def capture_stack(tmp_path_factory: pytest.TempPathFactory, cpu_stack_repo: Path) -> Iterator[Stack]:
    reason = skip_reason()
    if reason:
        pytest.skip(reason)
    with running_stack(tmp_path_factory.mktemp("e2e-capture") / "tfs-stack", cpu_stack_repo, f"{PROJECT}-capture",
                       CAPTURE="on", CAPTURE_RATE=str(CAPTURE_RATE)) as made:
        yield made


def gateway_predictions(stack: Stack) -> list[dict]:
    """The gateway's access-log entries of Predict calls (REST and gRPC), from its container's stdout."""
    out = stack.compose("logs", "--no-color", "--no-log-prefix", "gateway").stdout
    entries = []
    for raw in out.splitlines():
        line = raw.strip()
        if line.startswith("{"):
            entry = json.loads(line)
            if entry["uri"].endswith((f"/{MODEL}:predict", ".PredictionService/Predict")):
                entries.append(entry)
    return entries


def capture_stats(stack: Stack) -> dict:
    code = "import urllib.request as u; print(u.urlopen('http://127.0.0.1:8080/stats', timeout=5).read().decode())"
    return json.loads(docker("exec", stack.container("capture"), "python", "-c", code).stdout)


@pytest.fixture(scope="module")
def captured(capture_stack: Stack, tmp_path_factory) -> dict:
    """60 s of traffic through the gateway, then the capture service stopped (its files closed) and its
    volume copied out."""
    stack = capture_stack
    stable = stack.root / "models" / MODEL / "1"
    images = load_manifest(stable).golden_inputs("serving_default")["images"]
    results: dict[str, LoadResult] = {}

    def run(protocol: str) -> None:
        results[protocol] = drive(protocol, rest_url=stack.rest_url, grpc_target=stack.grpc_target,
                                  ca=stack.secrets.ca_cert, api_key=stack.secrets.api_key("loadtest"),
                                  concurrency=4, seconds=SECONDS, rate=RATE_PER_PROTOCOL, images=images)
    threads = [threading.Thread(target=run, args=(p,)) for p in ("rest", "grpc")]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    stats = capture_stats(stack)
    stack.compose("stop", "--timeout", "20", "capture")    # SIGTERM: the open file is closed and renamed
    out = tmp_path_factory.mktemp("captured")
    docker("cp", f"{stack.container('capture')}:/var/lib/capture", str(out))
    entries = gateway_predictions(stack)
    for protocol, result in results.items():
        print(f"{protocol}: {result.ok} answered, {result.failed} failed in {result.seconds:.1f} s "
              f"({result.rate:.1f}/s), p50 {result.p50_ms:.1f} ms")
    print(f"gateway access log: {len(entries)} Predict requests; capture service: {stats}")
    return {"results": results, "stats": stats, "dir": out / "capture", "entries": entries}


def test_ten_percent_of_60_s_of_gateway_traffic_is_captured_within_2_percent(captured):
    results, entries, stats = captured["results"], captured["entries"], captured["stats"]
    assert all(r.failed == 0 for r in results.values()), {p: r.errors for p, r in results.items()}
    answered = sum(r.ok for r in results.values())
    assert answered >= 0.9 * 2 * RATE_PER_PROTOCOL * SECONDS, answered     # the stated rate was held
    logged = len(entries)
    assert logged == answered
    records = list(read_capture(captured["dir"]))
    expected = CAPTURE_RATE * logged
    print(f"captured {len(records)} of {logged} logged requests: {len(records) / logged:.4%} "
          f"(target {CAPTURE_RATE:.0%}; floor(n x rate) = {math.floor(expected)}; service counters {stats})")
    assert abs(len(records) - expected) <= 0.02 * expected, (len(records), expected, stats)


def test_every_record_parses_with_tf_servings_own_protos_and_names_a_logged_request(captured):
    from tensorflow_serving.apis import prediction_log_pb2

    files = sorted(Path(captured["dir"]).glob("*.tfrecord"))
    assert files, list(Path(captured["dir"]).iterdir())
    assert not list(Path(captured["dir"]).glob("*.part"))
    logged_ids = {e["request_id"] for e in captured["entries"]}
    count = 0
    for path in files:
        with open(path, "rb") as stream:
            for _, data in iter_records(stream, path):
                log = prediction_log_pb2.PredictionLog()
                log.ParseFromString(data)
                assert log.WhichOneof("log_type") == "predict_log"
                assert log.log_metadata.model_spec.name == MODEL
                assert log.log_metadata.model_spec.signature_name == "serving_default"
                assert log.log_metadata.request_origin == "gateway"
                assert log.predict_log.request.inputs["images"].tensor_shape.dim[0].size == 1
                count += 1
    records = list(read_capture(captured["dir"]))
    assert count == len(records) > 0
    assert {r.request_id for r in records} <= logged_ids


@pytest.fixture(scope="module")
def versions(capture_stack: Stack, tmp_path_factory) -> dict[str, int]:
    from tests.rollout.v2_models import build_wrapped

    stack = capture_stack
    repo = stack.root / "models" / MODEL
    built = tmp_path_factory.mktemp("capture-versions")
    shutil.copytree(repo / "1", built / "identical")
    build_wrapped(repo / "1", built / "shuffled", "shuffled")
    newest = max(int(p.name) for p in repo.iterdir() if p.name.isdigit())
    numbers = {"identical": newest + 1, "shuffled": newest + 2}
    for name, number in numbers.items():
        proc = stack.python("-m", "serving.rollout", "publish", "--from", str(built / name), "--model", MODEL,
                            "--version", str(number), timeout=900)
        assert proc.returncode == 0, proc.stdout + proc.stderr
    return numbers


@pytest.mark.parametrize("kind,code,verdict", [("shuffled", 1, "FAIL"), ("identical", 0, "PASS")])
def test_the_capture_replayed_by_analyze_fails_shuffled_classes_and_passes_an_identical_copy(
        capture_stack, captured, versions, kind, code, verdict):
    stack = capture_stack
    canary = stack.python("-m", "serving.rollout", "canary", MODEL, str(versions[kind]), timeout=900)
    assert canary.returncode == 0, canary.stdout + canary.stderr
    try:
        proc = stack.python("-m", "serving.rollout", "analyze", MODEL, "--inputs", str(captured["dir"]), timeout=900)
        print(f"\n$ python -m serving.rollout analyze {MODEL} --inputs CAPTURE (exit {proc.returncode})\n"
              f"{proc.stdout}{proc.stderr}")
    finally:
        rollback = stack.python("-m", "serving.rollout", "rollback", MODEL, timeout=900)
        assert rollback.returncode == 0, rollback.stdout + rollback.stderr
    assert f"{MODEL}: {verdict}" in proc.stdout, proc.stdout + proc.stderr
    assert proc.returncode == code
