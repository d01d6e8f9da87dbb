"""The clock and sleep the ID generators read, and how tests replace them.

Both generators take ``clock``: a zero-argument callable returning integer
milliseconds since the Unix epoch. The Snowflake generator also takes ``sleep``,
called with seconds like :func:`time.sleep`, whenever it must wait for the clock.
A test passes a fake clock whose ``sleep`` advances it, and replays clock jumps
exactly, without real waiting.
"""

from __future__ import annotations

import time
from collections.abc import Callable

__all__ = ["Clock", "Sleep", "system_clock_ms"]

Clock = Callable[[], int]
"""Returns integer milliseconds since 1970-01-01T00:00:00Z."""

Sleep = Callable[[float], object]
"""Blocks for (at least) the given number of seconds, like :func:`time.sleep`."""

_time_ns = time.time_ns


def system_clock_ms() -> int:
    """Return the wall clock in integer milliseconds since the Unix epoch.

    Built on :func:`time.time_ns` (no float rounding). The wall clock can step
    backwards (NTP, VM migration); the generators, not this function, deal with it.
    """
    return _time_ns() // 1_000_000
