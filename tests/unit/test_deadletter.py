"""Dead letters and late events of bounded size (streams.core.deadletter), and older records still decode."""

from __future__ import annotations

import hashlib

from streams.core.deadletter import MAX_ORIGINAL_BYTES, MAX_ORIGINAL_KEY_BYTES, dead_letter_record, original_fields
from streams.core.serde import AvroCodec


def test_a_five_megabyte_original_is_carried_truncated_with_its_size_hash_and_source() -> None:
    value, key = b"v" * 5_000_000, b"k" * 1_000_000
    record = dead_letter_record("key too long", "key", "events", 3, 42, 1, key, value)
    assert len(record["original"]) == MAX_ORIGINAL_BYTES and record["original"] == value[:MAX_ORIGINAL_BYTES]
    assert len(record["original_key"]) == MAX_ORIGINAL_KEY_BYTES
    assert (record["original_size"], record["original_key_size"], record["truncated"]) == (5_000_000, 1_000_000, True)
    assert record["original_sha256"] == hashlib.sha256(value).digest()
    assert (record["source_topic"], record["source_partition"], record["source_offset"]) == ("events", 3, 42)
    encoded = AvroCodec("dead_letter").encode(record)
    assert len(encoded) < 300_000, "fits a topic with the broker's default 1 MB limit"
    assert AvroCodec("dead_letter").decode(encoded) == record


def test_a_small_original_travels_whole_and_is_not_marked_truncated() -> None:
    record = dead_letter_record("r" * 5_000, None, "events", 0, 0, 1, None, b"{}")
    assert (record["original"], record["original_key"], record["truncated"]) == (b"{}", None, False)
    assert len(record["reason"]) == 1_000
    late = original_fields(b"x" * (MAX_ORIGINAL_BYTES + 1))
    assert late["truncated"] and late["original_size"] == MAX_ORIGINAL_BYTES + 1


def test_records_written_with_the_first_dead_letter_and_late_event_schemas_still_decode() -> None:
    old = {"reason": "r", "field": "key", "source_topic": "t", "source_partition": 1, "source_offset": 2,
           "failed_at_ms": 3, "original_key": b"k", "original": b"v"}
    decoded = AvroCodec("dead_letter").decode(AvroCodec("dead_letter_v1").encode(old))
    assert decoded == {**old, "original_size": -1, "original_key_size": -1, "truncated": False,
                       "original_sha256": None}
    old_late = {"event_id": "e", "bucket": "b", "bucket_start_ms": 0, "event_ts_ms": 1, "watermark_ms": 2,
                "lateness_ms": 3, "reason": "bucket closed", "source_topic": "t", "source_partition": 0,
                "source_offset": 9, "original": b"{}", "content_type": "application/json"}
    decoded_late = AvroCodec("late_event").decode(AvroCodec("late_event_v1").encode(old_late))
    assert decoded_late["original"] == b"{}" and decoded_late["truncated"] is False
