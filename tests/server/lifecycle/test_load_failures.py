"""Failed loads: reported with their error, retried as TF Serving does, never served."""
from __future__ import annotations

import numpy as np
import pytest

from serving import status
from tests.support.lifecycle import PollCounter, model_server_config, states, wait_for
from tests.support.models import corrupt_version, publish

X = np.ones((1, 3), np.float32)


def test_corrupt_version_is_reported_and_never_served_while_the_good_one_keeps_serving(
        make_manager, tmp_path, affine_templates):
    base = tmp_path / "affine"
    publish(affine_templates[1.0], base, 1)
    manager = make_manager(poll=0.1, retries=1)
    manager.reload_config(model_server_config(("affine", base)))
    corrupt_version(base, 2)  # a half-written newer version
    wait_for(lambda: states(manager, "affine").get(2) == "END", what="v2 failed")

    failed = manager.model_status("affine", 2)[0]
    assert failed.error_code == status.Code.DATA_LOSS
    assert "saved_model.pb" in failed.error_message
    assert states(manager, "affine")[1] == "AVAILABLE"
    with manager.acquire("affine") as servable:
        assert servable.version == 1
        assert servable.run("serving_default", {"x": X}, ["y"])["y"][0, 0] == 1.0
    with pytest.raises(status.NotFound):
        manager.acquire("affine", version=2)


def test_failed_load_is_retried_max_num_load_retries_times(make_manager, metrics, tmp_path):
    base = tmp_path / "broken"
    path = corrupt_version(base, 1)
    manager = make_manager(retries=3, retry_interval_micros=10_000)
    with pytest.raises(status.Unknown):
        manager.reload_config(model_server_config(("broken", base)))
    assert metrics.loads == [(str(path), False)] * 4  # 1 attempt + 3 retries


def test_a_failed_version_is_not_retried_again_by_later_polls(make_manager, metrics, tmp_path):
    base = tmp_path / "broken"
    corrupt_version(base, 1)
    manager = make_manager(poll=0.05, retries=0)
    with pytest.raises(status.Unknown):
        manager.reload_config(model_server_config(("broken", base)))
    polls = PollCounter(manager)
    polls.wait(10)  # 10 polls re-announced the same aspired version; none loaded it again
    assert len(metrics.loads) == 1


def test_load_that_succeeds_on_a_retry_becomes_available(make_manager, metrics, tmp_path,
                                                         affine_templates):
    import shutil
    import threading

    base = tmp_path / "slow"
    target = base / "1"
    target.mkdir(parents=True)  # an empty version dir: NOT_FOUND until the files arrive

    def finish_copy() -> None:
        wait_for(lambda: len(metrics.loads) >= 1, what="first failed attempt")
        shutil.copytree(affine_templates[1.0], target, dirs_exist_ok=True)

    copier = threading.Thread(target=finish_copy)
    copier.start()
    manager = make_manager(retries=5, retry_interval_micros=300_000)
    manager.reload_config(model_server_config(("slow", base)))
    copier.join()
    assert states(manager, "slow") == {1: "AVAILABLE"}
    assert metrics.loads[0] == (str(target), False) and metrics.loads[-1] == (str(target), True)


def test_retries_stop_when_the_version_is_no_longer_aspired(make_manager, metrics, tmp_path):
    import shutil

    base = tmp_path / "broken"
    corrupt_version(base, 1)
    manager = make_manager(poll=0.05, retries=100, retry_interval_micros=200_000)
    from threading import Thread

    Thread(target=lambda: _reload_ignoring_errors(manager, base), daemon=True).start()
    wait_for(lambda: len(metrics.loads) >= 1, what="first attempt")
    shutil.rmtree(base / "1")
    wait_for(lambda: states(manager, "broken").get(1) == "END", what="retries cancelled")
    attempts = len(metrics.loads)
    assert attempts < 10


def _reload_ignoring_errors(manager, base) -> None:
    try:
        manager.reload_config(model_server_config(("broken", base)), timeout=30)
    except status.ServingError:
        pass
