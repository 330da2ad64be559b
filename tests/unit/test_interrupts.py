"""core/interrupts.py with real signals sent to this process (the main thread): SIGTERM and SIGHUP raise
like Ctrl-C, a signal ignored at start stays ignored (nohup), one that comes during a deferred cleanup
raises when the cleanup is done, and only the first signal raises."""

from __future__ import annotations

import os
import signal

import pytest

from buildkit.core import interrupts
from buildkit.core.interrupts import Interrupted


def _send(sig: int) -> None:
    os.kill(os.getpid(), sig)  # delivered before kill() returns; the handler runs before the next line


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM, signal.SIGHUP])
def test_each_signal_raises_interrupted_with_its_exit_code(sig) -> None:
    # as a shell's foreground job has it: a background job (`cmd &`) inherits SIGINT ignored, which
    # as_exceptions rightly keeps (the nohup test below)
    old = signal.signal(sig, signal.default_int_handler if sig == signal.SIGINT else signal.SIG_DFL)
    try:
        with pytest.raises(Interrupted) as caught, interrupts.as_exceptions():
            _send(sig)
    finally:
        signal.signal(sig, old)
    assert caught.value.signum == sig and interrupts.exit_code(caught.value) == 128 + sig
    assert interrupts.describe(caught.value) == ("interrupted" if sig == signal.SIGINT
                                                 else f"interrupted by {signal.Signals(sig).name}")
    assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL  # the handlers are put back


def test_a_signal_ignored_at_start_stays_ignored() -> None:
    old = signal.signal(signal.SIGHUP, signal.SIG_IGN)  # as under nohup
    try:
        with interrupts.as_exceptions():
            assert signal.getsignal(signal.SIGHUP) is signal.SIG_IGN
            _send(signal.SIGHUP)  # nothing happens
    finally:
        signal.signal(signal.SIGHUP, old)


def test_a_deferred_cleanup_finishes_and_only_the_first_signal_raises() -> None:
    done = []
    with pytest.raises(Interrupted) as caught, interrupts.as_exceptions():
        with interrupts.deferred():
            _send(signal.SIGTERM)
            done.append("cleanup")
            _send(signal.SIGHUP)  # a second one: the first is what counts
        done.append("not reached")
    assert done == ["cleanup"] and caught.value.signum == signal.SIGTERM
    assert interrupts.received() == signal.SIGTERM
