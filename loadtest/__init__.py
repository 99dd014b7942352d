"""Load tests for TF Serving: locust scenarios with SLO gates, perf_analyzer-style sweeps, a batching tuner.

``python -m loadtest run|sweep|tune``; see ``loadtest/README.md``. Importing
this package (or any module but ``users``/``shapes``, which only locustfiles
import) never imports locust or gevent.
"""
__all__: list[str] = []
