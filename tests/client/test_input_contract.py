"""One input contract: GrpcClient, RestClient and their asyncio twins give the same answers and the same
refusals on the same inputs, against the embedded server (real SavedModels: digits' float images, ranker's
float features and int64 ids, text's string input) with TF Serving's batching on.

The refusals of unsafe casts come from the SDK before anything is sent, so their text is one; the
batch-size refusal comes from the server and the SDK adds where the cap is set.
"""
from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any, Iterator

import httpx
import numpy as np
import pytest

from serving.client import AsyncGrpcClient, AsyncRestClient, GrpcClient, RestClient, errors
from serving.launcher import ServerProcess

pytestmark = pytest.mark.slow  # starts the embedded server (TensorFlow loads three models)

MAX_BATCH_SIZE = 64  # the largest warmup batch the exporter writes: a smaller cap fails the load
KINDS = ("grpc", "rest", "async-grpc", "async-rest")


class Clients:
    """The four clients on one server; ``call(kind, method, ...)`` runs an async client's call on its own loop."""

    def __init__(self, grpc_target: str, rest_url: str) -> None:
        self.loop = asyncio.new_event_loop()
        self.clients = {"grpc": GrpcClient(grpc_target), "rest": RestClient(rest_url)}
        self.clients["async-grpc"] = self.loop.run_until_complete(self._make(AsyncGrpcClient, grpc_target))
        self.clients["async-rest"] = self.loop.run_until_complete(self._make(AsyncRestClient, rest_url))

    @staticmethod
    async def _make(cls: type, address: str) -> Any:
        return cls(address)

    def call(self, kind: str, method: str, *args: Any, **kwargs: Any) -> Any:
        result = getattr(self.clients[kind], method)(*args, **kwargs)
        return self.loop.run_until_complete(result) if kind.startswith("async") else result

    def all(self, method: str, *args: Any, **kwargs: Any) -> dict[str, Any]:
        return {kind: self.call(kind, method, *args, **kwargs) for kind in KINDS}

    def refusals(self, *args: Any, **kwargs: Any) -> dict[str, errors.ServingError]:
        refused = {}
        for kind in KINDS:
            with pytest.raises(errors.ServingError) as caught:
                self.call(kind, "predict", *args, **kwargs)
            refused[kind] = caught.value
        return refused

    def close(self) -> None:
        for kind, client in self.clients.items():
            closed = client.close()
            if kind.startswith("async"):
                self.loop.run_until_complete(closed)
        self.loop.close()


@pytest.fixture(scope="module")
def server(model_repo: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    models = {name: model_repo / name for name in ("digits", "ranker", "text")}
    batching = {"max_batch_size": MAX_BATCH_SIZE, "batch_timeout_micros": 0, "num_batch_threads": 2}
    with ServerProcess.for_models(models, workdir=tmp_path_factory.mktemp("contract-server"),
                                  batching=batching) as running:
        yield running


@pytest.fixture(scope="module")
def clients(server: ServerProcess) -> Iterator[Clients]:
    made = Clients(server.grpc_target, server.rest_url)
    yield made
    made.close()


def assert_same_answers(answers: dict[str, dict[str, np.ndarray]], expected: dict[str, np.ndarray]) -> None:
    for kind, outputs in answers.items():
        assert sorted(outputs) == sorted(expected), kind
        for name, value in expected.items():
            assert outputs[name].dtype == value.dtype, (kind, name)
            np.testing.assert_array_equal(outputs[name], value, err_msg=f"{kind} {name}")


def test_float64_numpy_and_python_lists_give_the_float32_answer_through_all_four(clients):
    images = np.random.default_rng(7).random((3, 8, 8, 1))
    expected = clients.call("grpc", "predict", "digits", images.astype(np.float32))
    assert_same_answers(clients.all("predict", "digits", {"images": images}), expected)
    assert_same_answers(clients.all("predict", "digits", images.tolist()), expected)


def test_int64_arrays_into_float_inputs_and_python_ints_into_int64_inputs_through_all_four(clients):
    ints = np.arange(16, dtype=np.int64).reshape(2, 8)
    exact = {"features": ints.astype(np.float32), "user_id": np.array([3, 4], np.int64),
             "item_id": np.array([5, 6], np.int64)}
    expected = clients.call("grpc", "predict", "ranker", exact)
    cast = {"features": ints, "user_id": [3, 4], "item_id": np.array([5, 6], np.int32)}
    assert_same_answers(clients.all("predict", "ranker", cast), expected)


def test_str_and_bytes_mean_the_same_string_input_through_all_four(clients):
    expected = clients.call("grpc", "predict", "text", {"text": np.array([b"good movie", b"caf\xc3\xa9"], object)})
    assert_same_answers(clients.all("predict", "text", {"text": ["good movie", "café"]}), expected)
    assert_same_answers(clients.all("predict", "text", ["good movie", b"caf\xc3\xa9"]), expected)
    assert_same_answers(clients.all("predict", "text", np.array(["good movie", "café"])), expected)


RANKER = {"features": np.zeros((1, 8)), "user_id": [1], "item_id": [1]}
INT64_RANGE = "[-9223372036854775808, 9223372036854775807]"


@pytest.mark.parametrize("model,inputs,message", [
    ("ranker", {**RANKER, "item_id": [1.5]},
     'input "item_id": cannot cast DT_DOUBLE to DT_INT64: 1.5 is not a whole number'),
    ("ranker", {**RANKER, "user_id": [2**70]},
     f'input "user_id": cannot cast int to DT_INT64: 1180591620717411303424 is out of DT_INT64\'s range {INT64_RANGE}'),
    ("digits", {"images": np.full((1, 8, 8, 1), 1e300)},
     "input \"images\": cannot cast DT_DOUBLE to DT_FLOAT: 1e+300 is out of DT_FLOAT's range "
     "(largest magnitude 3.4028234663852886e+38)"),
    ("ranker", {**RANKER, "features": [["abc"] * 8]},
     "input \"features\": cannot cast DT_STRING to DT_FLOAT: 'abc' is a string, not a number"),
    ("text", {"text": [3]}, 'input "text": cannot cast DT_INT64 to DT_STRING: 3 is a number, not a string'),
], ids=["fraction-to-int", "int-overflow", "float32-overflow", "string-to-number", "number-to-string"])
def test_an_unsafe_cast_gets_the_same_refusal_through_all_four(clients, model, inputs, message):
    refused = clients.refusals(model, inputs)
    for kind, error in refused.items():
        assert isinstance(error, errors.InvalidArgument) and error.code == errors.Code.INVALID_ARGUMENT, kind
        assert error.details == message, kind


def test_a_request_over_max_batch_size_says_where_the_cap_is_through_all_four(clients):
    rows = MAX_BATCH_SIZE + 1
    refused = clients.refusals("digits", np.zeros((rows, 8, 8, 1), np.float32))
    server_text = f"Task size {rows} is larger than maximum input batch size {MAX_BATCH_SIZE}"
    hint = (f"; the server batches with max_batch_size {MAX_BATCH_SIZE} (its --batching_parameters_file, e.g. "
            f"serving/batching.cpu.config under make up); split the request into batches of at most "
            f"{MAX_BATCH_SIZE} rows, or raise max_batch_size")
    for kind, error in refused.items():
        assert isinstance(error, errors.InvalidArgument), kind
        assert error.details.endswith(server_text + hint), (kind, error.details)


def test_the_init_op_output_is_dt_invalid_on_both_wires_and_in_all_four(clients, server):
    doc = httpx.get(f"{server.rest_url}/v1/models/digits/metadata").json()
    init_op = doc["metadata"]["signature_def"]["signature_def"]["__saved_model_init_op"]
    assert init_op["outputs"]["__saved_model_init_op"]["dtype"] == "DT_INVALID"  # TF Serving's REST JSON
    metadata = clients.all("metadata", "digits")
    assert all(m == metadata["grpc"] for m in metadata.values())
    spec = metadata["grpc"].signatures["__saved_model_init_op"].outputs["__saved_model_init_op"]
    assert spec.dtype_name == "DT_INVALID" and not spec.dtype_supported
