"""``make up``: run the stack with what this host has.

- A Docker engine answers and lists the ``nvidia`` runtime → the compose
  stack on the GPU (``docker-compose.yml``, with the ``gpu-metrics`` profile).
- A Docker engine answers without it → the CPU variant
  (``docker-compose.yml`` + ``docker-compose.cpu.yml``).
- No engine → the embedded server (``python -m serving.server``) with the
  CPU variant's ``tfserving`` command read from the compose files, paths
  remapped to this checkout (``serving.config.compose.plan_embedded_server``),
  after exporting the models that are missing.

It says which it chose and why, and how to call the server. The compose
stack is reached through its ``gateway`` (TLS and API keys): without the
files of ``make certs`` it refuses before starting anything. Flags use the
project's CLI vocabulary: ``--grpc HOST:PORT`` / ``--rest URL`` (where the
embedded server listens; their ports are used), ``--model-repo DIR``.
Default paths are anchored on the checkout, not the current directory.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import urllib.parse
from dataclasses import dataclass
from pathlib import Path
from typing import Optional, Sequence

from serving.config import load_model_server_config
from serving.config.compose import (
    ComposeError,
    compose_command,
    load_compose_model,
    plan_embedded_server,
    service_models_config,
    volume_map,
)
from serving.config.models import CONTAINER_MODELS_DIR
from serving.model_repo import ZOO, model_versions
from serving.server.launcher import REPO_ROOT, ServerProcess

__all__ = ["Choice", "docker_runtimes", "choose_backend", "compose_files", "compose_profiles",
           "missing_gateway_files", "missing_models", "ensure_commands", "build_parser", "main"]

GPU_FILES = ("docker-compose.yml",)
CPU_FILES = ("docker-compose.yml", "docker-compose.cpu.yml")
GATEWAY_SECRETS_TARGET = "/etc/nginx/secrets"


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


def compose_profiles(backend: str) -> list[str]:
    """The compose profiles ``backend`` turns on: dcgm-exporter's ``gpu-metrics`` on a GPU host."""
    return ["gpu-metrics"] if backend == "compose-gpu" else []


def missing_gateway_files(services: dict) -> list[Path]:
    """Host files the ``gateway`` service mounts from ``make certs``'s folder that do not exist."""
    gateway = services.get("gateway", {})
    return [source for target, source in volume_map(gateway).items()
            if target.startswith(GATEWAY_SECRETS_TARGET + "/") and not source.exists()]


def missing_models(models_config: Path, model_repo: Path) -> list[str]:
    """Models of ``models_config`` without any numeric version in ``model_repo``."""
    config = load_model_server_config(models_config)
    return [e.name for e in config.model_config_list.config if not model_versions(Path(model_repo) / e.name)]


def ensure_commands(model_repo: Path, names: Sequence[str],
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
    return [[sys.executable, "-m", "exporter", "ensure", "--quiet", *batching, "--model-repo", str(model_repo),
             "--variant", variant, *models] for variant, models in variants.items()]


def _run_compose(choice: Choice, root: Path) -> int:
    if not os.environ.get("GRAFANA_ADMIN_PASSWORD"):
        print("GRAFANA_ADMIN_PASSWORD is not set; the stack has no default Grafana password.\n"
              "  export GRAFANA_ADMIN_PASSWORD='<a password>' && make up", file=sys.stderr)
        return 2
    files = compose_files(choice.backend, root)
    services = load_compose_model(files, project_dir=root)["services"]
    missing = missing_gateway_files(services)
    if missing:
        print("the gateway's certificates and API keys are missing: "
              f"{', '.join(str(p) for p in missing)}\n  make certs && make up", file=sys.stderr)
        return 2
    cmd = [*compose_command()]
    for path in files:
        cmd += ["-f", str(path)]
    for profile in compose_profiles(choice.backend):
        cmd += ["--profile", profile]
    cmd += ["up", "-d", "--build", "--wait"]
    print("+", " ".join(cmd), flush=True)
    code = subprocess.run(cmd, cwd=root).returncode
    if code == 0:
        _print_gateway_usage(services)
    return code


def _published(service: dict, target: int) -> int:
    """The host port a compose service publishes for container port ``target``."""
    return next(int(p["published"]) for p in service.get("ports", []) if p["target"] == target)


def _port(address: str) -> int:
    """The port of ``HOST:PORT`` or of a URL ``http://HOST:PORT``."""
    port = urllib.parse.urlsplit(address if "//" in address else f"//{address}").port
    if port is None:
        raise SystemExit(f"no port in {address!r}")
    return port


def _run_embedded(args: argparse.Namespace, root: Path) -> int:
    # Compose interpolates every service of merged files, Grafana's required password too;
    # only tfserving's command is read here, so a placeholder stands in when it is unset.
    env = {"GRAFANA_ADMIN_PASSWORD": "unused-by-tfserving", **os.environ}
    service = load_compose_model(compose_files("embedded", root), services=["tfserving"],
                                 env=env, project_dir=root)["services"]["tfserving"]
    model_repo = args.model_repo.resolve()
    # The launcher sets --port/--rest_api_port from --grpc/--rest; the compose values are dropped.
    plan = plan_embedded_server(service, work_dir=args.work_dir.resolve(), models_dir=model_repo,
                                models=args.models.split(",") if args.models else None,
                                overrides={"port": None, "rest_api_port": None})
    missing = missing_models(plan.models_config, model_repo)
    if missing:
        print(f"exporting the missing models: {', '.join(missing)} (once; they are cached in {model_repo})")
        batching = next((a.split("=", 1)[1] for a in plan.args if a.startswith("--batching_parameters_file=")), None)
        for cmd in ensure_commands(model_repo, missing, batching):
            print("+", " ".join(cmd), flush=True)
            if subprocess.run(cmd, cwd=root).returncode != 0:
                print("the exporter failed; see above", file=sys.stderr)
                return 1
    names = [e.name for e in load_model_server_config(plan.models_config).model_config_list.config]
    server = ServerProcess(plan.args, wait_for=names, grpc_port=_port(args.grpc), rest_port=_port(args.rest),
                           capture_output=False, timeout=args.timeout)
    print("+", " ".join(server.command), flush=True)
    server.launch()
    # `kill` of make up stops the server too (Ctrl-C reaches both through the terminal).
    signal.signal(signal.SIGTERM, lambda *_: server.proc.send_signal(signal.SIGTERM))
    try:
        try:
            server.wait_ready()
        except TimeoutError as error:
            print(error, file=sys.stderr)
        except RuntimeError:
            pass  # the server exited; its output above says why
        else:
            _print_usage(args.grpc, args.rest, names[0] if names else "MODEL", model_repo=model_repo,
                         config=plan.models_config)
        return server.wait()
    except KeyboardInterrupt:
        server.proc.send_signal(signal.SIGTERM)
        return server.wait()


def _print_gateway_usage(services: dict) -> None:
    """How to call the compose stack: through the gateway, with the CA and a key of ``make certs``."""
    gateway, tfserving = services["gateway"], services["tfserving"]
    secrets = next(source.parent for target, source in volume_map(gateway).items()
                   if target.startswith(GATEWAY_SECRETS_TARGET + "/"))
    config = service_models_config(tfserving)
    model = load_model_server_config(config).model_config_list.config[0].name
    grpc_target = f"127.0.0.1:{_published(gateway, 8500)}"
    rest = f"https://127.0.0.1:{_published(gateway, 8501)}"
    print(f"""
Serving through the gateway: gRPC {grpc_target}, REST {rest} (TLS; API key or client certificate)
Grafana: http://127.0.0.1:{_published(services['grafana'], 3000)} (admin / $GRAFANA_ADMIN_PASSWORD), \
Prometheus: http://127.0.0.1:{_published(services['prometheus'], 9090)}
  curl --cacert {secrets}/ca.crt -H "x-api-key: $(cat {secrets}/client.api-key)" {rest}/v1/models/{model}
  curl --cacert {secrets}/ca.crt --cert {secrets}/client.crt --key {secrets}/client.key \\
       https://127.0.0.1:{_published(gateway, 8443)}/v1/models/{model}
  README.md "Security": the SDK's root_certificates= and api_key=; reloads need {secrets}/admin.api-key
""", flush=True)


def _print_usage(grpc_target: str, rest: str, model: str, *, model_repo: Path, config: Path,
                 extra: str = "") -> None:
    print(f"""
Serving: gRPC {grpc_target}, REST {rest}{chr(10) + extra if extra else ''}
  curl {rest}/v1/models/{model}
  curl {rest}/v1/models/{model}/metadata
  curl {rest}/monitoring/prometheus/metrics
  python -m serving.client --grpc {grpc_target} --model {model} --label stable status
  python -m serving.client --grpc {grpc_target} --model {model} --label stable metadata
  python -c 'from serving.client import GrpcClient; from exporter.manifest import load_manifest
print(GrpcClient("{grpc_target}").predict("{model}", load_manifest("{model_repo}/{model}/1").sample_inputs(), label="stable"))'
  python -m serving.rollout status --model {model} --grpc {grpc_target} --config-file {config}
""", flush=True)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m serving.up", description=__doc__.split("\n\n")[0])
    parser.add_argument("--backend", choices=("auto", "compose-gpu", "compose-cpu", "embedded"), default="auto",
                        help="force a backend (default: auto, from `docker info`)")
    parser.add_argument("--docker", default="docker", help="docker CLI to ask (default: docker)")
    parser.add_argument("--model-repo", type=Path, default=REPO_ROOT / "models", metavar="DIR",
                        help="model repository (default: <checkout>/models)")
    parser.add_argument("--models", help="embedded server: serve only these comma-separated models")
    parser.add_argument("--work-dir", type=Path, default=REPO_ROOT / ".cache" / "serving",
                        help="embedded server: where the local models config is rendered "
                             "(default: <checkout>/.cache/serving)")
    parser.add_argument("--grpc", metavar="HOST:PORT", default="127.0.0.1:8500",
                        help="embedded server: its gRPC address; it listens on this port (default: 127.0.0.1:8500)")
    parser.add_argument("--rest", metavar="URL", default="http://127.0.0.1:8501",
                        help="embedded server: its REST URL; it listens on this port (default: http://127.0.0.1:8501)")
    parser.add_argument("--timeout", type=float, default=900.0, help="seconds to wait for the models to load")
    parser.add_argument("--dry-run", action="store_true", help="say what would run, run nothing")
    return parser


def main(argv: Optional[Sequence[str]] = None, root: Path = REPO_ROOT) -> int:
    args = build_parser().parse_args(argv)
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
