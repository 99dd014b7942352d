"""TF Serving's ``servables/tensorflow/predict_util_test.cc`` (2.17.1), ported over gRPC Predict.

The server is ``tfs_testdata``'s ``test_model`` (``saved_model_half_plus_two_2_versions``, version 123).
"""
from __future__ import annotations

import grpc
import numpy as np
import pytest
from tensorflow.core.framework import tensor_pb2, types_pb2
from tensorflow_serving.apis import predict_pb2, prediction_service_pb2_grpc

from serving import codec
from tests.support.contract.tfs_grpc import RPC_TIMEOUT, code_and_details

MODEL, VERSION = "test_model", 123


@pytest.fixture
def predict(tfs_channel):
    stub = prediction_service_pb2_grpc.PredictionServiceStub(tfs_channel)
    return lambda request: stub.Predict(request, timeout=RPC_TIMEOUT)


def request_for(signature_name: str = "", **inputs: tensor_pb2.TensorProto) -> predict_pb2.PredictRequest:
    request = predict_pb2.PredictRequest()
    request.model_spec.name = MODEL
    request.model_spec.version.value = VERSION
    request.model_spec.signature_name = signature_name
    for alias, tensor in inputs.items():
        request.inputs[alias].CopyFrom(tensor)
    return request


def float_scalar(value: float) -> tensor_pb2.TensorProto:
    return tensor_pb2.TensorProto(dtype=types_pb2.DT_FLOAT, float_val=[value])


def test_missing_or_empty_model_spec(predict):
    """MissingOrEmptyModelSpec: no ModelSpec, an empty name, and an unknown name ("test") with no inputs."""
    assert code_and_details(lambda: predict(predict_pb2.PredictRequest())) == (
        grpc.StatusCode.INVALID_ARGUMENT, "Missing ModelSpec")
    request = predict_pb2.PredictRequest()
    request.model_spec.SetInParent()
    assert code_and_details(lambda: predict(request)) == (
        grpc.StatusCode.INVALID_ARGUMENT, "ModelSpec has no name specified.")
    request.model_spec.name = "test"
    assert code_and_details(lambda: predict(request))[0] in (grpc.StatusCode.INVALID_ARGUMENT,
                                                           grpc.StatusCode.NOT_FOUND)


def test_empty_input_list(predict):
    """EmptyInputList: INVALID_ARGUMENT."""
    assert code_and_details(lambda: predict(request_for()))[0] is grpc.StatusCode.INVALID_ARGUMENT


def test_input_tensors_dont_match_model_spec_inputs(predict):
    """InputTensorsDontMatchModelSpecInputs: the extra and the missing aliases are named."""
    unknown1 = tensor_pb2.TensorProto(dtype=types_pb2.DT_STRING, string_val=[b"any_value"])
    unknown1.tensor_shape.dim.add(size=1)
    unknown2 = tensor_pb2.TensorProto(dtype=types_pb2.DT_FLOAT, float_val=[1.0])
    unknown2.tensor_shape.dim.add(size=1)
    code, details = code_and_details(lambda: predict(request_for(unknown_key1=unknown1, unknown_key2=unknown2)))
    assert code is grpc.StatusCode.INVALID_ARGUMENT
    assert "Sent extra: {unknown_key1,unknown_key2}" in details
    assert "Missing but required: {x}" in details


def test_prediction_invalid_tensor(predict):
    """PredictionInvalidTensor: a bool tensor for the float input is the Session's dtype error."""
    tensor = tensor_pb2.TensorProto(dtype=types_pb2.DT_BOOL, bool_val=[True])
    code, details = code_and_details(lambda: predict(request_for(x=tensor)))
    assert code is grpc.StatusCode.INVALID_ARGUMENT
    assert "Expects arg[0] to be float but bool is provided" in details


def test_output_filters_dont_match_model_spec_outputs(predict):
    """OutputFiltersDontMatchModelSpecOutputs: an unknown alias, then "y" (OK), then "y" twice."""
    request = request_for(x=float_scalar(2.0))
    request.output_filter.append("output_filter")
    code, details = code_and_details(lambda: predict(request))
    assert code is grpc.StatusCode.INVALID_ARGUMENT
    assert "output tensor alias not found in signature: output_filter" in details
    del request.output_filter[:]
    request.output_filter.append("y")
    predict(request)
    request.output_filter.append("y")
    code, details = code_and_details(lambda: predict(request))
    assert code is grpc.StatusCode.INVALID_ARGUMENT
    assert "duplicate output tensor alias: y" in details


def test_input_tensors_have_wrong_type(predict):
    """InputTensorsHaveWrongType: a string tensor for the float input."""
    tensor = tensor_pb2.TensorProto(dtype=types_pb2.DT_STRING, string_val=[b"any_value"])
    tensor.tensor_shape.dim.add(size=1)
    request = request_for(x=tensor)
    request.output_filter.append("y")
    code, details = code_and_details(lambda: predict(request))
    assert code is grpc.StatusCode.INVALID_ARGUMENT
    assert "to be float but string is provided" in details


@pytest.mark.parametrize("signature_name, alias, output, expected", [
    ("", "x", "y", 3.0),                                   # PredictionSuccess
    ("regress_x2_to_y3", "inputs", "outputs", 4.0),        # PredictionWithNamedRegressionSignature
    ("classify_x2_to_y3", "inputs", "scores", 4.0),        # PredictionWithNamedClassificationSignature
])
def test_prediction_success(predict, signature_name, alias, output, expected):
    """PredictionSuccess, PredictionWithNamedRegressionSignature, PredictionWithNamedClassificationSignature:
    a scalar 2.0 (no shape) fed to a [-1,1] input; the answer is a scalar and the response's ModelSpec
    names the model, version 123 and the signature (serving_default when none was asked)."""
    response = predict(request_for(signature_name, **{alias: float_scalar(2.0)}))
    assert (response.model_spec.name, response.model_spec.version.value, response.model_spec.signature_name) == (
        MODEL, VERSION, signature_name or "serving_default")
    assert list(response.outputs) == [output]
    got = response.outputs[output]
    assert got.dtype == types_pb2.DT_FLOAT and len(got.tensor_shape.dim) == 0
    np.testing.assert_array_equal(codec.tensor_proto_to_ndarray(got), np.float32(expected))


def _export_counter(path: str) -> None:
    """TF Serving's ``testdata/export_counter.py`` model: a float variable ``counter`` and four predict
    signatures, ``get_counter`` / ``incr_counter`` / ``reset_counter`` (no inputs) and ``incr_counter_by``
    (input ``delta``), each with the output ``output``."""
    import tensorflow as tf

    v1 = tf.compat.v1
    with tf.Graph().as_default() as graph, v1.Session(graph=graph) as session:
        counter = v1.Variable(0.0, dtype=tf.float32, name="counter", use_resource=False)  # a TF1 ref variable
        delta = v1.placeholder(dtype=tf.float32, name="delta")
        outputs = {"get_counter": ({}, counter), "incr_counter": ({}, counter.assign_add(1.0)),
                   "incr_counter_by": ({"delta": delta}, counter.assign_add(delta)),
                   "reset_counter": ({}, counter.assign(0.0))}
        session.run(v1.global_variables_initializer())
        info = v1.saved_model.utils.build_tensor_info
        builder = v1.saved_model.builder.SavedModelBuilder(path)
        builder.add_meta_graph_and_variables(session, [v1.saved_model.tag_constants.SERVING], signature_def_map={
            name: v1.saved_model.signature_def_utils.build_signature_def(
                {k: info(t) for k, t in inputs.items()}, {"output": info(output)}, "tensorflow/serving/predict")
            for name, (inputs, output) in outputs.items()})
        builder.save()


@pytest.mark.slow
def test_prediction_with_customized_signatures(tmp_path):
    """PredictionWithCustomizedSignatures: on the counter model, get_counter 0, incr_counter 1, reset_counter 0,
    incr_counter (output_filter "output") 1, incr_counter_by delta=3 4; each a float scalar "output" and the
    request's model spec."""
    from tests.support.servers import EmbeddedServer

    _export_counter(str(tmp_path / "saved_model_counter" / f"{VERSION:08d}"))
    with EmbeddedServer([f"--model_name={MODEL}", f"--model_base_path={tmp_path / 'saved_model_counter'}"],
                        wait_for=[MODEL], log_path=tmp_path / "server.log") as server, \
            grpc.insecure_channel(server.grpc_target) as channel:
        stub = prediction_service_pb2_grpc.PredictionServiceStub(channel)
        steps = [("get_counter", None, False, 0.0), ("incr_counter", None, False, 1.0),
                 ("reset_counter", None, False, 0.0), ("incr_counter", None, True, 1.0),
                 ("incr_counter_by", 3.0, False, 4.0)]
        for signature_name, delta, output_filter, expected in steps:
            request = predict_pb2.PredictRequest()
            request.model_spec.name, request.model_spec.signature_name = MODEL, signature_name
            request.model_spec.version.value = VERSION
            if output_filter:
                request.output_filter.append("output")
            if delta is not None:
                request.inputs["delta"].dtype = types_pb2.DT_FLOAT
                request.inputs["delta"].float_val.append(delta)
            response = stub.Predict(request, timeout=RPC_TIMEOUT)
            want = predict_pb2.PredictResponse()
            want.model_spec.CopyFrom(request.model_spec)
            want.outputs["output"].dtype = types_pb2.DT_FLOAT
            want.outputs["output"].tensor_shape.SetInParent()
            want.outputs["output"].float_val.append(expected)
            assert response == want, signature_name
