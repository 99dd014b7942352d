"""The one object both front-ends call: TF Serving's request semantics, no wire format.

A front-end decodes its wire request, makes one ``DataPlane`` call and encodes
the answer (kserve ``protocol/dataplane.py``). The data plane resolves a
``ModelSpec`` through the manager (name; version, version label or latest;
signature), runs the model through ``serving.server.tensorflow.inference`` and returns
numpy arrays or the official response protos. Failures are
``serving.status.ServingError``; the front-ends map them once each.

Request metrics are recorded where TF Serving records them — per front-end
call — through ``DataPlane.track``: ``request_count`` for every gRPC
Predict/Classify/Regress and every REST request, ``request_latency`` on
success only.

Deadlines: a call may carry an absolute ``time.monotonic()`` deadline. It is
checked before the model runs and is visible to a batching queue through
``serving.server.deadline.remaining_seconds()`` (TF Serving turns the client deadline into the
session's ``RunOptions.timeout_in_ms``).

Thread-safety: every method may be called from many threads at once.
"""
from __future__ import annotations

import contextlib
import logging
import time
from dataclasses import dataclass
from typing import Any, Callable, Iterator, Mapping, Optional, Sequence, Union

import numpy as np

from serving import status
from serving.server.deadline import request_deadline
from serving.status import Code

__all__ = [
    "DEFAULT_SIGNATURE",
    "SIGNATURE_DEF_METADATA_FIELD",
    "ModelSpec",
    "Prediction",
    "DataPlane",
]

logger = logging.getLogger(__name__)

DEFAULT_SIGNATURE = "serving_default"
SIGNATURE_DEF_METADATA_FIELD = "signature_def"

InputDecoder = Callable[[Any], Mapping[str, np.ndarray]]
"""Turns the resolved ``Signature`` into the request's inputs (REST decodes JSON with its dtypes)."""


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


class DataPlane:
    """Model calls and model management over a ``ServableManager``.

    ``manager`` provides ``acquire``, ``model_status`` and ``reload_config``
    (docs/architecture.md "Server lifecycle"); ``metrics`` is a ``ServerMetrics``
    or None.
    """

    def __init__(self, manager: Any, metrics: Any = None) -> None:
        self._manager = manager
        self._metrics = metrics

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
                self._metrics.record_request(model_name, api, entrypoint, code, latency_us)

    @contextlib.contextmanager
    def _runtime(self, model_name: str, api: str) -> Iterator[None]:
        """``runtime_latency`` of a model run that succeeded.

        As ``predict_util.cc`` times ``session->Run``: the API label is fixed, the runtime
        is TF1, and with batching on the timed run includes the batch queue (TF Serving's
        session is then the batching session).
        """
        start = time.perf_counter()
        yield
        if self._metrics is not None:
            self._metrics.record_runtime(model_name, api, (time.perf_counter() - start) * 1e6)

    # -- inference -------------------------------------------------------
    def predict(self, spec: ModelSpec, inputs: Union[Mapping[str, np.ndarray], InputDecoder],
                output_filter: Sequence[str] = (), *, deadline: Optional[float] = None) -> Prediction:
        """Run ``spec``'s signature; ``inputs`` may be a decoder given the resolved signature."""
        from serving.server.tensorflow import inference

        signature_name = spec.signature_name or DEFAULT_SIGNATURE
        with self._acquire(spec) as servable, request_deadline(deadline):
            if callable(inputs):
                inputs = inputs(inference.rest_signature(servable, signature_name))
            with self._runtime(servable.name, "Predict"):
                outputs = inference.predict(servable, signature_name, inputs, list(output_filter))
            return Prediction(servable.name, servable.version, signature_name, outputs)

    def classify(self, spec: ModelSpec, input_proto: Any, *, deadline: Optional[float] = None) -> Any:
        """A ``ClassificationResponse`` for ``input_proto`` (a ``tensorflow.serving.Input``)."""
        from tensorflow_serving.apis import classification_pb2

        from serving.server.tensorflow import inference

        return self._run_examples(spec, input_proto, deadline, "Classify", inference.classify,
                                  classification_pb2.ClassificationResponse)

    def regress(self, spec: ModelSpec, input_proto: Any, *, deadline: Optional[float] = None) -> Any:
        """A ``RegressionResponse`` for ``input_proto`` (a ``tensorflow.serving.Input``)."""
        from tensorflow_serving.apis import regression_pb2

        from serving.server.tensorflow import inference

        return self._run_examples(spec, input_proto, deadline, "Regress", inference.regress,
                                  regression_pb2.RegressionResponse)

    def _run_examples(self, spec: ModelSpec, input_proto: Any, deadline: Optional[float], api: str,
                      run: Callable[[Any, str, Any], Any], response_class: Any) -> Any:
        """Classify or Regress: run ``run(servable, signature, input)`` and wrap its result."""
        signature_name = spec.signature_name or DEFAULT_SIGNATURE
        with self._acquire(spec) as servable, request_deadline(deadline):
            with self._runtime(servable.name, api):
                result = run(servable, signature_name, input_proto)
            response = response_class(result=result)
            self._fill_spec(response.model_spec, servable, signature_name)
            return response

    def multi_inference(self, request: Any, *, deadline: Optional[float] = None) -> Any:
        """A ``MultiInferenceResponse``: Classify/Regress tasks on one model version and input.

        The servable is the first task's (``multi_inference_helper.cc``); the
        tasks are then checked as ``multi_inference.cc`` checks them.
        """
        from tensorflow_serving.apis import inference_pb2

        from serving.server.tensorflow import inference

        first = request.tasks[0].model_spec if request.tasks else None
        spec = ModelSpec("") if first is None else ModelSpec(
            first.name, first.version.value if first.HasField("version") else None, first.version_label or None)
        response = inference_pb2.MultiInferenceResponse()
        with self._acquire(spec) as servable, request_deadline(deadline):
            _check_multi_inference_tasks(request.tasks, servable)
            for task in request.tasks:
                signature = task.model_spec.signature_name or DEFAULT_SIGNATURE
                result = response.results.add()
                self._fill_spec(result.model_spec, servable, signature)
                if task.method_name == _CLASSIFY_METHOD:
                    result.classification_result.CopyFrom(
                        inference.classify(servable, signature, request.input))
                else:
                    result.regression_result.CopyFrom(inference.regress(servable, signature, request.input))
        return response

    # -- model management ------------------------------------------------
    def model_metadata(self, spec: ModelSpec, metadata_fields: Sequence[str]) -> Any:
        """A ``GetModelMetadataResponse`` carrying a ``SignatureDefMap`` (the only field TF Serving has)."""
        from tensorflow_serving.apis import get_model_metadata_pb2

        if not metadata_fields:
            raise status.InvalidArgument("GetModelMetadataRequest must specify at least one metadata_field")
        for field_name in metadata_fields:
            if field_name != SIGNATURE_DEF_METADATA_FIELD:
                raise status.InvalidArgument(f"Metadata field {field_name} is not supported")
        response = get_model_metadata_pb2.GetModelMetadataResponse()
        with self._acquire(spec) as servable:
            signature_map = get_model_metadata_pb2.SignatureDefMap()
            for key, signature_def in servable.signature_defs.items():
                signature_map.signature_def[key].CopyFrom(signature_def)
            response.model_spec.name = servable.name
            response.model_spec.version.value = servable.version
        response.metadata[SIGNATURE_DEF_METADATA_FIELD].Pack(signature_map)
        return response

    def model_status(self, spec: ModelSpec) -> Any:
        """A ``GetModelStatusResponse``: every version, or only ``spec.version``; labels are ignored."""
        from tensorflow_serving.apis import get_model_status_pb2

        response = get_model_status_pb2.GetModelStatusResponse()
        for entry in self._manager.model_status(spec.name, spec.version):
            version_status = response.model_version_status.add()
            version_status.version = entry.version
            version_status.state = _state_number(entry.state)
            version_status.status.error_code = int(entry.error_code)
            version_status.status.error_message = entry.error_message or ""
        return response

    def reload_config(self, config: Any) -> None:
        """Replace the served models with ``config`` (a ``ModelServerConfig``); only model_config_list."""
        if config.WhichOneof("config") != "model_config_list":
            raise status.InvalidArgument(
                "ServerModelConfig type not supported by HandleReloadConfigRequest. "
                "Only ModelConfigList is currently supported")
        for index, model in enumerate(config.model_config_list.config):
            logger.info("Config entry index: %d path: %s name: %s platform: %s",
                        index, model.base_path, model.name, model.model_platform)
        self._manager.reload_config(config)

    # -- helpers ---------------------------------------------------------
    def _acquire(self, spec: ModelSpec):
        return self._manager.acquire(spec.name, version=spec.version, label=spec.version_label)

    @staticmethod
    def _fill_spec(model_spec: Any, servable: Any, signature_name: str) -> None:
        model_spec.name = servable.name
        model_spec.version.value = servable.version
        model_spec.signature_name = signature_name


_STATE_NUMBERS = {"UNKNOWN": 0, "START": 10, "LOADING": 20, "AVAILABLE": 30, "UNLOADING": 40, "END": 50}


def _state_number(state: Any) -> int:
    """``ModelVersionStatus.State`` number from a manager state (name, enum or number)."""
    name = getattr(state, "name", state)
    if isinstance(name, str):
        return _STATE_NUMBERS[name.upper()]
    return int(state)


_CLASSIFY_METHOD = "tensorflow/serving/classify"
_REGRESS_METHOD = "tensorflow/serving/regress"


def _check_multi_inference_tasks(tasks: Sequence[Any], servable: Any) -> None:
    """TF Serving's ``TensorFlowMultiInferenceRunner::Infer`` checks, with its messages."""
    model_name = ""
    seen: set[str] = set()
    for task in tasks:
        if not task.model_spec.name:
            raise status.InvalidArgument("Found ModelSpec with an empty model name.")
        if model_name and task.model_spec.name != model_name:
            raise status.InvalidArgument(
                "All ModelSpecs in a MultiInferenceRequest must access the same model name.")
        model_name = task.model_spec.name
        signature = task.model_spec.signature_name or DEFAULT_SIGNATURE
        if signature in seen:
            raise status.InvalidArgument(f"Duplicate evaluation of signature: {signature}")
        seen.add(signature)
        if signature not in servable.signature_defs:
            raise status.InvalidArgument(f"Requested signature not found in model graph: {signature}")
        if task.method_name not in (_CLASSIFY_METHOD, _REGRESS_METHOD):
            raise status.Unimplemented(f"Unsupported signature method_name: {task.method_name}")
