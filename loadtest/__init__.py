"""Load tests for TF Serving: locust scenarios with SLO gates, perf_analyzer-style sweeps, a batching tuner.

``python -m loadtest run|sweep|tune``; see ``loadtest/README.md``. Importing
this package (or any module but ``users``/``shapes``, which only locustfiles
import) never imports locust or gevent.

Default paths (the model repository, output directories) are anchored on the
checkout, ``REPO_ROOT``, not on the current directory.
"""

from serving.checkout import REPO_ROOT

__all__ = ["DEFAULT_MODEL_REPO"]

DEFAULT_MODEL_REPO = REPO_ROOT / "models"
