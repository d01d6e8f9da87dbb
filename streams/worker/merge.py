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

from collections.abc import Callable, Mapping, MutableMapping
from typing import Any

from streams.core.errors import SerializationError
from streams.core.partials import merged_record, stats_of
from streams.core.time.buckets import TimeBuckets

__all__ = ["PartialMerger"]

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
