"""float16 (DT_HALF) and uint16 over REST, as TF Serving 2.17.1 answers them: they have no JSON form.

``tensorflow_serving/util/json_tensor.cc`` (2.17.1) converts JSON values only to and from float, double,
int32, int16, int8, uint8, string, int64, bool, uint32 and uint64:

* a request value for a DT_HALF or DT_UINT16 input reaches ``AddValueToTensor``'s default case (lines
  282-285): ``errors::Unimplemented("Conversion of JSON Value: ", JsonValueToString(val), " to type: ",
  DataTypeString(dtype))``, at the first leaf ``FillTensorProto`` reaches (lines 337-375); ``instances``
  wraps it per element as INVALID_ARGUMENT (``FillTensorMapFromInstancesList``, lines 496-520); a value with
  no leaf at all never gets there (an empty tensor);
* a response value of a DT_HALF or DT_UINT16 output reaches ``AddSingleValueAndAdvance``'s default case
  (lines 885-893): ``errors::InvalidArgument("Failed to write JSON value for tensor type: ",
  DataTypeString(tensor.dtype()))``; an output without values writes none.

json_tensor_test.cc has no DT_HALF case; these tests cite the source lines. gRPC carries both dtypes.
The model is exported here (a tf.Module), served by the embedded server.
"""
from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import httpx
import numpy as np
import pytest

from serving.client import GrpcClient
from tests.support.servers import EmbeddedServer

pytestmark = pytest.mark.slow   # exports a model in the test


def _export(path: Path) -> None:
    import tensorflow as tf  # TensorFlow: only for the export

    class Half(tf.Module):
        @tf.function(input_signature=[tf.TensorSpec([None], tf.float16, name="x")])
        def twice(self, x):
            return {"y": x * tf.constant(2.0, tf.float16)}

        @tf.function(input_signature=[tf.TensorSpec([None], tf.float32, name="x")])
        def to_half(self, x):
            return {"y": tf.cast(x, tf.float16)}

        @tf.function(input_signature=[tf.TensorSpec([None], tf.float32, name="x")])
        def to_uint16(self, x):
            return {"y": tf.cast(x, tf.uint16)}

    module = Half()
    tf.saved_model.save(module, str(path), signatures={
        "serving_default": module.twice, "to_half": module.to_half, "to_uint16": module.to_uint16})


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EmbeddedServer]:
    repo = tmp_path_factory.mktemp("half-models")
    _export(repo / "half" / "1")
    with EmbeddedServer(["--model_name=half", f"--model_base_path={repo / 'half'}"], wait_for=["half"]) as running:
        yield running


@pytest.fixture
def http(server: EmbeddedServer) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=server.rest_url, timeout=60) as client:
        yield client


def test_grpc_carries_float16_and_uint16(server):
    with GrpcClient(server.grpc_target) as client:
        twice = client.predict("half", {"x": np.array([1.5, -2.0], np.float16)})
        counts = client.predict("half", {"x": np.array([3.0, 7.0], np.float32)}, signature="to_uint16")
    assert twice["y"].dtype == np.float16 and twice["y"].tolist() == [3.0, -4.0]
    assert counts["y"].dtype == np.uint16 and counts["y"].tolist() == [3, 7]


@pytest.mark.parametrize("body,http_status,error", [
    ({"inputs": [1.5, 2.0]}, 501, "Conversion of JSON Value: 1.5 to type: half"),
    ({"inputs": {"x": [0.1]}}, 501, "Conversion of JSON Value: 0.1 to type: half"),
    ({"instances": [1.5, 2.0]}, 400,
     "Failed to process element: 0 of 'instances' list. Error: UNIMPLEMENTED: Conversion of JSON Value: 1.5 to type: half"),
    ({"instances": [{"x": 1.5}]}, 400, ("Failed to process element: 0 key: x of 'instances' list. Error: UNIMPLEMENTED: "
                                        "Conversion of JSON Value: 1.5 to type: half")),
    ({"inputs": [{"b64": "AA=="}]}, 400, 'JSON Value: {"b64":"AA=="} Type: Object is not of expected type: half'),
])
def test_a_float16_input_value_is_refused_as_tf_serving_refuses_it(http, body, http_status, error):
    response = http.post("/v1/models/half:predict", json=body)
    assert (response.status_code, response.json()) == (http_status, {"error": error})


def test_a_float16_input_without_values_is_an_empty_tensor(http):
    response = http.post("/v1/models/half:predict", json={"inputs": []})
    assert (response.status_code, response.json()) == (200, {"outputs": []})


@pytest.mark.parametrize("signature,name", [("to_half", "half"), ("to_uint16", "uint16")])
@pytest.mark.parametrize("body", [{"instances": [1.5]}, {"inputs": [1.5]}], ids=["instances", "inputs"])
def test_a_float16_or_uint16_output_fails_the_response_as_in_tf_serving(http, signature, name, body):
    response = http.post("/v1/models/half:predict", json={"signature_name": signature, **body})
    assert (response.status_code, response.json()) == (400, {"error": f"Failed to write JSON value for tensor type: {name}"})
    empty = http.post("/v1/models/half:predict", json={"signature_name": signature, "inputs": []})
    assert (empty.status_code, empty.json()) == (200, {"outputs": []})
