"""The tfs-stack client SDK: TF Serving over gRPC or REST, sync or asyncio.

``GrpcClient(target)``, ``RestClient(base_url)``, ``AsyncGrpcClient`` and
``AsyncRestClient`` share one API (``predict``, ``classify``, ``regress``,
``metadata``, ``status``, ``reload_config``) and one exception tree
(``serving.client.errors``), and take the same TLS and credential arguments
(``root_certificates``, ``client_cert``/``client_key``, ``server_name``,
``api_key``, ``bearer_token``, ``insecure``); command-line tools spell them
once with ``add_connection_arguments`` / ``connection_from_args``. Importing this package loads neither TensorFlow
nor ``tensorflow_serving``: the wire schema is declared in ``serving.wire``.
"""
from serving.client import errors
from serving.client._grpc import GrpcClient
from serving.client._grpc_aio import AsyncGrpcClient
from serving.client._rest import RestClient
from serving.client._rest_aio import AsyncRestClient
from serving.client._types import ModelMetadata, Signature, TensorSpec, VersionStatus
from serving.client.connection import Connection, add_connection_arguments, connection_from_args
from serving.client.errors import ServingError
from serving.client.retry import NO_RETRY, RetryPolicy

__all__ = [
    "GrpcClient",
    "RestClient",
    "AsyncGrpcClient",
    "AsyncRestClient",
    "RetryPolicy",
    "NO_RETRY",
    "ModelMetadata",
    "Signature",
    "TensorSpec",
    "VersionStatus",
    "ServingError",
    "errors",
    "Connection",
    "add_connection_arguments",
    "connection_from_args",
]
