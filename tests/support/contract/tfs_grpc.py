"""Small helpers for the ported TF Serving tests over gRPC: status of a call, requests as TF Serving's tests build them."""
from __future__ import annotations

from typing import Callable

import grpc
from tensorflow_serving.apis import inference_pb2, input_pb2

__all__ = ["code_and_details", "add_example", "populate_task", "RPC_TIMEOUT"]

RPC_TIMEOUT = 30.0


def code_and_details(call: Callable[[], object]) -> tuple[grpc.StatusCode, str]:
    """The status of ``call()``: OK with "" when it returns."""
    try:
        call()
    except grpc.RpcError as error:
        return error.code(), error.details() or ""
    return grpc.StatusCode.OK, ""


def add_example(target: input_pb2.Input, **floats: float) -> None:
    """One tf.Example of float features (TF Serving's ``AddInput``)."""
    example = target.example_list.examples.add()
    for key, value in floats.items():
        example.features.feature[key].float_list.value.append(value)


def populate_task(request: inference_pb2.MultiInferenceRequest, model: str, signature_name: str, method_name: str,
                  version: int = -1) -> None:
    """``multi_inference_helper_test.cc``'s ``PopulateTask``."""
    task = request.tasks.add()
    task.model_spec.name = model
    if version > 0:
        task.model_spec.version.value = version
    task.model_spec.signature_name = signature_name
    task.method_name = method_name
