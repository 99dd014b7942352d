"""Sans-I/O core shared by all four clients (gRPC/REST x sync/async).

Each API method is a generator: it yields the transport calls it needs
(``Call`` values, built by a transport's ``Protocol``) and receives their raw
answers, then returns the SDK's value. Drivers in the client classes do the
I/O; so request building, response decoding, the signature cache, naming a
bare input and casting inputs to the signature's dtypes are written once.
"""
from __future__ import annotations

from contextlib import contextmanager
from dataclasses import dataclass
from typing import Awaitable, Callable, Generator, Iterable, Iterator, Mapping, Optional, Sequence, TypeVar, Union

import numpy as np
from google.protobuf.message import DecodeError, Message
from numpy.typing import ArrayLike

from serving import codec, status
from serving.client._types import ModelMetadata, VersionStatus
from serving.codec import DEFAULT_SIGNATURE, Signature

__all__ = ["Call", "Protocol", "ApiGen", "Inputs", "Examples", "ModelServerConfigLike", "ModelRef",
           "cast_inputs", "examples_list", "finish", "afinish", "reading_answer"]

T = TypeVar("T")

Inputs = Union[ArrayLike, Mapping[str, ArrayLike]]
"""An array (the signature's only input) or a mapping of input name to array."""

Examples = Union[codec.Features, Iterable[codec.Features]]
"""One tf.Example as a dict of features, or several (feature values: numbers, str, bytes or lists of them)."""

ModelServerConfigLike = Union[Message, str]
"""A ``ModelServerConfig``: the SDK's or the official message, or its text proto."""


@dataclass(frozen=True)
class Call:
    """One transport request: gRPC ``(method, body)`` or REST ``(method, path, body)``.

    Only ``idempotent`` calls (reads: inference, metadata, status) may be
    retried on transient failures; a call that changes the server's state
    (``HandleReloadConfigRequest``) is sent once, since a failure may come after
    the server acted on it. Calls are not idempotent unless marked.
    """

    method: str
    body: Optional[bytes]
    path: str = ""
    idempotent: bool = False


@dataclass(frozen=True)
class ModelRef:
    """Which servable a call addresses: a name and at most one of version and label."""

    name: str
    version: Optional[int] = None
    label: Optional[str] = None

    def __post_init__(self) -> None:
        if not self.name:
            raise ValueError("model name must not be empty")
        if self.version is not None and self.label is not None:
            raise ValueError("give a version or a label, not both")


ApiGen = Generator[Call, bytes, T]
"""An API method: yields ``Call``s, is sent each call's answer (the raw body), returns the SDK's value."""


class Protocol:
    """Transport-independent logic; subclasses build ``Call``s and read answers."""

    def __init__(self) -> None:
        self._metadata_cache: dict[ModelRef, ModelMetadata] = {}

    # --- transport specific -------------------------------------------------
    def metadata_call(self, ref: ModelRef) -> Call:
        raise NotImplementedError

    def parse_metadata(self, answer: bytes) -> ModelMetadata:
        raise NotImplementedError

    def predict(self, ref: ModelRef, inputs: Inputs, signature: Optional[str],
                output_filter: Optional[Sequence[str]]) -> ApiGen[dict[str, np.ndarray]]:
        raise NotImplementedError

    def classify(self, ref: ModelRef, examples: Examples, context: Optional[codec.Features],
                 signature: Optional[str]) -> ApiGen[list[list[tuple[str, float]]]]:
        raise NotImplementedError

    def regress(self, ref: ModelRef, examples: Examples, context: Optional[codec.Features],
                signature: Optional[str]) -> ApiGen[np.ndarray]:
        raise NotImplementedError

    def status(self, ref: ModelRef) -> ApiGen[list[VersionStatus]]:
        raise NotImplementedError

    def reload_config(self, config: ModelServerConfigLike) -> ApiGen[None]:
        raise NotImplementedError

    # --- shared -------------------------------------------------------------
    def metadata(self, ref: ModelRef) -> ApiGen[ModelMetadata]:
        answer = yield self.metadata_call(ref)
        with reading_answer("GetModelMetadata"):
            meta = self.parse_metadata(answer)
        self._metadata_cache[ref] = meta
        return meta

    def signature(self, ref: ModelRef, name: Optional[str]) -> ApiGen[Optional[Signature]]:
        """The signature ``name`` (default ``serving_default``), from cache or a metadata call; None if absent.

        An absent signature is the server's to refuse: TF Serving answers it
        differently on each wire (gRPC FAILED_PRECONDITION, REST INVALID_ARGUMENT).
        """
        meta = self._metadata_cache.get(ref)
        if meta is None:
            meta = yield from self.metadata(ref)
        return meta.signatures.get(name or DEFAULT_SIGNATURE)

    def forget(self, ref: ModelRef) -> None:
        """Drop cached metadata of ``ref``."""
        self._metadata_cache.pop(ref, None)

    def inference(self, ref: ModelRef, call: Call) -> ApiGen[bytes]:
        """Yield an inference ``call``; a refusal drops ``ref``'s cached metadata (it may be stale).

        Transient failures (UNAVAILABLE, DEADLINE_EXCEEDED, RESOURCE_EXHAUSTED,
        ...) keep it: they say nothing of the signature, and dropping it would
        add a metadata call to every failed request of an overloaded server.
        """
        try:
            return (yield call)
        except status.ServingError as error:
            if error.code in _STALE_SIGNATURE_CODES:
                self.forget(ref)
            raise

    def named_inputs(self, ref: ModelRef, inputs: Inputs, signature: Optional[str]) -> ApiGen[dict[str, np.ndarray]]:
        """``inputs`` as a dict of arrays of the signature's dtypes: the one input contract of every client.

        The signature comes from ``GetModelMetadata`` (cached per model
        reference: name and version or label; one call holds every signature).
        A bare value gets the signature's only input name. Every value, numpy
        or Python, goes through ``codec.cast_to_spec``: cast where that keeps
        it (float64 -> float32 within range, ints within range, str -> bytes),
        refused before anything is sent otherwise. Names the signature lacks
        are sent as they are, for the server to refuse, and so are all inputs
        to a signature the model lacks.
        """
        sig = yield from self.signature(ref, signature)
        return cast_inputs(sig, inputs, signature)


def cast_inputs(sig: Optional[Signature], inputs: Inputs, name: Optional[str] = None) -> dict[str, np.ndarray]:
    """``inputs`` named and cast to ``sig``'s dtypes (see ``Protocol.named_inputs``); ``sig`` None
    (the model lacks signature ``name``) leaves them as they are, for the server to refuse."""
    if sig is None:
        if not isinstance(inputs, Mapping):
            raise status.InvalidArgument(
                f'Serving signature name: "{name or DEFAULT_SIGNATURE}" not found in signature def')
        return {key: codec.cast_to_spec(key, value, None) for key, value in inputs.items()}
    if not isinstance(inputs, Mapping):
        if len(sig.inputs) != 1:
            raise status.InvalidArgument(
                f"signature {sig.name} has inputs {sorted(sig.inputs)}; pass a dict of arrays")
        inputs = {next(iter(sig.inputs)): inputs}
    return {name: codec.cast_to_spec(name, value, sig.inputs.get(name)) for name, value in inputs.items()}


_STALE_SIGNATURE_CODES = frozenset({status.Code.INVALID_ARGUMENT, status.Code.NOT_FOUND,
                                    status.Code.FAILED_PRECONDITION})


# What decoding a malformed answer raises inside numpy, protobuf and the codec.
_MALFORMED = (ValueError, TypeError, KeyError, IndexError, AttributeError, OverflowError, DecodeError)


@contextmanager
def reading_answer(what: str, max_response_bytes: Optional[int] = None) -> Iterator[None]:
    """Decode the server's ``what`` answer inside: a malformed answer (wrong types, undecodable tensors,
    bad shapes, not JSON) raises ``status.Internal`` naming ``what``, never a bare ValueError; tensors past
    ``max_response_bytes`` once decoded raise ``errors.ResponseTooLarge``."""
    from serving.client.errors import ResponseTooLarge

    try:
        yield
    except ResponseTooLarge:
        raise
    except status.ResourceExhausted as exc:
        raise ResponseTooLarge(f"the {what} answer is larger than max_response_bytes={max_response_bytes}: "
                               f"{exc.details}") from exc
    except status.InvalidArgument as exc:   # the codec's words for a malformed document
        raise status.Internal(f"the server's {what} answer is malformed: {exc.details}") from exc
    except _MALFORMED as exc:
        raise status.Internal(f"the server's {what} answer is malformed: {exc}") from exc


def examples_list(examples: Examples) -> Sequence[codec.Features]:
    """One dict or a sequence of dicts, as a list of feature dicts."""
    if isinstance(examples, Mapping):
        return [examples]
    examples = list(examples)
    if not examples:
        raise status.InvalidArgument("'examples' value is an empty array")
    return examples


def finish(gen: ApiGen[T], send: Callable[[Call], bytes]) -> T:
    """Run ``gen`` to completion with a synchronous ``send``."""
    try:
        call = next(gen)
        while True:
            try:
                answer = send(call)
            except BaseException as exc:  # let the generator see the error, then re-raise
                call = gen.throw(exc)
                continue
            call = gen.send(answer)
    except StopIteration as stop:
        return stop.value


async def afinish(gen: ApiGen[T], send: Callable[[Call], Awaitable[bytes]]) -> T:
    """Run ``gen`` to completion with an async ``send``."""
    try:
        call = next(gen)
        while True:
            try:
                answer = await send(call)
            except BaseException as exc:
                call = gen.throw(exc)
                continue
            call = gen.send(answer)
    except StopIteration as stop:
        return stop.value
