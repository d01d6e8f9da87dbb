"""A rolling restart of two workers under load, as a Kubernetes rollout does it (issue 28).

Each worker in turn is stopped gracefully (SIGTERM: it persists, commits and leaves
its groups, so the other takes its partitions at once) and started again (it takes
some back). Every (bucket, key) aggregate must equal the oracle, with nothing late,
nothing dead-lettered and no replay.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "integration"))

from test_worker_buckets import SETTINGS, wait_for_topic  # noqa: E402
from test_worker_faults import (  # noqa: E402
    assert_exact,
    assert_nothing_late_or_dead,
    group_members,
    send_sentinels,
    wait_until,
)
from test_worker_outage import Load, until_folded  # noqa: E402
from worker_harness import TopicReader, Worker, worker_env  # noqa: E402

from streams.core.routing.router import Router, RoutingMap
from streams.core.time.buckets import TimeBuckets
from streams.kafka.producer import RoutingProducer


# auto takes KIP-848 on this project's broker; classic is the fallback a cluster without it (or an older
# librdkafka: the minimum versions) gets, with the eager range assignor and parked state.
@pytest.mark.parametrize("protocol", ["auto", "classic"])
def test_two_workers_restarted_one_at_a_time_under_load_leave_every_aggregate_exact(
        kafka_bootstrap: str, tmp_path: Path, protocol: str) -> None:
    partitions = 12
    buckets = TimeBuckets("5s", grace="1s")
    env, names = worker_env(kafka_bootstrap, **dict(SETTINGS, partitions=partitions, balance_enabled="false",
                                                    group_protocol=protocol))
    group = env["STREAMS_APP_ID"]
    workers = [Worker(dict(env, STREAMS_INSTANCE=name), names, tmp_path / f"worker-{name}.log") for name in "ab"]
    for worker in workers:
        worker.start()
    try:
        wait_for_topic(kafka_bootstrap, names.events)
        wait_until(lambda: group_members(kafka_bootstrap, group) == 2, 90, "both workers in the group")
        router = Router(buckets, [RoutingMap(version=1, partitions=partitions, topic=names.events)])
        producer = RoutingProducer(router, {"bootstrap.servers": kafka_bootstrap})
        with Load(producer, buckets, rate=400) as load:
            until_folded(workers[0], 1_000)
            for worker in workers:  # the rollout: one at a time, each back before the next goes
                worker.stop()
                wait_until(lambda: group_members(kafka_bootstrap, group) == 1, 60, "the stopped worker left")
                worker.start()
                wait_until(lambda: group_members(kafka_bootstrap, group) == 2, 90, "the restarted worker joined")
                sent = load.sent
                until_folded(workers[0], sent, 90)
            time.sleep(2)  # a little more load after the rollout
        send_sentinels(producer, router, int(time.time() * 1000) + 8_000)
        assert producer.close(60).failed == 0
        aggregates = TopicReader(kafka_bootstrap, names.aggregates, "aggregate")
        assert_exact(aggregates, load.oracle, 150, *workers, group=group)
        aggregates.close()
        assert_nothing_late_or_dead(kafka_bootstrap, names, "the rollout")
    finally:
        for worker in workers:
            worker.stop()
