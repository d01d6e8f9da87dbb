"""The pure plan for topic-per-bucket mode (``events.{bucket}``).

Which bucket topics to create ahead of time, which have aged out, and which of
those are safe to delete. It reads nothing and changes nothing;
:func:`streams.kafka.admin.roll_bucket_topics` reads the cluster and carries it out.

Deleting a bucket topic loses whatever in it was not processed, so a topic that is
due (:func:`plan_bucket_topics`: its bucket ended ``retention`` ago) is deleted only
if :func:`deletion_refusals` finds nothing against it: the bucket is closed (end +
grace <= now: no late event can still be routed into it) and past retention, and
the worker group has consumed every partition to its end (committed offset >= high
watermark; a partition holding no records, low watermark = high watermark, has
nothing to lose). :func:`gate_deletions` applies that to a plan.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import NamedTuple

from streams.core.errors import ConfigError, InvalidArgumentError, InvalidBucketError
from streams.core.routing.maps import in_force_and_next
from streams.core.routing.router import RoutingMap
from streams.core.time.buckets import Bucket, TimeBuckets
from streams.core.time.eventtime import check_ms, utc_text
from streams.core.validate import BUCKET_PLACEHOLDER, require, require_int, require_topic

__all__ = ["PartitionProgress", "Refusal", "TopicPlan", "bucket_of_topic", "deletion_refusals", "gate_deletions",
           "partitions_in_force", "plan_bucket_topics"]


class Refusal(NamedTuple):
    """A due topic that must not be deleted yet, and every reason why."""

    topic: str
    reasons: tuple[str, ...]


class TopicPlan(NamedTuple):
    """Topics to create and to delete, each in bucket (time) order; ``refused``: due topics kept, with reasons."""

    create: tuple[str, ...]
    delete: tuple[str, ...]
    refused: tuple[Refusal, ...] = ()


class PartitionProgress(NamedTuple):
    """One partition of a topic: its low and high watermarks, and the group's committed offset (None: none)."""

    partition: int
    start: int
    end: int
    committed: int | None


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
    the next ``ahead`` (>= 0) that are not in ``existing``; marks as due for
    deletion (:func:`gate_deletions` says whether that is safe) the existing topics
    that match the template exactly (the label parses back to a bucket of this width) and whose bucket ended at or before ``now_ms - retention_ms``. Any
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


def deletion_refusals(
    bucket: Bucket,
    *,
    now_ms: int,
    retention_ms: int,
    group: str,
    partitions: Iterable[PartitionProgress],
) -> tuple[str, ...]:
    """Why the topic of ``bucket`` must not be deleted at ``now_ms``; empty when it may be.

    The reasons, in this order: ``not closed`` (``bucket.close_ms`` > now),
    ``within retention`` (end + ``retention_ms`` > now), then per partition (in
    partition order) ``group G has no committed offset on partition p`` or ``group G
    has not consumed partition p: committed c of end e``. A partition whose low and
    high watermarks are equal holds nothing to lose and is never a reason. Pure.
    """
    reasons = []
    if bucket.close_ms > now_ms:
        reasons.append(f"not closed (the bucket closes at {utc_text(bucket.close_ms)})")
    if bucket.end_ms + retention_ms > now_ms:
        reasons.append(f"within retention (until {utc_text(bucket.end_ms + retention_ms)})")
    for p in sorted(partitions):
        if p.end <= p.start or (p.committed is not None and p.committed >= p.end):
            continue
        if p.committed is None:
            reasons.append(f"group {group} has no committed offset on partition {p.partition}")
        else:
            reasons.append(f"group {group} has not consumed partition {p.partition}: "
                           f"committed {p.committed} of end {p.end}")
    return tuple(reasons)


def gate_deletions(
    plan: TopicPlan,
    template: str,
    buckets: TimeBuckets,
    *,
    now_ms: int,
    retention_ms: int,
    group: str,
    progress: Mapping[str, Sequence[PartitionProgress]],
) -> TopicPlan:
    """``plan`` with each topic of ``plan.delete`` kept (moved to ``refused``) if :func:`deletion_refusals` objects.

    ``buckets`` carries the grace that decides closure; ``progress`` maps a topic to
    its partitions (a topic missing from it has none left: nothing to lose). Raises
    ConfigError for a bad template, InvalidArgumentError if a topic of ``plan.delete`` does not
    match it. Pure.
    """
    bucket_of = _matcher(template, buckets)
    delete, refused = [], list(plan.refused)
    for topic in plan.delete:
        bucket = bucket_of(topic)
        reasons = deletion_refusals(bucket, now_ms=now_ms, retention_ms=retention_ms, group=group,
                                    partitions=progress.get(topic, ()))
        if reasons:
            refused.append(Refusal(topic, reasons))
        else:
            delete.append(topic)
    return TopicPlan(plan.create, tuple(delete), tuple(refused))


def partitions_in_force(topics: Iterable[str], template: str, buckets: TimeBuckets, maps: Iterable[RoutingMap],
                        default: int) -> dict[str, int]:
    """The partition count each bucket topic of ``topics`` gets: that of the routing map in force for its bucket.

    The map in force is the highest version among ``maps`` routing to ``template``
    whose ``first_bucket_ms`` is at or before the bucket's start; ``default`` when
    there is none. Raises ConfigError for a bad template, InvalidArgumentError for a topic that
    does not match it. Pure.
    """
    bucket_of = _matcher(template, buckets)
    ours = [m for m in maps if m.topic == template]
    counts = {}
    for topic in topics:
        in_force, _ = in_force_and_next(ours, bucket_of(topic).start_ms)
        counts[topic] = in_force.partitions if in_force is not None else default
    return counts


def _matcher(template: str, buckets: TimeBuckets) -> Callable[[str], Bucket]:
    """``topic -> its bucket`` under ``template``; the function raises InvalidArgumentError for a topic that does not match."""
    template = require_topic("template", template)

    def bucket_of(topic: str) -> Bucket:
        bucket = bucket_of_topic(topic, template, buckets)
        if bucket is None:
            raise InvalidArgumentError(f"topic {topic!r} does not match the template {template!r}")
        return bucket

    return bucket_of

