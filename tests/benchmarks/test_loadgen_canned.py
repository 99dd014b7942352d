"""The load-generator benchmark's canned REST servicer: the far end the locust REST user is timed against."""
from __future__ import annotations

import json
import os
import urllib.request

from benchmarks.loadgen import CannedServer


def test_canned_rest_servicer_answers_any_predict_with_a_predict_body():
    with CannedServer(set(os.sched_getaffinity(0)), rest=True) as canned:
        assert canned.address.startswith("http://127.0.0.1:")
        request = urllib.request.Request(f"{canned.address}/v1/models/anything:predict", data=b"not even json",
                                         headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(request, timeout=30) as response:
            assert response.status == 200
            assert json.loads(response.read()) == {"predictions": [[0.1] * 10]}
