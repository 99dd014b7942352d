"""The lifecycle modules' public API is pinned: changing it must be deliberate."""
from __future__ import annotations

import importlib

import pytest

PUBLIC = {
    "tensorflow.servable": {"TensorSpec", "Signature", "Servable", "RunFn", "RunWrapper", "tf_error_message"},
    "tensorflow.loader": {"LoaderOptions", "LoadMetrics", "SavedModelLoader", "SavedModelVersionLoader"},
    "core.loader": {"Loader", "LoaderFactory"},
    "core.source": {"ServableToMonitor", "AspiredVersion", "FileSystemSource", "IsQuarantined",
                    "aspired_versions", "list_versions"},
    "core.quarantine": {"FirstRunGuarded", "QuarantinedVersion", "QuarantiningLoaderFactory", "VersionQuarantine",
                        "VersionQuarantined", "clear_command", "process_start_ticks"},
    "core.manager": {"ServableManager", "ServableHandle", "VersionEvents"},
    "tensorflow.warmup": {"WARMUP_REQUESTS_FILE", "MAX_NUM_RECORDS", "WarmupMetrics", "warmup_path", "run_saved_model_warmup"},
    "tensorflow.inference": {"DEFAULT_SIGNATURE", "CLASSIFY_INPUTS", "CLASSIFY_OUTPUT_CLASSES",
                  "CLASSIFY_OUTPUT_SCORES", "REGRESS_INPUTS", "REGRESS_OUTPUTS", "Class", "Classifications",
                  "ClassificationResult", "Regression", "RegressionResult", "rest_signature",
                  "predict", "classify", "regress", "serialized_examples"},
    "core.policy": {"HarnessState", "VersionSnapshot", "Action", "next_action"},
    "core.harness": {"VersionHarness"},
    "core.labels": {"LabelMap", "build_label_map"},
    "core.model_config": {"TENSORFLOW_PLATFORM", "model_platform", "validate_model_config_list"},
    "core.retrier": {"retry"},
    "core.state_monitor": {"ServableStateMonitor"},
}


@pytest.mark.parametrize("module", sorted(PUBLIC))
def test_all_is_pinned_and_every_name_exists(module):
    mod = importlib.import_module(f"serving.server.{module}")
    assert set(mod.__all__) == PUBLIC[module]
    assert all(hasattr(mod, name) for name in mod.__all__)


def test_version_states_equal_the_get_model_status_proto_numbers():
    from tensorflow_serving.apis import get_model_status_pb2

    from serving.codec import VersionState

    proto = get_model_status_pb2.ModelVersionStatus.State
    assert {s.name: s.number for s in VersionState} == {n: proto.Value(n) for n in proto.keys()}
    assert all(VersionState.from_number(proto.Value(n)) is VersionState[n] for n in proto.keys())


def test_importing_the_lifecycle_does_not_import_tensorflow():
    import subprocess
    import sys

    code = ("import sys; import serving.server.core.manager, serving.server.tensorflow.inference; "
            "print('tensorflow' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"
