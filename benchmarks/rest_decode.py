"""REST Predict decoding of an image tensor: nested lists against numpy straight from the text, side by side.

    python -m benchmarks.rest_decode [--shape 224,224,3] [--batch 1] [--repeats 9] [--heap 340000]

Two decoders of the same body (``{"instances": [...]}`` of float32 values in
their shortest form, as ``codec.inputs_to_rest_request`` writes them):

- ``lists``: ``json_loads`` + ``rest_request_to_inputs`` (the server's path before it parsed dense arrays from the text);
- ``dense``: ``rest_request_loads`` + ``rest_request_to_inputs`` (what the server runs).

Each is timed in CPU time of the decoding thread (steadier than wall time on
a shared machine), the mean over ``--repeats`` interleaved rounds, in a process
holding ``--heap`` long-lived objects (dicts holding a list: two tracked
objects each), as a loaded TensorFlow model leaves about 340,000: once with
the heap left to the collector (CPython's thresholds) and once frozen as the
server freezes it (``serving.server.heap_freezer.HeapFreezer``).

Prints one JSON object; exit status 1 if a target is missed:

- the two decoders give the same tensor (dtype, shape, bytes);
- ``dense`` with the heap frozen is at least 1.25x faster than ``lists`` with it frozen;
- ``lists`` with the heap frozen is at least 1.25x faster than ``lists`` without (the collector's share).

``decode_times`` is reusable (e.g. by a peers benchmark) for any body and dtypes.
"""
from __future__ import annotations

import argparse
import gc
import json
import sys
import time
from typing import TYPE_CHECKING, Any, Callable, Mapping, cast

import numpy as np

from serving import codec
from serving.server.heap_freezer import HeapFreezer

if TYPE_CHECKING:
    from serving.codec._json_dense import DenseJSON

__all__ = ["main", "build_parser", "decoders", "decode_times", "image_body"]


def image_body(shape: tuple[int, ...], batch: int = 1, seed: int = 0) -> bytes:
    """A row-format Predict body of ``batch`` float32 images of ``shape`` (standard normal values)."""
    x = np.random.default_rng(seed).standard_normal((batch, *shape)).astype(np.float32)
    return codec.inputs_to_rest_request(x)


def decoders(body: bytes, specs: Mapping[str, Any]) -> dict[str, Callable[[], dict]]:
    """The two decoders of ``body`` with the signature's input dtypes ``specs``."""
    # A JSON document is a DenseJSON without dense arrays (list and dict are invariant, so mypy cannot see it).
    return {"lists": lambda: codec.rest_request_to_inputs(cast("DenseJSON", codec.json_loads(body)), specs)[0],
            "dense": lambda: codec.rest_request_to_inputs(codec.rest_request_loads(body), specs)[0]}


def same_tensors(a: Mapping[str, np.ndarray], b: Mapping[str, np.ndarray]) -> bool:
    return a.keys() == b.keys() and all(
        a[k].dtype == b[k].dtype and a[k].shape == b[k].shape and a[k].tobytes() == b[k].tobytes() for k in a)


def decode_times(body: bytes, specs: Mapping[str, Any], repeats: int, *, frozen: bool) -> dict[str, float]:
    """Mean CPU seconds per decode of each decoder (interleaved rounds), the heap frozen (``HeapFreezer``) or not.

    The mean, not the best: a full collection runs in some decodes only, and
    the best round would be one without.
    """
    freezer = HeapFreezer()
    if frozen:
        freezer.start()
        freezer.version_loaded()
    funcs = decoders(body, specs)
    total = dict.fromkeys(funcs, 0.0)
    try:
        for _ in range(repeats):
            for name, decode in funcs.items():
                start = time.thread_time()
                decode()
                total[name] += time.thread_time() - start
    finally:
        freezer.stop()
    return {name: seconds / repeats for name, seconds in total.items()}


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.rest_decode", description=__doc__.splitlines()[0])
    parser.add_argument("--shape", default="224,224,3", help="one image's dimensions (default 224,224,3)")
    parser.add_argument("--batch", type=int, default=1)
    parser.add_argument("--repeats", type=int, default=20)
    parser.add_argument("--heap", type=int, default=340_000,
                        help="long-lived tracked objects held while decoding (a loaded model's, default 340000)")
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    shape = tuple(int(d) for d in args.shape.split(","))
    body = image_body(shape, args.batch)
    specs = {"images": np.float32}
    heap = [{"value": [i]} for i in range(args.heap // 2)]  # noqa: F841 - held alive while measuring
    outputs = {name: decode() for name, decode in decoders(body, specs).items()}
    collected = decode_times(body, specs, args.repeats, frozen=False)
    frozen = decode_times(body, specs, args.repeats, frozen=True)
    same = same_tensors(outputs["lists"], outputs["dense"])
    dense_gain = round(frozen["lists"] / frozen["dense"], 2)
    freeze_gain = round(collected["lists"] / frozen["lists"], 2)
    result: dict[str, object] = {
        "body_bytes": len(body), "shape": [args.batch, *shape], "heap_objects": len(gc.get_objects()),
        **{f"{name}_ms": round(seconds * 1e3, 2) for name, seconds in collected.items()},
        **{f"{name}_frozen_ms": round(seconds * 1e3, 2) for name, seconds in frozen.items()},
        "same_tensors": same,
        "dense_over_lists_frozen": dense_gain,
        "frozen_over_collected_lists": freeze_gain,
        "dense_frozen_over_lists_collected": round(collected["lists"] / frozen["dense"], 2),
    }
    result["targets_met"] = same and dense_gain >= 1.25 and freeze_gain >= 1.25
    print(json.dumps(result, indent=2))
    return 0 if result["targets_met"] else 1


if __name__ == "__main__":
    sys.exit(main())
