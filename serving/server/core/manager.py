"""The servable manager: aspired versions in, loaded servables out.

Mirrors TF Serving's ``AspiredVersionsManager`` + ``BasicManager`` +
``ServableStateMonitor`` and the model-config part of ``ServerCore``. It knows
nothing of TensorFlow: each version is loaded through a ``core.loader.Loader``
that the injected ``LoaderFactory`` builds (the server injects the SavedModel
one), and the servable it serves is the loader's opaque value.

* ``reload_config(ModelServerConfig)`` replaces the whole model list: label
  rules are checked first (nothing changes if they fail), the file-system
  source is re-pointed (models missing from the new config get an empty
  aspired list, so they are unloaded), and the call returns once every newly
  added model's latest version is AVAILABLE or has failed (then
  ``status.Unknown`` "N model(s) did not become available: ...", "servable(s)"
  for the first model list, as TF Serving's initial load words it), as
  ``ServerCore::ReloadConfig`` waits (``WaitUntilModelsAvailable``).
  Config changes are serialized as TF Serving's ``config_mu_`` serializes
  them: one config lock is held from the start of a change until its models
  are AVAILABLE or failed, by RPC reloads and the config-file poller alike,
  and a reload arriving meanwhile waits its turn (it is not aborted). Two
  bounds keep a model that can never load from wedging every later reload
  (TF Serving waits without end): a reload, waiting for the lock or for its
  models, ends at its caller's ``timeout`` (``status.DeadlineExceeded``) or
  when ``caller_gone`` is set (its deadline passed or it cancelled;
  ``status.Cancelled``); and a lock holder without a deadline whose pending
  models have no version at all under their base paths gives the lock up as
  soon as another config change waits for it (``status.Aborted``). The config stays applied
  in every case.
* A manager thread applies the availability-preserving policy: a new version
  is loaded (retried ``max_num_load_retries`` times, ``load_retry_interval_micros``
  apart) and warmed up before the old one is unloaded. Loads and unloads run
  on worker threads, so one slow model does not stall the others.
* ``acquire(name, version=None, label=None)`` is how requests reach a
  servable. An omitted version means the highest AVAILABLE version
  (``Latest(name)``); a label resolves to its version first. While a request
  holds a servable it is not closed: an unload waits for its holders.
* ``model_status`` reports every version the manager has seen since
  ``start()``, END ones included, newest first, as ``GetModelStatus`` does.
* ``heap`` (optional, ``VersionEvents``) hears of each version loaded (after
  warmup, before it serves) and each unloaded; the server freezes Python's
  heap there (``serving.server.heap_freezer``).

Thread-safety: every public method may be called from any thread.
"""
from __future__ import annotations

import logging
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Generic, Optional, Protocol, TypeVar

from tensorflow_serving.config.model_server_config_pb2 import ModelConfig, ModelServerConfig

from serving import status
from serving.codec import VersionState, VersionStatus
from serving.server.core.harness import VersionHarness
from serving.server.core.labels import LabelMap, build_label_map
from serving.server.core.loader import Loader, LoaderFactory
from serving.server.core.model_config import validate_model_config_list
from serving.server.core.policy import HarnessState, next_action
from serving.server.core.retrier import retry
from serving.server.core.source import AspiredVersion, FileSystemSource, ServableToMonitor, IsQuarantined
from serving.server.core.state_monitor import ServableStateMonitor

__all__ = ["ServableManager", "ServableHandle", "VersionEvents"]

log = logging.getLogger(__name__)

_MANAGE_STATE_INTERVAL_S = 0.1  # TF Serving's manage_state_interval_micros default
_LOCK_POLL_S = 0.05   # how soon a reload waiting for the config lock notices its caller has gone

ServableT = TypeVar("ServableT")


class VersionEvents(Protocol):
    """What the manager tells about loads and unloads (called on worker threads)."""

    def version_loaded(self) -> None:
        """A version is loaded and warmed up; it serves right after this returns."""

    def version_unloaded(self) -> None:
        """A version was closed."""


class ServableHandle(Generic[ServableT]):
    """Context manager holding one servable for one request (``acquire`` returns it)."""

    __slots__ = ("_manager", "_harness")

    def __init__(self, manager: "ServableManager[ServableT]", harness: VersionHarness[ServableT]) -> None:
        self._manager = manager
        self._harness = harness

    def __enter__(self) -> ServableT:
        servable = self._harness.servable
        assert servable is not None, "a handle is only given out for a READY version"
        return servable

    def __exit__(self, *exc: object) -> None:
        self._manager._release(self._harness)


class ServableManager(Generic[ServableT]):
    """Loads, serves and unloads model versions. See the module docstring for the contract.

    ``loader_factory`` builds each version's ``Loader``; ``max_num_load_retries``
    and ``load_retry_interval_micros`` are TF Serving's (``AspiredVersionsManager``
    options, flag defaults). Lifecycle: ``start()`` once, then
    ``reload_config(...)`` any number of times, then ``stop()`` (cancels pending
    retries, waits for running loads, unloads everything).
    """

    def __init__(self, loader_factory: LoaderFactory, *, max_num_load_retries: int = 5,
                 load_retry_interval_micros: int = 60_000_000, file_system_poll_wait_seconds: float = 1.0,
                 allow_version_labels: bool = True, allow_version_labels_for_unavailable_models: bool = False,
                 heap: Optional[VersionEvents] = None,
                 quarantined: Optional[IsQuarantined] = None) -> None:
        if max_num_load_retries < 0:
            raise ValueError("max_num_load_retries must be >= 0")
        if load_retry_interval_micros < 0:
            raise ValueError("load_retry_interval_micros must be >= 0")
        self._loader_factory = loader_factory
        self._max_num_load_retries = max_num_load_retries
        self._load_retry_interval_micros = load_retry_interval_micros
        self._heap = heap
        self._allow_labels = allow_version_labels
        self._allow_unavailable_labels = allow_version_labels_for_unavailable_models
        self._cond = threading.Condition(threading.Lock())
        self._harnesses: dict[str, dict[int, VersionHarness[ServableT]]] = {}
        self._monitor = ServableStateMonitor(self._cond)
        self._pending: dict[str, list[AspiredVersion]] = {}
        self._labels: LabelMap = {}
        self._config: Optional[ModelServerConfig] = None
        self._model_names: list[str] = []
        self._served: frozenset[str] = frozenset()   # replaced whole: read without the lock
        self._config_turn = threading.Condition(threading.Lock())   # guards the two below
        self._config_busy = False     # a config change holds the config lock
        self._config_waiters = 0      # config changes waiting for it (read lock-free by the holder)
        self._source = FileSystemSource(self._on_aspired_versions, file_system_poll_wait_seconds,
                                        quarantined)   # the source never picks a quarantined version
        self._workers: Optional[ThreadPoolExecutor] = None
        self._thread: Optional[threading.Thread] = None
        self._stopping = False

    # ------------------------------------------------------------ lifecycle

    def start(self) -> None:
        """Start the manager thread and the file-system poller. Idempotent."""
        with self._cond:
            if self._thread is not None:
                return
            self._stopping = False
            self._monitor.reopen()
            self._workers = ThreadPoolExecutor(max_workers=4, thread_name_prefix="servable-worker")
            self._thread = threading.Thread(target=self._manage_loop, name="ServableManager",
                                            daemon=True)
            self._thread.start()
        self._source.start()

    def stop(self, drain_timeout: float = 30.0) -> None:
        """Stop polling and managing; unload every version (holders get ``drain_timeout`` s)."""
        self._source.stop()
        with self._cond:
            if self._thread is None:
                return
            self._stopping = True
            self._monitor.close()
            for harness in self._all_harnesses():
                harness.cancelled.set()
            self._cond.notify_all()
        self._thread.join()
        assert self._workers is not None   # started with the thread
        self._workers.shutdown(wait=True)
        self._unload_all(drain_timeout)
        with self._cond:
            self._thread = None
            self._workers = None

    def _unload_all(self, drain_timeout: float) -> None:
        deadline = time.monotonic() + drain_timeout
        with self._cond:
            ready = [h for h in self._all_harnesses() if h.state is HarnessState.READY]
            for harness in ready:
                self._set_state(harness, HarnessState.UNLOADING, VersionState.UNLOADING)
            while any(h.holders for h in ready) and time.monotonic() < deadline:
                self._cond.wait(max(deadline - time.monotonic(), 0.0))
        for harness in ready:
            if harness.holders:
                log.warning("Unloading %s with %d request(s) still holding it", harness.id,
                            harness.holders)
            assert harness.loader is not None   # a READY version has its loader
            harness.loader.unload()
            with self._cond:
                harness.loader = harness.servable = None
                self._set_state(harness, HarnessState.DISABLED, VersionState.END)

    # ------------------------------------------------------------ config

    def reload_config(self, config: ModelServerConfig, timeout: Optional[float] = None,
                      caller_gone: Optional[threading.Event] = None) -> None:
        """Replace the served models with ``config``; see the module docstring.

        Holds the config lock from the start until the newly added models are
        AVAILABLE or failed. ``timeout`` (seconds, None = as long as it takes,
        like TF Serving) bounds the wait for the lock and for the models
        together; past it ``status.DeadlineExceeded``. ``caller_gone``, once
        set, ends either wait with ``status.Cancelled``. An applied config
        stays applied whatever the wait's outcome.
        """
        deadline = None if timeout is None else time.monotonic() + timeout
        self._acquire_config_lock(deadline, caller_gone)
        try:
            first = self._config is None or not self._config.HasField("model_config_list")
            applied = self._apply_config(config)
            if applied is None:   # an empty config: nothing was changed
                return
            new_models, start = applied
            if new_models:
                remaining = None if deadline is None else max(0.0, deadline - time.monotonic())
                self._monitor.wait_until_models_available(
                    new_models, start, remaining,
                    stop=lambda: self._wait_abandoned(new_models, caller_gone, may_yield=deadline is None),
                    noun="servable" if first else "model")   # the first config loads as load_servables_fast does
        finally:
            self._release_config_lock()
        log.info("Finished adding/updating models")

    def _acquire_config_lock(self, deadline: Optional[float], caller_gone: Optional[threading.Event]) -> None:
        """Wait for the config lock; raises if the caller's deadline or cancellation comes first."""
        with self._config_turn:
            self._config_waiters += 1
            try:
                while self._config_busy:
                    if self._stopping:
                        raise status.Cancelled("The server is stopping; the config reload was not applied")
                    if caller_gone is not None and caller_gone.is_set():
                        raise status.Cancelled(
                            "The caller of the config reload has gone (deadline or cancel) while an earlier "
                            "config change was still in progress; the config was not applied")
                    remaining = None if deadline is None else deadline - time.monotonic()
                    if remaining is not None and remaining <= 0:
                        raise status.DeadlineExceeded(
                            "Timed out waiting for an earlier config change to finish; the config was not "
                            "applied")
                    self._config_turn.wait(_LOCK_POLL_S if remaining is None else min(remaining, _LOCK_POLL_S))
                self._config_busy = True
            finally:
                self._config_waiters -= 1

    def _release_config_lock(self) -> None:
        with self._config_turn:
            self._config_busy = False
            self._config_turn.notify()

    def _wait_abandoned(self, models: list[str], caller_gone: Optional[threading.Event], *,
                        may_yield: bool) -> Optional[status.ServingError]:
        """Why a reload's wait for ``models`` should end now, if it should (caller holds ``_cond``)."""
        if caller_gone is not None and caller_gone.is_set():
            return status.Cancelled(
                f"The caller of the config reload has gone (deadline or cancel); stopped waiting for "
                f"model(s) to become available: {', '.join(models)}")
        if may_yield and self._config_waiters and all(self._has_no_version_locked(name) for name in models):
            return status.Aborted(
                f"No version of model(s) {', '.join(models)} was found under their base paths and a later "
                f"config change is waiting; stopped waiting for them (the config stays applied)")
        return None

    def _has_no_version_locked(self, name: str) -> bool:
        """Whether the source found no version of ``name`` to load (caller holds ``_cond``)."""
        if self._pending.get(name):
            return False
        return not any(h.is_aspired for h in self._harnesses.get(name, {}).values())

    def _apply_config(self, config: ModelServerConfig) -> Optional[tuple[list[str], int]]:
        """Validate and apply ``config`` (the caller holds the config lock): the models to wait for and
        the monitor's checkpoint to wait from (None for an empty config)."""
        if self._thread is None:
            raise RuntimeError("ServableManager.reload_config() called before start()")
        models = self._accepted_model_list(config)
        if models is None:
            return None
        previous = list(self._config.model_config_list.config) if self._config else []
        validate_model_config_list(models, previous)
        with self._cond:
            labels = build_label_map(
                models, self._monitor.is_available, self._labels,
                allow_version_labels=self._allow_labels,
                allow_unavailable=self._allow_unavailable_labels)
            self._labels = labels
            self._model_names = [m.name for m in models]
            self._served = frozenset(self._model_names)
            start = self._monitor.checkpoint()
        new_models = [m.name for m in models if m.name not in {p.name for p in previous}]
        self._config = ModelServerConfig()
        self._config.CopyFrom(config)
        log.info("Adding/updating models.")
        self._source.set_servables(
            [ServableToMonitor(m.name, m.base_path,
                               m.model_version_policy if m.HasField("model_version_policy")
                               else None) for m in models])
        return new_models, start

    def _accepted_model_list(self, config: ModelServerConfig) -> Optional[list[ModelConfig]]:
        kind = config.WhichOneof("config")
        old_kind = self._config.WhichOneof("config") if self._config is not None else None
        if old_kind is not None and config != self._config and not (
                old_kind == kind == "model_config_list"):
            raise status.FailedPrecondition(
                "Cannot transition to requested config. It is only legal to transition from one "
                "ModelConfigList to another.")
        if kind is None:
            log.info("Taking no action for empty config.")
            return None
        if kind != "model_config_list":
            raise status.InvalidArgument("Missing custom_model_config_loader in ServerCore Options")
        return list(config.model_config_list.config)

    # ------------------------------------------------------------ requests

    def acquire(self, name: str, version: Optional[int] = None,
                label: Optional[str] = None) -> ServableHandle[ServableT]:
        """Hold a servable for one request: ``with manager.acquire("m") as servable: ...``.

        ``version`` None and ``label`` None = the highest AVAILABLE version.
        Raises ``status.NotFound`` ("Servable not found for request: Latest(m)"
        / "Specific(m, 3)"), or ``status.InvalidArgument`` for an empty name or an
        unknown label (``ServerCore::ServableRequestFromModelSpec``).
        """
        if not name:
            raise status.InvalidArgument("ModelSpec has no name specified.")
        with self._cond:
            if label is not None:
                version = self._version_for_label_locked(name, label)
            versions = self._harnesses.get(name, {})
            if version is None:
                ready = [h for h in versions.values() if h.state is HarnessState.READY]
                harness = max(ready, key=lambda h: h.version) if ready else None
            else:
                harness = versions.get(int(version))
                if harness is not None and harness.state is not HarnessState.READY:
                    harness = None
            if harness is None:
                request = f"Latest({name})" if version is None else f"Specific({name}, {version})"
                raise status.NotFound(f"Servable not found for request: {request}")
            harness.holders += 1
        return ServableHandle(self, harness)

    def _release(self, harness: VersionHarness[ServableT]) -> None:
        with self._cond:
            harness.holders -= 1
            if harness.holders == 0 and harness.state is HarnessState.UNLOADING:
                self._cond.notify_all()

    def _version_for_label_locked(self, name: str, label: str) -> int:
        if not self._allow_labels:
            raise status.InvalidArgument(
                "ModelSpec has 'version_label' set, but it is not currently allowed by the server.")
        try:
            return self._labels[name][label]
        except KeyError:
            raise status.InvalidArgument(f"Unrecognized servable version label: {label}") from None

    def model_status(self, name: str, version: Optional[int] = None) -> list[VersionStatus]:
        """The versions of ``name`` and their states, newest first (``GetModelStatus``)."""
        with self._cond:
            states = self._monitor.version_states(name)
        if version is not None:
            if int(version) not in states:
                raise status.NotFound(f"Could not find version {version} of model {name}")
            return [states[int(version)]]
        if not states:
            raise status.NotFound(f"Could not find any versions of model {name}")
        return [states[v] for v in sorted(states, reverse=True)]

    def model_names(self) -> list[str]:
        """Names of the models in the current config, in config order."""
        with self._cond:
            return list(self._model_names)

    def serves(self, name: str) -> bool:
        """Whether ``name`` is a model of the current config (lock-free; the request path asks)."""
        return name in self._served

    def version_labels(self, name: str) -> dict[str, int]:
        """The labels of ``name`` (label -> version) currently in force."""
        with self._cond:
            return dict(self._labels.get(name, {}))

    # ------------------------------------------------------------ state machine

    def _all_harnesses(self) -> list[VersionHarness[ServableT]]:
        return [h for versions in self._harnesses.values() for h in versions.values()]

    def _publish(self, harness: VersionHarness, state: VersionState,
                 error: Optional[status.ServingError] = None) -> None:
        self._monitor.publish(harness.name, harness.version, state, error)

    def _set_state(self, harness: VersionHarness, state: HarnessState,
                   published: VersionState, error: Optional[status.ServingError] = None) -> None:
        harness.state = state
        self._publish(harness, published, error)

    def _on_aspired_versions(self, name: str, versions: list[AspiredVersion]) -> None:
        with self._cond:
            self._pending[name] = list(versions)
            self._cond.notify_all()

    def _manage_loop(self) -> None:
        with self._cond:
            while not self._stopping:
                try:
                    self._flush_locked()
                    self._handle_pending_locked()
                    self._apply_policy_locked()
                except Exception:
                    log.exception("servable manager iteration failed")
                self._cond.wait(_MANAGE_STATE_INTERVAL_S)

    def _flush_locked(self) -> None:
        """Forget un-aspired versions that are new, unloaded or failed (``FlushServables``)."""
        done = (HarnessState.NEW, HarnessState.DISABLED, HarnessState.ERROR)
        for versions in self._harnesses.values():
            for version in [v for v, h in versions.items() if not h.is_aspired and h.state in done]:
                del versions[version]

    def _handle_pending_locked(self) -> None:
        for name in list(self._pending):
            versions = self._pending[name]
            managed = self._harnesses.get(name, {})
            if any(v.version in managed and not managed[v.version].is_aspired for v in versions):
                continue  # a re-aspired version is still draining; retry next round
            del self._pending[name]
            self._process_aspired_versions_locked(name, versions)

    def _process_aspired_versions_locked(self, name: str, versions: list[AspiredVersion]) -> None:
        managed = self._harnesses.setdefault(name, {})
        wanted = {v.version for v in versions}
        current = {v for v, h in managed.items() if h.is_aspired}
        for harness in managed.values():
            if harness.version not in wanted and harness.is_aspired:
                harness.is_aspired = False
                harness.cancelled.set()
        for aspired in versions:
            if aspired.version not in current:
                harness = VersionHarness(name, aspired.version, aspired.path)
                managed[aspired.version] = harness
                self._publish(harness, VersionState.START)

    def _apply_policy_locked(self) -> None:
        for versions in self._harnesses.values():
            action = next_action([h.snapshot() for h in versions.values()])
            if action is None:
                continue
            harness = versions[action.version]
            assert self._workers is not None   # the manage loop runs between start() and stop()
            if action.kind == "load":
                self._set_state(harness, HarnessState.LOADING, VersionState.LOADING)
                self._workers.submit(self._load, harness)
            else:
                self._set_state(harness, HarnessState.UNLOADING, VersionState.UNLOADING)
                self._workers.submit(self._unload, harness)

    # ------------------------------------------------------------ workers

    def _load(self, harness: VersionHarness[ServableT]) -> None:
        try:
            loader: Loader[ServableT] = self._loader_factory(harness.name, harness.version, harness.path)
            log.info("Approving load for servable version %s (estimated %d bytes of RAM)", harness.id,
                     loader.estimate_resources())
            log.info("Loading servable version %s", harness.id)
            retry(f"Loading servable: {harness.id}", self._max_num_load_retries, self._load_retry_interval_micros,
                  loader.load, harness.cancelled)
            servable = loader.servable()
        except status.ServingError as error:
            with self._cond:
                harness.error = error
                self._set_state(harness, HarnessState.ERROR, VersionState.END, error)
            log.error("Servable %s cannot be loaded: %s", harness.id, error)
            return
        if harness.cancelled.is_set():  # un-aspired while loading: never serve it
            loader.unload()
            with self._cond:
                self._set_state(harness, HarnessState.DISABLED, VersionState.END,
                                status.Cancelled("Loading of servable cancelled"))
            return
        if self._heap is not None:
            self._heap.version_loaded()
        with self._cond:
            harness.loader, harness.servable = loader, servable
            self._set_state(harness, HarnessState.READY, VersionState.AVAILABLE)
        log.info("Successfully loaded servable version %s", harness.id)

    def _unload(self, harness: VersionHarness[ServableT]) -> None:
        with self._cond:
            while harness.holders:
                self._cond.wait()
            loader, harness.loader, harness.servable = harness.loader, None, None
        log.info("Unloading servable version %s", harness.id)
        assert loader is not None   # only a loaded version is unloaded
        loader.unload()
        if self._heap is not None:
            self._heap.version_unloaded()
        with self._cond:
            self._set_state(harness, HarnessState.DISABLED, VersionState.END)
        log.info("Done unloading servable version %s", harness.id)
