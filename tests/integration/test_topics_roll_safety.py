"""``streams topics roll`` deletes an expired bucket topic only when it is safe, on the real broker.

Safe: the bucket is closed (end + grace) and past retention, and the worker group has
consumed every partition to its end. Every roll here runs as a user runs it (a
subprocess) and names its group and clock (``--group``, ``--now``), so nothing waits
for the wall clock.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Iterator

import orjson
import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from test_cli_broker import delete_if_there, streams, topics_now

from streams.core.time.buckets import TimeBuckets

MINUTE = TimeBuckets("1m", grace="10s")


@pytest.fixture
def bucket_template(kafka_bootstrap: str) -> Iterator[str]:
    """A unique ``<prefix>.{bucket}`` template; every topic under its prefix is deleted afterwards."""
    prefix = f"roll-safety-{uuid.uuid4().hex[:10]}."
    yield prefix + "{bucket}"
    delete_if_there(kafka_bootstrap, sorted(t for t in topics_now(kafka_bootstrap) if t.startswith(prefix)))


def make_bucket_topic(bootstrap: str, template: str, start_ms: int, partitions: int) -> str:
    name = template.replace("{bucket}", MINUTE.bucket_of(start_ms).label)
    admin = AdminClient({"bootstrap.servers": bootstrap})  # kept alive until the future resolves
    admin.create_topics([NewTopic(name, partitions, 1)])[name].result(30)
    return name


def roll(bootstrap: str, template: str, group: str, *extra: str) -> tuple[int, dict, str]:
    result = streams("topics", "roll", "--bootstrap-server", bootstrap, "--template", template, "--bucket-width",
                     "1m", "--grace", "10s", "--ahead", "0", "--partitions", "1", "--group", group, "--json", *extra)
    assert result.returncode in (0, 1), (result.stdout, result.stderr)
    return result.returncode, orjson.loads(result.stdout), result.stderr


def refusals(record: dict) -> dict[str, list[str]]:
    return {r["topic"]: r["reasons"] for r in record["plan"]["refused"]}


def produce(bootstrap: str, topic: str, per_partition: dict[int, int]) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all"})
    for partition, count in per_partition.items():
        for i in range(count):
            producer.produce(topic, f"v{i}".encode(), partition=partition)
    assert producer.flush(30) == 0


def commit(bootstrap: str, group: str, offsets: list[TopicPartition]) -> None:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False})
    try:
        consumer.commit(offsets=offsets, asynchronous=False)
    finally:
        consumer.close()


def consume_to_end_and_commit(bootstrap: str, group: str, topic: str, partitions: int) -> int:
    """Read every record of ``topic`` as a member of ``group`` would, then commit; return how many were read."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False,
                         "auto.offset.reset": "earliest"})
    try:
        ends = {p: consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=15)[1] for p in range(partitions)}
        todo = {p: end for p, end in ends.items() if end > 0}
        consumer.assign([TopicPartition(topic, p, 0) for p in todo])
        read = 0
        deadline = time.monotonic() + 30
        while todo and time.monotonic() < deadline:
            for msg in consumer.consume(100, 0.5):
                if msg.error() is None:
                    read += 1
                    if msg.offset() + 1 >= todo.get(msg.partition(), 0):
                        todo.pop(msg.partition(), None)
        assert not todo, todo
        consumer.commit(asynchronous=False)
        return read
    finally:
        consumer.close()


def test_a_topic_with_unconsumed_records_is_kept_until_the_group_has_consumed_it_to_the_end(
        kafka_bootstrap: str, bucket_template: str) -> None:
    group = f"roll-group-{uuid.uuid4().hex[:8]}"
    old = make_bucket_topic(kafka_bootstrap, bucket_template, int(time.time() * 1000) - 3 * 3_600_000, 2)
    produce(kafka_bootstrap, old, {0: 3, 1: 5})

    status, record, stderr = roll(kafka_bootstrap, bucket_template, group, "--retention", "1h")
    assert status == 1 and record["deleted"] == [] and record["group"] == group
    assert refusals(record) == {old: [f"group {group} has no committed offset on partition 0",
                                      f"group {group} has no committed offset on partition 1"]}
    assert stderr.startswith("streams: error: refused to delete 1 expired topic(s)") and old in stderr
    assert old in topics_now(kafka_bootstrap)

    commit(kafka_bootstrap, group, [TopicPartition(old, 0, 3), TopicPartition(old, 1, 2)])
    status, record, _ = roll(kafka_bootstrap, bucket_template, group, "--retention", "1h")
    assert status == 1 and refusals(record) == {
        old: [f"group {group} has not consumed partition 1: committed 2 of end 5"]}
    assert old in topics_now(kafka_bootstrap)

    dry_status, dry, _ = roll(kafka_bootstrap, bucket_template, "someone-else", "--retention", "1h", "--dry-run")
    assert dry_status == 0 and dry["dry_run"] is True and old in refusals(dry)  # another group: still refused

    assert consume_to_end_and_commit(kafka_bootstrap, group, old, 2) == 8
    status, record, stderr = roll(kafka_bootstrap, bucket_template, group, "--retention", "1h")
    assert (status, record["deleted"], refusals(record), stderr) == (0, [old], {}, "")
    assert old not in topics_now(kafka_bootstrap)


def test_a_topic_of_a_bucket_still_inside_its_grace_is_kept_even_with_no_retention(
        kafka_bootstrap: str, bucket_template: str) -> None:
    start = MINUTE.bucket_of(int(time.time() * 1000) - 600_000).start_ms  # a bucket ten minutes ago
    end = start + MINUTE.width_ms
    topic = make_bucket_topic(kafka_bootstrap, bucket_template, start, 1)  # empty: nothing to consume
    group = f"roll-group-{uuid.uuid4().hex[:8]}"

    status, record, _ = roll(kafka_bootstrap, bucket_template, group, "--retention", "0s", "--now", str(end + 5_000))
    assert status == 1 and record["deleted"] == []
    assert refusals(record) == {topic: ["not closed (the bucket closes at "
                                        + time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime((end + 10_000) / 1000))
                                        + ")"]}
    assert topic in topics_now(kafka_bootstrap)

    status, record, _ = roll(kafka_bootstrap, bucket_template, group, "--retention", "0s", "--now", str(end + 10_000))
    assert (status, record["deleted"], refusals(record)) == (0, [topic], {})
    assert topic not in topics_now(kafka_bootstrap)


def test_the_text_report_names_each_kept_topic_and_why(
        kafka_bootstrap: str, bucket_template: str, make_topic: Callable[..., str]) -> None:
    old = make_bucket_topic(kafka_bootstrap, bucket_template, int(time.time() * 1000) - 3 * 3_600_000, 1)
    produce(kafka_bootstrap, old, {0: 2})
    result = streams("topics", "roll", "--bootstrap-server", kafka_bootstrap, "--template", bucket_template,
                     "--bucket-width", "1m", "--ahead", "0", "--retention", "1h", "--group", "g-text", "--dry-run")
    assert result.returncode == 0, result.stderr
    line = next(line for line in result.stdout.splitlines() if line.startswith(old))
    assert "kept: group g-text has no committed offset on partition 0" in line
    assert old in topics_now(kafka_bootstrap)
