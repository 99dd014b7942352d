"""serving.capture's public names are pinned: other parts of the stack import them."""
from __future__ import annotations

import serving.capture


def test_public_api_is_pinned():
    assert sorted(serving.capture.__all__) == sorted([
        "CaptureError", "CaptureRecord", "CaptureStats", "CaptureWriter", "METHODS", "SystematicSampler", "capture_files", "is_capture", "prediction_log", "read_capture",
    ])
    for name in serving.capture.__all__:
        assert getattr(serving.capture, name) is not None


def test_importing_capture_loads_no_tensorflow():
    import subprocess
    import sys

    code = "import sys, serving.capture; print('tensorflow' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"
