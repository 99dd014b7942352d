"""Server-side batching as the manager's ``run_wrapper`` (TF Serving's batching session).

TF Serving wraps each loaded session with a batching session: one queue per
(model version, signature, input and output tensor set) on one shared
``SharedBatchScheduler`` pool (``batching/batching_session.cc``). Here
``BatchingRunWrapper(scheduler)`` is given to the manager's ``LoaderOptions``;
the loader calls it right after a version loads, before warmup. Queues are
created on first use and closed when the servable closes.

A full queue raises ``UNAVAILABLE`` at once; a request larger than the
largest batch is refused with ``INVALID_ARGUMENT`` unless the parameters
enable large-batch splitting (both done by the ``BatchQueue``). While a request
waits in a queue its deadline (``serving.server.deadline.remaining_seconds``) is honoured.
"""
from __future__ import annotations

import concurrent.futures
import logging
import threading
from typing import Any, Mapping, Sequence

import numpy as np

from serving import status
from serving.server.deadline import remaining_seconds

__all__ = ["BatchingRunWrapper"]

logger = logging.getLogger(__name__)

RunFn = Any  # serving.server.tensorflow.servable.RunFn


class BatchingRunWrapper:
    """``run_wrapper(servable, run) -> run`` that sends every run through a batch queue.

    Thread-safe: queues are created under a lock; ``BatchQueue.submit`` is
    thread-safe by contract.
    """

    def __init__(self, scheduler: Any) -> None:
        self._scheduler = scheduler

    def __call__(self, servable: Any, run: RunFn) -> RunFn:
        queues: dict[tuple, Any] = {}
        lock = threading.Lock()
        closed = False

        def queue_for(signature_name: str, input_keys: tuple, output_keys: tuple) -> Any:
            nonlocal closed
            key = (signature_name, input_keys, output_keys)
            with lock:
                if closed:
                    raise status.Unavailable(
                        f"Servable {servable.name} version {servable.version} has been unloaded")
                if key not in queues:
                    queues[key] = self._scheduler.queue(
                        lambda inputs: run(signature_name, inputs, list(output_keys)),
                        f"{servable.name}/{servable.version}/{signature_name}")
                return queues[key]

        def close_queues() -> None:
            nonlocal closed
            with lock:
                closed = True
                pending = list(queues.values())
                queues.clear()
            for queue in pending:
                queue.close()

        def batched_run(signature_name: str, inputs: Mapping[str, np.ndarray],
                        output_keys: Sequence[str]) -> dict[str, np.ndarray]:
            queue = queue_for(signature_name, tuple(sorted(inputs)), tuple(output_keys))
            future = queue.submit(dict(inputs))
            return _result(future)

        servable.add_close_callback(close_queues)
        return batched_run


def _result(future: concurrent.futures.Future) -> dict[str, np.ndarray]:
    """The batch's answer for this task, within the request's deadline."""
    timeout = remaining_seconds()
    if timeout is not None and timeout <= 0:
        future.cancel()
        raise status.DeadlineExceeded("Deadline Exceeded")
    try:
        return future.result(timeout=timeout)
    except concurrent.futures.TimeoutError:
        future.cancel()
        raise status.DeadlineExceeded("Deadline Exceeded") from None
