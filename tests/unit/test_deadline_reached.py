"""Deadline.reached: a socket time-out as long as the request's deadline can end the request a moment before
the deadline's timer fires (on a busy machine); the request still had no complete answer within it, and the
registry client says so (it said "no answer", as if nothing had arrived, under load: tests/engine/test_deadlines.py)."""

from __future__ import annotations

from buildkit.core.deadline import Deadline


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_reached_when_the_time_has_passed_before_the_timer_fired(monkeypatch):
    clock = Clock()
    monkeypatch.setattr("buildkit.core.deadline.time.monotonic", clock)
    cuts: list[int] = []
    deadline = Deadline(60.0, lambda: cuts.append(1))
    assert not deadline.reached  # not started
    with deadline:
        clock.now += 59.9
        assert not deadline.reached and not deadline.expired
        clock.now += 0.1
        assert deadline.reached and not deadline.expired and not cuts  # the timer has not fired


def test_reached_when_the_timer_fired():
    deadline = Deadline(0.0, lambda: None)
    with deadline:
        deadline._timer.join(5)
    assert deadline.expired and deadline.reached
