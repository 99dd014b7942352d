"""TF Serving's gRPC method paths (they are the wire contract, not our package)."""

__all__ = [
    "PREDICT",
    "CLASSIFY",
    "REGRESS",
    "GET_MODEL_METADATA",
    "GET_MODEL_STATUS",
    "RELOAD_CONFIG",
    "SIGNATURE_DEF_MAP_TYPE_URL",
]

_PREDICTION_SERVICE = "/tensorflow.serving.PredictionService/"
_MODEL_SERVICE = "/tensorflow.serving.ModelService/"

PREDICT = _PREDICTION_SERVICE + "Predict"
CLASSIFY = _PREDICTION_SERVICE + "Classify"
REGRESS = _PREDICTION_SERVICE + "Regress"
GET_MODEL_METADATA = _PREDICTION_SERVICE + "GetModelMetadata"
GET_MODEL_STATUS = _MODEL_SERVICE + "GetModelStatus"
RELOAD_CONFIG = _MODEL_SERVICE + "HandleReloadConfigRequest"

# GetModelMetadataResponse.metadata["signature_def"] is an Any of this type.
SIGNATURE_DEF_MAP_TYPE_URL = "type.googleapis.com/tensorflow.serving.SignatureDefMap"
