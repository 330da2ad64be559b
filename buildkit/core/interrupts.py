"""SIGINT, SIGTERM and SIGHUP end buildkit the same way: as an exception (`Interrupted`, a
KeyboardInterrupt), so every `finally` and every cleanup of a child runs, whichever signal it was
(a Ctrl-C, a CI cancel, `timeout`, a closed terminal). The CLI turns it into one line and the exit
code 128 + the signal's number (130, 143, 129).

Only the first signal raises: one that comes while buildkit cleans up is ignored, so the cleanup
finishes. A signal that was ignored when buildkit started (`nohup` ignores SIGHUP, a shell's
background job SIGINT) stays ignored. Handlers are set only in the main thread.
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from types import FrameType
from typing import TypedDict

SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


class Interrupted(KeyboardInterrupt):
    """buildkit was told to stop by signal `signum`."""

    def __init__(self, signum: int = signal.SIGINT) -> None:
        super().__init__(signum)
        self.signum = signum


def signal_of(exc: BaseException) -> int:
    """The signal a KeyboardInterrupt stands for (a plain one is Ctrl-C)."""
    return getattr(exc, "signum", signal.SIGINT)


def describe(exc: BaseException) -> str:
    """`interrupted` for Ctrl-C, `interrupted by SIGTERM` for the others."""
    signum = signal_of(exc)
    return "interrupted" if signum == signal.SIGINT else f"interrupted by {signal.Signals(signum).name}"


def exit_code(exc: BaseException) -> int:
    return 128 + signal_of(exc)


class _State(TypedDict):
    installed: bool
    raised: int  # the signal raised (0: none yet)
    deferred: int | None  # within deferred(): the signal that came (0: none yet); None outside


_state: _State = {"installed": False, "raised": 0, "deferred": None}


def received() -> int:
    """The signal that was raised as Interrupted (0 when none was)."""
    return _state["raised"]


def _handler(signum: int, frame: FrameType | None) -> None:
    if _state["raised"]:
        return
    if _state["deferred"] is not None:
        _state["deferred"] = _state["deferred"] or signum
        return
    _state["raised"] = signum
    raise Interrupted(signum)


@contextmanager
def as_exceptions() -> Iterator[None]:
    """Within the block, SIGINT, SIGTERM and SIGHUP raise Interrupted (re-entrant; main thread only)."""
    if threading.current_thread() is not threading.main_thread() or _state["installed"]:
        yield
        return
    old = {sig: signal.signal(sig, _handler) for sig in SIGNALS if signal.getsignal(sig) is not signal.SIG_IGN}
    _state.update({"installed": True, "raised": 0, "deferred": None})
    try:
        yield
    finally:
        for sig, handler in old.items():
            signal.signal(sig, handler)
        _state.update({"installed": False, "deferred": None})


@contextmanager
def deferred() -> Iterator[None]:
    """A signal that comes within the block (a cleanup that must not be cut short) raises at its end."""
    if not _state["installed"] or _state["deferred"] is not None or \
            threading.current_thread() is not threading.main_thread():
        yield
        return
    _state["deferred"] = 0
    try:
        yield
    finally:
        signum, _state["deferred"] = _state["deferred"], None
        if signum and not _state["raised"]:
            _state["raised"] = signum
            raise Interrupted(signum)
