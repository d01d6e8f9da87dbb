"""Aggregate records: one (bucket, key, slot) partial, and the exact merge of partials.

Stage 1 emits a partial per (bucket, key, slot) when a bucket closes, the slot being
the source partition its events were read from; replay writes late events into
:data:`LATE_SLOT`; stage 2 upserts each slot and merges every slot of a (bucket, key)
into the final aggregate (slot :data:`MERGED_SLOT`) with :func:`merged_record`. The
record shape is ``schemas/aggregate.avsc``.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from streams.core.aggregate import Stats
from streams.core.time.buckets import Bucket

__all__ = ["LATE_SLOT", "MERGED_SLOT", "merged_record", "partial_record", "stats_of"]

#: The slot replay writes late events into.
LATE_SLOT = -2
#: The slot of a merged, final aggregate.
MERGED_SLOT = -1


def partial_record(bucket: Bucket, key: str, slot: int, stats: Stats, *, final: bool = False) -> dict[str, Any]:
    """An ``Aggregate`` record for one (bucket, key, slot) from ``stats``."""
    rec = stats.to_record()
    return {
        "bucket": bucket.label, "bucket_start_ms": bucket.start_ms, "key": key, "slot": slot,
        "count": rec["count"], "measured": rec["measured"], "sum": rec["sum"], "sum_partials": rec["partials"],
        "min": rec["min"], "max": rec["max"], "final": final,
    }


def stats_of(record: Mapping[str, Any]) -> Stats:
    """The Stats inside an ``Aggregate`` record (raises ValueError/TypeError if malformed)."""
    return Stats.from_record({"count": record["count"], "measured": record["measured"], "sum": record["sum"],
                              "partials": record["sum_partials"], "min": record["min"], "max": record["max"]})


def merged_record(bucket: str, bucket_start_ms: int, key: str, partials: Iterable[Mapping[str, Any]]) -> dict[str, Any]:
    """The exact merged ``Aggregate`` record (slot MERGED_SLOT, final) of some partial records."""
    total = Stats.empty()
    for partial in partials:
        total = total.merge(stats_of(partial))
    rec = total.to_record()
    return {
        "bucket": bucket, "bucket_start_ms": bucket_start_ms, "key": key, "slot": MERGED_SLOT,
        "count": rec["count"], "measured": rec["measured"], "sum": rec["sum"], "sum_partials": rec["partials"],
        "min": rec["min"], "max": rec["max"], "final": True,
    }
