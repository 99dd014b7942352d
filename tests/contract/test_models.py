"""Model status, metadata, version policies and labels, for every client."""
from __future__ import annotations

import pytest

from serving import status
from serving.codec import VersionStatus


def test_status_lists_the_available_version(client, endpoint):
    assert client.status("digits") == [VersionStatus(1, "AVAILABLE")]


def test_policy_all_serves_every_version_newest_first(client, endpoint):
    assert client.status("digits_versions") == [VersionStatus(2, "AVAILABLE"),
                                                VersionStatus(1, "AVAILABLE")]


def test_policy_specific_serves_only_the_named_version(client, endpoint):
    assert client.status("digits_specific") == [VersionStatus(1, "AVAILABLE")]
    with pytest.raises(status.NotFound) as caught:
        client.predict("digits_specific", {"images": _zeros()}, version=2)
    assert caught.value.details == "Servable not found for request: Specific(digits_specific, 2)"


def test_status_of_one_version(client, endpoint):
    assert client.status("digits_versions", version=1) == [VersionStatus(1, "AVAILABLE")]


def test_status_of_unknown_model_is_not_found_with_tf_serving_message(client, endpoint):
    with pytest.raises(status.NotFound) as caught:
        client.status("no_such_model")
    assert caught.value.details == "Could not find any versions of model no_such_model"


def test_status_of_unknown_version_is_not_found_with_tf_serving_message(client, endpoint):
    with pytest.raises(status.NotFound) as caught:
        client.status("digits", version=7)
    assert caught.value.details == "Could not find version 7 of model digits"


def test_metadata_lists_every_signature_with_its_inputs_and_outputs(client, endpoint):
    metadata = client.metadata("digits")
    assert (metadata.model, metadata.version) == ("digits", 1)
    aliases = {key: (tuple(sig.inputs), tuple(sig.outputs)) for key, sig in metadata.signatures.items()}
    assert aliases["serving_default"] == (("images",), ("classes", "probabilities"))
    assert aliases["logits"] == (("images",), ("logits",))


def test_metadata_by_version_and_label(client, endpoint, request):
    assert client.metadata("digits_versions", version=1).version == 1
    assert client.metadata("digits_versions", label="canary").version == 2
    # TF Serving serves its latest version to a request that names neither; the SDK's gRPC client
    # names `stable` for it (unlabeled traffic stays on stable during a canary; over REST the gateway
    # decides), so it gets stable's version.
    unnamed = 1 if request.node.callspec.params["client"] == "sdk-grpc" else 2
    assert client.metadata("digits_versions").version == unnamed


def test_metadata_of_unknown_model_is_not_found(client, endpoint):
    with pytest.raises(status.NotFound) as caught:
        client.metadata("no_such_model")
    assert caught.value.details == "Servable not found for request: Latest(no_such_model)"


def _zeros():
    import numpy as np

    return np.zeros((1, 8, 8, 1), np.float32)
