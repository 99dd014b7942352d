"""How a tool reaches the stack ``make up`` started, and how the gateway in front of it says no.

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

from typing import Optional

__all__ = ["GATEWAY_LIMIT_MESSAGE", "is_gateway_refusal"]

# The gateway's words for its limiter's refusal (gateway/routes.conf.template, REST body and grpc-message).
GATEWAY_LIMIT_MESSAGE = "rate or concurrency limit of this client exceeded"


def is_gateway_refusal(message: Optional[str]) -> bool:
    """True when ``message`` (an error's text: a ``ServingError``, locust's error key) is the gateway limiter's."""
    return bool(message) and GATEWAY_LIMIT_MESSAGE in str(message)
