"""SystematicSampler keeps exactly floor(N * rate) of N requests, from any number of threads."""
from __future__ import annotations

import threading

import pytest

from serving.capture import SystematicSampler


@pytest.mark.parametrize("rate, shown, kept", [(0.1, 1000, 100), (0.37, 1000, 370), (0.0, 50, 0), (1.0, 50, 50),
                                               (0.5, 7, 3), (1 / 3, 9, 3)])
def test_keeps_exactly_rate_of_the_requests(rate, shown, kept):
    sampler = SystematicSampler(rate)
    assert sum(sampler.sample() for _ in range(shown)) == kept


def test_keeps_evenly_spaced_requests():
    sampler = SystematicSampler(0.25)
    assert [sampler.sample() for _ in range(8)] == [False, False, False, True] * 2


def test_exact_across_threads():
    sampler = SystematicSampler(0.1)
    counts = [0] * 4
    start = threading.Event()

    def worker(t: int) -> None:
        start.wait()
        counts[t] = sum(sampler.sample() for _ in range(2500))

    threads = [threading.Thread(target=worker, args=(t,)) for t in range(4)]
    for thread in threads:
        thread.start()
    start.set()
    for thread in threads:
        thread.join()
    assert sum(counts) == 1000


@pytest.mark.parametrize("rate", [-0.1, 1.5, float("nan")])
def test_rate_outside_0_to_1_is_refused(rate):
    with pytest.raises(ValueError, match="sample rate must be between 0 and 1"):
        SystematicSampler(rate)
