"""Python's heap is frozen after each load and refrozen after each unload, with the real collector;
free native memory goes back to the OS at the same moments."""
from __future__ import annotations

import gc
import threading
import weakref

from serving.server.heap_freezer import YOUNG_THRESHOLD, HeapFreezer
from serving.server.memory import release_free_memory
from tests.support.lifecycle import model_server_config, states, wait_for
from tests.support.models import publish


class Node:
    """Something that only the cycle collector can free."""

    def __init__(self) -> None:
        self.me = self


def test_start_bounds_young_collections_freezes_and_stop_restores():
    before = gc.get_threshold()
    freezer = HeapFreezer()
    freezer.start()
    try:
        assert gc.get_threshold() == (YOUNG_THRESHOLD, *before[1:])
        assert gc.get_freeze_count() > 0
    finally:
        freezer.stop()
    assert gc.get_threshold() == before and gc.get_freeze_count() == 0


def test_cycles_frozen_with_a_version_are_collected_after_its_unload():
    freezer = HeapFreezer()
    freezer.start()
    try:
        node = Node()
        alive = weakref.ref(node)
        freezer.version_loaded()  # the node now belongs to the frozen heap, like a model's objects
        del node
        gc.collect()
        assert alive() is not None, "a frozen cycle is never collected"
        freezer.version_unloaded()
        assert alive() is None
        assert gc.get_freeze_count() > 0, "what is still alive is frozen again"
    finally:
        freezer.stop()


class Recorder:
    """``VersionEvents`` that notes each event and the version states the manager shows at that moment."""

    def __init__(self, manager_ref: list) -> None:
        self.events: list[tuple[str, dict]] = []
        self.unloaded = threading.Event()
        self._manager_ref = manager_ref

    def version_loaded(self) -> None:
        self.events.append(("loaded", states(self._manager_ref[0], "affine")))

    def version_unloaded(self) -> None:
        self.events.append(("unloaded", states(self._manager_ref[0], "affine")))
        self.unloaded.set()


def test_manager_reports_a_load_before_the_version_serves_and_each_unload(make_manager, tmp_path,
                                                                           affine_templates):
    base = tmp_path / "affine"
    publish(affine_templates[1.0], base, 1)
    manager_ref: list = []
    recorder = Recorder(manager_ref)
    manager_ref.append(make_manager(poll=0.05, heap=recorder))
    manager = manager_ref[0]
    manager.reload_config(model_server_config(("affine", base)))
    assert recorder.events == [("loaded", {1: "LOADING"})]
    publish(affine_templates[2.0], base, 2)
    assert recorder.unloaded.wait(60), "version 1 was never unloaded"
    wait_for(lambda: states(manager, "affine").get(1) == "END", what="version 1 unloaded")
    assert [event for event, _ in recorder.events] == ["loaded", "loaded", "unloaded"]
    assert recorder.events[1][1][2] == "LOADING" and recorder.events[2][1][2] == "AVAILABLE"


class ReleaseRecorder:
    """The real ``release_free_memory``, noting the version states the manager shows each time it runs."""

    def __init__(self, manager_ref: list) -> None:
        self.calls: list[dict] = []
        self._manager_ref = manager_ref

    def __call__(self) -> bool:
        self.calls.append(states(self._manager_ref[0], "affine") if self._manager_ref else {})
        return release_free_memory()


def test_native_memory_is_returned_after_a_load_and_its_warmup_before_the_version_serves(
        make_manager, tmp_path, affine_templates):
    base = tmp_path / "affine"
    publish(affine_templates[1.0], base, 1)
    manager_ref: list = []
    release = ReleaseRecorder(manager_ref)
    freezer = HeapFreezer(release=release)
    freezer.start()
    try:
        manager_ref.append(make_manager(poll=0.05, heap=freezer))
        manager_ref[0].reload_config(model_server_config(("affine", base)))
        assert release.calls == [{1: "LOADING"}], "one release, after the load, before AVAILABLE"
        assert states(manager_ref[0], "affine") == {1: "AVAILABLE"}
        freezer.version_unloaded()
        assert len(release.calls) == 2, "an unload returns the closed version's memory too"
    finally:
        freezer.stop()
