"""Version labels follow ServerCore's rules."""
from __future__ import annotations

import numpy as np
import pytest

from serving import status
from tests.support.lifecycle import model_server_config, states, wait_for
from tests.support.models import publish

X = np.ones((1, 3), np.float32)
LATEST_2 = "latest { num_versions: 2 }"


@pytest.fixture
def repo(tmp_path, affine_templates):
    base = tmp_path / "affine"
    publish(affine_templates[1.0], base, 1)
    publish(affine_templates[2.0], base, 2)
    return base


def scale_for(manager, label: str) -> float:
    with manager.acquire("affine", label=label) as servable:
        return float(servable.run("serving_default", {"x": X}, ["y"])["y"][0, 0])


def test_labels_on_available_versions_route_requests(make_manager, repo):
    manager = make_manager()
    manager.reload_config(model_server_config(("affine", repo, LATEST_2)))
    wait_for(lambda: states(manager, "affine") == {1: "AVAILABLE", 2: "AVAILABLE"}, what="both")
    manager.reload_config(model_server_config(
        ("affine", repo, LATEST_2, {"stable": 1, "canary": 2})))
    assert scale_for(manager, "stable") == 1.0
    assert scale_for(manager, "canary") == 2.0
    assert manager.version_labels("affine") == {"stable": 1, "canary": 2}


def test_label_on_a_version_not_yet_available_is_rejected_by_default(make_manager, repo):
    manager = make_manager()
    with pytest.raises(status.FailedPrecondition) as info:
        manager.reload_config(model_server_config(("affine", repo, LATEST_2, {"stable": 1})))
    assert info.value.details == ("Request to assign label to version 1 of model affine, "
                                  "which is not currently available for inference")
    with pytest.raises(status.NotFound):  # nothing was applied
        manager.model_status("affine")


def test_allow_unavailable_lets_new_labels_point_at_versions_still_to_load(make_manager, repo):
    manager = make_manager(allow_version_labels_for_unavailable_models=True)
    manager.reload_config(model_server_config(("affine", repo, LATEST_2, {"stable": 1})))
    wait_for(lambda: states(manager, "affine").get(1) == "AVAILABLE", what="v1")
    assert scale_for(manager, "stable") == 1.0


def test_allow_unavailable_still_refuses_moving_a_label_to_an_unavailable_version(
        make_manager, repo, affine_templates):
    manager = make_manager(allow_version_labels_for_unavailable_models=True)
    manager.reload_config(model_server_config(("affine", repo, LATEST_2, {"stable": 2})))
    with pytest.raises(status.FailedPrecondition, match="version 7 of model affine"):
        manager.reload_config(model_server_config(("affine", repo, LATEST_2, {"stable": 7})))
    assert manager.version_labels("affine") == {"stable": 2}


def test_labels_are_rejected_when_the_server_disallows_them(make_manager, repo):
    manager = make_manager(allow_version_labels=False,
                           allow_version_labels_for_unavailable_models=True)
    with pytest.raises(status.FailedPrecondition) as info:
        manager.reload_config(model_server_config(("affine", repo, LATEST_2, {"stable": 1})))
    assert info.value.details == "Model version labels are not currently allowed by the server."
    manager.reload_config(model_server_config(("affine", repo)))
    with pytest.raises(status.InvalidArgument, match="not currently allowed by the server"):
        manager.acquire("affine", label="stable")


def test_unknown_label_is_invalid_argument_with_tf_serving_message(make_manager, repo):
    manager = make_manager()
    manager.reload_config(model_server_config(("affine", repo)))
    with pytest.raises(status.InvalidArgument) as info:
        manager.acquire("affine", label="nightly")
    assert info.value.details == "Unrecognized servable version label: nightly"


def test_any_label_name_is_accepted_as_tf_serving_accepts_it(make_manager, repo):
    """server_core_test.cc assigns the label "nice try": TF Serving places no rule on label names."""
    manager = make_manager(allow_version_labels_for_unavailable_models=True)
    manager.reload_config(model_server_config(("affine", repo, "", {"pre-prod": 1, "nice try": 1})))
    assert manager.version_labels("affine") == {"pre-prod": 1, "nice try": 1}