"""The producer's hot-key follower refuses hostile notices by reason, and the producer's metrics export them.

Pure logic: the follower's record handler is called directly (no consumer is started).
"""

from __future__ import annotations

from types import SimpleNamespace

from streams.core.routing.directory import notice_headers
from streams.core.routing.router import Router, RoutingMap
from streams.core.serde import AvroCodec
from streams.core.time.buckets import TimeBuckets
from streams.kafka.follower import HotKeyFollower
from streams.kafka.metrics import ProducerMetrics

CODEC = AvroCodec("hot_key_notice")


def notice(key: bytes, placement: list[int], partitions: int = 8) -> bytes:
    return CODEC.encode({"key": key, "key_display": key.decode(errors="replace"), "placement": placement, "home": 0,
                         "estimated_rate": 10.0, "share": 0.5, "partitions": partitions, "detected_at_ms": 2_000,
                         "hot_since_ms": 1_000, "map_version": 1, "detector": "d"})


def test_hostile_notices_are_refused_and_counted_by_reason_and_exported() -> None:
    router = Router(TimeBuckets("1m"), [RoutingMap(version=1, partitions=8, topic="events")])
    follower = HotKeyFollower(router, {"bootstrap.servers": "127.0.0.1:9"}, "hot-keys")
    headers = notice_headers()
    follower._handle(b"a", notice(b"a", [7, 6]), headers)  # a good one
    follower._handle(b"b", b"\x00\xff garbage", headers)
    follower._handle(b"c", notice(b"c", [99]), headers)  # a partition the map does not have
    follower._handle(b"d", notice(b"c", [1]), headers)  # record key and notice key disagree
    follower._handle(None, None, headers)  # a tombstone without a key
    assert (follower.applied, follower.rejected) == (1, 4)
    assert follower.rejections == {"undecodable": 1, "invalid notice": 1, "key mismatch": 1,
                                   "tombstone without key": 1}
    assert len(router.directory) == 1  # only the good notice was applied

    metrics = ProducerMetrics()
    stats = SimpleNamespace(sent=0, delivered=0, failed=0)
    metrics.update(SimpleNamespace(stats=lambda: stats, router=router, follower=follower, map_follower=None))
    exported = {s.labels["reason"]: s.value for m in metrics.registry.collect() if m.name == "streams_producer_rejected_notices"
                for s in m.samples}
    assert exported == {"undecodable": 1.0, "invalid notice": 1.0, "key mismatch": 1.0, "tombstone without key": 1.0}
