"""Snowflake IDs: 64-bit ints made of time, worker and sequence, layout configurable.

Default layout (Twitter's), most significant first::

    0 (sign) | timestamp (41, ms since epoch) | worker (10) | sequence (12)

The default epoch is Twitter's, 1288834974657 (2010-11-04T01:42:54.657Z): IDs then
decode with the many existing Twitter-style tools, and 41 bits of milliseconds
last until 2080-07-10. A project epoch would buy years we do not need and cost
that interoperability.

Every layout fits in 63 bits, so IDs are positive signed int64 values (Kafka,
Avro ``long``, SQL ``BIGINT``, Java ``long`` all hold them).
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone

from streams.core.errors import (
    ClockMovedBackwardsError,
    ConfigError,
    IdSpaceExhaustedError,
    InvalidArgumentError,
)
from streams.core.ids._common import reset_after_fork
from streams.core.ids.clock import Clock, Sleep
from streams.core.validate import require_int

__all__ = [
    "SnowflakeLayout",
    "Snowflake",
    "TWITTER_EPOCH_MS",
    "DISCORD_EPOCH_MS",
    "SONYFLAKE_EPOCH_MS",
    "TWITTER_LAYOUT",
    "DISCORD_LAYOUT",
    "SONYFLAKE_LAYOUT",
    "DEFAULT_SNOWFLAKE_LAYOUT",
]

TWITTER_EPOCH_MS = 1288834974657  # 2010-11-04T01:42:54.657Z
DISCORD_EPOCH_MS = 1420070400000  # 2015-01-01T00:00:00Z
SONYFLAKE_EPOCH_MS = 1409529600000  # 2014-09-01T00:00:00Z

_UNIX_EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)


def _iso(ms: int) -> str:
    try:
        return (_UNIX_EPOCH + timedelta(milliseconds=ms)).isoformat(timespec="milliseconds")
    except OverflowError:
        return f"{ms} ms since the Unix epoch"


@dataclass(frozen=True, slots=True)
class SnowflakeLayout:
    """How a Snowflake ID's 63 usable bits are shared, and what time zero is.

    Fields are laid out, most significant first, as timestamp | worker | sequence,
    or timestamp | sequence | worker when ``sequence_before_worker`` is true (the
    Sonyflake order). The timestamp counts ``time_unit_ms`` units since
    ``epoch_ms`` (milliseconds since the Unix epoch).

    Raises:
        ConfigError: a field is not an int (bools refused) or out of range, or the
            three widths add up to more than 63 bits. The message names the field.
    """

    timestamp_bits: int
    worker_bits: int
    sequence_bits: int
    epoch_ms: int
    time_unit_ms: int = 1
    sequence_before_worker: bool = field(default=False, kw_only=True)

    def __post_init__(self) -> None:
        require_int("timestamp_bits", self.timestamp_bits, 1, 63)
        require_int("worker_bits", self.worker_bits, 0, 62)
        require_int("sequence_bits", self.sequence_bits, 0, 62)
        total = self.timestamp_bits + self.worker_bits + self.sequence_bits
        if total > 63:
            raise ConfigError(
                "timestamp_bits + worker_bits + sequence_bits must be <= 63 so IDs are "
                f"positive signed int64, got {self.timestamp_bits} + {self.worker_bits} "
                f"+ {self.sequence_bits} = {total}"
            )
        require_int("epoch_ms", self.epoch_ms, 0)
        require_int("time_unit_ms", self.time_unit_ms, 1)
        if type(self.sequence_before_worker) is not bool:
            raise ConfigError(f"sequence_before_worker must be a bool, got {self.sequence_before_worker!r}")

    @property
    def total_bits(self) -> int:
        """Bits an ID of this layout uses (at most 63)."""
        return self.timestamp_bits + self.worker_bits + self.sequence_bits

    @property
    def max_worker(self) -> int:
        """Largest worker id this layout holds."""
        return (1 << self.worker_bits) - 1

    @property
    def max_sequence(self) -> int:
        """Largest sequence number: IDs per time unit per worker, minus one."""
        return (1 << self.sequence_bits) - 1

    @property
    def max_timestamp(self) -> int:
        """Largest value of the timestamp field, in time units since the epoch."""
        return (1 << self.timestamp_bits) - 1

    @property
    def timestamp_shift(self) -> int:
        """Bit position of the timestamp field."""
        return self.worker_bits + self.sequence_bits

    @property
    def worker_shift(self) -> int:
        """Bit position of the worker field."""
        return self.sequence_bits if not self.sequence_before_worker else 0

    @property
    def sequence_shift(self) -> int:
        """Bit position of the sequence field."""
        return self.worker_bits if self.sequence_before_worker else 0

    @property
    def last_ms(self) -> int:
        """The last millisecond (since the Unix epoch) this layout can encode."""
        return self.epoch_ms + (self.max_timestamp + 1) * self.time_unit_ms - 1


TWITTER_LAYOUT = SnowflakeLayout(41, 10, 12, TWITTER_EPOCH_MS)
"""Twitter's Snowflake: 41-bit ms since 2010-11-04, 10-bit worker, 12-bit sequence."""

DISCORD_LAYOUT = SnowflakeLayout(41, 10, 12, DISCORD_EPOCH_MS)
"""Discord's: ms since 2015-01-01, 5-bit worker + 5-bit process read as one
10-bit worker, 12-bit increment. Discord documents a 42-bit timestamp, but its top
bit stays 0 until 2084-09-06; 41 bits give the identical IDs while keeping them
positive int64, and the generator raises instead of setting bit 63 after that."""

SONYFLAKE_LAYOUT = SnowflakeLayout(39, 16, 8, SONYFLAKE_EPOCH_MS, 10, sequence_before_worker=True)
"""Sonyflake's: 39 bits of 10 ms units since 2014-09-01, then an 8-bit sequence,
then a 16-bit machine id (in that order, so real Sonyflake IDs parse)."""

DEFAULT_SNOWFLAKE_LAYOUT = TWITTER_LAYOUT
"""The layout used when none is given: :data:`TWITTER_LAYOUT`."""


class Snowflake:
    """Thread-safe Snowflake generator for one worker id.

    Every ID one instance returns, from any thread, is greater than every ID it
    returned before. It never returns a duplicate: when a time unit's sequence
    numbers run out it waits for the next unit, and when the clock steps back it
    waits for the clock to return, up to ``max_backwards_ms``.

    Args:
        worker_id: this process's worker (machine) id, unique among live
            generators of the same layout, in [0, layout.max_worker].
        layout: bit widths and epoch; default :data:`TWITTER_LAYOUT`.
        clock: integer milliseconds since the Unix epoch; default the system clock.
        sleep: called with seconds to wait, like :func:`time.sleep` (the default).
            It must let ``clock`` advance, or the generator waits forever.
        max_backwards_ms: how far back the clock may step and be waited out.

    Raises:
        ConfigError: ``worker_id`` or ``max_backwards_ms`` is not an int (bools
            refused) in range, ``layout`` is not a :class:`SnowflakeLayout`, or
            ``clock`` / ``sleep`` is not callable.
    """

    __slots__ = (
        "_layout",
        "_worker_id",
        "_ticks",
        "_ticks_per_ms",
        "_tick_offset",
        "_ticks_per_unit",
        "_sleep",
        "_max_backwards_ms",
        "_worker_part",
        "_timestamp_shift",
        "_sequence_shift",
        "_max_sequence",
        "_last_unit",
        "_sequence",
        "_base",
        "_lock",
        "_acquire",
        "_release",
        "__weakref__",
    )

    def __init__(
        self,
        worker_id: int,
        layout: SnowflakeLayout = DEFAULT_SNOWFLAKE_LAYOUT,
        *,
        clock: Clock | None = None,
        sleep: Sleep | None = None,
        max_backwards_ms: int = 10,
    ) -> None:
        if not isinstance(layout, SnowflakeLayout):
            raise ConfigError(f"layout must be a SnowflakeLayout, got {type(layout).__name__}")
        require_int("worker_id", worker_id, 0, layout.max_worker)
        require_int("max_backwards_ms", max_backwards_ms, 0)
        for name, value in (("clock", clock), ("sleep", sleep)):
            if value is not None and not callable(value):
                raise ConfigError(f"{name} must be callable, got {value!r}")
        self._layout = layout
        self._worker_id = worker_id
        # The clock is read in "ticks": nanoseconds from time.time_ns (no Python
        # wrapper on the hot path) or the injected clock's milliseconds.
        self._ticks: Clock = clock or time.time_ns
        self._ticks_per_ms = 1 if clock else 1_000_000
        # unit = (ticks - offset) // ticks_per_unit equals
        # ((ticks // ticks_per_ms) - epoch_ms) // time_unit_ms, in one division.
        self._tick_offset = layout.epoch_ms * self._ticks_per_ms
        self._ticks_per_unit = layout.time_unit_ms * self._ticks_per_ms
        self._sleep: Sleep = sleep or time.sleep
        self._max_backwards_ms = max_backwards_ms
        self._worker_part = worker_id << layout.worker_shift
        self._timestamp_shift = layout.timestamp_shift
        self._sequence_shift = layout.sequence_shift
        self._max_sequence = layout.max_sequence
        self._last_unit = -1  # time unit of the last ID
        self._sequence = self._max_sequence  # last sequence used in that unit: "full"
        self._base = 0  # timestamp and worker fields of the last ID
        self._new_lock()
        reset_after_fork(self)

    @property
    def layout(self) -> SnowflakeLayout:
        """The layout IDs are built with."""
        return self._layout

    @property
    def worker_id(self) -> int:
        """The worker id written into every ID."""
        return self._worker_id

    def next(self) -> int:
        """Return the next ID, an int in [0, 2**layout.total_bits).

        May sleep: until the next time unit when this one's sequence numbers are
        used up, or up to ``max_backwards_ms`` when the clock stepped back.

        Raises:
            ClockMovedBackwardsError: the clock is more than ``max_backwards_ms``
                behind the last ID's time unit (``gap_ms`` says how far).
            IdSpaceExhaustedError: the time is past what the timestamp field holds.
            ConfigError: the clock reads a time before ``layout.epoch_ms``.
        """
        self._acquire()
        try:
            ticks = self._ticks()
            unit = (ticks - self._tick_offset) // self._ticks_per_unit
            sequence = self._sequence + 1
            if unit != self._last_unit or sequence > self._max_sequence:
                self._make_room(ticks)
                sequence = self._sequence + 1
            self._sequence = sequence
            return self._base | (sequence << self._sequence_shift)
        finally:
            self._release()

    def next_batch(self, n: int) -> list[int]:
        """Return ``n`` consecutive IDs, ascending, as ints.

        The same IDs ``n`` calls to :meth:`next` would give with no other thread in
        between, built a whole time unit's run of sequence numbers at a time. At
        most ``layout.max_sequence + 1`` IDs per time unit: a large batch waits for
        the clock, like :meth:`next`.

        Raises:
            InvalidArgumentError: ``n`` is not an int >= 0 (also a ValueError).
            ClockMovedBackwardsError, IdSpaceExhaustedError, ConfigError: as :meth:`next`.
        """
        remaining = require_int("n", n, 0, error=InvalidArgumentError)
        out: list[int] = []
        step = 1 << self._sequence_shift
        max_sequence = self._max_sequence
        with self._lock:
            while remaining:
                ticks = self._ticks()
                first = self._sequence + 1
                if (ticks - self._tick_offset) // self._ticks_per_unit != self._last_unit or first > max_sequence:
                    self._make_room(ticks)
                    first = self._sequence + 1
                take = min(remaining, max_sequence - first + 1)
                start = self._base | (first << self._sequence_shift)
                out.extend(range(start, start + take * step, step))
                self._sequence = first + take - 1
                remaining -= take
        return out

    def _make_room(self, ticks: int) -> None:
        """Wait or raise until the current time unit has a free sequence number.

        Called with the lock held, when the clock shows a unit other than the last
        one, or the last one is full. On return ``self._sequence + 1`` is free in
        unit ``self._last_unit``.
        """
        layout = self._layout
        per_ms = self._ticks_per_ms
        while True:
            if type(ticks) is not int:
                raise ConfigError(f"clock must return int milliseconds, got {ticks!r} ({type(ticks).__name__})")
            unit = (ticks - self._tick_offset) // self._ticks_per_unit
            if unit < 0:
                raise ConfigError(
                    f"clock reads {_iso(ticks // per_ms)}, before the layout's epoch_ms "
                    f"{layout.epoch_ms} ({_iso(layout.epoch_ms)}); Snowflake IDs cannot encode it"
                )
            if unit > self._last_unit:
                if unit > layout.max_timestamp:
                    raise IdSpaceExhaustedError(
                        f"Snowflake timestamp field is full: {layout.timestamp_bits} bits of "
                        f"{layout.time_unit_ms} ms units since {_iso(layout.epoch_ms)} end at "
                        f"{_iso(layout.last_ms)}; the clock reads {_iso(ticks // per_ms)}"
                    )
                self._last_unit = unit
                self._sequence = -1
                self._base = (unit << self._timestamp_shift) | self._worker_part
                return
            if unit == self._last_unit:
                if self._sequence < self._max_sequence:
                    return  # back in the last unit after waiting out a step back
                # Sequence used up: wait for the next unit to begin.
                wake_at = self._tick_offset + (unit + 1) * self._ticks_per_unit
            else:
                # The clock stepped back: wait for the last unit's start again.
                wake_at = self._tick_offset + self._last_unit * self._ticks_per_unit
                gap_ms = -((ticks - wake_at) // per_ms)  # ceiling
                if gap_ms > self._max_backwards_ms:
                    raise ClockMovedBackwardsError(
                        f"clock moved back {gap_ms} ms (from {_iso(wake_at // per_ms)} to "
                        f"{_iso(ticks // per_ms)}), beyond max_backwards_ms={self._max_backwards_ms}; "
                        "refusing to risk duplicate Snowflake IDs",
                        gap_ms,
                    )
            self._sleep((wake_at - ticks) / (per_ms * 1000))
            ticks = self._ticks()

    def _new_lock(self) -> None:
        self._lock = threading.Lock()
        self._acquire = self._lock.acquire
        self._release = self._lock.release

    def _after_fork_in_child(self) -> None:
        self._new_lock()  # another thread may have held the old one at fork time
