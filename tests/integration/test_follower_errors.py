"""The hot-key follower reports the error it is stuck on, and forgets it once the cause is gone."""

from __future__ import annotations

import time
import uuid

from confluent_kafka.admin import AdminClient, NewTopic

from streams.core.routing.router import Router, RoutingMap
from streams.core.time.buckets import TimeBuckets
from streams.kafka.follower import HotKeyFollower


def test_a_missing_topic_is_reported_until_it_exists_then_the_error_is_cleared(kafka_bootstrap: str) -> None:
    topic = f"hotkeys-late-{uuid.uuid4().hex[:8]}"
    router = Router(TimeBuckets("1m"), [RoutingMap(version=1, partitions=4, topic="events")])
    follower = HotKeyFollower(router, {"bootstrap.servers": kafka_bootstrap}, topic)
    follower.start()
    try:
        deadline = time.monotonic() + 30
        while follower.error is None and time.monotonic() < deadline:
            time.sleep(0.1)  # polling the follower's state: it retries every 0.5 s
        assert follower.error is not None and topic in follower.error
        admin = AdminClient({"bootstrap.servers": kafka_bootstrap})
        admin.create_topics([NewTopic(topic, 1, 1, config={"cleanup.policy": "compact"})])[topic].result(30)
        assert follower.wait_until_current(30)
        assert follower.error is None
    finally:
        follower.stop()
