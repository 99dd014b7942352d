"""The embedded server beside the Python servers a user would pick instead, in interleaved rounds.

Each server serves the same SavedModel, one model at a time, restarted every round:

- the embedded server (``python -m serving.server``, through ``serving.launcher``),
  without and with batching (``--batching-config``, default ``serving/batching.cpu.config``);
- the peers, each running its idiomatic app (``benchmarks/peer_apps/``) in its own virtual
  environment under ``.cache/peers/<name>/`` that this benchmark builds at pinned versions (with the
  same ``tensorflow-cpu`` and numpy pins): "Flask + model.predict()" under gunicorn (8 threads,
  1 worker and 2 workers), FastAPI under uvicorn, KServe 0.15's Python ``ModelServer``. The
  first build downloads TensorFlow for each environment: minutes. A peer that cannot be installed
  or started is skipped, and the report says why;
- real TF Serving in Docker: the compose CPU variant's image (``serving.stack.docker.tfserving_image``)
  through ``serving.stack.docker.run_tf_serving``, skipped with the reason where no engine answers or
  the image is not present locally (never pulled);
- the in-process ceiling: the SavedModel loaded as the server loads it, at batch 1 and 8
  (``benchmarks.server.measure_in_process``).

Every load is ``loadtest.driver``'s closed loop: one neutral raw REST client for every server (TF
Serving REST bodies of one example, one keep-alive connection per client) at concurrency 1 and a high
one (32; 8 for resnet50), raw gRPC on the embedded server, and ``serving.client``'s ``GrpcClient``
and ``RestClient`` for the SDK comparison. Per point: requests/s, p50/p99, and the server's CPU-ms
per request (its process tree, ``loadtest.procfs``). Per server start: cold start (process start to
the first successful answer) and RSS after warmup. Each peer's answer is checked against the
embedded server's before it is timed.

The parts: ``envs`` (the peers' venvs), ``processes`` (starting and checking a peer),
``scenarios`` (servers x loads, one round at a time), ``measurements`` (what a run recorded, typed;
``--json`` writes it), ``report`` (a pure function of the measurements: medians over the rounds with
their spread, the ratios and the targets of ``benchmarks.targets``; exit status 1 when one is
missed), ``cli``.

    python -m benchmarks.peers                                  # both models, every peer (tens of minutes)
    python -m benchmarks.peers --models digits --rounds 3 --peers flask-1w,fastapi
    python -m benchmarks.peers --quick --json /tmp/peers.json   # one short round
    python -m benchmarks.peers --render /tmp/peers.json         # the report of a recorded run
"""
from benchmarks.peers.cli import build_parser, main
from benchmarks.peers.envs import PEERS, VENV_ROOT, PeerSpec, PeerUnavailable, ensure_venv
from benchmarks.peers.measurements import Measurements, Point, ServerRecord
from benchmarks.peers.processes import PeerProcess, answers_agree, launch_peer, wait_for_answer
from benchmarks.peers.report import comparable_series, evaluate, exit_code, render
from benchmarks.peers.scenarios import TODAY_RESNET50_REST_C1, measure_point

__all__ = ["PEERS", "TODAY_RESNET50_REST_C1", "VENV_ROOT", "Measurements", "PeerProcess", "PeerSpec",
           "PeerUnavailable", "Point", "ServerRecord", "answers_agree", "build_parser", "comparable_series",
           "ensure_venv", "evaluate", "exit_code", "launch_peer", "main", "measure_point", "render",
           "wait_for_answer"]
