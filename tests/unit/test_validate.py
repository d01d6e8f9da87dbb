"""The one home of input checks: ints, topic names, and the one duration grammar shared by settings and CLI."""

from __future__ import annotations

import argparse
from datetime import timedelta

import pytest
from hypothesis import given
from hypothesis import strategies as st

from streams.cli import duration_ms, positive_int
from streams.core.config import TopicNames, WorkerSettings, load
from streams.core.errors import ConfigError, InvalidBucketError, RoutingMapError
from streams.core.routing.router import RoutingMap
from streams.core.time.buckets import TimeBuckets, parse_duration
from streams.core.topicplan import plan_bucket_topics
from streams.core.validate import BUCKET_PLACEHOLDER, MAX_TOPIC_LENGTH, require_duration, require_int, require_topic
from streams.kafka.admin import TopicSpec


@given(st.integers(-10, 10))
def test_require_int_accepts_exactly_the_ints_in_range(value: int) -> None:
    if 0 <= value <= 5:
        assert require_int("n", value, 0, 5) == value
    else:
        with pytest.raises(ConfigError, match=r"n must be an int in \[0, 5\], got "):
            require_int("n", value, 0, 5)


@pytest.mark.parametrize("bad", [True, 1.0, "1", None])
def test_require_int_refuses_non_ints_naming_the_type_and_raising_the_callers_error(bad: object) -> None:
    with pytest.raises(RoutingMapError, match=type(bad).__name__):
        require_int("partitions", bad, 1, error=RoutingMapError)


def test_one_topic_name_rule_everywhere_kafkas_own() -> None:
    longest = "t" * MAX_TOPIC_LENGTH
    assert require_topic("t", longest) == longest
    for bad in ("", ".", "..", "t" * (MAX_TOPIC_LENGTH + 1), "bad topic!", "a{bucket}{bucket}"):
        with pytest.raises(ConfigError, match="must be a Kafka topic name"):
            require_topic("t", bad)
        with pytest.raises(RoutingMapError, match="must be a Kafka topic name"):
            RoutingMap(version=1, partitions=1, topic=bad)
    # The settings and the routing map agree, including at Kafka's length limit (once 200 in the settings).
    assert TopicNames(hot_keys="h" * 249).hot_keys == "h" * 249
    with pytest.raises(ConfigError, match="hot_keys must be a Kafka topic name"):
        TopicNames(hot_keys="h.{bucket}")  # only the events topic may be a per-bucket template


@pytest.mark.parametrize(("text", "ms"), [("500ms", 500), ("90s", 90_000), ("5m", 300_000), ("1h", 3_600_000),
                                          ("7d", 604_800_000), ("0s", 0)])
def test_settings_and_the_command_line_read_durations_alike(text: str, ms: int) -> None:
    assert parse_duration(text) == ms == duration_ms(text)


@pytest.mark.parametrize("text", ["90", "1.5s", "5 m", "-1s", "1w", ""])
def test_a_bare_number_or_other_shape_is_refused_by_settings_and_command_line_alike(text: str) -> None:
    with pytest.raises(InvalidBucketError):
        parse_duration(text)
    with pytest.raises(argparse.ArgumentTypeError):
        duration_ms(text)
    with pytest.raises(InvalidBucketError, match="retention"):
        parse_duration(text, "retention")


# --- durations: one grammar, one function --------------------------------------------

UNITS_MS = {"ms": 1, "s": 1_000, "m": 60_000, "h": 3_600_000, "d": 86_400_000}


@given(st.integers(0, 10**12 - 1), st.sampled_from(sorted(UNITS_MS)))
def test_every_whole_number_with_a_unit_reads_as_that_many_units(n: int, unit: str) -> None:
    assert require_duration("d", f"{n}{unit}") == n * UNITS_MS[unit]


@given(st.timedeltas(min_value=timedelta(0), max_value=timedelta(days=10_000)).map(
    lambda d: timedelta(milliseconds=d // timedelta(milliseconds=1))))
def test_a_timedelta_reads_as_its_milliseconds(delta: timedelta) -> None:
    assert require_duration("d", delta) == delta // timedelta(milliseconds=1)


@given(st.integers(0, 10**9))
def test_a_bare_number_is_refused_with_both_readings_suggested(n: int) -> None:
    with pytest.raises(ConfigError, match=f"retention '{n}' is not a duration.*'{n}s' or '{n * 1000}ms'"):
        require_duration("retention", str(n))


@pytest.mark.parametrize("bad", [timedelta(seconds=-1), timedelta(microseconds=1500), 90, 1.5, None, b"5m"])
def test_other_values_are_refused_with_the_callers_error_class(bad: object) -> None:
    with pytest.raises(InvalidBucketError, match="grace"):
        require_duration("grace", bad, InvalidBucketError)


def test_the_cli_and_the_settings_refuse_a_bare_number_with_the_same_hint() -> None:
    with pytest.raises(argparse.ArgumentTypeError, match="'90s' or '90000ms'"):
        duration_ms("90")
    with pytest.raises(InvalidBucketError, match="'90s' or '90000ms'"):
        parse_duration("90")


def test_positive_int_is_an_int_range_check_with_the_shared_wording() -> None:
    assert positive_int("3") == 3
    with pytest.raises(argparse.ArgumentTypeError, match=r"must be an int >= 1, got 0"):
        positive_int("0")
    with pytest.raises(argparse.ArgumentTypeError, match="is not an integer"):
        positive_int("x")


# --- topic names: Kafka's rule, everywhere ----------------------------------------------

TOPIC_CHARS = st.sampled_from("abcxyzABCXYZ0189._-")


@given(st.text(TOPIC_CHARS, min_size=1, max_size=MAX_TOPIC_LENGTH).filter(lambda t: t not in (".", "..")))
def test_every_name_kafka_accepts_is_accepted(name: str) -> None:
    assert require_topic("t", name, template=False) == name
    assert TopicSpec(name, 1).name == name


@given(st.text(TOPIC_CHARS, min_size=1, max_size=30), st.sampled_from(" /:{}ü*"))
def test_a_character_outside_kafkas_alphabet_is_refused(name: str, bad: str) -> None:
    with pytest.raises(ConfigError, match=r"\[A-Za-z0-9._-\]"):
        require_topic("t", name + bad, template=False)


def test_a_template_must_leave_room_for_the_longest_bucket_label() -> None:
    label = len("00000000T000000Z")
    fits = "e" * (MAX_TOPIC_LENGTH - label) + BUCKET_PLACEHOLDER
    assert require_topic("events", fits) == fits
    with pytest.raises(ConfigError, match="16-character label"):
        require_topic("events", "e" + fits)
    with pytest.raises(ConfigError, match=f"without {BUCKET_PLACEHOLDER}"):
        require_topic("topic name", "e." + BUCKET_PLACEHOLDER, template=False)


def test_the_topic_planner_and_topic_specs_use_the_same_rule() -> None:
    buckets = TimeBuckets("1h")
    for bad in ("events.{bucket} x", "e" * MAX_TOPIC_LENGTH + "{bucket}", "events"):
        with pytest.raises(ConfigError, match="template"):
            plan_bucket_topics(bad, buckets, 0, 1, 0, [])
    with pytest.raises(ConfigError, match="topic name must be a Kafka topic name"):
        TopicSpec("bad topic", 1)
    with pytest.raises(ConfigError, match="a topic template, not a topic"):
        TopicSpec("events.{bucket}", 1)


def test_worker_durations_are_refused_when_the_settings_load_not_when_the_worker_starts() -> None:
    with pytest.raises(ConfigError, match="retention '90' is not a duration.*'90s' or '90000ms'"):
        load(WorkerSettings, env={"STREAMS_RETENTION": "90"})
    assert load(WorkerSettings, env={"STREAMS_RETENTION": "90s"}).retention == "90s"
