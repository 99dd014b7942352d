"""Load shapes for the ramp and spike scenarios (stages scaled to the run).

Imports locust; only locustfiles import this module.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional, Sequence

from locust import LoadTestShape

__all__ = ["Stage", "StagesShape", "add_shape_arguments", "parse_stages", "ramp_stages", "spike_stages"]


def add_shape_arguments(parser) -> None:
    """Register ``--stages`` and ``--baseline-users`` (an ``init_command_line_parser`` listener)."""
    group = parser.add_argument_group("tfs-stack load shape")
    group.add_argument("--stages", default="", env_var="LOCUST_STAGES",
                       help="explicit stages until_s:users[:spawn_rate],... (default: scaled to --run-time/-u)")
    group.add_argument("--baseline-users", type=int, default=0, env_var="LOCUST_BASELINE_USERS",
                       help="spike scenario: users before and after the spike (default: users/4)")


@dataclass(frozen=True)
class Stage:
    """Hold ``users`` (reached at ``spawn_rate`` users/s) until ``until`` seconds into the run."""

    until: float
    users: int
    spawn_rate: float


def parse_stages(text: str) -> list[Stage]:
    """``"10:2,20:8:4,30:2"`` → stages ``until:users[:spawn_rate]`` (spawn rate defaults to users/s)."""
    stages = []
    for item in filter(None, (part.strip() for part in text.split(","))):
        fields = item.split(":")
        if len(fields) not in (2, 3):
            raise ValueError(f"a stage is until:users[:spawn_rate], got {item!r}")
        until, users = float(fields[0]), int(fields[1])
        rate = float(fields[2]) if len(fields) == 3 else float(max(users, 1))
        stages.append(Stage(until, users, rate))
    if [s.until for s in stages] != sorted(s.until for s in stages):
        raise ValueError("stage end times must increase")
    return stages


def ramp_stages(run_time: float, peak_users: int, steps: int = 4) -> list[Stage]:
    """Equal steps up to ``peak_users``; the last step holds the peak."""
    return [Stage(run_time * (i + 1) / steps, max(1, round(peak_users * (i + 1) / steps)), float(peak_users))
            for i in range(steps)]


def spike_stages(run_time: float, peak_users: int, baseline_users: int) -> list[Stage]:
    """Baseline, a sudden spike to ``peak_users`` from 40 % to 60 % of the run, baseline again."""
    spike_rate = float(max(peak_users, 1) * 10)
    return [Stage(run_time * 0.4, baseline_users, float(baseline_users)),
            Stage(run_time * 0.6, peak_users, spike_rate),
            Stage(run_time, baseline_users, spike_rate)]


class StagesShape(LoadTestShape):
    """Follows ``stages``; stops after the last one. Subclasses build them in ``build_stages``."""

    abstract = True
    use_common_options = True

    def __init__(self) -> None:
        super().__init__()
        self._stages: Optional[Sequence[Stage]] = None

    def build_stages(self, options) -> list[Stage]:
        raise NotImplementedError

    def tick(self):
        if self._stages is None:
            options = self.runner.environment.parsed_options if self.runner is not None else None
            if options is None:   # locust sets both before the first tick of a run it started
                raise RuntimeError(f"{type(self).__name__} reads its stages from locust's options: run it under "
                                   "the locust CLI")
            self._stages = parse_stages(options.stages) if options.stages else self.build_stages(options)
        elapsed = self.get_run_time()
        for stage in self._stages:
            if elapsed < stage.until:
                return stage.users, stage.spawn_rate
        return None
