"""The embedded backend: ``python -m serving.server`` with the CPU compose variant's ``tfserving`` command.

The command is read from the compose files, paths remapped to this checkout
(``serving.config.compose.plan_embedded_server``); the server serves the
persistent served config (``serving.stack.prepared_configs``).

- Zoo models are exported only when the repository is empty, and then only
  the small ones (:data:`DEFAULT_EXPORTS`); ``--models`` names the zoo models
  to export when missing (``all``: every one the CPU can serve).
- The server starts at once with the models already there; each export
  (smallest first, :class:`Exports`) is added through
  ``HandleReloadConfigRequest`` when it is published, so the first model
  answers while the others export.
- The terminal gets progress lines (each export, each model as it becomes
  AVAILABLE) and the banner. The server's own log goes to
  ``<work dir>/server.log`` (``verbose`` streams it to the terminal instead);
  each export's to ``<work dir>/export-NAME.log``.
- ``make up`` runs in the foreground; SIGTERM (``make down``) or Ctrl-C stops
  the export under way and the server, which drains and exits.
"""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
import urllib.parse
from dataclasses import dataclass
from pathlib import Path
from typing import Optional, Sequence

from serving.config.compose import load_compose_model, plan_embedded_server, with_grafana_placeholder
from serving.config.edit import add_steps
from serving.config.models import new_model_server_config, repository_models, served_entry
from serving.config.reload import ReloadError
from serving.config.served_config import (
    DEFAULT_WORK_DIR,
    STATE_FILE,
    ServedConfig,
    StackState,
    apply_steps,
    read_state,
    write_state,
)
from serving.model_repo import SMALL_ZOO, ZOO, model_versions
from serving.launcher import ServerProcess, model_available, port_open
from serving.stack.banner import batching_summary, print_usage, say
from serving.stack.choice import compose_files
from serving.stack.identity import ProcessIdentity, die_with_parent
from serving.stack.prepared_configs import MODELS_CONFIG, prepare_served_config

__all__ = ["DEFAULT_EXPORTS", "SERVER_LOG", "EmbeddedOptions", "ensure_commands", "zoo_selection", "export_order",
           "Exports", "run_embedded"]

# The zoo models a fresh (empty) model repository gets, smallest first; the others are opt-in (--models).
DEFAULT_EXPORTS = SMALL_ZOO  # the zoo table says which models are small
# The embedded server's own log, in the work directory (unless verbose streams it).
SERVER_LOG = "server.log"


@dataclass(frozen=True)
class EmbeddedOptions:
    """What ``make up`` asks of the embedded backend (the CLI's flags)."""

    model_repo: Path
    work_dir: Path
    grpc: str
    rest: str
    models: Optional[str] = None  # --models: zoo models to export when missing
    timeout: float = 900.0
    verbose: bool = False


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


def zoo_selection(spec: Optional[str]) -> list[str]:
    """The published zoo names ``--models`` asks for: ``all`` (every one the CPU serves) or a comma list."""
    servable = [m.name for m in ZOO if not m.gpu_only]
    if spec is None:
        return []
    if spec.strip() == "all":
        return servable
    names = [n.strip() for n in spec.split(",") if n.strip()]
    unknown = [n for n in names if n not in servable]
    if unknown:
        raise ValueError(f"--models: not zoo models the embedded server can serve: {', '.join(unknown)} "
                         f"(choose from: {', '.join(servable)}, or all)")
    return names


def export_order(names: Sequence[str]) -> list[str]:
    """``names`` smallest first: the default exports, then fp32 models, then the variants (zoo order)."""
    index = {m.name: i for i, m in enumerate(ZOO)}
    variant = {m.name: m.variant for m in ZOO}
    return sorted(dict.fromkeys(names), key=lambda n: (n not in DEFAULT_EXPORTS, variant.get(n) != "fp32",
                                                       DEFAULT_EXPORTS.index(n) if n in DEFAULT_EXPORTS
                                                       else index.get(n, len(index))))


class Exports:
    """Zoo exports run one at a time in a subprocess each (``python -m exporter ensure``), in order.

    ``poll()`` returns the names whose export finished (and starts the next);
    a failed export is reported with its log tail and skipped.
    """

    def __init__(self, names: Sequence[str], model_repo: Path, batching: Optional[str], log_dir: Path,
                 root: Path, started: float) -> None:
        self.queue = list(names)
        self.total = len(names)
        self.model_repo, self.batching, self.log_dir, self.root = model_repo, batching, log_dir, root
        self.started = started
        self.current: Optional[tuple[str, subprocess.Popen, float]] = None
        self.failed: list[str] = []

    def _start_next(self) -> None:
        if self.current is not None or not self.queue:
            return
        name = self.queue.pop(0)
        (cmd,) = ensure_commands(self.model_repo, [name], Path(self.batching) if self.batching else None)
        number = self.total - len(self.queue)
        say(self.started, f"[{number}/{self.total}] exporting {name} into {self.model_repo}")
        with open(self.log_dir / f"export-{name}.log", "wb") as log:
            proc = subprocess.Popen(cmd, cwd=self.root, stdout=log, stderr=subprocess.STDOUT,
                                    preexec_fn=die_with_parent())  # noqa: PLW1509 - prctl in the child, no lock
        self.current = (name, proc, time.monotonic())

    def poll(self) -> list[str]:
        self._start_next()
        if self.current is None or self.current[1].poll() is None:
            return []
        name, proc, began = self.current
        self.current = None
        number = self.total - len(self.queue)
        if proc.returncode == 0:
            say(self.started, f"[{number}/{self.total}] {name} exported in {time.monotonic() - began:.0f} s")
            self._start_next()
            return [name]
        self.failed.append(name)
        tail = (self.log_dir / f"export-{name}.log").read_text(errors="replace").strip().splitlines()[-5:]
        say(self.started, f"[{number}/{self.total}] exporting {name} failed (exit {proc.returncode}):\n    "
            + "\n    ".join(tail))
        self._start_next()
        return []

    def busy(self) -> bool:
        return self.current is not None or bool(self.queue)

    def terminate(self) -> None:
        """Stop exporting: no next export, SIGTERM to the running one (does not wait)."""
        self.queue.clear()
        if self.current is not None:
            self.current[1].terminate()

    def stop(self) -> None:
        """``terminate()`` and wait for the running export to exit."""
        self.terminate()
        if self.current is not None:
            self.current[1].wait()
            self.current = None


def _to_export(options: EmbeddedOptions, model_repo: Path, old: Optional[StackState]) -> list[str]:
    """The zoo models this start exports: ``--models`` (or the defaults in an empty repository),
    plus what an interrupted start left, minus what is there already."""
    wanted = zoo_selection(options.models)
    if options.models is None and not repository_models(model_repo):
        wanted = list(DEFAULT_EXPORTS)
    wanted += list(old.exporting) if old is not None else []
    return export_order([n for n in wanted if not model_versions(model_repo / n)])


def _port(address: str) -> int:
    """The port of ``HOST:PORT`` or of a URL ``http://HOST:PORT``."""
    port = urllib.parse.urlsplit(address if "//" in address else f"//{address}").port
    if port is None:
        raise SystemExit(f"no port in {address!r}")
    return port


def run_embedded(options: EmbeddedOptions, root: Path) -> int:
    """Serve the repository with the embedded server until it exits or is stopped; its exit status."""
    started = time.monotonic()
    # Only tfserving's command is read here: Grafana's password may be a placeholder.
    service = load_compose_model(compose_files("embedded", root), services=["tfserving"],
                                 env=with_grafana_placeholder(os.environ), project_dir=root)["services"]["tfserving"]
    model_repo, work_dir = options.model_repo.resolve(), options.work_dir.resolve()
    model_repo.mkdir(parents=True, exist_ok=True)
    state_file = work_dir / STATE_FILE
    old = read_state(state_file)
    try:
        requested, to_export = zoo_selection(options.models), _to_export(options, model_repo, old)
    except ValueError as exc:
        print(f"make up: {exc}", file=sys.stderr)
        return 2
    # Asking for a model again (--models, or exporting it) takes back its removal.
    removed = tuple(n for n in (old.removed if old else ()) if n not in requested and n not in to_export)
    config = prepare_served_config(work_dir / MODELS_CONFIG, model_repo, removed=removed)
    if config is None:
        return 1
    # The launcher sets --port/--rest_api_port from --grpc/--rest; the compose values are dropped.
    plan = plan_embedded_server(service, work_dir=work_dir, models_dir=model_repo,
                                models_config=work_dir / MODELS_CONFIG,
                                overrides={"port": None, "rest_api_port": None})
    me = ProcessIdentity.of(os.getpid())
    state = StackState("embedded", plan.models_config, options.grpc, options.rest, model_repo, {}, removed,
                       tuple(to_export), os.getpid(), pid_start=me.start if me else None)
    write_state(state, state_file)
    names = [e.name for e in config.model_config_list.config]
    say(started, f"serving {', '.join(names) or 'no model yet'} from {plan.models_config}"
        + (f"; exporting {', '.join(to_export)} (smallest first; each is served once exported)"
           if to_export else ""))
    log_path = None if options.verbose else work_dir / SERVER_LOG
    # The server (and each export) gets SIGTERM when this make up dies, even by SIGKILL: no orphan keeps
    # the ports, and a second make up is refused only while this one lives.
    server = ServerProcess(plan.args, grpc_port=_port(options.grpc), rest_port=_port(options.rest),
                           capture_output=not options.verbose, log_path=log_path, timeout=options.timeout,
                           preexec_fn=die_with_parent())
    if options.verbose:
        print("+", " ".join(server.command), flush=True)
    else:
        say(started, f"server log: {log_path} (make up VERBOSE=1 streams it)")
    server.launch()
    proc = server.proc
    assert proc is not None   # launch() started it
    child = ProcessIdentity.of(proc.pid)
    if child is not None:
        write_state(state.replace(server_pid=child.pid, server_start=child.start), state_file)
    batching = next((a.split("=", 1)[1] for a in plan.args if a.startswith("--batching_parameters_file=")), None)
    exports = Exports(to_export, model_repo, batching, work_dir, root, started)
    stopping = threading.Event()

    def stop(*_: object) -> None:
        """Stop the export under way and the server (it drains and exits); a reload being waited for ends."""
        if not stopping.is_set():
            stopping.set()
            exports.terminate()
            proc.send_signal(signal.SIGTERM)

    # `kill` of make up (make down) stops the server too (Ctrl-C reaches both through the terminal).
    signal.signal(signal.SIGTERM, stop)
    banner = _Banner(options, model_repo, work_dir, batching_summary(plan.args, root), log_path)
    try:
        code = _serve(options, server, exports, ServedConfig(plan.models_config, options.grpc, {}, state_file),
                      names, stopping, started, banner)
    except KeyboardInterrupt:
        stop()
        code = None
    exports.stop()
    code = server.wait() if code is None else code
    if stopping.is_set():
        say(started, f"stopped (server exit status {code})")
    elif code and not options.verbose:
        print(f"make up: the server exited with status {code}; the end of {log_path}:\n{server.log_tail(20)}",
              file=sys.stderr)
    return code


@dataclass(frozen=True)
class _Banner:
    options: EmbeddedOptions
    model_repo: Path
    work_dir: Path
    batching: str
    server_log: Optional[Path]

    def show(self, model: str) -> None:
        work = "" if self.work_dir == DEFAULT_WORK_DIR else f" --work-dir {self.work_dir}"
        print_usage(self.options.grpc, self.options.rest, model, model_repo=self.model_repo, work_flag=work,
                    batching=self.batching, server_log=self.server_log)


def _serve(options: EmbeddedOptions, server: ServerProcess, exports: Exports, served: ServedConfig,
           names: Sequence[str], stopping: threading.Event, started: float, banner: _Banner) -> Optional[int]:
    """Report the startup models as they become AVAILABLE, then add each export once it is published;
    then wait. The server's exit status, or None when stopped (SIGTERM) first."""
    deadline = started + options.timeout
    loading, exported, announced = list(names), [], False
    while not stopping.is_set():
        if not server.running():
            return server.wait()
        exported += exports.poll()
        if loading:
            loading = _report_available(options.rest, loading, started)
            if loading and time.monotonic() > deadline:
                print(f"make up: models not AVAILABLE after {options.timeout:.0f} s: {', '.join(loading)}",
                      file=sys.stderr)
                loading = []
        elif exported and port_open(_port(options.grpc)):
            _add_exported(served, exported.pop(0), started, options.timeout)
        elif not exported:
            served_names = [e.name for e in served.load().model_config_list.config]
            if not announced and served_names:
                banner.show(served_names[0])
                announced = True
            if not exports.busy():
                say(started, "every model is loaded" + (f"; exports failed: {', '.join(exports.failed)}"
                                                        if exports.failed else ""))
                break
        stopping.wait(0.25)
    while not stopping.wait(0.5):
        if not server.running():
            return server.wait()
    return None


def _report_available(rest: str, loading: Sequence[str], started: float) -> list[str]:
    """``loading`` without the models that are AVAILABLE now, each reported once."""
    pending = []
    for name in loading:
        if model_available(rest, name, timeout=1.0):
            say(started, f"{name} AVAILABLE")
        else:
            pending.append(name)
    return pending


def _add_exported(served: ServedConfig, name: str, started: float, timeout: float) -> None:
    """Serve a model the exporter just published (its newest version, stable and canary on it), the way
    ``serving.config add`` does, and drop it from the state's pending exports."""
    assert served.state_file is not None   # the embedded stack's config is the one its state file records
    state = read_state(served.state_file)
    assert state is not None, f"{served.state_file} is gone while make up runs"
    config = served.load()
    model_dir = state.model_repo / name
    if not any(e.name == name for e in config.model_config_list.config):
        on_disk = model_versions(model_dir)
        entry = served_entry(new_model_server_config(), name, str(model_dir), on_disk[-1])
        try:
            apply_steps(served, name, add_steps(config, entry, on_disk), timeout=timeout, log=lambda _: None)
        except ReloadError as exc:
            say(started, f"{name} not served: {exc}")
            return
        say(started, f"{name} AVAILABLE")
    write_state(state.replace(exporting=tuple(n for n in state.exporting if n != name)), served.state_file)
