"""``make up``: run the stack with what this host has.

- A Docker engine answers and lists the ``nvidia`` runtime → the compose
  stack on the GPU (``docker-compose.yml``).
- A Docker engine answers without it → the CPU variant
  (``docker-compose.yml`` + ``docker-compose.cpu.yml``).
- No engine → the embedded server (``python -m serving.server``) with the
  CPU variant's ``tfserving`` command read from the compose files, paths
  remapped to this checkout (``serving.config.compose.plan_embedded_server``),
  after exporting the models that are missing.

It says which it chose and why, and how to call the server.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Optional, Sequence

import httpx

from serving.config import load_model_server_config
from serving.config.compose import (ComposeError, compose_command, load_compose_model, plan_embedded_server,
                                    service_models_config, volume_map)
from serving.config.models import CONTAINER_MODELS_DIR, ZOO, model_versions

__all__ = ["Choice", "docker_runtimes", "choose_backend", "compose_files", "missing_models",
           "ensure_commands", "main"]

REPO_ROOT = Path(__file__).resolve().parents[1]
GPU_FILES = ("docker-compose.yml",)
CPU_FILES = ("docker-compose.yml", "docker-compose.cpu.yml")


@dataclass(frozen=True)
class Choice:
    """Where the stack runs: ``compose-gpu``, ``compose-cpu`` or ``embedded``, and why."""

    backend: str
    reason: str


def docker_runtimes(docker: str = "docker", timeout: float = 20.0) -> tuple[Optional[set[str]], str]:
    """The engine's container runtimes (``docker info``), or None and why there is no engine."""
    if shutil.which(docker) is None:
        return None, f"no `{docker}` command on PATH"
    try:
        proc = subprocess.run([docker, "info", "--format", "{{json .Runtimes}}"],
                              capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return None, f"`{docker} info` did not answer within {timeout:.0f} s"
    if proc.returncode != 0:
        detail = (proc.stderr.strip().splitlines() or ["no output"])[-1]
        return None, f"no Docker engine answers (`{docker} info`: {detail})"
    try:
        return set(json.loads(proc.stdout or "{}") or {}), "a Docker engine answers"
    except json.JSONDecodeError:
        return set(), "a Docker engine answers (runtimes unreadable)"


def choose_backend(runtimes: Optional[set[str]], why: str) -> Choice:
    """The backend for an engine with ``runtimes`` (None: no engine, for the reason ``why``)."""
    if runtimes is None:
        return Choice("embedded", f"{why}; running the embedded TF Serving-compatible server on CPU")
    if "nvidia" in runtimes:
        return Choice("compose-gpu", f"{why} with the nvidia runtime; running the GPU compose stack")
    return Choice("compose-cpu", f"{why} without the nvidia runtime (runtimes: "
                                 f"{', '.join(sorted(runtimes)) or 'none'}); running the CPU compose variant")


def compose_files(backend: str, root: Path = REPO_ROOT) -> list[Path]:
    """The compose files of ``backend`` (the embedded server reads the CPU variant's)."""
    return [root / f for f in (GPU_FILES if backend == "compose-gpu" else CPU_FILES)]


def missing_models(models_config: Path, models_dir: Path) -> list[str]:
    """Models of ``models_config`` without any numeric version in ``models_dir``."""
    config = load_model_server_config(models_config)
    return [e.name for e in config.model_config_list.config if not model_versions(Path(models_dir) / e.name)]


def ensure_commands(models_dir: Path, names: Sequence[str],
                    batching_config: Optional[Path] = None) -> list[list[str]]:
    """Exporter commands exporting version 1 of each published name in ``names``, one per variant.

    ``batching_config`` is the serving batching file, whose ``allowed_batch_sizes``
    the exporter's warmup requests cover (as the compose exporter service does).
    """
    by_name = {m.name: m for m in ZOO}
    unknown = [n for n in names if n not in by_name]
    if unknown:
        raise ValueError(f"not published names of the zoo: {', '.join(unknown)}")
    variants: dict[str, list[str]] = {}
    for name in names:
        variants.setdefault(by_name[name].variant, []).append(by_name[name].model)
    batching = [f"--batching-config={batching_config}"] if batching_config else []
    return [[sys.executable, "-m", "exporter", "ensure", "--quiet", *batching, "--out", str(models_dir),
             "--variant", variant, *models] for variant, models in variants.items()]


def _run_compose(choice: Choice, root: Path) -> int:
    if not os.environ.get("GRAFANA_ADMIN_PASSWORD"):
        print("GRAFANA_ADMIN_PASSWORD is not set; the stack has no default Grafana password.\n"
              "  export GRAFANA_ADMIN_PASSWORD='<a password>' && make up", file=sys.stderr)
        return 2
    cmd = [*compose_command()]
    for path in compose_files(choice.backend, root):
        cmd += ["-f", str(path)]
    cmd += ["up", "-d", "--build", "--wait"]
    print("+", " ".join(cmd), flush=True)
    code = subprocess.run(cmd, cwd=root).returncode
    if code == 0:
        services = load_compose_model(compose_files(choice.backend, root), project_dir=root)["services"]
        tfserving = services["tfserving"]
        config = service_models_config(tfserving)
        first = load_model_server_config(config).model_config_list.config[0]
        _print_usage(_published(tfserving, 8500), _published(tfserving, 8501), first.name,
                     models_dir=volume_map(tfserving)[CONTAINER_MODELS_DIR], config=config,
                     extra=f"Grafana: http://127.0.0.1:{_published(services['grafana'], 3000)} "
                           f"(admin / $GRAFANA_ADMIN_PASSWORD), "
                           f"Prometheus: http://127.0.0.1:{_published(services['prometheus'], 9090)}")
    return code


def _published(service: dict, target: int) -> int:
    """The host port a compose service publishes for container port ``target``."""
    return next(int(p["published"]) for p in service.get("ports", []) if p["target"] == target)


def _run_embedded(args: argparse.Namespace, root: Path) -> int:
    # Compose interpolates every service of merged files, Grafana's required password too;
    # only tfserving's command is read here, so a placeholder stands in when it is unset.
    env = {"GRAFANA_ADMIN_PASSWORD": "unused-by-tfserving", **os.environ}
    service = load_compose_model(compose_files("embedded", root), services=["tfserving"],
                                 env=env, project_dir=root)["services"]["tfserving"]
    models_dir = (root / args.models_dir).resolve()
    plan = plan_embedded_server(service, work_dir=(root / args.work_dir).resolve(), models_dir=models_dir,
                                models=args.models.split(",") if args.models else None,
                                overrides={"port": str(args.grpc_port), "rest_api_port": str(args.rest_port)})
    missing = missing_models(plan.models_config, models_dir)
    if missing:
        print(f"exporting the missing models: {', '.join(missing)} (once; they are cached in {models_dir})")
        batching = next((a.split("=", 1)[1] for a in plan.args if a.startswith("--batching_parameters_file=")), None)
        for cmd in ensure_commands(models_dir, missing, batching):
            print("+", " ".join(cmd), flush=True)
            if subprocess.run(cmd, cwd=root).returncode != 0:
                print("the exporter failed; see above", file=sys.stderr)
                return 1
    cmd = [sys.executable, "-m", "serving.server", *plan.args]
    print("+", " ".join(cmd), flush=True)
    proc = subprocess.Popen(cmd, cwd=root, env={"TF_CPP_MIN_LOG_LEVEL": "2", **os.environ})
    # `kill` of make up stops the server too (Ctrl-C reaches both through the terminal).
    signal.signal(signal.SIGTERM, lambda *_: proc.send_signal(signal.SIGTERM))
    try:
        names = [e.name for e in load_model_server_config(plan.models_config).model_config_list.config]
        if _wait_available(proc, args.rest_port, names, args.timeout):
            _print_usage(args.grpc_port, args.rest_port, names[0] if names else "MODEL",
                         models_dir=models_dir, config=plan.models_config)
        return proc.wait()
    except KeyboardInterrupt:
        proc.send_signal(signal.SIGTERM)
        return proc.wait()


def _wait_available(proc: subprocess.Popen, rest_port: int, names: Sequence[str], timeout: float) -> bool:
    deadline, pending = time.monotonic() + timeout, list(names)
    while pending and time.monotonic() < deadline and proc.poll() is None:
        pending = [n for n in pending if not _available(rest_port, n)]
        time.sleep(0.5)
    if pending:
        print(f"not AVAILABLE after {timeout:.0f} s: {', '.join(pending)}", file=sys.stderr)
    return not pending and proc.poll() is None


def _available(rest_port: int, name: str) -> bool:
    try:
        body = httpx.get(f"http://127.0.0.1:{rest_port}/v1/models/{name}", timeout=2.0).json()
    except (httpx.HTTPError, ValueError):
        return False
    return any(v.get("state") == "AVAILABLE" for v in body.get("model_version_status", []))


def _print_usage(grpc_port: int, rest_port: int, model: str, *, models_dir: Path, config: Path,
                 extra: str = "") -> None:
    rest, grpc_target = f"http://127.0.0.1:{rest_port}", f"127.0.0.1:{grpc_port}"
    print(f"""
Serving: gRPC {grpc_target}, REST {rest}{chr(10) + extra if extra else ''}
  curl {rest}/v1/models/{model}
  curl {rest}/v1/models/{model}/metadata
  curl {rest}/monitoring/prometheus/metrics
  python -m serving.client --grpc {grpc_target} --model {model} --label stable status
  python -m serving.client --grpc {grpc_target} --model {model} --label stable metadata
  python -c 'from serving.client import GrpcClient; from exporter.manifest import load_manifest
print(GrpcClient("{grpc_target}").predict("{model}", load_manifest("{models_dir}/{model}/1").sample_inputs(), label="stable"))'
  python -m serving.rollout status --model {model} --target {grpc_target} --config-file {config}
""", flush=True)


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m serving.up", description=__doc__.split("\n\n")[0])
    parser.add_argument("--backend", choices=("auto", "compose-gpu", "compose-cpu", "embedded"), default="auto",
                        help="force a backend (default: auto, from `docker info`)")
    parser.add_argument("--docker", default="docker", help="docker CLI to ask (default: docker)")
    parser.add_argument("--models-dir", type=Path, default=Path("models"), help="model repository (default: models)")
    parser.add_argument("--models", help="embedded server: serve only these comma-separated models")
    parser.add_argument("--work-dir", type=Path, default=Path(".cache/serving"),
                        help="embedded server: where the local models config is rendered (default: .cache/serving)")
    parser.add_argument("--grpc-port", type=int, default=8500, help="embedded server gRPC port (default: 8500)")
    parser.add_argument("--rest-port", type=int, default=8501, help="embedded server REST port (default: 8501)")
    parser.add_argument("--timeout", type=float, default=900.0, help="seconds to wait for the models to load")
    parser.add_argument("--dry-run", action="store_true", help="say what would run, run nothing")
    return parser


def main(argv: Optional[Sequence[str]] = None, root: Path = REPO_ROOT) -> int:
    args = _parser().parse_args(argv)
    if args.backend == "auto":
        choice = choose_backend(*docker_runtimes(args.docker))
    else:
        choice = Choice(args.backend, f"--backend {args.backend}")
    print(f"make up: {choice.backend}: {choice.reason}", flush=True)
    if args.dry_run:
        return 0
    try:
        return _run_embedded(args, root) if choice.backend == "embedded" else _run_compose(choice, root)
    except ComposeError as exc:
        print(f"make up: {exc}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
