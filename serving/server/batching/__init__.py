"""Server-side request batching (TF Serving's ``batching/``), one abstraction per module.

- ``options``: ``BatchingOptions``, TF Serving's ``BatchingParameters`` as frozen typed data;
- ``batch``: a batch of tasks: merging inputs, padding, one run, splitting outputs back;
- ``queue``: ``BatchQueue``, one queue per model version and signature, with TF's queue rules;
- ``scheduler``: ``BatchScheduler``, TF's ``SharedBatchScheduler`` (one thread pool for all queues);
- ``adapter``: ``BatchingRunWrapper``, the manager's ``run_wrapper`` (TF Serving's batching session).

Dependencies go one way: options ← batch ← queue ← scheduler; the adapter sees
the scheduler only through the ``QueueFactory``/``TaskQueue`` protocols.
"""
from serving.server.batching.adapter import BatchingRunWrapper, QueueFactory, TaskQueue
from serving.server.batching.batch import BatchFn, BatchingMetrics, TaskFuture
from serving.server.batching.options import BatchingOptions
from serving.server.batching.queue import QUEUE_FULL_MESSAGE, BatchQueue
from serving.server.batching.scheduler import BatchScheduler

__all__ = [
    "BatchFn",
    "BatchingMetrics",
    "BatchingOptions",
    "BatchingRunWrapper",
    "BatchQueue",
    "BatchScheduler",
    "QUEUE_FULL_MESSAGE",
    "QueueFactory",
    "TaskFuture",
    "TaskQueue",
]
