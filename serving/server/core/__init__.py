"""Model lifecycle (TF Serving's ``core/``): source, manager, policy, labels.

Knows nothing of TensorFlow beyond a loader it is given, nor of gRPC or HTTP.
"""
__all__: list[str] = []
