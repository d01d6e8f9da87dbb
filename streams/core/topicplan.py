"""The pure plan for topic-per-bucket mode (``events.{bucket}``).

Which bucket topics to create ahead of time and which have aged out. It reads
nothing and changes nothing; :func:`streams.kafka.admin.roll_bucket_topics` carries
it out against the cluster.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import NamedTuple

from streams.core.errors import ConfigError, InvalidBucketError
from streams.core.time.buckets import Bucket, TimeBuckets
from streams.core.time.eventtime import check_ms
from streams.core.validate import BUCKET_PLACEHOLDER, require, require_int, require_topic

__all__ = ["TopicPlan", "bucket_of_topic", "plan_bucket_topics"]


class TopicPlan(NamedTuple):
    """Topics to create and to delete, each in bucket (time) order."""

    create: tuple[str, ...]
    delete: tuple[str, ...]


def plan_bucket_topics(
    template: str,
    buckets: TimeBuckets,
    now_ms: int,
    ahead: int,
    retention_ms: int,
    existing: Iterable[str],
) -> TopicPlan:
    """Plan topic-per-bucket housekeeping at wall clock ``now_ms``; pure, no side effects.

    ``template`` is a Kafka topic name holding ``{bucket}`` exactly once (e.g.
    ``"events.{bucket}"``, see :func:`~streams.core.validate.require_topic`) and is
    filled with :attr:`Bucket.label`. Creates the topics of the current bucket and
    the next ``ahead`` (>= 0) that are not in ``existing``; deletes the existing
    topics that match the template exactly (the label parses back to a bucket of
    this width) and whose bucket ended at or before ``now_ms - retention_ms``. Any
    other topic (``events.foo``, ``other.20261202T1100Z``) is never touched. Raises
    ConfigError for a bad template, ``ahead`` or ``retention_ms``, and
    InvalidBucketError for a bad ``now_ms``.
    """
    template = require_topic("template", template)
    require(BUCKET_PLACEHOLDER in template, "template", f"a topic template holding {BUCKET_PLACEHOLDER}", template)
    if not isinstance(buckets, TimeBuckets):
        raise ConfigError(f"buckets must be a TimeBuckets, got {type(buckets).__name__}")
    ahead = require_int("ahead", ahead, 0, 10_000)
    retention_ms = require_int("retention_ms", retention_ms, 0)
    now = check_ms(now_ms, "now_ms")
    prefix, suffix = template.split(BUCKET_PLACEHOLDER)
    have = set(existing)
    first = buckets.bucket_index(now)
    wanted = [prefix + buckets.bucket_at_index(i).label + suffix for i in range(first, first + ahead + 1)]
    expired: list[tuple[int, str]] = []
    for topic in have:
        bucket = _bucket_of_topic(topic, prefix, suffix, buckets)
        if bucket is not None and bucket.end_ms + retention_ms <= now:
            expired.append((bucket.index, topic))
    return TopicPlan(
        tuple(name for name in wanted if name not in have),
        tuple(topic for _, topic in sorted(expired)),
    )


def _bucket_of_topic(topic: object, prefix: str, suffix: str, buckets: TimeBuckets) -> Bucket | None:
    """The bucket ``topic`` names under the template, or None if it does not match exactly."""
    if not isinstance(topic, str) or len(topic) <= len(prefix) + len(suffix):
        return None
    if not (topic.startswith(prefix) and topic.endswith(suffix)):
        return None
    label = topic[len(prefix) : len(topic) - len(suffix)]
    try:
        bucket = buckets.parse_label(label)
    except InvalidBucketError:
        return None
    return bucket if bucket.label == label else None


def bucket_of_topic(topic: object, template: str, buckets: TimeBuckets) -> Bucket | None:
    """The bucket whose topic under ``template`` is ``topic``, or None if ``topic`` is not one.

    Exact: the part in place of ``{bucket}`` must be the label of a bucket of this
    width, as :func:`plan_bucket_topics` names them (``events.foo`` is not one).
    Raises ConfigError if ``template`` does not hold ``{bucket}`` once.
    """
    require(template.count(BUCKET_PLACEHOLDER) == 1, "template", f"a topic template holding {BUCKET_PLACEHOLDER} once",
            template)
    prefix, suffix = template.split(BUCKET_PLACEHOLDER)
    return _bucket_of_topic(topic, prefix, suffix, buckets)
