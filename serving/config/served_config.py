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

Every change holds the file's lock and compare-and-swaps on what it read
(:func:`change_served_config`, ``serving.config.config_lock``); the file is
written before each push. Writes are atomic (temp file + rename). The compose pair ``models.config`` /
``models.cpu.config`` stays in sync: writing one rewrites the other (the CPU
file is the GPU file without its GPU-only models, as ``check`` requires).
"""
from __future__ import annotations

import dataclasses
import functools
import json
import os
import socket
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING, Any, Callable, Iterable, Mapping, Optional, Sequence

from serving import status
from serving.checkout import REPO_ROOT
from serving.client import Connection, GrpcClient
from serving.config import load_model_server_config, parse_text_proto
from serving.config.config_lock import ConfigLock, Snapshot, StaleConfig, read_snapshot
from serving.config.edit import entry_problems
from serving.config.models import (
    CONTAINER_MODELS_DIR,
    HEADER,
    new_model_server_config,
    without_gpu_only,
    write_model_server_config,
)
from serving.config.reload import Reloader, ReloadError, Step, connect, connect_with
from serving.model_repo import ZOO, model_versions

if TYPE_CHECKING:  # tensorflow_serving's protos load only when a config is read
    from tensorflow_serving.config.model_server_config_pb2 import ModelConfig, ModelServerConfig

__all__ = [
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
    "change_served_config",
    "with_entry_of",
]

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

    def replace(self, **changes: Any) -> "StackState":
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
    only with the admin key. ``connection`` (the CLI's TLS and credential
    arguments, when given) replaces both.
    """

    path: Path
    grpc: str
    mounts: Mapping[str, Path] = field(default_factory=dict)
    state_file: Optional[Path] = None
    root_certificates: Optional[Path] = None
    admin_key_file: Optional[Path] = None
    connection: Optional[Connection] = None

    def connect(self) -> GrpcClient:
        """A client for config pushes to ``grpc``: ``connection`` when given, else the gateway's CA and admin key
        when there is one."""
        if self.connection is not None:
            return connect_with(self.grpc, self.connection)
        api_key = self.admin_key_file.read_text().strip() if self.admin_key_file else None
        return connect(self.grpc, root_certificates=self.root_certificates, api_key=api_key)

    def load(self) -> ModelServerConfig:
        return load_model_server_config(self.path)

    def lock(self) -> ConfigLock:
        """The lock every change of this file holds (``.<file>.lock`` beside it)."""
        return ConfigLock(self.path)

    def snapshot(self) -> Snapshot:
        """The file's text and version now (for a compare-and-swap under :meth:`lock`)."""
        return read_snapshot(self.path)

    def parse(self, snapshot: Snapshot) -> ModelServerConfig:
        """The ``ModelServerConfig`` of ``snapshot``; FileNotFoundError when the file was absent."""
        if not snapshot.exists:
            raise FileNotFoundError(f"{self.path} does not exist")
        config = parse_text_proto(snapshot.text, new_model_server_config())
        config.model_config_list.SetInParent()
        return config

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
        for target, mounted in self.mounts.items():
            source = Path(mounted).resolve()
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
                log: Callable[[str], None] = print, snapshot: Optional[Snapshot] = None) -> bool:
    """Apply ``steps`` (for model ``name``, planned on ``snapshot`` of the file, default: the file now) to
    ``served`` under its lock; True when a server took them. See :func:`change_served_config`; a file
    changed since ``snapshot`` raises StaleConfig (steps planned by a caller cannot be planned again)."""
    return change_served_config(served, name, lambda config: steps, snapshot=snapshot,
                                replan=lambda old, new: False, timeout=timeout, log=log)


def change_served_config(served: ServedConfig, name: str, plan: Callable[[ModelServerConfig], Sequence[Step]], *,
                         snapshot: Optional[Snapshot] = None,
                         replan: Callable[[ModelServerConfig, ModelServerConfig], bool] = lambda old, new: True,
                         write_file: bool = True, timeout: float = 600.0, log: Callable[[str], None] = print,
                         who: str = "", on_done: Optional[Callable[[], None]] = None) -> bool:
    """Change model ``name`` in ``served``: ``plan`` the steps on the file, then apply them under its lock.

    1. ``plan`` runs on ``snapshot`` (default: the file now) before the lock is taken, so a refusal
       (ValueError, KeyError, ReloadError...) waits for no one and changes nothing.
    2. The lock (:class:`ConfigLock`, waited for up to ``timeout`` seconds) is held to the end. If the
       file changed since the snapshot, ``replan(old, new)`` decides: True plans again on the fresh
       file (the change keeps the other command's), False refuses with StaleConfig (nothing sent).
    3. Each step's config is written first (compare-and-swap on what this command last read or wrote;
       atomic), then pushed with ``HandleReloadConfigRequest`` and its versions awaited. A server's poll
       of the file in between reads the new config, never a stale one, and a command killed after its
       push leaves the file saying what the server serves.
    4. A step that fails puts model ``name``'s entry back as the snapshot had it, on the file as it is
       now (other models untouched: no config from before is pushed over anyone), written and pushed,
       then the ReloadError propagates.

    Where no server answers at ``served.grpc``, the last step's config is written for the server's next
    start and False is returned. ``write_file=False`` pushes without writing (``--no-write-back``).
    ``on_done`` runs once the change is applied, still under the lock (bookkeeping that must not race
    another change, such as ``stack.json``'s removed models).
    """
    snapshot = snapshot or served.snapshot()
    steps = list(plan(served.parse(snapshot)))
    if not steps:
        log(f"{name}: nothing to do")
        return False
    lock = served.lock()
    with lock.hold(timeout, who=who, log=log):
        current = served.snapshot()
        if current.version != snapshot.version:
            old, new = served.parse(snapshot), served.parse(current)
            if not replan(old, new):
                raise StaleConfig(f"{served.path} changed since this command read it, and the change "
                                  f"concerns {name}: nothing was sent; read the config again "
                                  "(`python -m serving.config render`) and rerun the command")
            log(f"{name}: {served.path} changed since it was read (another command's change); "
                "planning again on the current file, keeping that change")
            snapshot, steps = current, list(plan(new))
            if not steps:
                log(f"{name}: nothing to do")
                return False
        pushed = served.server_answers()
        if not pushed:
            if write_file:
                lock.write_if(snapshot, lambda: served.write(steps[-1].config))
        else:
            _apply_locked(served, lock, name, snapshot, steps, write_file=write_file, timeout=timeout, log=log)
        if on_done is not None:
            on_done()
    return pushed


def _apply_locked(served: ServedConfig, lock: ConfigLock, name: str, snapshot: Snapshot, steps: Sequence[Step],
                  *, write_file: bool, timeout: float, log: Callable[[str], None]) -> None:
    """Write, push and await each step (the caller holds ``lock``); on a failure, undo ``name``'s part."""
    written = snapshot
    with served.connect() as client:
        reloader = Reloader(client, wait_timeout=timeout, log=log)
        try:
            for step in steps:
                log(f"{name}: {step.description}")
                if write_file:
                    written = lock.write_if(written, functools.partial(served.write, step.config))
                try:
                    client.reload_config(step.config)
                except status.ServingError as exc:
                    raise ReloadError(f"the server rejected '{step.description}': {exc}") from exc
                reloader.wait_available(name, step.wait_for)
        except ReloadError:  # (a StaleConfig, someone else's write, is left alone)
            _undo(served, lock, client, name, snapshot, written, write_file=write_file, log=log)
            raise


def _undo(served: ServedConfig, lock: ConfigLock, client: GrpcClient, name: str, snapshot: Snapshot,
          written: Snapshot, *, write_file: bool, log: Callable[[str], None]) -> None:
    """Put ``name``'s entry back as ``snapshot`` had it, in the file as this command left it."""
    # Without writes (--no-write-back) the file is still the snapshot: pushing it puts the model back.
    now = served.parse(written if write_file else snapshot)
    restored = with_entry_of(now, served.parse(snapshot), name)
    try:
        if write_file:
            lock.write_if(written, lambda: served.write(restored))
        client.reload_config(restored)
        log(f"{name}: put back as it was before this command (other models untouched)")
    except StaleConfig as exc:
        log(f"{name}: not put back: {exc}")
    except status.ServingError as exc:
        log(f"{name}: the server did not take {name} back as it was before this command ({exc}); "
            f"{served.path} says how it should be, which the server reads at its next poll or start")


def with_entry_of(config: ModelServerConfig, source: ModelServerConfig, name: str) -> ModelServerConfig:
    """A copy of ``config`` whose entry for ``name`` is ``source``'s (dropped where ``source`` has none)."""
    theirs = next((e for e in source.model_config_list.config if e.name == name), None)
    out = new_model_server_config()
    out.CopyFrom(config)
    del out.model_config_list.config[:]
    out.model_config_list.SetInParent()
    placed = False
    for entry in config.model_config_list.config:
        if entry.name != name:
            out.model_config_list.config.add().CopyFrom(entry)
        elif theirs is not None:
            out.model_config_list.config.add().CopyFrom(theirs)
            placed = True
    if theirs is not None and not placed:
        out.model_config_list.config.add().CopyFrom(theirs)
    return out
