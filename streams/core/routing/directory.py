"""The key directory: explicit placements for the few keys that carry the imbalance.

The routing map's hash places every key on its *home* partition. The directory
overrides that for a handful of keys (the decider in
:mod:`streams.core.hotkeys.decider` chooses them from measured partition loads):

* a **move**, ``(p,)``: every event of the key goes to partition ``p``, under its own
  record key (salt 0);
* a **split**, ``(p_0, ..., p_{k-1})`` with ``k >= 2`` distinct partitions: an event
  with salt ``i`` goes to ``p_i`` with the record key ``key + b"#" + str(i)``.

The salt is ``i = xxh3_64(event_id_bytes) % k``: a pure function of the event ID and
``k``, so a replayed event (same ID, same placement) lands where it landed the first
time. An int event ID contributes its 8 big-endian bytes, a UUID its 16.

Routing is explicit: the partition of ``key#i`` is *not* Kafka's hash of the bytes
``key#i``, so a consumer or foreign producer re-hashing the salted key would not find
it. Readers take the key from the event itself; the producer also carries the salt in
a header, because an unsplit key may itself end in ``#<digits>``.

Placements come from the decider as :class:`HotKeyNotice` records on a compacted
control topic. The directory validates them like untrusted input (distinct partitions,
each in range of the map in force, at most that many, bounded key length and
directory size) and counts what it rejects. Version 1 notices (a split factor ``k``
meaning partitions ``(home + i) % n``) still decode: :meth:`HotKeyNotice.from_v1_record`.
"""

from __future__ import annotations

import math
import threading
import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from streams.core.errors import (
    HotKeyNoticeError,
    InvalidArgumentError,
    InvalidIdError,
)
from streams.core.routing.hashing import MAX_KEY_BYTES, xxh3_64
from streams.core.serde import AvroCodec
from streams.core.validate import require_fields, require_int

__all__ = [
    "MAX_KEY_BYTES",
    "MAX_DIRECTORY_ENTRIES",
    "NOTICE_SCHEMA",
    "NOTICE_SCHEMA_HEADER",
    "NOTICE_SCHEMA_V1",
    "NOTICE_V2",
    "HotKeyNotice",
    "KeyDirectory",
    "decode_notice",
    "encode_notice",
    "notice_headers",
    "notice_schema",
    "event_id_bytes",
    "salt_for",
    "salted_key",
]

#: Default bound on how many keys the directory places at once.
MAX_DIRECTORY_ENTRIES = 10_000
#: The Avro schema of notices this version writes (``schemas/hot_key_notice.avsc``), and of version 1.
NOTICE_SCHEMA = "hot_key_notice"
NOTICE_SCHEMA_V1 = "hot_key_notice_v1"
_INT32_MAX = 2**31 - 1
_INT64_MAX = 2**63 - 1
_MAX_TEXT = 1024


# --- the salting rule -----------------------------------------------------------


def event_id_bytes(event_id: object) -> bytes:
    """The bytes an event ID contributes to its salt.

    ``bytes`` (non-empty) pass through; a ``uuid.UUID`` (or uuid-utils' UUID) gives its 16 bytes; an int in
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


try:  # what RoutingProducer stamps with: uuid-utils' UUID, the same 16 bytes as a uuid.UUID
    from uuid_utils import UUID as _UUIDUtilsUUID

    _COMPILED_UUID: tuple[type, ...] = (_UUIDUtilsUUID,)
except ImportError:  # pragma: no cover
    _COMPILED_UUID = ()


def _event_id_bytes_slow(event_id: object) -> bytes:
    if event_id is None:
        raise InvalidIdError("event ID is missing (got NoneType)")
    if isinstance(event_id, bool):
        raise InvalidIdError("event ID must be bytes, int or uuid.UUID, got bool")
    if isinstance(event_id, int):
        if 0 <= event_id < 2**64:
            return int(event_id).to_bytes(8, "big")
        raise InvalidIdError(f"int event ID {event_id} is outside 0..2**64-1")
    if isinstance(event_id, (uuid.UUID, *_COMPILED_UUID)):
        return event_id.bytes  # type: ignore[no-any-return]
    if isinstance(event_id, bytes) and event_id:
        return bytes(event_id)
    if isinstance(event_id, bytes):
        raise InvalidIdError("event ID is empty (got empty bytes)")
    raise InvalidIdError(f"event ID must be bytes, int or uuid.UUID, got {type(event_id).__name__}")


def salt_for(event_id: object, k: int) -> int:
    """The salt ``xxh3_64(event_id_bytes(event_id)) % k`` of an event, in ``[0, k)``.

    Raises InvalidIdError for a bad event ID, InvalidArgumentError if ``k`` < 1.
    """
    if k.__class__ is not int or k < 1:  # the per-event path pays one comparison, not a call
        require_int("split factor", k, 1, error=InvalidArgumentError)
    return xxh3_64(event_id_bytes(event_id)) % k


def salted_key(key: bytes, salt: int) -> bytes:
    """The record key of sub-key ``salt`` of ``key``: ``key + b"#" + str(salt)``."""
    return b"%s#%d" % (key, salt)


# --- hot-key notices --------------------------------------------------------------


def _int_field(record: Mapping[str, Any], name: str, low: int, high: int) -> int:
    return require_int(f"hot-key notice field {name!r}", record[name], low, high, HotKeyNoticeError)


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


def _placement_field(record: Mapping[str, Any], partitions: int) -> tuple[int, ...]:
    value = record["placement"]
    if value.__class__ not in (list, tuple):
        raise HotKeyNoticeError(f"hot-key notice field 'placement' must be a list of partitions, got {type(value).__name__}")
    if not 1 <= len(value) <= partitions:
        raise HotKeyNoticeError(
            f"hot-key notice field 'placement' must hold 1..{partitions} partitions (the count it names), got {len(value)}"
        )
    for p in value:
        if p.__class__ is not int or not 0 <= p < partitions:
            raise HotKeyNoticeError(f"hot-key notice field 'placement' holds {p!r}, not a partition in 0..{partitions - 1}")
    if len(set(value)) != len(value):
        raise HotKeyNoticeError(f"hot-key notice field 'placement' repeats a partition: {list(value)}")
    return tuple(value)


@dataclass(frozen=True)
class HotKeyNotice:
    """The decider's word that ``key`` goes to ``placement`` (``schemas/hot_key_notice.avsc``).

    ``key`` is canonical bytes (1 .. MAX_KEY_BYTES); ``placement`` 1 .. ``partitions``
    distinct partitions in ``0 .. partitions-1`` (one: a move; several: a split);
    ``estimated_rate`` events/s >= 0; ``share`` of all traffic in 0..1; ``partitions``
    the partition count the decider planned for; ``home`` the key's hash partition
    there; ``hot_since_ms`` <= ``detected_at_ms``; ``map_version`` >= 1; ``detector``
    names the instance. Construction validates every field and raises
    HotKeyNoticeError naming it.
    """

    key: bytes
    key_display: str
    placement: tuple[int, ...]
    home: int
    estimated_rate: float
    share: float
    partitions: int
    detected_at_ms: int
    hot_since_ms: int
    map_version: int
    detector: str

    def __post_init__(self) -> None:
        # One validator for both paths: the constructor checks what from_record checks,
        # and stores floats as float and the placement as a tuple.
        # The fields as given (not to_record(), whose list() of a malformed placement would raise TypeError).
        for name, value in HotKeyNotice._validated({name: getattr(self, name) for name in _FIELDS}).items():
            object.__setattr__(self, name, value)

    @property
    def split_factor(self) -> int:
        """How many partitions the key is spread over (1: moved whole)."""
        return len(self.placement)

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
            "placement": _placement_field(record, partitions),
            "home": _int_field(record, "home", 0, partitions - 1),
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
            "placement": list(self.placement),
            "home": self.home,
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

    @classmethod
    def from_v1_record(cls, record: Mapping[str, Any], home: Callable[[bytes, int], int],
                       partitions: int | None = None) -> HotKeyNotice:
        """Read a version 1 notice (``hot_key_notice_v1.avsc``: a split factor ``k``).

        Version 1 meant sub-key ``i`` on partition ``(home + i) % n``; this returns
        that placement explicitly for ``n = partitions`` (the map in force; None: the
        count the notice names), with ``home(key, n)`` the key's hash partition there.
        Every field is validated on its own, the notice's ``partitions`` included even
        when the map's count is used. Raises HotKeyNoticeError for a malformed record.
        """
        require_fields(record, _V1_FIELDS, "hot-key notice (version 1)", HotKeyNoticeError)
        key = record["key"]
        if key.__class__ is not bytes or not 1 <= len(key) <= MAX_KEY_BYTES:
            raise HotKeyNoticeError(f"hot-key notice field 'key' must be 1..{MAX_KEY_BYTES} bytes")
        named = _int_field(record, "partitions", 1, _INT32_MAX)  # checked whatever map is in force
        n = named if partitions is None else partitions
        k = _int_field(record, "split_factor", 1, min(n, named))
        p0 = home(key, n)
        fields = {name: record[name] for name in _V1_FIELDS - {"split_factor", "partitions"}}
        return cls(placement=tuple((p0 + i) % n for i in range(k)), home=p0, partitions=n, **fields)


_FIELDS = frozenset(HotKeyNotice.__dataclass_fields__)
_V1_FIELDS = (_FIELDS - {"placement", "home"}) | {"split_factor"}


# --- the live directory ---------------------------------------------------------------


class KeyDirectory:
    """Canonical key bytes -> the partitions the key is placed on; shared by an updater and the hot path.

    Writers (``set``, ``apply``, ``remove``, ``clear``) serialise on a lock and update
    one dict in place; readers never lock. ``lookup(key)`` is that dict's own ``get``:
    it returns the placement tuple of a placed key and None for a key that goes home,
    with no Python-level call in between.

    Limits: keys of 1..``max_key_bytes`` bytes, at most ``max_entries`` keys, and every
    partition below the partition count passed in (the map in force). Every rejected
    notice or update increments ``rejected``.
    """

    def __init__(self, max_entries: int = MAX_DIRECTORY_ENTRIES, max_key_bytes: int = MAX_KEY_BYTES) -> None:
        """Create an empty directory. Raises ConfigError if a limit is not an int >= 1."""
        require_int("KeyDirectory max_entries", max_entries, 1)
        require_int("KeyDirectory max_key_bytes", max_key_bytes, 1)
        self.max_entries = max_entries
        self.max_key_bytes = max_key_bytes
        self._placements: dict[bytes, tuple[int, ...]] = {}
        self._lock = threading.Lock()
        self._rejected = 0
        self.lookup = self._placements.get

    def __len__(self) -> int:
        """The number of keys the directory places."""
        return len(self._placements)

    @property
    def rejected(self) -> int:
        """How many notices or updates this directory has rejected since it was created."""
        return self._rejected

    def placement(self, key: bytes) -> tuple[int, ...] | None:
        """The partitions canonical ``key`` is placed on, or None if it goes home."""
        return self._placements.get(key)

    def snapshot(self) -> dict[bytes, tuple[int, ...]]:
        """A copy of the placed keys and their partitions."""
        with self._lock:
            return dict(self._placements)

    def set(self, key: bytes, placement: Sequence[int], partitions: int) -> None:
        """Place canonical ``key`` on ``placement`` (one partition: moved; several: split).

        ``partitions`` is the partition count of the routing map in force. Raises
        HotKeyNoticeError (and counts a rejection) if ``key`` is not 1..max_key_bytes
        bytes, ``placement`` is not 1..partitions distinct ints in 0..partitions-1, or
        the directory is full.
        """
        try:
            if key.__class__ is not bytes:
                raise HotKeyNoticeError(f"directory key must be canonical bytes, got {type(key).__name__}")
            if not 1 <= len(key) <= self.max_key_bytes:
                raise HotKeyNoticeError(f"directory key must be 1..{self.max_key_bytes} bytes, got {len(key)}")
            require_int("partition count", partitions, 1, error=HotKeyNoticeError)
            parts = _placement_field({"placement": placement}, partitions)
            with self._lock:
                if key not in self._placements and len(self._placements) >= self.max_entries:
                    raise HotKeyNoticeError(
                        f"key directory is full ({self.max_entries} keys); retire a key before placing another"
                    )
                self._placements[key] = parts
        except HotKeyNoticeError:
            self._count_rejection()
            raise

    def apply(self, notice: HotKeyNotice, partitions: int) -> None:
        """Apply a validated notice against the partition count in force; see :meth:`set`."""
        self.set(notice.key, notice.placement, partitions)

    def remove(self, key: bytes) -> None:
        """Send ``key`` home again; a no-op if it is not placed."""
        with self._lock:
            self._placements.pop(key, None)

    def clear(self) -> None:
        """Send every key home."""
        with self._lock:
            self._placements.clear()

    def count_rejection(self) -> None:
        """Count one notice rejected before it reached the directory (it failed to decode)."""
        self._count_rejection()

    def _count_rejection(self) -> None:
        with self._lock:
            self._rejected += 1


# --- notices on the wire ------------------------------------------------------------------

#: The record header that names a notice's schema version; records without it are version 1.
NOTICE_SCHEMA_HEADER = "streams-schema"
NOTICE_V2 = b"hot_key_notice/2"


def notice_schema(headers: Iterable[tuple[str, bytes | None]] | None) -> bytes | None:
    """The ``streams-schema`` header value among a record's ``headers`` (None: a version 1 notice)."""
    return next((value for name, value in headers or () if name == NOTICE_SCHEMA_HEADER), None)


def notice_headers() -> list[tuple[str, bytes]]:
    """The headers a version 2 notice record carries."""
    return [(NOTICE_SCHEMA_HEADER, NOTICE_V2)]


def encode_notice(notice: HotKeyNotice) -> bytes:
    """The Avro bytes of a version 2 notice (send them with :func:`notice_headers`)."""
    return AvroCodec(NOTICE_SCHEMA).encode(notice.to_record())


def decode_notice(value: bytes, schema: bytes | None, *, home: Callable[[bytes, int], int],
                  partitions: int | None = None) -> HotKeyNotice:
    """Decode and validate one notice record by its ``streams-schema`` header value.

    ``schema`` ``b"hot_key_notice/2"``: version 2; None (no header): version 1, whose
    split factor becomes an explicit placement over ``partitions`` (the map in force;
    None: the count the notice names) from ``home(key, partitions)``, the key's hash
    partition (see :meth:`HotKeyNotice.from_v1_record`). Raises
    HotKeyNoticeError for an unknown schema or a malformed notice, SerializationError
    for bytes that are not the schema's Avro.
    """
    if schema == NOTICE_V2:
        return HotKeyNotice.from_record(AvroCodec(NOTICE_SCHEMA).decode(value))
    if schema is None:
        return HotKeyNotice.from_v1_record(AvroCodec(NOTICE_SCHEMA_V1).decode(value), home, partitions)
    raise HotKeyNoticeError(f"notice header {NOTICE_SCHEMA_HEADER} names an unknown schema {bytes(schema)[:60]!r}")
