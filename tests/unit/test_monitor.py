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


def _stats_snapshot(hot: tuple, ends: dict[int, int], before: dict[int, int] | None) -> Snapshot:
    return Snapshot(taken_at_ms=5, hot_keys_topic="h", hot_keys_found=True, hot_keys=hot, notices_read=len(hot),
                    tombstones=0, malformed=0, events_topic="e", events_found=True, group="g",
                    partitions=partition_stats(ends, {}, before, None if before is None else 1.0),
                    elapsed_s=None if before is None else 1.0)


def test_a_keys_rate_and_share_agree_with_the_topics_rate_now_not_the_rate_measured_at_placement() -> None:
    # Placed when the worker read 275 events/s (22.045 events/s, 8 %); the topic now takes 803 events/s.
    fold = NoticeFold()
    fold.apply(b"a", notice(b"a", 2, rate=22.045, share=0.08), HEADERS)  # placement 7, 6; home 0
    ends = {p: 1000 for p in range(8)}
    snap = _stats_snapshot(fold.current(), {p: e + (403 if p == 7 else 400 if p == 6 else 0) for p, e in ends.items()},
                           ends)
    [stat] = snap.key_stats
    assert snap.total_rate == 803.0
    assert stat.rate is not None and stat.share is not None
    assert abs(stat.rate - 0.08 * 803) < 1e-9 and abs(stat.share - stat.rate / 803) < 1e-12
    record = snap.to_record()["hot_keys"]["keys"][0]
    assert (record["rate"], record["share"], record["estimated_rate"]) == (stat.rate, stat.share, 22.045)


def test_a_key_whose_partitions_received_nothing_is_idle_and_not_listed_with_its_old_rate() -> None:
    fold = NoticeFold()
    fold.apply(b"gone", notice(b"gone", 2, rate=500.0, share=0.5), HEADERS)   # placement 7, 6; home 0
    fold.apply(b"busy", notice(b"busy", 1, rate=10.0, share=0.2, placement=[3], home=2), HEADERS)
    before = {p: 0 for p in range(8)}
    snap = _stats_snapshot(fold.current(), {**before, 3: 50, 1: 50}, before)
    by_key = {k.notice.key: k for k in snap.key_stats}
    assert by_key[b"gone"].idle and by_key[b"gone"].rate == 0.0
    assert not by_key[b"busy"].idle and by_key[b"busy"].rate == 0.2 * 100
    hot = snap.to_record()["hot_keys"]
    assert [k["key"] for k in hot["keys"]] == ["busy"] and [k["key"] for k in hot["idle"]] == ["gone"]


def test_a_share_is_capped_by_what_the_keys_partitions_received() -> None:
    fold = NoticeFold()
    fold.apply(b"a", notice(b"a", 1, share=0.9, placement=[5], home=4), HEADERS)
    before = {p: 0 for p in range(8)}
    [stat] = _stats_snapshot(fold.current(), {**before, 5: 10, 1: 90}, before).key_stats
    assert (stat.rate, stat.share) == (10.0, 0.1)


def test_the_first_snapshot_lists_every_placed_key_without_a_rate() -> None:
    fold = NoticeFold()
    fold.apply(b"a", notice(b"a"), HEADERS)
    snap = _stats_snapshot(fold.current(), {0: 5}, None)
    assert [(k.rate, k.share, k.idle) for k in snap.key_stats] == [(None, None, False)]
    assert [k["key"] for k in snap.to_record()["hot_keys"]["keys"]] == ["a"]
