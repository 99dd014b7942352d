"""The file-system source: which directories are versions, and what each policy aspires."""
from __future__ import annotations

from google.protobuf import text_format
from tensorflow_serving.config import file_system_storage_path_source_pb2 as fs_pb2

from serving.server.core.source import ServableToMonitor, aspired_versions, list_versions


def _policy(text: str):
    policy = fs_pb2.FileSystemStoragePathSourceConfig.ServableVersionPolicy()
    return text_format.Parse(text, policy)


def _versions(text: str, on_disk=(1, 2, 3, 7)) -> list[int]:
    servable = ServableToMonitor("m", "/models/m", _policy(text) if text else None)
    return [v.version for v in aspired_versions(servable, {v: str(v) for v in on_disk})]


def test_only_numeric_directories_are_versions(tmp_path):
    for name in ("1", "0002", "10", ".tmp-11", "11.partial", "latest", "abc"):
        (tmp_path / name).mkdir()
    (tmp_path / "12").write_text("a file, not a version directory")
    assert list_versions(str(tmp_path)) == {1: "1", 2: "0002", 10: "10"}


def test_default_policy_aspires_the_single_latest_version():
    assert _versions("") == [7]


def test_latest_policy_aspires_the_n_highest_versions():
    assert _versions("latest { num_versions: 2 }") == [7, 3]
    assert _versions("latest { num_versions: 0 }") == [7]  # TF Serving: at least one


def test_all_policy_aspires_every_version():
    assert _versions("all {}") == [7, 3, 2, 1]


def test_specific_policy_aspires_only_listed_versions_present_on_disk(caplog):
    assert _versions("specific { versions: 2 versions: 9 }") == [2]
    assert "Version 9 of servable m" in caplog.text and "was not found" in caplog.text


def test_aspired_paths_join_the_base_path_and_the_child_name():
    servable = ServableToMonitor("m", "/models/m", None)
    assert [v.path for v in aspired_versions(servable, {5: "0005"})] == ["/models/m/0005"]
