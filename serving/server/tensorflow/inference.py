"""Predict, Classify and Regress on a ``Servable``, with TF Serving's validation.

Mirrors ``servables/tensorflow/predict_util.cc``, ``classifier.cc``,
``regressor.cc`` and ``util.cc``: the same signature lookup, input and output
checks, the same error codes and, where TF Serving has one, the same message.
Front-ends (gRPC and REST) decode a request, call one of these, and encode
the result; nothing here knows about either wire.

An empty or None ``signature_name`` means ``DEFAULT_SIGNATURE`` (``serving.codec``'s,
re-exported here). All functions
are thread-safe (they only read the servable and call ``Servable.run``).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Mapping, Optional, Sequence, Union

import numpy as np
from google.protobuf import text_format
from numpy.typing import ArrayLike

from serving import status
from serving.codec import DEFAULT_SIGNATURE, Signature, TensorSpec, enum_from_dtype, tensor_proto_to_ndarray
from serving.server.tensorflow.servable import Servable

if TYPE_CHECKING:  # these messages load TensorFlow; they only annotate
    from tensorflow.core.framework.tensor_pb2 import TensorProto
    from tensorflow.core.protobuf.meta_graph_pb2 import SignatureDef
    from tensorflow_serving.apis.input_pb2 import Input

__all__ = [
    "DEFAULT_SIGNATURE",
    "CLASSIFY_INPUTS",
    "CLASSIFY_OUTPUT_CLASSES",
    "CLASSIFY_OUTPUT_SCORES",
    "REGRESS_INPUTS",
    "REGRESS_OUTPUTS",
    "Class",
    "Classifications",
    "ClassificationResult",
    "Regression",
    "RegressionResult",
    "rest_signature",
    "predict",
    "classify",
    "regress",
    "serialized_examples",
]

CLASSIFY_INPUTS = "inputs"
CLASSIFY_OUTPUT_CLASSES = "classes"
CLASSIFY_OUTPUT_SCORES = "scores"
REGRESS_INPUTS = "inputs"
REGRESS_OUTPUTS = "outputs"


def _signature_key(signature_name: Optional[str]) -> str:
    return signature_name or DEFAULT_SIGNATURE


def rest_signature(servable: Servable, signature_name: Optional[str]) -> Signature:
    """The signature a REST predict request names, as ``http_rest_api_handler.cc`` looks it up.

    The REST handler needs the input dtypes to parse JSON, so it resolves the
    signature first: an unknown one is INVALID_ARGUMENT ``Serving signature
    name: "X" not found in signature def`` (gRPC Predict gives
    FAILED_PRECONDITION instead, see ``predict``).
    """
    key = _signature_key(signature_name)
    try:
        return servable.signatures[key]
    except KeyError:
        raise status.InvalidArgument(
            f'Serving signature name: "{key}" not found in signature def') from None


# ---------------------------------------------------------------- Predict


def predict(servable: Servable, signature_name: Optional[str], inputs: Mapping[str, ArrayLike],
            output_filter: Sequence[str] = ()) -> dict[str, np.ndarray]:
    """Run a Predict request (``predict_util.cc`` ``RunPredict``).

    ``inputs`` map input aliases to arrays; ``output_filter`` lists output
    aliases (empty = every output of the signature). Returns outputs by alias.
    Unknown signature: FAILED_PRECONDITION ``Serving signature key "X" not
    found.``; wrong inputs, dtypes or output aliases: INVALID_ARGUMENT. Shapes
    are not checked: the graph gets what the request sent, as in TF Serving.
    """
    key = _signature_key(signature_name)
    signature = servable.signatures.get(key)
    if signature is None:
        raise status.FailedPrecondition(f'Serving signature key "{key}" not found.')
    defaults = _signature_defaults(servable, key)
    _verify_inputs_size(signature, inputs, defaults)
    arrays = _input_values(signature, inputs, defaults)
    aliases = _output_aliases(signature, output_filter)
    return servable.run(key, arrays, aliases)


def _signature_defaults(servable: Servable, key: str) -> Mapping[str, "TensorProto"]:
    proto = servable.signature_defs.get(key)
    return getattr(proto, "defaults", None) or {}


def _verify_inputs_size(signature: Signature, inputs: Mapping[str, ArrayLike],
                        defaults: Mapping[str, TensorProto]) -> None:
    sent, wanted = len(inputs), len(signature.inputs)
    if sent > wanted or (sent < wanted and not defaults):
        request_keys, signature_keys = sorted(inputs), sorted(signature.inputs)
        extra = sorted(set(request_keys) - set(signature_keys))
        missing = sorted(set(signature_keys) - set(request_keys))
        raise status.InvalidArgument(
            f"input size does not match signature: {sent}!={wanted} "
            f"len({{{','.join(request_keys)}}}) != len({{{','.join(signature_keys)}}}). "
            f"Sent extra: {{{','.join(extra)}}}. Missing but required: {{{','.join(missing)}}}.")


def _input_values(signature: Signature, inputs: Mapping[str, ArrayLike],
                  defaults: Mapping[str, TensorProto]) -> dict[str, np.ndarray]:
    arrays: dict[str, np.ndarray] = {}
    feed_order = sorted(signature.inputs)   # the order the servable feeds them (its callables' argument order)
    for alias, spec in signature.inputs.items():
        if alias in inputs:
            arrays[alias] = _checked_input(feed_order.index(alias), spec, inputs[alias])
        elif alias in defaults:
            arrays[alias] = tensor_proto_to_ndarray(defaults[alias])
        else:
            raise status.InvalidArgument(
                f"Signature input alias: {alias} not found in request"
                + (" and default inputs." if defaults else ""))
    unknown = sorted(set(inputs) - set(signature.inputs))
    if unknown:
        raise status.InvalidArgument(f"Inputs contains invalid name: {','.join(unknown)}")
    return arrays


def _type_string(dtype_name: str) -> str:
    """TensorFlow's ``DataTypeString``: ``DT_FLOAT`` -> ``float``."""
    return dtype_name[3:].lower() if dtype_name.startswith("DT_") else dtype_name


def _tf_dtype_name(array: np.ndarray) -> str:
    if array.dtype.kind in "SUO":
        return "DT_STRING"
    try:
        return enum_from_dtype(array.dtype).name
    except ValueError:
        return str(array.dtype)


def _checked_input(feed_index: int, spec: TensorSpec, value: ArrayLike) -> np.ndarray:
    """The input as fed; a dtype other than the signature's is the Session's own error, as TF Serving's
    ``Session::Run`` reports it: ``Expects arg[0] to be float but bool is provided``."""
    array = value if isinstance(value, np.ndarray) else np.asarray(value)
    got, want = _tf_dtype_name(array), spec.dtype_name
    if got != want:
        raise status.InvalidArgument(
            f"Expects arg[{feed_index}] to be {_type_string(want)} but {_type_string(got)} is provided")
    if array.dtype.kind == "U":
        array = np.array([s.encode("utf-8") for s in array.reshape(-1)],
                         dtype=object).reshape(array.shape)
    return array


def _output_aliases(signature: Signature, output_filter: Sequence[str]) -> list[str]:
    seen: list[str] = []
    for alias in output_filter:
        if alias not in signature.outputs:
            raise status.InvalidArgument(
                f"output tensor alias not found in signature: {alias} Outputs expected to be "
                f"in the set {{{','.join(sorted(signature.outputs))}}}.")
        if alias in seen:
            raise status.InvalidArgument(f"duplicate output tensor alias: {alias}")
        seen.append(alias)
    return seen or list(signature.outputs)


# ---------------------------------------------------------------- Classify / Regress


def serialized_examples(input_proto: Input) -> np.ndarray:
    """The DT_STRING [N] batch of serialized tf.Examples an ``Input`` carries (``util.cc``).

    With ``example_list_with_context`` each entry is the serialized context
    followed by the serialized example (a proto merge: the example's features
    win). An Input with no examples is INVALID_ARGUMENT "Input is empty.".
    """
    kind = input_proto.WhichOneof("kind")
    if kind == "example_list":
        examples = [e.SerializeToString() for e in input_proto.example_list.examples]
    elif kind == "example_list_with_context":
        context = input_proto.example_list_with_context.context.SerializeToString()
        examples = [context + e.SerializeToString()
                    for e in input_proto.example_list_with_context.examples]
    else:
        examples = []
    if not examples:
        raise status.InvalidArgument("Input is empty.")
    batch = np.empty(len(examples), dtype=object)
    batch[:] = examples
    return batch


def _method_signature(servable: Servable, signature_name: Optional[str]) -> tuple[str, SignatureDef]:
    key = _signature_key(signature_name)
    proto = servable.signature_defs.get(key)
    if proto is None:
        raise status.InvalidArgument(f"No signature was found with the name: {key}")
    return key, proto


def _debug_string(proto: SignatureDef) -> str:
    return text_format.MessageToString(proto)


@dataclass(frozen=True)
class Class:
    """One class of one example (``tensorflow.serving.Class``): empty label without a ``classes``
    output, score 0.0 without a ``scores`` output."""

    label: str = ""
    score: float = 0.0


@dataclass(frozen=True)
class Classifications:
    """The classes of one example, in the model's order (``tensorflow.serving.Classifications``)."""

    classes: tuple[Class, ...]


@dataclass(frozen=True)
class ClassificationResult:
    """A Classify answer, one entry per example (``tensorflow.serving.ClassificationResult``).

    Plain values with the messages' field names, so the codec's result encoders
    and a front-end filling the official message read them as they read the proto.
    """

    classifications: tuple[Classifications, ...]


@dataclass(frozen=True)
class Regression:
    """The value regressed for one example (``tensorflow.serving.Regression``)."""

    value: float


@dataclass(frozen=True)
class RegressionResult:
    """A Regress answer, one entry per example (``tensorflow.serving.RegressionResult``)."""

    regressions: tuple[Regression, ...]


def classify(servable: Servable, signature_name: Optional[str], input_proto: Input) -> ClassificationResult:
    """Run a Classify request (``classifier.cc``).

    The signature needs exactly one input ``inputs`` (serialized tf.Examples)
    and one or two outputs among ``classes`` (DT_STRING [batch, K]) and
    ``scores`` (DT_FLOAT [batch, K]).
    """
    key, proto = _method_signature(servable, signature_name)
    if len(proto.inputs) != 1:
        raise status.InvalidArgument("Expected one input Tensor.")
    if len(proto.outputs) not in (1, 2):
        raise status.InvalidArgument(
            f"Expected one or two output Tensors, found {len(proto.outputs)}")
    if CLASSIFY_INPUTS not in proto.inputs:
        raise status.InvalidArgument(
            f"No classification inputs found in SignatureDef: {_debug_string(proto)}")
    outputs = [a for a in (CLASSIFY_OUTPUT_CLASSES, CLASSIFY_OUTPUT_SCORES) if a in proto.outputs]
    if not outputs:
        raise status.InvalidArgument(
            'Expected classification signature outputs to contain at least one of "classes" or '
            f'"scores". Signature was: {_debug_string(proto)}')
    examples = serialized_examples(input_proto)
    values = servable.run(key, {CLASSIFY_INPUTS: examples}, outputs)
    return _classifications(len(examples), values.get(CLASSIFY_OUTPUT_CLASSES),
                            values.get(CLASSIFY_OUTPUT_SCORES))


def _check_class_tensor(name: str, tensor: np.ndarray, num_examples: int, dtype: str) -> None:
    if tensor.ndim != 2:
        raise status.InvalidArgument(
            f"Expected Tensor shape: [batch_size num_classes] but got {list(tensor.shape)}")
    kind_ok = tensor.dtype.kind in "SO" if dtype == "DT_STRING" else tensor.dtype == np.float32
    if not kind_ok:
        raise status.InvalidArgument(f"Expected {name} Tensor of {dtype}. Got: {tensor.dtype}")
    if tensor.shape[0] != num_examples:
        raise status.InvalidArgument(
            f"Expected {name} output batch size of {num_examples}. Got: {tensor.shape[0]}")


def _classifications(num_examples: int, classes: Optional[np.ndarray],
                     scores: Optional[np.ndarray]) -> ClassificationResult:
    if classes is not None:
        _check_class_tensor("classes", classes, num_examples, "DT_STRING")
    if scores is not None:
        _check_class_tensor("scores", scores, num_examples, "DT_FLOAT")
    if classes is not None and scores is not None and classes.shape[1] != scores.shape[1]:
        raise status.InvalidArgument(
            "Tensors class and score should match in dim_size(1). "
            f"Got {classes.shape[1]} vs. {scores.shape[1]}")
    either = classes if classes is not None else scores
    assert either is not None   # the caller found one of them (or refused the signature)
    num_classes = either.shape[1]
    return ClassificationResult(tuple(
        Classifications(tuple(Class(label="" if classes is None else _label(classes[i, c]),
                                    score=0.0 if scores is None else float(scores[i, c]))
                              for c in range(num_classes)))
        for i in range(num_examples)))


def _label(value: Union[bytes, str, np.generic]) -> str:
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value)


def regress(servable: Servable, signature_name: Optional[str], input_proto: Input) -> RegressionResult:
    """Run a Regress request (``regressor.cc``).

    The signature needs exactly one input ``inputs`` (serialized tf.Examples)
    and one output ``outputs``: DT_FLOAT [batch] or [batch, 1].
    """
    key, proto = _method_signature(servable, signature_name)
    if len(proto.inputs) != 1:
        raise status.InvalidArgument("Expected one input Tensor.")
    if len(proto.outputs) != 1:
        raise status.InvalidArgument("Expected one output Tensor.")
    if REGRESS_INPUTS not in proto.inputs:
        raise status.InvalidArgument(
            f"No regression inputs found in SignatureDef: {_debug_string(proto)}")
    if REGRESS_OUTPUTS not in proto.outputs:
        raise status.InvalidArgument(
            f"No regression outputs found in SignatureDef: {_debug_string(proto)}")
    examples = serialized_examples(input_proto)
    output = servable.run(key, {REGRESS_INPUTS: examples}, [REGRESS_OUTPUTS])[REGRESS_OUTPUTS]
    _check_regression_output(output, len(examples))
    return RegressionResult(tuple(Regression(float(value)) for value in output.reshape(-1)))


def _check_regression_output(output: np.ndarray, num_examples: int) -> None:
    if not (output.ndim == 1 or (output.ndim == 2 and output.shape[1] == 1)):
        raise status.InvalidArgument(
            "Expected output Tensor shape to be either [batch_size] or [batch_size, 1] "
            f"but got {list(output.shape)}")
    if output.shape[0] != num_examples:
        raise status.InvalidArgument(
            "Input batch size did not match output batch size: "
            f"{num_examples} vs. {output.shape[0]}")
    if output.dtype != np.float32:
        raise status.InvalidArgument(f"Expected output Tensor of DT_FLOAT.  Got: {output.dtype}")
