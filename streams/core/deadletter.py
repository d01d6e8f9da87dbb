"""Dead letters and late events that always fit: a bounded copy of the original record.

A record the broker accepted on the events topic may be as large as that topic
allows (``max.message.bytes``), while the dead-letter and late-events topics keep the
broker's default (about 1 MB). A dead letter that carried a 5 MB original whole would
be refused, stop its partition and crash-loop the worker on every restart. So what a
dead letter or late event carries of the original is bounded: the first
:data:`MAX_ORIGINAL_BYTES` of the value and :data:`MAX_ORIGINAL_KEY_BYTES` of the
key, with the full sizes, a SHA-256 of the whole value and where the record lives
(topic, partition, offset), so the original can be read back from its source while
the topic retains it, and checked against the hash.
"""

from __future__ import annotations

import hashlib
from typing import Any

__all__ = ["MAX_ORIGINAL_BYTES", "MAX_ORIGINAL_KEY_BYTES", "bounded", "dead_letter_record", "original_fields"]

#: The most of an original value a dead letter or late event carries (well inside a 1 MB topic).
MAX_ORIGINAL_BYTES = 256 * 1024
#: The most of an original key a dead letter carries, and of the key it is written under.
MAX_ORIGINAL_KEY_BYTES = 16 * 1024


def bounded(data: bytes | None, limit: int) -> bytes | None:
    """``data`` cut to its first ``limit`` bytes (None stays None)."""
    if data is None or len(data) <= limit:
        return data
    return bytes(data[:limit])


def original_fields(value: bytes | None) -> dict[str, Any]:
    """The late-event fields describing an original value: bounded copy, size, hash, truncated or not."""
    size = -1 if value is None else len(value)
    return {"original": bounded(value, MAX_ORIGINAL_BYTES) or b"", "original_size": size,
            "truncated": size > MAX_ORIGINAL_BYTES,
            "original_sha256": None if value is None else hashlib.sha256(value).digest()}


def dead_letter_record(reason: str, field: str | None, topic: str, partition: int, offset: int, failed_at_ms: int,
                       key: bytes | None, value: bytes | None) -> dict[str, Any]:
    """A ``dead_letter.avsc`` record for the record at ``topic``/``partition``/``offset``, of bounded size.

    ``reason`` is cut to 1,000 characters; the key and value to
    :data:`MAX_ORIGINAL_KEY_BYTES` and :data:`MAX_ORIGINAL_BYTES`, with ``truncated``
    set and the full sizes and the value's SHA-256 kept.
    """
    key_size = -1 if key is None else len(key)
    record = {"reason": reason[:1000], "field": field, "source_topic": topic, "source_partition": partition,
              "source_offset": offset, "failed_at_ms": failed_at_ms,
              "original_key": bounded(key, MAX_ORIGINAL_KEY_BYTES), "original_key_size": key_size,
              **original_fields(value)}
    if value is None:
        record["original"] = None
    record["truncated"] = record["truncated"] or key_size > MAX_ORIGINAL_KEY_BYTES
    return record
