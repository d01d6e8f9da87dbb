"""librdkafka's repeated connection failures collapse to one line per kind per window (RepeatFilter)."""

from __future__ import annotations

import logging

from streams.kafka.clients import RepeatFilter, RoutineRetryFilter


def line(fac: str, client: str, text: str) -> logging.LogRecord:
    return logging.LogRecord("streams.kafka.librdkafka", logging.ERROR, __file__, 1, "%s [%s] %s",
                             (fac, client, text), None)


def test_one_line_per_facility_and_broker_per_window_then_a_count_of_those_held_back() -> None:
    now = [0.0]
    repeats = RepeatFilter(60, clock=lambda: now[0])
    refused = "127.0.0.1:9092/1: Connect to ipv4#127.0.0.1:9092 failed: Connection refused"
    passed = []
    for i in range(2_400):  # every client retrying every 100 ms for two minutes
        now[0] = i * 0.05
        record = line("FAIL", f"rdkafka#consumer-{i % 5}", refused)
        if repeats.filter(record):
            passed.append(record.getMessage())
    assert len(passed) == 2
    assert passed[1].endswith("(1199 more like it in the last 60 s held back)")
    other_broker = line("FAIL", "rdkafka#producer-1", "127.0.0.1:9093/2: Connect to ipv4#127.0.0.1:9093 failed")
    assert repeats.filter(other_broker), "another broker is another kind"


def test_lines_that_are_not_librdkafkas_pass_untouched() -> None:
    repeats = RepeatFilter(60, clock=lambda: 0.0)
    record = logging.LogRecord("x", logging.INFO, __file__, 1, "plain %d", (1,), None)
    assert repeats.filter(record) and repeats.filter(record)


def test_a_routine_retry_is_info_and_a_real_failure_stays_a_warning() -> None:
    routine = RoutineRetryFilter()
    loading = line("GETPID", "rdkafka#producer-8", "Failed to acquire idempotence PID from broker 127.0.0.1:37003/1: "
                   "Broker: Coordinator load in progress: retrying")
    loading.levelno, loading.levelname = logging.WARNING, "WARNING"
    assert routine.filter(loading) and (loading.levelno, loading.levelname) == (logging.INFO, "INFO")
    refused = line("FAIL", "rdkafka#consumer-1", "127.0.0.1:9092/1: Connect failed: Connection refused")
    refused.levelno, refused.levelname = logging.WARNING, "WARNING"
    assert routine.filter(refused) and refused.levelno == logging.WARNING
    given_up = line("GETPID", "rdkafka#producer-8", "Coordinator load in progress: giving up")
    given_up.levelno = logging.WARNING
    assert routine.filter(given_up) and given_up.levelno == logging.WARNING, "only a retry is routine"
