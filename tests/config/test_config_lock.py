"""One lock and a compare-and-swap for the served config: two changes at once both land or one is refused.

No server answers in these tests (the served config's gRPC target is a closed port), so a change is
written for the server's next start; the ordering of the two commands is set by events, never by sleeps.
"""
from __future__ import annotations

import threading
from pathlib import Path

import pytest

from serving.client import GrpcClient
from serving.config import load_model_server_config
from serving.config.cli import main as config_main
from serving.config.config_lock import ConfigLock, LockTimeout, StaleConfig, read_snapshot
from serving.config.edit import VersionPolicy, add_steps, model_entry, remove_steps
from serving.config.served_config import apply_steps, change_served_config, served_config
from serving.rollout.cli import EXIT_STALE as ROLLOUT_EXIT_STALE
from serving.rollout.cli import main as rollout_main
from tests.support.config import Listener, embedded_stack, user_model


def names_in(path: Path) -> list[str]:
    return [e.name for e in load_model_server_config(path).model_config_list.config]


@pytest.fixture
def stack(tmp_path: Path):
    repo = tmp_path / "repo"
    user_model(repo, "first")
    for name in ("alpha", "beta"):
        user_model(repo.parent / "elsewhere", name)
    work = embedded_stack(tmp_path, repo)
    return {"work": work, "config": work / "models.config", "elsewhere": repo.parent / "elsewhere"}


def add_plan(name: str, base: Path):
    entry = model_entry(name, str(base), VersionPolicy("specific", versions=(1,)), {"stable": 1})
    return lambda config: add_steps(config, entry, [1])


def test_a_second_holder_waits_for_the_lock_and_gives_up_at_its_timeout(tmp_path):
    config = tmp_path / "models.config"
    config.write_text("")
    held, release, done = threading.Event(), threading.Event(), threading.Event()

    def first():
        with ConfigLock(config).hold(5, who="first"):
            held.set()
            release.wait(30)
        done.set()

    thread = threading.Thread(target=first)
    thread.start()
    assert held.wait(30)
    with pytest.raises(LockTimeout, match="over 0.2 s"):
        with ConfigLock(config).hold(0.2, log=lambda _: None):
            pass
    assert "first" in ConfigLock(config).holder()
    release.set()
    assert done.wait(30)
    with ConfigLock(config).hold(0.2):
        pass
    thread.join()


def test_a_write_on_a_stale_read_is_refused_and_the_file_is_untouched(tmp_path):
    config = tmp_path / "models.config"
    config.write_text("one")
    lock, read = ConfigLock(config), read_snapshot(config)
    config.write_text("two")  # another writer, after our read
    with lock.hold(1):
        with pytest.raises(StaleConfig, match="changed since it was read"):
            lock.write_if(read, lambda: config.write_text("mine"))
    assert config.read_text() == "two"


def test_two_adds_planned_on_the_same_read_both_land(stack):
    """Before: the second add wrote its plan (made on the old file) over the first's model."""
    served = served_config(work_dir=stack["work"])
    read = served.snapshot()  # both commands read the file before either writes
    assert change_served_config(served, "alpha", add_plan("alpha", stack["elsewhere"] / "alpha"),
                                snapshot=read, log=lambda _: None) is False
    change_served_config(served, "beta", add_plan("beta", stack["elsewhere"] / "beta"), snapshot=read,
                         log=lambda _: None)
    assert names_in(stack["config"]) == ["first", "alpha", "beta"]


def test_an_add_and_a_remove_planned_on_the_same_read_both_land(stack):
    served = served_config(work_dir=stack["work"])
    read = served.snapshot()
    change_served_config(served, "alpha", add_plan("alpha", stack["elsewhere"] / "alpha"), snapshot=read,
                         log=lambda _: None)
    change_served_config(served, "first", lambda config: remove_steps(config, "first"), snapshot=read,
                         log=lambda _: None)
    assert names_in(stack["config"]) == ["alpha"]


def test_steps_planned_by_a_caller_on_a_stale_read_are_refused_not_written(stack):
    served = served_config(work_dir=stack["work"])
    read = served.snapshot()
    steps = add_plan("alpha", stack["elsewhere"] / "alpha")(served.parse(read))
    change_served_config(served, "beta", add_plan("beta", stack["elsewhere"] / "beta"), log=lambda _: None)
    with pytest.raises(StaleConfig, match="nothing was sent"):
        apply_steps(served, "alpha", steps, snapshot=read, log=lambda _: None)
    assert names_in(stack["config"]) == ["first", "beta"]


def test_an_add_waiting_for_the_lock_plans_again_on_what_the_holder_wrote(stack, monkeypatch):
    """The first command holds the lock (as while it waits for its versions); the second, started meanwhile,
    waits, then keeps the first's change."""
    served = served_config(work_dir=stack["work"])
    holding, release, waiting = threading.Event(), threading.Event(), threading.Event()
    results = {}
    holder = ConfigLock.holder

    def tell_waiting(self):  # called once a take of the lock has failed: the second command waits
        waiting.set()
        return holder(self)

    monkeypatch.setattr(ConfigLock, "holder", tell_waiting)

    def first():
        with served.lock().hold(30):
            holding.set()
            release.wait(30)
            steps = add_plan("alpha", stack["elsewhere"] / "alpha")(served.load())
            served.write(steps[-1].config)

    def second():
        results["code"] = config_main(["add", "beta", "--base-path", str(stack["elsewhere"] / "beta"),
                                       "--work-dir", str(stack["work"]), "--timeout", "30"])

    one = threading.Thread(target=first)
    one.start()
    assert holding.wait(30)
    two = threading.Thread(target=second)
    two.start()
    assert waiting.wait(30)
    release.set()
    one.join()
    two.join()
    assert results["code"] == 0
    assert names_in(stack["config"]) == ["first", "alpha", "beta"]


def test_the_lock_file_sits_beside_the_served_config(stack):
    served = served_config(work_dir=stack["work"])
    assert served.lock().path == stack["config"].with_name(".models.config.lock")


class Killed(BaseException):
    """Stands in for SIGKILL right after a push: no handler of the command runs."""


def test_the_file_is_written_before_each_push_so_a_killed_add_leaves_it_in_the_file(stack, monkeypatch):
    """Before: the push came first and the file was written after it; a command killed in between left the
    model served but not in the file (and a poll in between re-applied the old file)."""
    listener = Listener()  # something answers at the stack's address; the push itself is intercepted
    stack["work"].joinpath("stack.json").write_text(
        stack["work"].joinpath("stack.json").read_text().replace("127.0.0.1:1", listener.target))
    at_push = []

    def reload_config(self, config, *args, **kwargs):
        at_push.append((names_in(stack["config"]), [e.name for e in config.model_config_list.config]))
        raise Killed()

    monkeypatch.setattr(GrpcClient, "reload_config", reload_config)
    with pytest.raises(Killed):
        config_main(["add", "alpha", "--base-path", str(stack["elsewhere"] / "alpha"), "--work-dir",
                     str(stack["work"])])
    listener.close()
    assert at_push == [(["first", "alpha"], ["first", "alpha"])]  # the file said what was pushed, first
    assert names_in(stack["config"]) == ["first", "alpha"]


def _promote_while_another_command_writes(stack, monkeypatch, change) -> int:
    """`rollout promote m` reads the file, then waits for the lock a holder has; the holder ``change``s the file."""
    work = str(stack["work"])
    base = user_model(stack["elsewhere"], "m", versions=(1, 2))
    assert config_main(["add", "m", "--base-path", str(base), "--work-dir", work, "--version", "1"]) == 0
    assert rollout_main(["canary", "m", "2", "--work-dir", work, "--timeout", "30"]) == 0
    served = served_config(work_dir=stack["work"])
    holding, release, waiting = threading.Event(), threading.Event(), threading.Event()
    holder = ConfigLock.holder
    monkeypatch.setattr(ConfigLock, "holder", lambda self: (waiting.set(), holder(self))[1])
    code = {}

    def first():
        with served.lock().hold(30):
            holding.set()
            release.wait(30)
            served.write(change(served.load()))

    one = threading.Thread(target=first)
    one.start()
    assert holding.wait(30)
    two = threading.Thread(target=lambda: code.setdefault("promote", rollout_main(
        ["promote", "m", "--work-dir", work, "--timeout", "30"])))
    two.start()
    assert waiting.wait(30)
    release.set()
    one.join()
    two.join()
    return code["promote"]


def test_a_move_whose_model_another_command_changed_meanwhile_is_refused_with_exit_4(stack, monkeypatch, capsys):
    def roll_back_m(config):
        entry = next(e for e in config.model_config_list.config if e.name == "m")
        entry.version_labels["canary"] = 1
        return config

    assert _promote_while_another_command_writes(stack, monkeypatch, roll_back_m) == ROLLOUT_EXIT_STALE
    assert "nothing was sent" in capsys.readouterr().err
    entry = next(e for e in load_model_server_config(stack["config"]).model_config_list.config if e.name == "m")
    assert dict(entry.version_labels) == {"stable": 1, "canary": 1}  # the other command's change stands


def test_a_move_planned_again_keeps_another_models_change(stack, monkeypatch):
    assert _promote_while_another_command_writes(
        stack, monkeypatch, lambda config: remove_steps(config, "first")[-1].config) == 0
    config = load_model_server_config(stack["config"])
    assert [e.name for e in config.model_config_list.config] == ["m"]
    assert dict(config.model_config_list.config[0].version_labels) == {"stable": 2, "canary": 2}
