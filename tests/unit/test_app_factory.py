"""Apps are built from settings objects: create_app / create_worker, and the environment's app on top."""

from __future__ import annotations

import gc

from streams.core.config import KafkaSettings, TopicNames, WorkerSettings
from streams.worker.app import GC_THRESHOLDS, app_from_environment, create_app, create_worker


def failed(exc: BaseException) -> None:
    raise AssertionError(f"no loop runs in this test: {exc!r}")


def test_create_worker_builds_every_part_from_the_settings_object_without_touching_kafka() -> None:
    settings = WorkerSettings(app_id="factory-a", partitions=24, instance="w1", balance_target=1.2,
                              balance_aim=1.1, balance_enabled=False, dedup_ids=False, hot_window_s=7.0)
    topics = TopicNames(events="f.events", hot_keys="f.hot-keys")
    worker = create_worker(settings, KafkaSettings(bootstrap_servers="127.0.0.1:1"), topics, on_failure=failed)
    assert worker.instance == "w1" and worker.topics.events == "f.events"
    policy = worker.decider.decider.policy
    assert (policy.partitions, policy.balance_target, policy.balance_aim, policy.enabled) == (24, 1.2, 1.1, False)
    assert worker.decider.balance_loop.window_s == 7.0
    assert worker.processor.sketch.window_s == 7.0
    assert (worker.router.current.partitions, worker.router.current.topic) == (24, "f.events")
    assert worker.loops == {} and worker.bucket_topics is None, "nothing runs or connects until prepare/start"


def test_two_apps_built_in_one_process_keep_their_own_settings() -> None:
    kafka = KafkaSettings(bootstrap_servers="127.0.0.1:1,127.0.0.1:2")
    a = create_app(WorkerSettings(app_id="factory-b", partitions=6), kafka, TopicNames())
    b = create_app(WorkerSettings(app_id="factory-c", partitions=48), kafka, TopicNames(events="per.{bucket}"))
    assert (a.conf.id, b.conf.id) == ("factory-b", "factory-c")
    assert [str(u) for u in a.conf.broker] == ["kafka://127.0.0.1:1", "kafka://127.0.0.1:2"]
    assert a.streams_worker.decider.decider.policy.partitions == 6  # type: ignore[attr-defined]
    assert b.streams_worker.decider.decider.policy.partitions == 48  # type: ignore[attr-defined]
    assert a.streams_worker.bucket_topics is None  # type: ignore[attr-defined]
    assert b.streams_worker.bucket_topics is not None, "a {bucket} events topic is read per bucket"  # type: ignore[attr-defined]


def test_the_environments_app_reads_streams_variables() -> None:
    app = app_from_environment({"STREAMS_APP_ID": "factory-env", "STREAMS_PARTITIONS": "16",
                                "STREAMS_BALANCE_ENABLED": "false", "STREAMS_BOOTSTRAP_SERVERS": "127.0.0.1:3"})
    worker = app.streams_worker  # type: ignore[attr-defined]
    assert app.conf.id == "factory-env"
    assert (worker.settings.partitions, worker.decider.decider.policy.enabled) == (16, False)
    assert worker.kafka.bootstrap_servers == "127.0.0.1:3"


def test_starting_the_worker_freezes_start_up_objects_and_makes_collector_passes_rarer() -> None:
    """Worker.start tunes the collector (a full pass every 0.4 s cost a third of stage 1's time at 67,000 events/s)."""
    before = gc.get_threshold()
    worker = create_worker(WorkerSettings(app_id="factory-gc", partitions=4),
                           KafkaSettings(bootstrap_servers="127.0.0.1:1"), TopicNames(), on_failure=failed)
    try:
        worker.start()  # no loop was built (no prepare): only the collector changes
        assert gc.get_threshold() == GC_THRESHOLDS and GC_THRESHOLDS[0] > before[0]
        assert gc.get_freeze_count() > 0
    finally:
        gc.unfreeze()
        gc.set_threshold(*before)
