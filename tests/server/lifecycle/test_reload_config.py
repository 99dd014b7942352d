"""reload_config replaces the whole model list, as ServerCore::ReloadConfig does."""
from __future__ import annotations

import threading

import pytest

from serving import status
from tests.support.lifecycle import model_server_config, states, wait_for
from tests.support.models import corrupt_version, publish


@pytest.fixture
def two_models(tmp_path, affine_templates):
    first, second = tmp_path / "first", tmp_path / "second"
    publish(affine_templates[1.0], first, 1)
    publish(affine_templates[2.0], second, 4)
    return first, second


def test_reload_replaces_the_model_list_and_unloads_missing_models(make_manager, two_models):
    first, second = two_models
    manager = make_manager()
    manager.reload_config(model_server_config(("first", first)))
    assert manager.model_names() == ["first"]
    manager.reload_config(model_server_config(("second", second)))
    # returns only once the newly added model is loaded
    assert states(manager, "second") == {4: "AVAILABLE"}
    assert manager.model_names() == ["second"]
    wait_for(lambda: states(manager, "first") == {1: "END"}, what="first unloaded")
    with pytest.raises(status.NotFound):
        manager.acquire("first")


def test_reload_keeps_serving_models_still_listed(make_manager, two_models):
    first, second = two_models
    manager = make_manager()
    manager.reload_config(model_server_config(("first", first)))
    with manager.acquire("first") as before:
        pass
    manager.reload_config(model_server_config(("first", first), ("second", second)))
    with manager.acquire("first") as after:
        assert after is before  # not reloaded


def test_reload_reports_newly_added_models_that_failed_to_load(make_manager, tmp_path):
    base = tmp_path / "broken"
    corrupt_version(base, 3)
    manager = make_manager(retries=0)
    empty_list = model_server_config()
    empty_list.model_config_list.SetInParent()
    manager.reload_config(empty_list)   # a first model list (its failures say "servable(s)")
    with pytest.raises(status.Unknown) as info:
        manager.reload_config(model_server_config(("broken", base)))
    assert info.value.details.startswith(
        "1 model(s) did not become available: {{{name: broken version: 3} due to error: DATA_LOSS: ")
    assert info.value.details.endswith("}, }")


def test_reload_waits_while_a_new_model_has_no_version_yet(make_manager, tmp_path, affine_templates):
    base = tmp_path / "late"
    base.mkdir()
    manager = make_manager(poll=0.1)
    done = threading.Event()
    outcome = []

    def reload() -> None:
        try:
            manager.reload_config(model_server_config(("late", base)), timeout=60)
            outcome.append("ok")
        except BaseException as exc:
            outcome.append(exc)
        done.set()

    thread = threading.Thread(target=reload)
    thread.start()
    assert not done.wait(0.5)  # still waiting: nothing to load yet
    publish(affine_templates[1.0], base, 1)
    thread.join(60)
    assert outcome == ["ok"]


def test_reload_times_out_when_asked_to(make_manager, tmp_path):
    (tmp_path / "empty").mkdir()
    manager = make_manager()
    with pytest.raises(status.DeadlineExceeded, match="empty"):
        manager.reload_config(model_server_config(("empty", tmp_path / "empty")), timeout=0.3)


@pytest.mark.parametrize("mutate, message", [
    (lambda c: c.model_config_list.config.add().CopyFrom(c.model_config_list.config[0]),
     "Illegal to list model first multiple times in config list"),
    (lambda c: setattr(c.model_config_list.config[0], "base_path", "relative/first"),
     "Expected model first to have an absolute path or URI; got base_path()=relative/first"),
    (lambda c: setattr(c.model_config_list.config[0], "model_platform", ""),
     "Illegal setting neither ModelServerConfig::model_type (deprecated) nor "
     "ModelServerConfig::model_platform, model name is first"),
    (lambda c: setattr(c.model_config_list.config[0], "model_platform", "onnx"),
     "Model first requests unsupported platform onnx"),
])
def test_invalid_config_lists_are_rejected_naming_the_rule(make_manager, two_models, mutate, message):
    manager = make_manager()
    config = model_server_config(("first", two_models[0]))
    mutate(config)
    with pytest.raises(status.InvalidArgument) as info:
        manager.reload_config(config)
    assert info.value.details == message


def test_empty_config_takes_no_action_first_and_is_refused_after_a_model_list(make_manager,
                                                                               two_models):
    from tensorflow_serving.config import model_server_config_pb2

    manager = make_manager()
    manager.reload_config(model_server_config_pb2.ModelServerConfig())
    assert manager.model_names() == []
    manager.reload_config(model_server_config(("first", two_models[0])))
    with pytest.raises(status.FailedPrecondition) as info:
        manager.reload_config(model_server_config_pb2.ModelServerConfig())
    assert info.value.details == ("Cannot transition to requested config. It is only legal to "
                                  "transition from one ModelConfigList to another.")
    assert states(manager, "first") == {1: "AVAILABLE"}


def test_reload_before_start_is_a_programming_error():
    from serving.server.core.manager import ServableManager
    from serving.server.tensorflow.loader import LoaderOptions, SavedModelLoader

    with pytest.raises(RuntimeError, match="before start"):
        ServableManager(SavedModelLoader(LoaderOptions())).reload_config(model_server_config())


def test_stop_releases_a_reload_still_waiting_for_models(make_manager, tmp_path):
    (tmp_path / "empty").mkdir()
    manager = make_manager()
    outcome = []

    def reload() -> None:
        try:
            manager.reload_config(model_server_config(("empty", tmp_path / "empty")))
        except status.ServingError as exc:
            outcome.append(exc)

    thread = threading.Thread(target=reload)
    thread.start()
    wait_for(lambda: manager.model_names() == ["empty"], what="config applied")
    manager.stop()
    thread.join(30)
    assert not thread.is_alive()
    assert [type(e) for e in outcome] == [status.Cancelled]
