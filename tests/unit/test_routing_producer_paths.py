"""RoutingProducer.send's fast path puts every record where the router says, with the headers a reader needs.

No broker: the producer's enqueue is replaced by a recorder, so these tests see exactly
the (topic, partition, key, timestamp, headers) each record would be produced with.
"""

from __future__ import annotations

import random
import threading
import uuid
from typing import Any

import orjson
import pytest

from streams.core.errors import ConfigError
from streams.core.routing import hashing
from streams.core.routing.hashing import _uuid_str_bytes, canonical_key, kafka_partition
from streams.core.routing.router import UNSPLIT, Router, RoutingMap
from streams.core.time.buckets import TimeBuckets
from streams.kafka.producer import RoutingProducer, _Stamper

pytestmark = pytest.mark.unit

T0 = 1_764_000_000_000
WIDTH = 60_000
OFFLINE = {"bootstrap.servers": "127.0.0.1:1", "log_level": 0}


class Recorded:
    def __init__(self) -> None:
        self.records: list[tuple[Any, ...]] = []

    def __call__(self, topic: str, payload: bytes, key: bytes, partition: int, on_delivery: Any, callback: Any,
                 timestamp: int, headers: Any) -> None:
        self.records.append((topic, partition, key, timestamp, headers, orjson.loads(payload)))


def a_producer(placement: str = "mod", hash_name: str = "murmur2", partitions: int = 12,
               **kwargs: Any) -> tuple[RoutingProducer, Recorded]:
    router = Router(TimeBuckets("1m"), [RoutingMap(version=1, partitions=partitions, topic="events",
                                                   placement=placement, hash=hash_name)])
    producer = RoutingProducer(router, OFFLINE, check_partitions=False, **kwargs)
    recorded = Recorded()
    producer._enqueue = recorded  # type: ignore[method-assign]
    return producer, recorded


def some_keys(rng: random.Random, n: int) -> list[object]:
    keys: list[object] = []
    for i in range(n):
        keys.append(rng.choice([f"user-{rng.randrange(300)}", str(uuid.UUID(int=rng.getrandbits(128))),
                                uuid.UUID(int=rng.getrandbits(128)), rng.randrange(10**6), b"raw-%d" % i,
                                "hot", "moved", str(uuid.UUID(int=rng.getrandbits(128))).upper()]))
    return keys


@pytest.mark.parametrize(("placement", "hash_name"), [("mod", "murmur2"), ("jump", "xxh3"), ("mod", "sha256")])
def test_every_record_goes_where_the_router_routes_it_whether_placed_split_or_home(
        placement: str, hash_name: str) -> None:
    producer, recorded = a_producer(placement, hash_name)
    router = producer.router
    router.directory.set(b"hot", (1, 5, 9), 12)  # split three ways
    router.directory.set(b"moved", (7,), 12)  # moved whole
    rng = random.Random(29)
    keys = some_keys(rng, 3_000)
    times = [T0 + rng.randrange(5) * WIDTH + rng.randrange(WIDTH) for _ in keys]
    for key, ts in zip(keys, times):
        decision = producer.send(key, 1.0, ts_ms=ts)
        topic, partition, record_key, timestamp, headers, event = recorded.records[-1]
        again = router.route(key, ts, uuid.UUID(event["id"]))
        assert decision == again and (topic, partition, record_key, timestamp) == (again.topic, again.partition,
                                                                                    again.key, ts)
        if again.salt == UNSPLIT:
            assert headers == [("content-type", b"application/json")]
            if (placement, hash_name) == ("mod", "murmur2"):  # Kafka's own rule, as librdkafka's murmur2_random
                assert partition == kafka_partition(canonical_key(key), 12)
        else:
            assert headers == [("content-type", b"application/json"), ("streams-salt", b"%d" % again.salt)]
    assert {r[1] for r in recorded.records if r[2] == b"moved"} == {7}
    assert {r[1] for r in recorded.records if r[2].startswith(b"hot#")} == {1, 5, 9}
    assert producer.stats().sent == len(keys)
    assert sum(producer.stats().per_partition.values()) == len(keys)
    producer._producer.purge()


def test_a_caller_that_does_not_want_the_decision_gets_none_and_the_same_record() -> None:
    producer, recorded = a_producer()
    rng = random.Random(3)
    keys = some_keys(rng, 500)
    for key in keys:
        assert producer.send(key, 2.0, ts_ms=T0, want_decision=False) is None
        assert recorded.records[-1][:3] == (lambda d: (d.topic, d.partition, d.key))(producer.router.route(key, T0))
    assert producer.send_many([(k, 1.0) for k in keys]) == len(keys)
    batch = recorded.records[-len(keys):]
    assert [r[1] for r in batch] == [producer.router.route(k, r[3]).partition for k, r in zip(keys, batch)]
    producer._producer.purge()


def test_a_map_installed_later_takes_over_at_its_first_bucket_though_the_fast_path_cached_the_old_one() -> None:
    producer, recorded = a_producer(partitions=6)
    keys = [f"device-{i}" for i in range(400)]
    for key in keys:
        producer.send(key, ts_ms=T0)
    v2 = RoutingMap(version=2, partitions=12, topic="events", first_bucket_ms=(T0 // WIDTH + 1) * WIDTH)
    producer.router.install(v2)
    for key in keys:
        producer.send(key, ts_ms=T0)  # still v1's bucket
        assert recorded.records[-1][1] == kafka_partition(key.encode(), 6)
        producer.send(key, ts_ms=v2.first_bucket_ms)
        assert recorded.records[-1][1] == kafka_partition(key.encode(), 12)
    producer._producer.purge()


def test_header_modes_all_none_and_the_old_boolean_spellings() -> None:
    for mode, expected in (("all", 5), (True, 5), ("none", None), (False, None), ("needed", 1)):
        producer, recorded = a_producer(headers=mode)
        producer.send("k", ts_ms=T0)
        producer.send("k", ts_ms=T0)  # fast path
        for record in recorded.records:
            headers = record[4]
            assert (None if headers is None else len(headers)) == expected
            if expected == 5:
                assert dict(headers) == {"streams-id-kind": b"uuid7", "streams-bucket": b"%b" % (
                    producer.router.buckets.label_of(T0 // WIDTH * WIDTH).encode()),
                    "streams-map-version": b"1", "streams-salt": b"-1", "content-type": b"application/json"}
        producer._producer.purge()
    with pytest.raises(ConfigError, match="headers must be one of"):
        a_producer(headers="some")


@pytest.mark.parametrize("compiled", [True, False])
def test_stamped_uuid7_ids_strictly_increase_in_one_thread_and_across_threads(compiled: bool) -> None:
    stamp = _Stamper("uuid7", None, compiled=compiled).stamp
    ids = [uuid.UUID(str(stamp()[0])).int for _ in range(50_000)]
    assert all(a < b for a, b in zip(ids, ids[1:]))
    per_thread: list[list[int]] = [[] for _ in range(4)]

    def run(out: list[int]) -> None:
        for _ in range(10_000):
            out.append(uuid.UUID(str(stamp()[0])).int)

    threads = [threading.Thread(target=run, args=(out,)) for out in per_thread]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for out in per_thread:
        assert all(a < b for a, b in zip(out, out[1:]))
    assert len({i for out in per_thread for i in out}) == 40_000


def test_uuid_text_canonicalises_the_same_without_the_compiled_parser(monkeypatch: pytest.MonkeyPatch) -> None:
    rng = random.Random(8)
    texts = []
    for _ in range(500):
        u = uuid.UUID(int=rng.getrandbits(128))
        texts += [str(u), str(u).upper(), u.hex, u.hex.upper(), "{%s}" % u, "urn:uuid:%s" % u]
    texts += ["0" * 36, "g" * 32, "12345678 9abc def0 1234 56789abcdef0", "12345678-9abc-def0-1234-56789abcde\u00e9f",
              "+2345678-9abc-def0-1234-56789abcdef0", "12 4" + "a" * 28, "1234567-89ab-cdef-0123-456789abcdef0"]
    compiled = [canonical_key(t) for t in texts]
    monkeypatch.setattr(hashing, "_COMPILED_LENGTHS", frozenset())
    assert [canonical_key(t) for t in texts] == compiled
    assert compiled == [(_uuid_str_bytes(t) or t.encode()) for t in texts]


def test_a_bad_event_time_is_refused_as_the_router_refuses_it_after_the_fast_path_warmed_up() -> None:
    producer, _ = a_producer()
    producer.send("warm", ts_ms=T0)
    producer.send("warm", ts_ms=T0)
    for bad in ("soon", -1, 2**63, True):
        with pytest.raises(Exception) as caught:
            producer.router.route("k", bad)  # type: ignore[arg-type]
        with pytest.raises(type(caught.value)):
            producer.send("k", ts_ms=bad)  # type: ignore[arg-type]
    producer._producer.purge()


def test_the_worker_folds_records_with_the_needed_headers_as_it_folds_records_with_all_five() -> None:
    from streams.core.config import WorkerSettings
    from streams.worker.processor import EventProcessor, InMessage, Stage1Store

    settings = WorkerSettings(bucket_width="1m", grace="5s", allowed_delay="1s", idle_timeout="10s",
                              retention="10m", hot_window_s=1.0, watermark_agreement=1)
    rng = random.Random(4)
    keys = [rng.choice(["hot", "cold", f"user-{rng.randrange(30)}"]) for _ in range(600)]
    times = [T0 + rng.randrange(WIDTH) for _ in keys]
    ids = [uuid.UUID(int=(ts << 80) | (7 << 76) | (2 << 62) | i) for i, ts in enumerate(times)]
    folded = []
    for mode in ("needed", "all"):
        producer, recorded = a_producer(headers=mode)
        producer.router.directory.set(b"hot", (2, 4), 12)
        for key, ts, event_id in zip(keys, times, ids):
            producer.send(key, 1.5, event_id=event_id, ts_ms=ts)
        producer._producer.purge()
        data: dict[str, Any] = {}
        processor = EventProcessor(settings, Stage1Store(data, lambda p, k, v: None), instance="t",
                                   clock_ms=lambda: T0 + WIDTH // 2)
        processor.assign([("events", p) for p in range(12)])
        outputs = []
        for offset, (topic, partition, key, _, headers, event) in enumerate(recorded.records):
            message = InMessage(topic, partition, offset, key, orjson.dumps(event), dict(headers))
            outputs += processor.handle(message)
        assert not [o for o in outputs if o.role in ("dead_letters", "late_events")]
        folded.append(data)
    assert folded[0] == folded[1] and folded[0]
