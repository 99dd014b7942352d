"""Version changes under load: no request ever sees "not found" during a rollout."""
from __future__ import annotations

import threading

import numpy as np

from serving import status
from tests.support.lifecycle import model_server_config, states, wait_for
from tests.support.models import publish

X = np.ones((1, 3), np.float32)


def test_rollouts_under_concurrent_requests_never_return_not_found(make_manager, tmp_path,
                                                                  affine_templates):
    base = tmp_path / "affine"
    publish(affine_templates[1.0], base, 1)
    manager = make_manager(poll=0.05)
    manager.reload_config(model_server_config(("affine", base)))

    stop = threading.Event()
    results: list[float] = []
    errors: list[BaseException] = []
    lock = threading.Lock()

    def client() -> None:
        while not stop.is_set():
            try:
                with manager.acquire("affine") as servable:
                    y = servable.run("serving_default", {"x": X}, ["y"])["y"][0, 0]
                with lock:
                    results.append(float(y))
            except BaseException as exc:  # any error at all fails the test
                with lock:
                    errors.append(exc)

    threads = [threading.Thread(target=client) for _ in range(4)]
    for thread in threads:
        thread.start()
    try:
        for version, scale in ((2, 2.0), (3, 3.0)):
            publish(affine_templates[scale], base, version)
            wait_for(lambda version=version: states(manager, "affine").get(version - 1) == "END",
                     what=f"version {version} rolled out")
            with lock:
                mark = len(results)
            wait_for(lambda mark=mark: len(results) > mark + 20, what="requests after the rollout")
    finally:
        stop.set()
        for thread in threads:
            thread.join()

    assert not errors, f"{len(errors)} failed requests, first: {errors[0]!r}"
    assert {1.0, 2.0, 3.0} <= set(results)  # every version served some requests
    last_scales = results[-20:]
    assert set(last_scales) == {3.0}
    assert not any(isinstance(e, status.NotFound) for e in errors)
