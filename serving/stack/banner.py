"""What ``make up`` prints: progress lines, and the banner saying how to call, watch and stop the stack.

Progress lines are ``make up [  12 s] ...`` (seconds since the start). The
banner names the addresses, the batching settings the server runs with and
the file they come from, where the server's log is, how to activate the
venv the example commands need, and how to stop (``make down``).
"""
from __future__ import annotations

import time
from pathlib import Path
from typing import Optional, Sequence

from serving.config import load_batching_parameters
from serving.model_repo import model_versions

__all__ = ["say", "batching_summary", "print_usage", "print_gateway_usage"]

ACTIVATE = "source .venv/bin/activate"
STOP = "Stop: make down (python -m serving.stack down)"
# BatchingParameters fields the banner names, in this order, when the file sets them.
SHOWN_FIELDS = ("max_batch_size", "batch_timeout_micros", "max_enqueued_batches", "num_batch_threads",
                "allowed_batch_sizes")


def say(started: float, message: str) -> None:
    """One progress line: the seconds since ``started`` (``time.monotonic()``) and ``message``."""
    print(f"make up [{time.monotonic() - started:5.0f} s] {message}", flush=True)


def _flag(args: Sequence[str], name: str) -> Optional[str]:
    for item in args:
        flag, sep, value = item.partition("=")
        if flag == f"--{name}":
            return value if sep else "true"
    return None


def batching_summary(args: Sequence[str], root: Path) -> str:
    """``batching: <the settings>, from <file>`` for server flags ``args`` (host paths), or that it is off.

    The settings are the ``BatchingParameters`` of ``--batching_parameters_file``
    (a path under ``root`` is shown relative to it); without ``--enable_batching``
    each request runs alone, whatever its size.
    """
    if (_flag(args, "enable_batching") or "false").lower() not in ("true", "1"):
        return "batching: off (no --enable_batching: each request runs on its own)"
    path = _flag(args, "batching_parameters_file")
    if not path:
        return "batching: on, TF Serving's default BatchingParameters (no --batching_parameters_file)"
    params = load_batching_parameters(path)
    shown = []
    for name in SHOWN_FIELDS:
        if name == "allowed_batch_sizes":
            if params.allowed_batch_sizes:
                shown.append(f"{name} {list(params.allowed_batch_sizes)}")
        elif params.HasField(name):
            shown.append(f"{name} {getattr(params, name).value}")
    where = Path(path)
    where = where.relative_to(root) if where.is_relative_to(root) else where
    return f"batching: {', '.join(shown) or 'the defaults'}, from {where}"


def print_usage(grpc_target: str, rest: str, model: str, *, model_repo: Path, work_flag: str = "",
                batching: str = "", server_log: Optional[Path] = None) -> None:
    """The embedded stack's banner: its addresses, batching and log, example calls, how to stop."""
    versions = model_versions(model_repo / model)
    manifest = model_repo / model / str(versions[-1]) / "manifest.json" if versions else None
    predict = (f"""  python -c 'from serving.client import GrpcClient; from exporter.manifest import load_manifest
print(GrpcClient("{grpc_target}").predict("{model}", load_manifest("{manifest.parent}").sample_inputs(), label="stable"))'
""" if manifest is not None and manifest.is_file() else "")
    log = (f"\n  server log: {server_log} (make up VERBOSE=1 streams it here)" if server_log else "")
    print(f"""
Serving: gRPC {grpc_target}, REST {rest}
  {batching}{log}
  curl {rest}/v1/models/{model}
  curl {rest}/v1/models/{model}/metadata
  curl {rest}/monitoring/prometheus/metrics
  {ACTIVATE}   # the commands below run in the project's venv
  python -m serving.client --grpc {grpc_target} --model {model} --label stable status
  python -m serving.client --grpc {grpc_target} --model {model} --label stable metadata
{predict}  python -m serving.rollout status --model {model}{work_flag}
  python -m serving.config add NAME --base-path {model_repo}/NAME{work_flag}
{STOP}
""", flush=True)


def print_gateway_usage(grpc: str, rest: str, mtls: str, secrets: Path, model: str, *,
                        dashboards: Sequence[str] = (), batching: str = "", work_flag: str = "") -> None:
    """The compose stack's banner: through the gateway, with the CA and a key of ``make certs``; logs and
    one-off containers through ``serving.stack`` (the files, project and variables make up recorded)."""
    print(f"""
Serving through the gateway: gRPC {grpc}, REST {rest} (TLS; API key or client certificate)
{', '.join(dashboards)}
  {batching}
  server log: make logs SERVICE=tfserving   (python -m serving.stack logs tfserving{work_flag}; -f follows)
  containers: python -m serving.stack ps{work_flag}; an export in the exporter's image: make export ARGS="..."
  curl --cacert {secrets}/ca.crt -H "x-api-key: $(cat {secrets}/client.api-key)" {rest}/v1/models/{model}
  curl --cacert {secrets}/ca.crt --cert {secrets}/client.crt --key {secrets}/client.key \\
       https://{mtls}/v1/models/{model}
  {ACTIVATE}   # for the SDK: root_certificates= and api_key= (README.md "Security")
  reloads need {secrets}/admin.api-key
{STOP}
""", flush=True)
