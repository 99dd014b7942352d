"""The exporter's progress: one plain line per step where the stream is not a terminal, a bar where it is."""
from __future__ import annotations

import io

from exporter.progress import Steps


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def _run(steps: Steps, names: list[str]) -> None:
    for name in names:
        with steps(name):
            pass
    steps.close()


def test_a_log_that_is_no_terminal_gets_one_line_per_step_and_no_carriage_returns():
    log = io.StringIO()
    _run(Steps("digits", True, 3, stream=log), ["load", "fp32: save", "fp32: publish"])
    lines = log.getvalue().splitlines()
    assert "\r" not in log.getvalue() and len(lines) == 3
    assert lines[0].startswith("export digits: step 1/3 load (") and lines[0].endswith(" s)")
    assert lines[2].startswith("export digits: step 3/3 fp32: publish (")


def test_a_terminal_gets_the_bar():
    terminal = _Terminal()
    _run(Steps("digits", True, 2, stream=terminal), ["load", "save"])
    assert "\r" in terminal.getvalue() and "2/2" in terminal.getvalue()


def test_disabled_progress_prints_nothing_anywhere():
    log, terminal = io.StringIO(), _Terminal()
    _run(Steps("digits", False, 2, stream=log), ["load", "save"])
    _run(Steps("digits", False, 2, stream=terminal), ["load", "save"])
    assert log.getvalue() == terminal.getvalue() == ""
