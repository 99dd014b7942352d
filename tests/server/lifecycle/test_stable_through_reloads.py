"""A loaded version nobody touches answers every request while config reloads move a label around it.

The rollout's ``set-label`` pushes three configs (load the union, move the label, unload the old
canary), each with ``HandleReloadConfigRequest``; version 1 (``stable``) is in every one of them.
A thread sends Predicts to ``Specific(affine, 1)`` and by the label ``stable`` without pause while the
main thread moves ``canary`` between versions 2 and 3 twenty times (each move loads one version and
unloads the other). Not one of the stable requests may fail. The manager is built as the server
builds it (crash quarantine on: loads under a marker, first requests under a marker).
"""
from __future__ import annotations

import threading

import numpy as np
import pytest

from serving import status
from tests.support.lifecycle import Metrics, model_server_config, states, wait_for
from tests.support.models import publish

X = np.ones((1, 3), np.float32)
MOVES = 20


@pytest.fixture
def repo(tmp_path, affine_templates):
    base = tmp_path / "affine"
    for version, scale in ((1, 1.0), (2, 2.0), (3, 3.0)):
        publish(affine_templates[scale], base, version)
    return base


@pytest.fixture
def manager(tmp_path):
    from serving.server.core.manager import ServableManager
    from serving.server.core.quarantine import QuarantiningLoaderFactory, VersionQuarantine
    from serving.server.tensorflow.loader import LoaderOptions, SavedModelLoader

    quarantine = VersionQuarantine(str(tmp_path / "quarantine"))
    quarantine.open()
    built = ServableManager(QuarantiningLoaderFactory(SavedModelLoader(LoaderOptions(), Metrics()), quarantine),
                            max_num_load_retries=1, load_retry_interval_micros=20_000,
                            file_system_poll_wait_seconds=0.05,
                            allow_version_labels_for_unavailable_models=True,
                            quarantined=quarantine.is_quarantined)
    built.start()
    yield built
    built.stop()


def config(repo, versions, canary):
    policy = "specific { " + " ".join(f"versions: {v}" for v in sorted(versions)) + " }"
    return model_server_config(("affine", repo, policy, {"stable": 1, "canary": canary}))


def test_stable_version_answers_every_request_while_the_canary_moves(manager, repo):
    manager.reload_config(config(repo, {1, 2}, 2))
    wait_for(lambda: states(manager, "affine") == {1: "AVAILABLE", 2: "AVAILABLE"}, what="1 and 2 AVAILABLE")

    done, started = threading.Event(), threading.Event()
    errors: list[str] = []
    answered = [0]

    def stable_traffic():
        while not done.is_set():
            for spec in ({"version": 1}, {"label": "stable"}):
                try:
                    with manager.acquire("affine", **spec) as servable:
                        y = servable.run("serving_default", {"x": X}, ["y"])["y"]
                    assert float(y[0, 0]) == 1.0, f"{spec} answered {y}"
                    answered[0] += 1
                except (status.ServingError, AssertionError) as exc:
                    errors.append(f"{spec}: {type(exc).__name__}: {exc}")
            started.set()

    sender = threading.Thread(target=stable_traffic, name="stable-traffic")
    sender.start()
    try:
        assert started.wait(60), "the stable traffic never got going"
        canary = 2
        for _ in range(MOVES):
            target = 5 - canary
            # serving.rollout's set-label steps: load the union, move the label, unload the old canary
            manager.reload_config(config(repo, {1, canary, target}, canary))
            wait_for(lambda target=target: states(manager, "affine").get(target) == "AVAILABLE",
                     what=f"{target} AVAILABLE")
            manager.reload_config(config(repo, {1, canary, target}, target))
            manager.reload_config(config(repo, {1, target}, target))
            wait_for(lambda canary=canary: states(manager, "affine").get(canary) == "END", what=f"{canary} unloaded")
            canary = target
    finally:
        done.set()
        sender.join()
    assert errors == [], f"{len(errors)} of {len(errors) + answered[0]} stable requests failed: {errors[:5]}"
    assert answered[0] > MOVES
