"""``ModelMetadata`` and ``VersionStatus``: one type each, for the server, the SDK and the tests."""
from __future__ import annotations

import json

import numpy as np
import pytest

import serving.client
from serving import codec
from serving.codec import ModelMetadata, VersionState, VersionStatus
from serving.status import Code
from serving.wire import serving_apis_pb2 as apis


def test_the_sdk_and_the_codec_share_one_type_of_each():
    assert serving.client.ModelMetadata is codec.ModelMetadata
    assert serving.client.VersionStatus is codec.VersionStatus
    assert {"ModelMetadata", "VersionStatus", "VersionState"} <= set(codec.__all__)


def test_a_state_equals_its_name_and_carries_the_proto_number():
    assert VersionState.AVAILABLE == "AVAILABLE" and VersionState.AVAILABLE.number == 30
    assert f"{VersionState.END}" == str(VersionState.END) == "END"
    assert json.dumps({"state": VersionState.LOADING}) == '{"state": "LOADING"}'
    assert VersionState.from_number(50) is VersionState.END
    assert VersionState.from_number(35) is VersionState.UNKNOWN   # a number the proto lacks


def test_a_status_takes_its_state_by_member_name_or_number():
    by_member = VersionStatus(2, VersionState.AVAILABLE, Code.OK, "")
    assert by_member == VersionStatus(2, "AVAILABLE") == VersionStatus(2, 30)
    assert VersionStatus(2, 30).state is VersionState.AVAILABLE
    with pytest.raises(ValueError):
        VersionStatus(2, "SERVING")


def test_a_wire_status_entry_decodes_to_the_same_value():
    entry = apis.ModelVersionStatus(version=3, state=apis.ModelVersionStatus.END)
    entry.status.error_code, entry.status.error_message = Code.NOT_FOUND, "Failed to load"
    assert VersionStatus.from_wire(entry) == VersionStatus(3, VersionState.END, Code.NOT_FOUND, "Failed to load")


def _signature_def_map() -> apis.SignatureDefMap:
    defs = apis.SignatureDefMap()
    sig = defs.signature_def["serving_default"]
    sig.method_name = codec.PREDICT_METHOD_NAME
    x = sig.inputs["x"]
    x.name, x.dtype = "serving_default_x:0", 1
    x.tensor_shape.dim.add(size=-1)
    x.tensor_shape.dim.add(size=3)
    sig.outputs["y"].name, sig.outputs["y"].dtype = "Identity:0", 1
    return defs


def test_metadata_decodes_signatures_and_keeps_the_protos_out_of_equality():
    spec = apis.ModelSpec(name="m")
    spec.version.value = 4
    defs = _signature_def_map()
    metadata = ModelMetadata.from_wire(spec, defs)
    assert (metadata.model, metadata.version) == ("m", 4)
    x = metadata.signatures["serving_default"].inputs["x"]
    assert (x.dtype, x.shape) == (np.dtype(np.float32), (None, 3))
    assert metadata.signature_defs["serving_default"] is defs.signature_def["serving_default"]
    assert metadata == ModelMetadata("m", 4, dict(metadata.signatures))   # protos take no part
