"""SystematicSampler: keeps exactly ``rate`` of the requests it is shown, evenly spaced."""
from __future__ import annotations

import itertools
import threading
from fractions import Fraction

__all__ = ["SystematicSampler", "check_sample_rate"]


def check_sample_rate(rate: float) -> float:
    """``rate`` as a float in [0, 1]; ValueError otherwise (NaN too)."""
    value = float(rate)
    if not 0.0 <= value <= 1.0:
        raise ValueError(f"sample rate must be between 0 and 1, got {rate}")
    return value


class SystematicSampler:
    """Keeps request n (counting from 0) when ``floor((n+1)*rate) > floor(n*rate)``.

    Of any first N requests exactly ``floor(N*rate)`` are kept (``rate`` read
    as a fraction with a denominator up to 10**6), spread evenly, so counts
    are exact in tests and a burst is sampled as evenly as steady traffic.
    Thread-safe.
    """

    def __init__(self, rate: float):
        self.rate = check_sample_rate(rate)
        fraction = Fraction(self.rate).limit_denominator(10**6)
        self._num, self._den = fraction.numerator, fraction.denominator
        self._counter = itertools.count()
        self._lock = threading.Lock()

    def sample(self) -> bool:
        """Whether to keep the next request."""
        if self._num == 0:
            return False
        if self._num == self._den:
            return True
        with self._lock:
            n = next(self._counter)
        return ((n + 1) * self._num) // self._den > (n * self._num) // self._den
