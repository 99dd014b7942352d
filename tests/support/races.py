"""Concurrent operator commands on a live embedded server: each race, N trials, lost or reverted changes counted.

Run as a script for the trial counts (the code under test is the one on PYTHONPATH, so the same script
measures another checkout)::

    PYTHONPATH=$PWD .venv/bin/python tests/support/races.py --trials 20

The races (``serving.config`` and ``serving.rollout`` run in threads of this process, each with its own
stdout/stderr; their order is set by events, never by sleeps):

- ``add+add``: two ``config add``s of different models, released together by a barrier;
- ``add+remove``: ``config add`` of a new model and ``config remove`` of another, released together;
- ``canary+failing-add``: ``config add`` of a model whose version cannot load, and ``rollout canary`` of
  another model started once the add's first push is on its way (an event set by that push); the
  canary is counted (the add is meant to fail: its failures are shown apart);
- ``failing-add+canary``: the same two, in the order of the defect report: the add reads the config, the
  canary runs to its end (or waits for the add's lock, where there is one: an event either way), then
  the add pushes and fails;
- ``add+poller``: ``config add`` of a new model while the server polls its config file every second
  (``--model_config_file_poll_wait_seconds=1``).

A change is *lost or reverted* when its command reported success (exit 0) and the file or the server does
not have it once both commands ended: an added model not in the file or not AVAILABLE, a removed model
still in the file or still AVAILABLE, a canary label not on its version in the file or on the server.
A command that fails (ABORTED, a refusal) is counted apart, with its reason.
"""
from __future__ import annotations

import argparse
import contextlib
import io
import sys
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterator, Optional, Sequence

import httpx

from serving.client import GrpcClient
from serving.config import load_model_server_config
from serving.config.cli import main as config_main
from serving.config.models import render_repository_config, write_model_server_config
from serving.config.served_config import STATE_FILE, StackState, write_state
from serving.rollout.cli import main as rollout_main
from tests.support.servers import EmbeddedServer

__all__ = ["RACES", "RaceStack", "Tally", "run_race", "main"]


class _PerThread(io.TextIOBase):
    """A stream that keeps what each thread writes apart (print looks ``sys.stdout`` up at each call)."""

    def __init__(self, fallback) -> None:
        self.fallback, self.buffers, self.lock = fallback, {}, threading.Lock()

    def write(self, text: str) -> int:
        with self.lock:
            buffer = self.buffers.get(threading.get_ident())
        return buffer.write(text) if buffer is not None else self.fallback.write(text)

    @contextlib.contextmanager
    def capture(self) -> Iterator[io.StringIO]:
        buffer = io.StringIO()
        with self.lock:
            self.buffers[threading.get_ident()] = buffer
        try:
            yield buffer
        finally:
            with self.lock:
                self.buffers.pop(threading.get_ident(), None)


@dataclass
class Result:
    code: int = -1
    out: str = ""
    err: str = ""


def _run(main: Callable[[Sequence[str]], int], argv: Sequence[str]) -> Result:
    result = Result()
    out, err = sys.stdout, sys.stderr
    assert isinstance(out, _PerThread) and isinstance(err, _PerThread), "run inside RaceStack.captured()"
    with out.capture() as o, err.capture() as e:
        try:
            result.code = main(list(argv))
        except SystemExit as exc:
            result.code = exc.code if isinstance(exc.code, int) else 2
        except Exception as exc:  # noqa: BLE001 - a traceback is an outcome to count, not to hide
            result.code, result.err = 99, f"{type(exc).__name__}: {exc}"
        result.out, result.err = o.getvalue(), e.getvalue() + result.err
    return result


def _together(*calls: Callable[[], Result], start_second: Optional[threading.Event] = None) -> list[Result]:
    """Run ``calls`` in threads released by one barrier (or the second once ``start_second`` is set)."""
    results: list[Result] = [Result() for _ in calls]
    barrier = threading.Barrier(len(calls))

    def run(index: int) -> None:
        barrier.wait(60)
        if index == 1 and start_second is not None:
            start_second.wait(120)
        results[index] = calls[index]()

    threads = [threading.Thread(target=run, args=(i,), name=f"race-{i}") for i in range(len(calls))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(900)
    return results


@dataclass
class Tally:
    race: str
    trials: int = 0
    succeeded: int = 0
    failed: int = 0
    aborted: int = 0
    lost_or_reverted: int = 0
    failing_add_failed: int = 0
    reasons: list[str] = field(default_factory=list)

    def count(self, result: Result, lost: bool) -> None:
        if result.code == 0:
            self.succeeded += 1
            self.lost_or_reverted += int(lost)
        else:
            self.failed += 1
            self.aborted += int("ABORTED" in result.err or "Aborted" in result.err)
            last = (result.err.strip().splitlines() or ["(no message)"])[-1]
            self.reasons.append(f"exit {result.code}: {last[:200]}")

    def line(self) -> str:
        extra = f"  (the failing add failed {self.failing_add_failed}/{self.trials})" if "failing" in self.race else ""
        return (f"{self.race:<20} trials {self.trials:>3}  commands ok {self.succeeded:>3}  failed {self.failed:>3} "
                f"(ABORTED {self.aborted:>3})  lost or reverted {self.lost_or_reverted:>3}{extra}")


class RaceStack:
    """An embedded server serving ``base`` from a work dir as make up leaves it, and model dirs to add."""

    def __init__(self, root: Path, model_dir: Path, *, poll_seconds: int = 0) -> None:
        self.root, self.model_dir = Path(root), Path(model_dir)
        self.repo, self.work, self.elsewhere = self.root / "repo", self.root / "work", self.root / "elsewhere"
        self.config_file = self.work / "models.config"
        self.poll_seconds = poll_seconds
        self.server: Optional[EmbeddedServer] = None
        self.out, self.err = _PerThread(sys.stdout), _PerThread(sys.stderr)

    def model(self, name: str, versions: Sequence[int] = (1,), *, broken: bool = False,
              where: Optional[Path] = None) -> Path:
        """A model directory whose versions are the cached model (or a saved_model.pb that cannot load)."""
        base = (where or self.elsewhere) / name
        for version in versions:
            target = base / str(version)
            if broken:
                target.mkdir(parents=True)
                (target / "saved_model.pb").write_bytes(b"not a SavedModel")
            else:
                base.mkdir(parents=True, exist_ok=True)
                target.symlink_to(self.model_dir / "1", target_is_directory=True)
        return base

    def __enter__(self) -> "RaceStack":
        self.model("base", where=self.repo)
        self.work.mkdir(parents=True)
        write_model_server_config(render_repository_config(self.repo), self.config_file)
        flags = [f"--model_config_file={self.config_file}", "--allow_version_labels_for_unavailable_models=true",
                 "--max_num_load_retries=0"]
        if self.poll_seconds:
            flags.append(f"--model_config_file_poll_wait_seconds={self.poll_seconds}")
        self.server = EmbeddedServer(flags, wait_for=["base"], log_path=self.root / "server.log", timeout=300)
        self.server.start()
        write_state(StackState("embedded", self.config_file, self.server.grpc_target, self.server.rest_url, self.repo),
                    self.work / STATE_FILE)
        sys.stdout, sys.stderr = self.out, self.err
        return self

    def __exit__(self, *exc: object) -> None:
        sys.stdout, sys.stderr = self.out.fallback, self.err.fallback
        if self.server is not None:
            self.server.stop()

    # ---- commands
    def config(self, *args: str) -> Callable[[], Result]:
        return lambda: _run(config_main, [*args, "--work-dir", str(self.work), "--timeout", "120"])

    def rollout(self, *args: str) -> Callable[[], Result]:
        return lambda: _run(rollout_main, [*args, "--work-dir", str(self.work), "--timeout", "120"])

    def add(self, name: str) -> Callable[[], Result]:
        return self.config("add", name, "--base-path", str(self.elsewhere / name))

    # ---- what the file and the server hold
    def in_file(self, name: str):
        return next((e for e in load_model_server_config(self.config_file).model_config_list.config if e.name == name),
                    None)

    def available(self, path: str) -> list[int]:
        response = httpx.get(f"{self.server.rest_url}/v1/models/{path}", timeout=30)
        if response.status_code != 200:
            return []
        return [int(v["version"]) for v in response.json()["model_version_status"] if v["state"] == "AVAILABLE"]

    def label_version(self, name: str, label: str) -> Optional[int]:
        """The version the server resolves ``label`` of ``name`` to (its metadata's model_spec), or None."""
        response = httpx.get(f"{self.server.rest_url}/v1/models/{name}/labels/{label}/metadata", timeout=30)
        if response.status_code != 200:
            return None
        return int(response.json()["model_spec"]["version"])

    def served(self, name: str) -> bool:
        return self.in_file(name) is not None and bool(self.available(name))

    def gone(self, name: str) -> bool:
        return self.in_file(name) is None and not self.available(name)

    def clean(self, *names: str) -> None:
        for name in names:
            if self.in_file(name) is not None:
                _run(config_main, ["remove", name, "--work-dir", str(self.work), "--timeout", "120", "--force"])


def on_push(hook: Callable[[str], None]) -> Callable[[], None]:
    """Call ``hook(thread name)`` whenever a thread pushes a config (GrpcClient.reload_config); returns undo."""
    original = GrpcClient.reload_config

    def reload_config(self, *args, **kwargs):
        hook(threading.current_thread().name)
        return original(self, *args, **kwargs)

    GrpcClient.reload_config = reload_config
    return lambda: setattr(GrpcClient, "reload_config", original)


def race_add_add(stack: RaceStack, trial: int, tally: Tally) -> None:
    a, b = f"a{trial}", f"b{trial}"
    stack.model(a), stack.model(b)
    results = _together(stack.add(a), stack.add(b))
    for name, result in zip((a, b), results):
        tally.count(result, lost=not stack.served(name))
    stack.clean(a, b)


def race_add_remove(stack: RaceStack, trial: int, tally: Tally) -> None:
    added, removed = f"n{trial}", f"r{trial}"
    stack.model(added), stack.model(removed)
    assert stack.add(removed)().code == 0, f"setup: add {removed} failed"
    results = _together(stack.add(added), stack.config("remove", removed))
    tally.count(results[0], lost=not stack.served(added))
    tally.count(results[1], lost=not stack.gone(removed))
    stack.clean(added, removed)


def race_canary_failing_add(stack: RaceStack, trial: int, tally: Tally) -> None:
    canaried, broken = f"c{trial}", f"f{trial}"
    stack.model(canaried, versions=(1, 2)), stack.model(broken, broken=True)
    assert stack.config("add", canaried, "--base-path", str(stack.elsewhere / canaried), "--version", "1")().code \
        == 0 if _has_version_flag() else stack.config("add", canaried, "--base-path", str(stack.elsewhere / canaried),
                                                      "--policy", "versions:1", "--label", "stable=1",
                                                      "--label", "canary=1")().code == 0
    pushed = threading.Event()
    undo = on_push(lambda thread: pushed.set() if thread == "race-0" else None)
    try:
        results = _together(stack.add(broken), stack.rollout("canary", canaried, "2"), start_second=pushed)
    finally:
        undo()
    entry = stack.in_file(canaried)
    labelled = entry is not None and entry.version_labels.get("canary") == 2 and \
        stack.label_version(canaried, "canary") == 2
    tally.count(results[1], lost=not labelled)
    # The add must fail (its version cannot load), and leave no trace: its model is not in the file.
    tally.failing_add_failed += int(results[0].code != 0)
    if results[0].code == 0 or stack.in_file(broken) is not None:
        tally.reasons.append(f"the failing add of {broken} left it in the file (exit {results[0].code})")
    stack.clean(broken, canaried)


def race_failing_add_read_before_canary(stack: RaceStack, trial: int, tally: Tally) -> None:
    """The add reads the config, then the canary runs to its end (or, where commands take the config's lock,
    waits for the add's lock), then the add pushes and fails: the order of the defect report."""
    canaried, broken = f"d{trial}", f"g{trial}"
    stack.model(canaried, versions=(1, 2)), stack.model(broken, broken=True)
    if _has_version_flag():
        assert stack.config("add", canaried, "--base-path", str(stack.elsewhere / canaried), "--version", "1")().code == 0
    else:
        assert stack.config("add", canaried, "--base-path", str(stack.elsewhere / canaried), "--policy", "versions:1",
                            "--label", "stable=1", "--label", "canary=1")().code == 0
    canary_done_or_waiting = threading.Event()
    undo_push = on_push(lambda thread: canary_done_or_waiting.wait(300) if thread == "race-0" else None)
    undo_wait = _on_lock_wait(lambda thread: canary_done_or_waiting.set() if thread == "race-1" else None)
    canary = stack.rollout("canary", canaried, "2")

    def canary_then_tell() -> Result:
        try:
            return canary()
        finally:
            canary_done_or_waiting.set()

    try:
        results = _together(stack.add(broken), canary_then_tell)
    finally:
        undo_push()
        undo_wait()
    entry = stack.in_file(canaried)
    labelled = entry is not None and entry.version_labels.get("canary") == 2 and \
        stack.label_version(canaried, "canary") == 2
    tally.count(results[1], lost=not labelled)
    tally.failing_add_failed += int(results[0].code != 0)
    if results[0].code == 0 or stack.in_file(broken) is not None:
        tally.reasons.append(f"the failing add of {broken} left it in the file (exit {results[0].code})")
    stack.clean(broken, canaried)


def _on_lock_wait(hook: Callable[[str], None]) -> Callable[[], None]:
    """Call ``hook(thread name)`` when a thread finds the config's lock taken (code that has one); returns undo."""
    try:
        from serving.config.config_lock import ConfigLock
    except ImportError:  # code from before the lock: nothing waits
        return lambda: None
    original = ConfigLock.holder

    def holder(self):
        hook(threading.current_thread().name)
        return original(self)

    ConfigLock.holder = holder
    return lambda: setattr(ConfigLock, "holder", original)


def race_add_poller(stack: RaceStack, trial: int, tally: Tally) -> None:
    name = f"p{trial}"
    stack.model(name)
    result = stack.add(name)()
    tally.count(result, lost=not stack.served(name))
    stack.clean(name)


def _has_version_flag() -> bool:
    """Whether ``config add`` takes ``--version N`` (the script also measures code from before it did)."""
    from serving.config.cli import build_parser
    try:
        with contextlib.redirect_stderr(io.StringIO()):
            build_parser().parse_args(["add", "x", "--base-path", "/", "--version", "1"])
        return True
    except SystemExit:
        return False


RACES: dict[str, tuple[Callable[[RaceStack, int, Tally], None], int]] = {
    "add+add": (race_add_add, 0),
    "add+remove": (race_add_remove, 0),
    "canary+failing-add": (race_canary_failing_add, 0),
    "failing-add+canary": (race_failing_add_read_before_canary, 0),
    "add+poller": (race_add_poller, 1),
}
"""Each race and the server's config poll interval it runs with (0: no poll)."""


def run_race(name: str, trials: int, root: Path, model_dir: Path) -> Tally:
    race, poll = RACES[name]
    tally = Tally(name)
    with RaceStack(root, model_dir, poll_seconds=poll) as stack:
        for trial in range(trials):
            race(stack, trial, tally)
            tally.trials += 1
    return tally


def main(argv: Optional[Sequence[str]] = None) -> int:
    import tempfile

    from tests.support.models import cached_export

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--trials", type=int, default=20)
    parser.add_argument("--race", action="append", choices=sorted(RACES), help="default: every race")
    args = parser.parse_args(argv)
    model_dir = cached_export(("ranker",)) / "ranker"
    tallies = []
    for name in args.race or list(RACES):
        with tempfile.TemporaryDirectory(prefix=f"race-{name.replace('+', '-')}-") as root:
            tally = run_race(name, args.trials, Path(root), model_dir)
        print(tally.line(), flush=True)
        for reason in sorted(set(tally.reasons))[:5]:
            print(f"    {reason}", flush=True)
        tallies.append(tally)
    return 0 if all(t.lost_or_reverted == 0 for t in tallies) else 1


if __name__ == "__main__":
    sys.exit(main())
