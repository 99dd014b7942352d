"""The config the stack serves, defined once: ``make up``'s state file and where base paths live.

``make up`` records what it started in ``<work dir>/stack.json``
(:class:`StackState`, default work dir ``<checkout>/.cache/serving``): the
backend, the models config file its server reads, the server's gRPC target
and REST URL, the model repository, and how the server's base paths map to
this host. The compose backends serve ``<work dir>/compose/models.config``
(GPU) or ``models.cpu.config`` (CPU), seeded once from the tracked defaults in
``serving/``, with container paths (``/models/NAME`` is ``<model
repository>/NAME`` here); the embedded backend serves the persistent
``<work dir>/models.config`` with host paths.

:func:`served_config` is what ``python -m serving.config add|remove|render``
and ``python -m serving.rollout`` work on (:class:`ServedConfig`):

1. with a state file and no other file named: the stack's config, pushed to
   the stack's gRPC target;
2. otherwise the named file, or without a state file the compose file
   ``serving/models.config`` on ``127.0.0.1:8500`` (what TF Serving in
   compose reads). Its base paths are read as the target server reads them:
   the stack's mapping when the target is the stack's own server (so a
   compose file pushed to the embedded server is refused: ``/models/NAME``
   does not exist on this host), else ``/models`` → the model repository.

Writes are atomic (temp file + rename). The compose pair ``models.config`` /
``models.cpu.config`` stays in sync: writing one rewrites the other (the CPU
file is the GPU file without its GPU-only models, as ``check`` requires).
"""
from __future__ import annotations

import dataclasses
import json
import os
import socket
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING, Callable, Iterable, Mapping, Optional, Sequence

from serving import status
from serving.client import GrpcClient
from serving.config import load_model_server_config
from serving.config.edit import entry_problems
from serving.config.models import (
    CONTAINER_MODELS_DIR,
    HEADER,
    new_model_server_config,
    without_gpu_only,
    write_model_server_config,
)
from serving.config.reload import Reloader, ReloadError, Step, connect
from serving.model_repo import ZOO, model_versions

if TYPE_CHECKING:  # tensorflow_serving's protos load only when a config is read
    from tensorflow_serving.config.model_server_config_pb2 import ModelConfig, ModelServerConfig

__all__ = [
    "REPO_ROOT",
    "SERVING_DIR",
    "DEFAULT_WORK_DIR",
    "DEFAULT_MODEL_REPO",
    "DEFAULT_GRPC",
    "STATE_FILE",
    "COMPOSE_PAIR",
    "StackState",
    "StateFileError",
    "read_state",
    "load_state",
    "write_state",
    "ServedConfig",
    "served_config",
    "stack_model_repo",
    "apply_steps",
]

REPO_ROOT = Path(__file__).resolve().parents[2]
SERVING_DIR = REPO_ROOT / "serving"
DEFAULT_WORK_DIR = REPO_ROOT / ".cache" / "serving"
DEFAULT_MODEL_REPO = REPO_ROOT / "models"
DEFAULT_GRPC = "127.0.0.1:8500"
STATE_FILE = "stack.json"
# The compose stack's models configs, GPU then CPU; each is kept equal to the other (minus GPU-only models).
COMPOSE_PAIR = ("models.config", "models.cpu.config")


@dataclass(frozen=True)
class StackState:
    """What ``make up`` started, as recorded in ``stack.json``.

    ``mounts`` maps a directory the server sees to the host directory it is
    (compose: ``{"/models": <model repository>}``; embedded: empty, base
    paths are host paths). ``removed`` are models ``serving.config remove``
    took out (``make up`` does not add them back from the repository);
    ``exporting`` are zoo models a start is still exporting (the next start
    finishes them). A compose backend also records its ``compose_files``,
    ``compose_profiles``, ``compose_project`` and ``compose_env`` (the variables of the files it ran
    with), which ``make down``, ``make logs`` and ``python -m serving.stack run`` reuse.
    The embedded backend records its ``make up`` process (``pid``, started at
    ``pid_start``, clock ticks since boot) and its server's (``server_pid``,
    ``server_start``): ``make down`` signals a pid only while its start time
    still matches (``serving.stack.identity``).
    """

    backend: str
    models_config: Path
    grpc: str
    rest: str
    model_repo: Path
    mounts: Mapping[str, Path] = field(default_factory=dict)
    removed: tuple[str, ...] = ()
    exporting: tuple[str, ...] = ()
    pid: Optional[int] = None
    root_certificates: Optional[Path] = None
    admin_key_file: Optional[Path] = None
    compose_files: tuple[Path, ...] = ()
    compose_profiles: tuple[str, ...] = ()
    compose_project: str = ""
    compose_env: Mapping[str, str] = field(default_factory=dict)
    pid_start: Optional[int] = None
    server_pid: Optional[int] = None
    server_start: Optional[int] = None

    def to_json(self) -> dict:
        optional: dict[str, object] = {k: str(v) for k, v in (("root_certificates", self.root_certificates),
                                                              ("admin_key_file", self.admin_key_file)) if v is not None}
        if self.compose_files:
            optional.update(compose_files=[str(f) for f in self.compose_files],
                            compose_profiles=list(self.compose_profiles), compose_project=self.compose_project,
                            compose_env=dict(self.compose_env))
        optional.update({k: v for k, v in (("pid_start", self.pid_start), ("server_pid", self.server_pid),
                                           ("server_start", self.server_start)) if v is not None})
        return {"backend": self.backend, "models_config": str(self.models_config), "grpc": self.grpc,
                "rest": self.rest, "model_repo": str(self.model_repo),
                "mounts": {k: str(v) for k, v in self.mounts.items()},
                "removed": list(self.removed), "exporting": list(self.exporting), "pid": self.pid, **optional}

    @classmethod
    def from_json(cls, doc: Mapping) -> "StackState":
        return cls(backend=doc["backend"], models_config=Path(doc["models_config"]), grpc=doc["grpc"],
                   rest=doc["rest"], model_repo=Path(doc["model_repo"]),
                   mounts={k: Path(v) for k, v in (doc.get("mounts") or {}).items()},
                   removed=tuple(doc.get("removed") or ()), exporting=tuple(doc.get("exporting") or ()),
                   pid=doc.get("pid"),
                   root_certificates=Path(doc["root_certificates"]) if doc.get("root_certificates") else None,
                   admin_key_file=Path(doc["admin_key_file"]) if doc.get("admin_key_file") else None,
                   compose_files=tuple(Path(f) for f in doc.get("compose_files") or ()),
                   compose_profiles=tuple(doc.get("compose_profiles") or ()),
                   compose_project=doc.get("compose_project") or "",
                   compose_env={str(k): str(v) for k, v in (doc.get("compose_env") or {}).items()},
                   pid_start=_int_or_none(doc.get("pid_start")), server_pid=_int_or_none(doc.get("server_pid")),
                   server_start=_int_or_none(doc.get("server_start")))

    def replace(self, **changes: object) -> "StackState":
        return dataclasses.replace(self, **changes)


def _int_or_none(value: object) -> Optional[int]:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"expected a whole number, got {value!r}")
    return value


class StateFileError(ValueError):
    """``stack.json`` exists but is not a stack record (truncated, edited, another program's file)."""


def read_state(path: Path) -> Optional[StackState]:
    """The state in ``path``, or None when there is none (or it is unreadable)."""
    try:
        return load_state(path)
    except StateFileError:
        return None


def load_state(path: Path) -> Optional[StackState]:
    """The state in ``path``; None when there is no such file; :class:`StateFileError` (naming the file
    and what is wrong) when it cannot be read as a stack record. For ``make up`` and ``make down``, which
    must not take a corrupt record for "nothing runs"."""
    path = Path(path)
    try:
        text = path.read_text()
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise StateFileError(f"{path}: cannot be read: {exc.strerror}") from None
    try:
        doc = json.loads(text)
        if not isinstance(doc, dict):
            raise TypeError(f"a JSON {type(doc).__name__}, not an object")
        state = StackState.from_json(doc)
        if state.pid is not None and (isinstance(state.pid, bool) or not isinstance(state.pid, int)):
            raise TypeError(f"pid {state.pid!r} is not a number")
        return state
    except ValueError as exc:
        raise StateFileError(f"{path}: not JSON ({exc})") from None
    except KeyError as exc:
        raise StateFileError(f"{path}: no {exc} field") from None
    except (TypeError, AttributeError) as exc:
        raise StateFileError(f"{path}: not a stack record ({exc})") from None


def write_state(state: StackState, path: Path) -> Path:
    """Write ``state`` to ``path`` atomically."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps(state.to_json(), indent=2) + "\n")
    tmp.replace(path)
    return path


def _header(path: Path) -> str:
    """The comment lines a models config file starts with (HEADER for a new file)."""
    if not path.is_file():
        return HEADER
    lines = []
    for line in path.read_text().splitlines(keepends=True):
        if not line.startswith("#"):
            break
        lines.append(line)
    return "".join(lines)


def _twin(path: Path) -> Optional[Path]:
    """The other file of a compose pair beside ``path`` (None if ``path`` is not one, or it is absent)."""
    if path.name not in COMPOSE_PAIR:
        return None
    twin = path.with_name(COMPOSE_PAIR[1 - COMPOSE_PAIR.index(path.name)])
    return twin if twin.is_file() else None


def _with_gpu_only_of(cpu: ModelServerConfig, old_gpu: ModelServerConfig) -> ModelServerConfig:
    """The GPU config for a rewritten CPU config: its entries, plus the GPU-only ones of ``old_gpu``."""
    gpu_only = {m.name for m in ZOO if m.gpu_only}
    by_name = {e.name: e for e in cpu.model_config_list.config}
    out = new_model_server_config()
    out.CopyFrom(cpu)
    del out.model_config_list.config[:]
    kept = set()
    for entry in old_gpu.model_config_list.config:
        if entry.name in gpu_only:
            out.model_config_list.config.add().CopyFrom(entry)
        elif entry.name in by_name:
            out.model_config_list.config.add().CopyFrom(by_name[entry.name])
            kept.add(entry.name)
    for entry in cpu.model_config_list.config:
        if entry.name not in kept:
            out.model_config_list.config.add().CopyFrom(entry)
    return out


@dataclass(frozen=True)
class ServedConfig:
    """A models config file, the server that reads it, and where its base paths are on this host.

    ``state_file`` is set when the file is the running stack's config (then
    ``serving.config remove`` records removals there). ``root_certificates``
    and ``admin_key_file`` are the compose gateway's CA and admin API key
    (``make certs``): pushes go through the gateway, which admits reloads
    only with the admin key.
    """

    path: Path
    grpc: str
    mounts: Mapping[str, Path] = field(default_factory=dict)
    state_file: Optional[Path] = None
    root_certificates: Optional[Path] = None
    admin_key_file: Optional[Path] = None

    def connect(self) -> GrpcClient:
        """A client for config pushes to ``grpc``, with the gateway's CA and admin key when there is one."""
        api_key = self.admin_key_file.read_text().strip() if self.admin_key_file else None
        return connect(self.grpc, root_certificates=self.root_certificates, api_key=api_key)

    def load(self) -> ModelServerConfig:
        return load_model_server_config(self.path)

    def host_path(self, base_path: str) -> Path:
        """Where ``base_path`` (as the server sees it) is on this host."""
        pure = PurePosixPath(base_path)
        for target in sorted(self.mounts, key=len, reverse=True):
            if pure == PurePosixPath(target) or PurePosixPath(target) in pure.parents:
                return Path(self.mounts[target]) / pure.relative_to(target)
        return Path(base_path)

    def base_path_for(self, host_dir: Path) -> str:
        """The base path the server sees for ``host_dir``; ValueError if a compose server cannot see it."""
        host_dir = Path(host_dir).resolve()
        for target, source in self.mounts.items():
            source = Path(source).resolve()
            if host_dir == source or source in host_dir.parents:
                return str(PurePosixPath(target) / host_dir.relative_to(source).as_posix())
        if self.mounts:
            seen = ", ".join(f"{s} (mounted at {t})" for t, s in self.mounts.items())
            raise ValueError(f"{host_dir} is outside what the server of {self.path.name} sees: {seen}; "
                             "publish the model into the model repository first")
        return str(host_dir)

    def versions_on_disk(self, entry: ModelConfig) -> list[int]:
        return model_versions(self.host_path(entry.base_path))

    def entry_problems(self, entry: ModelConfig) -> list[str]:
        """What would make the server fail or wait on ``entry`` (see ``serving.config.edit``)."""
        host = self.host_path(entry.base_path)
        where = str(host) if str(host) == entry.base_path else f"{host} (base_path {entry.base_path})"
        return entry_problems(entry, model_versions(host), where)

    def problems(self, config: ModelServerConfig, names: Optional[Iterable[str]] = None) -> list[str]:
        """``entry_problems`` of every model of ``config`` (or of ``names``)."""
        wanted = None if names is None else set(names)
        return [p for e in config.model_config_list.config if wanted is None or e.name in wanted
                for p in self.entry_problems(e)]

    def write(self, config: ModelServerConfig) -> None:
        """Write ``config`` atomically, keeping its comment header and its compose twin in sync."""
        twin = _twin(self.path)
        write_model_server_config(config, self.path, header=_header(self.path))
        if twin is None:
            return
        if self.path.name == COMPOSE_PAIR[0]:
            twin_config = without_gpu_only(config)
        else:
            twin_config = _with_gpu_only_of(config, load_model_server_config(twin))
        write_model_server_config(twin_config, twin, header=_header(twin))

    def server_answers(self, timeout: float = 1.0) -> bool:
        """Whether something accepts connections at the gRPC target (a connect, nothing sent)."""
        host, _, port = self.grpc.rpartition(":")
        try:
            socket.create_connection((host.strip("[]") or "127.0.0.1", int(port)), timeout=timeout).close()
            return True
        except (OSError, ValueError):
            return False


def _same(a: Path, b: Path) -> bool:
    return Path(a).resolve() == Path(b).resolve()


def served_config(config_file: Optional[Path] = None, *, grpc: Optional[str] = None,
                  model_repo: Optional[Path] = None, work_dir: Path = DEFAULT_WORK_DIR) -> ServedConfig:
    """The config a command works on, and the server it pushes to (see the module doc)."""
    state_file = Path(work_dir) / STATE_FILE
    state = read_state(state_file)
    if state is not None and (config_file is None or _same(config_file, state.models_config)):
        mounts = dict(state.mounts)
        if model_repo is not None and CONTAINER_MODELS_DIR in mounts:
            mounts[CONTAINER_MODELS_DIR] = Path(model_repo).resolve()
        credentials = ((state.root_certificates, state.admin_key_file) if grpc in (None, state.grpc)
                       else (None, None))
        return ServedConfig(state.models_config, grpc or state.grpc, mounts, state_file, *credentials)
    target = grpc or (state.grpc if state is not None else DEFAULT_GRPC)
    if state is not None and target == state.grpc:
        mounts = dict(state.mounts)
    else:
        mounts = {CONTAINER_MODELS_DIR: Path(model_repo or DEFAULT_MODEL_REPO).resolve()}
    return ServedConfig(Path(config_file) if config_file else SERVING_DIR / COMPOSE_PAIR[0], target, mounts)


def stack_model_repo(work_dir: Path = DEFAULT_WORK_DIR) -> Path:
    """The model repository of the stack ``make up`` recorded in ``work_dir``, else ``<checkout>/models``."""
    state = read_state(Path(work_dir) / STATE_FILE)
    return state.model_repo if state is not None else DEFAULT_MODEL_REPO


def apply_steps(served: ServedConfig, name: str, steps: Sequence[Step], *, timeout: float = 600.0,
                log: Callable[[str], None] = print) -> bool:
    """Apply ``steps`` (for model ``name``) to ``served``; True when a server took them.

    Where a server answers at ``served.grpc``, each step is pushed with
    ``HandleReloadConfigRequest`` and written once accepted (``Reloader``); if
    one fails, the config from before is pushed and written back, and the
    ``ReloadError`` propagates. Where none answers, the last step's config is
    written for the server's next start.
    """
    if not steps:
        return False
    if not served.server_answers():
        served.write(steps[-1].config)
        return False
    before = served.load()
    with served.connect() as client:
        try:
            Reloader(client, write=served.write, wait_timeout=timeout, log=log).apply(name, steps)
        except ReloadError:
            try:
                client.reload_config(before)
                served.write(before)
            except status.ServingError as exc:
                log(f"{name}: could not restore the previous config: {exc}")
            raise
    return True
