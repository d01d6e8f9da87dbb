"""The faust worker on a real broker under the faults of issue 14: a lost worker of two, a producer
with a bad clock, an event sent twice, and a partition leader killed while the worker processes.

Each test compares every (bucket, key) aggregate with an exact oracle and checks that nothing went
to the late-events or dead-letter topics that should not have.
"""

from __future__ import annotations

import random
import sys
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "integration"))

from test_worker_buckets import (  # noqa: E402
    SETTINGS,
    WIDTH_MS,
    aggregates_by_slot,
    keys_covering_partitions,
    wait_for_topic,
)
from worker_harness import TopicReader, Worker, running_worker, worker_env  # noqa: E402

from confluent_kafka import Consumer, TopicPartition
from confluent_kafka.admin import AdminClient

from streams.core.aggregate import Stats
from streams.core.ids import UUIDv7Generator
from streams.core.routing.router import Router, RoutingMap
from streams.core.time.buckets import TimeBuckets
from streams.kafka.admin import describe_topics
from streams.kafka.producer import RoutingProducer

Oracle = dict[tuple[str, str], Stats]

# The failover tests pause the stream (a kill, a leader election) for longer than the 3 s idle timeout
# of SETTINGS. A partition caught up and quiet that long is idle by design and follows the others'
# progress, so a burst of old data after the pause may turn late: the idle rule working, not a lost
# event. These tests are about failover, so they close every bucket by each partition's own events
# (the sentinels) and never by idleness; tests/integration/test_worker_buckets.py tests the idle rule.
FAILOVER_SETTINGS = dict(SETTINGS, idle_timeout="10m")


def group_members(bootstrap: str, group: str) -> int:
    """How many members the consumer group has right now (-1 if it cannot be described)."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    try:
        description = admin.describe_consumer_groups([group])[group].result(10)
    except Exception:  # noqa: BLE001 - the group may not exist yet
        return -1
    return len(description.members)


def wait_until(predicate: Any, timeout_s: float, what: str, interval_s: float = 0.25) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(interval_s)  # polling the broker for a state another process reaches
    raise AssertionError(f"not within {timeout_s} s: {what}")


def past_stream(seed: int, n: int, keys: int) -> tuple[int, list[tuple[str, float, int]]]:
    """``n`` events over ``keys`` keys in three 5 s buckets fifteen minutes ago: (bucket-aligned start, events)."""
    rng = random.Random(seed)
    t0 = (int(time.time() * 1000) - 900_000) // WIDTH_MS * WIDTH_MS
    times = sorted(t0 + rng.randrange(3 * WIDTH_MS) for _ in range(n))
    return t0, [(f"k{rng.randrange(keys)}", float(rng.randrange(-500, 500)), ts) for ts in times]


def send_stream(producer: RoutingProducer, events: list[tuple[str, float, int]], buckets: TimeBuckets,
                oracle: Oracle) -> None:
    for key, value, ts in events:
        producer.send(key, value, ts_ms=ts)
        oracle[(buckets.bucket_of(ts).label, key)].add(value)


def send_sentinels(producer: RoutingProducer, router: Router, ts: int, agreement: int = 2) -> None:
    """Records on every partition past the last bucket's close, so many that their watermarks agree
    (their own bucket stays open: they are not in the oracle)."""
    for i in range(agreement):
        for key in keys_covering_partitions(router, ts):
            producer.send(key, 0.0, ts_ms=ts + i)


def _progress(aggregates: TopicReader, group: str) -> str:
    """Stage 1's group on the events topic and faust's (stage 2) on the partials topic (diagnosis only)."""
    topic = aggregates.topic.replace
    return (f"{_group_progress(aggregates.bootstrap, f'{group}-events', [topic('aggregates', 'events')])}; "
            f"{_group_progress(aggregates.bootstrap, group, [topic('aggregates', 'partials')])}")


def _group_progress(bootstrap: str, group: str, topics: list[str]) -> str:
    """Per partition of ``topics``: the group's committed offset / the end offset, and who holds it (diagnosis only)."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False})
    admin = AdminClient({"bootstrap.servers": bootstrap})
    try:
        members = admin.describe_consumer_groups([group])[group].result(10).members
        holder = {(tp.topic, tp.partition): m.member_id[-6:] for m in members
                  for tp in m.assignment.topic_partitions}
        out = []
        for topic in topics:
            parts = [TopicPartition(topic, p) for p in consumer.list_topics(topic, timeout=10).topics[topic].partitions]
            committed = consumer.committed(parts, timeout=10)
            out.append(topic + ": " + " ".join(
                f"{tp.partition}:{c.offset}/{consumer.get_watermark_offsets(tp, timeout=5)[1]}@"
                f"{holder.get((topic, tp.partition), '-')}" for tp, c in zip(parts, committed)))
        return "; ".join(out)
    except Exception as exc:  # noqa: BLE001 - a diagnosis must not hide the failure it explains
        return f"group progress unreadable: {exc}"
    finally:
        consumer.close()


def _partials_of(aggregates: TopicReader, wrong: dict) -> str:
    """Where the wrong slots' events went: the partials stage 1 wrote for them (a failure's diagnosis only)."""
    partials = TopicReader(aggregates.bootstrap, aggregates.topic.replace("aggregates", "partials"), "aggregate")
    partials.poll(2.0)
    partials.close()
    counts: dict = defaultdict(int)
    slots: dict = defaultdict(set)
    for _, v in partials.records:
        slot = (v["bucket"], v["key"])
        if slot in wrong:
            counts[slot] += v["count"]
            slots[slot].add(v["slot"])
    return (f"partials found for {len(counts)} of the {len(wrong)} wrong slots, e.g. "
            f"{[(s, counts[s], sorted(slots[s])) for s in list(counts)[:5]]}")


def assert_nothing_late_or_dead(bootstrap: str, names: Any, cause: str) -> None:
    """The late-events and dead-letter topics of ``names`` are empty: ``cause`` turned no event late or bad."""
    late = TopicReader(bootstrap, names.late_events, "late_event")
    dead = TopicReader(bootstrap, names.dead_letters, "dead_letter")
    late.poll(1.0), dead.poll(0.5)
    late.close(), dead.close()
    assert late.records == [], f"{len(late.records)} on-time events turned late by {cause}"
    assert dead.records == [], f"{len(dead.records)} events dead-lettered by {cause}"


def assert_exact(aggregates: TopicReader, oracle: Oracle, timeout_s: float, *workers: Worker,
                 group: str | None = None) -> None:
    """Wait until every (bucket, key) of the oracle is aggregated with its exact count; then compare all fields."""
    def exact(records: list) -> bool:
        got = aggregates_by_slot(records)
        return all(got.get(slot, {}).get("count") == s.count for slot, s in oracle.items())

    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline and not exact(aggregates.records):
        aggregates.poll()
        for w in workers:
            assert w.alive(), "a worker died:\n" + w.tail()
    got = aggregates_by_slot(aggregates.records)
    wrong = {slot: (got.get(slot, {}).get("count"), s.count) for slot, s in oracle.items()
             if got.get(slot, {}).get("count") != s.count}
    if wrong:
        late = TopicReader(aggregates.bootstrap, aggregates.topic.replace("aggregates", "late-events"), "late_event")
        late.poll(2.0)
        late.close()
        raise AssertionError(f"{len(wrong)} of {len(oracle)} (bucket, key) slots wrong, (count, expected): "
                             f"{dict(list(wrong.items())[:10])}; {len(late.records)} late events "
                             f"{[v['reason'] for _, v in late.records[:5]]}; {_partials_of(aggregates, wrong)}; "
                             f"{_progress(aggregates, group) if group else ''}\n"
                             + "\n".join(w.tail() for w in workers))
    aggregates.poll(2.0)  # anything more would show as a change below
    got = aggregates_by_slot(aggregates.records)
    for slot, stats in oracle.items():
        assert (got[slot]["count"], got[slot]["sum"], got[slot]["min"], got[slot]["max"]) == \
            (stats.count, stats.sum, stats.min, stats.max), slot


def test_one_of_two_workers_killed_mid_stream_and_restarted_leaves_every_aggregate_exact_without_replay(
        kafka_bootstrap: str, tmp_path: Path) -> None:
    """Issue 14, item 4: the survivor must judge the partitions it takes over by their own progress."""
    partitions = 12
    buckets = TimeBuckets("5s", grace="1s")
    t0, events = past_stream(11, 12_000, 120)
    oracle: Oracle = defaultdict(Stats.empty)

    env, names = worker_env(kafka_bootstrap, **dict(FAILOVER_SETTINGS, partitions=partitions))
    group = env["STREAMS_APP_ID"]
    a = Worker(dict(env, STREAMS_INSTANCE="a"), names, tmp_path / "worker-a.log")
    b = Worker(dict(env, STREAMS_INSTANCE="b"), names, tmp_path / "worker-b.log")
    a.start()
    b.start()
    try:
        wait_for_topic(kafka_bootstrap, names.events)
        wait_until(lambda: group_members(kafka_bootstrap, group) == 2, 90, "both workers in the group")
        router = Router(buckets, [RoutingMap(version=1, partitions=partitions, topic=names.events)])
        producer = RoutingProducer(router, {"bootstrap.servers": kafka_bootstrap})
        half = len(events) // 2
        send_stream(producer, events[:half], buckets, oracle)
        assert producer.flush(30) == 0
        changelog = TopicReader(kafka_bootstrap, f"{group}-stage1-changelog", None)
        assert changelog.until(lambda rs: len(rs) >= 100, 60, a), a.tail()
        changelog.close()
        a.kill()  # mid-stream: b takes a's partitions over from a's committed offsets and changelog

        send_stream(producer, events[half:], buckets, oracle)
        send_sentinels(producer, router, t0 + 3 * WIDTH_MS + 2_000)
        assert producer.close().failed == 0
        wait_until(lambda: group_members(kafka_bootstrap, group) == 1, 60, "the group dropped the killed worker")
        aggregates = TopicReader(kafka_bootstrap, names.aggregates, "aggregate")
        first = next(iter(oracle))
        assert aggregates.until(lambda rs: first in aggregates_by_slot(rs), 90, b), b.tail()
        a.start()  # and back: the partitions move once more
        assert_exact(aggregates, oracle, 150, a, b, group=group)
        aggregates.close()
        assert_nothing_late_or_dead(kafka_bootstrap, names, "a handover")
    finally:
        a.stop()
        b.stop()


def test_a_producer_with_a_clock_50_minutes_ahead_then_a_lull_sends_nothing_late(
        kafka_bootstrap: str, tmp_path: Path) -> None:
    """Issue 14, item 3: one record stamped 50 minutes ahead, then a lull longer than idle_timeout."""
    settings = dict(SETTINGS, grace="5s")  # real-time stamps: leave room for this machine's lag
    buckets = TimeBuckets("5s", grace="5s")
    oracle: Oracle = defaultdict(Stats.empty)
    with running_worker(kafka_bootstrap, tmp_path, **settings) as worker:
        names = worker.names
        wait_for_topic(kafka_bootstrap, names.events)
        router = Router(buckets, [RoutingMap(version=1, partitions=settings["partitions"], topic=names.events)])
        producer = RoutingProducer(router, {"bootstrap.servers": kafka_bootstrap})
        group = worker.env["STREAMS_APP_ID"]
        wait_until(lambda: group_members(kafka_bootstrap, group) == 1, 90, "the worker joined its group")
        now = int(time.time() * 1000)
        send_stream(producer, [(f"k{i % 9}", 1.0, now - 3_000 + i * 10) for i in range(300)], buckets, oracle)
        outlier_ts = now + 50 * 60_000
        producer.send("bad-clock", 1.0, ts_ms=outlier_ts)  # inside the accepted 1 h future limit
        assert producer.flush(30) == 0
        changelog = TopicReader(kafka_bootstrap, f"{group}-stage1-changelog", None)
        assert changelog.until(lambda rs: len(rs) >= 9, 60, worker), worker.tail()  # it has read them
        changelog.close()
        aggregates = TopicReader(kafka_bootstrap, names.aggregates, "aggregate")
        time.sleep(4.0)  # the lull itself (idle_timeout is 3 s): the fault, not a synchronisation
        start = int(time.time() * 1000)
        i = 0
        while int(time.time() * 1000) < start + 12_000:  # twelve seconds of real-time events
            ts = int(time.time() * 1000)
            send_stream(producer, [(f"r{i % 13}", float(i % 7), ts)], buckets, oracle)
            i += 1
            producer.poll(0)
            time.sleep(0.01)  # pacing the producer at ~100 events/s of wall-clock time
        assert producer.close().failed == 0
        # The buckets the stream itself closes on every partition (the last ones wait for more events).
        oracle = defaultdict(Stats.empty, {slot: s for slot, s in oracle.items()
                                           if buckets.parse_label(slot[0]).close_ms <= start + 11_000})
        assert len(oracle) > 13, "the stream must close real-time buckets after the lull"
        assert_exact(aggregates, oracle, 60, worker)
        late = TopicReader(kafka_bootstrap, names.late_events, "late_event")
        late.poll(1.0)
        assert late.records == [], f"{len(late.records)} events sent late by one bad clock"
        late.close()
        aggregates.close()


def test_an_event_sent_twice_with_one_event_id_is_counted_once(kafka_bootstrap: str, tmp_path: Path) -> None:
    """Issue 14, item 5: a retry or re-send of the same event ID changes no aggregate."""
    rng = random.Random(3)
    buckets = TimeBuckets("5s", grace="1s")
    t0 = (int(time.time() * 1000) - 600_000) // WIDTH_MS * WIDTH_MS
    ids = UUIDv7Generator()
    oracle: Oracle = defaultdict(Stats.empty)
    with running_worker(kafka_bootstrap, tmp_path, **SETTINGS) as worker:
        names = worker.names
        wait_for_topic(kafka_bootstrap, names.events)
        router = Router(buckets, [RoutingMap(version=1, partitions=SETTINGS["partitions"], topic=names.events)])
        producer = RoutingProducer(router, {"bootstrap.servers": kafka_bootstrap})
        sent = []
        for ts in sorted(t0 + rng.randrange(2 * WIDTH_MS) for _ in range(1_000)):
            event = (f"k{rng.randrange(30)}", float(rng.randrange(100)), ts, ids.next())
            producer.send(event[0], event[1], event_id=event[3], ts_ms=ts)
            oracle[(buckets.bucket_of(ts).label, event[0])].add(event[1])
            sent.append(event)
        for key, value, ts, event_id in sent[::5]:  # re-sent, with their IDs, while their buckets are open
            producer.send(key, value, event_id=event_id, ts_ms=ts)
        send_sentinels(producer, router, t0 + 2 * WIDTH_MS + 2_000)
        assert producer.close().failed == 0
        aggregates = TopicReader(kafka_bootstrap, names.aggregates, "aggregate")
        assert_exact(aggregates, oracle, 90, worker)
        aggregates.close()


def test_a_partition_leader_killed_while_the_worker_processes_loses_and_doubles_nothing(
        kafka_cluster: Any, tmp_path: Path) -> None:
    """On three brokers: SIGKILL the leader of an events partition mid-stream, then bring it back."""
    bootstrap = kafka_cluster.bootstrap
    buckets = TimeBuckets("5s", grace="1s")
    t0, events = past_stream(5, 8_000, 60)
    oracle: Oracle = defaultdict(Stats.empty)
    with running_worker(bootstrap, tmp_path, **FAILOVER_SETTINGS) as worker:
        names = worker.names
        wait_for_topic(bootstrap, names.events)
        router = Router(buckets, [RoutingMap(version=1, partitions=SETTINGS["partitions"], topic=names.events)])
        producer = RoutingProducer(router, {"bootstrap.servers": bootstrap, "acks": "all"})
        half = len(events) // 2
        send_stream(producer, events[:half], buckets, oracle)
        assert producer.flush(30) == 0
        changelog = TopicReader(bootstrap, f"{worker.env['STREAMS_APP_ID']}-stage1-changelog", None)
        assert changelog.until(lambda rs: len(rs) >= 40, 60, worker), worker.tail()
        changelog.close()
        stage1 = f"{worker.env['STREAMS_APP_ID']}-stage1-changelog"
        (info,) = describe_topics({"bootstrap.servers": bootstrap}, [stage1])
        assert (info.replication_factor, info.overrides.get("min.insync.replicas")) == (3, "2"), \
            "the worker's state changelog is replicated like the project's topics"
        victim = kafka_cluster.leader_of(names.events, 0)
        kafka_cluster.kill(victim)
        try:
            send_stream(producer, events[half:], buckets, oracle)
            send_sentinels(producer, router, t0 + 3 * WIDTH_MS + 2_000)
            assert producer.flush(60) == 0
            aggregates = TopicReader(bootstrap, names.aggregates, "aggregate")
            first = next(iter(oracle))
            assert aggregates.until(lambda rs: first in aggregates_by_slot(rs), 90, worker), worker.tail()
        finally:
            kafka_cluster.restart(victim)
        assert producer.close().failed == 0
        assert_exact(aggregates, oracle, 150, worker)
        late = TopicReader(bootstrap, names.late_events, "late_event")
        late.poll(1.0)
        assert late.records == []
        late.close()
        aggregates.close()
