"""Every numpy <-> TensorProto <-> JSON conversion of the stack, in symmetric pairs,
and the one model of a signature shared by the server, the SDK and the exporter.

This package is the one public codec; the implementation lives in
``serving/codec/_*.py`` (one concern each):

- dtype table: ``DTYPES``, ``dtype_from_enum``, ``enum_from_dtype``;
- numpy <-> TensorProto: ``ndarray_to_tensor_proto`` / ``tensor_proto_to_ndarray``
  (duck-typed: official ``tensorflow.TensorProto`` and the SDK's wire one);
- ``ElementBudget``: the elements one request's tensors may hold, charged from
  shapes before anything is allocated (``tensor_proto_shape`` reads a
  TensorProto's shape alone; ``tensor_proto_to_ndarray(budget=)``,
  ``json_to_array(budget=)``, ``rest_request_to_inputs(max_elements=)``);
- numpy <-> PredictRequest/PredictResponse wire bytes without building messages:
  ``encode_predict_request`` / ``decode_predict_request``,
  ``encode_predict_response`` / ``decode_predict_response``;
- JSON text: ``json_loads`` / ``json_dumps`` (NaN and Infinity as TF Serving); ``JSON``, the
  type of a parsed JSON value;
- REST Predict: ``rest_request_loads`` (the body, large numeric tensors parsed
  straight to numpy) + ``rest_request_to_inputs`` / ``outputs_to_rest_response`` (server),
  ``inputs_to_rest_request`` / ``rest_response_to_outputs`` (client), and one
  tensor's JSON value: ``json_to_array`` / ``array_to_json``;
- casting a caller's value to a signature input's dtype before it is sent, where
  that keeps the value (the SDK's one input contract): ``cast_to_spec``;
- tf.Example: ``example_from_dict`` / ``example_to_dict`` (``Features``, the dict of one); REST Classify/Regress:
  ``rest_request_to_input``, ``classification_result_to_rest``,
  ``regression_result_to_rest`` (server), ``examples_to_rest_request``,
  ``rest_response_to_results`` (client); ``classification_result_to_list`` and
  ``regression_result_to_array`` turn result messages into the SDK's values.

- signatures: ``TensorSpec`` and ``Signature`` (one model of a SignatureDef
  for the server, the SDK and the exporter), decoded from official or wire
  ``SignatureDef``/``TensorInfo`` protos by ``Signature.from_signature_def`` /
  ``TensorSpec.from_tensor_info``, written to and read from the exporter's
  manifest by ``to_json`` / ``from_json``; ``DEFAULT_SIGNATURE``
  (``"serving_default"``) and the method names ``PREDICT_METHOD_NAME``,
  ``CLASSIFY_METHOD_NAME``, ``REGRESS_METHOD_NAME``.
- metadata and status: ``ModelMetadata`` (a ``GetModelMetadata`` answer: model,
  version, ``Signature``s and the ``SignatureDef`` protos), ``VersionStatus``
  (one ``GetModelStatus`` entry) and its ``VersionState`` (the proto's states,
  by name, with ``.number``); the one type of each for the server and the SDK.

- samples without a manifest: ``synthesize_inputs(signature, batch_size, shapes=)``
  (by dtype, seeded), ``load_inputs(path, signature)`` (``.npz`` or a REST Predict
  body), ``parse_shape("NAME:d1,d2")``, ``example_shape(spec, shapes)``.

Nothing here imports TensorFlow.
"""
from __future__ import annotations

from serving.codec._cast import cast_to_spec
from serving.codec._dtypes import DTYPES, DType, dtype_from_enum, enum_from_dtype
from serving.codec._example import Features, example_from_dict, example_to_dict
from serving.codec._json import JSON, MAX_JSON_DEPTH, json_dumps, json_loads
from serving.codec._json_tensor import array_to_json, json_to_array
from serving.codec._limits import ElementBudget
from serving.codec._metadata import ModelMetadata, VersionState, VersionStatus
from serving.codec._rest import (
    BYTES_SUFFIX,
    inputs_to_rest_request,
    outputs_to_rest_response,
    rest_request_loads,
    rest_request_to_inputs,
    rest_response_to_outputs,
)
from serving.codec._rest_examples import (
    classification_result_to_list,
    classification_result_to_rest,
    examples_to_rest_request,
    regression_result_to_array,
    regression_result_to_rest,
    rest_request_to_input,
    rest_response_to_results,
)
from serving.codec._samples import example_shape, load_inputs, parse_shape, synthesize_inputs
from serving.codec._signature import (
    CLASSIFY_METHOD_NAME,
    DEFAULT_SIGNATURE,
    PREDICT_METHOD_NAME,
    REGRESS_METHOD_NAME,
    Signature,
    TensorSpec,
)
from serving.codec._tensor import ndarray_to_tensor_proto, tensor_proto_shape, tensor_proto_to_ndarray
from serving.codec._wire import (
    decode_predict_request,
    decode_predict_response,
    encode_predict_request,
    encode_predict_response,
)

__all__ = [
    "DType",
    "DTYPES",
    "dtype_from_enum",
    "enum_from_dtype",
    "ndarray_to_tensor_proto",
    "tensor_proto_to_ndarray",
    "tensor_proto_shape",
    "ElementBudget",
    "encode_predict_request",
    "decode_predict_request",
    "encode_predict_response",
    "decode_predict_response",
    "JSON",
    "MAX_JSON_DEPTH",
    "json_loads",
    "json_dumps",
    "json_to_array",
    "array_to_json",
    "cast_to_spec",
    "BYTES_SUFFIX",
    "rest_request_loads",
    "rest_request_to_inputs",
    "outputs_to_rest_response",
    "inputs_to_rest_request",
    "rest_response_to_outputs",
    "Features",
    "example_from_dict",
    "example_to_dict",
    "rest_request_to_input",
    "examples_to_rest_request",
    "classification_result_to_rest",
    "regression_result_to_rest",
    "classification_result_to_list",
    "regression_result_to_array",
    "rest_response_to_results",
    "DEFAULT_SIGNATURE",
    "PREDICT_METHOD_NAME",
    "CLASSIFY_METHOD_NAME",
    "REGRESS_METHOD_NAME",
    "TensorSpec",
    "Signature",
    "ModelMetadata",
    "VersionState",
    "VersionStatus",
    "synthesize_inputs",
    "load_inputs",
    "parse_shape",
    "example_shape",
]
