"""The one object both front-ends call: TF Serving's request semantics, no wire format.

A front-end decodes its wire request, makes one ``DataPlane`` call and encodes
the answer (kserve ``protocol/dataplane.py``). The data plane resolves a
``ModelSpec`` through the manager (name; version, version label or latest;
signature), runs the model through ``serving.server.tensorflow.inference`` and
returns plain values: ``Prediction`` (numpy outputs), ``InferenceResult``
holding an ``inference.ClassificationResult`` or ``inference.RegressionResult``,
``serving.codec``'s ``ModelMetadata`` and ``VersionStatus``es. It builds no wire message.
Failures are ``serving.status.ServingError``; the front-ends map them once each.

Seams (``typing.Protocol``, satisfied structurally): ``ModelManager`` is what
the data plane needs of the model lifecycle (``core.manager.ServableManager``),
``RequestMetrics`` what it records (``serving.server.metrics.ServerMetrics``).

Metrics are recorded where TF Serving records them:

- per front-end call, through ``DataPlane.track``: ``request_count`` for every
  gRPC Predict/Classify/Regress and every REST request, ``request_latency`` on
  success only; a model name that is not served (not in the current config) is
  recorded as ``metrics.UNSERVED_MODEL_LABEL``, so requests cannot grow the
  metrics without bound (TF Serving records the request's name as it is);
- ``runtime_latency`` around the model run of Predict, Classify and Regress;
- ``request_example_counts`` / ``request_example_count_total``: the number of
  tf.Examples of every Classify, Regress and MultiInference that ran
  (``classifier.cc``, ``regressor.cc``, ``multi_inference.cc``). TF Serving
  records it right after the run, before checking the outputs; here it is
  recorded once the result is built, so a model with malformed outputs is not
  counted.

Failures that are not a ``ServingError`` (a Python exception while the model
runs, e.g. ``MemoryError`` merging a batch) become INTERNAL "Internal error
while running the model (request id ...); see the server log": the client
never sees a Python class or message (``status.internal_error``).

Deadlines: a call may carry an absolute ``time.monotonic()`` deadline. It is
checked before the model runs and is visible to a batching queue through
``serving.server.deadline.remaining_seconds()`` (TF Serving turns the client
deadline into the session's ``RunOptions.timeout_in_ms``).

Memory: with a ``MemoryAdmission`` (``serving.server.admission``), every
Predict, Classify, Regress and MultiInference is costed once its servable is
held, from its rows and input bytes and the servable's warmup profile, and
refused before it runs when over the per-request or in-flight budget.

Request capture: with a ``RequestCapture`` (``serving.server.request_capture``),
every Predict, Classify, Regress and MultiInference that succeeded is offered
to it, from both front-ends alike: a Predict as the inputs the front-end
decoded, so a REST and a gRPC request of the same rows give the same record.
The capture decides (sampling, excluded models) and queues without waiting;
a failure in it is logged, never the request's. Nothing of the transport
(headers, metadata, credentials) reaches the data plane, so none is captured.

Thread-safety: every method may be called from many threads at once.
"""
from __future__ import annotations

import contextlib
import logging
import threading
import time
from dataclasses import dataclass
from typing import (
    TYPE_CHECKING,
    Callable,
    ContextManager,
    Generic,
    Iterator,
    Mapping,
    Optional,
    Protocol,
    Sequence,
    TypeVar,
    Union,
)

import numpy as np
from tensorflow_serving.config.model_server_config_pb2 import ModelServerConfig

from serving import status
from serving.codec import (
    CLASSIFY_METHOD_NAME,
    DEFAULT_SIGNATURE,
    REGRESS_METHOD_NAME,
    ModelMetadata,
    Signature,
    VersionStatus,
)
from serving.server.admission import MemoryAdmission, RequestCost, examples_cost, predict_cost
from serving.server.deadline import request_deadline
from serving.server.metrics import UNSERVED_MODEL_LABEL, prometheus_name
from serving.server.request_capture import CapturedCall
from serving.server.tensorflow import inference
from serving.server.tensorflow.inference import ClassificationResult, RegressionResult
from serving.server.tensorflow.servable import Servable
from serving.status import Code

if TYPE_CHECKING:  # these messages load TensorFlow; they only annotate
    from tensorflow_serving.apis.input_pb2 import Input

__all__ = [
    "DEFAULT_SIGNATURE",
    "SIGNATURE_DEF_METADATA_FIELD",
    "ModelManager",
    "RequestMetrics",
    "RequestCapture",
    "ModelSpec",
    "Prediction",
    "InferenceResult",
    "InferenceTask",
    "ClassificationResult",
    "RegressionResult",
    "DataPlane",
]

logger = logging.getLogger(__name__)

SIGNATURE_DEF_METADATA_FIELD = "signature_def"


class ModelManager(Protocol):
    """What the data plane needs of the model lifecycle (``ServableManager`` provides it).

    ``acquire`` holds one servable for one request (omitted version = highest
    AVAILABLE; NotFound / InvalidArgument in TF Serving's words);
    ``model_status`` lists versions newest first; ``reload_config`` replaces
    the served models (``caller_gone``, when set, ends its wait for them);
    ``serves`` says whether a name is in the current config. All may be
    called from many threads.
    """

    def acquire(self, name: str, version: Optional[int] = None,
                label: Optional[str] = None) -> ContextManager[Servable]: ...

    def model_status(self, name: str, version: Optional[int] = None) -> list[VersionStatus]: ...

    def reload_config(self, config: ModelServerConfig, timeout: Optional[float] = None,
                      caller_gone: Optional[threading.Event] = None) -> None: ...

    def serves(self, name: str) -> bool: ...


class RequestMetrics(Protocol):
    """The request metrics the data plane records (``ServerMetrics`` provides them); thread-safe."""

    def record_request(self, model_name: str, api: str, entrypoint: str, code: Union[Code, int],
                       latency_us: float) -> None: ...

    def record_runtime(self, model_name: str, api: str, latency_us: float, runtime: str = "TF1") -> None: ...

    def record_examples(self, model_name: str, count: int) -> None: ...


class RequestCapture(Protocol):
    """Where successful calls are offered for capture (``ServerRequestCapture`` provides it).

    ``offer(model)`` says whether to capture this call; ``submit(call)`` queues
    it. Both are cheap, never wait and never raise; thread-safe.
    """

    def offer(self, model_name: str) -> bool: ...

    def submit(self, call: CapturedCall) -> None: ...


@dataclass(frozen=True)
class ModelSpec:
    """TF Serving's ``ModelSpec``: at most one of ``version`` / ``version_label``; empty signature = default."""

    name: str
    version: Optional[int] = None
    version_label: Optional[str] = None
    signature_name: str = ""

    def __post_init__(self) -> None:
        if self.version is not None and self.version_label is not None:
            raise status.InvalidArgument(
                f"Both model version ({self.version}) and model version label "
                f"({self.version_label}) cannot be supplied.")


@dataclass(frozen=True)
class Prediction:
    """A Predict answer: the servable that ran, the signature used, and the outputs."""

    name: str
    version: int
    signature_name: str
    outputs: Mapping[str, np.ndarray]


ResultT = TypeVar("ResultT", ClassificationResult, RegressionResult)


@dataclass(frozen=True)
class InferenceResult(Generic[ResultT]):
    """A Classify or Regress answer (or one MultiInference task's): who answered, and the result."""

    name: str
    version: int
    signature_name: str
    result: ResultT


@dataclass(frozen=True)
class InferenceTask:
    """One task of a MultiInference request: the model it names, its signature and its method."""

    model_name: str
    signature_name: str
    method_name: str


class DataPlane:
    """Model calls and model management over a ``ModelManager``; ``metrics`` may be None."""

    def __init__(self, manager: ModelManager, metrics: Optional[RequestMetrics] = None,
                 admission: Optional[MemoryAdmission] = None, capture: Optional[RequestCapture] = None) -> None:
        self._manager = manager
        self._metrics = metrics
        self._admission = admission
        self._capture = capture

    # -- metrics ---------------------------------------------------------
    @contextlib.contextmanager
    def track(self, model_name: str, api: str, entrypoint: str) -> Iterator[None]:
        """Time the enclosed request and record it under the code it ended with."""
        start = time.perf_counter()
        code = Code.OK
        try:
            yield
        except status.ServingError as exc:
            code = exc.code
            raise
        except BaseException:
            code = Code.INTERNAL
            raise
        finally:
            if self._metrics is not None:
                latency_us = (time.perf_counter() - start) * 1e6
                label = model_name if self._manager.serves(model_name) else UNSERVED_MODEL_LABEL
                self._metrics.record_request(label, api, entrypoint, code, latency_us)

    @contextlib.contextmanager
    def _runtime(self, model_name: str, api: str) -> Iterator[None]:
        """``runtime_latency`` of a model run that succeeded.

        As ``predict_util.cc`` times ``session->Run``: the API label is fixed, the runtime
        is TF1, and with batching on the timed run includes the batch queue (TF Serving's
        session is then the batching session).
        """
        start = time.perf_counter()
        with _model_errors():
            yield
        if self._metrics is not None:
            self._metrics.record_runtime(model_name, api, (time.perf_counter() - start) * 1e6)

    def _record_examples(self, model_name: str, count: int) -> None:
        if self._metrics is not None:
            self._metrics.record_examples(model_name, count)

    # -- inference -------------------------------------------------------
    def signature(self, spec: ModelSpec) -> Signature:
        """The signature ``spec`` names, looked up before a REST body is decoded with its dtypes.

        As TF Serving's REST handler (``GetInfoMap``) does, this holds the
        servable only for the lookup; the Predict call that follows acquires it
        again. Unknown signature: InvalidArgument ``Serving signature name:
        "X" not found in signature def``.
        """
        with self._acquire(spec) as servable:
            return inference.rest_signature(servable, spec.signature_name or DEFAULT_SIGNATURE)

    def predict(self, spec: ModelSpec, inputs: Mapping[str, np.ndarray], output_filter: Sequence[str] = (),
                *, deadline: Optional[float] = None) -> Prediction:
        """Run ``spec``'s signature on ``inputs`` (arrays by input alias)."""
        signature_name = spec.signature_name or DEFAULT_SIGNATURE
        with self._acquire(spec) as servable, request_deadline(deadline), \
                self._admit(servable, lambda: predict_cost(servable.memory_profile, signature_name, inputs)):
            with self._runtime(servable.name, "Predict"):
                outputs = inference.predict(servable, signature_name, inputs, list(output_filter))
            prediction = Prediction(servable.name, servable.version, signature_name, outputs)
        self._offer_capture(servable.name, lambda: CapturedCall(
            "predict", spec, prediction, inputs=inputs, output_filter=tuple(output_filter)))
        return prediction

    def classify(self, spec: ModelSpec, examples: Input, *,
                 deadline: Optional[float] = None) -> InferenceResult[ClassificationResult]:
        """Classify ``examples`` (a ``tensorflow.serving.Input``) with ``spec``'s signature."""
        answer = self._run_examples(spec, examples, deadline, "Classify", inference.classify)
        self._offer_capture(answer.name, lambda: CapturedCall("classify", spec, answer, examples=examples))
        return answer

    def regress(self, spec: ModelSpec, examples: Input, *,
                deadline: Optional[float] = None) -> InferenceResult[RegressionResult]:
        """Regress ``examples`` (a ``tensorflow.serving.Input``) with ``spec``'s signature."""
        answer = self._run_examples(spec, examples, deadline, "Regress", inference.regress)
        self._offer_capture(answer.name, lambda: CapturedCall("regress", spec, answer, examples=examples))
        return answer

    def _run_examples(self, spec: ModelSpec, examples: Input, deadline: Optional[float], api: str,
                      run: Callable[[Servable, str, Input], ResultT]) -> InferenceResult[ResultT]:
        """Classify or Regress: ``run(servable, signature, examples)``, timed and counted."""
        signature_name = spec.signature_name or DEFAULT_SIGNATURE
        with self._acquire(spec) as servable, request_deadline(deadline), \
                self._admit(servable, lambda: examples_cost(servable.memory_profile, signature_name, examples)):
            with self._runtime(servable.name, api):
                result = run(servable, signature_name, examples)
            self._record_examples(servable.name, _example_count(result))
            return InferenceResult(servable.name, servable.version, signature_name, result)

    def multi_inference(self, spec: ModelSpec, tasks: Sequence[InferenceTask], examples: Input, *,
                        deadline: Optional[float] = None) -> list[InferenceResult]:
        """Classify/Regress ``tasks`` on one model version and one input, results in task order.

        ``spec`` picks the servable: the first task's ``ModelSpec``
        (``multi_inference_helper.cc``); the tasks are then checked as
        ``multi_inference.cc`` checks them.
        """
        results: list[InferenceResult] = []
        with self._acquire(spec) as servable, request_deadline(deadline), \
                self._admit(servable, lambda: _tasks_cost(servable, tasks, examples)), _model_errors():
            _check_multi_inference_tasks(tasks, servable)
            for task in tasks:
                signature_name = task.signature_name or DEFAULT_SIGNATURE
                run = inference.classify if task.method_name == CLASSIFY_METHOD_NAME else inference.regress
                results.append(InferenceResult(servable.name, servable.version, signature_name,
                                               run(servable, signature_name, examples)))
            if results:
                self._record_examples(servable.name, _example_count(results[0].result))
        self._offer_capture(servable.name, lambda: CapturedCall(
            "multi_inference", spec, list(results), examples=examples, tasks=tuple(tasks)))
        return results

    # -- model management ------------------------------------------------
    def model_metadata(self, spec: ModelSpec, metadata_fields: Sequence[str]) -> ModelMetadata:
        """The signatures of ``spec``'s version; ``signature_def`` is the only field TF Serving has.

        ``signature_defs`` are the servable's own protos (every MetaGraph signature, as loaded), so a
        front-end packing them into a ``SignatureDefMap`` sends what TF Serving sends.
        """
        if not metadata_fields:
            raise status.InvalidArgument("GetModelMetadataRequest must specify at least one metadata_field")
        for field_name in metadata_fields:
            if field_name != SIGNATURE_DEF_METADATA_FIELD:
                raise status.InvalidArgument(f"Metadata field {field_name} is not supported")
        with self._acquire(spec) as servable:
            return ModelMetadata(servable.name, servable.version, servable.signatures, servable.signature_defs)

    def model_status(self, spec: ModelSpec) -> list[VersionStatus]:
        """Every version of ``spec.name`` newest first, or only ``spec.version``; labels are ignored."""
        return self._manager.model_status(spec.name, spec.version)

    def reload_config(self, config: ModelServerConfig, timeout: Optional[float] = None,
                      caller_gone: Optional[threading.Event] = None) -> None:
        """Replace the served models with ``config``; only a ``model_config_list`` is accepted.

        Waits until the added models are AVAILABLE, as TF Serving does, unless the
        caller goes first (``caller_gone`` set, or ``timeout`` s passed).
        """
        if config.WhichOneof("config") != "model_config_list":
            raise status.InvalidArgument(
                "ServerModelConfig type not supported by HandleReloadConfigRequest. "
                "Only ModelConfigList is currently supported")
        for index, model in enumerate(config.model_config_list.config):
            logger.info("Config entry index: %d path: %s name: %s platform: %s",
                        index, model.base_path, model.name, model.model_platform)
        self._manager.reload_config(config, timeout, caller_gone)

    def metric_values(self, tf_names: Sequence[str]) -> dict[str, int]:
        """The first point of each named metric (TF Serving's name, e.g. ``/tensorflow/serving/request_count``),
        0 where there is none: what ``HandleReloadConfigRequest`` compares for ``metric_names``."""
        registry = getattr(self._metrics, "registry", None)
        families = {family.name: family for family in registry.collect()} if registry is not None else {}
        values: dict[str, int] = {}
        for tf_name in tf_names:
            family = families.get(prometheus_name(tf_name))
            values[tf_name] = int(family.samples[0].value) if family is not None and family.samples else 0
        return values

    # -- helpers ---------------------------------------------------------
    def _offer_capture(self, model_name: str, call: Callable[[], CapturedCall]) -> None:
        """Offer a successful call to request capture; its failure is logged, never the request's."""
        if self._capture is None:
            return
        try:
            if self._capture.offer(model_name):
                self._capture.submit(call())
        except Exception:  # noqa: BLE001 - capture must never fail a request that succeeded
            logger.exception("Request capture failed for model %s; the request is answered", model_name)

    def _admit(self, servable: Servable, cost: Callable[[], RequestCost]) -> ContextManager[None]:
        """Hold the request's projected memory while it runs (no admission: nothing to hold)."""
        if self._admission is None:
            return contextlib.nullcontext()
        return self._admission.admit(servable.name, cost())

    def _acquire(self, spec: ModelSpec) -> ContextManager[Servable]:
        return self._manager.acquire(spec.name, version=spec.version, label=spec.version_label)


@contextlib.contextmanager
def _model_errors() -> Iterator[None]:
    """A model run's failure that is not a ``ServingError`` is the server's own: INTERNAL with a request id."""
    try:
        yield
    except status.ServingError:
        raise
    except Exception as exc:  # noqa: BLE001 - the client gets what failed, the log gets why
        raise status.internal_error("Internal error while running the model", exc, logger) from None


def _tasks_cost(servable: Servable, tasks: Sequence[InferenceTask], examples: Input) -> RequestCost:
    """The tasks run one after another on the same examples: the costliest task's cost."""
    costs = [examples_cost(servable.memory_profile, task.signature_name or DEFAULT_SIGNATURE, examples)
             for task in tasks] or [RequestCost(0, 0, 0, "no task")]
    return max(costs, key=lambda cost: cost.projected_bytes)


def _example_count(result: Union[ClassificationResult, RegressionResult]) -> int:
    """The number of tf.Examples a result answers (one entry per example)."""
    if isinstance(result, ClassificationResult):
        return len(result.classifications)
    return len(result.regressions)


def _check_multi_inference_tasks(tasks: Sequence[InferenceTask], servable: Servable) -> None:
    """TF Serving's ``TensorFlowMultiInferenceRunner::Infer`` checks, with its messages."""
    model_name = ""
    seen: set[str] = set()
    for task in tasks:
        if not task.model_name:
            raise status.InvalidArgument("Found ModelSpec with an empty model name.")
        if model_name and task.model_name != model_name:
            raise status.InvalidArgument(
                "All ModelSpecs in a MultiInferenceRequest must access the same model name.")
        model_name = task.model_name
        signature = task.signature_name or DEFAULT_SIGNATURE
        if signature in seen:
            raise status.InvalidArgument(f"Duplicate evaluation of signature: {signature}")
        seen.add(signature)
        if signature not in servable.signature_defs:
            raise status.InvalidArgument(f"Requested signature not found in model graph: {signature}")
        if task.method_name not in (CLASSIFY_METHOD_NAME, REGRESS_METHOD_NAME):
            raise status.Unimplemented(f"Unsupported signature method_name: {task.method_name}")
