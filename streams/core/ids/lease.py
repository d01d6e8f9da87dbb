"""Leases on Snowflake worker IDs: the pure rules every producer of a fleet applies alike.

A Snowflake ID is unique only while no two live generators share a worker ID. The
fleet agrees on who holds which ID through one log that every producer reads the
same way: a single-partition Kafka topic whose records the broker time-stamps on
append (``LogAppendTime``). Each record is a *hold*: "owner O holds worker W for
``lease_ms`` from this record's time", or a *release* ("O lets W go now"). Since
every reader replays the same records in the same order with the same rule, every
reader reaches the same table; the edge that reads and writes the topic is
:mod:`streams.kafka.leases`.

The rule (:meth:`LeaseTable.apply`), for a hold by O of W at broker time ``t``:

* W has no lease, or its lease expired at ``e`` and ``t >= e + reuse_delay_ms``:
  O now holds W until ``t + lease_ms`` (a *takeover*);
* O already holds W and ``t < e``: the lease is extended to ``t + lease_ms``;
* anything else is refused (someone else holds W, or it expired too recently).

A producer mints only while its own lease is current by its own monotonic clock,
counted from *before* it sent the hold the broker stamped, so it stops minting no
later than the fleet thinks it should. ``reuse_delay_ms`` must cover the clock skew
between machines (and between brokers, should leadership move): the next holder's
first ID must be later than the previous holder's last. With skew at most ``s``,
``reuse_delay_ms >= 2 * s`` is enough: the old holder's clock read at most ``e + s``
when it stopped; the new holder's reads at least ``e + reuse_delay_ms - s``.

Records from the topic are untrusted input: :func:`decode_lease_record` raises
:class:`LeaseRecordError` naming the field, and the reader skips and counts them.
A lease lasts at most ten minutes (the topic keeps an hour of history).
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from typing import NamedTuple

import orjson

from streams.core.errors import StreamsError
from streams.core.validate import require, require_int

__all__ = [
    "LeaseRecord",
    "LeaseRecordError",
    "Lease",
    "LeaseTable",
    "LeaseTerms",
    "decode_lease_record",
    "encode_lease_record",
    "MAX_OWNER_CHARS",
]

#: An owner is a random token a producer picks at start (plus a readable prefix).
MAX_OWNER_CHARS = 128
_FIELDS = frozenset({"v", "worker", "owner", "lease_ms", "release"})


class LeaseRecordError(StreamsError, ValueError):
    """A record on the leases topic is malformed or hostile; ``field`` names what is wrong."""

    def __init__(self, message: str, field: str | None = None) -> None:
        super().__init__(message)
        self.field = field


@dataclass(frozen=True)
class LeaseTerms:
    """How long a lease lasts and how long an expired worker ID rests before reuse.

    ``lease_ms``: a hold's length; a producer renews every ``renew_ms`` (a third of
    the lease by default), so two renewals can be lost before the lease lapses.
    ``reuse_delay_ms``: how long an expired or released ID rests before another
    producer may take it; it must cover twice the clock skew between machines.
    ``max_worker``: the largest worker ID of the layout (1023 for Twitter's 10 bits).
    Raises ConfigError naming the field for values out of range.
    """

    lease_ms: int = 30_000
    reuse_delay_ms: int = 30_000
    renew_ms: int = 0  # 0: a third of lease_ms
    max_worker: int = 1023

    def __post_init__(self) -> None:
        require_int("lease_ms", self.lease_ms, 100, 600_000)
        require_int("reuse_delay_ms", self.reuse_delay_ms, 0, 600_000)
        require_int("renew_ms", self.renew_ms, 0, 600_000)
        require_int("max_worker", self.max_worker, 0, 2**22)
        require(self.renew_ms < self.lease_ms, "renew_ms", f"less than lease_ms ({self.lease_ms})", self.renew_ms)

    @property
    def renew_every_ms(self) -> int:
        """How often a holder renews: ``renew_ms``, or a third of ``lease_ms`` when that is 0."""
        return self.renew_ms or max(1, self.lease_ms // 3)


class LeaseRecord(NamedTuple):
    """One record of the leases log: ``owner`` holds (or, with ``release``, lets go of) ``worker``."""

    worker: int
    owner: str
    lease_ms: int
    release: bool = False


def encode_lease_record(record: LeaseRecord) -> bytes:
    """The JSON value written to the leases topic (keyed by the worker ID's decimal text)."""
    return orjson.dumps({"v": 1, "worker": record.worker, "owner": record.owner, "lease_ms": record.lease_ms,
                         "release": record.release})


def decode_lease_record(value: bytes | None, max_worker: int) -> LeaseRecord:
    """Parse and validate one value from the leases topic.

    Raises LeaseRecordError naming the field: not JSON, not an object, unknown or
    missing fields, a version other than 1, a worker outside ``[0, max_worker]``, an
    empty or over-long owner, a lease outside ``[1, 86400000]`` ms, a non-bool release.
    """
    if not value:
        raise LeaseRecordError("lease record: empty value", "payload")
    try:
        data = orjson.loads(value)
    except orjson.JSONDecodeError:
        raise LeaseRecordError("lease record: not JSON", "payload") from None
    if not isinstance(data, dict):
        raise LeaseRecordError(f"lease record must be an object, got {type(data).__name__}", "payload")
    extra, missing = set(data) - _FIELDS, _FIELDS - set(data)
    if extra or missing:
        name = sorted(missing or extra)[0]
        raise LeaseRecordError(f"lease record: {'missing' if missing else 'unknown'} field {name!r}", name)
    checks = (
        ("v", data["v"].__class__ is int and data["v"] == 1, "1"),
        ("worker", data["worker"].__class__ is int and 0 <= data["worker"] <= max_worker, f"an int in [0, {max_worker}]"),
        ("owner", isinstance(data["owner"], str) and 0 < len(data["owner"]) <= MAX_OWNER_CHARS,
         f"a string of 1 to {MAX_OWNER_CHARS} characters"),
        ("lease_ms", data["lease_ms"].__class__ is int and 1 <= data["lease_ms"] <= 86_400_000,
         "an int in [1, 86400000]"),
        ("release", data["release"].__class__ is bool, "a bool"),
    )
    for name, ok, allowed in checks:
        if not ok:
            raise LeaseRecordError(f"lease record: {name} must be {allowed}, got {data[name]!r:.80}", name)
    return LeaseRecord(data["worker"], data["owner"], data["lease_ms"], data["release"])


class Lease(NamedTuple):
    """Who holds a worker ID, and until when (broker milliseconds)."""

    worker: int
    owner: str
    expires_ms: int


@dataclass
class LeaseTable:
    """The fleet's view of the leases, built by replaying the leases log in order.

    Every reader that applies the same records in the same order holds the same
    table: that is what makes a hold record a claim everyone agrees on.
    """

    reuse_delay_ms: int
    leases: dict[int, Lease] = field(default_factory=dict)
    refused: int = 0

    def apply(self, record: LeaseRecord, ts_ms: int) -> bool:
        """Apply one record stamped ``ts_ms`` by the broker; True if it took effect (module docstring's rule)."""
        current = self.leases.get(record.worker)
        if record.release:
            if current is None or current.owner != record.owner or ts_ms >= current.expires_ms:
                self.refused += 1
                return False
            self.leases[record.worker] = Lease(record.worker, record.owner, ts_ms)
            return True
        free = current is None or ts_ms >= current.expires_ms + self.reuse_delay_ms
        renewal = current is not None and current.owner == record.owner and ts_ms < current.expires_ms
        if not (free or renewal):
            self.refused += 1
            return False
        self.leases[record.worker] = Lease(record.worker, record.owner, ts_ms + record.lease_ms)
        return True

    def holder(self, worker: int, now_ms: int) -> Lease | None:
        """The live lease on ``worker`` at broker time ``now_ms``, or None."""
        lease = self.leases.get(worker)
        return lease if lease is not None and now_ms < lease.expires_ms else None

    def is_free(self, worker: int, now_ms: int) -> bool:
        """True if a hold of ``worker`` stamped at or after ``now_ms`` would be a takeover (never held, or rested)."""
        lease = self.leases.get(worker)
        return lease is None or now_ms >= lease.expires_ms + self.reuse_delay_ms

    def pick_free(self, max_worker: int, now_ms: int, rng: random.Random, margin_ms: int = 0) -> int | None:
        """A random worker ID that is free at ``now_ms + margin_ms``, or None if all are taken or resting.

        Random, not lowest-first, so producers starting together rarely race for one ID.
        Never-held IDs are preferred: a rested one would make the producer wait for no gain.
        """
        never = [w for w in range(max_worker + 1) if w not in self.leases]
        if never:
            return rng.choice(never)
        rested = [w for w in self.leases if self.is_free(w, now_ms + margin_ms)]
        return rng.choice(rested) if rested else None
