"""Routing maps and the router: the topic and partition of every event.

A :class:`RoutingMap` names a topic (or a per-bucket topic template), a partition
count and a placement strategy from :data:`streams.core.routing.placement.PLACERS`
(default ``mod`` + ``murmur2``: Kafka's own rule, so a user's other producers put
an unsplit key where we do; ``jump`` + ``xxh3`` is the opt-in for topics expected
to grow). Maps are versioned and take effect at a bucket boundary
(``first_bucket_ms``). The :class:`Router` keeps the whole history, so every
producer switches maps at the same event time, a key never straddles two
partitions inside one bucket, and replays of old buckets use the map that was in
force then. Install a map before its first bucket begins: the router routes by
event time and does not read the clock.

Keys the directory places (moved or split) follow :mod:`streams.core.routing.directory`.
"""

from __future__ import annotations

import bisect
import threading
import uuid
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, NamedTuple

import xxhash

from streams.core.errors import InvalidIdError, RoutingMapError
from streams.core.native import NATIVE
from streams.core.routing.directory import (
    HotKeyNotice,
    KeyDirectory,
    event_id_bytes,
    salted_key,
)
from streams.core.routing.hashing import MAX_KEY_BYTES, canonical_key
from streams.core.routing.placement import (
    HASHES,
    MAX_PARTITIONS,
    PLACEMENTS,
    make_placer,
)
from streams.core.time.buckets import MAX_TIMESTAMP_MS, TimeBuckets, check_timestamp
from streams.core.validate import (
    BUCKET_PLACEHOLDER,
    require_fields,
    require_int,
    require_topic,
)

__all__ = [
    "BUCKET_PLACEHOLDER",
    "UNSPLIT",
    "Router",
    "RoutingDecision",
    "RoutingMap",
]

#: ``RoutingDecision.salt`` of an event whose key is not split.
UNSPLIT = -1

_INT32_MAX = 2**31 - 1
_BUCKET_CACHE_LIMIT = 1024
_SALTED_MEMO_LIMIT = 65_536
# Same function as streams.core.routing.hashing.xxh3_64, bound without the wrapper's frame.
_xxh3 = xxhash.xxh3_64_intdigest


def _check_int(name: str, value: object, low: int, high: int) -> None:
    require_int(f"routing map field {name!r}", value, low, high, RoutingMapError)


def _check_topic(topic: object) -> None:
    require_topic("routing map field 'topic'", topic, error=RoutingMapError)


@dataclass(frozen=True, kw_only=True)
class RoutingMap:
    """One version of the routing rules, in force from bucket ``first_bucket_ms`` on.

    ``version`` 1..2**31-1; ``partitions`` 1..MAX_PARTITIONS; ``placement`` in
    PLACEMENTS; ``hash`` in HASHES; ``first_bucket_ms`` 0..MAX_TIMESTAMP_MS (the
    router also requires it to be a bucket start); ``topic`` a Kafka topic name
    (1..249 of ``[A-Za-z0-9._-]``) or a template holding ``{bucket}`` once, replaced
    by the bucket label. Raises RoutingMapError naming the field and allowed values.
    """

    version: int
    partitions: int
    topic: str
    placement: str = "mod"
    hash: str = "murmur2"
    first_bucket_ms: int = 0

    def __post_init__(self) -> None:
        _check_int("version", self.version, 1, _INT32_MAX)
        _check_int("partitions", self.partitions, 1, MAX_PARTITIONS)
        _check_int("first_bucket_ms", self.first_bucket_ms, 0, MAX_TIMESTAMP_MS)
        if self.placement not in PLACEMENTS:
            raise RoutingMapError(f"routing map field 'placement' must be one of {PLACEMENTS}, got {self.placement!r}")
        if self.hash not in HASHES:
            raise RoutingMapError(f"routing map field 'hash' must be one of {HASHES}, got {self.hash!r}")
        _check_topic(self.topic)

    def topic_for(self, label: str) -> str:
        """The topic for the bucket labelled ``label``: ``topic`` with ``{bucket}`` replaced."""
        return self.topic.replace(BUCKET_PLACEHOLDER, label)

    def partition_of(self, key: object) -> int:
        """The unsalted partition of ``key`` under this map; raises InvalidKeyError like canonical_key."""
        return make_placer(self.hash, self.placement, self.partitions)(canonical_key(key))

    def to_record(self) -> dict[str, Any]:
        """The map as a dict with exactly the fields of ``schemas/routing_map.avsc``."""
        return {
            "version": self.version,
            "partitions": self.partitions,
            "placement": self.placement,
            "hash": self.hash,
            "first_bucket_ms": self.first_bucket_ms,
            "topic": self.topic,
        }

    @classmethod
    def from_record(cls, record: Mapping[str, Any]) -> RoutingMap:
        """Build a map from a decoded record; the inverse of :meth:`to_record`.

        Raises RoutingMapError if ``record`` is not a mapping, lacks a field, has an
        unknown one, or a value has the wrong type (bool is not an int) or range.
        """
        require_fields(record, _MAP_FIELDS, "routing map record", RoutingMapError)
        return cls(**{name: record[name] for name in _MAP_FIELDS})


_MAP_FIELDS = frozenset(RoutingMap.__dataclass_fields__)


class RoutingDecision(NamedTuple):
    """Where one event goes.

    ``key`` is the record key to send (salted ``key#i`` if split); ``bucket_label``
    names the event's bucket; ``salt`` is UNSPLIT (-1) for an unsplit key.
    """

    topic: str
    partition: int
    key: bytes
    bucket_index: int
    bucket_start_ms: int
    bucket_label: str
    map_version: int
    salt: int


class _Compiled(NamedTuple):
    """What routing needs of one installed map, computed once at install."""

    first_ms: int
    place: Callable[[bytes], int]
    n: int
    version: int
    map: RoutingMap
    buckets: dict[int, tuple[str, int, str]]  # bucket index -> (topic, start_ms, label)


# Builds a RoutingDecision from a tuple of its fields without the generated __new__'s frame.
_decision = tuple.__new__
# Router._hot before any bucket was resolved: no timestamp falls in [0, 0).
_COLD = (0, 0, "", None, 0, "", 0)
# Keys the router memoises: exact classes only, so no bool (== 1) or float (1.0 == 1)
# can hit an entry made for another value.
_MEMOISED = frozenset((str, bytes, int, uuid.UUID))


class Router:
    """Routes events to (topic, partition, record key) under a history of routing maps.

    ``maps`` may come in any order; they are installed by version, which must rise
    strictly together with ``first_bucket_ms``. ``directory`` is the live key
    directory (a fresh empty one if omitted). ``memo_size`` bounds the memo of recently routed
    keys (str, bytes, int, UUID): each key's unsplit decision in its latest bucket,
    so a repeated key costs one dict lookup instead of canonicalising and hashing
    again (the compiled murmur2 call alone costs several lookups); 0 disables it.
    A key is memoised the second time it is routed within the last ``memo_size``
    first sightings (a doorkeeper of key hashes remembers the first), because keeping
    every one-off decision alive cost more than hashing it (dict growth and
    garbage-collector passes over the retained decisions; a cold UUID key cost half
    again as much when every first sighting was memoised). A full memo or doorkeeper
    is cleared, not evicted; each memo entry costs roughly 300 bytes, so the default
    holds about 20 MB at most. A key not in the memo, in the bucket last resolved,
    is placed through a cache of that bucket (topic, placer, label, map version),
    dropped by :meth:`install`.
    Repeated calls may return the same (immutable) decision object. With
    ``streams-native`` installed, ``route`` is its compiled ``RouteCore.route``: the
    same decisions and errors in one call, calling back here for other buckets and
    for keys the directory places.
    Thread-safe: ``install`` and directory updates may run beside ``route`` in other
    threads. Raises RoutingMapError if ``maps`` is empty or a map cannot be
    installed (see :meth:`install`), ConfigError for a bad ``memo_size``.
    """

    def __init__(
        self,
        buckets: TimeBuckets,
        maps: Iterable[RoutingMap],
        directory: KeyDirectory | None = None,
        memo_size: int = 65_536,
    ) -> None:
        if not isinstance(buckets, TimeBuckets):
            raise RoutingMapError(f"buckets must be a TimeBuckets, got {type(buckets).__name__}")
        require_int("memo_size", memo_size, 0)
        self.buckets = buckets
        self.directory = KeyDirectory() if directory is None else directory
        self._memo_size = memo_size
        # key -> its unsplit decision in the bucket it was last routed in
        self._memo: dict[object, RoutingDecision] = {}
        # hash(key) -> None for keys routed once and not memoised yet: ints only, so the
        # garbage collector never tracks it
        self._seen: dict[int, None] = {}
        # placed key bytes -> (its home decision, its placement, {salt: decision of that salt}, or None when
        # the placement names a partition the map of that bucket lacks: such events go home)
        self._placed_memo: dict[bytes, tuple[RoutingDecision, tuple[int, ...], dict[int, RoutingDecision] | None]] = {}
        self._width_ms = buckets.width_ms
        self._placement_lookup = self.directory.lookup
        self._lock = threading.Lock()
        self._route_core: Any = None  # streams-native's RouteCore, once built (below)
        self._history: tuple[tuple[int, ...], tuple[_Compiled, ...]] = ((), ())
        self._newest: _Compiled | None = None
        self._hot: tuple[Any, ...] = _COLD
        #: Bumped by every ``install``: a caller that caches what a decision implies (a
        #: bucket's topic and placer, see RoutingProducer) drops its cache when it changes.
        self.epoch = 0
        ordered = sorted(maps, key=lambda m: m.version if isinstance(m, RoutingMap) else 0)
        if not ordered:
            raise RoutingMapError("a Router needs at least one routing map")
        for routing_map in ordered:
            self.install(routing_map)
        if NATIVE is not None and type(getattr(self._placement_lookup, "__self__", None)) is dict:
            # The same route() in one compiled call (streams-native's RouteCore): it reads this router's memo
            # and hot bucket from its __dict__ and calls back here for every other case; its _remember keeps
            # the doorkeeper as a set of Rust ints (the same rule, no Python int and dict slot per new key).
            core = NATIVE.RouteCore(self, RoutingDecision, list(_MEMOISED), check_timestamp, canonical_key)
            self._route_core = core
            self.route = core.route  # type: ignore[method-assign]
            self._remember = core.remember  # type: ignore[method-assign]

    @property
    def current(self) -> RoutingMap:
        """The newest installed map (in force from its first bucket on)."""
        return self._newest.map  # type: ignore[union-attr]

    @property
    def maps(self) -> tuple[RoutingMap, ...]:
        """Every installed map, oldest first."""
        return tuple(c.map for c in self._history[1])

    def install(self, routing_map: RoutingMap) -> None:
        """Add a map that takes effect at its ``first_bucket_ms``.

        Raises RoutingMapError unless its version and first bucket are both strictly
        greater than the newest map's and ``first_bucket_ms`` is a bucket start.
        """
        if not isinstance(routing_map, RoutingMap):
            raise RoutingMapError(f"install needs a RoutingMap, got {type(routing_map).__name__}")
        if routing_map.first_bucket_ms % self._width_ms:
            raise RoutingMapError(
                f"routing map v{routing_map.version}: first_bucket_ms {routing_map.first_bucket_ms} "
                f"is not the start of a {self._width_ms} ms bucket"
            )
        with self._lock:
            newest = self._newest
            if newest is not None and routing_map.version <= newest.map.version:
                raise RoutingMapError(
                    f"routing map version {routing_map.version} must be greater than the newest, {newest.map.version}"
                )
            if newest is not None and routing_map.first_bucket_ms <= newest.first_ms:
                raise RoutingMapError(
                    f"routing map v{routing_map.version}: first_bucket_ms {routing_map.first_bucket_ms} "
                    f"must be later than v{newest.map.version}'s {newest.first_ms}"
                )
            place = make_placer(routing_map.hash, routing_map.placement, routing_map.partitions)
            compiled = _Compiled(routing_map.first_bucket_ms, place, routing_map.partitions, routing_map.version,
                                 routing_map, {})
            starts, history = self._history
            self._history = (starts + (compiled.first_ms,), history + (compiled,))
            self._newest = compiled
            # After _newest: a memo that a router thread reads is never older than the
            # maps it reads next (see _resolve), so no entry made under an older
            # history survives into this one.
            self._memo = {}
            self._seen = {}
            if self._route_core is not None:
                self._route_core.forget()
            self._placed_memo = {}
            self._hot = _COLD
            self.epoch += 1

    def map_for(self, ts_ms: int) -> RoutingMap:
        """The map in force for the bucket holding ``ts_ms``.

        Raises InvalidBucketError for a bad timestamp and RoutingMapError if ``ts_ms``
        is before the first map's first bucket.
        """
        return self._compiled_for(check_timestamp(ts_ms)).map

    def _compiled_for(self, ts_ms: int) -> _Compiled:
        newest = self._newest
        if ts_ms >= newest.first_ms:  # type: ignore[union-attr]
            return newest  # type: ignore[return-value]
        starts, history = self._history
        i = bisect.bisect_right(starts, ts_ms) - 1
        if i < 0:
            raise RoutingMapError(f"no routing map covers {ts_ms} ms: the first starts at {starts[0]} ms")
        return history[i]

    def route(self, key: object, ts_ms: int, event_id: object = None) -> RoutingDecision:
        """Route one event with routing key ``key`` and event time ``ts_ms``.

        ``key`` is anything canonical_key accepts. ``event_id`` (bytes, int or
        uuid.UUID) chooses the salt of a split key and is required for one. The
        partition is always in ``[0, n)`` of the map in force for ``ts_ms``.
        Raises InvalidKeyError for a bad key, InvalidBucketError for a bad time,
        RoutingMapError if no map covers ``ts_ms``, and InvalidIdError if the key
        is split and ``event_id`` is missing or malformed.
        """
        if ts_ms.__class__ is not int:
            ts_ms = check_timestamp(ts_ms)
        # Fast path: the key's unsplit decision in this bucket, memoised. Memo entries
        # only ever hold valid buckets, so a hit also proves ts_ms is in range.
        memo = self._memo  # read before the maps: see install
        decision = memo.get(key) if key.__class__ in _MEMOISED else None
        if decision is None:
            hot = self._hot  # the bucket last resolved: (start, end, topic, placer, index, label, version)
            if hot[0] <= ts_ms < hot[1]:
                # A key not seen lately, in that bucket: _resolve's work without its frame and checks.
                if key.__class__ is bytes and 0 < len(key) <= MAX_KEY_BYTES:  # type: ignore[arg-type]
                    kb = key
                else:
                    kb = canonical_key(key)
                decision = _decision(RoutingDecision, (hot[2], hot[3](kb), kb, hot[4], hot[0], hot[5], hot[6], UNSPLIT))
                if self._memo_size and key.__class__ in _MEMOISED:
                    self._remember(memo, key, decision, None)
            else:
                decision = self._resolve(key, ts_ms, None)
        elif not 0 <= ts_ms - decision[4] < self._width_ms:
            decision = self._resolve(key, ts_ms, decision)
        placement = self._placement_lookup(decision[2])
        if placement is None:
            return decision
        return self._placed(decision, placement, event_id)

    def _resolve(self, key: object, ts_ms: int, stale: RoutingDecision | None) -> RoutingDecision:
        """Build (and memoise) the unsplit decision of ``key`` in the bucket holding ``ts_ms``.

        ``stale`` is the key's memoised decision for another bucket, if any.
        """
        memo = self._memo  # read before the maps: see install
        if not 0 <= ts_ms <= MAX_TIMESTAMP_MS:  # route() has already made it an int
            ts_ms = check_timestamp(ts_ms)
        compiled = self._newest
        if ts_ms < compiled.first_ms:  # type: ignore[union-attr]
            compiled = self._compiled_for(ts_ms)
        version = compiled.version  # type: ignore[union-attr]
        if stale is not None and stale[6] == version:  # same map, other bucket: reuse
            kb, partition = stale[2], stale[1]
        else:
            # Bytes of an acceptable length are already canonical (RoutingProducer passes
            # canonical_key's result): one canonicalisation per event, not two.
            if key.__class__ is bytes and 0 < len(key) <= MAX_KEY_BYTES:  # type: ignore[arg-type]
                kb = key  # type: ignore[assignment]
            else:
                kb = canonical_key(key)
            partition = compiled.place(kb)  # type: ignore[union-attr]
        width = self._width_ms
        index = ts_ms // width
        bucket = compiled.buckets.get(index)
        if bucket is None:
            start = index * width
            label = self.buckets.label_of(start)
            bucket = (compiled.map.topic_for(label), start, label)
            if len(compiled.buckets) >= _BUCKET_CACHE_LIMIT:
                compiled.buckets.clear()
            compiled.buckets[index] = bucket
        topic, start, label = bucket
        self._hot = (start, start + width, topic, compiled.place, index, label, version)  # type: ignore[union-attr]
        decision: RoutingDecision = _decision(
            RoutingDecision, (topic, partition, kb, index, start, label, version, UNSPLIT)
        )
        if self._memo_size and key.__class__ in _MEMOISED:
            self._remember(memo, key, decision, stale)
        return decision

    def _remember(self, memo: dict[object, RoutingDecision], key: object, decision: RoutingDecision,
                  stale: RoutingDecision | None) -> None:
        """Memoise ``decision`` on the key's second sighting, or at once if the key was memoised (``stale``).

        A first sighting is only remembered, as ``hash(key)`` in the doorkeeper: a
        one-off key (a UUID, say) never costs a memo entry.
        """
        seen = self._seen
        if stale is None and (h := hash(key)) not in seen:
            if len(seen) >= self._memo_size:
                seen.clear()
            seen[h] = None
        else:
            if len(memo) >= self._memo_size:
                memo.clear()
            memo[key] = decision

    def _placed(self, decision: RoutingDecision, placement: tuple[int, ...], event_id: object) -> RoutingDecision:
        """The decision for one event of a key the directory places; ``decision`` is its home one.

        The rule of :mod:`streams.core.routing.directory`: a move ``(p,)`` sends every
        event to ``p`` under the plain record key (salt 0); a split over k partitions
        sends salt ``i = xxh3_64(event ID bytes) % k`` to ``placement[i]`` under
        ``key#i``. A placement naming a partition the map in force for this bucket
        does not have (an older, smaller map) routes home. Decisions are memoised per
        salt beside the home decision and the placement they derive from.
        """
        kb = decision[2]
        memo = self._placed_memo
        entry = memo.get(kb)
        if entry is None or entry[0] is not decision or entry[1] is not placement:
            # Checked once per (home decision, placement), not per event: the decision fixes bucket and map.
            compiled = self._newest
            if decision[4] < compiled.first_ms:  # type: ignore[union-attr]
                compiled = self._compiled_for(decision[4])
            entry = (decision, placement, {} if max(placement) < compiled.n else None)  # type: ignore[union-attr]
            if len(memo) >= _SALTED_MEMO_LIMIT:
                memo.clear()
            memo[kb] = entry
        subs = entry[2]
        if subs is None:
            return decision
        k = len(placement)
        if k == 1:
            salt = 0
        else:
            if event_id.__class__ is not bytes or not event_id:
                if event_id is None:
                    raise InvalidIdError(
                        f"key {decision[2][:64]!r} is split {k} ways: route() needs its event_id to pick a salt"
                    )
                event_id = event_id_bytes(event_id)
            salt = _xxh3(event_id) % k  # type: ignore[arg-type]
        sub = subs.get(salt)
        if sub is None:
            topic, _, _, index, start, label, version, _ = decision
            sub = _decision(
                RoutingDecision,
                (topic, placement[salt], kb if k == 1 else salted_key(kb, salt), index, start, label, version, salt),
            )
            subs[salt] = sub
        return sub

    def apply_notice(self, notice: HotKeyNotice) -> None:
        """Apply a placement notice to the directory against the newest map's partition count.

        Raises HotKeyNoticeError (counted by the directory) if a partition is out of
        that range or the directory rejects it.
        """
        self.directory.apply(notice, self.current.partitions)

    def placer_for(self, ts_ms: int) -> Callable[[bytes], int]:
        """The function that places a canonical key at home in the bucket holding ``ts_ms``.

        The very placer :meth:`route` uses for a key the directory does not place, so
        ``placer_for(ts)(canonical_key(k)) == route(k, ts).partition`` for such keys.
        Raises like :meth:`map_for`.
        """
        return self._compiled_for(check_timestamp(ts_ms)).place

    def home_of(self, key: object) -> int:
        """The hash (home) partition of ``key`` under the newest map; raises InvalidKeyError for a bad key."""
        return self._newest.place(canonical_key(key))  # type: ignore[union-attr]
