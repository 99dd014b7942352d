"""The REST routes are TF Serving's regexes (http_rest_api_util.cc), matched in full, case-insensitively."""
from __future__ import annotations

import pytest

from serving import status
from serving.server.frontends.rest import (
    DISPATCH_REGEX,
    MODEL_STATUS_API_REGEX,
    PREDICTION_API_REGEX,
    RestRoute,
    parse_route,
)

# The regexes exactly as TF Serving 2.17.1 spells them (kPredictionApiGegex, kModelStatusApiRegex).
TF_PREDICTION = r"(?i)/v1/models/([^/:]+)(?:(?:/versions/(\d+))|(?:/labels/([^/:]+)))?:(classify|regress|predict)"
TF_STATUS = r"(?i)/v1/models(?:/([^/:]+))?(?:(?:/versions/(\d+))|(?:/labels/([^/:]+)))?(?:\/(metadata))?"


def test_regexes_are_tf_servings_own():
    assert PREDICTION_API_REGEX.pattern == TF_PREDICTION
    assert MODEL_STATUS_API_REGEX.pattern == TF_STATUS
    assert DISPATCH_REGEX.pattern == r"(?i)/v1/.*"


@pytest.mark.parametrize("path, route", [
    ("/v1/models/digits:predict", RestRoute("digits", method="predict")),
    ("/v1/models/digits/versions/3:classify", RestRoute("digits", version=3, method="classify")),
    ("/v1/models/digits/labels/stable:regress", RestRoute("digits", version_label="stable", method="regress")),
    ("/V1/MODELS/digits/VERSIONS/2:predict", RestRoute("digits", version=2, method="predict")),
    ("/v1/models/my%20model:predict", RestRoute("my model", method="predict")),
])
def test_post_routes(path, route):
    assert parse_route("POST", path) == route


@pytest.mark.parametrize("path, route", [
    ("/v1/models/digits", RestRoute("digits")),
    ("/v1/models/digits/versions/1", RestRoute("digits", version=1)),
    ("/v1/models/digits/labels/canary", RestRoute("digits", version_label="canary")),
    ("/v1/models/digits/metadata", RestRoute("digits", subresource="metadata")),
    ("/v1/models/digits/versions/1/metadata", RestRoute("digits", version=1, subresource="metadata")),
    # The regex matches "METADATA"; the handler compares "metadata" case-sensitively: a status request.
    ("/v1/models/digits/labels/canary/METADATA", RestRoute("digits", version_label="canary")),
    ("/v1/models", RestRoute("")),
])
def test_get_routes(path, route):
    assert parse_route("GET", path) == route


@pytest.mark.parametrize("method, path", [
    ("GET", "/v1/models/digits:predict"),
    ("POST", "/v1/models/digits"),
    ("POST", "/v1/models/digits:explain"),
    ("POST", "/v1/models/digits:PREDICT"),         # the verb is compared case-sensitively
    ("POST", "/v1/models/digits:predict?x=1"),     # the query string is part of the matched path
    ("POST", "/v1/models/digits/versions/x:predict"),
    ("POST", "/v1/models/digits/versions/1/labels/a:predict"),
    ("GET", "/v1/models/digits/versions/1/labels/a"),
    ("GET", "/v1/models/digits/status"),
    ("PUT", "/v1/models/digits"),
    ("DELETE", "/v1/models/digits:predict"),
    ("POST", "/v1/models/digits/versions/١:predict"),  # RE2's \d is ASCII only
])
def test_anything_else_is_malformed_with_tf_servings_message(method, path):
    with pytest.raises(status.InvalidArgument) as caught:
        parse_route(method, path)
    assert caught.value.details == f"Malformed request: {method} {path}"


def test_version_beyond_int64_is_refused_as_tf_serving_does():
    with pytest.raises(status.InvalidArgument, match="Failed to convert version: 99999999999999999999 to numeric."):
        parse_route("POST", "/v1/models/m/versions/99999999999999999999:predict")


def test_dispatch_regex_needs_the_v1_prefix():
    assert DISPATCH_REGEX.fullmatch("/v1/anything")
    assert DISPATCH_REGEX.fullmatch("/V1/x")
    assert not DISPATCH_REGEX.fullmatch("/v2/models/x")
    assert not DISPATCH_REGEX.fullmatch("/monitoring/prometheus/metrics")
