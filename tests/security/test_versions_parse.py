"""Version directory names are parsed as TF Serving parses them: ``absl::SimpleAtoi`` into an int64."""
from __future__ import annotations

import logging

import pytest

from serving.model_repo import model_versions, parse_version
from serving.server.core.source import list_versions


@pytest.mark.parametrize("name, version", [
    ("1", 1), ("0002", 2), ("000", 0), (" 7 ", 7), ("+3", 3), ("-5", -5),
    ("9223372036854775807", 2**63 - 1), ("-9223372036854775808", -2**63), ("0" * 5000 + "12", 12),
])
def test_names_within_int64_are_versions(name, version):
    assert parse_version(name) == version


@pytest.mark.parametrize("name", ["99999999999999999999", "9223372036854775808", "-9223372036854775809",
                                  "1" * 5000, "1a", "", "+", "0x10", "\u0663", "1.0"])
def test_names_beyond_int64_or_not_decimal_are_not_versions(name):
    assert parse_version(name) is None


def test_the_source_ignores_a_directory_beyond_int64_and_warns_once_per_path(tmp_path, caplog):
    for name in ("1", "99999999999999999999", "tmp-staging"):
        (tmp_path / name).mkdir()
    warned: set[str] = set()
    with caplog.at_level(logging.WARNING, logger="serving.server.core.source"):
        for _ in range(3):
            assert list_versions(str(tmp_path), warned) == {1: "1"}
    messages = [r.getMessage() for r in caplog.records if "Ignoring version directory" in r.getMessage()]
    assert len(messages) == 1 and "99999999999999999999" in messages[0]


def test_the_repository_helper_takes_plain_numbers_within_int64(tmp_path):
    for name in ("1", "3", "99999999999999999999", "-2", " 4"):
        (tmp_path / name).mkdir()
    assert model_versions(tmp_path) == [1, 3]
