"""The public methods, written once for all four clients.

Each method builds the protocol generator and hands it to ``self._drive``:
the sync clients return the value, the async clients return an awaitable of
it. Argument names and return values are the same everywhere.
"""
from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any, Optional, Sequence, TypeVar

import numpy as np

from serving import codec
from serving.client._protocol import (
    ApiGen,
    Call,
    Examples,
    Inputs,
    ModelRef,
    ModelServerConfigLike,
    Protocol,
    afinish,
    finish,
)
from serving.client._types import ModelMetadata, VersionStatus
from serving.client.retry import NO_RETRY, RetryPolicy, acall_with_retry, call_with_retry

__all__ = ["ClientApi", "SyncTransport", "AsyncTransport"]

T = TypeVar("T")
SyncClientT = TypeVar("SyncClientT", bound="SyncTransport")
AsyncClientT = TypeVar("AsyncClientT", bound="AsyncTransport")


class ClientApi:
    """predict / classify / regress / metadata / status / reload_config.

    ``version`` and ``label`` choose the servable (at most one; neither means
    the latest available version). ``timeout`` (seconds) is a deadline for the
    whole call: the metadata lookup a predict may need, the predict, reading
    the answer and every retry share it; None means the client's default. Failures raise
    ``serving.client.errors.ServingError`` subclasses.
    """

    _protocol: Protocol

    def _drive(self, gen: ApiGen[T], timeout: Optional[float]) -> Any:
        """The value of ``gen`` (sync clients) or an awaitable of it (async clients; their signatures say so
        in ``AsyncTransport``)."""
        raise NotImplementedError

    def predict(self, model: str, inputs: Inputs, *, version: Optional[int] = None,
                label: Optional[str] = None, signature: Optional[str] = None,
                output_filter: Optional[Sequence[str]] = None,
                timeout: Optional[float] = None) -> dict[str, np.ndarray]:
        """Run the model: ``{output name: array}`` with the signature's dtypes.

        ``inputs`` (numpy arrays, or Python lists and scalars) are cast to the
        signature's dtypes where that keeps every value, and refused with
        ``errors.InvalidArgument`` before anything is sent otherwise
        (``codec.cast_to_spec``): the same answers and the same refusals from
        all four clients. The signature comes from one cached metadata call.
        A bare array is sent as the signature's only input. Arrays decoded
        from gRPC are read-only; from a response of 64 KiB or more they share
        its buffer (``codec._wire.ZERO_COPY_BYTES``).
        """
        gen = self._protocol.predict(ModelRef(model, version, label), inputs, signature, output_filter)
        return self._drive(gen, timeout)

    def classify(self, model: str, examples: Examples, *, context: Optional[codec.Features] = None,
                 version: Optional[int] = None, label: Optional[str] = None,
                 signature: Optional[str] = None,
                 timeout: Optional[float] = None) -> list[list[tuple[str, float]]]:
        """Classify tf.Examples given as dicts: ``[[(label, score), ...] per example]``."""
        gen = self._protocol.classify(ModelRef(model, version, label), examples, context, signature)
        return self._drive(gen, timeout)

    def regress(self, model: str, examples: Examples, *, context: Optional[codec.Features] = None,
                version: Optional[int] = None, label: Optional[str] = None,
                signature: Optional[str] = None, timeout: Optional[float] = None) -> np.ndarray:
        """Regress tf.Examples given as dicts: a float32 array, one value per example."""
        gen = self._protocol.regress(ModelRef(model, version, label), examples, context, signature)
        return self._drive(gen, timeout)

    def metadata(self, model: str, *, version: Optional[int] = None, label: Optional[str] = None,
                 timeout: Optional[float] = None) -> ModelMetadata:
        """The served version and its signatures (``GetModelMetadata``, ``signature_def``)."""
        return self._drive(self._protocol.metadata(ModelRef(model, version, label)), timeout)

    def status(self, model: str, *, version: Optional[int] = None, label: Optional[str] = None,
               timeout: Optional[float] = None) -> list[VersionStatus]:
        """Versions and their states (``GetModelStatus``); all versions unless one is named."""
        return self._drive(self._protocol.status(ModelRef(model, version, label)), timeout)

    def reload_config(self, config: ModelServerConfigLike, *, timeout: Optional[float] = None) -> None:
        """Replace the server's model list (``HandleReloadConfigRequest``; gRPC only).

        ``config`` is a ``ModelServerConfig`` (the SDK's or the official
        message) or its text proto. The REST client raises ``Unimplemented``:
        TF Serving's REST API has no such call.
        """
        return self._drive(self._protocol.reload_config(config), timeout)


class SyncTransport(ClientApi):
    """Blocking I/O shared by the sync clients: retries within one deadline, ``with`` support.

    Subclasses set ``timeout`` and ``retry`` and provide ``_send_once(call, timeout) -> bytes``
    and ``close()``; ``_send_once`` must return or fail within ``timeout`` seconds. One API call
    (a metadata lookup, the predict, their retries) shares one deadline. Only idempotent calls
    (reads) are retried.
    """

    timeout: float
    retry: RetryPolicy

    def _send_once(self, call: Call, timeout: float) -> bytes:
        raise NotImplementedError

    def close(self) -> None:
        raise NotImplementedError

    def _drive(self, gen: ApiGen[T], timeout: Optional[float]) -> T:
        budget = self.timeout if timeout is None else timeout
        deadline = time.monotonic() + budget  # one deadline for every call of this API call

        def send(call: Call) -> bytes:
            policy = self.retry if call.idempotent else NO_RETRY
            return call_with_retry(lambda remaining: self._send_once(call, remaining), policy, budget,
                                   deadline=deadline)
        return finish(gen, send)

    def __enter__(self: SyncClientT) -> SyncClientT:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class AsyncTransport(ClientApi):
    """The async twin of ``SyncTransport``: the same calls, awaited; ``async with`` support."""

    timeout: float
    retry: RetryPolicy

    async def _send_once(self, call: Call, timeout: float) -> bytes:
        raise NotImplementedError

    async def close(self) -> None:
        raise NotImplementedError

    async def _drive(self, gen: ApiGen[T], timeout: Optional[float]) -> T:
        budget = self.timeout if timeout is None else timeout
        deadline = time.monotonic() + budget  # one deadline for every call of this API call

        async def send(call: Call) -> bytes:
            policy = self.retry if call.idempotent else NO_RETRY
            return await acall_with_retry(lambda remaining: self._send_once(call, remaining), policy, budget,
                                          deadline=deadline)
        return await afinish(gen, send)

    async def __aenter__(self: AsyncClientT) -> AsyncClientT:
        return self

    if TYPE_CHECKING:
        # The methods above, as the async clients' callers see them: the same values, awaited. (One body
        # serves both; only the signature differs, which Python's types cannot say once for both.)
        async def predict(  # type: ignore[override]  # awaitable twin of ClientApi.predict
                self, model: str, inputs: Inputs, *, version: Optional[int] = None, label: Optional[str] = None,
                signature: Optional[str] = None, output_filter: Optional[Sequence[str]] = None,
                timeout: Optional[float] = None) -> dict[str, np.ndarray]: ...

        async def classify(  # type: ignore[override]  # awaitable twin of ClientApi.classify
                self, model: str, examples: Examples, *, context: Optional[codec.Features] = None,
                version: Optional[int] = None, label: Optional[str] = None, signature: Optional[str] = None,
                timeout: Optional[float] = None) -> list[list[tuple[str, float]]]: ...

        async def regress(  # type: ignore[override]  # awaitable twin of ClientApi.regress
                self, model: str, examples: Examples, *, context: Optional[codec.Features] = None,
                version: Optional[int] = None, label: Optional[str] = None, signature: Optional[str] = None,
                timeout: Optional[float] = None) -> np.ndarray: ...

        async def metadata(  # type: ignore[override]  # awaitable twin of ClientApi.metadata
                self, model: str, *, version: Optional[int] = None, label: Optional[str] = None,
                timeout: Optional[float] = None) -> ModelMetadata: ...

        async def status(  # type: ignore[override]  # awaitable twin of ClientApi.status
                self, model: str, *, version: Optional[int] = None, label: Optional[str] = None,
                timeout: Optional[float] = None) -> list[VersionStatus]: ...

        async def reload_config(  # type: ignore[override]  # awaitable twin of ClientApi.reload_config
                self, config: ModelServerConfigLike, *, timeout: Optional[float] = None) -> None: ...

    async def __aexit__(self, *exc: object) -> None:
        await self.close()
