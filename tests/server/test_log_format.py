"""``--log_format=json``: the real server's log is one JSON object per line; the default keeps TF Serving's text."""
from __future__ import annotations

import io
import json
import logging
import re
import subprocess
import sys
from pathlib import Path

import grpc
import pytest
from tensorflow_serving.apis import prediction_service_pb2_grpc

from serving.checkout import REPO_ROOT
from serving.launcher import ServerProcess
from serving.server.logs import JsonFormatter
from tests.support.security.attacks import HIGH_CAP_FLAGS, broadcast_request, napping_repo, start_server

TEXT_LINE = re.compile(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d{3} [IWEC] \S+\] ")
KEYS = {"time", "level", "logger", "message"}


def _records(log_path: Path) -> list[dict]:
    lines = [line for line in Path(log_path).read_text().splitlines() if line.strip()]
    records = [json.loads(line) for line in lines]  # every line is one JSON object, or this raises
    assert all(KEYS <= set(r) for r in records), records
    return records


@pytest.mark.slow
def test_json_log_is_one_object_per_line_with_the_request_id_of_an_internal_error(tmp_path):
    repo = napping_repo(tmp_path / "models")
    # the high element cap lets numpy fail on a 768 GiB tensor: INTERNAL with a request id, logged
    server = start_server(repo, tmp_path / "server", [*HIGH_CAP_FLAGS, "--log_format=json",
                                                      "--enable_profiler=false"])
    try:
        stub = prediction_service_pb2_grpc.PredictionServiceStub(grpc.insecure_channel(server.grpc_target))
        with pytest.raises(grpc.RpcError) as failure:
            stub.Predict(broadcast_request({"x": [2**36, 3]}, (1.0, 2.0)), timeout=30)
    finally:
        assert server.stop() == 0
    assert failure.value.code() == grpc.StatusCode.INTERNAL
    request_id = re.search(r"request id ([0-9a-f]{16})", failure.value.details()).group(1)
    records = _records(server.log_path)
    messages = [r["message"] for r in records]
    assert any(m.startswith("Running gRPC ModelServer at") for m in messages), messages
    assert any(m.startswith("Exporting HTTP/REST API at") for m in messages)
    assert "Received SIGTERM; draining" in messages and "Server stopped" in messages
    # a no-effect flag's warning is a record of its own, with its level and logger
    profiler, = (r for r in records if "--enable_profiler" in r["message"])
    assert profiler["level"] == "WARNING" and profiler["logger"] == "serving.server.flags"
    failed, = (r for r in records if r.get("request_id") == request_id)
    assert failed["level"] == "ERROR" and "MemoryError" in failed["exception"]
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z", failed["time"])


@pytest.mark.slow
def test_default_log_keeps_tf_servings_text_lines(model_repo, tmp_path):
    with ServerProcess.for_models({"digits": model_repo / "digits"}, workdir=tmp_path) as server:
        pass
    lines = [line for line in Path(server.log_path).read_text().splitlines() if line.strip()]
    ours = [line for line in lines if TEXT_LINE.match(line)]
    assert any("Running gRPC ModelServer at" in line for line in ours), lines
    assert not any(line.startswith("{") for line in lines)


def test_a_log_format_other_than_text_or_json_is_refused_at_start():
    out = subprocess.run([sys.executable, "-m", "serving.server", "--model_base_path=/nonexistent",
                          "--log_format=yaml"], cwd=REPO_ROOT, capture_output=True, text=True, timeout=120)
    assert out.returncode == 255
    assert "--log_format must be one of text, json, not 'yaml'." in out.stderr


def test_json_formatter_escapes_newlines_and_keeps_one_line_per_record():
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.setFormatter(JsonFormatter())
    logger = logging.getLogger("serving.test.log_format")
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    try:
        logger.warning("two\nlines", extra={"request_id": "abc"})
        logger.info("no id")
    finally:
        logger.removeHandler(handler)
        logger.setLevel(logging.NOTSET)
    first, second = (json.loads(line) for line in stream.getvalue().splitlines())
    assert first == {"time": first["time"], "level": "WARNING", "logger": "serving.test.log_format",
                     "message": "two\nlines", "request_id": "abc"}
    assert "request_id" not in second and second["level"] == "INFO"


def test_native_stderr_lines_become_json_records_with_their_level_and_source():
    # C++ code (TensorFlow, gRPC core) writes straight to fd 2; os.write stands for it here
    script = (
        "import os, logging\n"
        "from serving.server.logs import NativeStderrAsJson, configure_logging\n"
        "with NativeStderrAsJson() as stream:\n"
        "    configure_logging('json', stream)\n"
        "    os.write(2, b'E1201 01:17:35.073265    4414 posix_engine_listener.cc:186] Closing acceptor.\\n')\n"
        "    os.write(2, b'plain line from C\\n')\n"
        "    logging.getLogger('py').info('from python')\n"
    )
    out = subprocess.run([sys.executable, "-c", script], cwd=REPO_ROOT, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    records = [json.loads(line) for line in out.stderr.splitlines()]
    native = [r for r in records if r["logger"] == "native"]
    assert {"level": "ERROR", "message": "Closing acceptor.", "source": "posix_engine_listener.cc:186"}.items() \
        <= native[0].items()
    assert native[1]["level"] == "WARNING" and native[1]["message"] == "plain line from C"
    assert any(r["logger"] == "py" and r["message"] == "from python" for r in records)
