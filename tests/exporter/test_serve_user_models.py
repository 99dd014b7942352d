"""Exported user models are served by the embedded server and answer like the models, over gRPC and REST."""
from __future__ import annotations

import numpy as np

import exporter
from serving.client import GrpcClient, RestClient
from serving.launcher import ServerProcess
from tests.support import user_models


def test_user_models_are_served_over_grpc_and_rest_at_any_batch_size(tmp_path):
    """All five kinds: a Keras Sequential, a functional model with two inputs of different dtypes, a
    tf.Module with a string input, a Keras model built for batch 32, and a SavedModel from model.export()."""
    seq, duo, colors, b32 = (user_models.sequential(), user_models.two_inputs(), user_models.string_module(),
                             user_models.fixed_batch())
    seq.export(str(tmp_path / "saved"), verbose=False)
    repo = tmp_path / "models"
    for model, name in ((seq, "seq"), (duo, "duo"), (colors, "colors"), (b32, "b32"), (tmp_path / "saved", "saved")):
        exporter.export(model, name=name, out=repo, progress=False)

    features = np.random.default_rng(3).normal(size=(5, 3)).astype(np.float32)
    inputs = {"features": features, "ids": np.array([0, 2, 4, 6, 8], np.int64)}
    text = np.array([b"blue", b"", b"red"], dtype=object)
    x = np.random.default_rng(4).normal(size=(3, 4)).astype(np.float32)
    with ServerProcess.for_models({n: repo / n for n in ("seq", "duo", "colors", "b32", "saved")}, workdir=tmp_path / "work") as server, \
            GrpcClient(server.grpc_target) as grpc_client, RestClient(server.rest_url) as rest_client:
        for client in (grpc_client, rest_client):
            got = client.predict("duo", inputs)
            np.testing.assert_allclose(got["score"], duo(inputs)["score"].numpy(), rtol=1e-5, atol=1e-6)
            got = client.predict("colors", {"text": text})
            np.testing.assert_array_equal(got["id"], [2, -1, 0])
            np.testing.assert_array_equal(got["length"], [4, 0, 3])
            np.testing.assert_allclose(client.predict("b32", {"x": x})["output_0"], b32(x).numpy(),
                                       rtol=1e-5, atol=1e-6)
            for name in ("seq", "saved"):
                np.testing.assert_allclose(client.predict(name, {"x": x})["output_0"], seq(x).numpy(),
                                           rtol=1e-5, atol=1e-6)
