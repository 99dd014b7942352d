"""The embedded TF Serving-compatible server (``python -m serving.server``).

Submodules: ``flags`` (TF Serving's command line), ``server`` (composition
root ``ModelServer``), ``dataplane`` (request semantics shared by the
front-ends), ``grpc_frontend``, ``rest_frontend``, ``batching_adapter``, and
the lifecycle, metrics and batching modules. Importing this package loads
nothing heavy.
"""
__all__: list[str] = []
