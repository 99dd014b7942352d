"""A user's model → fixed serving signatures: Keras model, ``tf.Module``, SavedModel, ``.keras`` file.

:func:`prepare` takes what a training script has (or a path to it) and
decides the signatures TF Serving will serve:

- a **Keras model**: one ``serving_default`` signature; its inputs are the
  model's inputs (names and dtypes), called with a tensor (one input) or a
  dict by input name; its outputs are the model's dict keys, else
  ``output_0``, ``output_1``, ... as ``model.export()`` names them;
- a **tf.Module**: its ``tf.function``\\ s with an ``input_signature``
  (``serving_default``, else ``__call__``, else the only one, is the default
  signature; others keep their attribute names), or the ``signatures`` given;
- a **SavedModel directory**: its signatures, loaded with ``tf.saved_model.load``;
- a **.keras file**: loaded with ``keras.saving.load_model``, then as a Keras model.

Every signature is traced once with a fixed ``input_signature``: the batch
dimension ``None`` (-1) whatever the model was built with (a Keras model
built for batch 32 serves any batch), every other dimension known. An unknown
one is refused with a message naming the input and the ``--input`` flag
that fixes it (``NAME:DTYPE:d1,d2``, or ``serving.codec.TensorSpec(name, dtype,
(None, d1, d2))``: the codec's one model of a tensor, batch dimension first).
Input names are
sanitized the way ``tf.function`` does (``a-b`` → ``a_b``) so the served
keys are the ones recorded.

``module:factory`` strings (:func:`load_from`) import a module and call the
factory for the model.
"""
from __future__ import annotations

import hashlib
import importlib
import inspect
import re
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Mapping, Optional, Sequence, Union

import numpy as np

from exporter.exportable import Exportable, ExportError, SignatureFactory, SignatureFunctions
from serving.codec import DEFAULT_SIGNATURE, PREDICT_METHOD_NAME, Signature, TensorSpec, enum_from_dtype, parse_shape

if TYPE_CHECKING:  # annotations only: importing this module loads no TensorFlow
    import keras
    import tensorflow as tf
    from numpy.typing import DTypeLike
    from tensorflow.types.experimental import ConcreteFunction, GenericFunction

__all__ = ["parse_input", "describe_input", "UserModel", "SignatureChoice", "prepare", "load_from", "OUTPUT_NAME"]

OUTPUT_NAME = "output_{}"  # unnamed outputs, as Keras' model.export() and TF's signatures name them
_FACTORY = re.compile(r"^[A-Za-z_][\w.]*:[A-Za-z_]\w*$")
_STRING_NAMES = {"string", "str", "bytes", "object"}
PathLike = Union[str, Path]
SignatureChoice = Union[Mapping[str, Union["GenericFunction", "ConcreteFunction"]], Sequence[str]]
"""``{key: tf.function or ConcreteFunction}`` to serve, or the keys to keep of the model's own signatures."""


def parse_input(text: str) -> TensorSpec:
    """``"ids:int64:16"`` → ``TensorSpec("ids", int64, (None, 16))``: the ``--input NAME:DTYPE:SHAPE`` flag.

    SHAPE is the dimensions after the batch, comma-separated (empty: one
    scalar per example); DTYPE a numpy or TensorFlow name (float32, int64,
    string, bool, ...). ValueError says what the form is.
    """
    parts = text.split(":")
    if len(parts) != 3 or not parts[0]:
        raise ValueError(f"bad input {text!r}: expected NAME:DTYPE:SHAPE, e.g. ids:int64:16 or images:float32:28,28,1 "
                         "(SHAPE: the dimensions after the batch, empty for a scalar per example)")
    name, dims = parse_shape(f"{parts[0]}:{parts[2]}")
    return TensorSpec(name, _parse_dtype(parts[1]), (None, *dims))


def describe_input(spec: TensorSpec) -> str:
    """``NAME:DTYPE:d1,d2`` (``?`` for an unknown dimension): the ``--input`` form of a served input."""
    return f"{spec.name}:{_dtype_name(spec.dtype)}:{','.join('?' if d is None else str(d) for d in _dims(spec))}"


def _dims(spec: TensorSpec) -> tuple[Optional[int], ...]:
    """The dimensions after the batch of an input spec (its shape is ``(None, d1, ...)``).

    ValueError for an unknown rank (a served input may have one): it has no ``--input`` form."""
    if spec.shape is None:
        raise ValueError(f"input {spec.name!r} has an unknown rank: no dimensions after the batch to describe")
    return spec.shape[1:]


def _parse_dtype(name: str) -> np.dtype:
    if name.lower() in _STRING_NAMES:
        return np.dtype(object)
    try:
        dtype = np.dtype(name)
        enum_from_dtype(dtype)
    except (TypeError, ValueError):
        raise ValueError(f"unknown dtype {name!r}: use a numpy/TensorFlow name such as float32, int64, "
                         "bool or string") from None
    return dtype


def _dtype_name(dtype: np.dtype) -> str:
    return "string" if dtype == np.dtype(object) else dtype.name


def _numpy_dtype(dtype: Union[str, DTypeLike, tf.DType]) -> np.dtype:
    """A Keras dtype name, a ``tf.DType`` or a numpy dtype → numpy (``object`` for strings)."""
    if getattr(dtype, "name", None) == "string" or dtype == "string":
        return np.dtype(object)
    return np.dtype(getattr(dtype, "as_numpy_dtype", dtype))


def _sanitize(name: str) -> str:
    """``tf.function``'s rule for an argument name (TensorFlow's ``sanitize_arg_name``)."""
    swapped = "".join(c if c.isalnum() else "_" for c in name) or "input"
    return swapped if swapped[0].isalpha() else "arg_" + swapped


@dataclass(frozen=True)
class _Plan:
    """One signature before tracing: its inputs (in call order) and how to compute its outputs."""

    key: str
    inputs: Mapping[str, TensorSpec]   # shapes (None, d1, ...): the batch first
    call: Callable[[dict[str, tf.Tensor]], Any]   # inputs by (sanitized) name → outputs of any structure


@dataclass(frozen=True)
class UserModel:
    """A user's model with its signatures fixed and traced once.

    ``signatures`` are their inputs (``serving.codec.Signature``; outputs
    are known after saving) for samples and synthesis. ``saved_model_dir``
    is the SavedModel the model was read from, if any (the exporter checks it
    the way TF Serving would run it). ``digest`` is a sha256 of the model: of
    the files it was read from, else of its graphs and weights.
    """

    signatures: Mapping[str, Signature]
    make_signatures: SignatureFactory
    root: Any
    source: str
    digest: str
    saved_model_dir: Optional[Path] = None

    def exportable(self, name: str, golden_inputs: Mapping[str, Mapping[str, np.ndarray]],
                   golden_source: str, notes: Sequence[str] = (),
                   warmup_inputs: Mapping[str, Mapping[str, np.ndarray]] = {}, warmup_source: str = ""
                   ) -> Exportable:
        """The :class:`~exporter.exportable.Exportable` the pipeline publishes."""
        return Exportable(name=name, make_signatures=self.make_signatures, golden_inputs=golden_inputs,
                          golden_source=golden_source, source=self.source, model_digest=self.digest,
                          root=self.root, notes=tuple(notes), warmup_inputs=dict(warmup_inputs),
                          warmup_source=warmup_source)


def load_from(text: str) -> Any:
    """The model ``--from`` names: a path (returned as a Path), or ``module:factory`` (imported and called).

    ExportError when it is neither.
    """
    path = Path(text)
    if path.exists():
        return path
    if not _FACTORY.match(text):
        raise ExportError(f"{text}: no such file or directory, and not a module:factory name")
    module_name, factory_name = text.split(":")
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise ExportError(f"{text}: cannot import module {module_name!r}: {exc}") from exc
    factory = getattr(module, factory_name, None)
    if not callable(factory):
        raise ExportError(f"{text}: module {module_name!r} has no callable {factory_name!r}")
    return factory()


def prepare(model: Any, *, signatures: Optional[SignatureChoice] = None,
            inputs: Sequence[Union[str, TensorSpec]] = ()) -> UserModel:
    """Fix and trace the serving signatures of ``model`` (see the module docstring).

    ``signatures``: ``{key: tf.function or ConcreteFunction}`` to serve
    instead of the ones found, or a list of keys to keep of the model's own.
    ``inputs``: ``TensorSpec``\\ s with the batch first (or ``NAME:DTYPE:SHAPE`` strings) that set an
    input's dtype and dimensions after the batch, e.g. for an unknown one.
    ExportError for a path that is not a model, a model without signatures,
    or an input whose dimensions stay unknown.
    """
    overrides = _overrides(inputs)
    saved_model_dir, source, digest = None, _describe(model), None
    if isinstance(model, (str, Path)):
        model, saved_model_dir, digest = _load_path(Path(model))
    plans, root = _plans(model, signatures, overrides)
    _check_overrides_used(overrides, plans)
    make_signatures = _factory(plans)
    functions = _trace(make_signatures)
    return UserModel(signatures={p.key: _signature(p) for p in plans}, make_signatures=make_signatures,
                     root=root, source=source, digest=digest or _functions_digest(functions),
                     saved_model_dir=saved_model_dir)


def _overrides(inputs: Sequence[Union[str, TensorSpec]]) -> dict[str, TensorSpec]:
    specs = [parse_input(i) if isinstance(i, str) else _batched(i) for i in inputs]
    return {spec.name: spec for spec in specs}


def _batched(spec: TensorSpec) -> TensorSpec:
    """An input override as given, once its shape is known to start with the batch dimension (None)."""
    if not isinstance(spec, TensorSpec):
        raise ExportError(f"an input is a 'NAME:DTYPE:SHAPE' string or a serving.codec.TensorSpec, "
                          f"not {type(spec).__name__}")
    if not spec.shape or spec.shape[0] is not None:
        raise ExportError(f"input {spec.name!r}: a TensorSpec's shape starts with the batch dimension, None "
                          f"(TensorSpec({spec.name!r}, dtype, (None, d1, ...))); got {spec.shape}")
    return spec


def _describe(model: Any) -> str:
    if isinstance(model, (str, Path)):
        path = Path(model)
        return f".keras file {path}" if path.suffix == ".keras" else f"SavedModel {path}"
    if _is_loaded(model):
        return "loaded SavedModel"
    if _is_keras(model):
        return f"Keras model {model.name!r} ({type(model).__name__})"
    return f"{type(model).__qualname__} object"


def _load_path(path: Path) -> tuple[Any, Optional[Path], str]:
    """A SavedModel directory or a .keras file → (loaded model, SavedModel dir or None, file digest)."""
    if path.is_dir() and (path / "saved_model.pb").is_file():
        import tensorflow as tf  # TensorFlow: only when a SavedModel is exported

        try:
            return tf.saved_model.load(str(path)), path, _files_digest(path)
        except Exception as exc:  # any load failure: the file is not a SavedModel this TF can read
            raise ExportError(f"{path}: cannot load the SavedModel: {type(exc).__name__}: {exc}") from exc
    if path.is_file() and path.suffix == ".keras":
        import keras  # Keras: only when a .keras file is exported

        try:
            return keras.saving.load_model(str(path), compile=False), None, _files_digest(path)
        except Exception as exc:  # a broken archive or a custom object Keras cannot find
            raise ExportError(f"{path}: cannot load the Keras model: {type(exc).__name__}: {exc}") from exc
    what = "a directory without saved_model.pb" if path.is_dir() else (
        "a file, not a .keras model" if path.is_file() else "no such file or directory")
    raise ExportError(f"{path} is not a model: {what}. Give a SavedModel directory (with saved_model.pb), "
                      "a .keras file, or module:factory")


def _plans(model: Any, signatures: Optional[SignatureChoice], overrides: Mapping[str, TensorSpec]
           ) -> tuple[list[_Plan], Any]:
    """The signature plans of ``model`` and the object whose resources they may capture."""
    import tensorflow as tf  # TensorFlow: only when a model is exported

    if isinstance(signatures, Mapping):
        functions, keep = dict(signatures), None
    elif _is_keras(model):
        if signatures is not None and list(signatures) != [DEFAULT_SIGNATURE]:
            raise ExportError(f"a Keras model has one signature, {DEFAULT_SIGNATURE!r}; to serve others pass "
                              "signatures={key: tf.function}")
        return [_keras_plan(model, overrides)], model
    elif isinstance(model, tf.Module) or _is_loaded(model):
        functions, keep = _module_functions(model), signatures
    else:
        raise ExportError(f"cannot export a {type(model).__module__}.{type(model).__qualname__}: pass a Keras "
                          "model, a tf.Module with tf.functions, a SavedModel directory or a .keras file")
    if keep is not None:
        functions = _select(functions, keep)
    if not functions:
        raise ExportError(f"{_describe(model)} has no signatures: give a tf.function an input_signature "
                          "(@tf.function(input_signature=[tf.TensorSpec(...)])) or pass "
                          "signatures={'serving_default': fn}; a SavedModel needs signatures "
                          "(tf.saved_model.save(obj, path, signatures=...) or model.export(path))")
    return [_function_plan(key, fn, overrides) for key, fn in functions.items()], model


def _is_keras(model: object) -> bool:
    if not any(c.__module__.split(".")[0] == "keras" for c in type(model).__mro__):
        return False
    import keras  # Keras: only when the model is a Keras model

    return isinstance(model, keras.Model)


def _select(functions: Mapping[str, GenericFunction], keys: Sequence[str]) -> SignatureFunctions:
    missing = sorted(set(keys) - set(functions))
    if missing:
        raise ExportError(f"no signature {', '.join(missing)}; the model has: {', '.join(sorted(functions)) or 'none'}")
    return {key: functions[key] for key in keys}


def _module_functions(module: tf.Module) -> dict[str, GenericFunction]:
    """A loaded SavedModel's signatures, or a tf.Module's tf.functions with an input_signature."""
    import tensorflow as tf  # TensorFlow: only when a model is exported

    if _is_loaded(module):
        return dict(module.signatures)
    polymorphic = tf.types.experimental.PolymorphicFunction
    names = [n for cls in type(module).__mro__ for n, v in vars(cls).items() if isinstance(v, polymorphic)]
    names += [n for n, v in vars(module).items() if isinstance(v, polymorphic)]
    found = {n: getattr(module, n) for n in dict.fromkeys(names)}
    found = {n: f for n, f in found.items() if f.input_signature is not None}
    default = next((n for n in (DEFAULT_SIGNATURE, "__call__") if n in found), None)
    if default is None and len(found) == 1:
        default = next(iter(found))
    return {(DEFAULT_SIGNATURE if n == default else n): f for n, f in found.items()}


def _is_loaded(module: object) -> bool:
    """True for the object ``tf.saved_model.load`` returns (its signatures are what it serves)."""
    return type(module).__module__.startswith("tensorflow.python.saved_model") and hasattr(module, "signatures")


def _keras_plan(model: keras.Model, overrides: Mapping[str, TensorSpec]) -> _Plan:
    try:
        tensors = list(model.inputs or ())
    except (AttributeError, ValueError):  # a subclassed or unbuilt model has no symbolic inputs
        tensors = []
    if tensors:
        names = {_sanitize(t.name): t.name for t in tensors}
        specs = {n: _spec(DEFAULT_SIGNATURE, n, t, overrides) for n, t in zip(names, tensors)}
    elif overrides:
        names = {n: n for n in overrides}
        specs = dict(overrides)
    else:
        raise ExportError(f"Keras model {model.name!r} has no signatures: it has no known inputs (a subclassed or "
                          "unbuilt model). Build it with keras.Input(...), or give every input with "
                          "--input NAME:DTYPE:SHAPE (exporter.export(..., inputs=['x:float32:4']))")
    originals = list(names.values())

    def call(feed: dict[str, tf.Tensor]) -> Any:
        args = [feed[n] for n in names]
        return model(args[0] if len(args) == 1 else dict(zip(originals, args)), training=False)

    return _Plan(DEFAULT_SIGNATURE, _fixed(DEFAULT_SIGNATURE, specs), call)


def _function_plan(key: str, fn: Any, overrides: Mapping[str, TensorSpec]) -> _Plan:
    """A plan for a tf.function (re-traced from its Python function) or a ConcreteFunction (called)."""
    python_function = getattr(fn, "python_function", None)
    if python_function is not None and not _is_restored(fn):
        return _python_function_plan(key, fn, python_function, overrides)
    structured = getattr(fn, "structured_input_signature", None)
    if structured is None:
        raise ExportError(f"signature {key!r}: a {type(fn).__name__} is not a tf.function or a ConcreteFunction")
    args, kwargs = structured
    if any(not hasattr(s, "dtype") for s in list(args) + list(kwargs.values())):
        raise ExportError(f"signature {key!r}: nested inputs are not supported; take one tensor per argument")
    named = [(s.name or f"input_{i}", s) for i, s in enumerate(args)] + list(kwargs.items())
    names = {_sanitize(n): n for n, _ in named}
    specs = {n: _spec(key, n, s, overrides) for n, (_, s) in zip(names, named)}
    keywords = list(kwargs)

    def call(feed: dict[str, tf.Tensor]) -> Any:
        values = [feed[n] for n in names]
        return fn(*values[:len(args)], **dict(zip(keywords, values[len(args):])))

    return _Plan(key, _fixed(key, specs), call)


def _is_restored(fn: object) -> bool:
    """A function of a loaded SavedModel: it only runs the shapes it was saved with; call it, don't re-trace."""
    return type(fn).__module__.startswith("tensorflow.python.saved_model")


def _python_function_plan(key: str, fn: Any, python_function: Callable[..., Any],
                          overrides: Mapping[str, TensorSpec]) -> _Plan:
    """Trace the Python function again under the served input signature (batch dimension None)."""
    params = [p.name for p in inspect.signature(python_function).parameters.values()
              if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    if fn.input_signature is None:
        missing = [p for p in params if p not in overrides]
        if missing:
            raise ExportError(f"signature {key!r}: the tf.function has no input_signature; give it one "
                              "(@tf.function(input_signature=[tf.TensorSpec([None, ...], dtype)])) or give "
                              f"{', '.join(missing)} with --input NAME:DTYPE:SHAPE")
        specs = {p: overrides[p] for p in params}
    else:
        signature = list(fn.input_signature)
        if any(not hasattr(s, "dtype") for s in signature):
            raise ExportError(f"signature {key!r}: nested input_signature entries are not supported; "
                              "take one tensor per argument")
        named = [(_sanitize(s.name or (params[i] if i < len(params) else f"input_{i}")), s)
                 for i, s in enumerate(signature)]
        specs = {n: _spec(key, n, s, overrides) for n, s in named}
    order = list(specs)

    def call(feed: dict[str, tf.Tensor]) -> Any:
        return python_function(*[feed[n] for n in order])

    return _Plan(key, _fixed(key, specs), call)


def _spec(key: str, name: str, tensor: Union[tf.Tensor, tf.TensorSpec, keras.KerasTensor],
          overrides: Mapping[str, TensorSpec]) -> TensorSpec:
    """The served spec of one input: its ``--input`` override, else the model's dimensions after the batch."""
    if name in overrides:
        return overrides[name]
    dtype = _numpy_dtype(tensor.dtype)
    shape = tensor.shape
    rank = getattr(shape, "rank", None) if not isinstance(shape, tuple) else len(shape)
    if rank is None:
        raise ExportError(f"signature {key!r} input {name!r} has an unknown rank; give its dimensions after "
                          f"the batch with --input {name}:{_dtype_name(dtype)}:d1,d2,...")
    if rank == 0:
        raise ExportError(f"signature {key!r} input {name!r} is a scalar without a batch dimension; serving "
                          f"needs one: give its per-example shape with --input {name}:{_dtype_name(dtype)}:")
    return TensorSpec(name, dtype, (None, *(None if d is None else int(d) for d in tuple(shape)[1:])))


def _fixed(key: str, specs: Mapping[str, TensorSpec]) -> dict[str, TensorSpec]:
    """Refuse an input with an unknown dimension after the batch, saying how to give it."""
    for name, spec in specs.items():
        if any(d is None for d in _dims(spec)):
            fix = ",".join("d%d" % (i + 1) if d is None else str(d) for i, d in enumerate(_dims(spec)))
            dims = ",".join("?" if d is None else str(d) for d in _dims(spec))
            flag = f"{name}:{_dtype_name(spec.dtype)}:{fix}"
            raise ExportError(
                f"signature {key!r} input {name!r} has an unknown dimension after the batch ([batch,{dims}]): "
                f"each signature is traced once with fixed shapes, only the batch dimension is -1. "
                f"Give its dimensions with --input {flag} (exporter.export(..., inputs=[{flag!r}]))")
    return dict(specs)


def _check_overrides_used(overrides: Mapping[str, TensorSpec], plans: Sequence[_Plan]) -> None:
    known = {n for p in plans for n in p.inputs}
    unknown = sorted(set(overrides) - known)
    if unknown:
        raise ExportError(f"--input names no input of the model: {', '.join(unknown)} "
                          f"(its inputs: {', '.join(sorted(known))})")


def _signature(plan: _Plan) -> Signature:
    return Signature(plan.key, PREDICT_METHOD_NAME, dict(plan.inputs), {})


def _factory(plans: Sequence[_Plan]) -> SignatureFactory:
    """``make_signatures(jit_compile)``: the plans as tf.functions; the FP32 ones are made once and kept.

    With ``jit_compile`` every signature is compiled whole, so a string input is refused first, in one
    line, before TensorFlow traces anything for XLA (it would fail later, after its own log lines).
    """
    fp32: SignatureFunctions = {}

    def make_signatures(jit_compile: bool) -> SignatureFunctions:
        if jit_compile:
            _refuse_string_inputs(plans)
            return {p.key: _signature_function(p, True) for p in plans}
        if not fp32:
            fp32.update({p.key: _signature_function(p, False) for p in plans})
        return dict(fp32)

    return make_signatures


def _refuse_string_inputs(plans: Sequence[_Plan]) -> None:
    """The xla variant of a user's model compiles each signature whole, and XLA takes no DT_STRING tensor."""
    for plan in plans:
        for name, spec in plan.inputs.items():
            if spec.dtype == np.dtype(object):
                raise ExportError(f"signature {plan.key!r} input {name!r} is {spec.dtype_name}: the xla variant "
                                  f"compiles each signature whole and XLA cannot take {spec.dtype_name} tensors; "
                                  f"export this model without the xla variant (fp32)")


def _signature_function(plan: _Plan, jit_compile: bool) -> GenericFunction:
    import tensorflow as tf  # TensorFlow: only when a model is traced

    names = list(plan.inputs)
    specs = [tf.TensorSpec(s.shape, tf.string if s.dtype == np.dtype(object) else tf.as_dtype(s.dtype),
                           name=n) for n, s in plan.inputs.items()]
    call = tf.function(plan.call, jit_compile=True) if jit_compile else plan.call

    def serve(*args: tf.Tensor) -> dict[str, tf.Tensor]:
        return _named_outputs(plan.key, call(dict(zip(names, args))))

    serve.__name__ = _sanitize(plan.key)
    # Named parameters, so the signature can be called by input name like any tf.function.
    serve.__signature__ = inspect.Signature(  # type: ignore[attr-defined]
        [inspect.Parameter(n, inspect.Parameter.POSITIONAL_OR_KEYWORD) for n in names])
    return tf.function(serve, input_signature=specs)


def _named_outputs(key: str, outputs: Any) -> dict[str, tf.Tensor]:
    """A dict of tensors: the model's dict keys, else ``output_0``, ``output_1``, ..."""
    import tensorflow as tf  # TensorFlow: only when a model is traced

    if isinstance(outputs, Mapping):
        named = {str(k): v for k, v in outputs.items()}
    else:
        named = {OUTPUT_NAME.format(i): v for i, v in enumerate(tf.nest.flatten(outputs))}
    bad = [k for k, v in named.items() if not isinstance(v, tf.Tensor)]
    if bad:
        raise ExportError(f"signature {key!r}: outputs {', '.join(bad)} are not dense tensors "
                          "(TF Serving's Predict returns dense tensors)")
    return named


def _trace(make_signatures: SignatureFactory) -> SignatureFunctions:
    """Trace every FP32 signature now, so a model that cannot take its fixed inputs fails here."""
    functions = make_signatures(False)
    for key, function in functions.items():
        try:
            function.get_concrete_function()
        except ExportError:
            raise
        except Exception as exc:  # the model's own code failed on the fixed input signature
            raise ExportError(f"signature {key!r} cannot be traced with a -1 batch dimension and the inputs "
                              f"{', '.join(str(s) for s in function.input_signature)}: {type(exc).__name__}: "
                              f"{_first_lines(str(exc))}") from exc
    return functions


def _first_lines(text: str, n: int = 6) -> str:
    return "\n".join(text.strip().splitlines()[:n])


def _files_digest(path: Path) -> str:
    """sha256 of a file, or of every file under a directory (relative names and bytes)."""
    digest = hashlib.sha256()
    files = [path] if path.is_file() else sorted(p for p in path.rglob("*") if p.is_file())
    for file in files:
        digest.update(file.relative_to(path if path.is_dir() else path.parent).as_posix().encode())
        digest.update(file.read_bytes())
    return digest.hexdigest()


def _functions_digest(functions: Mapping[str, GenericFunction]) -> str:
    """sha256 of traced signatures: their specs, the op types of their graphs, and every weight they read.

    Names and orders that vary between runs (layer-name counters, capture
    order) are left out, so the same model with the same weights hashes the same.
    """
    digest, weights = hashlib.sha256(), {}
    for key in sorted(functions):
        concrete = functions[key].get_concrete_function()
        graph_def = concrete.graph.as_graph_def()
        ops = [n.op for n in graph_def.node] + [n.op for f in graph_def.library.function for n in f.node_def]
        digest.update(f"{key}|{functions[key].input_signature}|{','.join(sorted(ops))}".encode())
        for variable in concrete.variables:
            weight = hashlib.sha256(f"{variable.dtype.name}{variable.shape}".encode())
            weight.update(variable.numpy().tobytes())
            weights[id(variable)] = weight.hexdigest()
    digest.update(",".join(sorted(weights.values())).encode())
    return digest.hexdigest()
