"""What the gRPC port lets one client hold: message sizes, connections, streams per connection, read time.

Messages: the server sends messages up to int32 max (``server.cc``
``SetMaxMessageSize``, ``MAX_MESSAGE_LENGTH``). grpc core applies
``grpc.max_receive_message_length`` to a message once inflated from
``grpc-encoding: gzip`` too (it refuses a bomb with RESOURCE_EXHAUSTED
"Decompressed message larger than max"), so decompression is capped by the
receive limit, ``max_receive_message_bytes``:
``--grpc_max_receive_message_bytes``, by default REST's body limit (64 MiB;
TF Serving's is the int32 max), or the per-request memory budget if less.

TF Serving sets none of these (``server.cc`` passes only the message sizes and
``--grpc_channel_arguments``); they are the embedded server's own flags
(``serving.server.flags``), on the same footing as the REST port's
(``rest_limits``), and all of them are gRPC core's channel arguments:

- ``max_connections`` (``--grpc_max_connections``): open connections at most,
  ``grpc.max_allowed_incoming_connections`` (core's connection quota: a
  connection over it is closed as soon as it is accepted, before any
  handshake). Capped, as REST's cap is, at a quarter of ``RLIMIT_NOFILE``
  (``serving.server.open_file_limit``).
- ``read_timeout_seconds`` (``--grpc_read_timeout_seconds``, REST's 30 s):
  a connection must finish its HTTP/2 (and TLS) handshake within it
  (``grpc.server_handshake_timeout_ms``); one without calls for that long
  gets GOAWAY and is closed (``grpc.max_connection_idle_ms``); a call's
  request message must arrive within it (``grpc_admission``).
- ``max_concurrent_streams`` (``--grpc_max_concurrent_streams``, twice the
  admission bound by default: 512): open calls per connection, HTTP/2's
  SETTINGS_MAX_CONCURRENT_STREAMS (``grpc.max_concurrent_streams``); gRPC
  clients queue calls past it, others get RST_STREAM. Above the admission
  bound so that one channel's excess calls are refused by admission at once
  (RESOURCE_EXHAUSTED) rather than queued in the client; twice it, because
  the server counts a stream until grpcio has released the call, so a client
  that fills the limit by its own count gets REFUSED_STREAM (UNAVAILABLE).
  nginx's ``http2_max_concurrent_streams`` default, 128, refused calls
  (REFUSED_STREAM) in an overload on one channel. A stalled stream (HEADERS,
  no message) holds server memory until the read timeout ends it
  (measured: docs/operations.md).

One more is not a flag: the calls that have reached the server but that
grpcio has not yet taken (its polling thread takes them one at a time, and
under CPU overload it falls behind). gRPC core keeps them in a pending queue
and, past ``grpc.server.max_pending_requests`` (core's default 1000) and up
to ``grpc.server.max_pending_requests_hard_limit`` (3000), drops new ones at
random; a dropped call is killed as a zombie and its client gets CANCELLED
(gRPC core's "cap size of pending request queue" rule); past the CPU-bound
saturation many calls were CANCELLED that way (docs/operations.md). Both are set to ``PENDING_CALLS`` (16384) here: the
queue empties as grpcio takes the calls and admission refuses them at once;
a backlog past it is core's, and still gets CANCELLED.

Keepalive pings are policed by core's defaults (a client may ping at most
every 5 minutes without calls; a third bad ping gets GOAWAY). Connection age
(``grpc.max_connection_age_ms``) is not bounded by default: it can be set
through ``--grpc_channel_arguments``, which override these.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional, Sequence, Union

from serving.server.open_file_limit import connection_cap
from serving.server.flags import (
    DEFAULT_GRPC_MAX_CONCURRENT_STREAMS,
    DEFAULT_GRPC_MAX_CONNECTIONS,
    DEFAULT_GRPC_READ_TIMEOUT_SECONDS,
)

__all__ = ["GrpcConnectionLimits", "PENDING_CALLS", "MAX_MESSAGE_LENGTH", "ChannelArgument",
           "parse_channel_arguments", "server_options"]

PENDING_CALLS = 16384   # calls gRPC core may hold before grpcio takes them (core: 1000, at random to 3000)
MAX_MESSAGE_LENGTH = 2**31 - 1

ChannelArgument = tuple[str, Union[int, str]]


def parse_channel_arguments(text: str) -> list[ChannelArgument]:
    """``--grpc_channel_arguments``: comma-separated ``key=value``; ints passed as ints."""
    arguments: list[ChannelArgument] = []
    for item in filter(None, (part.strip() for part in text.split(","))):
        key, _, value = item.partition("=")
        try:
            arguments.append((key.strip(), int(value)))
        except ValueError:
            arguments.append((key.strip(), value.strip()))
    return arguments


@dataclass(frozen=True)
class GrpcConnectionLimits:
    """Bounds of the gRPC port; defaults are the embedded server flags' defaults; 0 disables one."""

    max_connections: int = DEFAULT_GRPC_MAX_CONNECTIONS
    max_concurrent_streams: int = DEFAULT_GRPC_MAX_CONCURRENT_STREAMS
    read_timeout_seconds: float = DEFAULT_GRPC_READ_TIMEOUT_SECONDS

    def channel_arguments(self) -> list[tuple[str, Union[int, str]]]:
        """gRPC core's server arguments for these bounds (the connection cap checked against RLIMIT_NOFILE)."""
        arguments: list[tuple[str, Union[int, str]]] = [("grpc.server.max_pending_requests", PENDING_CALLS),
                                                         ("grpc.server.max_pending_requests_hard_limit", PENDING_CALLS)]
        if self.max_connections > 0:
            arguments.append(("grpc.max_allowed_incoming_connections",
                              connection_cap(self.max_connections, "--grpc_max_connections")))
        if self.max_concurrent_streams > 0:
            arguments.append(("grpc.max_concurrent_streams", self.max_concurrent_streams))
        timeout_ms = self.read_timeout_ms
        if timeout_ms is not None:
            arguments += [("grpc.server_handshake_timeout_ms", timeout_ms), ("grpc.max_connection_idle_ms", timeout_ms)]
        return arguments

    @property
    def read_timeout_ms(self) -> Optional[int]:
        return max(1, int(self.read_timeout_seconds * 1000)) if self.read_timeout_seconds > 0 else None


def server_options(limits: GrpcConnectionLimits, max_receive_message_bytes: Optional[int],
                   channel_arguments: Sequence[ChannelArgument] = ()) -> list[ChannelArgument]:
    """``grpc.server``'s options: message sizes, ``limits``, then ``--grpc_channel_arguments`` (which override)."""
    return [("grpc.max_send_message_length", MAX_MESSAGE_LENGTH),
            ("grpc.max_receive_message_length", min(MAX_MESSAGE_LENGTH, max_receive_message_bytes or MAX_MESSAGE_LENGTH)),
            ("grpc.so_reuseport", 0), *limits.channel_arguments(), *channel_arguments]
