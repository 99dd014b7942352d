"""How a tool reaches the stack ``make up`` started, and how the gateway in front of it says no.

- :func:`stack_endpoint`: the gRPC target, REST URL and connection (TLS and a
  credential) of the running stack, from ``<work dir>/stack.json`` and, on
  compose, the gateway's secrets that ``make certs`` wrote (``gateway/secrets/``,
  or the directory ``stack.json`` names): the CA ``ca.crt`` and the API key
  ``<role>.api-key``. Tools call it when they were given no address or no
  credential: ``loadtest`` and ``serving.rollout analyze`` ask for the role
  ``loadtest`` (a credential with its own, high, rate and concurrency limits),
  which falls back to ``client`` where ``make certs`` issued none. The
  embedded stack has no gateway: its endpoint has no TLS and no key.
- :func:`is_gateway_refusal`: the compose gateway's limiter refuses a client
  over its rate or concurrency limit with REST 429 and the JSON body
  ``{"error": "rate or concurrency limit of this client exceeded"}``, and over
  gRPC with ``RESOURCE_EXHAUSTED`` and that message. TF Serving itself also
  answers ``RESOURCE_EXHAUSTED`` (a full batching queue, a message over the
  size limit), so the code alone does not say who refused: the message does.
  Load tests and the canary analysis count these apart from the server's own
  refusals (they measure the limiter, not the server).
"""
from __future__ import annotations

import argparse
import dataclasses
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

from serving.checkout import REPO_ROOT
from serving.client import Connection, connection_from_args
from serving.config.served_config import STATE_FILE, read_state

__all__ = ["GATEWAY_LIMIT_MESSAGE", "StackEndpoint", "is_gateway_refusal", "stack_endpoint"]

# The gateway's words for its limiter's refusal (gateway/routes.conf.template, REST body and grpc-message).
GATEWAY_LIMIT_MESSAGE = "rate or concurrency limit of this client exceeded"
FALLBACK_ROLE = "client"


@dataclass(frozen=True)
class StackEndpoint:
    """Where the running stack answers and how to call it. ``role`` is the credential used ("" for none)."""

    grpc: str
    rest: str
    connection: Connection
    backend: str
    role: str = ""

    def address(self, protocol: str) -> str:
        """The gRPC target (``grpc``) or the REST URL (``rest``)."""
        return self.grpc if protocol == "grpc" else self.rest


def stack_endpoint(checkout_root: Optional[Path] = None, role: str = FALLBACK_ROLE, *,
                   work_dir: Optional[Path] = None) -> Optional[StackEndpoint]:
    """The endpoint of the stack recorded in ``<work dir>/stack.json`` (default ``<checkout>/.cache/serving``),
    or None when no stack is recorded there.

    The key is ``secrets/<role>.api-key``, else ``secrets/client.api-key``; ValueError (never showing the
    key) when the file holds a malformed key.
    """
    root = Path(checkout_root) if checkout_root is not None else REPO_ROOT
    state = read_state(Path(work_dir or root / ".cache" / "serving") / STATE_FILE)
    if state is None:
        return None
    if state.root_certificates is None:  # no gateway in front (the embedded stack): plaintext, no key
        return StackEndpoint(state.grpc, state.rest, Connection(), state.backend)
    secrets = state.admin_key_file.parent if state.admin_key_file else root / "gateway" / "secrets"
    chosen = next((name for name in dict.fromkeys((role, FALLBACK_ROLE)) if (secrets / f"{name}.api-key").is_file()),
                  "")
    connection = (connection_from_args(argparse.Namespace(api_key_file=secrets / f"{chosen}.api-key"), environ={})
                  if chosen else Connection())
    return StackEndpoint(state.grpc, state.rest,
                         dataclasses.replace(connection, root_certificates=Path(state.root_certificates)),
                         state.backend, chosen)


def is_gateway_refusal(message: Optional[str]) -> bool:
    """True when ``message`` (an error's text: a ``ServingError``, locust's error key) is the gateway limiter's."""
    return bool(message) and GATEWAY_LIMIT_MESSAGE in str(message)
