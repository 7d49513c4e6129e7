"""Rates shown by the management API (``*_details.rate``), from samples taken at each read."""

from __future__ import annotations

from management.rates import Rates


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_first_read_is_zero_then_change_per_second() -> None:
    clock = Clock()
    rates = Rates(window=10.0, clock=clock)
    assert rates.rate("q", 0) == 0.0
    clock.now += 2.0
    assert rates.rate("q", 30) == 15.0  # 30 messages in 2 s
    clock.now += 2.0
    assert rates.rate("q", 40) == 10.0  # since the oldest sample in the window: 40 in 4 s


def test_rate_spans_the_window_when_read_often() -> None:
    clock = Clock()
    rates = Rates(window=10.0, clock=clock)
    for second in range(30):  # 100 a second, read every second
        rates.rate("q", second * 100)
        clock.now += 1.0
    assert rates.rate("q", 3000) == 100.0


def test_rare_reads_use_the_previous_read_as_baseline() -> None:
    clock = Clock()
    rates = Rates(window=10.0, clock=clock)
    rates.rate("q", 0)
    clock.now += 60.0
    assert rates.rate("q", 600) == 10.0


def test_counters_going_down_show_zero_not_negative() -> None:
    clock = Clock()
    rates = Rates(clock=clock)
    rates.rate("messages", 500)
    clock.now += 5.0
    assert rates.rate("messages", 100) == 0.0


def test_unread_counters_are_forgotten() -> None:
    clock = Clock()
    rates = Rates(forget_after=60.0, clock=clock)
    rates.rate("gone", 1)
    clock.now += 61.0
    rates.rate("other", 1)  # triggers the sweep
    clock.now += 1.0
    assert rates.rate("gone", 50) == 0.0  # a fresh counter again
