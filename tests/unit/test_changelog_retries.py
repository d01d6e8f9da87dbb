"""A restore waits out a cluster that is settling (a leader not known yet) and gives up on a refusal."""

from __future__ import annotations

import time

import pytest
from confluent_kafka import KafkaError, KafkaException

from streams.core.errors import DeliveryError
from streams.kafka.changelog import _watermarks


class Settling:
    """A consumer stand-in whose watermark query fails ``failures`` times with ``code``, then answers."""

    def __init__(self, failures: int, code: int) -> None:
        self.failures, self.code, self.calls = failures, code, 0

    def get_watermark_offsets(self, tp: object, timeout: float) -> tuple[int, int]:
        self.calls += 1
        if self.calls <= self.failures:
            raise KafkaException(KafkaError(self.code))
        return 0, 7


def test_a_leader_not_known_yet_on_a_new_changelog_is_waited_for() -> None:
    consumer = Settling(3, KafkaError.NOT_LEADER_FOR_PARTITION)
    assert _watermarks(consumer, "changelog", 0, time.monotonic() + 10) == (0, 7)
    assert consumer.calls == 4


def test_a_refusal_is_not_retried_and_a_settling_cluster_only_until_the_deadline() -> None:
    with pytest.raises(DeliveryError, match="TOPIC_AUTHORIZATION_FAILED|authoriz"):
        _watermarks(Settling(1, KafkaError.TOPIC_AUTHORIZATION_FAILED), "changelog", 0, time.monotonic() + 10)
    with pytest.raises(DeliveryError, match="changelog\\[0\\]"):
        _watermarks(Settling(10**6, KafkaError.LEADER_NOT_AVAILABLE), "changelog", 0, time.monotonic() + 0.5)
