"""``python -m serving.stack [up] [flags]`` (``make up``), ``down`` (``make down``), and ``logs`` (``make
logs``), ``run`` (``make export``) and ``ps`` on the stack ``make up`` recorded (``serving.stack.recorded``).

``up`` chooses the backend (``serving.stack.choice``), runs it
(``serving.stack.compose`` or ``serving.stack.embedded``) and records it in
``<work dir>/stack.json``, which ``serving.config add|remove``,
``serving.rollout`` and ``down`` read. Flags use the project's CLI
vocabulary: ``--grpc HOST:PORT`` / ``--rest URL`` (where the embedded server
listens; their ports are used), ``--model-repo DIR``. Default paths are
anchored on the checkout, not the current directory.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Optional, Sequence

from serving.addresses import grpc_address, rest_address
from serving.checkout import REPO_ROOT
from serving.config.compose import ComposeError
from serving.config.served_config import DEFAULT_WORK_DIR, STATE_FILE, StackState, StateFileError, load_state
from serving.stack.choice import BACKENDS, Choice, choose_backend, docker_runtimes
from serving.stack.compose import IMAGES, compose_containers, run_compose
from serving.stack.down import stop_stack
from serving.stack.embedded import DEFAULT_EXPORTS, EmbeddedOptions, run_embedded
from serving.stack.recorded import run_service, show_logs, show_services
from serving.stack.running import address_port, corrupt_state_advice, describe_running, held_ports
from serving.stack.work_lock import WorkDirBusy, WorkDirLock

__all__ = ["build_parser", "main"]

COMMANDS = ("up", "down", "logs", "run", "ps")


def _work_dir(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--work-dir", type=Path, default=DEFAULT_WORK_DIR,
                        help="where the stack's state (stack.json) and the embedded server's persistent "
                             f"models config and log live (default: {DEFAULT_WORK_DIR})")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m serving.stack",
                                     description="make up / make down: run the stack with what this host has "
                                                 "(`up`, the default command), or stop it (`down`).")
    commands = parser.add_subparsers(dest="command", required=True)
    up = commands.add_parser("up", help="run the stack (the default command)",
                             description="compose GPU / compose CPU where a Docker engine answers, else the "
                                         "embedded server")
    up.add_argument("--backend", choices=("auto", *BACKENDS), default="auto",
                    help="force a backend (default: auto, from `docker info`)")
    up.add_argument("--docker", default="docker", help="docker CLI to ask (default: docker)")
    up.add_argument("--images", choices=IMAGES, default="upstream",
                    help="compose: `local` runs the stand-in images of `make images` "
                         "(docker-compose.local.yml; the CPU stack without Grafana and dcgm-exporter); "
                         "default: upstream")
    up.add_argument("--model-repo", type=Path, default=REPO_ROOT / "models", metavar="DIR",
                    help="model repository (default: <checkout>/models)")
    up.add_argument("--models", metavar="NAMES",
                    help="embedded server: zoo models to export when missing, comma-separated published "
                         "names (digits,resnet50,digits_xla,...) or `all` (default: "
                         f"{','.join(DEFAULT_EXPORTS)} when there is no model yet, else none)")
    _work_dir(up)
    up.add_argument("--grpc", metavar="HOST:PORT", default="127.0.0.1:8500", type=grpc_address,
                    help="embedded server: its gRPC address; it listens on this port (default: 127.0.0.1:8500)")
    up.add_argument("--rest", metavar="URL", default="http://127.0.0.1:8501", type=rest_address,
                    help="embedded server: its REST URL; it listens on this port (default: http://127.0.0.1:8501)")
    up.add_argument("--timeout", type=float, default=900.0, help="seconds to wait for the models to load")
    up.add_argument("--verbose", action="store_true",
                    help="embedded server: stream its log here (default: <work dir>/server.log)")
    up.add_argument("--dry-run", action="store_true",
                    help="say what would run (compose: the command and HOST_UID/HOST_GID), run nothing")
    down = commands.add_parser("down", help=f"stop what make up started (from <work dir>/{STATE_FILE})")
    _work_dir(down)
    logs = commands.add_parser("logs", help="the recorded stack's logs (make logs)",
                               description="compose's logs of the stack make up started, with the files, profiles, "
                                           "project and variables it recorded; the embedded stack: its server's log")
    logs.add_argument("services", nargs="*", metavar="SERVICE", help="compose services (default: all)")
    logs.add_argument("-f", "--follow", action="store_true", help="keep printing new lines")
    logs.add_argument("--tail", type=int, metavar="N", help="only the last N lines (of each service)")
    _work_dir(logs)
    run = commands.add_parser("run", help="run a one-off container of the recorded compose stack (make export)",
                              description="compose run --rm SERVICE ARGS with what make up recorded, e.g. "
                                          "python -m serving.stack run exporter \"python -m exporter export --model "
                                          "resnet50 --variant xla --model-repo /models\" (the exporter's entrypoint is "
                                          "sh -ec: one argument, the script). Everything after SERVICE goes to the container: "
                                          "give --work-dir before it")
    run.add_argument("service", metavar="SERVICE")
    run.add_argument("args", nargs=argparse.REMAINDER, metavar="ARGS")
    _work_dir(run)
    ps = commands.add_parser("ps", help="the recorded compose stack's containers, state and health")
    _work_dir(ps)
    return parser


def main(argv: Optional[Sequence[str]] = None, root: Path = REPO_ROOT) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] not in (*COMMANDS, "-h", "--help"):
        argv = ["up", *argv]
    args = build_parser().parse_args(argv)
    if args.command == "down":
        return stop_stack(args.work_dir.resolve())
    if args.command == "logs":
        return show_logs(args.work_dir.resolve(), args.services, follow=args.follow, tail=args.tail)
    if args.command == "run":
        return run_service(args.work_dir.resolve(), args.service, args.args)
    if args.command == "ps":
        return show_services(args.work_dir.resolve())
    if args.backend == "auto":
        choice = choose_backend(*docker_runtimes(args.docker))
    else:
        choice = Choice(args.backend, f"--backend {args.backend}")
    print(f"make up: {choice.backend}: {choice.reason}", flush=True)
    if choice.backend == "embedded" and args.images == "local":
        print("make up: --images local runs the compose stack on the images of `make images`, "
              "which needs a Docker engine", file=sys.stderr)
        return 2
    if args.dry_run and choice.backend == "embedded":
        return 0
    work_dir = args.work_dir.resolve()
    try:
        lock = WorkDirLock(work_dir).acquire()
    except WorkDirBusy as exc:
        print(f"make up: {exc}: a stack is starting or runs from {work_dir}; make down stops it", file=sys.stderr)
        return 1
    try:
        refusal = _running_stack_refusal(work_dir, choice.backend, args)
        if refusal is not None:
            code, message = refusal
            print(message, file=sys.stderr)
            return code
        if choice.backend == "embedded":
            return run_embedded(EmbeddedOptions(args.model_repo, args.work_dir, args.grpc, args.rest, args.models,
                                                args.timeout, args.verbose), root)
        return run_compose(choice, images=args.images, docker=args.docker,
                           state_file=work_dir / STATE_FILE, root=root, dry_run=args.dry_run)
    except ComposeError as exc:
        print(f"make up: {exc}", file=sys.stderr)
        return 1
    finally:
        lock.release()


def _running_stack_refusal(work_dir: Path, backend: str, args: argparse.Namespace) -> Optional[tuple[int, str]]:
    """Why ``make up`` must not start ``backend`` now (exit status, message), or None.

    A corrupt ``stack.json`` (2): it cannot say what runs. A running embedded stack recorded there (1),
    whichever backend is asked for. A compose stack recorded there with containers (1) when the embedded
    server is asked for (compose itself brings its own stack up to date in place). For the embedded
    server, its ports in use by anything (1).
    """
    try:
        state = load_state(work_dir / STATE_FILE)
    except StateFileError as exc:
        return 2, f"make up: {exc}\n{corrupt_state_advice(work_dir / STATE_FILE)}"
    stop = "make down stops it" + ("" if work_dir == DEFAULT_WORK_DIR.resolve() else f" (--work-dir {work_dir})")
    if state is not None and state.backend == "embedded":
        running = describe_running(state)
        if running:
            return 1, f"make up: {running} already runs from {work_dir / STATE_FILE}; {stop}"
    if state is not None and state.compose_files and backend == "embedded" and compose_containers(state):
        return 1, (f"make up: the {state.backend} stack (compose project {state.compose_project}) runs; {stop}, "
                   "then make up again")
    if backend == "embedded" and not args.dry_run:
        wanted = StackState("embedded", Path(), args.grpc, args.rest, Path())
        held = held_ports(wanted)
        if held:
            ports = ", ".join(f"port {address_port(a)[1]} ({a})" for a in held)
            return 1, (f"make up: {ports} already in use by a process this work dir did not start "
                       f"(ss -ltnp shows which); stop it, or run on other ports with --grpc HOST:PORT --rest URL")
    return None
