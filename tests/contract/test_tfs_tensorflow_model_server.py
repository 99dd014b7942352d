"""TF Serving's ``model_servers/tensorflow_model_server_test.py`` (2.17.1), ported.

TF Serving starts one ``tensorflow_model_server`` per test; here one server of
TF Serving's rebuilt test models (``tfs_testdata``) answers them all:
``default`` and ``half_plus_two`` are ``saved_model_half_plus_two_cpu`` (version
123), ``half_plus_three`` is ``saved_model_half_plus_three``. The tests whose
TF Serving test starts a server with flags of its own (config reloads, a bad
config file, channel arguments, a UNIX socket, models exported in the test) start
one here too and are marked ``slow``.
"""
from __future__ import annotations

import threading
import time
from pathlib import Path

import grpc
import pytest
from tensorflow.core.framework import types_pb2
from tensorflow_serving.apis import (
    classification_pb2,
    get_model_metadata_pb2,
    get_model_status_pb2,
    inference_pb2,
    model_service_pb2_grpc,
    predict_pb2,
    prediction_service_pb2_grpc,
    regression_pb2,
)

from tests.support.contract.tfs_expect import HALF_PLUS_TWO_SIGNATURES, metadata_json, version_status_json
from tests.support.contract.tfs_grpc import RPC_TIMEOUT, add_example
from tests.support.half_plus_two import half_plus_two_model, half_plus_two_repo
from tests.support.servers import EmbeddedServer

VERSION = 123


@pytest.fixture
def prediction(tfs_channel) -> prediction_service_pb2_grpc.PredictionServiceStub:
    return prediction_service_pb2_grpc.PredictionServiceStub(tfs_channel)


def verify_predict_request(stub, expected_output: float, model_name: str = "default",
                           specify_output: bool = True, batch_input: bool = False,
                           signature_name: str = "serving_default") -> None:
    """``VerifyPredictRequest``: x = [2.0] (shape [1], or [1,1] with ``batch_input``) -> y = [expected_output],
    version 123."""
    request = predict_pb2.PredictRequest()
    request.model_spec.name, request.model_spec.signature_name = model_name, signature_name
    request.inputs["x"].dtype = types_pb2.DT_FLOAT
    request.inputs["x"].float_val.append(2.0)
    request.inputs["x"].tensor_shape.dim.add().size = 1
    if batch_input:
        request.inputs["x"].tensor_shape.dim.add().size = 1
    if specify_output:
        request.output_filter.append("y")
    result = stub.Predict(request, timeout=RPC_TIMEOUT)
    assert "y" in result.outputs
    assert result.outputs["y"].dtype == types_pb2.DT_FLOAT
    assert list(result.outputs["y"].float_val) == [expected_output]
    verify_model_spec(result.model_spec, model_name, signature_name)


def verify_model_spec(model_spec, name: str, signature_name: str) -> None:
    assert (model_spec.name, model_spec.signature_name, model_spec.version.value) == (name, signature_name, VERSION)


def test_get_model_status(tfs_channel):
    """testGetModelStatus: one version, 123, error code OK."""
    request = get_model_status_pb2.GetModelStatusRequest()
    request.model_spec.name = "default"
    result = model_service_pb2_grpc.ModelServiceStub(tfs_channel).GetModelStatus(request, timeout=RPC_TIMEOUT)
    assert [(v.version, v.status.error_code) for v in result.model_version_status] == [(VERSION, 0)]


def test_get_model_metadata(prediction):
    """testGetModelMetadata: the ModelSpec (default, 123) and one metadata entry, signature_def."""
    request = get_model_metadata_pb2.GetModelMetadataRequest()
    request.model_spec.name = "default"
    request.metadata_field.append("signature_def")
    result = prediction.GetModelMetadata(request, timeout=RPC_TIMEOUT)
    assert (result.model_spec.name, result.model_spec.version.value) == ("default", VERSION)
    assert list(result.metadata) == ["signature_def"]


def check_classify(stub) -> None:
    """``_TestClassify``: classify_x_to_y on x=2 is one class scored 3.0."""
    request = classification_pb2.ClassificationRequest()
    request.model_spec.name, request.model_spec.signature_name = "default", "classify_x_to_y"
    add_example(request.input, x=2.0)
    result = stub.Classify(request, timeout=RPC_TIMEOUT)
    assert [[c.score for c in item.classes] for item in result.result.classifications] == [[3.0]]
    verify_model_spec(result.model_spec, "default", "classify_x_to_y")


def check_regress(stub) -> None:
    """``_TestRegress``: regress_x_to_y on x=2 is 3.0."""
    request = regression_pb2.RegressionRequest()
    request.model_spec.name, request.model_spec.signature_name = "default", "regress_x_to_y"
    add_example(request.input, x=2.0)
    result = stub.Regress(request, timeout=RPC_TIMEOUT)
    assert [r.value for r in result.result.regressions] == [3.0]
    verify_model_spec(result.model_spec, "default", "regress_x_to_y")


def check_multi_inference(stub) -> None:
    """``_TestMultiInference``: regress_x_to_y and classify_x_to_y on x=2, both 3.0."""
    request = inference_pb2.MultiInferenceRequest()
    for signature_name, method in (("regress_x_to_y", "tensorflow/serving/regress"),
                                   ("classify_x_to_y", "tensorflow/serving/classify")):
        task = request.tasks.add()
        task.model_spec.name, task.model_spec.signature_name, task.method_name = "default", signature_name, method
    add_example(request.input, x=2.0)
    result = stub.MultiInference(request, timeout=RPC_TIMEOUT)
    assert len(result.results) == 2
    assert result.results[0].regression_result.regressions[0].value == 3.0
    assert result.results[1].classification_result.classifications[0].classes[0].score == 3.0
    for i, signature_name in enumerate(("regress_x_to_y", "classify_x_to_y")):
        verify_model_spec(result.results[i].model_spec, "default", signature_name)


def test_classify(prediction):
    """testClassify (the TF1 model)."""
    check_classify(prediction)


def test_regress(prediction):
    """testRegress (the TF1 model)."""
    check_regress(prediction)


def test_multi_inference(prediction):
    """testMultiInference (the TF1 model)."""
    check_multi_inference(prediction)


@pytest.fixture(scope="module")
def tf2_prediction(tmp_path_factory):
    """A server of ``saved_model_half_plus_two_tf2_cpu`` as ``default`` (``_GetSavedModelHalfPlusTwoTf2``)."""
    root = tmp_path_factory.mktemp("tf2")
    model = half_plus_two_model("half_plus_two_tf2", root / "saved_model_half_plus_two_tf2_cpu" / "00000123")
    with EmbeddedServer(["--model_name=default", f"--model_base_path={model.parent}"], wait_for=["default"],
                        log_path=root / "server.log") as server, \
            grpc.insecure_channel(server.grpc_target) as channel:
        yield prediction_service_pb2_grpc.PredictionServiceStub(channel)


@pytest.mark.slow
def test_classify_tf2(tf2_prediction):
    """testClassifyTf2: the native TF2 model's classify_x_to_y."""
    check_classify(tf2_prediction)


@pytest.mark.slow
def test_regress_tf2(tf2_prediction):
    """testRegressTf2: the native TF2 model's regress_x_to_y."""
    check_regress(tf2_prediction)


@pytest.mark.slow
def test_multi_inference_tf2(tf2_prediction):
    """testMultiInferenceTf2: the native TF2 model, regress_x_to_y and classify_x_to_y in one request."""
    check_multi_inference(tf2_prediction)


def test_predict_saved_model(prediction):
    """testPredictSavedModel: Predict x=[2.0] -> y=[3.0]."""
    verify_predict_request(prediction, 3.0)


@pytest.mark.parametrize("model_name, expected", [("half_plus_two", 3.0), ("half_plus_three", 4.0)])
@pytest.mark.parametrize("specify_output", [True, False])
def test_good_model_config(prediction, model_name, expected, specify_output):
    """testGoodModelConfig: both models of the config file answer, with and without an output filter."""
    verify_predict_request(prediction, expected, model_name, specify_output)


def test_classify_rest(tfs_rest):
    """testClassifyREST: {'results': [[['', 3.0]]]}."""
    body = {"signature_name": "classify_x_to_y", "examples": [{"x": 2.0}]}
    assert tfs_rest.post("/v1/models/default:classify", json=body).json() == {"results": [[["", 3.0]]]}


def test_regress_rest(tfs_rest):
    """testRegressREST: {'results': [3.0]}."""
    body = {"signature_name": "regress_x_to_y", "examples": [{"x": 2.0}]}
    assert tfs_rest.post("/v1/models/default:regress", json=body).json() == {"results": [3.0]}


def test_predict_rest(tfs_rest):
    """testPredictREST: instances [2.0, 3.0, 4.0] reach the [-1,1] input unchecked: [3.0, 3.5, 4.0]."""
    response = tfs_rest.post("/v1/models/default:predict", json={"instances": [2.0, 3.0, 4.0]})
    assert response.json() == {"predictions": [3.0, 3.5, 4.0]}


def test_predict_columnar_rest(tfs_rest):
    """testPredictColumnarREST: inputs [2.0, 3.0, 4.0] -> outputs [3.0, 3.5, 4.0]."""
    response = tfs_rest.post("/v1/models/default:predict", json={"inputs": [2.0, 3.0, 4.0]})
    assert response.json() == {"outputs": [3.0, 3.5, 4.0]}


def test_get_status_rest(tfs_rest):
    """testGetStatusREST: version 123 AVAILABLE."""
    assert tfs_rest.get("/v1/models/default").json() == version_status_json(VERSION)


def test_get_model_metadata_rest(tfs_rest):
    """testGetModelMetadataREST: the signature map of saved_model_half_plus_two_cpu
    (half_plus_two_model_metadata.json)."""
    assert tfs_rest.get("/v1/models/default/metadata").json() == metadata_json(
        "default", VERSION, HALF_PLUS_TWO_SIGNATURES)


def test_prometheus_endpoint(tfs_rest):
    """testPrometheusEndpoint: the page has '# TYPE' lines."""
    assert "# TYPE" in tfs_rest.get("/monitoring/prometheus/metrics").text


CONFIG = """model_config_list: {{
  config: {{
    name: "{name}",
    base_path: "{model_path}",
    model_platform: "tensorflow"
  }}
}}
"""


def wait_for_predict(stub, model_name: str, expected: float, timeout: float = 60.0) -> None:
    """Poll until ``model_name`` answers (the test waits poll_period + 1 s; a busy machine may need more)."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            verify_predict_request(stub, expected, model_name, specify_output=False)
            return
        except grpc.RpcError:
            if time.monotonic() > deadline:
                raise
            threading.Event().wait(0.2)


def test_model_config_reload(tmp_path: Path):
    """testModelConfigReload: with a 1 s poll period, rewriting the config file to half_plus_three
    replaces half_plus_two."""
    models = half_plus_two_repo(tmp_path / "models")
    config = tmp_path / "model_config.txt"
    config.write_text(CONFIG.format(name="half_plus_two", model_path=models / "saved_model_half_plus_two_cpu"))
    with EmbeddedServer([f"--model_config_file={config}", "--model_config_file_poll_wait_seconds=1"],
                        wait_for=["half_plus_two"], log_path=tmp_path / "server.log") as server, \
            grpc.insecure_channel(server.grpc_target) as channel:
        stub = prediction_service_pb2_grpc.PredictionServiceStub(channel)
        verify_predict_request(stub, 3.0, "half_plus_two", specify_output=False)
        config.write_text(CONFIG.format(name="half_plus_three", model_path=models / "saved_model_half_plus_three"))
        wait_for_predict(stub, "half_plus_three", 4.0)


def write_config(path: Path, name: str, model_path: Path) -> None:
    path.write_text(CONFIG.format(name=name, model_path=model_path))


@pytest.mark.slow
def test_model_config_reload_with_zero_poll_period(tmp_path: Path):
    """testModelConfigReloadWithZeroPollPeriod: with a poll period of 0 the file is read once; rewritten to
    half_plus_three, the server still serves half_plus_two. TF Serving's test waits poll_period + 1 s for a
    poll that must not come; this waits 2 s (a wait for something not to happen has no event to wait on)."""
    models = half_plus_two_repo(tmp_path / "models")
    config = tmp_path / "model_config.txt"
    write_config(config, "half_plus_two", models / "saved_model_half_plus_two_cpu")
    with EmbeddedServer([f"--model_config_file={config}", "--model_config_file_poll_wait_seconds=0"],
                        wait_for=["half_plus_two"], log_path=tmp_path / "server.log") as server, \
            grpc.insecure_channel(server.grpc_target) as channel:
        stub = prediction_service_pb2_grpc.PredictionServiceStub(channel)
        verify_predict_request(stub, 3.0, "half_plus_two", specify_output=False)
        write_config(config, "half_plus_three", models / "saved_model_half_plus_three")
        threading.Event().wait(2.0)
        verify_predict_request(stub, 3.0, "half_plus_two", specify_output=False)
        with pytest.raises(grpc.RpcError) as caught:
            verify_predict_request(stub, 4.0, "half_plus_three", specify_output=False)
        assert caught.value.code() == grpc.StatusCode.NOT_FOUND


@pytest.mark.slow
def test_bad_model_config(tmp_path: Path):
    """testBadModelConfig: TF Serving's bad_model_config.txt ("improperly formatted file") stops the server
    at start with "Error parsing text-format tensorflow.serving.ModelServerConfig" in its output, and
    ParseProtoTextFile's "Invalid protobuf file: '<path>'"."""
    config = tmp_path / "bad_model_config.txt"
    config.write_text("improperly formatted file")
    server = EmbeddedServer([f"--model_config_file={config}"], log_path=tmp_path / "server.log")
    server.launch()
    try:
        assert server.proc.wait(timeout=120) != 0
    finally:
        server.stop()
    output = (tmp_path / "server.log").read_text()
    assert "Error parsing text-format tensorflow.serving.ModelServerConfig" in output
    assert f"Invalid protobuf file: '{config}'" in output


@pytest.mark.slow
def test_good_grpc_channel_args(tmp_path: Path):
    """testGoodGrpcChannelArgs: the server starts and answers with
    --grpc_channel_arguments=grpc.max_connection_age_ms=2000,grpc.lb_policy_name=grpclb."""
    models = half_plus_two_repo(tmp_path / "models")
    with EmbeddedServer(["--model_name=default", f"--model_base_path={models / 'saved_model_half_plus_two_cpu'}",
                         "--grpc_channel_arguments=grpc.max_connection_age_ms=2000,grpc.lb_policy_name=grpclb"],
                        wait_for=["default"], log_path=tmp_path / "server.log") as server, \
            grpc.insecure_channel(server.grpc_target) as channel:
        verify_predict_request(prediction_service_pb2_grpc.PredictionServiceStub(channel), 3.0, specify_output=False)


@pytest.mark.slow
def test_predict_uds(tmp_path: Path):
    """testPredictUDS: Predict over the UNIX socket of --grpc_socket_path."""
    models = half_plus_two_repo(tmp_path / "models")
    socket = tmp_path / "grpc.sock"
    with EmbeddedServer(["--model_name=default", f"--model_base_path={models / 'saved_model_half_plus_two_cpu'}",
                         f"--grpc_socket_path={socket}"], wait_for=["default"], log_path=tmp_path / "server.log"), \
            grpc.insecure_channel(f"unix:{socket}") as channel:
        verify_predict_request(prediction_service_pb2_grpc.PredictionServiceStub(channel), 3.0, specify_output=False)


def _serve_export(tmp_path: Path, export) -> EmbeddedServer:
    """A server of the model ``export(path)`` writes as version 123 (``RunServer('default', base_path)``)."""
    base_path = tmp_path / "model"
    export(str(base_path / "00000123"))
    return EmbeddedServer(["--model_name=default", f"--model_base_path={base_path}"], wait_for=["default"],
                          log_path=tmp_path / "server.log")


@pytest.mark.slow
def test_tf_saved_model_save(tmp_path: Path):
    """test_tf_saved_model_save: a tf.train.Checkpoint with v1 * v2 * x saved by tf.saved_model; 12.0."""
    import tensorflow as tf

    def export(path: str) -> None:
        root = tf.train.Checkpoint()
        root.v1, root.v2 = tf.Variable(3.), tf.Variable(2.)
        root.f = tf.function(lambda x: {"y": root.v1 * root.v2 * x})
        tf.saved_model.save(root, path, root.f.get_concrete_function(tf.TensorSpec(None, tf.float32)))

    with _serve_export(tmp_path, export) as server, grpc.insecure_channel(server.grpc_target) as channel:
        verify_predict_request(prediction_service_pb2_grpc.PredictionServiceStub(channel), 12.0, specify_output=False)


@pytest.mark.slow
def test_tf_saved_model_save_multiple_signatures(tmp_path: Path):
    """test_tf_saved_model_save_multiple_signatures: serving_default answers 1.0, custom_signature_key 2.0."""
    import tensorflow as tf

    def export(path: str) -> None:
        root = tf.train.Checkpoint()
        root.f = tf.function(lambda x: {"y": 1.}, input_signature=[tf.TensorSpec(None, tf.float32)])
        root.g = tf.function(lambda x: {"y": 2.}, input_signature=[tf.TensorSpec(None, tf.float32)])
        tf.saved_model.save(root, path, signatures={"serving_default": root.f, "custom_signature_key": root.g})

    with _serve_export(tmp_path, export) as server, grpc.insecure_channel(server.grpc_target) as channel:
        stub = prediction_service_pb2_grpc.PredictionServiceStub(channel)
        verify_predict_request(stub, 2.0, signature_name="custom_signature_key")
        verify_predict_request(stub, 1.0)
