"""Expected answers of TF Serving's ported tests, built from the test models' structure.

``signature_json(method, inputs, outputs)`` is one SignatureDef as TF Serving's
REST metadata writes it (``MessageToJsonString`` with default fields and proto
field names); ``HALF_PLUS_TWO_SIGNATURES`` / ``TWO_VERSIONS_SIGNATURES`` are
the signature maps of ``saved_model_half_plus_two_cpu`` and
``saved_model_half_plus_two_2_versions`` (what TF Serving's
``half_plus_two_model_metadata.json`` and
``saved_model_half_plus_two_2_versions_metadata.json`` hold).
"""
from __future__ import annotations

from typing import Optional

__all__ = ["signature_json", "metadata_json", "HALF_PLUS_TWO_SIGNATURES", "TWO_VERSIONS_SIGNATURES",
           "version_status_json"]

_BATCH_1 = (-1, 1)


def _tensor(name: str, dtype: str, dims: Optional[tuple[int, ...]]) -> dict:
    shape = ({"dim": [], "unknown_rank": True} if dims is None
             else {"dim": [{"size": str(d), "name": ""} for d in dims], "unknown_rank": False})
    return {"dtype": dtype, "tensor_shape": shape, "name": name}


def signature_json(method: str, inputs: dict, outputs: dict) -> dict:
    """``{alias: (tensor name, dtype, dims or None)}`` maps -> a SignatureDef's JSON."""
    return {"inputs": {alias: _tensor(*spec) for alias, spec in inputs.items()},
            "outputs": {alias: _tensor(*spec) for alias, spec in outputs.items()},
            "method_name": method, "defaults": {}}


_EXAMPLES = ("tf_example:0", "DT_STRING", None)
_Y, _Y2, _Y3 = ("y:0", "DT_FLOAT", _BATCH_1), ("y2:0", "DT_FLOAT", _BATCH_1), ("y3:0", "DT_FLOAT", _BATCH_1)
_X, _X2 = ("x:0", "DT_FLOAT", _BATCH_1), ("x2:0", "DT_FLOAT", _BATCH_1)
_PREDICT, _REGRESS, _CLASSIFY = "tensorflow/serving/predict", "tensorflow/serving/regress", "tensorflow/serving/classify"

HALF_PLUS_TWO_SIGNATURES = {
    "serving_default": signature_json(_PREDICT, {"x": _X}, {"y": _Y}),
    "classify_x_to_y": signature_json(_CLASSIFY, {"inputs": _EXAMPLES}, {"scores": _Y}),
    "regress_x_to_y": signature_json(_REGRESS, {"inputs": _EXAMPLES}, {"outputs": _Y}),
    "regress_x_to_y2": signature_json(_REGRESS, {"inputs": _EXAMPLES}, {"outputs": _Y2}),
    "regress_x2_to_y3": signature_json(_REGRESS, {"inputs": _X2}, {"outputs": _Y3}),
}
TWO_VERSIONS_SIGNATURES = {**HALF_PLUS_TWO_SIGNATURES,
                           "classify_x2_to_y3": signature_json(_CLASSIFY, {"inputs": _X2}, {"scores": _Y3})}


def metadata_json(name: str, version: int, signatures: dict) -> dict:
    """A REST ``GetModelMetadata`` answer (``ToJsonString(GetModelMetadataResponse)``)."""
    return {"model_spec": {"name": name, "signature_name": "", "version": str(version)},
            "metadata": {"signature_def": {"signature_def": signatures}}}


def version_status_json(version: int) -> dict:
    """A REST ``GetModelStatus`` answer for one AVAILABLE version."""
    return {"model_version_status": [{"version": str(version), "state": "AVAILABLE",
                                      "status": {"error_code": "OK", "error_message": ""}}]}
