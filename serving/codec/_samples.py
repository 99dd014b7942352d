"""Sample inputs for a signature: synthesized from its specs, or read from a user's file.

One rule for every part that needs inputs without a manifest: the exporter
(goldens and warmup when a user gives no samples) and the load tests (payloads
for a model known only by its ``GetModelMetadata``).

- ``synthesize_inputs(signature, batch_size)``: one array per input, by dtype.
  Floats are seeded standard-normal values, integers 0 or 1 (valid ids for any
  embedding or lookup table), booleans random, strings ``b"sample 0"``, ...
  The batch dimension (the first, unknown in a served signature) takes
  ``batch_size``; any other unknown dimension must be given in ``shapes``
  (``{input name: dimensions after the batch}``), else ``ValueError`` names
  the input and the flag that sets it.
- ``load_inputs(path, signature)``: an ``.npz`` (one array per input name) or a
  TF Serving REST Predict body (``.json``: ``instances`` or ``inputs``), decoded
  with the signature's dtypes by the same code that decodes REST requests.
- ``parse_shape("NAME:d1,d2")``: the ``--shape`` flag's value.

Nothing here imports TensorFlow.
"""
from __future__ import annotations

from pathlib import Path
from typing import Mapping, Optional, Sequence, Union

import numpy as np

from serving import status
from serving.codec._json import json_loads
from serving.codec._rest import rest_request_to_inputs
from serving.codec._signature import Signature, TensorSpec

__all__ = ["parse_shape", "example_shape", "synthesize_inputs", "load_inputs"]

Shapes = Mapping[str, Sequence[int]]


def parse_shape(text: str) -> tuple[str, tuple[int, ...]]:
    """``"images:28,28,1"`` → ``("images", (28, 28, 1))``: an input's dimensions after the batch.

    ``"x:"`` is a scalar per example. ValueError says what the form is.
    """
    name, sep, dims = text.rpartition(":")
    try:
        shape = tuple(int(d) for d in dims.split(",")) if dims.strip() else ()
    except ValueError:
        shape = (-1,)
    if not sep or not name or any(d < 0 for d in shape):
        raise ValueError(f"bad shape {text!r}: expected NAME:d1,d2,... with the dimensions after the batch "
                         "(non-negative integers), e.g. images:28,28,1")
    return name, shape


def example_shape(spec: TensorSpec, shapes: Optional[Shapes] = None, *, flag: str = "--shape") -> tuple[int, ...]:
    """The dimensions of ``spec`` after the batch: from ``shapes`` if given there, else from the spec.

    ValueError for an unknown rank or an unknown dimension after the batch,
    naming the input and how to give it (``flag NAME:d1,d2``).
    """
    if shapes and spec.name in shapes:
        return tuple(int(d) for d in shapes[spec.name])
    how = f"give its dimensions after the batch with {flag} {spec.name}:d1,d2,..."
    if spec.shape is None:
        raise ValueError(f"input {spec.name!r} has an unknown rank; {how}")
    if not spec.shape:
        raise ValueError(f"input {spec.name!r} is a scalar without a batch dimension; "
                         "serving needs a batch dimension first")
    rest = spec.shape[1:]
    if any(d is None for d in rest):
        dims = ",".join("?" if d is None else str(d) for d in rest)
        raise ValueError(f"input {spec.name!r} has an unknown dimension after the batch ([batch,{dims}]); {how}")
    return tuple(int(d) for d in rest if d is not None)   # (none is: refused above)


def synthesize_inputs(signature: Signature, batch_size: int = 1, *, shapes: Optional[Shapes] = None,
                      seed: int = 0, flag: str = "--shape") -> dict[str, np.ndarray]:
    """One synthetic array per input of ``signature``, ``batch_size`` rows each (seeded, deterministic)."""
    if batch_size < 1:
        raise ValueError(f"batch size must be at least 1, not {batch_size}")
    unknown = sorted(set(shapes or ()) - set(signature.inputs))
    if unknown:
        raise ValueError(f"{flag} names no input of signature {signature.name!r}: {', '.join(unknown)} "
                         f"(its inputs: {', '.join(signature.inputs)})")
    rng = np.random.default_rng(seed)
    return {name: _synthesize(spec, (batch_size, *example_shape(spec, shapes, flag=flag)), rng)
            for name, spec in signature.inputs.items()}


def _synthesize(spec: TensorSpec, shape: tuple[int, ...], rng: np.random.Generator) -> np.ndarray:
    if not spec.dtype_supported:
        raise ValueError(f"input {spec.name!r} has dtype {spec.dtype_name}, which requests cannot carry")
    kind = spec.dtype.kind
    if kind == "f":
        return rng.standard_normal(shape).astype(spec.dtype)
    if kind in "iu":
        return rng.integers(0, 2, size=shape).astype(spec.dtype)
    if kind == "b":
        return rng.random(shape) < 0.5
    strings = np.empty(shape, dtype=object)
    for index, position in enumerate(np.ndindex(*shape)):
        strings[position] = f"sample {index}".encode()
    return strings


def load_inputs(path: Union[str, Path], signature: Optional[Signature] = None) -> dict[str, np.ndarray]:
    """The inputs stored in ``path``: ``.npz`` arrays by input name, or a REST Predict JSON body.

    With ``signature``, the names must be exactly its inputs and a JSON body is
    decoded with its dtypes (a JSON body needs one). ValueError names the file
    and the broken rule.
    """
    path = Path(path)
    if not path.is_file():
        raise ValueError(f"{path}: no such file")
    if path.suffix == ".npz":
        with np.load(path, allow_pickle=False) as npz:
            inputs = {name: npz[name] for name in npz.files}
    elif path.suffix == ".json":
        if signature is None:
            raise ValueError(f"{path}: a JSON body is typed by the model's signature; none is known here")
        try:
            inputs, _ = rest_request_to_inputs(json_loads(path.read_bytes()),
                                               {k: s.dtype for k, s in signature.inputs.items()})
        except status.ServingError as exc:
            raise ValueError(f"{path}: {exc.details}") from None
    else:
        raise ValueError(f"{path}: expected an .npz file or a TF Serving REST Predict body (.json)")
    if signature is not None and set(inputs) != set(signature.inputs):
        raise ValueError(f"{path}: inputs {sorted(inputs)} do not match signature {signature.name!r}'s "
                         f"inputs {sorted(signature.inputs)}")
    return inputs
