"""The one home of input checks: ints, topic names, and the one duration grammar shared by settings and CLI."""

from __future__ import annotations

import argparse

import pytest
from hypothesis import given
from hypothesis import strategies as st

from streams.cli import duration_ms
from streams.core.config import TopicNames
from streams.core.errors import ConfigError, InvalidBucketError, RoutingMapError
from streams.core.routing.router import RoutingMap
from streams.core.time.buckets import parse_duration
from streams.core.validate import MAX_TOPIC_LENGTH, require_int, require_topic


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


def test_a_bare_number_gets_a_hint_with_units() -> None:
    with pytest.raises(InvalidBucketError, match="add a unit, e.g. '90s' or '90ms'"):
        parse_duration("90", "retention")
