"""The worker's processing core: decode, validate, detect, classify, aggregate, close.

Kafka-free so it can be tested in microseconds; stage 1's loop
(:mod:`streams.worker.stage1`) feeds it batches of consumed records and sends what it
returns. One :class:`EventProcessor` per worker process:

* :meth:`EventProcessor.handle` (and :meth:`~EventProcessor.handle_batch`, the same per
  record) takes one consumed record and returns what must be
  sent for it: nothing (an on-time event, folded into stage 1), a late-event record
  (its bucket had closed), or a dead letter (undecodable, malformed ID, empty key,
  non-finite value, timestamp in the future or before the epoch). Every record is
  counted under exactly one of those, so ``received == on_time + late + too_old +
  dead_lettered`` (see :meth:`counts`).
* :meth:`EventProcessor.tick` runs on a timer: it asks the bucket roller
  (:class:`~streams.core.time.roller.BucketRoller`) which buckets closed, returns the
  stage-1 partials and a bucket-closed record for each, and the hot-key sketch
  summary to publish.

Whether an event is on time, late, too old or a dead letter, when a bucket closes,
and the conservation counts are decided by the roller alone, per source partition:
:meth:`EventProcessor.recover` hands it each source's closed-through bucket from the
checkpoints, and the processor asks it again when it writes a checkpoint. The
processor owns the stage-1 store, the outputs and the write order.

Stage-1 state lives in a :class:`Stage1Store`: a mapping (a dict in the worker,
read back from the changelog when partitions are assigned) plus a changelog callback that writes each change to the changelog partition
of the *source* partition. Changes are coalesced: :meth:`Stage1Store.flush` writes
each entry changed since the last flush once, and the worker acknowledges source
records only after the flush that covers them. Each entry remembers the source
offset it last folded, so a record re-read after a crash (at-least-once delivery) is
recognised and skipped: the state is exact although delivery is not.

A crash may cut the worker's writes anywhere, and records on different partitions
reach the broker in no fixed order, so :meth:`EventProcessor.persist` makes them
durable in three steps, each only after the broker acknowledged the one before:

1. changed entries and every output (partials of closed buckets, late events, dead letters);
2. the checkpoint (:meth:`EventProcessor.checkpoint`): per source, the last offset
   handled, the highest closed bucket and the largest event time seen — it vouches
   for what step 1 made durable;
3. tombstones of closed buckets' entries (:meth:`Stage1Store.release_closed`).

A tombstone that reached the broker before its bucket's partial would lose the
bucket; one that reached it before the checkpoint would let re-read records reopen a
bucket that had been emitted. If a crash comes after step 2 but before step 3's
tombstones are durable, :meth:`Stage1Store.reindex` drops the leftover entries.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable, Iterable, Mapping, MutableMapping
from dataclasses import dataclass
from typing import Any, NamedTuple

from streams.core.aggregate import Stats
from streams.core.config import WorkerSettings
from streams.core.deadletter import MAX_ORIGINAL_KEY_BYTES, bounded, dead_letter_record, original_fields
from streams.core.errors import InvalidIdError, SerializationError
from streams.core.hotkeys.sketch import SketchSummary, SlidingSketch
from streams.core.eventscan import Scanner, identity_hash, native_scanner, plain_id
from streams.core.ids import classify_id
from streams.core.partials import partial_record
from streams.core.routing.hashing import MAX_KEY_BYTES
from streams.core.serde import CONTENT_TYPE, PAYLOAD, AvroCodec, JsonCodec
from streams.core.time.buckets import TimeBuckets, parse_duration
from streams.core.time.eventtime import PlacementKind
from streams.core.time.roller import BucketRoller
from streams.core.time.watermark import WatermarkTracker

log = logging.getLogger(__name__)

__all__ = ["InMessage", "Output", "TickResult", "Checkpoint", "FetchState", "Stage1Store", "EventProcessor",
           "ProcessorCounts"]

_META = "meta|"
_IDS = "ids|"
_MAX_KEY_CHARS = MAX_KEY_BYTES // 4  # a str this short is within MAX_KEY_BYTES whatever its characters
_MS_LIMIT = 2**62  # the time arithmetic's range; an event time past it is judged as this far

Source = tuple[str, int]  # (topic, partition) a record was read from


class InMessage(NamedTuple):
    """One consumed record, as the worker sees it (a NamedTuple: one is built per record)."""

    topic: str
    partition: int
    offset: int
    key: bytes | None
    value: bytes | None
    headers: Mapping[str, bytes]


@dataclass(frozen=True)
class Output:
    """A record to send: ``role`` names the topic ("late_events", "dead_letters",
    "partials", "bucket_closed"), ``key`` its record key, ``record`` its Avro record."""

    role: str
    key: bytes
    record: dict[str, Any]


@dataclass(frozen=True)
class TickResult:
    """What one timer tick produced."""

    outputs: tuple[Output, ...]
    summary: SketchSummary
    closed_buckets: tuple[str, ...]
    watermark_ms: int | None


class Checkpoint(NamedTuple):
    """A source's durable progress: buckets through ``closed`` have durable partials, the
    effects of records through ``offset`` are durable, and ``event_times`` are the largest
    event times seen on it, largest first (they restore its watermark, outlier-proof, as
    Kafka Streams restores stream time)."""

    closed: int
    offset: int
    event_times: tuple[int, ...]


class FetchState(NamedTuple):
    """What the consumer last learned of a source partition from the broker.

    ``highwater`` is the offset the next produced record will get and ``fetched_at_ms``
    the wall clock of the last fetch response for the partition (both None before the
    first); ``position`` the offset the consumer started this assignment from (its
    committed offset, else 0: the group reads a partition it never committed from the
    beginning; None before it is known);
    ``fetched_to`` how far the consumer has fetched and handed on (its fetch position).
    """

    highwater: int | None
    fetched_at_ms: int | None
    position: int | None
    fetched_to: int | None = None


@dataclass(frozen=True)
class ProcessorCounts:
    """Conservation counters: ``received == on_time + late + too_old + dead_lettered``;
    ``duplicates`` are records re-read after a restart whose effects were already
    durable (not in ``received``), re-read on-time records an entry had folded, or
    resends of an event already folded; ``collisions`` are distinct events folded
    although an earlier event of their bucket and slot had the same ID (they are in
    ``on_time``: counted, never dropped)."""

    received: int
    on_time: int
    late: int
    too_old: int
    dead_lettered: int
    duplicates: int
    collisions: int = 0


class Stage1Store:
    """Partial aggregates per (bucket index, source partition, key), changelogged per source partition.

    The source partition is the entry's *slot*: stage 2 upserts one partial per
    (bucket, key, slot), so a key whose events a bucket saw on several partitions
    (split over them, or moved by the directory in the middle of the bucket, or
    handed between workers) is merged exactly whoever folded each partition.

    ``data`` maps entry keys to ``[changelog partition, {source partition: last offset}, stats record]``;
    ``changelog(partition, key, value)`` persists a change (``value`` None deletes).
    Meta entries ``meta|<topic>|<partition>`` remember the highest closed bucket index
    and the last durable offset of a source, so a restarted worker does not reopen a
    bucket it already emitted.

    Event identities: :meth:`fold` with an ``event_id`` (a 64-bit hash of the event's
    identity: ID, key, event time and value, see :func:`streams.core.eventscan.identity_hash`) folds each
    identity once per (bucket, slot) while the bucket is open, so an event its
    producer or application sent twice is counted once, while two distinct events
    that share an ID (producers minting colliding Snowflake IDs) are both counted.
    Such a *collision* (a new identity with an ID already folded in the slot) is
    counted in :attr:`collisions`; the plain IDs behind that check live in memory only,
    so collisions with events folded before a restart go uncounted (never dropped).
    The identities are changelogged incrementally, as
    ``ids|<bucket index>|<slot>|<n>`` chunks holding the IDs added since the last
    flush, so the cost of a flush is its new IDs, not the bucket's; they are dropped
    with the bucket. Memory: 8 bytes (plus a set slot) per on-time event of an open bucket.
    """

    def __init__(self, data: MutableMapping[str, Any], changelog: Callable[[int, str, Any], None]) -> None:
        self.data = data
        self._changelog = changelog
        self._index: dict[int, set[str]] = {}
        self._live: dict[str, list[Any]] = {}  # entry key -> [partition, offsets, Stats]
        self._dirty: set[str] = set()
        self._closed: list[tuple[int, str]] = []  # (changelog partition, entry key) awaiting a tombstone
        self._ids: dict[tuple[int, int], set[int]] = {}  # (bucket index, slot) -> event identity hashes folded
        self._plain_ids: dict[tuple[int, int], set[int]] = {}  # (bucket index, slot) -> plain event IDs (64 bits)
        self.collisions = 0  # distinct events folded whose ID an earlier event of the slot had
        self._new_ids: dict[tuple[int, int], list[int]] = {}  # added since the last flush
        self._id_chunks: dict[tuple[int, int], list[str]] = {}  # their changelogged chunk keys
        self._indexed_len = -1
        self._source_keys: dict[Source, str] = {}  # (topic, partition) -> "topic|partition", the offsets' key

    def reindex(self) -> dict[Source, Checkpoint]:
        """Re-read ``data`` after a restore from the changelog added partitions to it.

        Entries already live here are kept (they may hold folds not flushed yet);
        entries new in ``data`` are loaded; entries gone from ``data`` (a revoked
        partition) are forgotten. A recovered entry whose bucket the checkpoint of its
        changelog partition says was closed is dropped: its partial was durable before
        that checkpoint was written, only its tombstone was lost in a crash.
        Returns the recovered checkpoint of every source.
        """
        old = self._live
        self._live = {}
        self._index.clear()
        old_ids, self._ids, self._id_chunks = self._ids, {}, {}
        old_plain, self._plain_ids = self._plain_ids, {}
        items = list(self.data.items())
        checkpoints: dict[Source, Checkpoint] = {}
        closed_by_partition: dict[int, int] = {}
        for key, value in items:
            if key.startswith(_META):
                topic, partition = key[len(_META):].rsplit("|", 1)
                source = (topic, int(partition))
                times = value.get("times")
                if times is None:  # written before watermark agreement: only the largest
                    times = [] if value.get("max_ts") is None else [value["max_ts"]]
                checkpoints[source] = Checkpoint(int(value["closed"]), int(value["offset"]),
                                                 tuple(int(t) for t in times))
                closed_by_partition[source[1]] = max(closed_by_partition.get(source[1], -1), checkpoints[source].closed)
        for key, value in items:
            if key.startswith(_META):
                continue
            if key.startswith(_IDS):
                self._reindex_ids(key, value, checkpoints)
                continue
            index = int(key.split("|", 1)[0])
            if key in old:
                self._live[key] = old[key]
            elif value is not None:
                partition, offsets, record = value
                if index <= closed_by_partition.get(partition, -1):
                    del self.data[key]
                    self._changelog(partition, key, None)
                    continue
                self._live[key] = [partition, dict(offsets), Stats.from_record(record)]
            else:
                continue
            self._index.setdefault(index, set()).add(key)
        live_slices = {(int(i), int(slot)) for i, slot, _ in (k.split("|", 2) for k in self._live)}
        for slice_key, ids in old_ids.items():  # IDs of slices kept live, flushed or not
            if slice_key in live_slices:
                self._ids.setdefault(slice_key, set()).update(ids)
        self._plain_ids = {k: v for k, v in old_plain.items() if k in live_slices}
        self._new_ids = {k: v for k, v in self._new_ids.items() if k in live_slices}
        self._dirty &= self._live.keys()
        self._indexed_len = len(self.data)
        return checkpoints

    def drop_partitions(self, partitions: set[int]) -> int:
        """Forget everything of changelog partitions this worker no longer owns; returns how many keys.

        Without this a worker would keep its own stale entries of a partition another
        worker took over and, given the partition back, prefer them to the restored,
        newer ones. Nothing
        is written to the changelog: the partition's new owner writes it now. Folds
        not flushed yet are dropped too: their records were not acknowledged, so the
        new owner reads them again.
        """
        if not partitions:
            return 0
        before = len(self.data)
        doomed = [k for k, v in list(self.data.items()) if _partition_of(k, v) in partitions]
        for key in doomed:
            self.data.pop(key, None)
        for key in [k for k, entry in self._live.items() if entry[0] in partitions]:
            del self._live[key]
            self._dirty.discard(key)
            keys = self._index.get(int(key.split("|", 1)[0]))
            if keys is not None:
                keys.discard(key)
                if not keys:
                    self._index.pop(int(key.split("|", 1)[0]), None)
        for store in (self._ids, self._plain_ids, self._new_ids, self._id_chunks):
            for slice_key in [k for k in store if k[1] in partitions]:
                del store[slice_key]
        self._closed = [(p, k) for p, k in self._closed if p not in partitions]
        self._own_change(before)
        return len(doomed)

    def _reindex_ids(self, key: str, value: Any, checkpoints: Mapping[Source, Checkpoint]) -> None:
        """Load one chunk of event IDs, if a checkpoint vouches for it and its bucket is open.

        A chunk can reach the broker while the entries it describes did not (a crash cuts
        writes anywhere): trusting it would skip those events when they are re-read.
        """
        _, index, slot, _ = key.split("|", 3)
        slice_key = (int(index), int(slot))
        if value is None:
            return
        partition, hashes, offsets = value
        vouched = True
        for source_key, offset in offsets.items():
            topic, p = source_key.rsplit("|", 1)
            cp = checkpoints.get((topic, int(p)))
            if cp is None or offset > cp.offset or slice_key[0] <= cp.closed:
                vouched = False
        if not vouched:
            del self.data[key]
            self._changelog(partition, key, None)
            return
        self._ids.setdefault(slice_key, set()).update(hashes)
        self._id_chunks.setdefault(slice_key, []).append(key)

    def fold(self, source: Source, offset: int, index: int, key: str, value: float | None,
             event_id: int | None = None, plain_id: int = 0) -> bool:
        """Fold one on-time event in; False (and nothing changed) if this source offset, or
        this ``event_id`` (a 64-bit identity hash) in this bucket and slot, was folded before.

        ``plain_id`` (64 bits of the event ID alone) counts a collision when an event
        with a new identity but an ID folded before in the slot is folded.

        Offsets are remembered per (topic, partition), so an entry of a per-bucket
        topic or of a foreign producer's records is folded correctly too. The entry is
        changelogged to its source partition's changelog partition.
        """
        topic, partition = source
        entry_key = f"{index}|{partition}|{key}"
        entry = self._live.get(entry_key)
        slice_key = (index, partition)  # built once: a tuple's hash is not cached
        ids = None
        if event_id is not None:
            ids = self._ids.get(slice_key)
            if ids is None:
                ids = self._ids[slice_key] = set()
            elif entry is not None and event_id in ids:
                return False  # sent twice: its first copy is in the entry
        if entry is None:
            entry = self._live[entry_key] = [partition, {}, Stats.empty()]
            self._index.setdefault(index, set()).add(entry_key)
        offsets = entry[1]
        source_key = self._source_keys.get(source)
        if source_key is None:
            source_key = self._source_keys[source] = f"{topic}|{partition}"
        if offset <= offsets.get(source_key, -1):
            if ids is not None:
                ids.add(event_id)  # re-read after a crash: the entry holds it, so its ID counts as seen
            return False
        entry[2].add(value)
        offsets[source_key] = offset
        if ids is not None:
            ids.add(event_id)
            plain = self._plain_ids.get(slice_key)
            if plain is None:
                plain = self._plain_ids[slice_key] = set()
            elif plain_id in plain:
                self.collisions += 1
            plain.add(plain_id)
            new = self._new_ids.get(slice_key)
            if new is None:
                new = self._new_ids[slice_key] = ([], {})
            new[0].append(event_id)
            new[1][source_key] = offset
        if entry_key not in self.data:
            self.data[entry_key] = None  # present now; the value is written by flush()
            if self._indexed_len >= 0:
                self._indexed_len += 1
        self._dirty.add(entry_key)
        return True

    def flush(self) -> int:
        """Write every entry changed since the last flush to ``data`` and the changelog, once each.

        The caller must flush before it acknowledges the source records folded
        since the last flush: then a committed offset never runs ahead of the state
        in the changelog. Returns how many entries were written.
        """
        before = len(self.data)
        dirty, self._dirty = self._dirty, set()
        for entry_key in dirty:
            entry = self._live.get(entry_key)
            if entry is None:  # closed and removed since
                continue
            stored = [entry[0], dict(entry[1]), entry[2].to_record()]
            self.data[entry_key] = stored
            self._changelog(entry[0], entry_key, stored)
        new_ids, self._new_ids = self._new_ids, {}
        for (index, slot), (hashes, offsets) in new_ids.items():
            chunks = self._id_chunks.setdefault((index, slot), [])
            chunk_key = f"{_IDS}{index}|{slot}|{len(chunks)}"
            chunks.append(chunk_key)
            # The offsets let recovery trust the chunk only once a checkpoint vouches for them.
            stored = [slot, hashes, offsets]
            self.data[chunk_key] = stored
            self._changelog(slot, chunk_key, stored)
        self._own_change(before)
        return len(dirty)

    def slices(self) -> list[tuple[int, int]]:
        """The (bucket index, slot) pairs that hold entries."""
        return sorted({(index, int(k.split("|", 2)[1])) for index, keys in self._index.items() for k in keys})

    def ids_held(self) -> int:
        """How many event IDs the open buckets remember (the dedup's memory, 8 bytes each plus a set slot)."""
        return sum(len(ids) for ids in self._ids.values())

    def bucket_indexes(self) -> list[int]:
        """Bucket indexes that hold entries, oldest first."""
        return sorted(self._index)

    def take_slice(self, index: int, slot: int) -> list[tuple[str, Stats]]:
        """Remove and return the entries of one bucket and slot (source partition) as (key, stats).

        Their changelog tombstones, and those of the slice's event IDs, wait for
        :meth:`release_closed`: the caller must first make the partials and then a
        checkpoint durable.
        """
        before = len(self.data)
        keys = self._index.get(index, set())
        prefix = f"{index}|{slot}|"
        taken = sorted(k for k in keys if k.startswith(prefix))
        keys.difference_update(taken)
        if not keys:
            self._index.pop(index, None)
        self._ids.pop((index, slot), None)
        self._plain_ids.pop((index, slot), None)
        self._new_ids.pop((index, slot), None)
        for chunk_key in self._id_chunks.pop((index, slot), ()):
            self.data.pop(chunk_key, None)
            self._closed.append((slot, chunk_key))
        out = []
        for entry_key in taken:
            partition, _, stats = self._live.pop(entry_key)
            self._dirty.discard(entry_key)
            self.data.pop(entry_key, None)
            self._closed.append((partition, entry_key))
            out.append((entry_key.split("|", 2)[2], stats))
        self._own_change(before)
        return out

    def release_closed(self) -> int:
        """Write the tombstones of every entry taken since the last call; returns how many.

        Call only once the partials of those entries and a checkpoint recording
        their buckets as closed are acknowledged by the broker.
        """
        closed, self._closed = self._closed, []
        for partition, entry_key in closed:
            if entry_key not in self.data:  # defensive: never delete an entry that is live again
                self._changelog(partition, entry_key, None)
        return len(closed)

    def checkpoint(self, progress: Mapping[Source, Checkpoint]) -> None:
        """Persist the checkpoint of each source (topic, partition) given.

        A restarted worker skips records at or below its offset: their effects,
        late-event and dead-letter records included, are already in Kafka.
        """
        before = len(self.data)
        for (topic, p), cp in progress.items():
            value = {"closed": cp.closed, "offset": cp.offset,
                     "max_ts": cp.event_times[0] if cp.event_times else None, "times": list(cp.event_times)}
            self.data[f"{_META}{topic}|{p}"] = value
            self._changelog(p, f"{_META}{topic}|{p}", value)
        self._own_change(before)

    def _own_change(self, before: int) -> None:
        # Count only this store's own writes: a recovery that wrote into ``data`` meanwhile
        # must still show as stale, not be absorbed by the next flush.
        if self._indexed_len >= 0:
            self._indexed_len += len(self.data) - before

    def mark_stale(self) -> None:
        """Force a :meth:`reindex` before the next use (a restore from the changelog wrote into ``data``)."""
        self._indexed_len = -1

    @property
    def stale(self) -> bool:
        """True when ``data`` changed behind the index's back (a recovery filled it), or after :meth:`mark_stale`."""
        return len(self.data) != self._indexed_len


class EventProcessor:
    """Decode → validate → detect → classify → fold, and close buckets on ticks.

    ``clock_ms`` is the wall clock (injectable for tests). ``instance`` names this
    worker in sketch summaries. Not thread-safe: one thread (stage 1's loop) owns it.
    """

    def __init__(self, settings: WorkerSettings, store: Stage1Store, *, instance: str,
                 clock_ms: Callable[[], int] | None = None) -> None:
        self.settings = settings
        self.store = store
        self.instance = instance
        self._clock_ms = clock_ms or (lambda: time.time_ns() // 1_000_000)
        self.buckets = TimeBuckets(settings.bucket_width, grace=settings.grace)
        self.watermarks = WatermarkTracker(parse_duration(settings.allowed_delay, "allowed_delay"),
                                           parse_duration(settings.idle_timeout, "idle_timeout"),
                                           agreement=settings.watermark_agreement)
        self.roller = BucketRoller(self.buckets, parse_duration(settings.retention, "retention"), watermarks=self.watermarks)
        self.sketch = SlidingSketch(settings.hot_window_s, capacity=settings.sketch_capacity)
        self._codecs = {CONTENT_TYPE["json"]: JsonCodec("event"), CONTENT_TYPE["avro"]: AvroCodec("event")}
        self._default_codec = self._codecs[CONTENT_TYPE[settings.serializer]]
        self._checkpointed_closed: dict[Source, int] = {}  # per source, closed-through as of its last checkpoint
        self._pending: dict[int, tuple[int, set[str]]] = {}  # bucket index -> (events, keys) of slices emitted
        self._dedup = settings.dedup_ids
        self._scan = native_scanner()  # None: every record takes the Python path
        self._duplicates = 0
        self._collisions_logged = 0
        self._sources: set[Source] = set()
        self._source_ids: dict[Source, int] = {}  # the watermark tracker numbers its inputs
        self._durable: dict[Source, int] = {}  # last offset durable at the last checkpoint
        self._handled: dict[Source, int] = {}  # last offset handled since
        self._seen: dict[Source, int] = {}  # last offset received since the source was assigned, duplicates too

    # -- partitions and recovery ----------------------------------------------------------

    def assign(self, sources: Iterable[Source]) -> None:
        """The events (topic, partition)s this worker now owns (after a rebalance)."""
        new = set(sources)
        now = self._clock_ms()
        for source in self._sources ^ new:
            self._seen.pop(source, None)
        revoked = self._sources - new
        for source in revoked:  # its new owner checkpoints it from now on; a return re-reads its checkpoint
            self._handled.pop(source, None)
            self._durable.pop(source, None)
            self._checkpointed_closed.pop(source, None)
        self.store.drop_partitions({p for _, p in revoked} - {p for _, p in new})
        self.watermarks.revoke(self._source_id(s) for s in self._sources - new)
        self.watermarks.assign((self._source_id(s) for s in new), now)
        self._sources = new

    def listening_resumed(self) -> None:
        """The worker did not listen for a while (its loop waited out a broker outage): that was not silence.

        No partition may look idle for it: each gets a fresh idle timeout, in which its
        backlog (fetched meanwhile) arrives and holds it active.
        """
        self.watermarks.hold_active((self._source_id(s) for s in self._sources), self._clock_ms())

    def _source_id(self, source: Source) -> int:
        sid = self._source_ids.get(source)
        if sid is None:
            sid = self._source_ids[source] = len(self._source_ids)
        return sid

    def recover(self) -> None:
        """Re-read the store after a changelog recovery: index entries and restore, per
        source, the closed-through bucket, the durable offset and the watermark."""
        now = self._clock_ms()
        for source, cp in self.store.reindex().items():
            self.roller.restore_closed_through(self._source_id(source), cp.closed)
            if cp.closed > self._checkpointed_closed.get(source, -1):
                self._checkpointed_closed[source] = cp.closed
            if cp.offset > self._durable.get(source, -1):
                self._durable[source] = cp.offset
            if cp.event_times and source in self._sources:
                # The partition resumes at its own checkpointed event time, whoever owned it before,
                # and one whose re-read records are all duplicates does not hold the watermark.
                self.watermarks.restore(self._source_id(source), cp.event_times, now)

    def resume_offset(self, source: Source) -> int:
        """The first offset of ``source`` that no checkpoint vouches for: 0 if it has none.

        Re-reads the store first if a recovery made it stale. Records below it are
        recognised as handled; a record past it after a rebalance means the consumer
        skipped some (see :mod:`streams.worker.offsets`). No checkpoint means no record
        of the source was ever acknowledged (acknowledgements follow checkpoints), so a
        committed offset past the log's start was not this worker's doing.
        """
        if self.store.stale:
            self.recover()
        return self._durable.get(source, -1) + 1

    def checkpoint(self) -> bool:
        """Record progress (offsets handled, buckets closed) in the store; True if anything was written.

        Call only once the stage-1 entries and the outputs of everything handled so
        far are acknowledged by the broker: the checkpoint vouches for them.
        """
        progressed = {s: o for s, o in self._handled.items() if o > self._durable.get(s, -1)}
        closed = {s: self.roller.closed_for(self._source_id(s)) for s in self._sources}
        # A close with no new records still has to be recorded for its source.
        progressed.update({s: self._durable.get(s, -1) for s, c in closed.items()
                           if s not in progressed and c > self._checkpointed_closed.get(s, -1)})
        if not progressed:
            return False
        # Per source: each partition closes on its own watermark, and after a crash some
        # sources' checkpoints may have reached the broker and others not.
        checkpoints = {s: Checkpoint(self.roller.closed_for(self._source_id(s)), o,
                                     self.watermarks.top_event_ts(self._source_id(s)))
                       for s, o in progressed.items()}
        self.store.checkpoint(checkpoints)
        self._durable.update(progressed)
        self._checkpointed_closed.update({s: cp.closed for s, cp in checkpoints.items()})
        return True

    def persist(self, flush: Callable[[], None]) -> None:
        """Make everything handled so far durable, in the order that survives any crash.

        ``flush()`` must return only once the broker acknowledged every record written
        so far (and raise otherwise). Entries and outputs first, then the checkpoint
        that vouches for them, then closed buckets' tombstones (durable by the next
        flush; recovery drops the entries if a crash loses them). Acknowledge the
        input records only after this returns.
        """
        self.store.flush()
        flush()
        if self.checkpoint():
            flush()
        self.store.release_closed()

    # -- per record ---------------------------------------------------------------------------

    def handle(self, msg: InMessage) -> list[Output]:
        """Process one record; returns the late-event or dead-letter record to send, if any."""
        return self.handle_batch((msg,))

    def handle_batch(self, msgs: Iterable[InMessage]) -> list[Output]:
        """Process records in order, each as :meth:`handle` would; returns what to send for them, in order.

        The wall clock is read once per batch (a batch is handled in milliseconds), and
        the sketch is fed once per batch: the results are those of one record at a time.
        """
        if self.store.stale:
            self.recover()
        now = self._clock_ms()
        out: list[Output] = []
        seen, durable, handled = self._seen, self._durable, self._handled
        codecs, default_codec = self._codecs, self._default_codec
        roller_add, fold, dedup = self.roller.add, self.store.fold, self._dedup
        on_time, late_kinds = PlacementKind.ON_TIME, (PlacementKind.LATE, PlacementKind.TOO_OLD)
        loads: dict[int, int] = {}  # source partition -> records read (the sketch's partition load)
        keys: list[tuple[int, str]] = []  # (source partition, key) of on-time and late events (the sketch's key load)
        add_key = keys.append
        sids: dict[Source, int] = {}
        # content-type header -> its codec's decode, and the compiled scan if the codec is JSON's
        readers: dict[bytes, tuple[Callable[[bytes], dict[str, Any]], Scanner | None]] = {}
        scan = self._scan
        salts_ok: dict[bytes, bool] = {}  # streams-salt header -> whether it is valid (a producer sends few values)
        isfinite = math.isfinite
        duplicates = 0
        for msg in msgs:
            # One unpacking instead of a property call per field: this loop runs once per event.
            topic, partition, offset, _, payload, headers = msg
            source = (topic, partition)
            seen[source] = offset
            if offset <= durable.get(source, -1) or offset <= handled.get(source, -1):
                # Re-read after a restart (its effects are already in Kafka), or a second copy
                # in one assignment (one fetched before a rebalance gave the partition back).
                duplicates += 1
                continue
            handled[source] = offset
            loads[partition] = loads.get(partition, 0) + 1  # every record is load, whatever becomes of it
            content_type = headers.get("content-type", b"")
            reader = readers.get(content_type)  # type: ignore[arg-type]
            if reader is None:
                codec = codecs.get(content_type, default_codec)  # type: ignore[call-overload]
                reader = readers[content_type] = (codec.decode, scan if codec.format == "json" else None)
            decode, fast = reader
            # The compiled scan takes the envelopes producers write; anything else, and every
            # record to dead-letter, takes the Python path below, which names the reason.
            scanned = fast(payload) if fast is not None and payload.__class__ is bytes else None
            if scanned is not None:
                ts, key, value, identity, plain = scanned
                event = None
            else:
                try:
                    if payload is None:
                        raise SerializationError("event: null value (tombstone) on the events topic", field=PAYLOAD)
                    event = decode(payload)
                except SerializationError as exc:
                    out.append(self._dead_letter(msg, str(exc), exc.field, now))
                    continue
                ts = event["ts_ms"]
                try:
                    id_kind, id_number = classify_id(event["id"])
                except InvalidIdError as exc:
                    out.append(self._dead_letter(msg, f"malformed id: {exc}", "id", now, ts))
                    continue
                key = event["key"]
                if not key.strip():
                    out.append(self._dead_letter(msg, "empty key", "key", now, ts))
                    continue
                if len(key) > _MAX_KEY_CHARS and len(key.encode("utf-8", "surrogatepass")) > MAX_KEY_BYTES:
                    # The sketch and the directory could not carry it: stop it before it reaches any state.
                    out.append(self._dead_letter(msg, f"key too long: more than {MAX_KEY_BYTES} bytes of UTF-8",
                                                 "key", now, ts))
                    continue
                value = event["value"]
                if value is not None and not isfinite(value):
                    out.append(self._dead_letter(msg, f"value must be finite, got {value!r}", "value", now, ts))
                    continue
                identity = None
            # Validated like any header, though stage 1 keys its entries by source partition, not salt.
            salt = headers.get("streams-salt")
            if salt is not None:
                salt_ok = salts_ok.get(salt)
                if salt_ok is None:
                    salt_ok = salts_ok[salt] = _salt(salt) is not None
                if not salt_ok:
                    out.append(self._dead_letter(msg, "malformed streams-salt header", "streams-salt", now, ts))
                    continue
            if not -_MS_LIMIT <= ts <= _MS_LIMIT:  # a valid Avro long far past any real clock: future or pre-epoch
                ts = _MS_LIMIT if ts > 0 else -_MS_LIMIT
            sid = sids.get(source)
            if sid is None:
                sid = sids[source] = self._source_id(source)
            placement = roller_add(ts, now, partition=sid)
            kind = placement.kind
            if kind is on_time:
                add_key((partition, key))
                if dedup:
                    if identity is None:
                        identity, plain = identity_hash(id_kind, id_number, key, ts, value), plain_id(id_number)
                    folded = fold(source, offset, placement.bucket.index, key, value,  # type: ignore[union-attr]
                                  identity, plain)
                else:
                    folded = fold(source, offset, placement.bucket.index, key, value)  # type: ignore[union-attr]
                if not folded:
                    duplicates += 1
            elif kind in late_kinds:
                add_key((partition, key))
                if event is None:  # scanned: the late record carries the decoded envelope's fields
                    event = decode(payload)
                out.append(self._late(msg, event, placement.bucket.index, ts, now,  # type: ignore[union-attr]
                                      placement.reason))
            else:
                out.append(self._dead_letter(msg, placement.reason, "ts_ms", now, None, counted=True))
        self._duplicates += duplicates
        now_s = now / 1000
        for partition, count in loads.items():
            self.sketch.add_partition(partition, now_s, count)
        if keys:
            self.sketch.add_pairs(keys, now_s)
            # How far each partition's event time got (the roller observed every event's time; the time two
            # records reached, so one record with a clock far ahead cannot move it): a partition that fell
            # behind and caught up is read faster than its traffic, and the sketch corrects its rate.
            agreed, times = self.watermarks.agreed_event_ts, {}
            for (_, partition), sid in sids.items():
                ts = agreed(sid)
                if ts is not None and ts > times.get(partition, -_MS_LIMIT - 1):
                    times[partition] = ts
            if times:
                self.sketch.add_partition_event_times(now_s, {p: ts / 1000 for p, ts in times.items()})
        return out

    def _late(self, msg: InMessage, event: Mapping[str, Any], index: int, ts: int, now: int, reason: str) -> Output:
        bucket = self.buckets.bucket_at_index(index)
        watermark = self.watermarks.floor_ms if self.watermarks.floor_ms is not None else ts
        record = {
            "event_id": event["id"], "bucket": bucket.label, "bucket_start_ms": bucket.start_ms,
            "event_ts_ms": ts, "watermark_ms": watermark, "lateness_ms": max(0, watermark - bucket.close_ms),
            "reason": reason, "source_topic": msg.topic, "source_partition": msg.partition,
            "source_offset": msg.offset, **original_fields(msg.value or b""),
            # A header may be present with a null value: fall back as if it were absent.
            "content_type": (msg.headers.get("content-type") or CONTENT_TYPE[self.settings.serializer]).decode(
                "ascii", "replace"),
        }
        return Output("late_events", event["key"].encode(), record)

    def _dead_letter(self, msg: InMessage, reason: str, field: str | None, now: int,
                     ts: int | None = None, *, counted: bool = False) -> Output:
        if not counted:
            self.roller.count_dead_letter(_reason_class(reason), ts)
        record = dead_letter_record(reason, field, msg.topic, msg.partition, msg.offset, now, msg.key, msg.value)
        return Output("dead_letters", bounded(msg.key, MAX_ORIGINAL_KEY_BYTES) or b"", record)

    # -- per tick -----------------------------------------------------------------------------

    def behind(self, fetch: Mapping[Source, FetchState], now_ms: int) -> list[Source]:
        """The owned sources known to be behind: unread records, or no recent word from the broker.

        A source is behind when its high watermark is not known yet, when no fetch
        response came for it within the idle timeout (a dead leader, a paused or
        recovering partition), or when the next offset to receive (after the last
        one received since it was assigned, else after the checkpointed one, else
        its ``position``) is below its high watermark. Such a source must not be judged idle (see
        :meth:`~streams.core.time.watermark.WatermarkTracker.hold_active`).
        A source missing from ``fetch`` counts as behind.
        """
        stale_before = now_ms - self.watermarks.idle_timeout_ms
        out = []
        for source in self._sources:
            state = fetch.get(source)
            if state is None or state.highwater is None or state.fetched_at_ms is None \
                    or state.fetched_at_ms <= stale_before:
                out.append(source)
                continue
            next_offset = self._next_offset(source, state)
            if next_offset is None or next_offset < state.highwater:
                out.append(source)
        return out

    def _next_offset(self, source: Source, state: FetchState) -> int | None:
        """The next offset this worker must receive on ``source``: after the last one received
        since it was assigned, else after the last one a checkpoint vouches for, else ``position``."""
        seen = self._seen.get(source)
        if seen is not None:
            return seen + 1
        durable = self._durable.get(source)
        return durable + 1 if durable is not None else state.position

    def tick(self, fetch: Mapping[Source, FetchState] | None = None) -> TickResult:
        """Close due buckets (emit-on-close) and summarise the hot-key sketch.

        ``fetch`` (what the consumer knows of each source, see :meth:`behind`) keeps
        sources that are behind from going idle; without it, idleness is silence alone.

        Send the outputs and call :meth:`persist` before handling another record: a
        record classified late against a close that is not yet checkpointed would be
        folded instead if a crash lost that checkpoint, and counted twice.
        """
        if self.store.stale:
            self.recover()
        now = self._clock_ms()
        if self.store.collisions > self._collisions_logged:
            log.warning("%d distinct events shared an event ID with another event of their bucket and partition "
                        "since the last report (%d in all): producers are minting colliding IDs; every one was "
                        "counted", self.store.collisions - self._collisions_logged, self.store.collisions)
            self._collisions_logged = self.store.collisions
        if fetch is not None:
            self.watermarks.hold_active((self._source_id(s) for s in self.behind(fetch, now)), now)
        outputs: list[Output] = []
        labels = []
        sid_of_slot = self._sid_of_slot()
        slot_of_sid = {sid: slot for slot, sid in sid_of_slot.items()}
        held = [(index, sid_of_slot[slot]) for index, slot in self.store.slices() if slot in sid_of_slot]
        advance = self.roller.advance(now, held=held)  # checkpointed by the next persist()
        for index, sid in advance.slices:  # closed for its partition: emit that partition's partials
            bucket = self.buckets.bucket_at_index(index)
            slot = slot_of_sid[sid]
            events, keys = self._pending.get(index, (0, set()))
            for key, stats in self.store.take_slice(index, slot):
                keys.add(key)
                events += stats.count
                outputs.append(Output("partials", key.encode(), partial_record(bucket, key, slot, stats)))
            self._pending[index] = (events, keys)
        for closed in advance.closed:  # closed for every partition: report it
            bucket = closed.bucket
            events, keys = self._pending.pop(bucket.index, (0, set()))
            outputs.append(Output("bucket_closed", bucket.label.encode(), {
                "bucket": bucket.label, "bucket_start_ms": bucket.start_ms, "bucket_end_ms": bucket.end_ms,
                "closed_at_ms": closed.closed_at_ms, "watermark_ms": closed.watermark_ms, "events": events,
                "keys": len(keys), "late_events": closed.late_events, "dead_letters": closed.dead_letters,
            }))
            labels.append(bucket.label)
        watermark = self.watermarks.floor_ms
        backlog = 0  # records of owned partitions not read yet: the decider ignores a worker catching up
        for source, state in (fetch or {}).items():
            next_offset = self._next_offset(source, state) if source in self._sources else None
            if next_offset is not None and state.highwater is not None:
                backlog += max(0, state.highwater - next_offset)
        summary = self.sketch.report(now / 1000, instance=self.instance, partitions={p for _, p in self._sources},
                                     balance_target=self.settings.balance_target, backlog=backlog)
        return TickResult(tuple(outputs), summary, tuple(labels), watermark)

    def _sid_of_slot(self) -> dict[int, int]:
        """Stage-1 slot (source partition number) -> the roller's input number of that source."""
        out: dict[int, int] = {}
        for (topic, partition), sid in self._source_ids.items():
            if partition not in out or (topic, partition) in self._sources:
                out[partition] = sid
        return out

    def counts(self) -> ProcessorCounts:
        """Conservation counters since this processor started."""
        c = self.roller.counts()
        return ProcessorCounts(c.received, c.on_time, c.late, c.too_old, c.dead_lettered, self._duplicates,
                               self.store.collisions)

    def open_buckets(self) -> int:
        """Buckets holding stage-1 state right now (bounded by the open window)."""
        return len(self.store.bucket_indexes())

    def ids_held(self) -> int:
        """Event IDs remembered for dedup right now (bounded by the open buckets' on-time events)."""
        return self.store.ids_held()


def _partition_of(key: str, value: Any) -> int | None:
    """The changelog partition of a stage-1 data key: meta keys name their source, others store it first."""
    if key.startswith(_META):
        return int(key.rsplit("|", 1)[1])
    if value is None:  # present but not flushed yet: its entry (or ID slice) names the slot
        return int(key.split("|", 3)[2 if key.startswith(_IDS) else 1])
    return int(value[0])


def _salt(raw: bytes | None) -> int | None:
    if raw is None:
        return -1
    try:
        salt = int(raw)
    except ValueError:
        return None
    return salt if -1 <= salt < 100_000 else None


def _reason_class(reason: str) -> str:
    """A short, fixed reason class for counters (the full text goes into the dead letter)."""
    for prefix in ("malformed id", "empty key", "key too long", "value must be finite", "malformed streams-salt"):
        if reason.startswith(prefix):
            return prefix
    return "undecodable payload"
