"""The shadow canary's command-line parts: ``analyze --live DIR`` and ``auto --shadow-phase DURATION``.

A shadow canary (``python -m serving.rollout canary MODEL VERSION --shadow``)
gets a copy of the model's unlabeled REST traffic from the gateway (nginx
``mirror``, answers discarded: ``gateway/canary.py``), so it serves production
inputs at production load while every client keeps stable's answer. Whether it
answers *like* stable is judged on the same requests: ``analyze --live DIR``
tails the capture directory the traffic is recorded into and asks both labels
(``serving.rollout.live``), and the verdict is the offline analysis' own
(``serving.rollout.analyze.analyze``). ``auto --shadow-phase DURATION`` runs
that first: shadow on, a live analysis for DURATION, then the first weight step
only on PASS; a FAIL rolls back, which removes the shadow with the routes.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Callable, Optional, Sequence

from serving.rollout.analyze import Replay, Side
from serving.rollout.live import CaptureTail, LiveCounts, compare_live, parse_duration

__all__ = ["add_live_options", "add_shadow_phase_options", "live_replay"]


def _duration(text: str) -> float:
    try:
        return parse_duration(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _positive(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"a count is a whole number, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"a count is at least 1, got {text!r}")
    return value


def add_live_options(p: argparse.ArgumentParser, *, duration: bool = True) -> None:
    """``--live DIR`` and how long it runs (``auto`` takes the duration from ``--shadow-phase``)."""
    live = p.add_argument_group("live analysis (a capture directory being written: docs/rollout.md, shadow canary)")
    live.add_argument("--live", metavar="DIR", default=None,
                      help="compare stable and canary on the model's requests as they are captured into DIR (its "
                           "unlabeled Predicts of --signature, each asked of both labels) instead of --inputs")
    if duration:
        live.add_argument("--duration", type=_duration, default=None, metavar="DURATION",
                          help="with --live: stop after this long (90, 90s, 10m, 1h)")
    live.add_argument("--requests", type=_positive, default=None, metavar="N",
                      help="with --live: stop after N compared requests")
    live.add_argument("--concurrency", type=_positive, default=4, metavar="N",
                      help="with --live: requests compared at once (default 4; past N and a backlog of 64 a "
                           "captured request is skipped and counted)")
    live.add_argument("--from-start", action="store_true",
                      help="with --live: also compare what DIR held before the analysis started")


def add_shadow_phase_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--shadow-phase", type=_duration, default=None, metavar="DURATION",
                   help="before the first weight step: shadow the canary (the gateway mirrors --shadow percent of "
                        "the unlabeled traffic to it) and analyze live (--live DIR) for DURATION; only a PASS goes "
                        "on to the weights, a FAIL rolls back")
    p.add_argument("--shadow", type=float, default=100.0, metavar="PERCENT",
                   help="with --shadow-phase: the share of unlabeled traffic mirrored (default 100)")
    add_live_options(p, duration=False)


def check_live_args(args: argparse.Namespace, error: Callable[[str], None]) -> None:
    """Refuse contradictory live/shadow flags before anything moves."""
    live = getattr(args, "live", None)
    if args.command == "analyze" and live and getattr(args, "duration", None) is None and args.requests is None:
        error("--live needs a stop condition: --duration DURATION or --requests N")
    if args.command == "analyze" and not live and (getattr(args, "duration", None) or args.requests):
        error("--duration and --requests are --live's stop conditions")
    if live and not Path(live).is_dir():
        error(f"--live {live}: no such directory (the capture directory the gateway's or the server's request "
              "capture writes)")
    if args.command == "auto" and args.shadow_phase and not live:
        error("--shadow-phase needs --live DIR: the capture directory the live analysis reads")
    if args.command == "auto" and not 0 < args.shadow <= 100:
        error(f"--shadow is a percentage in (0, 100], got {args.shadow:g}")


def live_replay(args: argparse.Namespace, sides: Sequence[Side], *, duration: Optional[float] = None,
                echo: Callable[[str], None] = lambda line: print(line, file=sys.stderr)) -> Replay:
    """One live comparison with the CLI's flags; its counts are printed (stderr: --json stays one document)."""
    tail = CaptureTail(args.live, from_start=args.from_start)
    seconds = duration if duration is not None else getattr(args, "duration", None)
    echo(f"{args.model}: live analysis of {args.live}" + (f" for {seconds:g} s" if seconds else "")
         + (f", up to {args.requests} requests" if args.requests else ""))
    replayed, counts = compare_live(args.model, sides, tail, signature=args.signature, rounds=args.rounds,
                                    concurrency=args.concurrency, duration=seconds, max_requests=args.requests)
    echo(_summary(counts))
    return replayed


def _summary(counts: LiveCounts) -> str:
    skipped = ", ".join(f"{n} {why}" for why, n in sorted(counts.skipped.items()))
    return (f"live: {counts.records} captured records read, {counts.compared} compared"
            + (f"; not compared: {skipped}" if skipped else "")
            + (f"; {counts.bad_records} records with a bad checksum skipped" if counts.bad_records else ""))
