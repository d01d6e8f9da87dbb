"""Hot-key splitting: the live split table, the salting rule, and hot-key notices.

A key whose traffic exceeds what one partition can take gets a *split factor* k.
Each of its events is then sent with the record key ``key + b"#" + str(i)`` for a
salt ``i`` in ``[0, k)``:

* ``i = xxh3_64(event_id_bytes) % k``: a pure function of the event ID and k, so a
  replayed event (same ID, same k) gets the same salt and lands where it landed the
  first time. An int event ID contributes its 8 big-endian bytes, a UUID its 16.
* sub-key ``i`` goes to partition ``(p0 + i) % n``, where ``p0`` is the partition
  of the *unsalted* key under the routing map in force and ``n`` its partition
  count. So k = 1 is exactly the unsplit placement, and because k <= n the k
  sub-keys occupy k distinct partitions.

Routing is explicit: the partition of ``key#i`` is *not* Kafka's hash of the bytes
``key#i``, so a consumer or foreign producer re-hashing the salted key would not
find it. Readers strip the salt (the text after the last ``#``) for stage-two
merging; the producer should also carry the salt in a header, because an unsplit
key may itself end in ``#<digits>``.

Split factors come from the hot-key detector as :class:`HotKeyNotice` records on a
compacted control topic. The table validates them (k never above the partition
count in force, bounded key length and table size) and counts what it rejects.
"""

from __future__ import annotations

import math
import threading
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from streams.core.errors import ConfigError, HotKeyNoticeError, InvalidIdError
from streams.core.routing.hashing import xxh3_64
from streams.core.validate import require_fields

__all__ = [
    "MAX_KEY_BYTES",
    "MAX_SPLIT_ENTRIES",
    "HotKeyNotice",
    "SplitTable",
    "event_id_bytes",
    "salt_for",
    "salted_key",
    "salted_partition",
]

#: Longest canonical key the split table accepts, in bytes.
MAX_KEY_BYTES = 1024
#: Default bound on how many keys can be split at once.
MAX_SPLIT_ENTRIES = 10_000
_INT32_MAX = 2**31 - 1
_INT64_MAX = 2**63 - 1
_MAX_TEXT = 1024


# --- the salting rule -----------------------------------------------------------


def event_id_bytes(event_id: object) -> bytes:
    """The bytes an event ID contributes to its salt.

    ``bytes`` (non-empty) pass through; a ``uuid.UUID`` gives its 16 bytes; an int in
    ``0..2**64-1`` gives 8 bytes big-endian. Raises InvalidIdError otherwise.
    """
    cls = event_id.__class__
    if cls is bytes and event_id:
        return event_id  # type: ignore[return-value]
    if cls is int and 0 <= event_id < 0x1_0000_0000_0000_0000:  # type: ignore[operator]
        return event_id.to_bytes(8, "big")  # type: ignore[attr-defined, no-any-return]
    if cls is uuid.UUID:
        return event_id.bytes  # type: ignore[attr-defined, no-any-return]
    return _event_id_bytes_slow(event_id)


def _event_id_bytes_slow(event_id: object) -> bytes:
    if event_id is None:
        raise InvalidIdError("event ID is missing (got NoneType)")
    if isinstance(event_id, bool):
        raise InvalidIdError("event ID must be bytes, int or uuid.UUID, got bool")
    if isinstance(event_id, int):
        if 0 <= event_id < 2**64:
            return int(event_id).to_bytes(8, "big")
        raise InvalidIdError(f"int event ID {event_id} is outside 0..2**64-1")
    if isinstance(event_id, uuid.UUID):
        return event_id.bytes
    if isinstance(event_id, bytes) and event_id:
        return bytes(event_id)
    if isinstance(event_id, bytes):
        raise InvalidIdError("event ID is empty (got empty bytes)")
    raise InvalidIdError(f"event ID must be bytes, int or uuid.UUID, got {type(event_id).__name__}")


def salt_for(event_id: object, k: int) -> int:
    """The salt ``xxh3_64(event_id_bytes(event_id)) % k`` of an event, in ``[0, k)``.

    Raises InvalidIdError for a bad event ID, ValueError if ``k`` < 1.
    """
    if k.__class__ is not int or k < 1:
        raise ValueError(f"split factor must be an int >= 1, got {k!r}")
    return xxh3_64(event_id_bytes(event_id)) % k


def salted_key(key: bytes, salt: int) -> bytes:
    """The record key of sub-key ``salt`` of ``key``: ``key + b"#" + str(salt)``."""
    return b"%s#%d" % (key, salt)


def salted_partition(p0: int, salt: int, n: int) -> int:
    """The partition of sub-key ``salt`` of a key whose unsalted partition is ``p0``: ``(p0 + salt) % n``."""
    return (p0 + salt) % n


# --- hot-key notices --------------------------------------------------------------


def _int_field(record: Mapping[str, Any], name: str, low: int, high: int) -> int:
    value = record[name]
    if value.__class__ is not int:
        raise HotKeyNoticeError(f"hot-key notice field {name!r} must be an int, got {type(value).__name__}")
    if not low <= value <= high:
        raise HotKeyNoticeError(f"hot-key notice field {name!r} must be in {low}..{high}, got {value}")
    return value  # type: ignore[no-any-return]


def _float_field(record: Mapping[str, Any], name: str, low: float, high: float) -> float:
    value = record[name]
    if value.__class__ not in (float, int):
        raise HotKeyNoticeError(f"hot-key notice field {name!r} must be a float, got {type(value).__name__}")
    if not (math.isfinite(value) and low <= value <= high):
        raise HotKeyNoticeError(f"hot-key notice field {name!r} must be in {low}..{high}, got {value}")
    return float(value)


def _text_field(record: Mapping[str, Any], name: str, min_len: int) -> str:
    value = record[name]
    if value.__class__ is not str:
        raise HotKeyNoticeError(f"hot-key notice field {name!r} must be a str, got {type(value).__name__}")
    if not min_len <= len(value) <= _MAX_TEXT:
        raise HotKeyNoticeError(
            f"hot-key notice field {name!r} must be {min_len}..{_MAX_TEXT} characters, got {len(value)}"
        )
    return value  # type: ignore[no-any-return]


@dataclass(frozen=True)
class HotKeyNotice:
    """The detector's word that ``key`` should be split ``split_factor`` ways.

    Mirrors ``schemas/hot_key_notice.avsc``. ``key`` is canonical bytes (1 ..
    MAX_KEY_BYTES); ``split_factor`` 1 .. ``partitions`` (1 means unsplit);
    ``estimated_rate`` events/s >= 0; ``share`` of all traffic in 0..1;
    ``partitions`` the count the detector saw; ``hot_since_ms`` <= ``detected_at_ms``;
    ``map_version`` >= 1; ``detector`` names the instance. Construction validates
    every field and raises HotKeyNoticeError naming it.
    """

    key: bytes
    key_display: str
    split_factor: int
    estimated_rate: float
    share: float
    partitions: int
    detected_at_ms: int
    hot_since_ms: int
    map_version: int
    detector: str

    def __post_init__(self) -> None:
        # One validator for both paths: the constructor checks what from_record checks,
        # and stores floats as float even when given an int.
        for name, value in HotKeyNotice._validated(self.to_record()).items():
            object.__setattr__(self, name, value)

    @staticmethod
    def _validated(record: Mapping[str, Any]) -> dict[str, Any]:
        key = record["key"]
        if key.__class__ is not bytes:
            raise HotKeyNoticeError(f"hot-key notice field 'key' must be bytes, got {type(key).__name__}")
        if not 1 <= len(key) <= MAX_KEY_BYTES:
            raise HotKeyNoticeError(
                f"hot-key notice field 'key' must be 1..{MAX_KEY_BYTES} bytes, got {len(key)}"
            )
        partitions = _int_field(record, "partitions", 1, _INT32_MAX)
        detected_at_ms = _int_field(record, "detected_at_ms", 0, _INT64_MAX)
        return {
            "key": key,
            "key_display": _text_field(record, "key_display", 0),
            "split_factor": _int_field(record, "split_factor", 1, partitions),
            "estimated_rate": _float_field(record, "estimated_rate", 0.0, math.inf),
            "share": _float_field(record, "share", 0.0, 1.0),
            "partitions": partitions,
            "detected_at_ms": detected_at_ms,
            "hot_since_ms": _int_field(record, "hot_since_ms", 0, detected_at_ms),
            "map_version": _int_field(record, "map_version", 1, _INT32_MAX),
            "detector": _text_field(record, "detector", 1),
        }

    def to_record(self) -> dict[str, Any]:
        """The notice as a dict with exactly the fields of ``hot_key_notice.avsc``."""
        return {
            "key": self.key,
            "key_display": self.key_display,
            "split_factor": self.split_factor,
            "estimated_rate": self.estimated_rate,
            "share": self.share,
            "partitions": self.partitions,
            "detected_at_ms": self.detected_at_ms,
            "hot_since_ms": self.hot_since_ms,
            "map_version": self.map_version,
            "detector": self.detector,
        }

    @classmethod
    def from_record(cls, record: Mapping[str, Any]) -> HotKeyNotice:
        """Build a notice from a decoded record; the inverse of :meth:`to_record`.

        Raises HotKeyNoticeError if ``record`` is not a mapping, lacks a field, has
        an unknown one, or any value has the wrong type (bool is not an int) or range.
        """
        require_fields(record, _FIELDS, "hot-key notice", HotKeyNoticeError)
        return cls(**{name: record[name] for name in _FIELDS})


_FIELDS = frozenset(HotKeyNotice.__dataclass_fields__)


# --- the live split table -------------------------------------------------------------


class SplitTable:
    """Canonical key bytes -> split factor k (>= 2), shared by an updater and the hot path.

    Writers (``set``, ``apply``, ``remove``, ``clear``) serialise on a lock and update
    one dict in place; readers never lock. ``lookup(key)`` is that dict's own
    ``get``: it returns k for a split key and None for an unsplit one, with no
    Python-level call in between. A factor of 1 means unsplit and is stored as absence.

    Limits: keys of 1..``max_key_bytes`` bytes, at most ``max_entries`` split keys,
    and k never above the partition count passed in (the map in force). Every
    rejected notice increments ``rejected``.
    """

    def __init__(self, max_entries: int = MAX_SPLIT_ENTRIES, max_key_bytes: int = MAX_KEY_BYTES) -> None:
        """Create an empty table. Raises ConfigError if a limit is not an int >= 1."""
        for name, value in (("max_entries", max_entries), ("max_key_bytes", max_key_bytes)):
            if value.__class__ is not int or value < 1:
                raise ConfigError(f"SplitTable {name} must be an int >= 1, got {value!r}")
        self.max_entries = max_entries
        self.max_key_bytes = max_key_bytes
        self._factors: dict[bytes, int] = {}
        self._lock = threading.Lock()
        self._rejected = 0
        self.lookup = self._factors.get

    def __len__(self) -> int:
        """The number of keys currently split (k >= 2)."""
        return len(self._factors)

    @property
    def rejected(self) -> int:
        """How many notices or updates this table has rejected since it was created."""
        return self._rejected

    def factor(self, key: bytes) -> int:
        """The split factor of canonical ``key``: 1 if it is not split."""
        return self._factors.get(key, 1)

    def snapshot(self) -> dict[bytes, int]:
        """A copy of the split keys and their factors."""
        with self._lock:
            return dict(self._factors)

    def set(self, key: bytes, k: int, partitions: int) -> None:
        """Split canonical ``key`` ``k`` ways (k = 1 unsplits it).

        ``partitions`` is the partition count of the routing map in force. Raises
        HotKeyNoticeError (and counts a rejection) if ``key`` is not 1..max_key_bytes
        bytes, ``k`` is not an int in 1..partitions, or the table is full.
        """
        try:
            if key.__class__ is not bytes:
                raise HotKeyNoticeError(f"split key must be canonical bytes, got {type(key).__name__}")
            if not 1 <= len(key) <= self.max_key_bytes:
                raise HotKeyNoticeError(f"split key must be 1..{self.max_key_bytes} bytes, got {len(key)}")
            if partitions.__class__ is not int or partitions < 1:
                raise HotKeyNoticeError(f"partition count must be an int >= 1, got {partitions!r}")
            if k.__class__ is not int or not 1 <= k <= partitions:
                raise HotKeyNoticeError(
                    f"split factor must be an int in 1..{partitions} (the partition count in force), got {k!r}"
                )
            with self._lock:
                if k == 1:
                    self._factors.pop(key, None)
                    return
                if key not in self._factors and len(self._factors) >= self.max_entries:
                    raise HotKeyNoticeError(
                        f"split table is full ({self.max_entries} keys); unsplit a key before splitting another"
                    )
                self._factors[key] = k
        except HotKeyNoticeError:
            self._count_rejection()
            raise

    def apply(self, notice: HotKeyNotice, partitions: int) -> None:
        """Apply a validated notice against the partition count in force; see :meth:`set`."""
        self.set(notice.key, notice.split_factor, partitions)

    def apply_record(self, record: Mapping[str, Any], partitions: int) -> HotKeyNotice:
        """Validate a decoded notice record, apply it, and return the notice.

        Raises HotKeyNoticeError (counted as a rejection) if the record is malformed
        or the notice cannot be applied.
        """
        try:
            notice = HotKeyNotice.from_record(record)
        except HotKeyNoticeError:
            self._count_rejection()
            raise
        self.apply(notice, partitions)
        return notice

    def remove(self, key: bytes) -> None:
        """Unsplit ``key``; a no-op if it is not split."""
        with self._lock:
            self._factors.pop(key, None)

    def clear(self) -> None:
        """Unsplit every key."""
        with self._lock:
            self._factors.clear()

    def _count_rejection(self) -> None:
        with self._lock:
            self._rejected += 1
