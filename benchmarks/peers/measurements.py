"""What a peers run measured, typed: the JSON that ``--json`` writes and ``--render`` reads is
``Measurements.to_json()`` (plus ``loadtest compare``'s series), read back by ``from_json``."""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any, Mapping, Optional

__all__ = ["Machine", "Measurements", "Point", "ServerRecord", "Settings"]


@dataclass
class Point:
    """One timed window: successful requests/s, p50/p99 ms, the server tree's CPU-ms per request."""

    rps: float
    p50_ms: Optional[float]
    p99_ms: Optional[float]
    cpu_ms: Optional[float]
    requests: int
    errors: int = 0


@dataclass
class ServerRecord:
    """One server of one model over the rounds: its points (``rest c=32``: one per round) and its starts."""

    points: dict[str, list[Point]] = field(default_factory=dict)
    cold_start_s: list[float] = field(default_factory=list)
    rss_mb: list[float] = field(default_factory=list)
    rss_anon_mb: list[float] = field(default_factory=list)


@dataclass
class Machine:
    cpu: str = "?"
    cores: int = 2
    python: str = "?"
    load_before: Optional[float] = None
    load_after: Optional[float] = None


@dataclass
class Settings:
    command: str = "?"
    rounds: int = 0
    models: list[str] = field(default_factory=list)
    peers: list[str] = field(default_factory=list)
    duration_s: float = 0.0
    resnet50_duration_s: float = 0.0
    warmup_s: float = 0.0
    batching_file: str = "?"
    batch_timeout_micros: int = 0


@dataclass
class Measurements:
    machine: Machine = field(default_factory=Machine)
    settings: Settings = field(default_factory=Settings)
    servers: dict[str, dict[str, ServerRecord]] = field(default_factory=dict)   # model -> server -> record
    in_process: dict[str, dict[str, list[float]]] = field(default_factory=dict)  # model -> "b1 t2" -> rows/s
    skipped: dict[str, str] = field(default_factory=dict)                       # "server/model" -> why

    def server(self, model: str, name: str) -> ServerRecord:
        """The record of ``name`` serving ``model``, made empty the first time."""
        return self.servers.setdefault(model, {}).setdefault(name, ServerRecord())

    def points(self, model: str, server: str, key: str) -> list[Point]:
        record = self.servers.get(model, {}).get(server)
        return record.points.get(key, []) if record else []

    def to_json(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> "Measurements":
        """A recorded run; fields it lacks take their defaults."""
        def record(entry: Mapping[str, Any]) -> ServerRecord:
            return ServerRecord({key: [Point(**p) for p in rounds] for key, rounds in entry.get("points", {}).items()},
                                *(list(entry.get(name, [])) for name in ("cold_start_s", "rss_mb", "rss_anon_mb")))

        return cls(Machine(**data.get("machine", {})), Settings(**data.get("settings", {})),
                   {model: {name: record(entry) for name, entry in servers.items()}
                    for model, servers in data.get("servers", {}).items()},
                   {model: {k: list(v) for k, v in local.items()} for model, local in data.get("in_process", {}).items()},
                   dict(data.get("skipped", {})))
