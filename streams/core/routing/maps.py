"""Routing maps on the wire, and the rule for which map may follow which.

The compacted routing-maps topic (``TopicNames.routing_maps``) is the fleet's source of
truth for :class:`~streams.core.routing.router.RoutingMap` versions: one record per
version, keyed by :func:`map_record_key` (so compaction keeps every version), its
value the Avro of ``schemas/routing_map.avsc`` and a ``streams-schema`` header
``routing_map/1`` (the header notices carry, see :mod:`streams.core.routing.directory`).

Every record is untrusted input. :func:`check_successor` is the one rule a map must
pass before anyone installs or publishes it: a strictly newer version, a later first
bucket that is a bucket start and was still in the future when the map was
published, never fewer partitions, the same topic. A refusal is a
:class:`~streams.core.errors.RoutingMapError` whose ``reason`` is one of
:data:`REASONS`, so followers can count rejections by reason. A record identical to
an installed version is a replay of history, not an error: :func:`is_installed`
tells it apart before the check.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from streams.core.errors import InvalidArgumentError, RoutingMapError
from streams.core.routing.directory import NOTICE_SCHEMA_HEADER, notice_schema
from streams.core.routing.router import RoutingMap
from streams.core.serde import AvroCodec
from streams.core.validate import require_int

__all__ = [
    "MAP_SCHEMA",
    "REASONS",
    "check_successor",
    "decode_map",
    "encode_map",
    "in_force_and_next",
    "is_installed",
    "map_headers",
    "map_record_key",
]

#: The ``streams-schema`` header value of a routing-map record.
MAP_SCHEMA = "routing_map/1"
_MAP_SCHEMA_BYTES = MAP_SCHEMA.encode()
_AVRO_SCHEMA = "routing_map"  # schemas/routing_map.avsc

#: Every ``RoutingMapError.reason`` this module gives, and what it means.
REASONS = {
    "wrong schema": "the record's streams-schema header is missing or names another schema",
    "tombstone": "the record has no value",
    "invalid map": "a field is missing, of the wrong type or out of range (RoutingMap's own validation)",
    "version not newer": "the version is not greater than the newest installed one",
    "version conflict": "a different map of the same version is installed",
    "first bucket not later": "first_bucket_ms is not later than the newest installed map's",
    "first bucket not aligned": "first_bucket_ms is not the start of a bucket",
    "first bucket not in future": "first_bucket_ms had already begun when the map was published",
    "shrink": "fewer partitions than the newest installed map or than the topic has",
    "topic changed": "the topic (name or template) differs from the newest installed map's",
}


def map_headers() -> list[tuple[str, bytes]]:
    """The headers every routing-map record carries: ``streams-schema: routing_map/1``."""
    return [(NOTICE_SCHEMA_HEADER, _MAP_SCHEMA_BYTES)]


def map_record_key(m: RoutingMap) -> bytes:
    """The record key of map ``m``: ``b"v"`` and its version in ten digits (``b"v0000000002"``).

    One key per version, so compaction keeps the whole history; the keys sort as the versions do.
    """
    return b"v%010d" % m.version


def encode_map(m: RoutingMap) -> bytes:
    """The Avro bytes of ``m`` (``schemas/routing_map.avsc``); send them with :func:`map_headers`."""
    return AvroCodec(_AVRO_SCHEMA).encode(m.to_record())


def decode_map(value: bytes | None, headers: Iterable[tuple[str, bytes | None]] | None) -> RoutingMap:
    """Decode and validate one routing-map record's value by its headers.

    Raises RoutingMapError with ``reason`` ``"tombstone"`` for a null value,
    ``"wrong schema"`` unless the ``streams-schema`` header is ``routing_map/1``,
    ``"invalid map"`` for a field of the wrong type or range (the message names
    it: a bool is not an int, a topic must be a Kafka name, partitions
    1..MAX_PARTITIONS ...); SerializationError (``field`` set) for bytes that are
    not the schema's Avro.
    """
    if value is None:
        raise RoutingMapError("routing map record has no value (a tombstone)", reason="tombstone")
    schema = notice_schema(headers)
    if schema != _MAP_SCHEMA_BYTES:
        shown = "no header" if schema is None else repr(bytes(schema)[:60])
        raise RoutingMapError(f"routing map record header {NOTICE_SCHEMA_HEADER} must be {MAP_SCHEMA!r}, "
                              f"got {shown}", reason="wrong schema")
    record = AvroCodec(_AVRO_SCHEMA).decode(value)
    try:
        return RoutingMap.from_record(record)
    except RoutingMapError as exc:
        raise RoutingMapError(str(exc), reason="invalid map") from None


def is_installed(installed: Sequence[RoutingMap], candidate: RoutingMap) -> bool:
    """True if ``candidate`` equals an installed map (every field): a replay of history, nothing to install."""
    return any(m == candidate for m in installed)


def _refuse(candidate: RoutingMap, reason: str, detail: str) -> RoutingMapError:
    return RoutingMapError(f"routing map v{candidate.version} refused ({reason}): {detail}", reason=reason)


def check_successor(installed: Sequence[RoutingMap], candidate: RoutingMap, *, published_ms: int | None,
                    topic_partitions: int | None, bucket_width_ms: int) -> None:
    """Return if ``candidate`` may follow ``installed`` (oldest first); raise RoutingMapError if not.

    Call :func:`is_installed` first: a candidate identical to an installed map is
    refused here as ``"version conflict"`` like any other map of an installed version.
    The refusals, by ``reason`` (see :data:`REASONS`): ``"version conflict"`` or
    ``"version not newer"`` (version not above the newest's), ``"first bucket not
    later"``, ``"first bucket not aligned"`` (not a multiple of ``bucket_width_ms``;
    pass 1 to skip the check), ``"first bucket not in future"`` (``first_bucket_ms
    <= published_ms``, checked only when ``published_ms`` is given and some map is
    installed: the first map of a history starts whenever it says), ``"shrink"``
    (fewer partitions than the newest map's, or than ``topic_partitions``, the
    topic's count now, when given) and ``"topic changed"``. Unknown placement or
    hash never get here: RoutingMap refuses them when it is built. Raises
    InvalidArgumentError if ``bucket_width_ms`` is not an int >= 1.
    """
    require_int("bucket_width_ms", bucket_width_ms, 1, error=InvalidArgumentError)
    if not isinstance(candidate, RoutingMap):
        raise RoutingMapError(f"a routing map must be a RoutingMap, got {type(candidate).__name__}",
                              reason="invalid map")
    newest = max(installed, key=lambda m: m.version, default=None)
    if newest is not None and candidate.version <= newest.version:
        if any(m.version == candidate.version for m in installed):
            raise _refuse(candidate, "version conflict", f"a different v{candidate.version} is installed")
        raise _refuse(candidate, "version not newer", f"the newest installed is v{newest.version}")
    if newest is not None and candidate.first_bucket_ms <= newest.first_bucket_ms:
        raise _refuse(candidate, "first bucket not later",
                      f"first_bucket_ms {candidate.first_bucket_ms} is not after v{newest.version}'s "
                      f"{newest.first_bucket_ms}")
    if candidate.first_bucket_ms % bucket_width_ms:
        raise _refuse(candidate, "first bucket not aligned",
                      f"first_bucket_ms {candidate.first_bucket_ms} is not the start of a {bucket_width_ms} ms bucket")
    if newest is not None and published_ms is not None and candidate.first_bucket_ms <= published_ms:
        raise _refuse(candidate, "first bucket not in future",
                      f"first_bucket_ms {candidate.first_bucket_ms} is not after its publication at {published_ms}")
    if newest is not None and candidate.partitions < newest.partitions:
        raise _refuse(candidate, "shrink",
                      f"{candidate.partitions} partitions, fewer than v{newest.version}'s {newest.partitions}")
    if topic_partitions is not None and candidate.partitions < topic_partitions:
        raise _refuse(candidate, "shrink",
                      f"{candidate.partitions} partitions, fewer than the topic's {topic_partitions}")
    if newest is not None and candidate.topic != newest.topic:
        raise _refuse(candidate, "topic changed",
                      f"topic {candidate.topic!r} differs from v{newest.version}'s {newest.topic!r}")


def in_force_and_next(history: Sequence[RoutingMap], now_ms: int) -> tuple[RoutingMap | None, RoutingMap | None]:
    """The map in force at ``now_ms`` (the newest whose first bucket has begun) and the next scheduled one.

    Either is None when there is none; ``history`` in any order.
    """
    ordered = sorted(history, key=lambda m: m.version)
    current = None
    for m in ordered:
        if m.first_bucket_ms <= now_ms:
            current = m
        else:
            return current, m
    return current, None
