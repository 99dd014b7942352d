"""benchmarks/rest_decode.py runs both decoders on the same body and reports that they agree (speed is not asserted)."""
from __future__ import annotations

import json
import subprocess
import sys

from serving.checkout import REPO_ROOT



def test_benchmark_reports_both_decoders_frozen_and_not_on_the_same_tensor():
    done = subprocess.run([sys.executable, "-m", "benchmarks.rest_decode", "--shape", "32,32,3", "--repeats", "2",
                           "--heap", "1000"], cwd=REPO_ROOT, capture_output=True, text=True, timeout=120,
                          env={"PATH": "/usr/bin:/bin"})
    assert done.returncode in (0, 1), done.stderr
    result = json.loads(done.stdout)
    assert result["shape"] == [1, 32, 32, 3] and result["same_tensors"] is True
    for key in ("lists_ms", "dense_ms", "lists_frozen_ms", "dense_frozen_ms", "dense_over_lists_frozen",
                "frozen_over_collected_lists"):
        assert result[key] > 0
    assert result["targets_met"] is (done.returncode == 0)
