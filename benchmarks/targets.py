"""The benchmarks' targets, each stated once, and the PASS/FAIL line every benchmark prints.

Batching is measured by ``benchmarks.server``, ``benchmarks.batching`` and ``benchmarks.peers``;
all three hold it to the same limits. What was measured on the 2-core development machine
decided them (docs/operations.md lists the numbers): on the tiny digits model the Python gRPC
front-end, not the model, bounds throughput (``benchmarks.server`` prints the most any batching
server could reach there) and batching cost throughput; so the target there is that batching never
costs (>= 1.0x), not a gain. On resnet50, where the model's cost dominates, batching must gain 10 %.

The other limits are each benchmark's own, named here so that no two benchmarks state one apart.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

__all__ = ["BATCHING_ADDED_P50_MS", "BATCHING_GAIN_LARGE", "BATCHING_GAIN_SMALL", "GATEWAY_ADDED_P50_MS",
           "GATEWAY_THROUGHPUT", "GRPC_CLIENT_OVER_REST_CLIENT", "REVISION_THROUGHPUT", "GRPC_SERVER_CPU_OVER_REST", "SERVED_OVER_IN_PROCESS",
           "SERVER_ADDED_P50_MS", "Target", "print_verdicts"]

BATCHING_GAIN_SMALL = 1.0
"""digits (a small model) at high concurrency: requests/s with batching over without, at least."""
BATCHING_GAIN_LARGE = 1.1
"""resnet50 (a large model) gRPC at c=8: requests/s with batching over without, at least."""
BATCHING_ADDED_P50_MS = 0.5
"""At c=1, batching adds at most ``batch_timeout_micros`` plus this many ms to p50."""
GRPC_SERVER_CPU_OVER_REST = 1.0
"""digits: the server's CPU per gRPC request over per REST request, at most (``benchmarks.protocols``)."""
GRPC_CLIENT_OVER_REST_CLIENT = 1.0
"""digits: the SDK's ``GrpcClient`` requests/s over ``RestClient``'s, at least (``benchmarks.protocols``)."""
SERVED_OVER_IN_PROCESS = 0.9
"""resnet50: gRPC with batching over the model in-process at its best batch size (rows/s), at least
(``benchmarks.server``)."""
SERVER_ADDED_P50_MS = 2.0
"""digits at c=1: the server's p50 minus the in-process p50 at batch 1, at most (``benchmarks.server``)."""
GATEWAY_THROUGHPUT = 0.9
"""digits at c=32: requests/s through the gateway over straight to tfserving, at least (``benchmarks.gateway``)."""
GATEWAY_ADDED_P50_MS = 1.0
"""digits at c=1: the p50 the gateway adds, at most (``benchmarks.gateway``)."""
REVISION_THROUGHPUT = 0.97
"""digits at c=32: this tree's requests/s over a base revision's, at least, per protocol: a change costs no
more than 3 % throughput (``benchmarks.revisions``)."""


@dataclass
class Target:
    name: str
    ratio: float
    limit: float
    higher_is_better: bool = True
    unit: str = "x"

    @property
    def passed(self) -> bool:
        if self.ratio != self.ratio:  # NaN: not measured, never a pass
            return False
        return self.ratio >= self.limit if self.higher_is_better else self.ratio <= self.limit

    def verdict(self) -> str:
        """``PASS  name: ratio (target >= limit)``, or FAIL."""
        sign = ">=" if self.higher_is_better else "<="
        return (f"{'PASS' if self.passed else 'FAIL'}  {self.name}: {self.ratio:.2f}{self.unit} "
                f"(target {sign} {self.limit}{self.unit})")


def print_verdicts(targets: Sequence[Target], remarks: Sequence[str] = ()) -> None:
    """A blank line, one PASS/FAIL line per target, then the remarks."""
    print()
    for t in targets:
        print(t.verdict())
    for remark in remarks:
        print(remark)
