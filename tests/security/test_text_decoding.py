"""Text that is not UTF-8 is refused where it enters, with TF Serving's words: JSON bodies and REST path segments."""
from __future__ import annotations

import pytest

from serving import codec, status
from serving.server.frontends.rest import parse_route


@pytest.mark.parametrize("body", [b'["\\ud800"]', b'{"\\udc00": 1}', b'["\\ud800\\u0041"]',
                                  b'[NaN, "\\ud800"]', b'{"a": [Infinity, {"\\udfff": 1}]}'])
def test_a_lone_surrogate_is_rapidjsons_surrogate_error(body):
    with pytest.raises(status.InvalidArgument, match="JSON Parse error: The surrogate pair in string is invalid"):
        codec.json_loads(body)


@pytest.mark.parametrize("body, value", [(b'["\\ud83d\\ude00"]', ["\U0001F600"]),
                                         (b'[NaN, "\\\\ud800"]', [float("nan"), "\\ud800"])])
def test_surrogate_pairs_and_escaped_backslashes_are_text(body, value):
    parsed = codec.json_loads(body)
    assert repr(parsed) == repr(value)


@pytest.mark.parametrize("body", [b'["\xff"]', b'[NaN, "\xff"]'])
def test_bytes_that_are_not_utf8_are_an_encoding_error(body):
    with pytest.raises(status.InvalidArgument, match=r"JSON Parse error: Invalid encoding in string\. at offset"):
        codec.json_loads(body)


@pytest.mark.parametrize("path, message", [
    ("/v1/models/ti%ffny:predict", "Failed to decode model name:ti%ffny"),
    ("/v1/models/ti%ED%A0%80ny:predict", "Failed to decode model name:ti%ED%A0%80ny"),
    ("/v1/models/tiny/labels/%ff:predict", "Failed to decode model version label:%ff"),
    ("/v1/models/ti\udcffny:predict", "Failed to decode model name:ti\\xffny"),
])
def test_a_path_segment_whose_bytes_are_not_utf8_is_invalid_argument(path, message):
    with pytest.raises(status.InvalidArgument) as error:
        parse_route("POST", path)
    assert error.value.details.startswith(message)


def test_percent_escapes_decode_to_utf8_and_bad_escapes_stay_as_curl_leaves_them():
    assert parse_route("POST", "/v1/models/ti%C3%A9ny/labels/%zz:predict").model_name == "tiény"
    assert parse_route("POST", "/v1/models/tiny/labels/%zz:predict").version_label == "%zz"
