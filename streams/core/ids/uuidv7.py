"""UUIDv7 (RFC 9562 section 5.7): time-ordered 128-bit IDs, monotonic per process.

Bit layout, most significant first::

    unix_ts_ms (48) | ver=0b0111 (4) | rand_a (12) | var=0b10 (2) | rand_b (62)

Monotonicity: RFC 9562 section 6.2, **Method 1, fixed-length dedicated counter**,
42 bits long: all 12 bits of ``rand_a`` and the top 30 bits of ``rand_b``. The
remaining 32 bits of ``rand_b`` are fresh random bits for every ID.

* When the clock shows a new millisecond, the counter is re-seeded from the CSPRNG
  with its top bit clear (the RFC's rollover guard), so at least 2**41 IDs fit
  into that millisecond and the next counter value is not guessable.
* Otherwise (same millisecond, or the wall clock stepped back) the previous
  timestamp is kept and the counter goes up by one. IDs never go backwards; their
  timestamp runs ahead of the wall clock until the wall clock catches up.
* Counter overflow carries into ``unix_ts_ms``: the timestamp advances by 1 ms and
  the counter restarts at 0, as the RFC allows. Nothing wraps or repeats; past the
  48-bit timestamp (year 10889) the generator raises :class:`IdSpaceExhaustedError`.

Why Method 1: ordering holds by construction and costs one integer addition;
Method 2 (add a random increment) needs a second random draw per ID and trades
rollover distance against guessability; Method 3 (sub-millisecond clock bits) needs
a clock finer than the injected millisecond clock and still needs a counter for
ties. CPython 3.14's ``uuid.uuid7`` makes the same choice (42-bit counter, 32-bit
random tail), so IDs from both look alike.

Random bits come from :func:`os.urandom` (the kernel CSPRNG), read 4 KiB at a time
into a per-generator pool, which removes a syscall per ID; a fork hook empties the
pool in the child so parent and child never share random bits.

Speed: ``uuid.UUID(int=...)`` validates its argument; here a UUID is built with
``object.__new__`` and the slot descriptors of ``int`` and ``is_safe`` directly.
"""

from __future__ import annotations

import os
import threading
import time
from array import array
from collections import deque
from itertools import repeat
from operator import or_, rshift
from uuid import UUID, SafeUUID

from streams.core.errors import ConfigError, IdSpaceExhaustedError, InvalidArgumentError
from streams.core.ids._common import reset_after_fork
from streams.core.ids.clock import Clock
from streams.core.validate import require_int

__all__ = ["UUIDv7Generator", "uuid7"]

_VERSION_VARIANT = (0x7 << 76) | (0b10 << 62)
# Version and variant bits sit between the counter's parts and the timestamp.
# Setting them to 1 before adding lets a carry ripple through them; then they are
# cleared and rewritten. That is the whole increment (see _increment).
_GAPS = (0xF << 76) | (0b11 << 62)
_NOT_GAPS = ~_GAPS
_TS_SHIFT = 80
_MAX_TS_MS = (1 << 48) - 1
_LIMIT = 1 << 128  # a skeleton at or above this has overflowed unix_ts_ms
# Adding one step to a skeleton sets this bit (variant 0b10 -> 0b11) exactly when the
# counter's part inside rand_b overflows; only then is the full _increment needed.
_CARRY = 1 << 62
# Initial skeleton: so far below zero that any clock reading counts as a new
# millisecond, sending the first call through the validating _reseed.
_UNSEEDED = -(1 << 256)

_POOL_WORDS = 512  # 4 KiB of os.urandom per refill

_new = object.__new__
_set_int = UUID.__dict__["int"].__set__
_set_is_safe = UUID.__dict__["is_safe"].__set__
_UNKNOWN = SafeUUID.unknown


def _uuids(values: list[int]) -> list[UUID]:
    """Wrap ints as UUIDs without UUID.__init__'s checks (they are valid by construction)."""
    objs = list(map(_new, repeat(UUID, len(values))))
    deque(map(_set_int, objs, values), 0)
    deque(map(_set_is_safe, objs, repeat(_UNKNOWN)), 0)
    return objs


class UUIDv7Generator:
    """Thread-safe source of strictly increasing UUIDv7 values.

    Every value one instance returns, from any thread and any method, is greater
    than every value it returned before, whatever the clock does.

    Args:
        clock: integer milliseconds since the Unix epoch; defaults to
            :func:`streams.core.ids.clock.system_clock_ms`.
        counter_bits: length of the RFC 9562 Method 1 counter, 12 to 42 (the
            RFC's range). Fewer counter bits leave more random bits per ID but
            overflow sooner; the default 42 leaves 32 random bits.

    Raises:
        ConfigError: ``clock`` is not callable or ``counter_bits`` is out of range.
    """

    __slots__ = (
        "_ticks",
        "_ticks_per_ms",
        "_lock",
        "_acquire",
        "_release",
        "_counter_bits",
        "_step",
        "_tail_shift",
        "_tail_bits",
        "_low_field",
        "_skeleton",
        "_pool",
        "_pop",
        "__weakref__",
    )

    def __init__(self, *, clock: Clock | None = None, counter_bits: int = 42) -> None:
        if clock is not None and not callable(clock):
            raise ConfigError(f"clock must be a callable returning int milliseconds, got {clock!r}")
        require_int("counter_bits", counter_bits, 12, 42)
        tail_bits = 74 - counter_bits  # random bits below the counter, 32 to 62
        # The default clock is read as time.time_ns() // 1_000_000 inline: it is
        # the same as system_clock_ms() minus a Python call on the hot path.
        self._ticks: Clock = clock or time.time_ns
        self._ticks_per_ms = 1 if clock else 1_000_000
        self._new_lock()
        self._counter_bits = counter_bits
        self._tail_bits = tail_bits
        self._step = 1 << tail_bits  # one counter increment
        self._tail_shift = 64 - tail_bits  # 64-bit random word -> tail_bits random bits
        # The counter's part inside rand_b (bits tail_bits..61); empty when counter_bits == 12.
        self._low_field = ((1 << (counter_bits - 12)) - 1) << tail_bits
        self._skeleton = _UNSEEDED  # the last ID without its random tail
        self._pool: list[int] = []
        self._pop = self._pool.pop
        reset_after_fork(self)

    # -- public API ---------------------------------------------------------

    def next(self) -> UUID:
        """Return the next UUIDv7 as a :class:`uuid.UUID`.

        Raises:
            IdSpaceExhaustedError: the 48-bit timestamp field would overflow.
            ConfigError: the clock returned something other than an int in
                [0, 2**48) on a new millisecond.
        """
        u = _new(UUID)
        _set_int(u, self.next_int())
        _set_is_safe(u, _UNKNOWN)
        return u

    def next_int(self) -> int:
        """Return the next UUIDv7 as a 128-bit int: the cheapest form.

        Same guarantees and errors as :meth:`next`; ``uuid.UUID(int=value)`` or
        ``value.to_bytes(16, "big")`` give the other forms.
        """
        # acquire/release in try/finally: half the cost of `with lock` on 3.11.
        self._acquire()
        try:
            now = self._ticks() // self._ticks_per_ms
            skeleton = self._skeleton
            if now > skeleton >> _TS_SHIFT:
                skeleton = self._reseed(now)
            else:
                skeleton += self._step
                if skeleton & _CARRY:
                    skeleton = _increment(skeleton - self._step, self._step)
            self._skeleton = skeleton
            try:
                tail = self._pop()
            except IndexError:
                self._refill()
                tail = self._pop()
        finally:
            self._release()
        return skeleton | tail

    def next_batch(self, n: int) -> list[UUID]:
        """Return ``n`` consecutive UUIDv7 values, ascending, as :class:`uuid.UUID`.

        Same guarantees as ``n`` calls to :meth:`next` from one thread (no other
        thread's IDs fall in between), at a fraction of the cost.

        Raises:
            InvalidArgumentError: ``n`` is not an int >= 0 (also a ValueError).
            IdSpaceExhaustedError, ConfigError: as :meth:`next`.
        """
        return _uuids(self.next_int_batch(n))

    def next_int_batch(self, n: int) -> list[int]:
        """Return ``n`` consecutive UUIDv7 values as 128-bit ints, ascending.

        Same guarantees and errors as :meth:`next_batch`.
        """
        if require_int("n", n, 0, error=InvalidArgumentError) == 0:
            return []
        step, low_field = self._step, self._low_field
        runs = []
        with self._lock:
            now = self._ticks() // self._ticks_per_ms
            skeleton = self._skeleton
            skeleton = self._reseed(now) if now > skeleton >> _TS_SHIFT else _increment(skeleton, step)
            remaining = n
            while True:
                # IDs whose counters differ only in the part inside rand_b are an
                # arithmetic progression: emit the whole run as one range.
                room = ((low_field - (skeleton & low_field)) // step) + 1
                take = room if room < remaining else remaining
                runs.append(range(skeleton, skeleton + take * step, step))
                remaining -= take
                skeleton += (take - 1) * step
                if not remaining:
                    break
                skeleton = _increment(skeleton, step)
            self._skeleton = skeleton
            tails = self._take(n)
        skeletons: list[int] = []
        for run in runs:
            skeletons.extend(run)
        return list(map(or_, skeletons, tails))

    # -- internals ----------------------------------------------------------

    def _reseed(self, now: int) -> int:
        """Start a new millisecond: validate ``now``, draw a fresh counter seed."""
        if type(now) is not int:
            raise ConfigError(f"clock must return int milliseconds, got {now!r} ({type(now).__name__})")
        if not 0 <= now <= _MAX_TS_MS:
            if now > _MAX_TS_MS:
                raise _exhausted()
            raise ConfigError(f"clock returned {now} ms, before the Unix epoch; UUIDv7 needs [0, 2**48)")
        # Two random tails hold at least counter_bits - 1 random bits; keep that many.
        seed = ((self._take(1)[0] << self._tail_bits) | self._take(1)[0]) >> (
            2 * self._tail_bits - self._counter_bits + 1
        )
        low_bits = self._counter_bits - 12
        scattered = ((seed >> low_bits) << 64) | ((seed & ((1 << low_bits) - 1)) << (74 - self._counter_bits))
        return (now << _TS_SHIFT) | _VERSION_VARIANT | scattered

    def _refill(self, at_least: int = 1) -> None:
        """Top the pool up with random tails (tail_bits each) from os.urandom."""
        words = array("Q", os.urandom(8 * max(at_least, _POOL_WORDS)))
        self._pool.extend(map(rshift, words, repeat(self._tail_shift, len(words))))

    def _take(self, n: int) -> list[int]:
        """Remove and return ``n`` random tails from the pool."""
        pool = self._pool
        if len(pool) < n:
            self._refill(n)
        tails = pool[-n:]
        del pool[-n:]
        return tails

    def _new_lock(self) -> None:
        self._lock = threading.Lock()
        self._acquire = self._lock.acquire
        self._release = self._lock.release

    def _after_fork_in_child(self) -> None:
        self._new_lock()  # another thread may have held the old one at fork time
        self._pool.clear()
        self._skeleton = _UNSEEDED


def _increment(skeleton: int, step: int) -> int:
    """Add one to the counter; a carry ripples into the timestamp."""
    skeleton = (((skeleton | _GAPS) + step) & _NOT_GAPS) | _VERSION_VARIANT
    if skeleton >= _LIMIT:
        raise _exhausted()
    return skeleton


def _exhausted() -> IdSpaceExhaustedError:
    return IdSpaceExhaustedError("UUIDv7 unix_ts_ms would pass 2**48 - 1 ms (year 10889)")


_DEFAULT = UUIDv7Generator()
_default_next_int = _DEFAULT.next_int


def uuid7() -> UUID:
    """Return a new UUIDv7 from the process-wide generator.

    Values from one process strictly increase, across threads and across wall
    clock steps backwards (see the module docstring for how).

    Raises:
        IdSpaceExhaustedError: past 2**48 - 1 ms since the Unix epoch.
    """
    u = _new(UUID)
    _set_int(u, _default_next_int())
    _set_is_safe(u, _UNKNOWN)
    return u
