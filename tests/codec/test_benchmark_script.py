"""benchmarks/codec.py runs and compares equal work (speed itself is never asserted in tests)."""
from __future__ import annotations

import json
import subprocess
import sys

from serving.checkout import REPO_ROOT



def test_benchmark_prints_all_ratios_for_the_same_message_as_tensorflow():
    done = subprocess.run([sys.executable, "-m", "benchmarks.codec", "--batch", "1", "--repeats", "1",
                           "--rest-repeats", "1"], cwd=REPO_ROOT, capture_output=True, text=True, timeout=300,
                          env={"TF_CPP_MIN_LOG_LEVEL": "2", "PATH": "/usr/bin:/bin"})
    assert done.returncode in (0, 1), done.stderr
    result = json.loads(done.stdout)
    assert result["shape"] == [1, 224, 224, 3]
    assert result["same_message_as_tf"] is True
    for key in ("encode_over_copy", "decode_over_copy", "tf_encode_over_encode", "stdlib_json_over_codec_json"):
        assert result[key] > 0
