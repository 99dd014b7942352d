"""The REST front-end's routes: TF Serving's ``/v1/models/...`` paths, parsed as ``http_rest_api_util`` does.

Routing is TF Serving's, not aiohttp's: a request whose path fully matches
``(?i)/v1/.*`` is dispatched (``http_rest_api_util.h``); POST must match the
predict/classify/regress regex and GET the status/metadata regex, otherwise
the answer is 400 "Malformed request: METHOD PATH". A model name or version
label whose %-decoded bytes are not UTF-8 is 400 ("Failed to decode model
name:", TF Serving's message; TF Serving itself passes such bytes on).
"""
from __future__ import annotations

import re
import urllib.parse
from dataclasses import dataclass
from typing import Optional

from serving import status
from serving.server.frontends.dataplane import ModelSpec

__all__ = ["RestRoute", "parse_route", "try_parse_route", "without_body", "DISPATCH_REGEX", "PREDICTION_API_REGEX",
           "MODEL_STATUS_API_REGEX", "ECHOED_CHARS"]

# http_rest_api_util.{h,cc}, matched in full like RE2::FullMatch. ASCII: RE2's \d is [0-9].
DISPATCH_REGEX = re.compile(r"(?i)/v1/.*", re.ASCII)
PREDICTION_API_REGEX = re.compile(
    r"(?i)/v1/models/([^/:]+)(?:(?:/versions/(\d+))|(?:/labels/([^/:]+)))?:(classify|regress|predict)", re.ASCII)
MODEL_STATUS_API_REGEX = re.compile(
    r"(?i)/v1/models(?:/([^/:]+))?(?:(?:/versions/(\d+))|(?:/labels/([^/:]+)))?(?:\/(metadata))?", re.ASCII)

_INT64_MAX = 2**63 - 1
_INT64_DIGITS = len(str(_INT64_MAX))
ECHOED_CHARS = 200   # the most of a request's text an error message repeats


@dataclass(frozen=True)
class RestRoute:
    """A parsed ``/v1/models`` path: the model, version or label, the verb or subresource."""

    model_name: str
    version: Optional[int] = None
    version_label: Optional[str] = None
    method: str = ""          # predict | classify | regress (POST), "" for GET
    subresource: str = ""     # "metadata" or ""

    def spec(self, signature_name: str = "") -> ModelSpec:
        return ModelSpec(self.model_name, self.version, self.version_label, signature_name)


def parse_route(http_method: str, path: str) -> RestRoute:
    """TF Serving's ``ParseModelInfo``; raises ``InvalidArgument`` as it does."""
    regex = {"POST": PREDICTION_API_REGEX, "GET": MODEL_STATUS_API_REGEX}.get(http_method)
    match = regex.fullmatch(path) if regex else None
    if match is None:
        raise status.InvalidArgument(f"Malformed request: {http_method} {path}")
    name, version_text, label, tail = match.groups()
    version = None
    if version_text:
        significant = version_text.lstrip("0")  # never int() of thousands of digits
        if len(significant) > _INT64_DIGITS or int(version_text) > _INT64_MAX:
            raise without_body(status.InvalidArgument(f"Failed to convert version: {version_text} to numeric."))
        version = int(version_text)
    # The regexes match case-insensitively, the dispatch compares case-sensitively (http_rest_api_handler.cc):
    # ":PREDICT" is a malformed request and "/METADATA" asks for the model's status.
    if http_method == "POST" and tail not in ("predict", "classify", "regress"):
        raise status.InvalidArgument(f"Malformed request: {http_method} {path}")
    return RestRoute(
        model_name=_decoded_segment(name or "", "model name"),
        version=version,
        version_label=_decoded_segment(label, "model version label") if label else None,
        method=tail if http_method == "POST" else "",
        subresource="metadata" if http_method == "GET" and tail == "metadata" else "")


def without_body(error: status.ServingError) -> status.ServingError:
    """Mark ``error`` as answered with its HTTP status and no body: TF Serving returns these before it
    writes an error document (``ParseModelInfo``'s failures, a CORS preflight without an Origin)."""
    error.empty_body = True  # type: ignore[attr-defined]  # a mark, read back with getattr by the reply
    return error


def _decoded_segment(segment: str, what: str) -> str:
    """A %-escaped path segment as text (``DecodeArg``); InvalidArgument when its bytes are not UTF-8."""
    raw = segment.encode("utf-8", errors="surrogateescape")  # aiohttp keeps undecodable bytes as surrogates
    try:
        return urllib.parse.unquote_to_bytes(raw).decode("utf-8")
    except UnicodeDecodeError:
        shown = raw[:ECHOED_CHARS].decode("ascii", errors="backslashreplace")
        raise without_body(status.InvalidArgument(
            f"Failed to decode {what}:{shown} (its %-decoded bytes are not UTF-8 text)")) from None


def try_parse_route(http_method: str, path: str) -> tuple[RestRoute, Optional[status.ServingError]]:
    """``parse_route``'s answer and None, or an empty route and the error (so a refused request is still counted)."""
    try:
        return parse_route(http_method, path), None
    except status.ServingError as exc:
        return RestRoute(""), exc
