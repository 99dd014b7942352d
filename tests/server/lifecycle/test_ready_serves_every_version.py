"""A server the launcher calls ready answers every version its config serves, not only the newest.

The server answers once each model's newest version is AVAILABLE (TF Serving's ``WaitUntilModelsAvailable``
waits for ``Latest(model)``); versions load one at a time (the crash quarantine's load lock), newest
first, so a config serving digits 1, 2 and 3 is up with 3 while 2 and 1 still load. The launcher's
readiness (``serving.launcher.model_available``, what ``make up``, the load tests and the test
fixtures wait on) waits until no version is still loading: the first request to version 1 right after
``start()`` is answered, not NOT_FOUND (the canary-analysis test met NOT_FOUND on its first stable requests).
"""
from __future__ import annotations

import json
import shutil
import threading
import urllib.error
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from serving.launcher import ServerProcess, model_available

MODEL = "digits"


@pytest.mark.slow   # starts a server process that loads three SavedModels
def test_the_first_request_after_ready_reaches_the_oldest_served_version(model_repo, tmp_path):
    base = tmp_path / "models" / MODEL
    for version in (1, 2, 3):
        shutil.copytree(model_repo / MODEL / "1", base / str(version))
    config = tmp_path / "models.config"
    config.write_text(
        f"model_config_list {{ config {{ name: '{MODEL}' base_path: '{base}' model_platform: 'tensorflow' "
        "model_version_policy { specific { versions: 1 versions: 2 versions: 3 } } "
        "version_labels { key: 'stable' value: 1 } } }\n")
    flags = [f"--model_config_file={config}", "--allow_version_labels_for_unavailable_models=true",
             f"--quarantine_dir={tmp_path / 'quarantine'}"]
    with ServerProcess(flags, wait_for=[MODEL], log_path=tmp_path / "server.log", timeout=240) as server:
        with urllib.request.urlopen(f"{server.rest_url}/v1/models/{MODEL}", timeout=30) as response:
            states = {int(v["version"]): v["state"] for v in json.loads(response.read())["model_version_status"]}
        body = json.dumps({"instances": [[[[0.0]] * 8] * 8]}).encode()   # one 8x8x1 image
        answers = {}
        for path in ("versions/1", "labels/stable"):
            request = urllib.request.Request(f"{server.rest_url}/v1/models/{MODEL}/{path}:predict", data=body)
            try:
                with urllib.request.urlopen(request, timeout=30) as response:
                    answers[path] = response.status
            except urllib.error.HTTPError as exc:
                answers[path] = f"{exc.code} {exc.read()[:200]!r}"
    assert states == {1: "AVAILABLE", 2: "AVAILABLE", 3: "AVAILABLE"}, "ready while versions still loaded"
    assert answers == {"versions/1": 200, "labels/stable": 200}


class _Status(BaseHTTPRequestHandler):
    states: tuple[str, ...] = ()  # each test's subclass sets its own

    def do_GET(self):  # noqa: N802 - http.server's name
        body = json.dumps({"model_version_status": [
            {"version": str(i + 1), "state": s} for i, s in enumerate(self.states)]}).encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


@pytest.mark.parametrize("states, ready", [
    (["AVAILABLE"], True),
    (["LOADING", "AVAILABLE", "AVAILABLE"], False),   # the newest serves, the oldest still loads
    (["START", "LOADING", "AVAILABLE"], False),
    (["END", "AVAILABLE"], True),                      # a failed version has settled (its error is in the status)
    (["AVAILABLE", "UNLOADING"], True),                # an old version leaving does not make the model unready
    (["LOADING"], False),
    (["END"], False),
])
def test_a_model_is_ready_once_no_version_is_still_loading(states, ready):
    handler = type("Handler", (_Status,), {"states": states})
    with ThreadingHTTPServer(("127.0.0.1", 0), handler) as http:
        thread = threading.Thread(target=http.serve_forever, daemon=True)
        thread.start()
        try:
            assert model_available(f"http://127.0.0.1:{http.server_address[1]}", MODEL) is ready
        finally:
            http.shutdown()
            thread.join()
