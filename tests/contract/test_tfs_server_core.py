"""TF Serving's ``model_servers/server_core_test.cc`` (2.17.1), ported against the server's core.

``ServerCore`` here is ``ServableManager`` (config, labels, version
lifecycle) with the SavedModel loader, in process (no wire is involved in
these tests); the models are TF Serving's rebuilt test models
(``tests.support.half_plus_two``): ``saved_model_half_plus_two_cpu`` (123) and
``saved_model_half_plus_two_2_versions`` (123, 124). TF Serving's fake
platform is the TensorFlow one here (the only platform this server loads).
"""
from __future__ import annotations

from pathlib import Path
from typing import Iterator

import pytest
from tensorflow_serving.config import model_server_config_pb2

from serving import status
from serving.server.core.manager import ServableManager
from serving.server.tensorflow.loader import LoaderOptions, SavedModelLoader
from tests.support.half_plus_two import half_plus_two_repo
from tests.support.models import corrupt_version

MODEL = "test_model"


@pytest.fixture(scope="module")
def testdata(tmp_path_factory) -> Path:
    return half_plus_two_repo(tmp_path_factory.mktemp("tfs-testdata"))


@pytest.fixture
def make_core() -> Iterator:
    cores: list[ServableManager] = []

    def make(**options) -> ServableManager:
        options.setdefault("allow_version_labels", True)
        core = ServableManager(SavedModelLoader(LoaderOptions()), max_num_load_retries=0,
                               file_system_poll_wait_seconds=0, **options)
        core.start()
        cores.append(core)
        return core

    yield make
    for core in cores:
        core.stop(drain_timeout=1)


def config(*entries: tuple) -> model_server_config_pb2.ModelServerConfig:
    """(name, base_path[, policy "all"|"latest2"][, labels]) entries."""
    proto = model_server_config_pb2.ModelServerConfig()
    proto.model_config_list.SetInParent()
    for name, base_path, *rest in entries:
        entry = proto.model_config_list.config.add(name=name, base_path=str(base_path), model_platform="tensorflow")
        if rest and rest[0] == "all":
            entry.model_version_policy.all.SetInParent()
        for label, version in (rest[1] if len(rest) > 1 else {}).items():
            entry.version_labels[label] = version
    return proto


def available(core: ServableManager, name: str) -> list[int]:
    return sorted(s.version for s in core.model_status(name) if s.state.name == "AVAILABLE")


def one_version(testdata: Path) -> model_server_config_pb2.ModelServerConfig:
    return config((MODEL, testdata / "saved_model_half_plus_two_cpu"))


def two_versions(testdata: Path, labels: dict | None = None) -> model_server_config_pb2.ModelServerConfig:
    return config((MODEL, testdata / "saved_model_half_plus_two_2_versions", "all", labels or {}))


def test_create_waits_till_models_available(make_core, testdata):
    """CreateWaitsTillModelsAvailable: once the first config returns, version 123 is AVAILABLE and served."""
    core = make_core()
    core.reload_config(one_version(testdata))
    assert available(core, MODEL) == [123]
    with core.acquire(MODEL) as servable:
        assert servable.version == 123


def test_reload_config_waits_till_models_available(make_core, testdata):
    """ReloadConfigWaitsTillModelsAvailable: from an empty model list, a reload returns with 123 AVAILABLE."""
    core = make_core()
    core.reload_config(config())
    core.reload_config(one_version(testdata))
    assert available(core, MODEL) == [123]


def test_reload_config_unloads_models(make_core, testdata):
    """ReloadConfigUnloadsModels: an empty model list unloads the model (nothing AVAILABLE once it ends)."""
    core = make_core()
    core.reload_config(one_version(testdata))
    core.reload_config(config())
    _wait(lambda: available(core, MODEL) == [])   # the unload runs after the reload returns


def test_reload_config_handles_loading_a_previously_unloaded_model(make_core, testdata):
    """ReloadConfigHandlesLoadingAPreviouslyUnloadedModel: load, unload, load again."""
    core = make_core()
    core.reload_config(one_version(testdata))
    core.reload_config(config())
    _wait(lambda: available(core, MODEL) == [])   # see NOT_APPLICABLE.md: re-adding mid-unload is open
    core.reload_config(one_version(testdata), timeout=120)
    with core.acquire(MODEL) as servable:
        assert servable.version == 123


def test_reload_config_change_model_base_path(make_core, testdata):
    """ReloadConfigChangeModelBasePath: one version (123) -> two versions' base path -> back."""
    core = make_core()
    core.reload_config(one_version(testdata))
    assert available(core, MODEL) == [123]
    core.reload_config(two_versions(testdata))
    _wait(lambda: available(core, MODEL) == [123, 124])
    core.reload_config(one_version(testdata))
    _wait(lambda: available(core, MODEL) == [123])


def _wait(predicate, timeout: float = 60.0) -> None:
    import threading
    import time
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline
        threading.Event().wait(0.05)


def test_relative_path_fails(make_core, testdata):
    """RelativePathsServerCoreTest.RelativePathFails (and MixedAbsoluteRelativeFails): INVALID_ARGUMENT."""
    core = make_core()
    with pytest.raises(status.InvalidArgument, match="absolute path"):
        core.reload_config(config((MODEL, "saved_model_half_plus_two_cpu")))
    with pytest.raises(status.InvalidArgument, match="absolute path"):
        core.reload_config(config((MODEL, testdata / "saved_model_half_plus_two_cpu"),
                                  ("relative", "saved_model_half_plus_two_cpu")))


def test_absolute_path_succeeds(make_core, testdata):
    """RelativePathsServerCoreTest.AbsolutePathSucceeds."""
    make_core().reload_config(one_version(testdata))


def test_erroring_model(make_core, tmp_path):
    """ErroringModel: the first config's model fails to load: "1 servable(s) did not become available"."""
    corrupt_version(tmp_path / "broken", 123)
    with pytest.raises(status.Unknown, match=r"^UNKNOWN: 1 servable\(s\) did not become available"):
        make_core().reload_config(config((MODEL, tmp_path / "broken")))


def test_illegal_reconfiguration_to_custom_config(make_core, testdata):
    """IllegalReconfigurationToCustomConfig: "Cannot transition to requested config"."""
    core = make_core()
    core.reload_config(one_version(testdata))
    custom = model_server_config_pb2.ModelServerConfig()
    custom.custom_model_config.type_url = "type.googleapis.com/x"
    with pytest.raises(status.FailedPrecondition, match="Cannot transition to requested config"):
        core.reload_config(custom)


def test_illegal_config_model_type_and_platform_set(make_core, testdata):
    """IllegalConfigModelTypeAndPlatformSet: "Illegal setting both"."""
    both = one_version(testdata)
    both.model_config_list.config[0].model_type = model_server_config_pb2.TENSORFLOW
    with pytest.raises(status.InvalidArgument, match="Illegal setting both"):
        make_core().reload_config(both)


def test_deprecated_model_type_config(make_core, testdata):
    """DeprecatedModelTypeConfig: model_type TENSORFLOW and no platform loads version 123."""
    deprecated = one_version(testdata)
    deprecated.model_config_list.config[0].model_platform = ""
    deprecated.model_config_list.config[0].model_type = model_server_config_pb2.TENSORFLOW
    core = make_core()
    core.reload_config(deprecated)
    assert available(core, MODEL) == [123]


def test_duplicate_model_name_in_config(make_core, testdata):
    """DuplicateModelNameInConfig: refused."""
    duplicate = config((MODEL, testdata / "saved_model_half_plus_two_cpu"),
                       (MODEL, testdata / "saved_model_half_plus_two_cpu"))
    with pytest.raises(status.InvalidArgument):
        make_core().reload_config(duplicate)


def test_unknown_model_platform(make_core, testdata):
    """UnknownModelPlatform: refused."""
    unknown = one_version(testdata)
    unknown.model_config_list.config[0].model_platform = "not_a_platform"
    with pytest.raises(status.InvalidArgument):
        make_core().reload_config(unknown)


def test_illegal_to_change_model_platform(make_core, testdata):
    """IllegalToChangeModelPlatform: "Illegal to change a model's platform"."""
    core = make_core()
    core.reload_config(one_version(testdata))
    changed = one_version(testdata)
    changed.model_config_list.config[0].model_platform = "other_platform"
    with pytest.raises(status.InvalidArgument, match="Illegal to change a model's platform"):
        core.reload_config(changed)


def test_model_spec_multiple_versions_available(make_core, testdata):
    """ModelSpecMultipleVersionsAvailable: no version means the latest (124); version 123 is 123."""
    core = make_core()
    core.reload_config(two_versions(testdata))
    _wait(lambda: available(core, MODEL) == [123, 124])
    with core.acquire(MODEL) as latest, core.acquire(MODEL, version=123) as specific:
        assert (latest.version, specific.version) == (124, 123)


def test_assign_label_to_unavailable_version(make_core, testdata):
    """AssignLabelToUnavailableVersion: "nice try" -> a bogus version: "not currently available for inference"."""
    core = make_core()
    core.reload_config(two_versions(testdata))
    _wait(lambda: available(core, MODEL) == [123, 124])
    with pytest.raises(status.FailedPrecondition, match="not currently available for inference"):
        core.reload_config(two_versions(testdata, {"nice try": 777}))


def test_assign_label_to_unavailable_version_allowed(make_core, testdata):
    """AssignLabelToUnavailableVersionAllowed: with allow_version_labels_for_unavailable_models, "nice try"
    -> a bogus version is accepted (no rule on the label's name)."""
    core = make_core(allow_version_labels_for_unavailable_models=True)
    core.reload_config(two_versions(testdata))
    _wait(lambda: available(core, MODEL) == [123, 124])
    core.reload_config(two_versions(testdata, {"nice try": 777}))
    assert core.version_labels(MODEL) == {"nice try": 777}


def test_assign_existing_label_to_unavailable_version_disallowed(make_core, testdata):
    """AssignExistingLabelToUnavailableVersionDisallowed: A->123, B->124, then moving A to a bogus version
    is refused even with allow_version_labels_for_unavailable_models."""
    core = make_core(allow_version_labels_for_unavailable_models=True)
    core.reload_config(two_versions(testdata))
    _wait(lambda: available(core, MODEL) == [123, 124])
    core.reload_config(two_versions(testdata, {"A": 123, "B": 124}))
    with pytest.raises(status.FailedPrecondition, match="not currently available for inference"):
        core.reload_config(two_versions(testdata, {"A": 777, "B": 124}))


def test_assign_existing_label_to_unavailable_version_allowed(make_core, testdata):
    """AssignExistingLabelToUnavailableVersionAllowed: A->123, B->124, then A->124 (available) is accepted."""
    core = make_core(allow_version_labels_for_unavailable_models=True)
    core.reload_config(two_versions(testdata))
    _wait(lambda: available(core, MODEL) == [123, 124])
    core.reload_config(two_versions(testdata, {"A": 123, "B": 124}))
    core.reload_config(two_versions(testdata, {"A": 124, "B": 124}))
    assert core.version_labels(MODEL) == {"A": 124, "B": 124}


def test_version_labels_not_allowed(make_core, testdata):
    """VersionLabelsNotAllowed: "Model version labels are not currently allowed by the server."."""
    core = make_core(allow_version_labels=False)
    core.reload_config(two_versions(testdata))
    _wait(lambda: available(core, MODEL) == [123, 124])
    with pytest.raises(status.FailedPrecondition, match="Model version labels are not currently allowed"):
        core.reload_config(two_versions(testdata, {"A": 123}))
