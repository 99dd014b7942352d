"""The manager end to end on real SavedModels: policies, polling, states, acquire."""
from __future__ import annotations

import shutil
import threading

import numpy as np
import pytest

from serving import status
from tests.support.lifecycle import Unloads, model_server_config, states, wait_for
from tests.support.models import publish

X = np.ones((1, 3), np.float32)
POLL_THREAD = "FileSystemSource-poll"  # the file-system source's thread


def served_scale(manager, name: str = "affine", **request) -> float:
    with manager.acquire(name, **request) as servable:
        return float(servable.run("serving_default", {"x": X}, ["y"])["y"][0, 0])


@pytest.fixture
def repo(tmp_path, affine_templates):
    """affine/1 (scale 1) and affine/2 (scale 2) published, plus exporter-style temp dirs."""
    base = tmp_path / "affine"
    publish(affine_templates[1.0], base, 1)
    publish(affine_templates[2.0], base, 2)
    (base / ".tmp-export-in-progress").mkdir()  # an export in progress: never a version
    return base


def test_default_policy_serves_only_the_latest_version(make_manager, repo):
    manager = make_manager()
    manager.reload_config(model_server_config(("affine", repo)))
    assert states(manager, "affine") == {2: "AVAILABLE"}
    assert served_scale(manager) == 2.0
    with pytest.raises(status.NotFound, match=r"Servable not found for request: Specific\(affine, 1\)"):
        manager.acquire("affine", version=1)


def test_latest_two_serves_both_and_specific_version_requests_pick_each(make_manager, repo):
    manager = make_manager()
    manager.reload_config(model_server_config(("affine", repo, "latest { num_versions: 2 }")))
    wait_for(lambda: states(manager, "affine") == {1: "AVAILABLE", 2: "AVAILABLE"}, what="both")
    assert served_scale(manager, version=1) == 1.0
    assert served_scale(manager, version=2) == 2.0
    assert served_scale(manager) == 2.0  # omitted version = highest available


def test_all_policy_serves_every_version(make_manager, repo, affine_templates):
    publish(affine_templates[3.0], repo, 5)
    manager = make_manager()
    manager.reload_config(model_server_config(("affine", repo, "all {}")))
    wait_for(lambda: set(states(manager, "affine").values()) == {"AVAILABLE"}
             and len(states(manager, "affine")) == 3, what="three versions")
    assert [s.version for s in manager.model_status("affine")] == [5, 2, 1]  # newest first


def test_specific_policy_serves_only_the_listed_version(make_manager, repo):
    manager = make_manager()
    manager.reload_config(model_server_config(("affine", repo, "specific { versions: 1 }")))
    assert states(manager, "affine") == {1: "AVAILABLE"}
    assert served_scale(manager) == 1.0


def test_polling_picks_up_a_new_version_and_unloads_the_old(make_manager, repo, affine_templates):
    manager = make_manager(poll=0.1)
    manager.reload_config(model_server_config(("affine", repo)))
    publish(affine_templates[3.0], repo, 3)
    wait_for(lambda: states(manager, "affine") == {3: "AVAILABLE", 2: "END"}, what="v3 in, v2 out")
    assert served_scale(manager) == 3.0
    assert manager.model_status("affine", 2)[0].error_code == status.Code.OK


def test_polling_unloads_a_version_removed_from_disk(make_manager, repo):
    manager = make_manager(poll=0.1)
    manager.reload_config(model_server_config(("affine", repo, "latest { num_versions: 2 }")))
    wait_for(lambda: states(manager, "affine") == {1: "AVAILABLE", 2: "AVAILABLE"}, what="both")
    shutil.rmtree(repo / "2")
    wait_for(lambda: states(manager, "affine") == {1: "AVAILABLE", 2: "END"}, what="v2 unloaded")
    assert served_scale(manager) == 1.0


def test_negative_poll_wait_never_polls_after_the_config_is_applied(make_manager, repo,
                                                                   affine_templates):
    pollers = sum(t.name == POLL_THREAD for t in threading.enumerate())  # other managers' pollers
    manager = make_manager(poll=-1)
    manager.reload_config(model_server_config(("affine", repo)))
    publish(affine_templates[3.0], repo, 3)
    assert sum(t.name == POLL_THREAD for t in threading.enumerate()) == pollers  # no poller was started
    assert states(manager, "affine") == {2: "AVAILABLE"}


def test_model_status_messages_for_unknown_models_and_versions(make_manager, repo):
    manager = make_manager()
    manager.reload_config(model_server_config(("affine", repo)))
    with pytest.raises(status.NotFound) as info:
        manager.model_status("nope")
    assert info.value.details == "Could not find any versions of model nope"
    with pytest.raises(status.NotFound) as info:
        manager.model_status("affine", 9)
    assert info.value.details == "Could not find version 9 of model affine"
    with pytest.raises(status.NotFound) as info:
        manager.acquire("nope")
    assert info.value.details == "Servable not found for request: Latest(nope)"


def test_unload_waits_for_the_request_holding_the_servable(make_manager, repo, affine_templates):
    events: list[str] = []
    manager = make_manager(poll=0.1, heap=Unloads(events))
    manager.reload_config(model_server_config(("affine", repo)))
    with manager.acquire("affine") as held:
        publish(affine_templates[3.0], repo, 3)
        wait_for(lambda: states(manager, "affine").get(2) == "UNLOADING", what="v2 unloading")
        out = held.run("serving_default", {"x": X}, ["y"])  # still usable while held
        assert out["y"][0, 0] == 2.0
        assert states(manager, "affine")[2] == "UNLOADING"
        events.append("released")
    wait_for(lambda: states(manager, "affine").get(2) == "END", what="v2 END after release")
    assert events == ["released", "unloaded"]  # v2 was closed only once the request let it go


def test_stop_unloads_every_version(make_manager, repo):
    manager = make_manager()
    manager.reload_config(model_server_config(("affine", repo)))
    manager.stop()
    assert states(manager, "affine") == {2: "END"}
    with pytest.raises(status.NotFound):
        manager.acquire("affine")
