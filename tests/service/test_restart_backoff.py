"""A crashed part waits before its restart: doubling from the first delay, at most the
longest, and from the first again after a run long enough."""

from __future__ import annotations

from moonish.service.backoff import Backoff


def test_delays_double_up_to_the_longest_and_reset_after_a_long_run() -> None:
    backoff = Backoff(initial_ms=100, max_ms=1000, reset_ms=5000)
    assert [backoff.delay_ms(10) for _ in range(6)] == [100, 200, 400, 800, 1000, 1000]
    assert backoff.delay_ms(5000) == 100
    assert backoff.delay_ms(4999) == 200


def test_a_zero_delay_stays_zero() -> None:
    backoff = Backoff(initial_ms=0, max_ms=0, reset_ms=0)
    assert [backoff.delay_ms(0) for _ in range(3)] == [0, 0, 0]
