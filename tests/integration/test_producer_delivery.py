"""RoutingProducer's delivery accounting and failure reporting, on real librdkafka clients.

Without a Python callback per delivered record (librdkafka reports failures only),
``delivered`` is sent - failed - still held: checked against the real broker. The
failure paths use a producer whose bootstrap address is a loopback port nobody
listens on: librdkafka then only queues, and times records out - a real client, no
mock.
"""

from __future__ import annotations

import secrets
import socket
import time
from collections import Counter
from collections.abc import Callable, Iterator

import pytest

from streams.core.errors import DeliveryError, QueueFullError, UndeliveredError
from streams.core.routing.router import Router, RoutingMap
from streams.core.time.buckets import TimeBuckets
from streams.kafka.producer import RoutingProducer


@pytest.fixture
def dead_bootstrap() -> Iterator[str]:
    """``127.0.0.1:<port>`` of a port that was free a moment ago: no broker answers there."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    yield f"127.0.0.1:{port}"


def broker_less(bootstrap: str, **producer_config: object) -> RoutingProducer:
    router = Router(TimeBuckets("1m"), [RoutingMap(version=1, partitions=4, topic="nowhere")])
    return RoutingProducer(router, {"bootstrap.servers": bootstrap, "log_level": 0}, check_partitions=False,
                           producer_config=producer_config)


def test_every_record_is_counted_delivered_on_its_partition_without_a_callback_per_record(
        kafka_bootstrap: str, make_topic: Callable[..., str]) -> None:
    topic = make_topic("counted", partitions=6)
    router = Router(TimeBuckets("1m"), [RoutingMap(version=1, partitions=6, topic=topic)])
    producer = RoutingProducer(router, {"bootstrap.servers": kafka_bootstrap})
    decided = Counter((topic, producer.send(f"user-{i % 211}", float(i)).partition) for i in range(5_000))
    stats = producer.close(30)
    assert (stats.sent, stats.delivered, stats.failed, stats.in_flight) == (5_000, 5_000, 0, 0)
    assert stats.per_partition == dict(decided)
    assert stats.last_error is None


def test_send_raises_queue_full_error_after_its_timeout_instead_of_blocking(dead_bootstrap: str) -> None:
    producer = broker_less(dead_bootstrap, **{"queue.buffering.max.messages": 5})
    for i in range(5):
        producer.send(f"k{i}")
    began = time.monotonic()
    with pytest.raises(QueueFullError, match=r"stayed full for 0.3 s") as caught:
        producer.send("one-too-many", timeout=0.3)
    waited = time.monotonic() - began
    assert 0.3 <= waited < 5, waited
    assert isinstance(caught.value, DeliveryError) and caught.value.timeout_s == 0.3
    stats = producer.stats()
    assert (stats.sent, stats.in_flight, stats.failed) == (5, 5, 0), "the refused record is not counted as sent"
    producer._producer.purge()  # leave nothing behind for librdkafka to time out


def test_close_raises_undelivered_error_with_the_counts_when_every_record_times_out(dead_bootstrap: str) -> None:
    producer = broker_less(dead_bootstrap, **{"message.timeout.ms": 300})
    for i in range(20):
        producer.send(f"device-{i}", 1.0)
    assert producer.flush(10) == 0, "flush waits for the failures and does not raise"
    with pytest.raises(UndeliveredError) as caught:
        producer.close(10)
    error = caught.value
    assert (error.sent, error.delivered, error.failed, error.in_flight) == (20, 0, 20, 0)
    assert "timed out" in (error.last_error or "").lower()
    assert "20 of 20 records not delivered" in str(error)
    stats = producer.stats()
    assert (stats.sent, stats.delivered, stats.failed) == (20, 0, 20)
    assert stats.per_partition == {}, "no partition got a record"


def test_close_raises_undelivered_error_for_records_still_in_flight_when_its_wait_ends(dead_bootstrap: str) -> None:
    producer = broker_less(dead_bootstrap, **{"message.timeout.ms": 60_000})
    for i in range(3):
        producer.send(f"k{i}")
    with pytest.raises(UndeliveredError, match="3 still in flight after 0.2 s") as caught:
        producer.close(0.2)
    assert (caught.value.failed, caught.value.in_flight, caught.value.delivered) == (0, 3, 0)
    producer._producer.purge()


def test_a_with_block_that_closed_the_producer_itself_does_not_close_it_again(dead_bootstrap: str) -> None:
    with broker_less(dead_bootstrap, **{"message.timeout.ms": 200}) as producer:
        producer.send("k")
        with pytest.raises(UndeliveredError):
            producer.close(10)
    # leaving the block raised nothing more: the caller already saw the failure


def test_a_with_block_raises_undelivered_error_when_records_failed(dead_bootstrap: str) -> None:
    with pytest.raises(UndeliveredError, match="1 failed"):
        with broker_less(dead_bootstrap, **{"message.timeout.ms": 200}) as producer:
            producer.send("k")


def test_timed_out_records_count_as_possibly_written_and_refused_ones_as_not_written(
        kafka_bootstrap: str, make_topic: Callable[..., str], dead_bootstrap: str) -> None:
    """A timeout may hide a write (resend with the same ID); a broker's refusal certainly does not."""
    timed_out = broker_less(dead_bootstrap, **{"message.timeout.ms": 200})
    for i in range(4):
        timed_out.send(f"k{i}")
    with pytest.raises(UndeliveredError) as caught:
        timed_out.close(10)
    assert (caught.value.possibly_persisted, caught.value.not_persisted) == (4, 0)
    assert "4 possibly written" in str(caught.value)

    topic = make_topic("small", partitions=1, config={"max.message.bytes": "2000"})
    router = Router(TimeBuckets("1m"), [RoutingMap(version=1, partitions=1, topic=topic)])
    producer = RoutingProducer(router, {"bootstrap.servers": kafka_bootstrap})
    producer.send("small", 1.0)
    assert producer.flush(30) == 0  # alone in its batch: the broker refuses a whole batch
    producer.send("big", 1.0, attributes={"blob": secrets.token_hex(4_000)})  # random: lz4 cannot shrink it
    with pytest.raises(UndeliveredError) as refused:
        producer.close(30)
    error = refused.value
    assert (error.delivered, error.failed, error.not_persisted, error.possibly_persisted) == (1, 1, 1, 0)
    assert producer.stats().not_persisted == 1
