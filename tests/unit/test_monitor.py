"""The monitor's pure folding: hot-key notices into the live set, offsets into rates and lag."""

from __future__ import annotations

import orjson

from streams.core.routing.directory import notice_headers
from streams.core.routing.hashing import kafka_partition
from streams.core.serde import AvroCodec
from streams.kafka.monitor import NoticeFold, PartitionStat, Snapshot, partition_stats

CODEC = AvroCodec("hot_key_notice")
HEADERS = notice_headers()


def notice(key: bytes, split_factor: int = 2, rate: float = 100.0, **changes: object) -> bytes:
    """A version 2 notice placing ``key`` on partitions 7, 6, ... (``split_factor`` of them)."""
    record = {"key": key, "key_display": key.decode(errors="replace"),
              "placement": [7 - i for i in range(split_factor)], "home": 0, "estimated_rate": rate,
              "share": 0.5, "partitions": 8, "detected_at_ms": 2_000, "hot_since_ms": 1_000, "map_version": 1,
              "detector": "d", **changes}
    return CODEC.encode(record)


def test_the_latest_notice_per_key_wins_and_keys_come_highest_rate_first() -> None:
    fold = NoticeFold()
    fold.apply(b"a", notice(b"a", 2, rate=10.0), HEADERS)
    fold.apply(b"b", notice(b"b", 3, rate=50.0), HEADERS)
    fold.apply(b"a", notice(b"a", 5, rate=90.0), HEADERS)
    assert [(n.key, n.split_factor) for n in fold.current()] == [(b"a", 5), (b"b", 3)]
    assert (fold.records, fold.tombstones, fold.malformed) == (3, 0, 0)


def test_a_tombstone_removes_its_key_and_is_counted() -> None:
    fold = NoticeFold()
    fold.apply(b"a", notice(b"a"), HEADERS)
    fold.apply(b"a", None)
    fold.apply(b"never-hot", None)
    assert fold.current() == ()
    assert (fold.records, fold.tombstones, fold.malformed) == (3, 2, 0)


def test_malformed_records_are_counted_and_leave_the_previous_notice_in_place() -> None:
    fold = NoticeFold()
    fold.apply(b"a", notice(b"a", 4), HEADERS)
    fold.apply(b"a", b"\x00garbage", HEADERS)                  # not Avro of the schema
    fold.apply(b"a", notice(b"a", 9), HEADERS)                 # 9 partitions of 8
    fold.apply(b"a", notice(b"a", 2, hot_since_ms=5_000), HEADERS)      # hot since after detection
    fold.apply(b"b", notice(b"a", 2), HEADERS)                          # record key differs from the notice's key
    fold.apply(None, None)                                     # tombstone without a key
    assert [(n.key, n.split_factor) for n in fold.current()] == [(b"a", 4)]
    assert (fold.records, fold.tombstones, fold.malformed) == (6, 0, 5)


def test_a_notice_without_a_record_key_is_filed_under_its_own_key() -> None:
    fold = NoticeFold()
    fold.apply(None, notice(b"x", 3), HEADERS)
    assert [(n.key, n.split_factor) for n in fold.current()] == [(b"x", 3)]


def test_rates_are_end_offset_deltas_over_the_elapsed_time_and_lag_is_end_minus_committed() -> None:
    stats = partition_stats({0: 150, 1: 40, 2: 7}, {0: 100, 1: -1001}, {0: 50, 1: 40, 2: 9}, 2.0)
    assert stats == (
        PartitionStat(0, 150, 50.0, 100, 50),
        PartitionStat(1, 40, 0.0, None, None),     # a negative offset is "no commit"
        PartitionStat(2, 7, None, None, None),     # the end went back (topic re-created): no rate
    )


def test_the_first_snapshot_has_no_rates_and_lag_is_never_negative() -> None:
    stats = partition_stats({0: 10}, {0: 12}, None, None)
    assert stats == (PartitionStat(0, 10, None, 12, 0),)


def test_a_snapshot_record_is_json_with_key_text_and_hex_and_totals() -> None:
    fold = NoticeFold()
    fold.apply(b"k\xff", notice(b"k\xff", 2, key_display=""), HEADERS)
    snap = Snapshot(taken_at_ms=5, hot_keys_topic="h", hot_keys_found=True, hot_keys=fold.current(),
                    notices_read=fold.records, tombstones=0, malformed=0, events_topic="e", events_found=True,
                    group="g", partitions=partition_stats({0: 10, 1: 30}, {1: 25}, {0: 0, 1: 10}, 1.0),
                    elapsed_s=1.0)
    record = orjson.loads(orjson.dumps(snap.to_record()))
    assert record["hot_keys"]["keys"][0]["key"] == "k\\xff" and record["hot_keys"]["keys"][0]["key_hex"] == "6bff"
    assert (record["events"]["total_rate"], record["events"]["total_lag"]) == (30.0, 5)


def test_a_version_1_notice_without_a_schema_header_reads_as_its_consecutive_placement() -> None:
    v1 = AvroCodec("hot_key_notice_v1").encode({
        "key": b"t", "key_display": "t", "split_factor": 3, "estimated_rate": 1.0, "share": 0.1, "partitions": 8,
        "detected_at_ms": 2_000, "hot_since_ms": 1_000, "map_version": 1, "detector": "old"})
    fold = NoticeFold()
    fold.apply(b"t", v1)
    p0 = kafka_partition(b"t", 8)
    assert [n.placement for n in fold.current()] == [tuple((p0 + i) % 8 for i in range(3))]
    fold.apply(b"t", v1, [("streams-schema", b"something/else")])
    assert fold.malformed == 1


def test_a_snapshot_shows_the_partition_balance_and_directory_changes_per_minute() -> None:
    snap = Snapshot(taken_at_ms=5, hot_keys_topic="h", hot_keys_found=True, hot_keys=(), notices_read=12,
                    tombstones=0, malformed=0, events_topic="e", events_found=True, group="g",
                    partitions=partition_stats({0: 10, 1: 30}, {}, {0: 0, 1: 10}, 1.0), elapsed_s=1.0,
                    directory_changes_per_min=3.0)
    assert snap.balance == 20.0 * 2 / 30.0  # rates 10 and 20 events/s
    record = orjson.loads(orjson.dumps(snap.to_record()))
    assert (record["events"]["balance"], record["events"]["directory_changes_per_min"]) == (snap.balance, 3.0)
    first = Snapshot(taken_at_ms=5, hot_keys_topic="h", hot_keys_found=True, hot_keys=(), notices_read=0,
                     tombstones=0, malformed=0, events_topic="e", events_found=True, group="g",
                     partitions=partition_stats({0: 10}, {}, None, None), elapsed_s=None)
    assert first.balance is None and first.directory_changes_per_min is None
