"""Stage 2 of the two-stage aggregation: merge partials per (bucket, real key).

Stage 1 emits one partial per (bucket, key, slot) when a bucket closes, the slot
being the source partition: a key the directory split or moved has one partial per
partition that carried it in that bucket. Replay adds one more slot, :data:`LATE_SLOT`, holding the
late events of that (bucket, key). Each partial *replaces* its slot (upsert), so a
partial delivered twice, re-emitted after a restart, or a replay run twice changes
nothing, and the merged result is the exact aggregate of the union of the slots:
``Stats.merge`` keeps an exact sum, so the merge order does not matter either.

State is bounded by retention: :meth:`PartialMerger.expire` drops buckets whose end
is more than ``retention_ms`` behind a given time.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Mapping, MutableMapping
from typing import Any, NamedTuple

from streams.core.deadletter import MAX_ORIGINAL_KEY_BYTES, bounded, dead_letter_record
from streams.core.errors import SerializationError
from streams.core.partials import merged_record, stats_of
from streams.core.serde import AvroCodec
from streams.core.time.buckets import TimeBuckets
from streams.worker.processor import InMessage, Output

__all__ = ["PartialMerger", "PartialsProcessor", "Merged"]

_OFFSET_KEY = "@offset|"  # not a bucket entry: "<bucket_start_ms>|<key>" always starts with a digit or "-"


class PartialMerger:
    """Keeps the latest partial of every slot and returns the merged aggregate.

    ``data`` maps ``"<bucket_start_ms>|<key>"`` to ``[partition, {slot: aggregate record}]``, and
    ``"@offset|<partition>"`` to the last partials offset checkpointed for that partition;
    ``changelog(partition, key, value)`` persists a change (None deletes).
    """

    def __init__(self, data: MutableMapping[str, Any], changelog: Callable[[int, str, Any], None],
                 buckets: TimeBuckets, retention_ms: int) -> None:
        self.data = data
        self._changelog = changelog
        self.buckets = buckets
        self.retention_ms = retention_ms

    def apply(self, partition: int, partial: Mapping[str, Any]) -> dict[str, Any]:
        """Upsert one partial and return the merged ``Aggregate`` record of its (bucket, key).

        Raises SerializationError if the partial's numbers are malformed.
        """
        try:
            stats_of(partial)
        except (SerializationError, ValueError, TypeError, KeyError) as exc:
            raise SerializationError(f"aggregate partial: {exc}") from exc
        entry_key = f"{partial['bucket_start_ms']}|{partial['key']}"
        entry = self.data.get(entry_key)
        slots: dict[str, Any] = dict(entry[1]) if entry else {}
        slots[str(partial["slot"])] = dict(partial)
        stored = [partition, slots]
        self.data[entry_key] = stored
        self._changelog(partition, entry_key, stored)
        return merged_record(partial["bucket"], partial["bucket_start_ms"], partial["key"], slots.values())

    def checkpoint(self, progress: Mapping[int, int]) -> None:
        """Record, per partials partition, the last offset applied (write it before acknowledging those records)."""
        for partition, offset in progress.items():
            key = f"{_OFFSET_KEY}{partition}"
            self.data[key] = offset
            self._changelog(partition, key, offset)

    def resume_offset(self, partition: int) -> int:
        """The first offset of ``partition`` past the last checkpointed one: 0 if none was recorded.

        Acknowledgements follow checkpoints, so without one no record of the partition
        was ever acknowledged, and a committed offset past the log's start was not ours.
        """
        offset = self.data.get(f"{_OFFSET_KEY}{partition}")
        return offset + 1 if isinstance(offset, int) else 0

    def expired(self, partial: Mapping[str, Any], now_ms: int) -> bool:
        """True if ``partial``'s bucket is past retention: its entry was (or would be) dropped by :meth:`expire`.

        Merged alone, such a partial would replace the exact aggregate with one slot's
        share (a partials partition read again from its start, for instance).
        """
        return int(partial["bucket_start_ms"]) < self._horizon(now_ms)

    def _horizon(self, now_ms: int) -> int:
        return now_ms - self.retention_ms - self.buckets.width_ms

    def expire(self, now_ms: int) -> int:
        """Drop entries whose bucket ended more than ``retention_ms`` before ``now_ms``; returns how many."""
        horizon = self._horizon(now_ms)
        dropped = 0
        for entry_key in [k for k in self.data if not k.startswith(_OFFSET_KEY) and int(k.split("|", 1)[0]) < horizon]:
            partition = self.data.pop(entry_key)[0]
            self._changelog(partition, entry_key, None)
            dropped += 1
        return dropped


class Merged(NamedTuple):
    """What a stage-2 tick produced: nothing to send (the aggregates go out as partials arrive)."""

    outputs: tuple[Output, ...] = ()


class PartialsProcessor:
    """Stage 2 as a :class:`~streams.worker.loop.Stage`: partials in, exact merged aggregates out.

    Owns a :class:`PartialMerger` over ``data`` (changelogged by ``changelog``, partition
    p for partials partition p). Records are acknowledged only after :meth:`persist`:
    aggregates first, then each partition's offset checkpoint, so a restart resumes
    after the last checkpointed offset and an upsert makes any repeat harmless. A
    partial that does not decode, or whose bucket is past retention, is dead-lettered
    naming the field. ``clock_ms`` is injectable for tests.
    """

    def __init__(self, data: MutableMapping[str, Any], changelog: Callable[[int, str, Any], None],
                 buckets: TimeBuckets, retention_ms: int, *, clock_ms: Callable[[], int] | None = None,
                 expire_every_ms: int = 10_000) -> None:
        self.merger = PartialMerger(data, changelog, buckets, retention_ms)
        self.data = data
        self._codec = AvroCodec("aggregate")
        self._clock_ms = clock_ms or (lambda: int(time.time() * 1000))
        self._progress: dict[int, int] = {}  # partition -> last offset applied since the last persist
        self._handled: dict[tuple[str, int], int] = {}  # source -> last offset handled in this assignment
        self._owned: set[tuple[str, int]] = set()
        self._expire_every_ms = expire_every_ms
        self._next_expiry = 0
        self.applied = 0
        self.dead_lettered = 0

    @property
    def store(self) -> PartialsProcessor:
        """The loop restores into :attr:`data`; the merger reads it directly, so there is nothing to re-index."""
        return self

    def mark_stale(self) -> None:
        """Nothing to do: the merger keeps no index over :attr:`data`."""

    def assign(self, sources: Iterable[tuple[str, int]]) -> None:
        """Own ``sources`` now; the entries and checkpoints of partials partitions no longer owned are forgotten."""
        new = set(sources)
        keep = {p for _, p in new}
        for source in self._owned - new:
            self._handled.pop(source, None)
            self._progress.pop(source[1], None)
        for key in [k for k, v in self.data.items() if _partition_of_entry(k, v) not in keep]:
            del self.data[key]
        self._owned = new

    def resume_offset(self, source: tuple[str, int]) -> int:
        """The first offset of ``source`` past its last checkpoint (0 if none)."""
        return self.merger.resume_offset(source[1])

    def handle_batch(self, msgs: Iterable[InMessage]) -> list[Output]:
        """Upsert each partial's slot; returns the merged aggregate (or a dead letter) of each, in order."""
        out: list[Output] = []
        now = self._clock_ms()
        handled, progress, decode, apply = self._handled, self._progress, self._codec.decode, self.merger.apply
        for msg in msgs:
            source = (msg.topic, msg.partition)
            if msg.offset <= handled.get(source, -1) or msg.offset < self.merger.resume_offset(msg.partition):
                continue  # a second copy in one assignment, or one a checkpoint already covers
            handled[source] = progress[msg.partition] = msg.offset
            try:
                partial = decode(msg.value)
                if self.merger.expired(partial, now):
                    raise SerializationError(f"partial of bucket {partial['bucket']} is past retention: merged "
                                             "alone it would replace the exact aggregate", field="bucket_start_ms")
                merged = apply(msg.partition, partial)
            except SerializationError as exc:
                self.dead_lettered += 1
                out.append(Output("dead_letters", bounded(msg.key, MAX_ORIGINAL_KEY_BYTES) or b"", dead_letter_record(
                    f"bad partial: {exc}", exc.field, msg.topic, msg.partition, msg.offset, now, msg.key, msg.value)))
            else:
                self.applied += 1
                out.append(Output("aggregates", f"{merged['bucket']}|{merged['key']}".encode(), merged))
        return out

    def tick(self, fetch: Mapping[tuple[str, int], Any] | None = None) -> Merged:
        """Drop entries past retention (every ``expire_every_ms`` at most); nothing to send."""
        now = self._clock_ms()
        if now >= self._next_expiry:
            self._next_expiry = now + self._expire_every_ms
            self.merger.expire(now)
        return Merged()

    def listening_resumed(self) -> None:
        """Nothing here depends on silence."""

    def persist(self, flush: Callable[[], None]) -> None:
        """Aggregates and entries durable first, then the offset checkpoint that vouches for them."""
        flush()
        if self._progress:
            self.merger.checkpoint(self._progress)
            self._progress.clear()
            flush()


def _partition_of_entry(key: str, value: Any) -> int:
    """The partials partition an entry or checkpoint of :class:`PartialMerger` belongs to."""
    if key.startswith(_OFFSET_KEY):
        return int(key[len(_OFFSET_KEY):])
    return int(value[0])
