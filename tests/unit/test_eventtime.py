"""Topic-per-bucket planning: create ahead, delete only expired matching topics, touch nothing else."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from streams.core.errors import ConfigError, InvalidBucketError
from streams.core.time.buckets import TimeBuckets
from streams.core.topicplan import TopicPlan, plan_bucket_topics

T0 = 1_796_169_600_000  # 2026-12-02T00:00:00Z
HOUR = 3_600_000
HOURLY = TimeBuckets("1h")


def test_the_current_bucket_and_the_next_ones_are_created_when_missing() -> None:
    plan = plan_bucket_topics("events.{bucket}", HOURLY, T0 + 5, ahead=2, retention_ms=HOUR, existing=[])
    assert plan == TopicPlan(
        create=("events.20261202T0000Z", "events.20261202T0100Z", "events.20261202T0200Z"), delete=()
    )


def test_existing_topics_are_not_created_again() -> None:
    plan = plan_bucket_topics("events.{bucket}", HOURLY, T0, ahead=1, retention_ms=HOUR, existing=["events.20261202T0000Z"])
    assert plan.create == ("events.20261202T0100Z",)


def test_only_matching_topics_whose_bucket_ended_before_the_retention_horizon_are_deleted() -> None:
    existing = [
        "events.20261201T2100Z",  # ended 22:00, two hours before now: expired
        "events.20261201T2200Z",  # ended 23:00, exactly now - retention: expired
        "events.20261201T2300Z",  # ended 00:00: kept
        "events.20261202T0000Z",  # current
    ]
    plan = plan_bucket_topics("events.{bucket}", HOURLY, T0, ahead=0, retention_ms=HOUR, existing=existing)
    assert plan.delete == ("events.20261201T2100Z", "events.20261201T2200Z")
    assert plan.create == ()


@pytest.mark.parametrize(
    "topic",
    [
        "events.foo",
        "other.20261101T0000Z",
        "events.20261101T0000Z.copy",
        "xevents.20261101T0000Z",
        "events.20261101T0030Z",  # not the start of an hourly bucket
        "events.20261101T000000Z",  # a seconds label: another width
        "events.20261301T0000Z",  # month 13
        "events.",
        "events",
    ],
)
def test_topics_that_do_not_match_the_template_exactly_are_left_alone(topic: str) -> None:
    plan = plan_bucket_topics("events.{bucket}", HOURLY, T0, ahead=0, retention_ms=0, existing=[topic])
    assert topic not in plan.delete


def test_a_template_with_a_suffix_parses_the_label_between_prefix_and_suffix() -> None:
    existing = ["m.20261101T0000Z.raw", "m.20261101T0000Z", "m.20261202T0000Z.raw"]
    plan = plan_bucket_topics("m.{bucket}.raw", HOURLY, T0, ahead=0, retention_ms=HOUR, existing=existing)
    assert plan == TopicPlan(create=(), delete=("m.20261101T0000Z.raw",))


def test_planning_has_no_side_effects_and_accepts_any_iterable() -> None:
    existing = ("events.20261101T0000Z", "events.20261202T0000Z")
    first = plan_bucket_topics("events.{bucket}", HOURLY, T0, ahead=1, retention_ms=HOUR, existing=iter(existing))
    again = plan_bucket_topics("events.{bucket}", HOURLY, T0, ahead=1, retention_ms=HOUR, existing=list(existing))
    assert first == again and existing == ("events.20261101T0000Z", "events.20261202T0000Z")


@pytest.mark.parametrize("template", ["events", "{bucket}.{bucket}", "events/{bucket}", 42])
def test_a_bad_template_raises_a_config_error(template: object) -> None:
    with pytest.raises(ConfigError, match="template"):
        plan_bucket_topics(template, HOURLY, T0, ahead=0, retention_ms=0, existing=[])  # type: ignore[arg-type]


@pytest.mark.parametrize(("ahead", "retention", "field"), [(-1, 0, "ahead"), (True, 0, "ahead"), (0, -5, "retention_ms")])
def test_bad_ahead_or_retention_raise_a_config_error_naming_it(ahead: object, retention: object, field: str) -> None:
    with pytest.raises(ConfigError, match=field):
        plan_bucket_topics("e.{bucket}", HOURLY, T0, ahead=ahead, retention_ms=retention, existing=[])  # type: ignore[arg-type]


@pytest.mark.parametrize("now", [None, 1.5, "now", -1])
def test_a_bad_wall_clock_raises_an_invalid_bucket_error(now: object) -> None:
    with pytest.raises(InvalidBucketError):
        plan_bucket_topics("e.{bucket}", HOURLY, now, ahead=0, retention_ms=0, existing=[])  # type: ignore[arg-type]


@settings(max_examples=200, deadline=None)
@given(
    hours=st.lists(st.integers(-200, 50), max_size=30),
    noise=st.lists(st.text(max_size=30), max_size=10),
    ahead=st.integers(0, 5),
    retention_hours=st.integers(0, 100),
)
def test_the_plan_never_deletes_a_live_topic_nor_creates_an_existing_one(
    hours: list[int], noise: list[str], ahead: int, retention_hours: int
) -> None:
    existing = [f"events.{HOURLY.bucket_of(T0 + h * HOUR).label}" for h in hours] + noise
    plan = plan_bucket_topics("events.{bucket}", HOURLY, T0, ahead, retention_hours * HOUR, existing)
    assert not set(plan.create) & set(existing)
    assert not set(plan.create) & set(plan.delete)
    expected_deleted = {f"events.{HOURLY.bucket_of(T0 + h * HOUR).label}" for h in hours if h + 1 + retention_hours <= 0}
    assert set(plan.delete) == expected_deleted | (set(plan.delete) & set(noise))
    for topic in plan.delete:
        assert HOURLY.parse_label(topic.removeprefix("events.")).end_ms + retention_hours * HOUR <= T0
    assert len(plan.create) + len(set(existing) & {f"events.{HOURLY.bucket_of(T0 + h * HOUR).label}" for h in range(ahead + 1)}) == ahead + 1
