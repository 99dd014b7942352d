"""Who refused a request: the gateway's limiter, or the server (and the path to it).

Through the compose gateway, each client (an API key or a certificate) has a
rate and a concurrency limit (``GATEWAY_RATE``, ``GATEWAY_CONN_PER_IP``; the
``loadtest`` credential has its own, ``GATEWAY_LOADTEST_RATE`` and
``GATEWAY_LOADTEST_CONN``). A load over the limit measures the limiter, not
the server: the load commands count its refusals (REST 429 / gRPC
``RESOURCE_EXHAUSTED`` with the gateway's message, ``serving.stack.endpoint``)
as the failure class ``gateway_limited``, apart from every other failure
(``server``: the server's own refusals, timeouts, broken connections), and say
so in one line (:func:`limiter_line`).
"""
from __future__ import annotations

from typing import Mapping, Optional

from serving.stack.endpoint import is_gateway_refusal

__all__ = ["GATEWAY_LIMITED", "SERVER", "failure_class", "failures_by_class", "limiter_line"]

GATEWAY_LIMITED, SERVER = "gateway_limited", "server"


def failure_class(error: Optional[str]) -> str:
    """``gateway_limited`` for the gateway limiter's refusal (its message in ``error``), else ``server``."""
    return GATEWAY_LIMITED if is_gateway_refusal(error) else SERVER


def failures_by_class(failures: Mapping[str, int]) -> dict[str, int]:
    """Failure counts by error text (locust's error keys, a sweep's ``kind: details``) summed by class."""
    classes = {GATEWAY_LIMITED: 0, SERVER: 0}
    for error, count in failures.items():
        classes[failure_class(error)] += int(count)
    return classes


def limiter_line(limited: int, requests: int, role: str = "") -> Optional[str]:
    """The line a load command prints when the gateway limited any request, else None.

    ``role`` is the credential's (``loadtest`` has limits of its own: ``GATEWAY_LOADTEST_*``).
    """
    if not limited or not requests:
        return None
    share = f"the gateway limited {100.0 * limited / requests:.1f} % of requests"
    if role == "loadtest":
        return (f"{share}: this measured GATEWAY_LOADTEST_RATE, the loadtest credential's limit "
                "(raise GATEWAY_LOADTEST_RATE or GATEWAY_LOADTEST_CONN in .env)")
    return f"{share}: this measured GATEWAY_RATE (use the loadtest credential, or raise GATEWAY_LOADTEST_RATE)"
