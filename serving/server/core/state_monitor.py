"""Every state a version was published in, as ``GetModelStatus`` reports it.

Mirrors TF Serving's ``ServableStateMonitor``: the last state of every
version ever managed (END ones included), and waiting until models reach
AVAILABLE or END (``ServerCore::WaitUntilModelsAvailable``).

Thread-safety: guarded by the condition passed in (the manager's); methods
marked "caller holds the lock" must be called inside ``with condition``.
"""
from __future__ import annotations

import threading
import time
from typing import Callable, Optional, Sequence

from serving import status
from serving.codec import VersionState, VersionStatus

__all__ = ["ServableStateMonitor"]

_WAIT_POLL_S = 0.5
_STOP_POLL_S = 0.1   # how soon a waiter notices that its caller has gone


class ServableStateMonitor:
    """Published version states, with a sequence number to tell fresh events from old ones."""

    def __init__(self, condition: threading.Condition) -> None:
        self._cond = condition
        self._states: dict[str, dict[int, tuple[VersionStatus, int]]] = {}
        self._seq = 0
        self._closed = False
        # Versions refused for good (``retryable`` False: quarantined), which the source aspires beside the
        # versions that serve instead: a wait looks past them to the version below, and a model that has
        # nothing else does not fail the wait (one crashed version never stops the others from starting).
        self._stepped_around: set[tuple[str, int]] = set()

    def close(self) -> None:
        """Make current and future waits fail with CANCELLED. Caller holds the lock."""
        self._closed = True
        self._cond.notify_all()

    def reopen(self) -> None:
        """Allow waiting again (the manager restarted). Caller holds the lock."""
        self._closed = False

    def publish(self, name: str, version: int, state: VersionState,
                error: Optional[status.ServingError] = None) -> None:
        """Record a state change and wake waiters. Caller holds the lock."""
        self._seq += 1
        entry = VersionStatus(version, state, error.code if error else status.Code.OK,
                              error.details if error else "")
        self._states.setdefault(name, {})[version] = (entry, self._seq)
        if error is not None and not getattr(error, "retryable", True):
            self._stepped_around.add((name, version))
        self._cond.notify_all()

    def checkpoint(self) -> int:
        """A mark; ``wait_until_models_available`` only counts events after it. Caller holds the lock."""
        return self._seq

    def version_states(self, name: str) -> dict[int, VersionStatus]:
        """version -> last published status. Caller holds the lock."""
        return {version: entry for version, (entry, _) in self._states.get(name, {}).items()}

    def is_available(self, name: str, version: int) -> bool:
        """Caller holds the lock."""
        entry = self._states.get(name, {}).get(int(version))
        return entry is not None and entry[0].state is VersionState.AVAILABLE

    def wait_until_models_available(self, names: Sequence[str], since: int,
                                     timeout: Optional[float] = None,
                                     stop: Optional[Callable[[], Optional[status.ServingError]]] = None,
                                     noun: str = "model") -> None:
        """Wait until each model's latest version published after ``since`` is AVAILABLE or END.

        Takes the lock itself. Raises ``status.Unknown`` with ServerCore's
        message if some ended in error, ``status.DeadlineExceeded`` after
        ``timeout`` seconds (None = no limit), ``status.Cancelled`` once closed,
        and whatever ``stop()`` returns once it returns an error (it is asked
        under the lock, at each wake-up and every ``_STOP_POLL_S``). ``noun`` names
        what did not become available: "model", or "servable" for the first config
        (``load_servables_fast.cc``'s wording).
        """
        deadline = None if timeout is None else time.monotonic() + timeout
        poll = _WAIT_POLL_S if stop is None else _STOP_POLL_S
        with self._cond:
            while True:
                pending, failed = self._latest_outcomes(names, since)
                if not pending:
                    break
                if self._closed:
                    raise status.Cancelled(
                        f"Stopped while waiting for model(s) to load: {', '.join(pending)}")
                reason = stop() if stop is not None else None
                if reason is not None:
                    raise reason
                remaining = None if deadline is None else deadline - time.monotonic()
                if remaining is not None and remaining <= 0:
                    raise status.DeadlineExceeded(
                        f"Timed out waiting for model(s) to load: {', '.join(pending)}")
                self._cond.wait(poll if remaining is None else min(remaining, poll))
        if failed:
            details = "".join(
                f"{{{{name: {name} version: {st.version}}}{_due_to(st)}}}, " for name, st in failed)
            raise status.Unknown(f"{len(failed)} {noun}(s) did not become available: {{{details}}}")

    def _latest_outcomes(self, names: Sequence[str], since: int) -> tuple[list, list]:
        pending, failed = [], []
        for name in names:
            seen = {v: st for v, (st, seq) in self._states.get(name, {}).items() if seq > since}
            fresh = {v: st for v, st in seen.items() if (name, v) not in self._stepped_around}
            if seen and not fresh:
                continue   # only quarantined versions: reported in its status, the start goes on
            latest = fresh[max(fresh)] if fresh else None
            if latest is None or latest.state not in (VersionState.AVAILABLE, VersionState.END):
                pending.append(name)
            elif latest.state is VersionState.END:
                failed.append((name, latest))
        return pending, failed


def _due_to(entry: VersionStatus) -> str:
    if entry.error_code == status.Code.OK:
        return ""
    return f" due to error: {entry.error_code.name}: {entry.error_message}"
