"""Topic-per-bucket consumption: which bucket topics of the events template exist now.

With an events template such as ``events.{bucket}`` the producers write each bucket
to its own topic and ``streams topics roll`` creates them ahead of time. Kafka's
answer to "consume topics that appear later" is a regular-expression subscription,
but a pattern would also match topics that only look like bucket topics. The worker
therefore does the matching itself: :class:`BucketTopics` lists the cluster's topics
and keeps those that match the template exactly (the label parses back to a bucket of
the configured width, as ``roll`` names them); the worker's timer hands the list to
stage 1 (:meth:`streams.worker.stage1.Stage1Loop.subscribe`) every few seconds, whose
consumer resubscribes when it changed, which rebalances the group. A new bucket topic
is consumed within about the refresh interval plus one rebalance of being created;
``roll`` creates topics ``ahead`` buckets early, so that delay is spent before the
bucket begins.

Every bucket topic has the same partition count as the stage-1 changelog (roll
creates them so), so the ``range`` assignor puts partition p of every bucket topic
on one worker, the owner of changelog partition p.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

from streams.core.time.buckets import TimeBuckets
from streams.core.topicplan import bucket_of_topic

__all__ = ["BucketTopics"]


class BucketTopics:
    """The bucket topics of ``template`` that exist; ``list_topics()`` returns the cluster's topic names (blocking)."""

    def __init__(self, template: str, buckets: TimeBuckets, list_topics: Callable[[], Iterable[str]]) -> None:
        self.template = template
        self.buckets = buckets
        self._list_topics = list_topics

    def matches(self, topic: str) -> bool:
        """True if ``topic`` is a bucket topic of the template."""
        return bucket_of_topic(topic, self.template, self.buckets) is not None

    def wanted(self) -> list[str]:
        """The existing bucket topics, in bucket order (blocking: lists the cluster's topics)."""
        found = [(bucket_of_topic(t, self.template, self.buckets), t) for t in self._list_topics()]
        return [t for bucket, t in sorted((b.index, t) for b, t in found if b is not None)]
