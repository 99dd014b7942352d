"""The manifest reads back with numpy only and keeps every array exact."""
from __future__ import annotations

import json
import subprocess
import sys

import numpy as np

from exporter.manifest import Golden, Manifest, load_manifest, write_manifest
from serving.checkout import REPO_ROOT
from serving.codec import PREDICT_METHOD_NAME, Signature, TensorSpec


def test_load_manifest_does_not_import_tensorflow(model_repo):
    code = ("import sys; from exporter.manifest import load_manifest; "
            f"m = load_manifest({str(model_repo / 'text' / '1')!r}); "
            "assert m.sample_inputs('serving_default', 3)['text'].shape == (3,); "
            "print(sorted(k for k in sys.modules if k.split('.')[0] in ('tensorflow', 'keras')))")
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO_ROOT, capture_output=True,
                         text=True, check=True, timeout=120).stdout
    assert out.strip() == "[]"


SIGNATURES = {"serving_default": Signature(
    "serving_default", PREDICT_METHOD_NAME, {"x": TensorSpec("x", np.dtype(object), (None,), "serving_default_x:0")},
    {"y": TensorSpec("y", np.dtype(np.float32), (None, 2), "StatefulPartitionedCall:0")})}


def _manifest(golden: Golden) -> Manifest:
    return Manifest(model="m", published_name="m", variant="fp32", tensorflow_version="2.17.1",
                    source_hash="abc", created="2026-01-01T00:00:00+00:00", signatures=SIGNATURES,
                    golden={"serving_default": golden}, accuracy=0.5)


def test_string_arrays_round_trip_exactly_including_nul_bytes_without_pickle(tmp_path):
    strings = np.empty((3,), dtype=object)
    strings[:] = [b"\x0a\x00", b"", "caf\u00e9".encode()]
    floats = np.arange(6, dtype=np.float32).reshape(3, 2)
    write_manifest(tmp_path, _manifest(Golden("serving_default", {"x": strings}, {"y": floats})))
    with np.load(tmp_path / "manifest.npz", allow_pickle=False) as npz:
        assert all(npz[k].dtype != object for k in npz.files)
    loaded = load_manifest(tmp_path)
    assert list(loaded.golden_inputs()["x"]) == [b"\x0a\x00", b"", "caf\u00e9".encode()]
    np.testing.assert_array_equal(loaded.golden_outputs()["y"], floats)
    assert loaded.accuracy == 0.5 and loaded.version is None  # tmp_path is not a numeric dir
    assert json.loads((tmp_path / "manifest.json").read_text())["signatures"]["serving_default"]["inputs"]["x"] == {
        "dtype": "DT_STRING", "shape": [-1], "tensor_name": "serving_default_x:0"}
    assert loaded.signatures == SIGNATURES


def test_sample_inputs_cycle_the_golden_rows_from_an_offset(model_repo):
    manifest = load_manifest(model_repo / "ranker" / "1")
    golden = manifest.golden_inputs()
    sample = manifest.sample_inputs("serving_default", batch_size=20, offset=5)
    rows = (np.arange(20) + 5) % len(golden["user_id"])
    for key in ("user_id", "item_id", "features"):
        np.testing.assert_array_equal(sample[key], golden[key][rows])
    assert sample["user_id"].dtype == np.int64 and sample["features"].dtype == np.float32


def test_manifest_exposes_version_from_its_directory_and_numpy_dtypes(model_repo):
    manifest = load_manifest(model_repo / "text" / "1")
    assert manifest.version == 1
    assert manifest.signatures["serving_default"].inputs["text"].dtype == np.dtype(object)


def test_golden_source_and_source_round_trip_and_default_to_the_zoo_for_older_manifests(tmp_path):
    golden = Golden("serving_default", {"x": np.array([b"a"], dtype=object)}, {"y": np.zeros((1, 2), np.float32)})
    manifest = _manifest(golden)
    write_manifest(tmp_path, Manifest(**{**manifest.__dict__, "golden_source": "synthetic",
                                         "source": "SavedModel /tmp/m"}))
    loaded = load_manifest(tmp_path)
    assert (loaded.golden_source, loaded.source) == ("synthetic", "SavedModel /tmp/m")

    doc = json.loads((tmp_path / "manifest.json").read_text())
    del doc["golden_source"], doc["source"]   # as written before user models could be exported
    (tmp_path / "manifest.json").write_text(json.dumps(doc))
    older = load_manifest(tmp_path)
    assert (older.golden_source, older.source) == ("zoo", "zoo")


def test_zoo_manifests_say_their_goldens_are_the_zoos(model_repo):
    manifest = load_manifest(model_repo / "digits" / "1")
    assert (manifest.golden_source, manifest.source) == ("zoo", "zoo")
