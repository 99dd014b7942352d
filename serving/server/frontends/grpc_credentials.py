"""The gRPC port's credentials: plaintext, or TLS (and mutual TLS) from TF Serving's ``SSLConfig``.

Every listener (TCP and UNIX socket) uses the same credentials, as
``server.cc`` does: plaintext, or those ``server_credentials`` builds from an
``SSLConfig`` (``BuildServerCredentialsFromSSLConfigFile``): TLS with
``server_key``/``server_cert``, and with ``client_verify`` mutual TLS that
requires a client certificate signed by ``custom_ca``.
"""
from __future__ import annotations

import grpc
from google.protobuf import message

from serving import status

__all__ = ["server_credentials"]


def server_credentials(ssl_config: message.Message) -> grpc.ServerCredentials:
    """TLS credentials from a ``tensorflow.serving.SSLConfig``; InvalidArgument for an unusable one.

    ``client_verify`` requests and requires a client certificate and verifies it
    against ``custom_ca`` (``GRPC_SSL_REQUEST_AND_REQUIRE_CLIENT_CERTIFICATE_AND_VERIFY``);
    without it no client certificate is requested. A key that is not the
    certificate's is found when the port is bound.
    """
    for name in ("server_key", "server_cert"):
        if "-----BEGIN " not in getattr(ssl_config, name):
            raise status.InvalidArgument(f"SSLConfig.{name} must hold a PEM {name.split('_')[1]} (the text itself, "
                                         f"not a file name)")
    if ssl_config.client_verify and "-----BEGIN " not in ssl_config.custom_ca:
        raise status.InvalidArgument("SSLConfig.client_verify needs custom_ca: the PEM CA certificates that "
                                     "sign client certificates")
    return grpc.ssl_server_credentials(
        [(ssl_config.server_key.encode(), ssl_config.server_cert.encode())],
        root_certificates=ssl_config.custom_ca.encode() or None,
        require_client_auth=ssl_config.client_verify)
