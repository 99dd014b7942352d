"""The servers a benchmark declares (``benchmarks.runner.Server``): the embedded server, a server
already running, the canned gRPC servicer, and the model loaded in this process."""
from __future__ import annotations

import contextlib
import functools
import os
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterator, Mapping, Optional, Sequence

from benchmarks.loadgen import CannedServer
from benchmarks.runner import Load, Served, Server
from benchmarks.scenario import Endpoint, Payloads, predict_transport, version_dir
from exporter.manifest import load_manifest
from loadtest.driver import call_transport
from serving import codec
from serving.config.files import BatchingSpec
from serving.launcher import ServerProcess
from serving.server.tensorflow.loader import LoaderOptions, SavedModelLoader

__all__ = ["canned", "embedded", "has_outputs", "in_process", "payloads_of", "predict_served", "running"]


def payloads_of(repo: Path) -> Callable[[Load], Payloads]:
    """A load's request (``Payloads``) of ``repo``'s model, made once per model and batch size."""
    made = functools.lru_cache(maxsize=None)(lambda model, batch: Payloads.of(repo, model, batch))
    return lambda load: made(load.model, load.batch)


def has_outputs(load: Load, answer: object) -> None:
    """Raise unless ``answer`` (raw Predict bytes over ``load.protocol``) decodes to some outputs."""
    if not isinstance(answer, bytes):
        raise RuntimeError(f"{load.model}: {load.protocol} Predict answered a {type(answer).__name__}, not its bytes")
    outputs = (codec.decode_predict_response(answer) if load.protocol == "grpc"
               else codec.rest_response_to_outputs(answer))
    if not outputs:
        raise RuntimeError(f"{load.model}: {load.protocol} Predict returned no outputs")


def predict_served(endpoint: Endpoint, payloads: Callable[[Load], Payloads], pid: Optional[int] = None,
                   counters: Optional[Callable[[], Mapping[str, float]]] = None) -> Served:
    """Raw Predict bytes on ``endpoint`` (``benchmarks.scenario.predict_transport``): one pre-serialized
    request on a bytes-in/bytes-out stub, or one keep-alive HTTP connection, per client thread."""
    def transport(load: Load):
        address = endpoint.grpc_target if load.protocol == "grpc" else endpoint.rest_url
        return predict_transport(load.protocol, address, payloads(load))

    return Served(transport, pid, counters, check=has_outputs)


def running(name: str, served: Served, only: tuple[Load, ...] = ()) -> Server:
    """A server started elsewhere (it outlives the scenario)."""
    return Server(name, lambda stack, models: served, only)


def embedded(name: str, repo: Path, *, batching: Optional[BatchingSpec] = None, flags: Sequence[str] = (),
             counters: Optional[Callable[[ServerProcess], Mapping[str, float]]] = None) -> Server:
    """The embedded server (``ServerProcess.for_models``) of the scenario's models in ``repo``, with
    ``batching`` (None: without) and TF Serving ``flags``; ``counters`` are read of it around each window."""
    def start(stack: contextlib.ExitStack, models: Sequence[str]) -> Served:
        workdir = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix=f"bench-{name}-")))
        server = stack.enter_context(ServerProcess.for_models(
            {m: repo / m for m in models}, workdir=workdir, batching=batching, extra_flags=flags, timeout=900))
        return predict_served(server, payloads_of(repo), server.pid,
                              None if counters is None else functools.partial(counters, server))

    return Server(name, start)


@dataclass(frozen=True)
class _Canned:
    """The canned servicer's address, an ``Endpoint`` (gRPC only)."""

    grpc_target: str
    rest_url: str = ""


def canned(name: str, repo: Path, only: tuple[Load, ...]) -> Server:
    """A gRPC servicer that answers every Predict with canned bytes (``benchmarks.loadgen``): the same
    client and payload against it give the most requests/s any Python gRPC front-end reaches here."""
    def start(stack: contextlib.ExitStack, models: Sequence[str]) -> Served:
        servicer = stack.enter_context(CannedServer(set(os.sched_getaffinity(0))))
        return predict_served(_Canned(f"127.0.0.1:{servicer.port}"), payloads_of(repo), servicer.proc.pid)

    return Server(name, start, only)


@contextlib.contextmanager
def _loaded(model: str, directory: Path) -> Iterator[Callable[[int], Callable[[], object]]]:
    """The model loaded exactly as the server loads it (``SavedModelLoader``, same session options);
    yields ``call_at(batch)``: a warmed-up ``Servable.run_direct`` on manifest inputs."""
    manifest = load_manifest(directory)
    servable = SavedModelLoader(LoaderOptions(enable_model_warmup=False)).load(model, int(directory.name),
                                                                               str(directory))
    outputs = list(servable.signatures[codec.DEFAULT_SIGNATURE].outputs)

    def call_at(batch: int) -> Callable[[], object]:
        inputs = manifest.sample_inputs(batch_size=batch)

        def call() -> object:
            return servable.run_direct(codec.DEFAULT_SIGNATURE, inputs, outputs)

        for _ in range(2):  # build the callable, touch the kernels
            call()
        return call

    try:
        yield call_at
    finally:
        servable.close()


def in_process(name: str, repo: Path, only: tuple[Load, ...] = ()) -> Server:
    """The model in this process, called with ``Servable.run_direct`` from each client thread of an
    ``in-process`` load (``batch`` rows per call): the ceiling of a server's throughput, the floor of its
    latency. No server process: its CPU is this process's (``client_cpu``)."""
    def start(stack: contextlib.ExitStack, models: Sequence[str]) -> Served:
        loaded = {m: stack.enter_context(_loaded(m, version_dir(repo, m))) for m in models}
        call = functools.lru_cache(maxsize=None)(lambda model, batch: loaded[model](batch))
        return Served(lambda load: call_transport(call(load.model, load.batch)), warm=True)

    return Server(name, start, only)
