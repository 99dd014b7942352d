"""Load one SavedModel version into a ``Servable`` (TF Serving's SavedModelBundle loader).

Loading is done as TF Serving does it: a TF1 ``Session`` with the configured
intra/inter-op parallelism, ``saved_model.loader.load(sess, tags, path)``
(restores variables, runs the init op), signatures from the MetaGraphDef.
Then the run wrapper (batching) is applied and warmup replayed; a warmup
failure fails the load. TF2 exports (tf.function signatures, also with
``jit_compile=True``) run unchanged in such a Session.

``SavedModelLoader`` is the TensorFlow side of ``core.loader``: called with
(name, version, path) it is the ``LoaderFactory`` the server injects into the
manager (TF Serving's ``SavedModelBundleSourceAdapter``), building one
``SavedModelVersionLoader`` (a ``core.loader.Loader`` of a ``Servable``) per
version. ``SavedModelLoader.load`` makes ONE attempt; retries belong to the
manager (TF Serving's ``LoaderHarness``). A version's RAM estimate is TF
Serving's heuristic (``EstimateResourceFromPath``): the size of its files
times 1.2.
"""
from __future__ import annotations

import logging
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Optional, Protocol, Sequence

from serving import status
from serving.server.tensorflow.servable import RunWrapper, Servable, tf_error_message
from serving.server.tensorflow.warmup import WarmupMetrics, run_saved_model_warmup

__all__ = ["LoaderOptions", "LoadMetrics", "SavedModelLoader", "SavedModelVersionLoader"]

log = logging.getLogger(__name__)

_RAM_ESTIMATE_MULTIPLIER = 1.2   # TF Serving's kResourceEstimateRAMMultiplier (pad bytes: 0)


class LoadMetrics(WarmupMetrics, Protocol):
    """What loading records (``serving.server.metrics.ServerMetrics`` provides it); thread-safe."""

    def record_load(self, model_path: str, ok: bool, latency_us: float) -> None: ...


@dataclass(frozen=True)
class LoaderOptions:
    """How versions are loaded; TF Serving's flag defaults.

    ``intra_op``/``inter_op`` 0 lets TensorFlow choose. ``run_wrapper`` is
    applied to every servable right after loading, before warmup. (Retries
    are the manager's: ``ServableManager(max_num_load_retries=...)``.)
    """

    enable_model_warmup: bool = True
    num_request_iterations_for_warmup: int = 1
    intra_op: int = 0
    inter_op: int = 0
    saved_model_tags: Sequence[str] = ("serve",)
    run_wrapper: Optional[RunWrapper] = None

    def __post_init__(self) -> None:
        if not self.saved_model_tags:
            raise ValueError("saved_model_tags must name at least one tag (TF Serving uses 'serve')")


class SavedModelLoader:
    """Loads versions with fixed ``LoaderOptions``. Thread-safe: loads may run concurrently."""

    def __init__(self, options: LoaderOptions, metrics: Optional[LoadMetrics] = None) -> None:
        self.options = options
        self.metrics = metrics

    def __call__(self, name: str, version: int, path: str) -> "SavedModelVersionLoader":
        """The ``core.loader.Loader`` of one version (this is the manager's ``LoaderFactory``)."""
        return SavedModelVersionLoader(self, name, version, path)

    def load(self, name: str, version: int, path: str) -> Servable:
        """Load, wrap and warm up ``path``; raise ``status.ServingError`` on any failure."""
        start = time.monotonic()
        try:
            servable = self._load_session(name, version, path)
        except status.ServingError:
            self._record_load(path, False, start)
            raise
        self._record_load(path, True, start)
        try:
            if self.options.run_wrapper is not None:
                servable.wrap_run(self.options.run_wrapper)
            if self.options.enable_model_warmup:
                run_saved_model_warmup(
                    servable, path, metrics=self.metrics,
                    num_request_iterations=self.options.num_request_iterations_for_warmup)
        except BaseException:
            servable.close()
            raise
        return servable

    def _record_load(self, path: str, ok: bool, start: float) -> None:
        if self.metrics is not None:
            self.metrics.record_load(path, ok, (time.monotonic() - start) * 1e6)

    def _load_session(self, name: str, version: int, path: str) -> Servable:
        import tensorflow as tf

        graph = tf.Graph()
        config = tf.compat.v1.ConfigProto(intra_op_parallelism_threads=self.options.intra_op,
                                          inter_op_parallelism_threads=self.options.inter_op)
        session = tf.compat.v1.Session(graph=graph, config=config)
        try:
            with graph.as_default():
                meta_graph = tf.compat.v1.saved_model.loader.load(
                    session, list(self.options.saved_model_tags), path)
            graph.finalize()
        except Exception as exc:
            session.close()
            raise _load_error(exc, path, self.options.saved_model_tags) from exc
        log.info("Loaded SavedModel %s version %d from %s (session intra_op_parallelism_threads=%d, "
                 "inter_op_parallelism_threads=%d; 0: TensorFlow picks)", name, version, path,
                 config.intra_op_parallelism_threads, config.inter_op_parallelism_threads)
        return Servable(name, version, path, session, meta_graph.signature_def)


class SavedModelVersionLoader:
    """One version's ``core.loader.Loader``: ``load`` is one ``SavedModelLoader.load`` attempt."""

    def __init__(self, loader: SavedModelLoader, name: str, version: int, path: str) -> None:
        self._loader = loader
        self.name, self.version, self.path = name, version, path
        self._servable: Optional[Servable] = None

    def estimate_resources(self) -> int:
        """The files' total size times 1.2 (``EstimateResourceFromPath``); 0 when none can be read
        (the load then fails with TF Serving's message)."""
        size = 0
        for path in Path(self.path).rglob("*"):
            try:
                size += path.stat().st_size if path.is_file() else 0
            except OSError:   # removed while walked: the load reports it
                continue
        return int(size * _RAM_ESTIMATE_MULTIPLIER)

    def load(self) -> None:
        self._servable = self._loader.load(self.name, self.version, self.path)

    def unload(self) -> None:
        servable, self._servable = self._servable, None
        if servable is not None:
            servable.close()

    def servable(self) -> Servable:
        if self._servable is None:
            raise RuntimeError(f"servable version {self.name}/{self.version} is not loaded")
        return self._servable


def _load_error(exc: Exception, path: str, tags: Sequence[str]) -> status.ServingError:
    """TF Serving's (C++ ``LoadSavedModel``) code and wording for a failed load."""
    import tensorflow as tf

    text = str(exc)
    if isinstance(exc, tf.errors.OpError):
        return status.error_for(exc.error_code, tf_error_message(exc))
    if isinstance(exc, OSError) and "does not exist" in text:
        return status.NotFound(   # session_bundle_util.cc LoadSessionBundleOrSavedModelBundle
            "Specified file path does not appear to contain a SavedModel bundle (should have a file "
            f"called `saved_model.pb`)\nSpecified file path: {path}")
    if isinstance(exc, OSError) and "Cannot parse" in text:
        return status.DataLoss(f"Can't parse {os.path.join(path, 'saved_model.pb')} as binary proto")
    if isinstance(exc, RuntimeError) and "MetaGraphDef associated with tags" in text:
        return status.NotFound(
            f"Could not find meta graph def matching supplied tags: {{ {' '.join(tags)} }}. "
            "To inspect available tag-sets in the SavedModel, please use the SavedModel CLI: "
            "`saved_model_cli`")
    if isinstance(exc, ValueError) and "checkpoint" in text:
        return status.DataLoss(f"Failed to restore the variables of {path}: {text}")
    return status.Internal(f"Failed to load SavedModel at {path}: {type(exc).__name__}: {text}")
