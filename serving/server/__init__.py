"""The embedded TF Serving-compatible server (``python -m serving.server``).

Its folders are TF Serving's layers, each depending only on the ones listed
before it:

- ``core/``: model lifecycle (source, manager, harness, policy, labels,
  states, retries, model config checks); knows nothing of TensorFlow or wires.
- ``tensorflow/``: a SavedModel version as a servable (loader, warmup,
  Predict/Classify/Regress semantics).
- ``batching/``: ``BatchingParameters`` queues and scheduler, and the adapter
  that wraps a servable's run with them.
- ``frontends/``: the data plane and the thin gRPC and REST front-ends.
- at the root: ``flags``, ``metrics``, ``deadline``, ``request_capture``
  (sampled requests to capture files), the composition root ``server`` and
  ``main``.

Importing this package loads nothing heavy.
"""
__all__: list[str] = []
